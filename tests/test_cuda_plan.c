/* test_cuda_plan: the attention planner of the CUDA backend (ck_attn_plan in
 * engine/cuda/cuda_attention.cu, host code that never touches the device) on random
 * batches: every token lands exactly once, in the decode list or in one prefill tile; tiles
 * stay inside one sequence and hold 1..CK_PF_TILE_Q tokens; the decode splits are whole
 * blocks, cover every decode context (rounded up to 256-position buckets) without an empty
 * split, and follow the rule (two blocks per SM, at least two loop iterations a split); the
 * int count stays within ck_attn_plan_cap. Built without CUDA, a single test says so and passes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/testutil.h"

#ifdef TWIN_HAVE_CUDA

#include "engine/cuda/cuda_kernels.h"

#define MAX_SEQS 96
#define MAX_TOK 20000
#define CANARY 0x5a5a5a5a
/* Check's ck_assert records every passing assertion (a write to a pipe): the per-token
 * loops only call it when they fail */
#define REQ(c) \
    do { \
        if (!(c)) ck_abort_msg("%s:%d: %s", __FILE__, __LINE__, #c); \
    } while (0)

typedef struct {
    int32_t seq_start[MAX_SEQS + 1], seq_len[MAX_SEQS], bt_start[MAX_SEQS + 1];
    int32_t pos[MAX_TOK];
    bk_batch_t bt;
} batch_t;

static uint64_t rng_state = 88172645463325252ull;
static int32_t rnd(int32_t lo, int32_t hi) { /* [lo, hi] */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (int32_t)(rng_state % (uint64_t)(hi - lo + 1));
}

/* q new tokens per sequence after `cached` ones; q[i] < 0 asks for a random shape */
static void make_batch(batch_t *b, int32_t n_seqs, const int32_t *qs, const int32_t *cached) {
    static const int32_t edges[] = {0, 1, 2, 7, 8, 9, 10, 63, 64, 65, 127, 128, 129, 300};
    int32_t n = 0;
    for (int32_t s = 0; s < n_seqs; s++) {
        int32_t q = qs ? qs[s] : -1, c = cached ? cached[s] : -1;
        if (q < 0) {
            int32_t kind = rnd(0, 9);
            q = kind < 4 ? 1 : kind < 6 ? rnd(1, 8) : kind < 8 ? edges[rnd(0, 13)] : rnd(9, 400);
        }
        if (c < 0) c = rnd(0, 3) == 0 ? 0 : rnd(0, 1) ? rnd(0, 200) : rnd(0, 131071 - q);
        if (n + q > MAX_TOK) q = MAX_TOK - n;
        b->seq_start[s] = n;
        for (int32_t i = 0; i < q; i++) b->pos[n++] = c + i;
        b->seq_len[s] = c + q;
        b->bt_start[s] = 0; /* the planner reads no block table */
    }
    b->seq_start[n_seqs] = n;
    b->bt_start[n_seqs] = 0;
    memset(&b->bt, 0, sizeof b->bt);
    b->bt.n_tokens = n;
    b->bt.n_seqs = n_seqs;
    b->bt.pos = b->pos;
    b->bt.seq_start = b->seq_start;
    b->bt.seq_len = b->seq_len;
    b->bt.bt_start = b->bt_start;
}

/* Plans b for a pool of this block size and kv heads (of 128 bf16) on n_sm
 * multiprocessors and checks every property; returns the plan's ck_batch_t. */
static ck_batch_t check_plan_on(const batch_t *b, int32_t bs, int32_t n_kv, int32_t n_sm) {
    const bk_batch_t *bt = &b->bt;
    size_t cap = ck_attn_plan_cap(bt);
    int32_t *ints = malloc((cap + 16) * sizeof *ints);
    ck_assert_ptr_nonnull(ints);
    for (size_t i = 0; i < cap + 16; i++) ints[i] = CANARY;
    ck_batch_t pb;
    memset(&pb, 0, sizeof pb);
    pb.n_tokens = bt->n_tokens;
    pb.n_seqs = bt->n_seqs;
    size_t dec_off = 99, pf_off = 99;
    ck_kv_t kv;
    memset(&kv, 0, sizeof kv);
    kv.block_size = bs;
    kv.n_kv_heads = n_kv;
    kv.head_dim = 128;
    kv.dtype = CK_BF16;
    pb.n_sm = n_sm;
    size_t k = ck_attn_plan(bt, &kv, ints, &pb, &dec_off, &pf_off);

    ck_assert_uint_le(k, cap);
    for (size_t i = k; i < cap + 16; i++) REQ(ints[i] == CANARY);
    ck_assert_int_ge(pb.n_dec, 0);
    ck_assert_int_ge(pb.n_pf, 0);
    ck_assert_uint_eq(k, (size_t)pb.n_dec + 3 * (size_t)pb.n_pf);
    ck_assert_uint_le(dec_off + (size_t)pb.n_dec, k);
    ck_assert_uint_le(pf_off + 3 * (size_t)pb.n_pf, k);
    ck_assert(dec_off + (size_t)pb.n_dec <= pf_off || pf_off + 3 * (size_t)pb.n_pf <= dec_off);

    /* every token exactly once, on the side its sequence's length says */
    static int32_t seen[MAX_TOK];
    memset(seen, 0, sizeof seen);
    int32_t seq_of[MAX_TOK];
    for (int32_t s = 0; s < bt->n_seqs; s++)
        for (int32_t i = bt->seq_start[s]; i < bt->seq_start[s + 1]; i++) seq_of[i] = s;
    int64_t dec_ctx = 0;
    for (int32_t d = 0; d < pb.n_dec; d++) {
        int32_t t = ints[dec_off + d];
        REQ(t >= 0 && t < bt->n_tokens);
        int32_t s = seq_of[t];
        REQ(bt->seq_start[s + 1] - bt->seq_start[s] <= CK_DEC_MAX_Q);
        seen[t]++;
        if (bt->pos[t] + 1 > dec_ctx) dec_ctx = bt->pos[t] + 1;
    }
    for (int32_t p = 0; p < pb.n_pf; p++) {
        const int32_t *tl = ints + pf_off + 3 * (size_t)p;
        int32_t s = tl[0], first = tl[1], cnt = tl[2];
        REQ(s >= 0 && s < bt->n_seqs);
        REQ(bt->seq_start[s + 1] - bt->seq_start[s] > CK_DEC_MAX_Q);
        REQ(cnt >= 1 && cnt <= CK_PF_TILE_Q);
        REQ(first >= bt->seq_start[s]);
        REQ(first + cnt <= bt->seq_start[s + 1]);
        for (int32_t i = first; i < first + cnt; i++) seen[i]++;
    }
    for (int32_t i = 0; i < bt->n_tokens; i++)
        if (seen[i] != 1) ck_abort_msg("token %d seen %d times", i, seen[i]);

    /* splits: whole blocks, covering the longest decode context, none empty */
    ck_assert_int_ge(pb.dec_splits, 1);
    ck_assert_int_ge(pb.dec_split_len, 1);
    ck_assert_int_eq(pb.dec_split_len % bs, 0);
    if (pb.n_dec > 0) {
        /* the context rounded up to whole buckets of 256 positions (whole blocks), so
         * that decode steps keep one plan while their contexts grow */
        int64_t bucket = (256 + bs - 1) / bs * bs, ctx_b = (dec_ctx + bucket - 1) / bucket * bucket;
        ck_assert_int_ge((int64_t)pb.dec_splits * pb.dec_split_len, ctx_b);
        ck_assert_int_lt((int64_t)(pb.dec_splits - 1) * pb.dec_split_len, ctx_b);
        /* two blocks per multiprocessor: once the batch alone makes them, no split; never
         * more splits than it takes */
        int64_t per = (int64_t)pb.n_dec * n_kv, sm = n_sm > 0 ? n_sm : 132;
        if (per >= 2 * sm) ck_assert_int_eq(pb.dec_splits, 1);
        ck_assert_int_le(pb.dec_splits, (2 * sm + per - 1) / per);
        /* a split is at least two iterations of the kernel's loop (16 positions each for
         * 128-wide bf16 heads), in whole blocks */
        if (pb.dec_splits > 1) ck_assert_int_ge(pb.dec_split_len, 32);
    } else {
        ck_assert_int_eq(pb.dec_splits, 1);
    }
    size_t sf = ck_attn_scratch_floats(&pb, 32, 128);
    ck_assert_uint_eq(sf, pb.dec_splits > 1 ? (size_t)pb.n_dec * 32 * pb.dec_splits * 130 : 0);
    free(ints);
    return pb;
}

static ck_batch_t check_plan(const batch_t *b, int32_t bs) { return check_plan_on(b, bs, 8, 0); }

static const int32_t block_sizes[] = {1, 2, 7, 16, 16, 32, 256};

START_TEST(random_batches) {
    static batch_t b;
    for (int it = 0; it < 3000; it++) {
        make_batch(&b, rnd(1, MAX_SEQS), NULL, NULL);
        static const int32_t kvs[] = {1, 2, 8, 32}, sms[] = {0, 1, 16, 132, 144};
        check_plan_on(&b, block_sizes[rnd(0, 6)], kvs[rnd(0, 3)], sms[rnd(0, 4)]);
    }
}
END_TEST

START_TEST(cap_holds_for_the_worst_shapes) {
    static batch_t b;
    int32_t qs[MAX_SEQS];
    static const int32_t worst[] = {9, 65, 129, 1, 8, 0};
    for (int w = 0; w < 6; w++) {
        for (int32_t s = 0; s < MAX_SEQS; s++) qs[s] = worst[w];
        make_batch(&b, MAX_SEQS, qs, NULL);
        ck_batch_t pb = check_plan(&b, 16);
        if (worst[w] == 9) ck_assert_int_eq(pb.n_pf, MAX_SEQS);
        if (worst[w] == 65) ck_assert_int_eq(pb.n_pf, 2 * MAX_SEQS);
        if (worst[w] == 8) ck_assert_int_eq(pb.n_dec, 8 * MAX_SEQS);
    }
}
END_TEST

START_TEST(empty_batch) {
    static batch_t b;
    make_batch(&b, 0, NULL, NULL);
    ck_assert_uint_eq(ck_attn_plan_cap(&b.bt), 0);
    ck_batch_t pb = check_plan(&b, 16);
    ck_assert_int_eq(pb.n_dec, 0);
    ck_assert_int_eq(pb.n_pf, 0);
    ck_assert_uint_eq(ck_attn_scratch_floats(&pb, 8, 64), 0);
}
END_TEST

START_TEST(splits_follow_the_rule) {
    static batch_t b;
    /* the case: Llama-3-8B (8 kv heads of 128, bf16) at batch 1 and 1k context
     * on an H200's 132 SMs: 32 splits of 32 positions, 256 blocks of two iterations */
    int32_t q1[1] = {1}, c1[1] = {1023};
    make_batch(&b, 1, q1, c1);
    ck_batch_t pb = check_plan_on(&b, 16, 8, 132);
    ck_assert_int_eq(pb.dec_splits, 32);
    ck_assert_int_eq(pb.dec_split_len, 32);
    /* the plan follows the device: half the SMs, half the splits */
    pb = check_plan_on(&b, 16, 8, 66);
    ck_assert_int_eq(pb.dec_splits, 16);
    /* the same plan for every context of a 256-position bucket */
    c1[0] = 769;
    make_batch(&b, 1, q1, c1);
    ck_batch_t pb2 = check_plan_on(&b, 16, 8, 132);
    ck_assert_int_eq(pb2.dec_splits, 32);
    ck_assert_int_eq(pb2.dec_split_len, 32);
    /* batch 8 at 1k: 64 blocks a split index, 5 splits */
    int32_t q8[8], c8[8];
    for (int i = 0; i < 8; i++) q8[i] = 1, c8[i] = 1000 - 3 * i;
    make_batch(&b, 8, q8, c8);
    pb = check_plan_on(&b, 16, 8, 132);
    ck_assert_int_eq(pb.dec_splits, 5);
    /* one decode at a long context, one kv head: the SMs' worth of splits */
    c1[0] = 100000;
    make_batch(&b, 1, q1, c1);
    pb = check_plan_on(&b, 16, 1, 132);
    ck_assert_int_ge(pb.dec_splits, 250);
    ck_assert_int_le(pb.dec_splits, 264);
    /* a short context is not split below two iterations a split */
    c1[0] = 20;
    make_batch(&b, 1, q1, c1);
    pb = check_plan(&b, 16);
    ck_assert_int_eq(pb.dec_split_len, 32);
    /* a long prefill beside short decodes does not change the decodes' split */
    int32_t q3[3] = {1, 1, 200}, c3[3] = {50, 60, 100000};
    make_batch(&b, 2, q3, c3);
    pb2 = check_plan(&b, 16);
    make_batch(&b, 3, q3, c3);
    pb = check_plan(&b, 16);
    ck_assert_int_eq(pb.dec_splits, pb2.dec_splits);
    ck_assert_int_eq(pb.dec_split_len, pb2.dec_split_len);
    /* a full batch is not split */
    int32_t qs[MAX_SEQS], cs[MAX_SEQS];
    for (int32_t s = 0; s < MAX_SEQS; s++) qs[s] = 6, cs[s] = 50000;
    make_batch(&b, MAX_SEQS, qs, cs);
    pb = check_plan(&b, 16);
    ck_assert_int_eq(pb.n_dec, 6 * MAX_SEQS);
    ck_assert_int_eq(pb.dec_splits, 1);
}
END_TEST

#else

START_TEST(skipped) { printf("test_cuda_plan: built without CUDA, skipped\n"); }
END_TEST

#endif

int main(void) {
    Suite *s = suite_create("cuda_plan");
    TCase *tc = tcase_create("core");
#ifdef TWIN_HAVE_CUDA
    tcase_add_test(tc, random_batches);
    tcase_add_test(tc, cap_holds_for_the_worst_shapes);
    tcase_add_test(tc, empty_batch);
    tcase_add_test(tc, splits_follow_the_rule);
    tcase_set_timeout(tc, 60);
#else
    tcase_add_test(tc, skipped);
#endif
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_cpu_pool: the CPU backend's thread pool (engine/cpu/cpu_pool.h). Its pieces cover
 * every item once; every item is run exactly once per job whatever the thread count,
 * grain and job sequence; a worker that stalls inside its first piece holds up only that
 * piece (the caller takes every other, the rest of the stalled worker's run included);
 * and the backend's ops give bit-identical results with 1 to 4 threads, since a piece's
 * result cannot depend on the thread that runs it. No timings are asserted. */
#include <check.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu_pool.h"
#include "tests/testutil.h"

START_TEST(pieces_cover_the_items_once) {
    int64_t ns[] = {1, 2, 3, 7, 8, 9, 100, 1000003};
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
        for (int parts = 1; parts <= 8; parts++) {
            int64_t n = ns[a];
            int pieces = cpool_pieces(n, parts);
            ck_assert_int_ge(pieces, 1);
            ck_assert_int_le(pieces, n);
            int64_t next = 0;
            for (int k = 0; k < pieces; k++) {
                int64_t lo, hi;
                cpool_piece_range(n, pieces, k, &lo, &hi);
                ck_assert_int_eq(lo, next);
                ck_assert_int_gt(hi, lo);
                next = hi;
            }
            ck_assert_int_eq(next, n);
        }
}
END_TEST

typedef struct {
    atomic_int *hits;
    atomic_int calls[8];
} count_job_t;

static void count_items(void *ctx, int64_t lo, int64_t hi, int tid) {
    count_job_t *j = ctx;
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
    atomic_fetch_add(&j->calls[tid], 1);
}

START_TEST(every_item_runs_exactly_once) {
    enum { N = 5000 };
    count_job_t j;
    memset(&j, 0, sizeof j);
    j.hits = calloc(N, sizeof *j.hits);
    ck_assert_ptr_nonnull(j.hits);
    for (int threads = 1; threads <= 4; threads++) {
        cpool_t *p = cpool_new(threads);
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(cpool_threads(p), threads);
        /* many short jobs back to back: a worker that wakes late must not run a finished
         * job again, nor miss the next */
        for (int rep = 0; rep < 2000; rep++) {
            int64_t n = 1 + (rep * 37) % N, grain = 1 + (rep % 5) * (rep % 3) * 100;
            for (int64_t i = 0; i < n; i++) atomic_store(&j.hits[i], 0);
            cpool_run(p, n, grain, count_items, &j);
            int64_t bad = -1;   /* one assertion per job: Check reports each through a pipe */
            for (int64_t i = 0; i < n && bad < 0; i++)
                if (atomic_load(&j.hits[i]) != 1) bad = i;
            ck_assert_msg(bad < 0, "threads %d job %d (n %lld, grain %lld): item %lld ran %d times",
                          threads, rep, (long long)n, (long long)grain, (long long)bad,
                          bad < 0 ? 1 : atomic_load(&j.hits[bad]));
        }
        cpool_run(p, 0, 1, count_items, &j);   /* nothing to do: returns */
        cpool_free(p);
    }
    free(j.hits);
}
END_TEST

/* Kept spinning (cpool_set_spin), workers still run every item once across idle gaps
 * longer than their usual spin, the flag can be turned off and on, and cpool_free stops
 * spinning workers. */
START_TEST(spinning_workers_run_jobs_across_idle_gaps) {
    enum { N = 999 };
    count_job_t j;
    memset(&j, 0, sizeof j);
    j.hits = calloc(N, sizeof *j.hits);
    ck_assert_ptr_nonnull(j.hits);
    cpool_t *p = cpool_new(3);
    ck_assert_ptr_nonnull(p);
    for (int rep = 0; rep < 12; rep++) {
        cpool_set_spin(p, rep % 4 != 3);
        for (int64_t i = 0; i < N; i++) atomic_store(&j.hits[i], 0);
        cpool_run(p, N, 1, count_items, &j);
        for (int64_t i = 0; i < N; i++) ck_assert_int_eq(atomic_load(&j.hits[i]), 1);
        usleep(rep % 2 ? 1000 : 300);   /* past the workers' usual 200 us spin */
    }
    cpool_set_spin(p, 1);
    cpool_free(p);   /* returns: spinning workers see quit */
    free(j.hits);
}
END_TEST

/* Thread 1's first piece waits, once it has begun, until every other item is done: only
 * the caller can do them, its own run and the rest of thread 1's from the back. */
typedef struct {
    int64_t n;
    atomic_int started;          /* thread 1 holds a piece */
    atomic_llong others_done;    /* items done outside thread 1's piece */
    atomic_int calls[2];
} stall_job_t;

static void stall_items(void *ctx, int64_t lo, int64_t hi, int tid) {
    stall_job_t *j = ctx;
    atomic_fetch_add(&j->calls[tid], 1);
    if (tid == 1) {
        atomic_store(&j->started, 1);
        while (atomic_load(&j->others_done) < j->n - (hi - lo)) {
        }
        return;
    }
    /* the caller's first piece waits for thread 1 to hold one, so the stall is certain */
    while (!atomic_load(&j->started)) {
    }
    atomic_fetch_add(&j->others_done, hi - lo);
}

START_TEST(a_stalled_worker_holds_up_only_its_piece) {
    cpool_t *p = cpool_new(2);
    ck_assert_ptr_nonnull(p);
    for (int rep = 0; rep < 20; rep++) {
        stall_job_t j;
        memset(&j, 0, sizeof j);
        j.n = 1000 + rep;
        cpool_run(p, j.n, 1, stall_items, &j);
        int pieces = cpool_pieces(j.n, 2);
        ck_assert_int_eq(atomic_load(&j.calls[1]), 1);
        ck_assert_int_eq(atomic_load(&j.calls[0]), pieces - 1);
        int64_t lo, hi;
        cpool_piece_range(j.n, pieces, pieces / 2, &lo, &hi);
        ck_assert_int_eq(atomic_load(&j.others_done), j.n - (hi - lo));
    }
    cpool_free(p);
}
END_TEST

/* ---- the backend's ops: the same bits whatever the number of threads ------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

enum { DIM = 160, HID = 1000, HEADS = 6, KVH = 2, HD = 16, NSEQ = 5, BLK = 4, VOCAB = 700 };

/* One layer's ops over a ragged batch of NSEQ sequences (decodes and prompt chunks, enough
 * tokens that every op is split over the threads) on a backend with `threads` threads;
 * every output concatenated into out (its length back). */
static size_t run_ops(int threads, float *out) {
    char err[256];
    bk_opts_t o = {.n_threads = threads};
    backend_t *b = backend_new("cpu", &o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    rng = 0x9E3779B97F4A7C15ULL;
    int32_t lens[NSEQ] = {1, 170, 1, 300, 3}, ctx[NSEQ] = {30, 0, 61, 5, 12};
    int32_t m = 0, nbt = 0, bt_start[NSEQ + 1], seq_start[NSEQ + 1], seq_len[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        seq_start[s] = m;
        bt_start[s] = nbt;
        seq_len[s] = ctx[s] + lens[s];
        m += lens[s];
        nbt += (seq_len[s] + BLK - 1) / BLK;
    }
    seq_start[NSEQ] = m;
    bt_start[NSEQ] = nbt;
    int32_t *tok = calloc((size_t)m, sizeof *tok), *pos = calloc((size_t)m, sizeof *pos);
    int32_t *table = calloc((size_t)nbt, sizeof *table), rows[NSEQ];
    for (int32_t i = 0; i < nbt; i++) table[i] = (i * 7) % nbt;   /* scattered blocks */
    for (int s = 0; s < NSEQ; s++) {
        for (int32_t i = 0; i < lens[s]; i++) pos[seq_start[s] + i] = ctx[s] + i;
        rows[s] = seq_start[s + 1] - 1;
    }
    bk_sample_t smp[NSEQ];
    for (int s = 0; s < NSEQ; s++)
        smp[s] = (bk_sample_t){.temperature = s % 2 ? 0.8f : 0, .top_k = 0, .top_p = 1,
                               .seed = 11 + (uint64_t)s, .idx = s};
    bk_batch_t bt = {m, NSEQ, tok, pos, seq_start, seq_len, bt_start, table, NSEQ, rows, smp};
    bk_kv_shape_t kvs = {1, nbt, BLK, KVH, HD};
    ck_assert_int_eq(b->kv_init(b, &kvs), 0);
    ck_assert_int_eq(b->prepare(b, &bt), 0);

    size_t qd = HEADS * HD, kvd = KVH * HD, nq = (size_t)m * (qd + 2 * kvd);
    float *wq = malloc(sizeof(float) * (qd + 2 * kvd) * DIM), *wh = malloc(sizeof(float) * HID * DIM);
    float *x = malloc(sizeof(float) * m * DIM), *w = malloc(sizeof(float) * DIM);
    for (size_t i = 0; i < (qd + 2 * kvd) * DIM; i++) wq[i] = frand();
    for (size_t i = 0; i < (size_t)HID * DIM; i++) wh[i] = frand() * 0.1f;
    for (size_t i = 0; i < (size_t)m * DIM; i++) x[i] = frand();
    for (size_t i = 0; i < DIM; i++) w[i] = 1 + frand() * 0.1f;
    void *dwq = b->alloc(b, BK_WEIGHT, b->matrix_elems(b, (int32_t)(qd + 2 * kvd), DIM));
    void *dwh = b->alloc(b, BK_WEIGHT, b->matrix_elems(b, HID, DIM));
    void *dx = b->alloc(b, BK_F32, (size_t)m * DIM), *dn = b->alloc(b, BK_ACT, (size_t)m * DIM);
    void *dw = b->alloc(b, BK_F32, DIM), *dq = b->alloc(b, BK_ACT, nq);
    void *datt = b->alloc(b, BK_ACT, (size_t)m * qd), *dh = b->alloc(b, BK_ACT, (size_t)m * HID);
    void *dl = b->alloc(b, BK_F32, (size_t)NSEQ * VOCAB);
    ck_assert_int_eq(b->upload_matrix(b, dwq, wq, (int32_t)(qd + 2 * kvd), DIM), 0);
    ck_assert_int_eq(b->upload_matrix(b, dwh, wh, HID, DIM), 0);
    ck_assert_int_eq(b->upload(b, dx, x, sizeof(float) * m * DIM), 0);
    ck_assert_int_eq(b->upload(b, dw, w, sizeof(float) * DIM), 0);

    size_t len = 0;
#define TAKE(src, count)                                                                  \
    do {                                                                                  \
        ck_assert_int_eq(b->download_f32(b, out + len, src, BK_ACT, (count)), 0);        \
        len += (count);                                                                   \
    } while (0)
    ck_assert_int_eq(b->rmsnorm(b, dn, dx, NULL, dw, m, DIM, 1e-5f), 0);
    TAKE(dn, (size_t)m * DIM);
    float *q = dq, *k = q + (size_t)m * qd, *v = k + (size_t)m * kvd;
    ck_assert_int_eq(b->matmul(b, q, BK_ACT, dn, dwq, m, (int32_t)qd, DIM), 0);
    ck_assert_int_eq(b->matmul(b, k, BK_ACT, dn, (float *)dwq + b->matrix_elems(b, (int32_t)qd, DIM),
                               m, (int32_t)kvd, DIM), 0);
    ck_assert_int_eq(b->matmul(b, v, BK_ACT, dn, (float *)dwq + b->matrix_elems(b, (int32_t)(qd + kvd), DIM),
                               m, (int32_t)kvd, DIM), 0);
    ck_assert_int_eq(b->rope_kv(b, q, k, v, 0, HEADS, KVH, HD, 10000.0f), 0);
    TAKE(dq, nq);
    ck_assert_int_eq(b->attention(b, datt, q, 0, HEADS, KVH, HD), 0);
    TAKE(datt, (size_t)m * qd);
    ck_assert_int_eq(b->matmul(b, dh, BK_ACT, dn, dwh, m, HID, DIM), 0);
    ck_assert_int_eq(b->silu_mul(b, dh, dh, dh, (size_t)m * HID), 0);
    TAKE(dh, (size_t)m * HID);
    ck_assert_int_eq(b->rmsnorm(b, dn, dx, dn, dw, m, DIM, 1e-5f), 0);
    ck_assert_int_eq(b->add(b, dn, dx, (size_t)m * DIM), 0);
    TAKE(dn, (size_t)m * DIM);
    ck_assert_int_eq(b->gather_rows(b, dx, dn, BK_F32, DIM), 0);
    ck_assert_int_eq(b->matmul(b, dl, BK_F32, dx, dwh, NSEQ, VOCAB < HID ? VOCAB : HID, DIM), 0);
    TAKE(dl, (size_t)NSEQ * VOCAB);
    int32_t ids[NSEQ];
    ck_assert_int_eq(b->sample(b, ids, dl, BK_F32, VOCAB), 0);
    for (int s = 0; s < NSEQ; s++) out[len++] = (float)ids[s];
#undef TAKE
    b->destroy(b);
    free(tok), free(pos), free(table), free(wq), free(wh), free(x), free(w);
    return len;
}

START_TEST(ops_give_the_same_bits_with_any_thread_count) {
    size_t cap = 1 << 20;
    float *ref = malloc(cap * sizeof *ref), *got = malloc(cap * sizeof *got);
    size_t n = run_ops(1, ref);
    ck_assert(n < cap);
    for (int threads = 2; threads <= 4; threads++)
        for (int rep = 0; rep < 3; rep++) {
            ck_assert_uint_eq(run_ops(threads, got), n);
            size_t i = 0;
            while (i < n && memcmp(&ref[i], &got[i], sizeof *ref) == 0) i++;
            ck_assert_msg(i == n, "%d threads: output %zu is %.9g, 1 thread gave %.9g", threads,
                          i, i < n ? got[i] : 0, i < n ? ref[i] : 0);
        }
    free(ref);
    free(got);
}
END_TEST

int main(void) {
    Suite *s = suite_create("cpu_pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, pieces_cover_the_items_once);
    tcase_add_test(tc, every_item_runs_exactly_once);
    tcase_add_test(tc, spinning_workers_run_jobs_across_idle_gaps);
    tcase_add_test(tc, a_stalled_worker_holds_up_only_its_piece);
    tcase_add_test(tc, ops_give_the_same_bits_with_any_thread_count);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* test_cost: the roofline cost model against hand-computed steps, its limits (memory-bound
 * decode, compute-bound prefill), monotonicity, tensor parallelism and parameter checks. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sim/cost.h"
#include "sim/cost_file.h"
#include "sim/presets.h"
#include "tests/testutil.h"

/* A shape small enough to do by hand: 2 layers, d 8, 2 heads of 4, 1 K/V head, d_ff 16,
 * vocab 32, 2-byte elements, separate LM head. */
static const preset_model_t tiny = {.name = "tiny", .n_layers = 2, .d_model = 8, .n_heads = 2,
                                    .n_kv_heads = 1, .head_dim = 4, .d_ff = 16, .vocab = 32,
                                    .max_seq = 64, .dtype_bytes = 2};
/* 1 MFLOP/s and 1 MB/s so that one FLOP or one byte is one microsecond. */
static const preset_hw_t slow = {.name = "slow", .mem_bw = 1e6, .flops = 1e6, .mem_bytes = 1e9,
                                 .link_bw = 1e6};

static cost_model_t *tiny_model(void) {
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    p.flops_eff = 1.0;
    p.bw_eff = 1.0;
    p.attn_eff = 0.5;
    p.overhead_s = 1e-3;
    cost_model_t *m = cost_roofline_new(&tiny, &slow, &p);
    ck_assert_ptr_nonnull(m);
    return m;
}

static cost_model_t *preset_model(const char *model, const char *hw, int tp) {
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    p.tp = tp;
    cost_model_t *m = cost_roofline_new(preset_model_find(model), preset_hw_find(hw), &p);
    ck_assert_ptr_nonnull(m);
    return m;
}

START_TEST(test_defaults) {
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    ck_assert(p.flops_eff == 0.7 && p.bw_eff == 0.77 && p.attn_eff == 0.5);
    ck_assert(p.overhead_s == 4e-4 && p.tp == 1);
    cost_model_t *m = cost_roofline_new(&tiny, &slow, NULL);  /* NULL: defaults */
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->name, "roofline");
    cost_free(m);
    cost_free(NULL);
}
END_TEST

/* The features of a batch, by hand: a decode at context 9, a prompt chunk of 4 after 6
 * cached tokens with no logits, a whole prompt of 3, and an entry with nothing to compute. */
START_TEST(test_features_by_hand) {
    cost_seq_t b[4] = {{1, 9, 1}, {4, 6, 0}, {3, 0, 1}, {0, 50, 1}};
    cost_features_t f;
    cost_features(b, 4, &f);
    ck_assert_int_eq(f.tokens, 1 + 4 + 3);
    ck_assert_int_eq(f.seqs, 3);
    ck_assert_int_eq(f.sampled, 2);
    ck_assert_int_eq(f.kv_tokens, 10 + 10 + 3);
    /* decode: 1 x 9 + 1; chunk: 4 x 6 + (7 + 8 + 9 + 10 = 6 x 4 + 10); prompt: 1 + 2 + 3 */
    ck_assert_int_eq(f.attn_pairs, 10 + (7 + 8 + 9 + 10) + (1 + 2 + 3));
    cost_features(NULL, 0, &f);
    ck_assert(f.tokens == 0 && f.seqs == 0 && f.sampled == 0 && f.kv_tokens == 0 &&
              f.attn_pairs == 0);
    /* 64-bit sums: a 100k-token prompt after 100k cached tokens */
    cost_seq_t big = {100000, 100000, 1};
    cost_features(&big, 1, &f);
    ck_assert(f.attn_pairs == 100000LL * 100000 + 100000LL * 100001 / 2);
}
END_TEST

START_TEST(test_window_features_by_hand) {
    /* window 8: a decode after 9 (sees 8), a chunk of 4 after 6 (tokens see 7, 8, 8, 8), a
     * chunk of 3 after 0 (1, 2, 3), a chunk of 12 after 20 (all 8) */
    cost_seq_t b[4] = {{1, 9, 1}, {4, 6, 0}, {3, 0, 1}, {12, 20, 1}};
    cost_features_t f, g;
    cost_features_window(b, 4, 8, &f);
    cost_features(b, 4, &g);
    ck_assert_int_eq(f.kv_tokens, g.kv_tokens);
    ck_assert_int_eq(f.attn_pairs, g.attn_pairs);
    ck_assert_int_eq(f.kv_tokens_w, 8 + 8 + 3 + 8);
    ck_assert_int_eq(f.attn_pairs_w, 8 + (7 + 8 + 8 + 8) + (1 + 2 + 3) + 12 * 8);
    /* no window: the windowed sums are the full ones, and a model reads the full ones from
     * features without a window whatever the _w fields hold */
    ck_assert_int_eq(g.kv_tokens_w, g.kv_tokens);
    ck_assert_int_eq(g.attn_pairs_w, g.attn_pairs);
    cost_features_t bare = {.tokens = 5, .seqs = 1, .kv_tokens = 100, .attn_pairs = 300};
    ck_assert(cost_kv_w(&bare) == 100 && cost_pairs_w(&bare) == 300);
    /* the roofline prices a windowed model's window layers over their windows only: gpt-oss
     * (half its layers at 128) decoding after 32k reads about half the KV of its
     * window-less twin */
    preset_model_t go;
    preset_hw_t h100;
    char err[128];
    ck_assert(preset_model_get("gpt-oss-120b", &go, err, sizeof err) == 0);
    ck_assert(preset_hw_get("h100", &h100, err, sizeof err) == 0);
    preset_model_t full = go;
    full.sliding_window = full.n_window_layers = 0;
    cost_model_t *mw = cost_roofline_new(&go, &h100, NULL), *mf = cost_roofline_new(&full, &h100, NULL);
    cost_seq_t dec[16];
    for (int i = 0; i < 16; i++) dec[i] = (cost_seq_t){1, 32768, 1};
    cost_breakdown_t bw, bf;
    ck_assert(cost_roofline_explain(mw, dec, 16, &bw) == 0);
    ck_assert(cost_roofline_explain(mf, dec, 16, &bf) == 0);
    const double layer_tok = preset_model_kv_bytes_per_token(&go) / go.n_layers;
    /* 18 full layers read 32769 positions, 18 window layers 128; both write one */
    double want = 16 * layer_tok * (18.0 * 32769 + 18.0 * 128 + 36.0);
    ck_assert_double_eq_tol(bw.kv_bytes, want, want * 1e-9);
    ck_assert(bw.kv_bytes < 0.51 * bf.kv_bytes);
    cost_free(mw);
    cost_free(mf);
}
END_TEST

START_TEST(test_mla_prefill_expanded) {
    /* features: a prefill's (n > 1) positions and pairs apart from the decodes' */
    cost_seq_t b[3] = {{1, 9, 1}, {4, 6, 0}, {3, 0, 1}};
    cost_features_t f;
    cost_features(b, 3, &f);
    ck_assert_int_eq(f.pf_kv_tokens, 10 + 3);
    ck_assert_int_eq(f.pf_attn_pairs, (7 + 8 + 9 + 10) + (1 + 2 + 3));
    /* the roofline: 512 prompt tokens in one prefill against 512 one-token sequences (the
     * same rows, one sampled): the difference is attention's, expanded against absorbed */
    preset_model_t ds;
    preset_hw_t h200;
    char err[128];
    ck_assert(preset_model_get("deepseek-v3", &ds, err, sizeof err) == 0);
    ck_assert(preset_hw_get("h200", &h200, err, sizeof err) == 0);
    cost_roofline_params_t rp;
    cost_roofline_defaults(&rp);
    rp.tp = 8;
    cost_model_t *m = cost_roofline_new(&ds, &h200, &rp);
    ck_assert_ptr_nonnull(m);
    cost_seq_t pf = {512, 0, 1}, dec[512];
    for (int i = 0; i < 512; i++) dec[i] = (cost_seq_t){1, 0, i == 0};
    cost_breakdown_t a, d;
    ck_assert(cost_roofline_explain(m, &pf, 1, &a) == 0);
    ck_assert(cost_roofline_explain(m, dec, 512, &d) == 0);
    const double L = ds.n_layers, pairs = 512.0 * 513 / 2;
    double want = L * (preset_model_mla_prefill_pair_flops(&ds, 8) * pairs +
                       2.0 * 512 * preset_model_mla_expand_params(&ds, 8) -
                       preset_model_attn_pair_flops(&ds, 8) * 512);
    ck_assert_double_eq_tol(a.flops - d.flops, want, fabs(want) * 1e-9);
    /* 3.4x fewer FLOPs a pair in the expanded form */
    ck_assert_double_eq_tol(preset_model_attn_pair_flops(&ds, 8) /
                            preset_model_mla_prefill_pair_flops(&ds, 8), 1088.0 / 320, 1e-12);
    cost_free(m);
    /* the linear model: a prefill's pairs at the scale, its positions through kv_b */
    cost_linear_params_t lp;
    memset(&lp, 0, sizeof lp);
    lp.layer_params = 1e9;
    lp.n_knots = 1;
    lp.knot_rows[0] = 1;
    lp.knot_s[0] = 1e-12;
    lp.attn_pair_s = 1e-9;
    cost_model_t *plain = cost_linear_new(&lp);
    lp.tp = 8;
    lp.allreduces = 2;
    lp.ar_bytes_per_token = 1;
    cost_file_attn_shape(&ds, &lp);
    lp.tp = 0;
    ck_assert_double_eq_tol(lp.mla_pf_pair_scale, 320.0 / 1088, 1e-12);
    ck_assert_double_eq_tol(lp.mla_expand_params, L * preset_model_mla_expand_params(&ds, 8), 1);
    cost_model_t *mla = cost_linear_new(&lp);
    cost_features_t g;
    cost_features(&pf, 1, &g);
    double extra = -(1 - lp.mla_pf_pair_scale) * pairs * 1e-9 +
                   lp.mla_expand_params * 1e-12 * 512;   /* gemm past the last knot: x rows */
    ck_assert_double_eq_tol(cost_pass_time(mla, &g) - cost_pass_time(plain, &g), extra,
                            fabs(extra) * 1e-9);
    cost_free(plain);
    cost_free(mla);
}
END_TEST

START_TEST(test_empty_batch) {
    cost_model_t *m = tiny_model();
    ck_assert(cost_step_time(m, NULL, 0) == 0.0);
    cost_seq_t none[2] = {{0, 10, 0}, {0, 0, 0}};  /* no new tokens: nothing runs */
    ck_assert(cost_step_time(m, none, 2) == 0.0);
    cost_breakdown_t b;
    ck_assert_int_eq(cost_roofline_explain(m, NULL, 0, &b), 0);
    ck_assert(b.time_s == 0.0 && b.overhead_s == 0.0 && b.bytes == 0.0);
    cost_free(m);
}
END_TEST

/* One decode token after 3 cached ones, sampled. Per operator, time in microseconds is
 * max(FLOPs, bytes) except attention, max(FLOPs / 0.5, bytes). T = 1, d*b = 16 bytes.
 *   rmsnorm   FLOPs 4*1*8 = 32;          bytes 8*2 (weight) + 2*16 (in, out) = 48    -> 48
 *   qkv       Wqkv = 8*(2+2*1)*4 = 128;  FLOPs 2*128 = 256;
 *             bytes 128*2 + 16 + (2+2)*4*2 = 256 + 16 + 32 = 304                     -> 304
 *   attention FLOPs 4*2*4 * 1*(3 + (1+1)/2) = 32*4 = 128 -> /0.5 = 256;
 *             bytes K,V 2*1*4*2 = 16 per token: (3+1) read + 1 written = 80,
 *             + Q read and output written 2*1*2*4*2 = 32 -> 112                     -> 256
 *   o proj    Wo = 2*4*8 = 64; FLOPs 128; bytes 128 + 1*8*2 + 16 = 160               -> 160
 *   mlp       Wmlp = 3*8*16 = 384; FLOPs 768; bytes 768 + 2*16 = 800                 -> 800
 *   layer = 2*48 + 304 + 256 + 160 + 800 = 1616; 2 layers = 3232
 *   embedding gather: bytes 2*16 = 32; final norm 48;
 *   LM head   FLOPs 2*1*32*8 = 512; bytes 32*8*2 + 16 + 32*2 = 592                   -> 592
 *   total 3232 + 32 + 48 + 592 = 3904 us, + overhead 1000 us = 4904 us. */
START_TEST(test_hand_decode) {
    cost_model_t *m = tiny_model();
    cost_seq_t s = {1, 3, 1};
    ck_assert_double_eq_tol(cost_step_time(m, &s, 1), 4904e-6, 1e-12);
    cost_breakdown_t b;
    ck_assert_int_eq(cost_roofline_explain(m, &s, 1, &b), 0);
    ck_assert_double_eq_tol(b.time_s, 4904e-6, 1e-12);
    /* Only attention (256 us a layer) is compute bound. */
    ck_assert_double_eq_tol(b.compute_bound_s, 2 * 256e-6, 1e-12);
    ck_assert_double_eq_tol(b.memory_bound_s, 3904e-6 - 512e-6, 1e-12);
    ck_assert(b.overhead_s == 1e-3 && b.comm_s == 0 && b.comm_bytes == 0);
    /* weights: 2 * (norms 2*16 + 256 + 128 + 768) + final norm 16 + LM head 512 */
    ck_assert_double_eq_tol(b.weight_bytes, 2 * 1184.0 + 16 + 512, 1e-9);
    ck_assert_double_eq_tol(b.kv_bytes, 2 * 80.0, 1e-9);
    cost_free(m);
}
END_TEST

/* Latent attention and fine-grained MoE by hand (issue #29): a 2-layer DeepSeek-like shape,
 * d 8, 2 heads, latent 4 + rope key 2, query direct (q_lora 0), nope 2 + rope 2 = head_dim 4,
 * values 3; layer 0 dense (d_ff 16), layer 1 four experts of 6 (top 2) and a shared one of 6;
 * one decode token after 10 cached, sampled. Per layer:
 *   inputs   kv_a 8*(4+2) = 48, q 8*2*4 = 64, kv_b 4*2*(2+3) = 40: 152 params, 304 FLOPs
 *   attention in the latent: 2*2*(2*4 + 2) = 40 FLOPs a pair, 11 pairs: 440; its KV
 *            (4+2)*2 = 12 B a position, 11 read + 1 written: 144 B
 *   output   2*3*8 = 48 params, 96 FLOPs; norms 2 x 4*8 = 64 FLOPs
 * dense MLP 3*8*16 = 384 params (768 FLOPs); the MoE layer: router 8*4 (64 FLOPs), 2 experts
 * of 3*8*6 = 144 (576 FLOPs; 1 token touches 4(1 - (1 - 2/4)) = 2 experts), shared 144 (288);
 * final norm 32 FLOPs, LM head 2*8*32 = 512. */
static const preset_model_t tiny_mla = {
    .name = "tiny-mla", .n_layers = 2, .d_model = 8, .n_heads = 2, .n_kv_heads = 2,
    .head_dim = 4, .d_ff = 16, .vocab = 32, .max_seq = 64, .dtype_bytes = 2, .n_experts = 4,
    .experts_per_tok = 2, .moe_d_ff = 6, .n_dense_layers = 1, .shared_d_ff = 6,
    .kv_lora_rank = 4, .qk_nope_head_dim = 2, .qk_rope_head_dim = 2, .v_head_dim = 3};

/* A tensor-parallel group wider than a node all-reduces over the network (issue #29 item
 * 4): llama-3.1-405b at tp 16 on h100 (8 a node, 50 GB/s a GPU): each of the 2 x 126
 * all-reduces of a one-token decode costs link_latency + 2 (15/16) x 16384 x 2 B / 50e9. */
START_TEST(test_multinode_allreduce) {
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    p.tp = 16;
    const preset_hw_t *h100 = preset_hw_find("h100");
    cost_model_t *m = cost_roofline_new(preset_model_find("llama-3.1-405b"), h100, &p);
    ck_assert_ptr_nonnull(m);
    cost_seq_t s = {1, 100, 1};
    cost_breakdown_t b;
    ck_assert_int_eq(cost_roofline_explain(m, &s, 1, &b), 0);
    double one = h100->link_latency + h100->net_latency + 2.0 * 15 / 16 * 16384 * 2 / h100->net_bw;
    ck_assert_double_eq_tol(b.comm_s, 2 * 126 * one, 1e-12);
    cost_free(m);
    /* a GPU whose network is unknown cannot span nodes: refused with the reason */
    char err[256];
    ck_assert_int_eq(cost_roofline_check(preset_model_find("llama-3.1-405b"),
                                         preset_hw_find("h100-pcie"), &p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tp 16 spans 2 link domains of 8 h100-pcie GPUs"), "%s", err);
    /* GB200's NVLink domain holds 72: tp 16 stays on NVLink */
    double lat, spb;
    ck_assert_int_eq(preset_hw_multinode_allreduce(preset_hw_find("gb200"), 16, &lat, &spb, err,
                                                   sizeof err), 0);
    ck_assert_int_eq(preset_hw_multinode_allreduce(h100, 8, &lat, &spb, err, sizeof err), 0);
}
END_TEST

START_TEST(test_hand_mla_moe) {
    char err[256];
    ck_assert_msg(preset_model_validate(&tiny_mla, err, sizeof err) == 0, "%s", err);
    cost_roofline_params_t p;
    cost_roofline_defaults(&p);
    cost_model_t *m = cost_roofline_new(&tiny_mla, &slow, &p);
    ck_assert_ptr_nonnull(m);
    cost_seq_t s = {1, 10, 1};
    cost_breakdown_t b;
    ck_assert_int_eq(cost_roofline_explain(m, &s, 1, &b), 0);
    ck_assert_double_eq_tol(b.flops, 2 * (64 + 304 + 440 + 96) + 768 + (64 + 576 + 288) + 32 + 512,
                            1e-9);
    ck_assert_double_eq_tol(b.kv_bytes, 2 * 144.0, 1e-9);
    /* weights: 2 x (norms 32 + inputs 304 + output 96) + dense 768 + router 64 + 2 experts
     * 576 + shared 288 + final norm 16 + LM head 512 */
    ck_assert_double_eq_tol(b.weight_bytes, 2 * 432.0 + 768 + 64 + 576 + 288 + 16 + 512, 1e-9);
    cost_free(m);
    /* fp8 weights (W8A8) on a device whose FP8 peak is twice its bf16 one: the layers'
     * matrices read half the bytes and multiply at twice the rate; the norms and the LM head
     * do not change (304 + 96 per layer, 768, 576 + 288 halve: 1,984 B less) */
    preset_model_t fp8 = tiny_mla;
    preset_hw_t slow8 = slow;
    slow8.flops_fp8 = 2e6;
    ck_assert_int_eq(preset_model_set_format(&fp8, "fp8", err, sizeof err), 0);
    cost_model_t *m8 = cost_roofline_new(&fp8, &slow8, &p);
    ck_assert_ptr_nonnull(m8);
    cost_breakdown_t b8;
    ck_assert_int_eq(cost_roofline_explain(m8, &s, 1, &b8), 0);
    ck_assert_double_eq_tol(b.weight_bytes - b8.weight_bytes, (2 * 400.0 + 768 + 864) / 2, 1e-9);
    ck_assert_double_eq_tol(b8.flops, b.flops, 1e-9);
    cost_free(m8);
    /* the latent is whole on every device: 8 devices hold it 8 times, GQA heads split */
    ck_assert(preset_model_kv_bytes_device(&tiny_mla, 2) == 2 * 6 * 2.0);
    ck_assert(preset_model_kv_bytes_device(&tiny, 2) == 2 * 2 * 1 * 4 * 2.0);  /* 1 KV head kept */
    ck_assert(preset_model_attn_pair_flops(&tiny_mla, 2) == 2 * 1 * (2 * 4 + 2));
}
END_TEST

/* A prefill of 8 tokens, nothing cached, last position sampled. T = 8, T*d*b = 128 bytes.
 *   rmsnorm   FLOPs 4*8*8 = 256; bytes 16 + 2*128 = 272                              -> 272
 *   qkv       FLOPs 2*8*128 = 2048; bytes 256 + 128 + 8*16*2 = 640                   -> 2048
 *   attention FLOPs 32 * 8*(0 + 9/2) = 1152 -> /0.5 = 2304;
 *             bytes 16*(8 read + 8 written) + Q/out 2*8*8*2 = 256 + 256 = 512        -> 2304
 *   o proj    FLOPs 2*8*64 = 1024; bytes 128 + 128 + 128 = 384                       -> 1024
 *   mlp       FLOPs 2*8*384 = 6144; bytes 768 + 256 = 1024                           -> 6144
 *   layer = 2*272 + 2048 + 2304 + 1024 + 6144 = 12064; 2 layers = 24128
 *   embedding 2*128 = 256; final norm 272; LM head (1 position) 592
 *   total 24128 + 256 + 272 + 592 = 25248 us, + 1000 us = 26248 us. */
START_TEST(test_hand_prefill) {
    cost_model_t *m = tiny_model();
    cost_seq_t s = {8, 0, 1};
    ck_assert_double_eq_tol(cost_step_time(m, &s, 1), 26248e-6, 1e-12);
    /* A non-final chunk samples nothing: no LM head (592 us less). */
    cost_seq_t chunk = {8, 0, 0};
    ck_assert_double_eq_tol(cost_step_time(m, &chunk, 1), (26248 - 592) * 1e-6, 1e-12);
    /* Splitting the same work over two sequences changes only attention: two chunks of 4
     * attend to 4*(0 + 5/2) = 10 pairs each, 20 instead of 36: attention FLOPs 32*20 = 640
     * -> 1280 us, bytes still 512 -> 1280 per layer, 2*(2304 - 1280) = 2048 us less. */
    cost_seq_t two[2] = {{4, 0, 1}, {4, 0, 0}};
    ck_assert_double_eq_tol(cost_step_time(m, two, 2), (26248 - 2048) * 1e-6, 1e-12);
    cost_free(m);
}
END_TEST

/* Deterministic pseudo-random batches (no libc rand: same sequence everywhere). */
static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

START_TEST(test_monotone) {
    cost_model_t *m = preset_model("llama-3-8b", "h100", 1);
    cost_model_t *m2 = preset_model("llama-3-8b", "h100", 2);
    cost_model_t *models[2] = {m, m2};
    uint32_t seed = 12345;
    cost_seq_t b[65];
    for (int trial = 0; trial < 400; trial++) {
        cost_model_t *cm = models[trial % 2];
        int n = 1 + (int)(lcg(&seed) % 64);
        for (int i = 0; i < n; i++) {
            int prefill = lcg(&seed) % 4 == 0;
            b[i].n_new = prefill ? 1 + (int32_t)(lcg(&seed) % 2048) : 1;
            b[i].ctx = (int32_t)(lcg(&seed) % 8192);
            b[i].n_sampled = prefill ? (int32_t)(lcg(&seed) % 2) : 1;
        }
        double t = cost_step_time(cm, b, n);
        ck_assert(t > 0);
        int k = (int)(lcg(&seed) % (uint32_t)n);
        cost_seq_t save = b[k];
        b[k].n_new += 1 + (int32_t)(lcg(&seed) % 100);
        ck_assert_msg(cost_step_time(cm, b, n) >= t, "more tokens got cheaper");
        b[k] = save;
        b[k].ctx += 1 + (int32_t)(lcg(&seed) % 1000);
        ck_assert_msg(cost_step_time(cm, b, n) >= t, "longer context got cheaper");
        b[k] = save;
        b[k].n_sampled += 1;
        ck_assert_msg(cost_step_time(cm, b, n) >= t, "more sampling got cheaper");
        b[k] = save;
        b[n] = (cost_seq_t){1, 0, 1};
        ck_assert_msg(cost_step_time(cm, b, n + 1) >= t, "an extra sequence got cheaper");
    }
    cost_free(m);
    cost_free(m2);
}
END_TEST

/* llama-2-7b, batch 1, on an A100: every GEMM is a matrix-vector product, so the step is
 * the time to stream the weights (all but the embedding table, of which one row is read)
 * and the K/V cache at 85% of 2.039 TB/s, plus the overhead:
 * (13.21e9 B + 524,288 B/token x (513 read + 1 written)) / 1.733e12 B/s + 0.4 ms = 8.18 ms. */
START_TEST(test_decode_memory_bound) {
    const preset_model_t *pm = preset_model_find("llama-2-7b");
    cost_model_t *m = preset_model("llama-2-7b", "a100-80g", 1);
    cost_seq_t s = {1, 512, 1};
    double t = cost_step_time(m, &s, 1);
    double streamed = (preset_model_params(pm) - (double)pm->vocab * pm->d_model) * 2;
    double kv = 524288.0 * (512 + 1 + 1);
    double want = (streamed + kv) / (2.039e12 * 0.77) + 4e-4;
    ck_assert_msg(fabs(t - want) / want < 0.01, "decode %.6f s, want ~%.6f s", t, want);
    double full = preset_model_weight_bytes(pm) / (2.039e12 * 0.77) + 4e-4;
    ck_assert_msg(fabs(t - full) / full < 0.03, "decode %.6f s vs all weights %.6f", t, full);
    cost_breakdown_t b;
    cost_roofline_explain(m, &s, 1, &b);
    ck_assert(b.compute_bound_s == 0);
    ck_assert_double_eq_tol(b.weight_bytes / streamed, 1.0, 1e-12);
    ck_assert_double_eq_tol(b.kv_bytes, kv, 1e-3);
    cost_free(m);
}
END_TEST

/* A 4096-token prompt: GEMMs at 2 FLOPs per weight per token, ~5.5e13 FLOPs, take ~0.25 s at
 * 70% of 312 TFLOP/s, while streaming the weights once takes 8 ms. */
START_TEST(test_prefill_compute_bound) {
    const preset_model_t *pm = preset_model_find("llama-2-7b");
    cost_model_t *m = preset_model("llama-2-7b", "a100-80g", 1);
    cost_seq_t s = {4096, 0, 1};
    cost_breakdown_t b;
    cost_roofline_explain(m, &s, 1, &b);
    ck_assert(b.time_s == cost_step_time(m, &s, 1));
    ck_assert_msg(b.compute_bound_s > 0.95 * (b.time_s - b.overhead_s), "compute %.4f of %.4f",
                  b.compute_bound_s, b.time_s);
    double gemm = 2.0 * 4096 * preset_model_params(pm) / (312e12 * 0.7);
    ck_assert_msg(b.time_s > gemm && b.time_s < 1.3 * gemm, "prefill %.4f s, GEMMs %.4f s",
                  b.time_s, gemm);
    cost_free(m);
}
END_TEST

START_TEST(test_tp_halves_weights) {
    cost_model_t *m1 = preset_model("llama-2-7b", "a100-80g", 1);
    cost_model_t *m2 = preset_model("llama-2-7b", "a100-80g", 2);
    cost_seq_t s = {1, 512, 1};
    cost_breakdown_t b1, b2;
    cost_roofline_explain(m1, &s, 1, &b1);
    cost_roofline_explain(m2, &s, 1, &b2);
    /* Only the norm weights (2*4096 per layer + 4096) stay whole on each device. */
    ck_assert_double_eq_tol(b2.weight_bytes / b1.weight_bytes, 0.5, 1e-4);
    ck_assert_double_eq_tol(b2.kv_bytes / b1.kv_bytes, 0.5, 1e-12);
    /* Two all-reduces per layer of 1 token x 4096 x 2 bytes, ring factor 2*(2-1)/2 = 1. */
    ck_assert_double_eq_tol(b2.comm_bytes, 32 * 2 * 4096 * 2.0, 1e-6);
    /* ... at link_bw x bw_eff, after the preset's all-reduce latency, twice per layer */
    ck_assert_double_eq_tol(b2.comm_s, b2.comm_bytes / (300e9 * 0.77) + 32 * 2 * 36e-6, 1e-15);
    double w1 = b1.time_s - b1.overhead_s, w2 = b2.time_s - b2.overhead_s - b2.comm_s;
    ck_assert_msg(fabs(w2 / w1 - 0.5) < 0.01, "tp=2 memory time ratio %.4f", w2 / w1);
    /* tp above the K/V head count replicates K/V heads: llama-3-8b has 8, tp 16 keeps 1. */
    cost_model_t *m16 = preset_model("llama-3-8b", "h100", 16);
    cost_model_t *m8 = preset_model("llama-3-8b", "h100", 8);
    cost_breakdown_t c16, c8;
    cost_roofline_explain(m16, &s, 1, &c16);
    cost_roofline_explain(m8, &s, 1, &c8);
    ck_assert_double_eq_tol(c16.kv_bytes, c8.kv_bytes, 1e-9);
    cost_free(m1);
    cost_free(m2);
    cost_free(m8);
    cost_free(m16);
}
END_TEST

START_TEST(test_check) {
    char err[256];
    cost_roofline_params_t p;
    const preset_model_t *m = preset_model_find("llama-2-7b");
    const preset_hw_t *hw = preset_hw_find("h100");
    cost_roofline_defaults(&p);
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), 0);
    p.tp = 3;
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tp 3 does not divide llama-2-7b's 32 attention heads"), "%s", err);
    ck_assert_ptr_null(cost_roofline_new(m, hw, &p));
    p.tp = 0;
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), -1);
    cost_roofline_defaults(&p);
    p.bw_eff = 0;
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "efficiencies must be in (0, 1]"), "%s", err);
    p.bw_eff = 1.5;
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), -1);
    cost_roofline_defaults(&p);
    p.overhead_s = -1;
    ck_assert_int_eq(cost_roofline_check(m, hw, &p, err, sizeof err), -1);
    cost_roofline_defaults(&p);
    p.tp = 2;
    preset_hw_t nolink = *hw;
    nolink.link_bw = 0;
    ck_assert_int_eq(cost_roofline_check(m, &nolink, &p, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "has no link_bw"), "%s", err);
    p.tp = 1;  /* a single device needs no link */
    ck_assert_int_eq(cost_roofline_check(m, &nolink, &p, err, sizeof err), 0);
    preset_model_t bad = *m;
    bad.n_layers = 0;
    ck_assert_int_eq(cost_roofline_check(&bad, hw, &p, err, sizeof err), -1);
    ck_assert_ptr_null(cost_roofline_new(&bad, hw, &p));
}
END_TEST

static double fake_pass(const cost_model_t *m, const cost_features_t *f) {
    (void)m;
    return (double)f->seqs;
}

START_TEST(test_explain_other_model) {
    cost_model_t fake = {.pass_time = fake_pass, .name = "fake"};
    cost_breakdown_t b;
    ck_assert_int_eq(cost_roofline_explain(&fake, NULL, 0, &b), -1);
}
END_TEST

/* The simulator calls step_time ~1e5 times per trace with a few hundred sequences: a call
 * on 256 sequences takes well under a microsecond natively. The bound here is loose (100 us
 * a call) so that it holds under valgrind and sanitizers and only catches a pathological
 * change (allocation, a per-layer loop over sequences). */
START_TEST(test_fast) {
    cost_model_t *m = preset_model("llama-3-70b", "h200", 4);
    cost_seq_t b[256];
    for (int i = 0; i < 256; i++) b[i] = (cost_seq_t){i % 16 ? 1 : 512, 100 + 37 * i, 1};
    enum { CALLS = 20000 };
    clock_t c0 = clock();
    double sum = 0;
    for (int k = 0; k < CALLS; k++) {
        b[k & 255].ctx++;
        sum += cost_step_time(m, b, 256);
    }
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    cost_free(m);
    ck_assert(sum > 0);
    ck_assert_msg(secs < CALLS * 100e-6, "%d steps of 256 sequences took %.3f s", CALLS, secs);
}
END_TEST

static Suite *cost_suite(void) {
    Suite *s = suite_create("cost");
    TCase *tc = tcase_create("roofline");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_features_by_hand);
    tcase_add_test(tc, test_window_features_by_hand);
    tcase_add_test(tc, test_mla_prefill_expanded);
    tcase_add_test(tc, test_empty_batch);
    tcase_add_test(tc, test_hand_decode);
    tcase_add_test(tc, test_hand_prefill);
    tcase_add_test(tc, test_monotone);
    tcase_add_test(tc, test_decode_memory_bound);
    tcase_add_test(tc, test_prefill_compute_bound);
    tcase_add_test(tc, test_tp_halves_weights);
    tcase_add_test(tc, test_check);
    tcase_add_test(tc, test_hand_mla_moe);
    tcase_add_test(tc, test_multinode_allreduce);
    tcase_add_test(tc, test_explain_other_model);
    tcase_add_test(tc, test_fast);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(cost_suite());
}

/* test_moe: mixture-of-experts layers on the engine (engine/forward_moe.c) on the CPU backend.
 *
 *  - the forward pass of small MoE models (top-1 and top-2, a dense first layer, a shared
 *    expert, sizes that are not whole panels) against a plain-C reference written here:
 *    router, top-k, softmax over the k chosen logits, experts, weighted sum, in double, to
 *    a relative error of 1e-5 on the logits. Every sequence is one token at position 0, so
 *    attention is its own value vector and the reference stays small (attention has its
 *    own tests in test_forward);
 *  - batch invariance: each token's logits alone and inside a batch of 24 are bit-identical;
 *  - the backend ops gather_idx and moe_combine against plain loops;
 *  - dummy:FILE.model weights of an MoE preset: on the host and generated on the backend
 *    (shape only) give the same logits; quantize writes llama.cpp's layout, which loads
 *    back to the same logits;
 *  - GGUF layouts the engine does not read are refused naming the tensor or key. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/dequant.h"
#include "engine/forward.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quantize.h"
#include "tests/testutil.h"

#define TOL 1e-5
#define NTOK 24       /* tokens in the batch (each its own sequence) */
#define BS 4

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

static void fill(float *p, size_t n, float scale, float bias) {
    for (size_t i = 0; p && i < n; i++) p[i] = bias + scale * frand();
}

/* A random model of this shape, in model_alloc's arena (so the MoE slots are its own). */
static model_t *make_moe(model_config_t c) {
    c.max_seq = 16;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    model_t *m;
    char err[256];
    ck_assert_msg(model_alloc(&c, "test-moe", "dummy", &m, err, sizeof err) == 0, "%s", err);
    size_t d = (size_t)c.dim, q = (size_t)c.n_heads * c.head_dim, kv = (size_t)c.n_kv_heads * c.head_dim;
    size_t h = (size_t)c.hidden_dim, e = (size_t)c.n_experts, eh = (size_t)c.moe_hidden;
    size_t sh = (size_t)c.shared_hidden;
    float s = 1.0f / sqrtf((float)d);
    fill(m->tok_emb, (size_t)c.vocab * d, 1, 0);
    for (int32_t l = 0; l < c.n_layers; l++) {
        model_layer_t *w = &m->layers[l];
        int moe = model_layer_is_moe(&c, l);
        ck_assert_int_eq(moe, w->router != NULL);
        ck_assert_int_eq(!moe, w->w1 != NULL);
        fill(w->attn_norm, d, 0.2f, 1);
        fill(w->ffn_norm, d, 0.2f, 1);
        fill(w->wq, q * d, s, 0);
        fill(w->wk, kv * d, s, 0);
        fill(w->wv, kv * d, s, 0);
        fill(w->wo, d * q, 1.0f / sqrtf((float)q), 0);
        fill(w->w1, h * d, s, 0);
        fill(w->w3, h * d, s, 0);
        fill(w->w2, d * h, 1.0f / sqrtf((float)h), 0);
        fill(w->router, e * d, 2 * s, 0);   /* logits of order 1: the choices differ */
        fill(w->exp_gate, e * eh * d, s, 0);
        fill(w->exp_up, e * eh * d, s, 0);
        fill(w->exp_down, e * d * eh, 1.0f / sqrtf((float)eh), 0);
        fill(w->sh_w1, sh * d, s, 0);
        fill(w->sh_w3, sh * d, s, 0);
        fill(w->sh_w2, d * sh, sh ? 1.0f / sqrtf((float)sh) : 0, 0);
    }
    fill(m->final_norm, d, 0.2f, 1);
    if (!c.tied) fill(m->lm_head, (size_t)c.vocab * d, s, 0);
    return m;
}

/* ---- the reference, in double ----------------------------------------------------------- */

static void rmsnorm(double *out, const double *x, const float *w, int32_t n, double eps) {
    double ss = 0;
    for (int32_t i = 0; i < n; i++) ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int32_t i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void matvec(double *y, const float *w, const double *x, int32_t n, int32_t k) {
    for (int32_t i = 0; i < n; i++) {
        double s = 0;
        for (int32_t j = 0; j < k; j++) s += (double)w[(size_t)i * k + j] * x[j];
        y[i] = s;
    }
}

/* out += scale * down(silu(gate x) * up x), one SwiGLU of hidden h */
static void swiglu_add(double *out, const float *gate, const float *up, const float *down,
                       const double *x, int32_t dim, int32_t h, double scale) {
    double *g = malloc(sizeof *g * (size_t)h), *u = malloc(sizeof *u * (size_t)h);
    double *y = malloc(sizeof *y * (size_t)dim);
    matvec(g, gate, x, h, dim);
    matvec(u, up, x, h, dim);
    for (int32_t i = 0; i < h; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
    matvec(y, down, g, dim, h);
    for (int32_t i = 0; i < dim; i++) out[i] += scale * y[i];
    free(g), free(u), free(y);
}

/* The mixture: expert e is chosen when fewer than k experts beat it (a higher logit, or an
 * equal one and a lower id); weights = softmax over the chosen logits. */
static void ref_moe(const model_t *m, const model_layer_t *w, const double *x, double *out) {
    const model_config_t *c = &m->cfg;
    int32_t dim = c->dim, ne = c->n_experts, eh = c->moe_hidden;
    double lg[64], mx = -INFINITY, sum = 0;
    ck_assert_int_le(ne, 64);
    matvec(lg, w->router, x, ne, dim);
    int chosen[64];
    for (int32_t e = 0; e < ne; e++) {
        int32_t beaten = 0;
        for (int32_t o = 0; o < ne; o++) beaten += lg[o] > lg[e] || (lg[o] == lg[e] && o < e);
        chosen[e] = beaten < c->experts_per_tok;
        if (chosen[e] && lg[e] > mx) mx = lg[e];
    }
    for (int32_t e = 0; e < ne; e++)
        if (chosen[e]) sum += exp(lg[e] - mx);
    memset(out, 0, sizeof *out * (size_t)dim);
    for (int32_t e = 0; e < ne; e++) {
        if (!chosen[e]) continue;
        size_t off = (size_t)e * eh * dim;
        swiglu_add(out, w->exp_gate + off, w->exp_up + off, w->exp_down + off, x, dim, eh,
                   exp(lg[e] - mx) / sum);
    }
    if (c->shared_hidden)
        swiglu_add(out, w->sh_w1, w->sh_w3, w->sh_w2, x, dim, c->shared_hidden, 1.0);
}

/* Logits of `token` alone at position 0: attention over one position is its value. */
static void ref_logits(const model_t *m, int32_t token, double *logits) {
    const model_config_t *c = &m->cfg;
    int32_t dim = c->dim, hd = c->head_dim, kvd = c->n_kv_heads * hd, qd = c->n_heads * hd;
    int32_t group = c->n_heads / c->n_kv_heads;
    double *x = malloc(sizeof *x * (size_t)dim), *xn = malloc(sizeof *xn * (size_t)dim);
    double *v = malloc(sizeof *v * (size_t)kvd), *att = malloc(sizeof *att * (size_t)qd);
    double *y = malloc(sizeof *y * (size_t)dim);
    for (int32_t i = 0; i < dim; i++) x[i] = m->tok_emb[(size_t)token * dim + i];
    for (int32_t l = 0; l < c->n_layers; l++) {
        const model_layer_t *w = &m->layers[l];
        rmsnorm(xn, x, w->attn_norm, dim, c->norm_eps);
        matvec(v, w->wv, xn, kvd, dim);
        for (int32_t h = 0; h < c->n_heads; h++)
            memcpy(att + (size_t)h * hd, v + (size_t)(h / group) * hd, sizeof *att * (size_t)hd);
        matvec(y, w->wo, att, dim, qd);
        for (int32_t i = 0; i < dim; i++) x[i] += y[i];
        rmsnorm(xn, x, w->ffn_norm, dim, c->norm_eps);
        if (model_layer_is_moe(c, l)) {
            ref_moe(m, w, xn, y);
        } else {
            memset(y, 0, sizeof *y * (size_t)dim);
            swiglu_add(y, w->w1, w->w3, w->w2, xn, dim, c->hidden_dim, 1.0);
        }
        for (int32_t i = 0; i < dim; i++) x[i] += y[i];
    }
    rmsnorm(xn, x, m->final_norm, dim, c->norm_eps);
    matvec(logits, m->lm_head, xn, c->vocab, dim);
    free(x), free(xn), free(v), free(att), free(y);
}

/* ---- the engine ------------------------------------------------------------------------- */

static fwd_t *new_fwd(backend_t **b, const model_t *m) {
    char err[512];
    *b = backend_new("cpu", NULL, err, sizeof err);
    ck_assert_msg(*b != NULL, "%s", err);
    fwd_opts_t o = {NTOK, NTOK, NTOK, BS};
    fwd_t *f = NULL;
    ck_assert_msg(fwd_new(*b, m, &o, &f, err, sizeof err) == 0, "%s", err);
    return f;
}

/* n tokens, each its own sequence at position 0 in block i, all sampled: logits [n][vocab]. */
static void run_tokens(fwd_t *f, const int32_t *toks, int32_t n, float *out) {
    int32_t pos[NTOK] = {0}, ss[NTOK + 1], sl[NTOK], bts[NTOK + 1], bt[NTOK], rows[NTOK],
            ids[NTOK];
    bk_sample_t smp[NTOK];
    for (int32_t i = 0; i <= n; i++) ss[i] = bts[i] = i;
    for (int32_t i = 0; i < n; i++) {
        sl[i] = 1;
        bt[i] = i;
        rows[i] = i;
        smp[i] = (bk_sample_t){0, 0, 1, (uint64_t)i, 0};
    }
    bk_batch_t b = {n, n, toks, pos, ss, sl, bts, bt, n, rows, smp};
    ck_assert_msg(fwd_step(f, &b, ids) == 0, "%s", fwd_errmsg(f));
    ck_assert_int_eq(fwd_logits(f, out), 0);
}

static double rel_err(const float *got, const double *want, int32_t n) {
    double d = 0, r = 0;
    for (int32_t i = 0; i < n; i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        r += want[i] * want[i];
    }
    return sqrt(d) / sqrt(r);
}

/* Shapes: dim, layers, heads, kv heads, head dim, dense hidden, vocab, tied; experts, top-k,
 * expert hidden, dense layers, shared hidden. */
static const model_config_t shapes[] = {
    {.dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8, .hidden_dim = 48,
     .vocab = 40, .tied = 1, .n_experts = 4, .experts_per_tok = 2, .moe_hidden = 32},
    {.dim = 24, .n_layers = 3, .n_heads = 3, .n_kv_heads = 1, .head_dim = 8, .hidden_dim = 36,
     .vocab = 37, .tied = 0, .n_experts = 5, .experts_per_tok = 1, .moe_hidden = 20,
     .n_dense_layers = 1, .shared_hidden = 12},
    {.dim = 16, .n_layers = 2, .n_heads = 2, .n_kv_heads = 2, .head_dim = 8, .hidden_dim = 16,
     .vocab = 29, .tied = 0, .n_experts = 8, .experts_per_tok = 3, .moe_hidden = 17,
     .shared_hidden = 16},
};

static void batch_tokens(int32_t *toks, int32_t vocab) {
    for (int32_t i = 0; i < NTOK; i++) toks[i] = (i * 7 + 3) % vocab;
}

START_TEST(forward_matches_reference) {
    model_t *m = make_moe(shapes[_i]);
    backend_t *b;
    fwd_t *f = new_fwd(&b, m);
    int32_t V = m->cfg.vocab, toks[NTOK];
    batch_tokens(toks, V);
    float *got = malloc(sizeof *got * (size_t)NTOK * V);
    double *want = malloc(sizeof *want * (size_t)V);
    run_tokens(f, toks, NTOK, got);
    for (int32_t i = 0; i < NTOK; i++) {
        ref_logits(m, toks[i], want);
        double e = rel_err(got + (size_t)i * V, want, V);
        ck_assert_msg(e < TOL, "shape %d, token %d: relative error %g", _i, i, e);
    }
    free(got), free(want);
    fwd_free(f);
    b->destroy(b);
    model_free(m);
}
END_TEST

START_TEST(a_token_alone_equals_it_in_a_batch) {
    model_t *m = make_moe(shapes[_i]);
    backend_t *b;
    fwd_t *f = new_fwd(&b, m);
    int32_t V = m->cfg.vocab, toks[NTOK];
    batch_tokens(toks, V);
    float *all = malloc(sizeof *all * (size_t)NTOK * V), *one = malloc(sizeof *one * (size_t)V);
    run_tokens(f, toks, NTOK, all);
    for (int32_t i = 0; i < NTOK; i++) {
        run_tokens(f, toks + i, 1, one);
        ck_assert_msg(memcmp(one, all + (size_t)i * V, sizeof *one * (size_t)V) == 0,
                      "shape %d: token %d's logits differ alone and in the batch", _i, i);
    }
    free(all), free(one);
    fwd_free(f);
    b->destroy(b);
    model_free(m);
}
END_TEST

START_TEST(cpu_ops_match_plain_loops) {
    char err[256];
    backend_t *b = backend_new("cpu", NULL, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    enum { N = 9, DIM = 13, K = 3, R = N * K };
    float x[N * DIM], y[R * DIM], base[N * DIM], w[R], got[N * DIM], want[N * DIM];
    int32_t rows[5] = {7, 0, 7, 3, 8}, src[R];
    fill(x, N * DIM, 1, 0);
    fill(y, R * DIM, 1, 0);
    fill(base, N * DIM, 1, 0);
    fill(w, R, 1, 0);
    for (int i = 0; i < R; i++) src[i] = (i * 5 + 2) % R;
    void *dx = b->alloc(b, BK_ACT, N * DIM), *dy = b->alloc(b, BK_ACT, R * DIM);
    void *db = b->alloc(b, BK_ACT, N * DIM), *dout = b->alloc(b, BK_ACT, N * DIM);
    ck_assert(dx && dy && db && dout);
    ck_assert_int_eq(b->upload(b, dx, x, sizeof x), 0);
    ck_assert_int_eq(b->upload(b, dy, y, sizeof y), 0);
    ck_assert_int_eq(b->upload(b, db, base, sizeof base), 0);
    ck_assert_int_eq(b->gather_idx(b, dout, dx, DIM, rows, 5), 0);
    ck_assert_int_eq(b->download_f32(b, got, dout, BK_ACT, 5 * DIM), 0);
    for (int i = 0; i < 5; i++)
        ck_assert(memcmp(got + i * DIM, x + rows[i] * DIM, sizeof(float) * DIM) == 0);
    for (int with_base = 0; with_base < 2; with_base++) {
        ck_assert_int_eq(b->moe_combine(b, dout, dy, with_base ? db : NULL, src, w, N, K, DIM), 0);
        ck_assert_int_eq(b->download_f32(b, got, dout, BK_ACT, N * DIM), 0);
        for (int t = 0; t < N; t++)
            for (int i = 0; i < DIM; i++) {
                float acc = with_base ? base[t * DIM + i] : 0.0f;
                for (int j = 0; j < K; j++) acc += w[t * K + j] * y[src[t * K + j] * DIM + i];
                want[t * DIM + i] = acc;
            }
        for (int i = 0; i < N * DIM; i++)
            ck_assert_msg(fabsf(got[i] - want[i]) <= 1e-6f * (1 + fabsf(want[i])),
                          "combine (base %d) element %d: %g, want %g", with_base, i, got[i],
                          want[i]);
    }
    b->release(b, dx), b->release(b, dy), b->release(b, db), b->release(b, dout);
    b->destroy(b);
}
END_TEST

/* A tiny MoE preset file: 3 layers, the first dense, 6 experts top 2, a shared expert. */
static const char *preset_file(char *buf, size_t len) {
    return testutil_write_tmp(buf, len, ".model",
                              "name = tiny-moe\nn_layers = 3\nd_model = 32\nn_heads = 4\n"
                              "n_kv_heads = 2\nd_ff = 48\nvocab = 50\nmax_seq = 32\n"
                              "n_experts = 6\nexperts_per_tok = 2\nmoe_d_ff = 24\n"
                              "n_dense_layers = 1\nshared_d_ff = 16\n");
}

static void logits_of(const model_t *m, const int32_t *toks, float *out) {
    backend_t *b;
    fwd_t *f = new_fwd(&b, m);
    run_tokens(f, toks, NTOK, out);
    fwd_free(f);
    b->destroy(b);
}

START_TEST(dummy_preset_host_device_and_gguf_agree) {
    char path[64], spec[80], gg[64], err[512];
    ck_assert_ptr_nonnull(preset_file(path, sizeof path));
    snprintf(spec, sizeof spec, "dummy:%s", path);
    model_t *host, *shape, *file;
    ck_assert_msg(model_open(spec, 7, 0, &host, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_open(spec, 7, MODEL_SHAPE_ONLY, &shape, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(host->cfg.n_experts, 6);
    ck_assert_int_eq(host->cfg.n_dense_layers, 1);
    ck_assert_ptr_null(host->layers[0].router);
    ck_assert_ptr_nonnull(host->layers[2].sh_w2);
    int32_t toks[NTOK];
    batch_tokens(toks, 50);
    size_t nl = (size_t)NTOK * 50;
    float *a = malloc(sizeof *a * nl), *s = malloc(sizeof *s * nl), *g = malloc(sizeof *g * nl);
    double *want = malloc(sizeof *want * 50);
    logits_of(host, toks, a);
    logits_of(shape, toks, s);
    ck_assert_msg(memcmp(a, s, sizeof *a * nl) == 0, "shape-only dummy differs from host dummy");
    ref_logits(host, toks[5], want);
    ck_assert_double_lt(rel_err(a + 5 * 50, want, 50), TOL);
    /* quantize writes llama.cpp's layout; F32 loads back to the same weights */
    quant_opts_t qo = {.type = DQ_F32, .seed = 7};
    quant_report_t qr;
    ck_assert_ptr_nonnull(testutil_tmpfile(gg, sizeof gg, ".gguf"));
    ck_assert_msg(quant_write(spec, gg, &qo, &qr, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_open(gg, 0, 0, &file, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(file->cfg.n_experts, 6);
    ck_assert_int_eq(file->cfg.experts_per_tok, 2);
    ck_assert_int_eq(file->cfg.moe_hidden, 24);
    ck_assert_int_eq(file->cfg.n_dense_layers, 1);
    ck_assert_int_eq(file->cfg.shared_hidden, 16);
    logits_of(file, toks, g);
    ck_assert_msg(memcmp(a, g, sizeof *a * nl) == 0, "the GGUF copy differs from the dummy");
    model_free(file);
    /* a lazily loaded Q8_0 copy runs too (stored-type experts, sliced per expert) */
    qo.type = DQ_Q8_0;
    ck_assert_msg(quant_write(spec, gg, &qo, &qr, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_open(gg, 0, MODEL_LAZY, &file, err, sizeof err) == 0, "%s", err);
    logits_of(file, toks, g);
    double d = 0, r = 0;
    for (size_t i = 0; i < nl; i++) d += (g[i] - a[i]) * (g[i] - a[i]), r += a[i] * a[i];
    ck_assert_msg(sqrt(d / r) < 0.05, "Q8_0 copy: relative error %g", sqrt(d / r));
    model_free(file);
    free(a), free(s), free(g), free(want);
    model_free(host);
    model_free(shape);
    unlink(gg);
    unlink(path);
}
END_TEST

START_TEST(moe_presets_with_latent_attention_or_windows_are_refused) {
    char err[512];
    model_t *m;
    ck_assert_int_eq(model_open("dummy:deepseek-v3", 1, MODEL_SHAPE_ONLY, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "latent attention") != NULL, "%s", err);
    ck_assert_int_eq(model_open("dummy:gpt-oss-20b", 1, MODEL_SHAPE_ONLY, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "sliding window") != NULL, "%s", err);
    /* a plain MoE preset's shape loads (its weights would not fit on the host) */
    ck_assert_msg(model_open("dummy:mixtral-8x7b", 1, MODEL_SHAPE_ONLY, &m, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(m->cfg.n_experts, 8);
    ck_assert_int_eq(m->cfg.experts_per_tok, 2);
    ck_assert_double_gt(model_params(&m->cfg), 46e9);
    model_free(m);
}
END_TEST

/* A minimal llama GGUF header with experts: enough for read_config to reach the layout. */
static void minimal_moe(gguf_writer_t *w, int expert_count, const float *data) {
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "llama.embedding_length", 32);
    gguf_w_u32(w, "llama.block_count", 1);
    gguf_w_u32(w, "llama.feed_forward_length", 32);
    gguf_w_u32(w, "llama.attention.head_count", 4);
    gguf_w_u32(w, "llama.context_length", 64);
    if (expert_count) {
        gguf_w_u32(w, "llama.expert_count", (uint32_t)expert_count);
        gguf_w_u32(w, "llama.expert_used_count", 2);
    }
    gguf_w_tensor(w, "token_embd.weight", 32, 16, DQ_F32, data);
    gguf_w_tensor(w, "blk.0.ffn_gate_inp.weight", 32, 4, DQ_F32, data);
}

static void expect_refused(gguf_writer_t *w, const char *needle) {
    char path[64], err[512];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    ck_assert_msg(gguf_w_write(w, path) == 0, "%s", gguf_w_errmsg(w));
    model_t *m = NULL;
    ck_assert_int_eq(model_open(path, 0, 0, &m, err, sizeof err), -1);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, needle) != NULL, "want \"%s\" in: %s", needle, err);
    ck_assert_msg(strstr(err, path) != NULL, "the message names the file: %s", err);
    gguf_w_free(w);
    unlink(path);
}

START_TEST(gguf_unsupported_layouts_are_refused) {
    static float data[32 * 32 * 4];
    gguf_writer_t *w = gguf_w_new();
    minimal_moe(w, 4, data);   /* experts one 2-D tensor each: llama.cpp's older files */
    gguf_w_tensor(w, "blk.0.ffn_gate.0.weight", 32, 32, DQ_F32, data);
    expect_refused(w, "blk.0.ffn_gate.0.weight");
    w = gguf_w_new();
    minimal_moe(w, 4, data);   /* Qwen2-MoE's gated shared expert */
    gguf_w_tensor3(w, "blk.0.ffn_gate_exps.weight", 32, 8, 4, DQ_F32, data);
    gguf_w_tensor(w, "blk.0.ffn_gate_inp_shexp.weight", 32, 0, DQ_F32, data);
    expect_refused(w, "blk.0.ffn_gate_inp_shexp.weight");
    w = gguf_w_new();
    minimal_moe(w, 0, data);   /* a router, no expert count */
    expect_refused(w, "blk.0.ffn_gate_inp.weight");
    w = gguf_w_new();
    minimal_moe(w, 1, data);   /* one expert is not a mixture */
    gguf_w_tensor3(w, "blk.0.ffn_gate_exps.weight", 32, 8, 1, DQ_F32, data);
    expect_refused(w, "n_experts = 1");
}
END_TEST

START_TEST(config_checks_name_the_field) {
    char err[256];
    model_config_t c = shapes[0];
    c.max_seq = 16, c.rope_theta = 10000, c.norm_eps = 1e-5f;
    ck_assert_int_eq(model_config_check(&c, "f", err, sizeof err), 0);
    c.experts_per_tok = 5;
    ck_assert_int_eq(model_config_check(&c, "f", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "experts_per_tok = 5") != NULL, "%s", err);
    c.experts_per_tok = 2, c.n_dense_layers = 2;
    ck_assert_int_eq(model_config_check(&c, "f", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "n_dense_layers = 2") != NULL, "%s", err);
    c.n_dense_layers = 0, c.n_experts = 0;
    ck_assert_int_eq(model_config_check(&c, "f", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "without experts") != NULL, "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("moe");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, forward_matches_reference, 0, 3);
    tcase_add_loop_test(tc, a_token_alone_equals_it_in_a_batch, 0, 3);
    tcase_add_test(tc, cpu_ops_match_plain_loops);
    tcase_add_test(tc, dummy_preset_host_device_and_gguf_agree);
    tcase_add_test(tc, moe_presets_with_latent_attention_or_windows_are_refused);
    tcase_add_test(tc, gguf_unsupported_layouts_are_refused);
    tcase_add_test(tc, config_checks_name_the_field);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

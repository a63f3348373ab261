/* test_model: the llama2.c and GGUF copies of stories260K hold the same weights; dummy
 * weights are deterministic in the seed and shaped like the preset; configuration checks;
 * llama2.c files that are short, absurd or unshared. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/dequant.h"
#include "engine/model.h"
#include "engine/quantize.h"
#include "sim/presets.h"
#include "tests/testutil.h"

static void assert_same(const float *a, const float *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) /* not ck_assert: it writes its location on every call */
            ck_abort_msg("%s[%zu]: %g != %g", what, i, (double)a[i], (double)b[i]);
}

/* The one resolver: a GGUF's shape from its header (the matrices' type as the weight
 * format, nothing dequantised), the other names through the presets. */
START_TEST(test_shape_resolve) {
    char path[64], err[512], note[256];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    const uint32_t types[] = {DQ_Q4_0, DQ_Q8_0, DQ_F16, DQ_F32};
    const char *names[] = {"q4_0", "q8_0", "bf16", "bf16"};
    preset_model_t want, got;
    ck_assert(preset_model_get("stories260k", &want, err, sizeof err) == 0);
    for (int k = 0; k < 4; k++) {
        quant_opts_t o = {.type = types[k], .seed = 1};
        quant_report_t r;
        ck_assert_msg(quant_write("dummy:stories260k", path, &o, &r, err, sizeof err) == 0,
                      "%s", err);
        ck_assert(model_is_gguf(path));
        ck_assert_msg(model_shape_resolve(path, &got, note, sizeof note, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(got.n_layers, want.n_layers);
        ck_assert_int_eq(got.d_model, want.d_model);
        ck_assert_int_eq(got.n_heads, want.n_heads);
        ck_assert_int_eq(got.n_kv_heads, want.n_kv_heads);
        ck_assert_int_eq(got.d_ff, want.d_ff);
        ck_assert_int_eq(got.vocab, want.vocab);
        ck_assert_str_eq(preset_model_format_name(&got), names[k]);
        ck_assert_int_eq(got.dtype_bytes, types[k] == DQ_F32 ? 4 : 2);
        ck_assert_str_eq(note, "");
    }
    unlink(path);
    ck_assert(model_shape_resolve("llama-2-7b", &got, NULL, 0, err, sizeof err) == 0);
    ck_assert_int_eq(got.n_layers, 32);
    ck_assert(!model_is_gguf("llama-2-7b") && !model_is_gguf("/"));
    ck_assert_int_eq(model_shape_resolve("no-such-model", &got, NULL, 0, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "no-such-model"));
}
END_TEST

/* Both copies of stories260K: the GGUF file is all F32 (checked), so the weights are equal
 * bit for bit; it stores the shared classifier as a separate output.weight. */
START_TEST(test_bin_equals_gguf) {
    char pb[512], pg[512], err[512];
    if (!testutil_data_path("models/stories260K.bin", pb, sizeof pb) ||
        !testutil_data_path("models/stories260K.gguf", pg, sizeof pg))
        return;
    model_t *b, *g;
    ck_assert_msg(model_load(pb, 0, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_load(pg, 0, &g, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(b->format, "llama2c");
    ck_assert_str_eq(g->format, "gguf");
    ck_assert_str_eq(g->weight_type, "F32");
    const model_config_t *cb = &b->cfg, *cg = &g->cfg;
    ck_assert(cb->dim == 64 && cb->hidden_dim == 172 && cb->n_layers == 5 && cb->n_heads == 8 &&
              cb->n_kv_heads == 4 && cb->vocab == 512 && cb->max_seq == 512 &&
              cb->head_dim == 8 && cb->tied == 1 && b->lm_head == b->tok_emb);
    ck_assert(cg->dim == 64 && cg->hidden_dim == 172 && cg->n_layers == 5 && cg->n_heads == 8 &&
              cg->n_kv_heads == 4 && cg->vocab == 512 && cg->head_dim == 8 && cg->tied == 0);
    ck_assert_float_eq(cb->rope_theta, 10000.0f);
    ck_assert_float_eq(cg->rope_theta, 10000.0f);
    ck_assert_float_eq_tol(cg->norm_eps, 1e-5f, 1e-12f);
    ck_assert(model_params(cb) == 260032.0);
    ck_assert(model_params(cg) == 260032.0 + 512 * 64);
    size_t d = 64, hid = 172, kv = 32;
    assert_same(b->tok_emb, g->tok_emb, 512 * d, "tok_emb");
    assert_same(b->tok_emb, g->lm_head, 512 * d, "lm_head");
    assert_same(b->final_norm, g->final_norm, d, "final_norm");
    for (int l = 0; l < 5; l++) {
        model_layer_t *x = &b->layers[l], *y = &g->layers[l];
        assert_same(x->attn_norm, y->attn_norm, d, "attn_norm");
        assert_same(x->wq, y->wq, d * d, "wq");
        assert_same(x->wk, y->wk, kv * d, "wk");
        assert_same(x->wv, y->wv, kv * d, "wv");
        assert_same(x->wo, y->wo, d * d, "wo");
        assert_same(x->ffn_norm, y->ffn_norm, d, "ffn_norm");
        assert_same(x->w1, y->w1, hid * d, "w1");
        assert_same(x->w2, y->w2, d * hid, "w2");
        assert_same(x->w3, y->w3, hid * d, "w3");
    }
    model_free(b);
    model_free(g);
}
END_TEST

START_TEST(test_dummy_deterministic) {
    char err[512];
    model_t *a, *b, *c;
    ck_assert_msg(model_load("dummy:stories260k", 7, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_load_dummy("stories260k", 7, 0, &b, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_load_dummy("stories260k", 8, 0, &c, err, sizeof err) == 0, "%s", err);
    size_t n = (size_t)model_params(&a->cfg);
    ck_assert(memcmp(a->arena, b->arena, n * sizeof(float)) == 0);
    ck_assert(memcmp(a->arena, c->arena, n * sizeof(float)) != 0);
    ck_assert_str_eq(a->source, "dummy:stories260k");
    ck_assert_str_eq(a->format, "dummy");
    /* Matrices: uniform in [-a, a], standard deviation 0.02; norms 1. */
    double s = 0, s2 = 0;
    size_t nw = 0;
    for (int l = 0; l < a->cfg.n_layers; l++)
        for (int i = 0; i < a->cfg.dim; i++)
            if (a->layers[l].attn_norm[i] != 1.0f || a->layers[l].ffn_norm[i] != 1.0f)
                ck_abort_msg("norm weight %d of layer %d is not 1", i, l);
    for (size_t i = 0; i < (size_t)a->cfg.vocab * a->cfg.dim; i++, nw++) {
        float v = a->tok_emb[i];
        if (fabsf(v) > 0.0346411f) ck_abort_msg("tok_emb[%zu] = %g", i, (double)v);
        s += v;
        s2 += (double)v * v;
    }
    ck_assert_double_eq_tol(s / nw, 0.0, 1e-3);
    ck_assert_double_eq_tol(sqrt(s2 / nw), 0.02, 5e-4);
    ck_assert(a->final_norm[0] == 1.0f && a->final_norm[a->cfg.dim - 1] == 1.0f);
    model_free(a);
    model_free(b);
    model_free(c);
}
END_TEST

/* Every built-in preset small enough for a test maps onto the model's shape. */
START_TEST(test_dummy_shapes) {
    char err[512];
    const char *names[] = {"stories260k", "smollm2-135m"};
    for (int k = 0; k < 2; k++) {
        const preset_model_t *p = preset_model_find(names[k]);
        ck_assert_ptr_nonnull(p);
        model_t *m;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ck_assert_msg(model_load_dummy(names[k], 1, 0, &m, err, sizeof err) == 0, "%s", err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
        fprintf(stderr, "dummy:%s: %.0f parameters (%.2f GB fp32) in %.3f s\n", names[k],
                model_params(&m->cfg), model_params(&m->cfg) * 4 / 1e9, secs);
        ck_assert(secs < 5.0);
        const model_config_t *c = &m->cfg;
        ck_assert(c->dim == p->d_model && c->n_layers == p->n_layers && c->n_heads == p->n_heads &&
                  c->n_kv_heads == p->n_kv_heads && c->head_dim == p->head_dim &&
                  c->hidden_dim == p->d_ff && c->vocab == p->vocab && c->max_seq == p->max_seq &&
                  c->tied == p->tied_embeddings);
        ck_assert(model_params(c) == preset_model_params(p));
        ck_assert((m->lm_head == m->tok_emb) == (c->tied == 1));
        /* The last weight is written (no hole at the end of the arena). */
        float last = m->layers[c->n_layers - 1].w3[(size_t)c->hidden_dim * c->dim - 1];
        ck_assert(last != 0.0f && fabsf(last) < 0.04f);
        model_free(m);
    }
}
END_TEST

START_TEST(test_dummy_errors) {
    char err[512], path[256];
    model_t *m = (model_t *)1;
    ck_assert_int_eq(model_load("dummy:no-such-model", 1, &m, err, sizeof err), -1);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, "no-such-model") != NULL, "%s", err);
    /* 276 GB of fp32: refused before allocating, naming the model. */
    ck_assert_int_eq(model_load("dummy:llama-2-70b", 1, &m, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dummy:llama-2-70b") && strstr(err, "memory"), "%s", err);
    /* A preset file of our own, with untied embeddings. */
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".model",
        "name = tiny\nn_layers = 2\nd_model = 32\nn_heads = 4\nn_kv_heads = 2\nd_ff = 48\n"
        "vocab = 40\nmax_seq = 64\ntied_embeddings = 0\n"));
    char spec[300];
    snprintf(spec, sizeof spec, "dummy:%s", path);
    ck_assert_msg(model_load(spec, 3, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(m->cfg.dim == 32 && m->cfg.head_dim == 8 && m->cfg.tied == 0);
    ck_assert(m->lm_head != m->tok_emb && m->lm_head[40 * 32 - 1] != 0.0f);
    model_free(m);
    unlink(path);
}
END_TEST

START_TEST(test_config_check) {
    char err[256];
    model_config_t ok = {.dim = 64, .n_layers = 2, .n_heads = 8, .n_kv_heads = 4, .head_dim = 8,
                         .hidden_dim = 100, .vocab = 32, .max_seq = 16, .rope_theta = 1e4f,
                         .norm_eps = 1e-5f, .tied = 1};
    ck_assert_int_eq(model_config_check(&ok, "x.bin", err, sizeof err), 0);
    model_config_t c;
#define BAD(stmt, needle)                                                                    \
    do {                                                                                     \
        c = ok;                                                                              \
        stmt;                                                                                \
        ck_assert_int_eq(model_config_check(&c, "x.bin", err, sizeof err), -1);             \
        ck_assert_msg(strstr(err, "x.bin") && strstr(err, needle), "%s", err);              \
    } while (0)
    BAD(c.dim = 0, "dim");
    BAD(c.dim = -64, "dim");
    BAD(c.n_layers = 1 << 30, "n_layers");
    BAD(c.n_heads = 6, "multiple");
    BAD(c.n_kv_heads = 16, "multiple");
    BAD(c.n_kv_heads = 0, "n_kv_heads");
    BAD(c.head_dim = 7, "odd");
    BAD(c.hidden_dim = 0, "hidden_dim");
    BAD(c.vocab = 1 << 30, "vocab");
    BAD(c.max_seq = 0, "max_seq");
    BAD(c.rope_theta = NAN, "rope_theta");
    BAD(c.norm_eps = 0, "norm_eps");
    BAD(c.tied = 2, "tied");
#undef BAD
    /* head_dim * n_heads need not equal dim. */
    c = ok;
    c.head_dim = 16;
    ck_assert_int_eq(model_config_check(&c, "x.bin", err, sizeof err), 0);
}
END_TEST

/* A tiny llama2.c file: dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 10, seq 4;
 * float k of the payload holds k. */
static const char *write_tiny_bin(char *path, size_t len, int32_t vocab_field, size_t floats) {
    if (!testutil_tmpfile(path, len, ".bin")) return NULL;
    FILE *f = fopen(path, "wb");
    int32_t h[7] = {8, 16, 1, 2, 1, vocab_field, 4};
    fwrite(h, 4, 7, f);
    for (size_t k = 0; k < floats; k++) {
        float v = (float)k;
        fwrite(&v, 4, 1, f);
    }
    fclose(f);
    return path;
}

START_TEST(test_llama2c_unshared) {
    char path[256], err[512];
    /* body: 80 + 8 + 64 + 32 + 32 + 64 + 8 + 128*3 + 8 = 680; rope: 2 * 4 * 4 / 2 = 16 */
    size_t body = 680, rope = 16, cls = 80;
    write_tiny_bin(path, sizeof path, -10, body + rope + cls);
    model_t *m;
    ck_assert_msg(model_load(path, 0, &m, err, sizeof err) == 0, "%s", err);
    ck_assert(m->cfg.vocab == 10 && m->cfg.tied == 0 && m->cfg.head_dim == 4);
    ck_assert(model_body_floats(&m->cfg) == body);
    ck_assert(m->tok_emb[0] == 0.0f && m->layers[0].attn_norm[0] == 80.0f);
    ck_assert(m->layers[0].wq[0] == 88.0f && m->layers[0].w3[127] == 671.0f);
    ck_assert(m->final_norm[7] == 679.0f);
    ck_assert(m->lm_head[0] == (float)(body + rope) && m->lm_head[79] == (float)(body + rope + 79));
    model_free(m);
    /* The same file one float short: the message names the classifier. */
    write_tiny_bin(path, sizeof path, -10, body + rope + cls - 1);
    m = (model_t *)1;
    ck_assert_int_eq(model_load(path, 0, &m, err, sizeof err), -1);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, path) && strstr(err, "wcls"), "%s", err);
    unlink(path);
}
END_TEST

/* stories260K.bin cut at many lengths: every one is an error naming the file (and, past
 * the header, what is missing); never a crash. */
START_TEST(test_llama2c_truncated) {
    char src[512], path[256], err[512];
    if (!testutil_data_path("models/stories260K.bin", src, sizeof src)) return;
    FILE *f = fopen(src, "rb");
    static char data[1 << 21];
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    ck_assert(n == 1056540);
    testutil_tmpfile(path, sizeof path, ".bin");
    size_t cuts[] = {0, 1, 3, 4, 27, 28, 29, 1000, 131100, 131101, 200000, 500000, 1040155,
                     1040156, 1056539};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        f = fopen(path, "wb");
        fwrite(data, 1, cuts[k], f);
        fclose(f);
        model_t *m = (model_t *)1;
        ck_assert_int_eq(model_load_llama2c(path, &m, err, sizeof err), -1);
        ck_assert_ptr_null(m);
        ck_assert_msg(strstr(err, path) != NULL, "cut %zu: %s", cuts[k], err);
        if (cuts[k] >= 28)
            ck_assert_msg(strstr(err, "missing from"), "cut %zu: %s", cuts[k], err);
    }
    /* Cut inside the RoPE tables (the weights are complete, but the file is not). */
    ck_assert_int_eq(model_load_llama2c(path, &(model_t *){NULL}, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "RoPE"), "%s", err);
    /* Absurd header fields. */
    int32_t bad[][7] = {{64, 172, 5, 8, 4, 512, 0},    {0, 172, 5, 8, 4, 512, 512},
                        {64, 172, 5, 7, 4, 512, 512},  {64, 172, 5, 8, 3, 512, 512},
                        {64, 172, -5, 8, 4, 512, 512}, {1 << 30, 172, 5, 8, 4, 512, 512},
                        {64, 172, 5, 8, 4, INT32_MIN, 512}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(data, bad[k], 28);
        f = fopen(path, "wb");
        fwrite(data, 1, n, f);
        fclose(f);
        ck_assert_int_eq(model_load(path, 0, &(model_t *){NULL}, err, sizeof err), -1);
        ck_assert_msg(strstr(err, path) && strstr(err, "llama2.c header"), "case %zu: %s", k,
                      err);
    }
    unlink(path);
    ck_assert_int_eq(model_load("/nonexistent/model.bin", 0, &(model_t *){NULL}, err, sizeof err),
                     -1);
    ck_assert_msg(strstr(err, "/nonexistent/model.bin"), "%s", err);
    ck_assert_int_eq(model_load("", 0, &(model_t *){NULL}, err, sizeof err), -1);
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_bin_equals_gguf);
    tcase_add_test(tc, test_shape_resolve);
    tcase_add_test(tc, test_dummy_deterministic);
    tcase_add_test(tc, test_dummy_shapes);
    tcase_add_test(tc, test_dummy_errors);
    tcase_add_test(tc, test_config_check);
    tcase_add_test(tc, test_llama2c_unshared);
    tcase_add_test(tc, test_llama2c_truncated);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(model_suite());
}

/* test_quantize: the round-to-nearest quantisers (hand-computed blocks, error bounds, a
 * block made by the quantiser comes back unchanged through dequantise + quantise), the
 * GGUF writer read back by our reader, and quant_write: a dummy model written in every
 * type loads through model_load with each matrix equal to its own quantised values, norms
 * F32, F16 for rows that are not whole blocks, the tokenizer carried over (stories260K),
 * and bad input refused with a message naming it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "engine/dequant.h"
#include "engine/forward.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/quantize.h"
#include "engine/tokenizer.h"
#include "tests/testutil.h"

START_TEST(test_quantize_blocks) {
    float x[32], y[32];
    uint8_t q[34];
    for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) / 4;   /* -4 .. 3.75 */
    /* Q8_0: d = 4 / 127; -4 is -127 exactly, every value within d / 2 */
    ck_assert_int_eq(dq_quantize(DQ_Q8_0, x, q, 32), 0);
    ck_assert_int_eq((int8_t)q[2], -127);
    ck_assert_uint_eq(q[0] | (q[1] << 8), dq_f32_to_f16(4.0f / 127));
    dq_convert(DQ_Q8_0, q, y, 32);
    float d8 = dq_f16_to_f32(dq_f32_to_f16(4.0f / 127));
    for (int j = 0; j < 32; j++) ck_assert(fabsf(x[j] - y[j]) <= d8 / 2 + 1e-6f);
    /* Q4_0: the largest magnitude is -4, so d = 0.5 and -4 is q = 0; values on the grid
     * of 0.5 are exact, 3.75 clamps to q = 15 (3.5) */
    ck_assert_int_eq(dq_quantize(DQ_Q4_0, x, q, 32), 0);
    ck_assert_uint_eq(q[0] | (q[1] << 8), dq_f32_to_f16(0.5f));
    ck_assert_uint_eq(q[2] & 0x0f, 0);
    dq_convert(DQ_Q4_0, q, y, 32);
    for (int j = 0; j < 31; j++) ck_assert(fabsf(x[j] - y[j]) <= 0.25f);
    ck_assert(y[31] == 3.5f && y[0] == -4.0f && y[2] == -3.5f);
    /* an all-zero block: scale 0, no division by it */
    memset(x, 0, sizeof x);
    ck_assert_int_eq(dq_quantize(DQ_Q4_0, x, q, 32), 0);
    dq_convert(DQ_Q4_0, q, y, 32);
    for (int j = 0; j < 32; j++) ck_assert(y[j] == 0.0f);
    ck_assert_int_eq(dq_quantize(9 /* Q8_1 */, x, q, 32), -1);
}
END_TEST

/* A block made by the quantiser is a fixed point of dequantise + quantise, for every type:
 * what lets `quantize` turn a quantised file into the same type unchanged. */
START_TEST(test_quantize_fixed_point) {
    const uint32_t types[] = {DQ_F32, DQ_F16, DQ_BF16, DQ_Q8_0, DQ_Q4_0};
    enum { N = 32 * 64 };
    static float x[N], y[N];
    static uint8_t a[N * 4], b[N * 4];
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = ((float)(s >> 40) / (float)(1 << 24) - 0.5f) * (i % 7 + 1);
    }
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        uint64_t bytes;
        ck_assert_int_eq(dq_bytes(types[t], N, &bytes), 0);
        dq_quantize(types[t], x, a, N);
        dq_convert(types[t], a, y, N);
        dq_quantize(types[t], y, b, N);
        if (memcmp(a, b, bytes) != 0) ck_abort_msg("%s is not a fixed point", dq_type_name(types[t]));
    }
}
END_TEST

START_TEST(test_writer_round_trip) {
    char path[64];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    gguf_writer_t *w = gguf_w_new();
    const char *strs[] = {"a", "bc"};
    uint32_t lens[] = {1, 2};
    int32_t nums[] = {7, -3};
    float t0[64], t1[3] = {1, 2, 3};
    uint8_t q8[2 * 34];
    for (int i = 0; i < 64; i++) t0[i] = (float)i;
    dq_quantize(DQ_Q8_0, t0, q8, 64);
    gguf_w_u32(w, "k.u32", 42);
    gguf_w_f32(w, "k.f32", 0.5f);
    gguf_w_str(w, "k.str", "hello");
    gguf_w_arr_str(w, "k.strs", strs, lens, 2);
    gguf_w_arr_num(w, "k.nums", GGUF_I32, nums, 2);
    gguf_w_tensor(w, "q", 32, 2, DQ_Q8_0, q8);
    gguf_w_tensor(w, "v", 3, 0, DQ_F32, t1);
    ck_assert_int_eq(gguf_w_write(w, path), 0);
    gguf_w_free(w);
    gguf_t *g;
    char err[512];
    ck_assert_msg(gguf_open(path, &g, err, sizeof err) == 0, "%s", err);
    int64_t v;
    double f;
    char s[16];
    ck_assert(gguf_get_int(g, "k.u32", &v, err, sizeof err) == 1 && v == 42);
    ck_assert(gguf_get_float(g, "k.f32", &f, err, sizeof err) == 1 && f == 0.5);
    ck_assert(gguf_get_str(g, "k.str", s, sizeof s, err, sizeof err) == 1 && !strcmp(s, "hello"));
    const gguf_kv_t *kv = gguf_find(g, "k.strs");
    gguf_str_t out[2];
    ck_assert(kv && kv->arr_n == 2);
    gguf_arr_strings(kv, out);
    ck_assert(out[1].len == 2 && !memcmp(out[1].p, "bc", 2));
    ck_assert(gguf_arr_num(gguf_find(g, "k.nums"), 1) == -3);
    const gguf_tensor_t *q = gguf_tensor(g, "q"), *tv = gguf_tensor(g, "v");
    ck_assert(q && q->type == DQ_Q8_0 && q->ne[0] == 32 && q->ne[1] == 2 && q->n_dims == 2);
    ck_assert(!memcmp(q->data, q8, sizeof q8) && q->offset % GGUF_W_ALIGN == 0);
    ck_assert(tv && tv->n_dims == 1 && !memcmp(tv->data, t1, sizeof t1));
    /* a copy of every key into a second file reads back the same */
    char path2[64];
    ck_assert_ptr_nonnull(testutil_tmpfile(path2, sizeof path2, ".gguf"));
    w = gguf_w_new();
    for (uint64_t i = 0; i < g->n_kv; i++) gguf_w_copy(w, &g->kv[i]);
    ck_assert_int_eq(gguf_w_write(w, path2), 0);
    gguf_w_free(w);
    gguf_t *g2;
    ck_assert_msg(gguf_open(path2, &g2, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(g2->n_kv, g->n_kv);
    ck_assert(gguf_get_str(g2, "k.str", s, sizeof s, err, sizeof err) == 1 && !strcmp(s, "hello"));
    gguf_arr_strings(gguf_find(g2, "k.strs"), out);
    ck_assert(out[0].len == 1 && out[0].p[0] == 'a');
    gguf_close(g2);
    gguf_close(g);
    /* errors are kept and reported by the write: rows that are not whole blocks, twice a name */
    w = gguf_w_new();
    gguf_w_tensor(w, "bad", 3, 2, DQ_Q8_0, q8);
    ck_assert_int_eq(gguf_w_write(w, path2), -1);
    ck_assert_ptr_nonnull(strstr(gguf_w_errmsg(w), "bad"));
    gguf_w_free(w);
    w = gguf_w_new();
    gguf_w_tensor(w, "v", 3, 0, DQ_F32, t1);
    gguf_w_tensor(w, "v", 3, 0, DQ_F32, t1);
    ck_assert_int_eq(gguf_w_write(w, path2), -1);
    ck_assert_ptr_nonnull(strstr(gguf_w_errmsg(w), "twice"));
    gguf_w_free(w);
    unlink(path);
    unlink(path2);
}
END_TEST

/* Each matrix of `q` equals dq(quantize(type, the same matrix of `ref`)), or F16's when its
 * rows are not whole blocks; the norms are ref's exactly. */
static void check_matrix(const float *ref, const float *got, uint64_t rows, uint64_t cols,
                         uint32_t type, const char *what) {
    uint64_t n = rows * cols, bytes;
    if (cols % 32 != 0 && type != DQ_F32 && type != DQ_F16 && type != DQ_BF16) type = DQ_F16;
    ck_assert_int_eq(dq_bytes(type, n, &bytes), 0);
    uint8_t *q = malloc(bytes);
    float *want = malloc(n * sizeof *want);
    dq_quantize(type, ref, q, n);
    dq_convert(type, q, want, n);
    if (memcmp(want, got, n * sizeof *got) != 0) ck_abort_msg("%s differs (%s)", what, dq_type_name(type));
    free(q);
    free(want);
}

START_TEST(test_quant_write_dummy) {
    const uint32_t types[] = {DQ_F32, DQ_F16, DQ_BF16, DQ_Q8_0, DQ_Q4_0};
    char err[1024], path[64];
    model_t *ref, *m;
    ck_assert_msg(model_load("dummy:stories260k", 7, &ref, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    const model_config_t *c = &ref->cfg;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        quant_opts_t o = {.type = types[t], .seed = 7};
        quant_report_t r;
        ck_assert_msg(quant_write("dummy:stories260k", path, &o, &r, err, sizeof err) == 0,
                      "%s", err);
        /* stories260k: hidden 172, so ffn_down's rows (172 inputs) are not whole blocks */
        int blocks = types[t] == DQ_Q8_0 || types[t] == DQ_Q4_0;
        ck_assert_int_eq(r.n_fallback, blocks ? c->n_layers : 0);
        ck_assert_int_eq(r.n_matrices, 1 + 7 * c->n_layers);
        ck_assert_str_eq(r.tokenizer, "a placeholder (ids only: the model has none)");
        if (t == 0) {
            /* llama.cpp's loader needs a vocabulary: <unk> <s> </s>, the bytes, "[ID]";
             * our own tokenizer loader reads the file as ids only */
            gguf_t *g;
            ck_assert_msg(gguf_open(path, &g, err, sizeof err) == 0, "%s", err);
            char s[32];
            ck_assert_int_eq(gguf_get_str(g, "tokenizer.ggml.model", s, sizeof s, err,
                                          sizeof err), 1);
            ck_assert_str_eq(s, "llama");
            const gguf_kv_t *tk = gguf_find(g, "tokenizer.ggml.tokens");
            ck_assert_ptr_nonnull(tk);
            ck_assert_uint_eq(tk->arr_n, (uint64_t)c->vocab);
            gguf_str_t *v = malloc(sizeof *v * tk->arr_n);
            gguf_arr_strings(tk, v);
            ck_assert(v[1].len == 3 && !memcmp(v[1].p, "<s>", 3));
            ck_assert(v[3].len == 6 && !memcmp(v[3].p, "<0x00>", 6));
            ck_assert(v[300].len == 5 && !memcmp(v[300].p, "[300]", 5));
            free(v);
            int64_t q;
            ck_assert_int_eq(gguf_get_int(g, "general.quantization_version", &q, err,
                                          sizeof err), 1);
            ck_assert_int_eq(q, 2);
            gguf_close(g);
            tok_t *tk2 = (tok_t *)1;
            ck_assert_msg(tok_load_gguf(path, &tk2, err, sizeof err) == 0, "%s", err);
            ck_assert_ptr_null(tk2);
        }
        ck_assert_msg(model_load(path, 0, &m, err, sizeof err) == 0, "%s", err);
        ck_assert(memcmp(&m->cfg, c, sizeof *c) == 0);
        ck_assert_str_eq(m->weight_type, dq_type_name(types[t]));
        uint64_t d = (uint64_t)c->dim, h = (uint64_t)c->hidden_dim;
        uint64_t q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
        uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
        check_matrix(ref->tok_emb, m->tok_emb, (uint64_t)c->vocab, d, types[t], "tok_emb");
        for (int32_t l = 0; l < c->n_layers; l++) {
            const model_layer_t *a = &ref->layers[l], *b = &m->layers[l];
            check_matrix(a->wq, b->wq, q, d, types[t], "wq");
            check_matrix(a->wk, b->wk, kv, d, types[t], "wk");
            check_matrix(a->wv, b->wv, kv, d, types[t], "wv");
            check_matrix(a->wo, b->wo, d, q, types[t], "wo");
            check_matrix(a->w1, b->w1, h, d, types[t], "w1");
            check_matrix(a->w2, b->w2, d, h, types[t], "w2");
            check_matrix(a->w3, b->w3, h, d, types[t], "w3");
            ck_assert(!memcmp(a->attn_norm, b->attn_norm, d * 4));
            ck_assert(!memcmp(a->ffn_norm, b->ffn_norm, d * 4));
        }
        ck_assert(!memcmp(ref->final_norm, m->final_norm, d * 4));
        model_free(m);
    }
    unlink(path);
    model_free(ref);
}
END_TEST

/* The forward pass over a written file: the products read the stored type natively
 * (fwd_weight_type, fwd_weight_bytes), fp32 with --weights f32. */
START_TEST(test_forward_weight_bytes) {
    char err[1024], path[64];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    quant_opts_t o = {.type = DQ_Q8_0, .seed = 3};
    quant_report_t r;
    ck_assert_msg(quant_write("dummy:stories260k", path, &o, &r, err, sizeof err) == 0, "%s", err);
    model_t *m;
    ck_assert_msg(model_load(path, 0, &m, err, sizeof err) == 0, "%s", err);
    const model_config_t *c = &m->cfg;
    for (int f32 = 0; f32 < 2; f32++) {
        bk_opts_t bo = {.n_threads = 1, .weights = f32 ? "f32" : "native"};
        backend_t *b = backend_new("cpu", &bo, err, sizeof err);
        ck_assert_msg(b != NULL, "%s", err);
        fwd_opts_t fo = {4, 1, 8, 16};
        fwd_t *f;
        ck_assert_msg(fwd_new(b, m, &fo, &f, err, sizeof err) == 0, "%s", err);
        /* rows are padded to whole panels of 16, which the products read too: gate/up's
         * 172 rows are stored as 176 */
        double pad = 2.0 * ((c->hidden_dim + 15) / 16 * 16 - c->hidden_dim) * c->dim * c->n_layers;
        if (f32) {
            ck_assert_ptr_null(fwd_weight_type(f));
            ck_assert(fwd_weight_bytes(f) == 4 * (model_params(c) + pad));
        } else {
            ck_assert_str_eq(fwd_weight_type(f), "Q8_0");
            /* per layer: Q/K/V, O, gate/up in Q8_0 (34 bytes per 32), ffn_down F16 (rows
             * of 172 inputs), norms F32; the tied LM head in Q8_0 (the fp32 table beside
             * it is only read by embed and not counted); gate/up padded as above */
            double d = c->dim, h = c->hidden_dim, q = (double)c->n_heads * c->head_dim;
            double kv = (double)c->n_kv_heads * c->head_dim, hp = (c->hidden_dim + 15) / 16 * 16;
            double q8 = (q * d + 2 * kv * d + d * q + 2 * hp * d) * c->n_layers + c->vocab * d;
            double f16 = d * h * c->n_layers, norms = d * (2 * c->n_layers + 1);
            ck_assert_msg(fabs(fwd_weight_bytes(f) - (q8 * 34 / 32 + f16 * 2 + norms * 4)) < 1,
                          "%.0f bytes", fwd_weight_bytes(f));
        }
        fwd_free(f);
        b->destroy(b);
    }
    model_free(m);
    unlink(path);
}
END_TEST

START_TEST(test_quant_write_bad_input) {
    char err[1024], path[64];
    quant_opts_t o = {.type = DQ_Q8_0};
    quant_report_t r;
    uint32_t t;
    ck_assert_int_eq(quant_type_parse("Q4_0", &t), 0);
    ck_assert_uint_eq(t, DQ_Q4_0);
    ck_assert_int_eq(quant_type_parse("q4_k", &t), -1);
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".gguf"));
    ck_assert_int_eq(quant_write("/nonexistent/m.bin", path, &o, &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/m.bin"));
    ck_assert_int_eq(quant_write("dummy:stories260k", "/nonexistent/out.gguf", &o, &r, err,
                                 sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/out.gguf") && strstr(err, "cannot create"), "%s", err);
    o.type = 9;   /* Q8_1: readable by name, not writable */
    ck_assert_int_eq(quant_write("dummy:stories260k", path, &o, &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "Q8_1"));
    o.type = DQ_Q8_0;
    o.tokenizer = "/nonexistent/tok.bin";   /* ignored for a dummy model: it has no .bin */
    ck_assert_int_eq(quant_write("dummy:stories260k", path, &o, &r, err, sizeof err), 0);
    unlink(path);
}
END_TEST

/* The real model: a .bin carries tok512.bin over, a .gguf its own tokenizer keys; both
 * written as F32 load to the same weights as their source, and the tokenizers agree. */
START_TEST(test_quant_write_stories) {
    char bin[512], gg[512], tokp[512], err[1024], out[64], out2[64];
    if (!testutil_data_path("models/stories260K.bin", bin, sizeof bin) ||
        !testutil_data_path("models/stories260K.gguf", gg, sizeof gg) ||
        !testutil_data_path("models/tok512.bin", tokp, sizeof tokp))
        return;
    ck_assert_ptr_nonnull(testutil_tmpfile(out, sizeof out, ".gguf"));
    ck_assert_ptr_nonnull(testutil_tmpfile(out2, sizeof out2, ".gguf"));
    quant_opts_t o = {.type = DQ_F32};
    quant_report_t r;
    ck_assert_msg(quant_write(bin, out, &o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(r.tokenizer, tokp);
    ck_assert_msg(quant_write(gg, out2, &o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(strstr(r.tokenizer, "GGUF metadata"));
    model_t *a, *b;
    ck_assert_msg(model_load(bin, 0, &a, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(model_load(out, 0, &b, err, sizeof err) == 0, "%s", err);
    ck_assert(memcmp(&a->cfg, &b->cfg, sizeof a->cfg) == 0);
    ck_assert(!memcmp(a->tok_emb, b->tok_emb, model_body_floats(&a->cfg) * 4));
    model_free(a);
    model_free(b);
    tok_t *t0, *t1, *t2;
    ck_assert_msg(tok_load_llama2c(tokp, 512, &t0, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tok_load_gguf(out, &t1, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tok_load_gguf(out2, &t2, err, sizeof err) == 0, "%s", err);
    const char *text = "Once upon a time, a little girl named Lily <0x41> saw 42 birds.";
    int32_t i0[128], i1[128], i2[128], n0, n1, n2;
    ck_assert(tok_encode(t0, text, 1, 0, i0, 128, &n0, err, sizeof err) == 0);
    ck_assert(tok_encode(t1, text, 1, 0, i1, 128, &n1, err, sizeof err) == 0);
    ck_assert(tok_encode(t2, text, 1, 0, i2, 128, &n2, err, sizeof err) == 0);
    ck_assert(n0 == n1 && n0 == n2 && !memcmp(i0, i1, (size_t)n0 * 4) &&
              !memcmp(i0, i2, (size_t)n0 * 4));
    for (int32_t id = 0; id < 512; id++)
        ck_assert_str_eq(tok_decode(t0, 5, id), tok_decode(t1, 5, id));
    tok_free(t0);
    tok_free(t1);
    tok_free(t2);
    unlink(out);
    unlink(out2);
}
END_TEST

static Suite *quantize_suite(void) {
    Suite *s = suite_create("quantize");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_quantize_blocks);
    tcase_add_test(tc, test_quantize_fixed_point);
    tcase_add_test(tc, test_writer_round_trip);
    tcase_add_test(tc, test_quant_write_dummy);
    tcase_add_test(tc, test_forward_weight_bytes);
    tcase_add_test(tc, test_quant_write_bad_input);
    tcase_add_test(tc, test_quant_write_stories);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(quantize_suite());
}

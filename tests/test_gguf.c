/* test_gguf: dequantisation of each tensor type against hand-computed blocks; a tiny GGUF
 * model written here with F16/BF16/Q8_0/Q4_0 tensors loads to the expected values; damaged
 * files (bad magic, truncation at every header byte, absurd counts, unknown tensor types,
 * data past the end) give -1 and a message naming the file; random byte flips of the real
 * stories260K files never crash a loader. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/dequant.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/tokenizer.h"
#include "tests/testutil.h"

/* Hot loops use plain ifs: each ck_assert records its location with a write(2). */

/* ---- hand-computed blocks ---- */

START_TEST(test_half_floats) {
    ck_assert(dq_f16_to_f32(0x3C00) == 1.0f);
    ck_assert(dq_f16_to_f32(0xC000) == -2.0f);
    ck_assert(dq_f16_to_f32(0x7BFF) == 65504.0f);
    ck_assert(dq_f16_to_f32(0x0001) == ldexpf(1, -24));  /* smallest subnormal */
    ck_assert(dq_f16_to_f32(0x03FF) == ldexpf(1023, -24));
    ck_assert(dq_f16_to_f32(0x0400) == ldexpf(1, -14));  /* smallest normal */
    ck_assert(dq_f16_to_f32(0x2C00) == 1.0f / 16);
    ck_assert(isinf(dq_f16_to_f32(0x7C00)) && dq_f16_to_f32(0xFC00) < 0);
    ck_assert(isnan(dq_f16_to_f32(0x7E00)));
    ck_assert(signbit(dq_f16_to_f32(0x8000)) && dq_f16_to_f32(0x8000) == 0.0f);
    /* Every non-NaN half round-trips exactly. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dq_f16_to_f32((uint16_t)h);
        if (!isnan(f) && dq_f32_to_f16(f) != h) ck_abort_msg("half 0x%04x", h);
    }
    /* Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10. */
    ck_assert_uint_eq(dq_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3C00);
    ck_assert_uint_eq(dq_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3C02);
    ck_assert_uint_eq(dq_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(dq_f32_to_f16(65519.0f), 0x7BFF);
    ck_assert(dq_bf16_to_f32(0x3F80) == 1.0f && dq_bf16_to_f32(0xC040) == -3.0f);
    ck_assert_uint_eq(dq_f32_to_bf16(1.0f), 0x3F80);
    ck_assert_uint_eq(dq_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3F80);      /* tie -> even */
    ck_assert_uint_eq(dq_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3F82);
}
END_TEST

START_TEST(test_blocks) {
    float out[64];
    /* Q8_0: scale 0.5 (0x3800), q = -128, 127, 0, 1, ..., then j - 16 */
    uint8_t q8[34] = {0x00, 0x38};
    for (int j = 0; j < 32; j++) q8[2 + j] = (uint8_t)(int8_t)(j - 16);
    q8[2] = 0x80;
    q8[3] = 0x7F;
    ck_assert_int_eq(dq_convert(DQ_Q8_0, q8, out, 32), 0);
    ck_assert(out[0] == -64.0f && out[1] == 63.5f);
    for (int j = 2; j < 32; j++) ck_assert(out[j] == 0.5f * (j - 16));
    /* Q4_0: scale 2 (0x4000); byte j = j | (15 - j) << 4: element j = 2 (j - 8), element
     * j + 16 = 2 (7 - j). Two blocks, the second with scale -0.25 (0xB400). */
    uint8_t q4[36] = {0x00, 0x40};
    for (int j = 0; j < 16; j++) q4[2 + j] = (uint8_t)(j | (15 - j) << 4);
    q4[18] = 0x00;
    q4[19] = 0xB4;
    for (int j = 0; j < 16; j++) q4[20 + j] = 0xF0; /* low 0 -> -8, high 15 -> 7 */
    ck_assert_int_eq(dq_convert(DQ_Q4_0, q4, out, 64), 0);
    for (int j = 0; j < 16; j++) {
        ck_assert(out[j] == 2.0f * (j - 8));
        ck_assert(out[j + 16] == 2.0f * (7 - j));
        ck_assert(out[32 + j] == 2.0f && out[48 + j] == -1.75f);
    }
    uint8_t f16[4] = {0x00, 0x3C, 0x00, 0xC0}, b16[4] = {0x80, 0x3F, 0x40, 0xC0};
    ck_assert_int_eq(dq_convert(DQ_F16, f16, out, 2), 0);
    ck_assert(out[0] == 1.0f && out[1] == -2.0f);
    ck_assert_int_eq(dq_convert(DQ_BF16, b16, out, 2), 0);
    ck_assert(out[0] == 1.0f && out[1] == -3.0f);
    uint64_t bytes;
    ck_assert(dq_bytes(DQ_Q4_0, 64, &bytes) == 0 && bytes == 36);
    ck_assert(dq_bytes(DQ_Q8_0, 64, &bytes) == 0 && bytes == 68);
    ck_assert(dq_bytes(DQ_BF16, 3, &bytes) == 0 && bytes == 6);
    ck_assert_int_eq(dq_bytes(DQ_Q8_0, 33, &bytes), -1);
    ck_assert_int_eq(dq_bytes(12, 256, &bytes), -1);
    ck_assert_int_eq(dq_convert(12, q8, out, 32), -1);
    ck_assert_str_eq(dq_type_name(12), "Q4_K");
    ck_assert_str_eq(dq_type_name(30), "BF16");
    ck_assert_str_eq(dq_type_name(999), "unknown");
}
END_TEST

/* ---- a GGUF writer for a tiny llama ---- */

typedef struct {
    uint8_t p[1 << 17];
    size_t n;
} buf_t;

static void put(buf_t *b, const void *x, size_t n) {
    ck_assert(b->n + n <= sizeof b->p);
    memcpy(b->p + b->n, x, n);
    b->n += n;
}
static void put_u32(buf_t *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf_t *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf_t *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_u32(buf_t *b, const char *k, uint32_t v) {
    put_str(b, k);
    put_u32(b, GGUF_U32);
    put_u32(b, v);
}
static void kv_f32(buf_t *b, const char *k, float v) {
    put_str(b, k);
    put_u32(b, GGUF_F32);
    put(b, &v, 4);
}
static void kv_str(buf_t *b, const char *k, const char *v) {
    put_str(b, k);
    put_u32(b, GGUF_STRING);
    put_str(b, v);
}

enum { DIM = 32, LAYERS = 2, HEADS = 4, KVH = 2, HD = 8, HID = 64, VOCAB = 12, CTX = 16 };
#define MAX_T (3 + 9 * LAYERS)

typedef struct {
    const char *arch, *tok_model;
    uint32_t version, alignment; /* alignment 0: the default, key not written */
    int tied, rot;               /* rot: llama.rope.dimension_count (0: not written) */
} opts_t;

/* Where the fields that tests damage lie in the written file. */
typedef struct {
    size_t n_tensors_at, n_kv_at, first_key_len_at, tokens_count_at;
    size_t ndims_at[MAX_T], ne0_at[MAX_T], type_at[MAX_T], offset_at[MAX_T];
    const char *names[MAX_T];
    int n;
    size_t infos_end;
} layout_t;

static char tnames[MAX_T][64];

/* The value of element e of tensor t: k / 16 with k in -7..7, exact in every type. */
static float tval(int t, uint64_t e) {
    return (float)((int)((e * 7 + (uint64_t)t * 13) % 15) - 7) / 16.0f;
}

static void put_tensor_data(buf_t *b, int t, uint32_t type, uint64_t n) {
    for (uint64_t e = 0; e < n;) {
        float v = tval(t, e);
        if (type == DQ_F32) {
            put(b, &v, 4), e++;
        } else if (type == DQ_F16 || type == DQ_BF16) {
            uint16_t h = type == DQ_F16 ? dq_f32_to_f16(v) : dq_f32_to_bf16(v);
            put(b, &h, 2), e++;
        } else { /* Q8_0 or Q4_0 block of 32, scale 1/16 */
            uint8_t blk[34] = {0x00, 0x2C};
            for (int j = 0; j < 32; j++) {
                int k = (int)lrintf(tval(t, e + (uint64_t)j) * 16);
                if (type == DQ_Q8_0) blk[2 + j] = (uint8_t)(int8_t)k;
                else if (j < 16) blk[2 + j] = (uint8_t)(k + 8);
                else blk[2 + j - 16] |= (uint8_t)((k + 8) << 4);
            }
            put(b, blk, type == DQ_Q8_0 ? 34 : 18);
            e += 32;
        }
    }
}

static void build(buf_t *b, layout_t *L, const opts_t *o) {
    struct { uint64_t ne0, ne1; uint32_t type; } sh[MAX_T];
    int n = 0;
#define T(name_fmt, l, a, c, ty)                                                            \
    do {                                                                                    \
        snprintf(tnames[n], sizeof tnames[n], name_fmt, l);                                 \
        sh[n].ne0 = (a), sh[n].ne1 = (c), sh[n].type = (ty);                                \
        n++;                                                                                \
    } while (0)
    T("token_embd.weight%.0d", 0, DIM, VOCAB, DQ_Q8_0);
    T("output_norm.weight%.0d", 0, DIM, 0, DQ_F32);
    if (!o->tied) T("output.weight%.0d", 0, DIM, VOCAB, DQ_Q4_0);
    for (int l = 0; l < LAYERS; l++) {
        T("blk.%d.attn_norm.weight", l, DIM, 0, DQ_F32);
        T("blk.%d.attn_q.weight", l, DIM, HEADS * HD, DQ_F16);
        T("blk.%d.attn_k.weight", l, DIM, KVH * HD, DQ_BF16);
        T("blk.%d.attn_v.weight", l, DIM, KVH * HD, DQ_Q4_0);
        T("blk.%d.attn_output.weight", l, HEADS * HD, DIM, DQ_Q8_0);
        T("blk.%d.ffn_norm.weight", l, DIM, 0, DQ_F32);
        T("blk.%d.ffn_gate.weight", l, DIM, HID, DQ_F16);
        T("blk.%d.ffn_down.weight", l, HID, DIM, DQ_BF16);
        T("blk.%d.ffn_up.weight", l, DIM, HID, DQ_Q8_0);
    }
#undef T
    memset(L, 0, sizeof *L);
    L->n = n;
    b->n = 0;
    put(b, "GGUF", 4);
    put_u32(b, o->version ? o->version : 3);
    L->n_tensors_at = b->n;
    put_u64(b, (uint64_t)n);
    L->n_kv_at = b->n;
    size_t n_kv_slot = b->n;
    put_u64(b, 0);
    uint64_t n_kv = 0;
    L->first_key_len_at = b->n;
    kv_str(b, "general.architecture", o->arch ? o->arch : "llama"), n_kv++;
    kv_u32(b, "llama.embedding_length", DIM), n_kv++;
    kv_u32(b, "llama.block_count", LAYERS), n_kv++;
    kv_u32(b, "llama.feed_forward_length", HID), n_kv++;
    kv_u32(b, "llama.attention.head_count", HEADS), n_kv++;
    kv_u32(b, "llama.attention.head_count_kv", KVH), n_kv++;
    kv_u32(b, "llama.context_length", CTX), n_kv++;
    kv_f32(b, "llama.rope.freq_base", 500000.0f), n_kv++;
    kv_f32(b, "llama.attention.layer_norm_rms_epsilon", 1e-6f), n_kv++;
    if (o->rot) kv_u32(b, "llama.rope.dimension_count", (uint32_t)o->rot), n_kv++;
    if (o->alignment) kv_u32(b, "general.alignment", o->alignment), n_kv++;
    /* A tokenizer: specials, U+2581 words, a nested array the reader must skip. */
    const char *toks[VOCAB] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b",
                               "\xe2\x96\x81" "a", "ab", "\xe2\x96\x81" "ab", "<0x41>",
                               "<0x42>", "c"};
    kv_str(b, "tokenizer.ggml.model", o->tok_model ? o->tok_model : "llama"), n_kv++;
    put_str(b, "tokenizer.ggml.tokens");
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_STRING);
    L->tokens_count_at = b->n;
    put_u64(b, VOCAB);
    for (int i = 0; i < VOCAB; i++) put_str(b, toks[i]);
    n_kv++;
    put_str(b, "tokenizer.ggml.scores");
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_F32);
    put_u64(b, VOCAB);
    for (int i = 0; i < VOCAB; i++) {
        float s = -(float)i;
        put(b, &s, 4);
    }
    n_kv++;
    put_str(b, "tokenizer.ggml.token_type");
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_I32);
    put_u64(b, VOCAB);
    for (int i = 0; i < VOCAB; i++)
        put_u32(b, i == 0 ? 2 : i <= 2 ? 3 : (i == 9 || i == 10) ? 6 : 1);
    n_kv++;
    put_str(b, "test.nested");
    put_u32(b, GGUF_ARRAY);
    put_u32(b, GGUF_ARRAY);
    put_u64(b, 2);
    for (int k = 0; k < 2; k++) {
        put_u32(b, GGUF_U16);
        put_u64(b, 3);
        uint16_t v[3] = {1, 2, 3};
        put(b, v, 6);
    }
    n_kv++;
    kv_f32(b, "test.f32", 2.5f), n_kv++;
    memcpy(b->p + n_kv_slot, &n_kv, 8);
    uint64_t align = o->alignment ? o->alignment : 32, off = 0;
    for (int t = 0; t < n; t++) {
        L->names[t] = tnames[t];
        put_str(b, tnames[t]);
        L->ndims_at[t] = b->n;
        put_u32(b, sh[t].ne1 ? 2 : 1);
        L->ne0_at[t] = b->n;
        put_u64(b, sh[t].ne0);
        if (sh[t].ne1) put_u64(b, sh[t].ne1);
        L->type_at[t] = b->n;
        put_u32(b, sh[t].type);
        L->offset_at[t] = b->n;
        put_u64(b, off);
        uint64_t bytes;
        ck_assert(dq_bytes(sh[t].type, sh[t].ne0 * (sh[t].ne1 ? sh[t].ne1 : 1), &bytes) == 0);
        off = (off + bytes + align - 1) / align * align;
    }
    L->infos_end = b->n;
    static const uint8_t zero[4096];
    put(b, zero, (align - b->n % align) % align);
    size_t data = b->n;
    for (int t = 0; t < n; t++) {
        uint64_t o64;
        memcpy(&o64, b->p + L->offset_at[t], 8);
        put(b, zero, data + o64 - b->n);
        put_tensor_data(b, t, sh[t].type, sh[t].ne0 * (sh[t].ne1 ? sh[t].ne1 : 1));
    }
}

static const char *write_buf(const buf_t *b, size_t n, const char *path) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert(fwrite(b->p, 1, n, f) == n);
    fclose(f);
    return path;
}

static void check_values(const float *x, int t, uint64_t n, const char *name) {
    for (uint64_t e = 0; e < n; e++)
        if (x[e] != tval(t, e))
            ck_abort_msg("%s[%llu] = %g, want %g", name, (unsigned long long)e, (double)x[e],
                         (double)tval(t, e));
}

START_TEST(test_tiny_model_loads) {
    static buf_t b;
    layout_t L;
    char path[256], err[512];
    uint32_t aligns[] = {0, 64, 1};
    for (int variant = 0; variant < 4; variant++) {
        opts_t o = {.version = variant == 3 ? 2 : 3, .alignment = aligns[variant % 3],
                    .tied = variant == 2, .rot = variant == 1 ? HD : 0};
        build(&b, &L, &o);
        testutil_tmpfile(path, sizeof path, ".gguf");
        write_buf(&b, b.n, path);
        model_t *m;
        ck_assert_msg(model_load(path, 0, &m, err, sizeof err) == 0, "variant %d: %s", variant,
                      err);
        const model_config_t *c = &m->cfg;
        ck_assert(c->dim == DIM && c->n_layers == LAYERS && c->n_heads == HEADS &&
                  c->n_kv_heads == KVH && c->head_dim == HD && c->hidden_dim == HID &&
                  c->vocab == VOCAB && c->max_seq == CTX && c->tied == o.tied);
        ck_assert(c->rope_theta == 500000.0f && c->norm_eps == 1e-6f);
        ck_assert_str_eq(m->format, "gguf");
        ck_assert_str_eq(m->weight_type, "F16"); /* the most bytes */
        int t = 0;
        check_values(m->tok_emb, t++, DIM * VOCAB, "token_embd");
        check_values(m->final_norm, t++, DIM, "output_norm");
        if (!o.tied) check_values(m->lm_head, t++, DIM * VOCAB, "output");
        else ck_assert(m->lm_head == m->tok_emb);
        for (int l = 0; l < LAYERS; l++) {
            model_layer_t *y = &m->layers[l];
            check_values(y->attn_norm, t++, DIM, "attn_norm");
            check_values(y->wq, t++, DIM * HEADS * HD, "wq");
            check_values(y->wk, t++, DIM * KVH * HD, "wk");
            check_values(y->wv, t++, DIM * KVH * HD, "wv");
            check_values(y->wo, t++, DIM * HEADS * HD, "wo");
            check_values(y->ffn_norm, t++, DIM, "ffn_norm");
            check_values(y->w1, t++, DIM * HID, "w1");
            check_values(y->w2, t++, DIM * HID, "w2");
            check_values(y->w3, t++, DIM * HID, "w3");
        }
        model_free(m);
        /* The reader itself: typed getters, the nested array skipped, tensor lookup. */
        gguf_t *g;
        ck_assert_msg(gguf_open(path, &g, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq(g->version, o.version);
        ck_assert_uint_eq(g->alignment, o.alignment ? o.alignment : 32);
        ck_assert_uint_eq(g->data_offset % g->alignment, 0);
        double f;
        int64_t i;
        char s[32];
        ck_assert(gguf_get_float(g, "test.f32", &f, err, sizeof err) == 1 && f == 2.5);
        ck_assert(gguf_get_int(g, "llama.block_count", &i, err, sizeof err) == 1 && i == LAYERS);
        ck_assert_int_eq(gguf_get_int(g, "test.f32", &i, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "test.f32") && strstr(err, path), "%s", err);
        ck_assert_int_eq(gguf_get_int(g, "no.such.key", &i, err, sizeof err), 0);
        ck_assert(gguf_get_str(g, "general.architecture", s, sizeof s, err, sizeof err) == 1);
        ck_assert_str_eq(s, "llama");
        ck_assert_int_eq(gguf_get_str(g, "general.architecture", s, 3, err, sizeof err), -1);
        const gguf_kv_t *nested = gguf_find(g, "test.nested");
        ck_assert(nested && nested->arr_type == GGUF_ARRAY && nested->arr_n == 2);
        const gguf_tensor_t *tq = gguf_tensor(g, "blk.1.attn_q.weight");
        ck_assert(tq && tq->type == DQ_F16 && tq->ne[0] == DIM && tq->ne[1] == HEADS * HD &&
                  tq->n_bytes == DIM * HEADS * HD * 2);
        ck_assert_ptr_null(gguf_tensor(g, "blk.9.attn_q.weight"));
        gguf_close(g);
        /* Its tokenizer: U+2581 read as a space, merges by score, specials decode to "". */
        tok_t *tk;
        ck_assert_msg(tok_load_gguf(path, &tk, err, sizeof err) == 0, "%s", err);
        int32_t ids[16], n;
        ck_assert_msg(tok_encode(tk, "ab ab", 1, 1, ids, 16, &n, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(n, 4);
        ck_assert(ids[0] == TOK_BOS && ids[1] == 8 && ids[2] == 8 && ids[3] == TOK_EOS);
        ck_assert_str_eq(tok_decode(tk, TOK_BOS, 8), "ab");
        ck_assert_str_eq(tok_decode(tk, 8, 8), " ab");
        ck_assert_str_eq(tok_decode(tk, 8, 9), "A");
        ck_assert_str_eq(tok_decode(tk, 8, TOK_EOS), "");
        ck_assert_int_eq(tok_encode(tk, "\xc3\xa9", 0, 0, ids, 16, &n, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "0xC3"), "%s", err);
        tok_free(tk);
        unlink(path);
    }
}
END_TEST

/* Loads a damaged copy; the message must name the file and contain `needle`. */
static char damaged_path[256]; /* one file rewritten per case: creating files is slow */

static void expect_fail(const buf_t *b, size_t n, const char *needle, const char *what) {
    char err[512] = "";
    const char *path = damaged_path;
    write_buf(b, n, path);
    model_t *m = (model_t *)1;
    ck_assert_msg(model_load_gguf(path, 0, &m, err, sizeof err) == -1, "%s: loaded", what);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, path) != NULL, "%s: no file name in \"%s\"", what, err);
    if (needle) ck_assert_msg(strstr(err, needle) != NULL, "%s: \"%s\"", what, err);
}

static void patch(buf_t *b, size_t at, uint64_t v, int bytes) {
    memcpy(b->p + at, &v, (size_t)bytes);
}

START_TEST(test_damaged) {
    static buf_t good, b;
    layout_t L;
    opts_t o = {0};
    build(&good, &L, &o);
    ck_assert_ptr_nonnull(testutil_tmpfile(damaged_path, sizeof damaged_path, ".gguf"));
    int fu = 3 + 9 * LAYERS - 1; /* blk.1.ffn_up.weight */
    ck_assert_str_eq(L.names[fu], "blk.1.ffn_up.weight");
    struct { size_t at; uint64_t v; int bytes; const char *needle; } cases[] = {
        {0, 'X', 1, "magic"},
        {4, 1, 4, "version 1"},
        {L.n_tensors_at, 1ull << 60, 8, "absurd counts"},
        {L.n_kv_at, 1ull << 40, 8, "absurd counts"},
        {L.first_key_len_at, 1ull << 50, 8, "absurd length"},
        {L.tokens_count_at, 1ull << 40, 8, "absurd count"},
        /* a normal count whose strings run past the end (as in a cut file) */
        {L.tokens_count_at, 100000, 8, "array of 100000 elements (800000 bytes or more) runs "
                                       "past the end of the file"},
        {L.ndims_at[4], 9, 4, "9 dims"},
        {L.ne0_at[4], 1ull << 63, 8, "absurd shape"},
        {L.type_at[fu], 12, 4, "blk.1.ffn_up.weight has type Q4_K"},
        {L.type_at[fu], 200, 4, "type unknown (200)"},
        {L.offset_at[fu], 1ull << 40, 8, "extends past the end"},
        {L.offset_at[fu], UINT64_MAX - 8, 8, "extends past the end"},
        {L.ne0_at[4] + 8, 16, 8, "expected"},  /* attn_q [32, 16]: a shape mismatch */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        b = good;
        patch(&b, cases[k].at, cases[k].v, cases[k].bytes);
        char what[32];
        snprintf(what, sizeof what, "case %zu", k);
        expect_fail(&b, b.n, cases[k].needle, what);
    }
    /* A duplicate tensor name: blk.0.attn_q -> blk.0.attn_k. */
    b = good;
    char *q = memmem(b.p, L.infos_end, "blk.0.attn_q.weight", 19);
    ck_assert_ptr_nonnull(q);
    q[11] = 'k';
    expect_fail(&b, b.n, "appears twice", "duplicate");
    /* Metadata the loader refuses. */
    opts_t bad[] = {{.arch = "gpt2"}, {.rot = 4}, {.alignment = 48}};
    const char *needles[] = {"\"gpt2\" is not supported", "partial rotary", "power of two"};
    for (int k = 0; k < 3; k++) {
        build(&b, &L, &bad[k]);
        expect_fail(&b, b.n, needles[k], needles[k]);
    }
    /* A cut file with normal counts is said to be truncated, not to hold absurd counts. */
    expect_fail(&good, L.tokens_count_at + 8 + 20, "truncated GGUF: the header's counts",
                "cut in the tokens");
    /* Truncated at every byte of the header and infos, then through the data. */
    for (size_t n = 0; n < good.n; n += n < L.infos_end + 40 ? 1 : 97)
        expect_fail(&good, n, NULL, "truncated");
    unlink(damaged_path);
    /* The tokenizer reader on a non-llama tokenizer. */
    o.tok_model = "gpt2";
    build(&b, &L, &o);
    char path[256], err[512];
    testutil_tmpfile(path, sizeof path, ".gguf");
    write_buf(&b, b.n, path);
    tok_t *t = (tok_t *)1;
    ck_assert_int_eq(tok_load_gguf(path, &t, err, sizeof err), -1);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, path) && strstr(err, "\"gpt2\""), "%s", err);
    unlink(path);
}
END_TEST

/* Random bytes of the real files overwritten, mostly in their headers: the loaders return
 * 0 or -1 with a message, never crash. Bounded by time so the suite stays fast. */
static int fuzz_file(const char *src, size_t header, int is_gguf, double budget_s) {
    static uint8_t data[1 << 21];
    FILE *f = fopen(src, "rb");
    size_t n = fread(data, 1, sizeof data, f);
    fclose(f);
    char path[256], err[512];
    testutil_tmpfile(path, sizeof path, is_gguf ? ".gguf" : ".bin");
    int fd = open(path, O_WRONLY);
    ck_assert(fd >= 0 && write(fd, data, n) == (ssize_t)n);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int iters = 0, loaded = 0;
    for (;; iters++) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 > budget_s) break;
        size_t pos[4];
        uint8_t old[4];
        int k = 1 + iters % 4;
        for (int j = 0; j < k; j++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            pos[j] = (s >> 8) % (s % 8 ? header : n);
            old[j] = data[pos[j]];
            uint8_t v = (uint8_t)(s >> 56);
            if (pwrite(fd, &v, 1, (off_t)pos[j]) != 1) ck_abort();
        }
        model_t *m = NULL;
        err[0] = '\0';
        int rc = model_load(path, 0, &m, err, sizeof err);
        if (rc == 0) loaded++, model_free(m);
        else if (rc != -1 || !strstr(err, path)) ck_abort_msg("rc %d: %s", rc, err);
        if (is_gguf) {
            tok_t *t = NULL;
            if (tok_load_gguf(path, &t, err, sizeof err) == 0) {
                int32_t ids[256], cnt;
                tok_encode(t, "Once upon a time \xc3\xa9", 1, 0, ids, 256, &cnt, err, sizeof err);
                tok_free(t);
            }
        }
        for (int j = k - 1; j >= 0; j--)
            if (pwrite(fd, &old[j], 1, (off_t)pos[j]) != 1) ck_abort();
    }
    close(fd);
    unlink(path);
    fprintf(stderr, "fuzz %s: %d damaged copies, %d still loaded\n", src, iters, loaded);
    return iters;
}

START_TEST(test_fuzz_real_files) {
    char pg[512], pb[512];
    if (!testutil_data_path("models/stories260K.gguf", pg, sizeof pg) ||
        !testutil_data_path("models/stories260K.bin", pb, sizeof pb))
        return;
    ck_assert_int_gt(fuzz_file(pg, 14152, 1, 0.5), 20);
    ck_assert_int_gt(fuzz_file(pb, 28, 0, 0.3), 20);
}
END_TEST

static Suite *gguf_suite(void) {
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_half_floats);
    tcase_add_test(tc, test_blocks);
    tcase_add_test(tc, test_tiny_model_loads);
    tcase_add_test(tc, test_damaged);
    tcase_add_test(tc, test_fuzz_real_files);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(gguf_suite());
}

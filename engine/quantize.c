/* quantize: see quantize.h. The model is loaded in fp32 (model_load), each tensor
 * converted into its own buffer, and the writer (engine/gguf_write.h) lays the file out. */
#include "engine/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "engine/dequant.h"
#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

int quant_type_parse(const char *name, uint32_t *type) {
    static const struct { const char *n; uint32_t t; } ts[] = {
        {"f32", DQ_F32}, {"f16", DQ_F16}, {"bf16", DQ_BF16}, {"q8_0", DQ_Q8_0}, {"q4_0", DQ_Q4_0},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        if (strcasecmp(name, ts[i].n) == 0) {
            *type = ts[i].t;
            return 0;
        }
    return -1;
}

/* llama.cpp's general.file_type for a model mostly of `type` */
static uint32_t file_type(uint32_t type) {
    switch (type) {
    case DQ_F16: return 1;
    case DQ_Q4_0: return 2;
    case DQ_Q8_0: return 7;
    case DQ_BF16: return 32;
    default: return 0;
    }
}

/* The tensor buffers of one file, freed together. */
typedef struct {
    void **bufs;
    size_t n, cap;
} bufs_t;

static void *buf_new(bufs_t *b, size_t bytes) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        void **p = realloc(b->bufs, cap * sizeof *p);
        if (!p) return NULL;
        b->bufs = p;
        b->cap = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) b->bufs[b->n++] = p;
    return p;
}

static void bufs_free(bufs_t *b) {
    for (size_t i = 0; i < b->n; i++) free(b->bufs[i]);
    free(b->bufs);
}

/* Adds tensor `name` of shape {ne0, ne1, ne2} (ne1 = 0: a vector, kept F32; ne2 = 0: 2-D,
 * else a mixture of experts' stacked matrices) converted from x. */
static int add_tensor3(gguf_writer_t *w, bufs_t *bufs, const char *name, const float *x,
                       uint64_t ne0, uint64_t ne1, uint64_t ne2, uint32_t type,
                       quant_report_t *r, char *err, size_t errlen) {
    int64_t be;
    if (!ne1) type = DQ_F32;
    dq_supported(type, &be, NULL);
    if (ne0 % (uint64_t)be != 0) {
        type = DQ_F16;
        r->n_fallback++;
    }
    uint64_t n = ne0 * (ne1 ? ne1 : 1) * (ne2 ? ne2 : 1), bytes;
    void *dst;
    if (dq_bytes(type, n, &bytes) != 0 || !(dst = buf_new(bufs, (size_t)bytes))) {
        snprintf(err, errlen, "tensor %s: out of memory for %llu elements", name,
                 (unsigned long long)n);
        return -1;
    }
    dq_quantize(type, x, dst, n);
    gguf_w_tensor3(w, name, ne0, ne1, ne2, type, dst);
    r->n_matrices += ne1 != 0 ? (ne2 ? ne2 : 1) : 0;
    r->params += (double)n;
    r->bytes += bytes;
    return 0;
}

static int add_tensor(gguf_writer_t *w, bufs_t *bufs, const char *name, const float *x,
                      uint64_t ne0, uint64_t ne1, uint32_t type, quant_report_t *r, char *err,
                      size_t errlen) {
    return add_tensor3(w, bufs, name, x, ne0, ne1, 0, type, r, err, errlen);
}

static int add_tensors(gguf_writer_t *w, bufs_t *bufs, const model_t *m, uint32_t type,
                       quant_report_t *r, char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    uint64_t d = (uint64_t)c->dim, q = (uint64_t)c->n_heads * (uint64_t)c->head_dim;
    uint64_t kv = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim, h = (uint64_t)c->hidden_dim;
    uint64_t v = (uint64_t)c->vocab;
    if (add_tensor(w, bufs, "token_embd.weight", m->tok_emb, d, v, type, r, err, errlen) ||
        add_tensor(w, bufs, "output_norm.weight", m->final_norm, d, 0, type, r, err, errlen) ||
        (!c->tied &&
         add_tensor(w, bufs, "output.weight", m->lm_head, d, v, type, r, err, errlen)))
        return -1;
    for (int32_t l = 0; l < c->n_layers; l++) {
        const model_layer_t *L = &m->layers[l];
        /* a mixture of experts in llama.cpp's layout (engine/model_gguf.c) */
        uint64_t e = (uint64_t)c->n_experts, eh = (uint64_t)c->moe_hidden;
        uint64_t sh = (uint64_t)c->shared_hidden;
        int moe = model_layer_is_moe(c, l);
        struct { const char *n; const float *x; uint64_t ne0, ne1, ne2; } ts[] = {
            {"attn_norm", L->attn_norm, d, 0, 0}, {"attn_q", L->wq, d, q, 0},
            {"attn_k", L->wk, d, kv, 0},          {"attn_v", L->wv, d, kv, 0},
            {"attn_output", L->wo, q, d, 0},      {"ffn_norm", L->ffn_norm, d, 0, 0},
            {"ffn_gate", L->w1, d, h, 0},         {"ffn_down", L->w2, h, d, 0},
            {"ffn_up", L->w3, d, h, 0},
            {"ffn_gate_inp", L->router, d, e, 0}, {"ffn_gate_exps", L->exp_gate, d, eh, e},
            {"ffn_down_exps", L->exp_down, eh, d, e}, {"ffn_up_exps", L->exp_up, d, eh, e},
            {"ffn_gate_shexp", L->sh_w1, d, sh, 0}, {"ffn_down_shexp", L->sh_w2, sh, d, 0},
            {"ffn_up_shexp", L->sh_w3, d, sh, 0},
        };
        for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++) {
            char name[64];
            if ((k >= 6 && k < 9 && moe) || (k >= 9 && (!moe || (k >= 13 && !sh)))) continue;
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, ts[k].n);
            /* the router stays F32, as llama.cpp's quantiser keeps it */
            if (add_tensor3(w, bufs, name, ts[k].x, ts[k].ne0, ts[k].ne1, ts[k].ne2,
                            k == 9 ? DQ_F32 : type, r, err, errlen))
                return -1;
        }
    }
    return 0;
}

static void add_config(gguf_writer_t *w, const model_config_t *c, uint32_t type) {
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "general.file_type", file_type(type));
    /* the block formats' version, as llama.cpp's quantiser writes it (Q8_0/Q4_0 are 2) */
    gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_u32(w, "llama.vocab_size", (uint32_t)c->vocab);
    gguf_w_u32(w, "llama.context_length", (uint32_t)c->max_seq);
    gguf_w_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    gguf_w_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)c->hidden_dim);
    gguf_w_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_w_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
    gguf_w_u32(w, "llama.attention.value_length", (uint32_t)c->head_dim);
    gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)c->head_dim);
    gguf_w_f32(w, "llama.rope.freq_base", c->rope_theta);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    if (c->n_experts > 0) {
        gguf_w_u32(w, "llama.expert_count", (uint32_t)c->n_experts);
        gguf_w_u32(w, "llama.expert_used_count", (uint32_t)c->experts_per_tok);
    }
}

/* A SentencePiece-style vocabulary as llama.cpp's tokenizer.ggml.* keys (model "llama",
 * BOS 1, EOS 2): the pieces, their scores and token types. */
static void put_spm_vocab(gguf_writer_t *w, const char **p, const uint32_t *len,
                          const float *score, const int32_t *type, int32_t vocab) {
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", p, len, (uint64_t)vocab);
    gguf_w_arr_num(w, "tokenizer.ggml.scores", GGUF_F32, score, (uint64_t)vocab);
    gguf_w_arr_num(w, "tokenizer.ggml.token_type", GGUF_I32, type, (uint64_t)vocab);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", TOK_BOS);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", TOK_EOS);
}

/* A llama2.c tokenizer as tokenizer.ggml.* arrays: spaces back to U+2581, token types as
 * llama.cpp numbers them (1 normal, 2 unknown, 3 control, 6 byte). */
static int add_llama2c_tokenizer(gguf_writer_t *w, bufs_t *bufs, const char *path,
                                 int32_t vocab, char *err, size_t errlen) {
    tok_t *t;
    if (tok_load_llama2c(path, vocab, &t, err, errlen) != 0) return -1;
    int rc = -1;
    const char **p = buf_new(bufs, (size_t)vocab * sizeof *p);
    uint32_t *len = buf_new(bufs, (size_t)vocab * sizeof *len);
    float *score = buf_new(bufs, (size_t)vocab * sizeof *score);
    int32_t *type = buf_new(bufs, (size_t)vocab * sizeof *type);
    if (!p || !len || !score || !type) goto oom;
    for (int32_t i = 0; i < vocab; i++) {
        uint32_t n;
        int special;
        const char *s = tok_piece(t, i, &n, &score[i], &special);
        uint32_t spaces = 0;
        for (uint32_t k = 0; k < n; k++) spaces += s[k] == ' ';
        char *o = buf_new(bufs, n + 2 * spaces);
        if (!o) goto oom;
        len[i] = 0;
        for (uint32_t k = 0; k < n; k++) {
            if (s[k] == ' ') {
                memcpy(o + len[i], "\xE2\x96\x81", 3);
                len[i] += 3;
            } else {
                o[len[i]++] = s[k];
            }
        }
        p[i] = o;
        int byte = n == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>';
        type[i] = i == 0 ? 2 : special ? 3 : byte ? 6 : 1;
    }
    put_spm_vocab(w, p, len, score, type, vocab);
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
done:
    tok_free(t);
    return rc;
}

/* A model without a tokenizer (dummy: weights, a .bin without its tok512.bin) still needs
 * one for llama.cpp, whose loader requires tokenizer.ggml.model and its arrays: a valid
 * SentencePiece-style vocabulary of the model's size that says nothing about text. Ids 0-2
 * are <unk>, <s>, </s> (llama.cpp's types 2 and 3), 3-258 the byte tokens <0x00>..<0xFF>
 * (type 6) where the vocabulary has room, the rest "[ID]" (normal, score -ID).
 * twinserve.tokenizer = "placeholder" tells our own loader to use the file for ids only. */
static int add_placeholder_tokenizer(gguf_writer_t *w, bufs_t *bufs, int32_t vocab,
                                     quant_report_t *r, char *err, size_t errlen) {
    if (vocab < 3) {
        snprintf(err, errlen, "a vocabulary of %d cannot hold the placeholder tokenizer's "
                 "<unk>, <s> and </s>", (int)vocab);
        return -1;
    }
    const char **p = buf_new(bufs, (size_t)vocab * sizeof *p);
    uint32_t *len = buf_new(bufs, (size_t)vocab * sizeof *len);
    float *score = buf_new(bufs, (size_t)vocab * sizeof *score);
    int32_t *type = buf_new(bufs, (size_t)vocab * sizeof *type);
    char *text = buf_new(bufs, (size_t)vocab * 16);
    if (!p || !len || !score || !type || !text) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    static const char *const special[3] = {"<unk>", "<s>", "</s>"};
    for (int32_t i = 0; i < vocab; i++) {
        char *o = text + (size_t)i * 16;
        if (i < 3) snprintf(o, 16, "%s", special[i]);
        else if (i < 259) snprintf(o, 16, "<0x%02X>", (unsigned)(i - 3));
        else snprintf(o, 16, "[%d]", (int)i);
        p[i] = o;
        len[i] = (uint32_t)strlen(o);
        score[i] = i < 259 ? 0.0f : -(float)i;
        type[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
    }
    put_spm_vocab(w, p, len, score, type, vocab);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_w_str(w, "twinserve.tokenizer", "placeholder");
    snprintf(r->tokenizer, sizeof r->tokenizer, "a placeholder (ids only: the model has none)");
    return 0;
}

/* tokenizer.* keys of a GGUF input, verbatim (its gguf_t stays open until the write). */
static int copy_gguf_tokenizer(gguf_writer_t *w, const gguf_t *g, quant_report_t *r) {
    int n = 0;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (strncmp(g->kv[i].key, "tokenizer.", 10) == 0 ||
            strcmp(g->kv[i].key, "twinserve.tokenizer") == 0) {
            gguf_w_copy(w, &g->kv[i]);
            n++;
        }
    snprintf(r->tokenizer, sizeof r->tokenizer, n ? "%s (GGUF metadata, %d keys)" : "none",
             g->path, n);
    return 0;
}

int quant_write(const char *in, const char *out, const quant_opts_t *o, quant_report_t *r,
                char *err, size_t errlen) {
    int rc = -1;
    model_t *m = NULL;
    gguf_t *g = NULL;
    bufs_t bufs = {0};
    gguf_writer_t *w = gguf_w_new();
    memset(r, 0, sizeof *r);
    snprintf(r->tokenizer, sizeof r->tokenizer, "none");
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (!dq_supported(o->type, NULL, NULL)) {
        snprintf(err, errlen, "type %s cannot be written (f32, f16, bf16, q8_0, q4_0)",
                 dq_type_name(o->type));
        goto done;
    }
    if (model_load(in, o->seed, &m, err, errlen) != 0) goto done;
    add_config(w, &m->cfg, o->type);
    if (strcmp(m->format, "gguf") == 0) {
        if (gguf_open(in, &g, err, errlen) != 0 || copy_gguf_tokenizer(w, g, r) != 0) goto done;
    } else if (strcmp(m->format, "llama2c") == 0) {
        char path[560];
        const char *tp = o->tokenizer;
        struct stat st;
        if (!tp) {
            const char *slash = strrchr(in, '/');
            snprintf(path, sizeof path, "%.*stok512.bin", slash ? (int)(slash - in + 1) : 0, in);
            tp = stat(path, &st) == 0 ? path : NULL;
        }
        if (tp) {
            if (add_llama2c_tokenizer(w, &bufs, tp, m->cfg.vocab, err, errlen) != 0) goto done;
            snprintf(r->tokenizer, sizeof r->tokenizer, "%s", tp);
        }
    }
    if (!strcmp(r->tokenizer, "none") &&
        add_placeholder_tokenizer(w, &bufs, m->cfg.vocab, r, err, errlen) != 0)
        goto done;
    if (add_tensors(w, &bufs, m, o->type, r, err, errlen) != 0) goto done;
    if (gguf_w_write(w, out) != 0) {
        snprintf(err, errlen, "%s", gguf_w_errmsg(w));
        goto done;
    }
    rc = 0;
done:
    gguf_w_free(w);
    bufs_free(&bufs);
    gguf_close(g);
    model_free(m);
    return rc;
}

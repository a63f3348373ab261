/* model_gguf: a Llama model from a GGUF file (architecture "llama"), every tensor
 * dequantised to fp32 into the model arena, each matrix also kept as stored (the file
 * stays mapped while the model lives).
 *
 * Hyperparameters come from llama.* metadata; the vocabulary size from token_embd's shape.
 * ggml's ne[0] is the input dimension, so a [out][in] row-major matrix has ne = {in, out}
 * and its bytes are already in model.h's layout. output.weight absent = tied embeddings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/dequant.h"
#include "engine/gguf.h"
#include "engine/model.h"

/* A required (need = 1) or optional llama.* integer; -1 with a message when missing or
 * unusable. */
static int meta_int(const gguf_t *g, const char *key, int need, int32_t *out, char *err,
                    size_t errlen) {
    int64_t v;
    int r = gguf_get_int(g, key, &v, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        if (!need) return 0;
        snprintf(err, errlen, "%s: metadata key %s is missing", g->path, key);
        return -1;
    }
    if (v <= 0 || v > INT32_MAX) {
        snprintf(err, errlen, "%s: %s = %lld is out of range", g->path, key, (long long)v);
        return -1;
    }
    *out = (int32_t)v;
    return 1;
}

static int meta_float(const gguf_t *g, const char *key, float *out, char *err, size_t errlen) {
    double v;
    int r = gguf_get_float(g, key, &v, err, errlen);
    if (r > 0) *out = (float)v;
    return r < 0 ? -1 : 0;
}

/* Finds `name`, checks its shape {ne0, ne1} (ne1 = 0: a vector) and type, notes where it
 * is stored (st not NULL), counts its bytes per type for model_t.weight_type, and (dst not
 * NULL) dequantises it into dst. */
static int load_tensor(const gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1,
                       float *dst, model_stored_t *st, uint64_t type_bytes[32], char *err,
                       size_t errlen) {
    const gguf_tensor_t *t = gguf_tensor(g, name);
    if (!t) {
        snprintf(err, errlen, "%s: tensor %s is missing", g->path, name);
        return -1;
    }
    uint64_t want1 = ne1 ? ne1 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != 1 || t->ne[3] != 1) {
        snprintf(err, errlen,
                 "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
                 g->path, name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                 (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                 (unsigned long long)ne0, (unsigned long long)want1);
        return -1;
    }
    if (!t->data || !dq_supported(t->type, NULL, NULL)) {
        snprintf(err, errlen, "%s: tensor %s has type %s (%u), not supported (F32, F16, BF16, "
                 "Q8_0, Q4_0)", g->path, name, dq_type_name(t->type), (unsigned)t->type);
        return -1;
    }
    if (st) *st = (model_stored_t){t->type, t->data};
    if (t->type < 32) type_bytes[t->type] += t->n_bytes;
    if (dst) dq_convert(t->type, t->data, dst, t->n_elems);
    return 0;
}

static int read_config(const gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    char arch[64];
    int r = gguf_get_str(g, "general.architecture", arch, sizeof arch, err, errlen);
    if (r < 0) return -1;
    if (r == 0) {
        snprintf(err, errlen, "%s: general.architecture is missing", g->path);
        return -1;
    }
    if (strcmp(arch, "llama") != 0) {
        snprintf(err, errlen, "%s: architecture \"%s\" is not supported (only \"llama\")",
                 g->path, arch);
        return -1;
    }
    memset(c, 0, sizeof *c);
    c->rope_theta = 10000.0f;
    c->norm_eps = 1e-5f;
    if (meta_int(g, "llama.embedding_length", 1, &c->dim, err, errlen) < 0 ||
        meta_int(g, "llama.block_count", 1, &c->n_layers, err, errlen) < 0 ||
        meta_int(g, "llama.feed_forward_length", 1, &c->hidden_dim, err, errlen) < 0 ||
        meta_int(g, "llama.attention.head_count", 1, &c->n_heads, err, errlen) < 0 ||
        meta_int(g, "llama.context_length", 1, &c->max_seq, err, errlen) < 0)
        return -1;
    c->n_kv_heads = c->n_heads;
    c->head_dim = c->dim / c->n_heads;
    int32_t rot = 0;
    if (meta_int(g, "llama.attention.head_count_kv", 0, &c->n_kv_heads, err, errlen) < 0 ||
        meta_int(g, "llama.attention.key_length", 0, &c->head_dim, err, errlen) < 0 ||
        meta_int(g, "llama.rope.dimension_count", 0, &rot, err, errlen) < 0 ||
        meta_float(g, "llama.rope.freq_base", &c->rope_theta, err, errlen) < 0 ||
        meta_float(g, "llama.attention.layer_norm_rms_epsilon", &c->norm_eps, err, errlen) < 0)
        return -1;
    if (rot && rot != c->head_dim) {
        snprintf(err, errlen, "%s: llama.rope.dimension_count = %d differs from the head size "
                 "%d (partial rotary embeddings are not supported)", g->path, (int)rot,
                 (int)c->head_dim);
        return -1;
    }
    const gguf_tensor_t *emb = gguf_tensor(g, "token_embd.weight");
    if (!emb) {
        snprintf(err, errlen, "%s: tensor token_embd.weight is missing", g->path);
        return -1;
    }
    c->vocab = emb->ne[1] <= INT32_MAX ? (int32_t)emb->ne[1] : -1;
    c->tied = gguf_tensor(g, "output.weight") == NULL;
    return model_config_check(c, g->path, err, errlen);
}

/* Loads (m != NULL) or only checks (m == NULL) every tensor of the configuration. */
static int load_all(const gguf_t *g, const model_config_t *cp, model_t *m, char *err,
                    size_t errlen) {
    const model_config_t c = *cp;
    uint64_t tb[32] = {0};
    uint64_t d = (uint64_t)c.dim, q = (uint64_t)c.n_heads * (uint64_t)c.head_dim;
    uint64_t kv = (uint64_t)c.n_kv_heads * (uint64_t)c.head_dim, h = (uint64_t)c.hidden_dim;
    model_layer_t none = {0};
    float *emb = m ? m->tok_emb : NULL, *fin = m ? m->final_norm : NULL;
    float *head = m ? m->lm_head : NULL;
    if (load_tensor(g, "token_embd.weight", d, (uint64_t)c.vocab, emb,
                    m ? &m->stored_tok_emb : NULL, tb, err, errlen) ||
        load_tensor(g, "output_norm.weight", d, 0, fin, NULL, tb, err, errlen) ||
        (!c.tied && load_tensor(g, "output.weight", d, (uint64_t)c.vocab, head,
                                m ? &m->stored_lm_head : NULL, tb, err, errlen)))
        return -1;
    for (int32_t l = 0; l < c.n_layers; l++) {
        model_layer_t *L = m ? &m->layers[l] : &none;
        model_stored_layer_t sn, *S = m ? &m->stored_layers[l] : &sn;
        struct { const char *n; uint64_t ne0, ne1; float *dst; model_stored_t *st; } ts[9] = {
            {"attn_norm", d, 0, L->attn_norm, NULL}, {"attn_q", d, q, L->wq, &S->wq},
            {"attn_k", d, kv, L->wk, &S->wk},        {"attn_v", d, kv, L->wv, &S->wv},
            {"attn_output", q, d, L->wo, &S->wo},    {"ffn_norm", d, 0, L->ffn_norm, NULL},
            {"ffn_gate", d, h, L->w1, &S->w1},       {"ffn_down", h, d, L->w2, &S->w2},
            {"ffn_up", d, h, L->w3, &S->w3},
        };
        for (int k = 0; k < 9; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, ts[k].n);
            if (load_tensor(g, name, ts[k].ne0, ts[k].ne1, ts[k].dst, ts[k].st, tb, err, errlen))
                return -1;
        }
    }
    if (!m) return 0;
    int best = 0;
    for (int t = 1; t < 32; t++)
        if (tb[t] > tb[best]) best = t;
    snprintf(m->weight_type, sizeof m->weight_type, "%s", dq_type_name((uint32_t)best));
    return 0;
}

int model_load_gguf(const char *path, int flags, model_t **out, char *err, size_t errlen) {
    int rc = -1;
    gguf_t *g = NULL;
    model_t *m = NULL;
    *out = NULL;
    if (gguf_open(path, &g, err, errlen) != 0) return -1;
    model_config_t c;
    if (read_config(g, &c, err, errlen) != 0) goto done;
    /* Two passes: every tensor checked (dry run) before the arena exists, then loaded. */
    for (int pass = 0; pass < 2; pass++) {
        if (pass && !(m->stored_layers = calloc((size_t)c.n_layers, sizeof *m->stored_layers))) {
            snprintf(err, errlen, "%s: out of memory", path);
            goto done;
        }
        if (load_all(g, &c, pass ? m : NULL, err, errlen) != 0 ||
            (!pass && ((flags & MODEL_LAZY)
                           ? model_alloc_norms(&c, path, "gguf", &m, err, errlen)
                           : model_alloc(&c, path, "gguf", &m, err, errlen)) != 0))
            goto done;
    }
    /* the stored matrices point into the mapping: the model keeps the file open */
    m->file = g;
    g = NULL;
    *out = m;
    m = NULL;
    rc = 0;
done:
    model_free(m);
    gguf_close(g);
    return rc;
}

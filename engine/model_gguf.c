/* model_gguf: a Llama model from a GGUF file (architecture "llama"), every tensor
 * dequantised to fp32 into the model arena, each matrix also kept as stored (the file
 * stays mapped while the model lives).
 *
 * Hyperparameters come from llama.* metadata; the vocabulary size from token_embd's shape.
 * ggml's ne[0] is the input dimension, so a [out][in] row-major matrix has ne = {in, out}
 * and its bytes are already in model.h's layout. output.weight absent = tied embeddings.
 *
 * A mixture of experts, as llama.cpp writes Mixtral (architecture "llama"): metadata
 * llama.expert_count and llama.expert_used_count; per MoE layer a router
 * blk.N.ffn_gate_inp.weight {dim, n_experts} and the experts stacked in 3-D tensors
 * blk.N.ffn_{gate,up}_exps.weight {dim, moe_hidden, n_experts} and ffn_down_exps {moe_hidden,
 * dim, n_experts} (experts outermost, so expert e's matrix is a contiguous [out][in] slice),
 * and optionally an ungated shared expert blk.N.ffn_{gate,up,down}_shexp.weight. The leading
 * layers without a router are dense (DeepSeek's first_k_dense_replace). Refused, naming the
 * tensor or key: the per-expert 2-D tensors of older files (blk.N.ffn_gate.E.weight), a gated
 * shared expert (ffn_gate_inp_shexp, Qwen2-MoE), a router without llama.expert_count, and a
 * gating function other than softmax (llama.expert_gating_func). */
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
static int load_tensor3(const gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1,
                        uint64_t ne2, float *dst, model_stored_t *st, uint64_t type_bytes[32],
                        char *err, size_t errlen) {
    const gguf_tensor_t *t = gguf_tensor(g, name);
    if (!t) {
        snprintf(err, errlen, "%s: tensor %s is missing", g->path, name);
        return -1;
    }
    uint64_t want1 = ne1 ? ne1 : 1, want2 = ne2 ? ne2 : 1;
    if (t->ne[0] != ne0 || t->ne[1] != want1 || t->ne[2] != want2 || t->ne[3] != 1) {
        snprintf(err, errlen,
                 "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, "
                 "%llu]", g->path, name, (unsigned long long)t->ne[0],
                 (unsigned long long)t->ne[1], (unsigned long long)t->ne[2],
                 (unsigned long long)t->ne[3], (unsigned long long)ne0,
                 (unsigned long long)want1, (unsigned long long)want2);
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

static int load_tensor(const gguf_t *g, const char *name, uint64_t ne0, uint64_t ne1,
                       float *dst, model_stored_t *st, uint64_t type_bytes[32], char *err,
                       size_t errlen) {
    return load_tensor3(g, name, ne0, ne1, 0, dst, st, type_bytes, err, errlen);
}

static const gguf_tensor_t *layer_tensor(const gguf_t *g, int32_t l, const char *what) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, what);
    return gguf_tensor(g, name);
}

/* A layout of experts the engine does not read, in layer l: -1 with a message naming its
 * tensor, else 0. */
static int moe_refuse_layout(const gguf_t *g, int32_t l, char *err, size_t errlen) {
    if (layer_tensor(g, l, "ffn_gate_inp_shexp")) {
        snprintf(err, errlen, "%s: tensor blk.%d.ffn_gate_inp_shexp.weight: a shared expert "
                 "with its own gate (Qwen2-MoE) is not supported (only an ungated shared "
                 "expert, blk.N.ffn_*_shexp)", g->path, (int)l);
        return -1;
    }
    if (!layer_tensor(g, l, "ffn_gate_exps") && layer_tensor(g, l, "ffn_gate.0")) {
        snprintf(err, errlen, "%s: tensor blk.%d.ffn_gate.0.weight: experts stored one 2-D "
                 "tensor each (an older llama.cpp layout) are not supported; convert the file "
                 "again (experts stacked in blk.N.ffn_gate_exps.weight)", g->path, (int)l);
        return -1;
    }
    return 0;
}

/* llama.expert_* metadata and the shapes they imply (see the top of this file). */
static int read_moe(const gguf_t *g, model_config_t *c, char *err, size_t errlen) {
    int32_t ne = 0, nu = 0, gating = 0, groups = 0;
    if (meta_int(g, "llama.expert_count", 0, &ne, err, errlen) < 0 ||
        meta_int(g, "llama.expert_used_count", 0, &nu, err, errlen) < 0 ||
        meta_int(g, "llama.expert_gating_func", 0, &gating, err, errlen) < 0 ||
        meta_int(g, "llama.expert_group_count", 0, &groups, err, errlen) < 0)
        return -1;
    if (ne == 0) {
        for (int32_t l = 0; l < c->n_layers; l++)
            if (layer_tensor(g, l, "ffn_gate_inp")) {
                snprintf(err, errlen, "%s: tensor blk.%d.ffn_gate_inp.weight is a router, but "
                         "llama.expert_count is missing", g->path, (int)l);
                return -1;
            }
        return 0;
    }
    if (nu == 0) {
        snprintf(err, errlen, "%s: metadata key llama.expert_used_count is missing (the file "
                 "has llama.expert_count = %d)", g->path, (int)ne);
        return -1;
    }
    if (gating > 1) {   /* llama.cpp: 1 softmax, 2 sigmoid */
        snprintf(err, errlen, "%s: llama.expert_gating_func = %d: only softmax routing (1) is "
                 "supported", g->path, (int)gating);
        return -1;
    }
    if (groups > 1) {
        snprintf(err, errlen, "%s: llama.expert_group_count = %d: group-limited routing is not "
                 "supported", g->path, (int)groups);
        return -1;
    }
    c->n_experts = ne;
    c->experts_per_tok = nu;
    int32_t nd = 0;
    while (nd < c->n_layers && !layer_tensor(g, nd, "ffn_gate_inp")) {
        if (moe_refuse_layout(g, nd, err, errlen)) return -1;
        nd++;
    }
    if (nd == c->n_layers) {
        snprintf(err, errlen, "%s: llama.expert_count = %d but no layer has a router "
                 "(blk.N.ffn_gate_inp.weight)", g->path, (int)ne);
        return -1;
    }
    c->n_dense_layers = nd;
    if (moe_refuse_layout(g, nd, err, errlen)) return -1;
    const gguf_tensor_t *gx = layer_tensor(g, nd, "ffn_gate_exps");
    if (!gx) {
        snprintf(err, errlen, "%s: tensor blk.%d.ffn_gate_exps.weight is missing", g->path,
                 (int)nd);
        return -1;
    }
    /* the sizes come from the first MoE layer's shapes; load_all checks every layer's */
    c->moe_hidden = gx->ne[1] <= INT32_MAX ? (int32_t)gx->ne[1] : -1;
    const gguf_tensor_t *sx = layer_tensor(g, nd, "ffn_gate_shexp");
    c->shared_hidden = !sx ? 0 : sx->ne[1] <= INT32_MAX ? (int32_t)sx->ne[1] : -1;
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
    if (read_moe(g, c, err, errlen)) return -1;
    return model_config_check(c, g->path, err, errlen);
}

/* One tensor of a layer: its name's middle part, its shape (0: absent dimension), where it
 * goes. */
typedef struct {
    const char *n;
    uint64_t ne0, ne1, ne2;
    float *dst;
    model_stored_t *st;
} tspec_t;

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
        uint64_t e = (uint64_t)c.n_experts, eh = (uint64_t)c.moe_hidden;
        uint64_t sh = (uint64_t)c.shared_hidden;
        tspec_t ts[16] = {
            {"attn_norm", d, 0, 0, L->attn_norm, NULL}, {"attn_q", d, q, 0, L->wq, &S->wq},
            {"attn_k", d, kv, 0, L->wk, &S->wk},        {"attn_v", d, kv, 0, L->wv, &S->wv},
            {"attn_output", q, d, 0, L->wo, &S->wo},    {"ffn_norm", d, 0, 0, L->ffn_norm, NULL},
        };
        int n = 6;
        if (!model_layer_is_moe(&c, l)) {
            ts[n++] = (tspec_t){"ffn_gate", d, h, 0, L->w1, &S->w1};
            ts[n++] = (tspec_t){"ffn_down", h, d, 0, L->w2, &S->w2};
            ts[n++] = (tspec_t){"ffn_up", d, h, 0, L->w3, &S->w3};
        } else {
            if (moe_refuse_layout(g, l, err, errlen)) return -1;
            ts[n++] = (tspec_t){"ffn_gate_inp", d, e, 0, L->router, &S->router};
            ts[n++] = (tspec_t){"ffn_gate_exps", d, eh, e, L->exp_gate, &S->exp_gate};
            ts[n++] = (tspec_t){"ffn_down_exps", eh, d, e, L->exp_down, &S->exp_down};
            ts[n++] = (tspec_t){"ffn_up_exps", d, eh, e, L->exp_up, &S->exp_up};
            if (sh) {
                ts[n++] = (tspec_t){"ffn_gate_shexp", d, sh, 0, L->sh_w1, &S->sh_w1};
                ts[n++] = (tspec_t){"ffn_down_shexp", sh, d, 0, L->sh_w2, &S->sh_w2};
                ts[n++] = (tspec_t){"ffn_up_shexp", d, sh, 0, L->sh_w3, &S->sh_w3};
            } else if (layer_tensor(g, l, "ffn_gate_shexp")) {
                snprintf(err, errlen, "%s: tensor blk.%d.ffn_gate_shexp.weight: a shared "
                         "expert in this layer but not in layer %d", g->path, (int)l,
                         (int)c.n_dense_layers);
                return -1;
            }
        }
        for (int k = 0; k < n; k++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", (int)l, ts[k].n);
            if (load_tensor3(g, name, ts[k].ne0, ts[k].ne1, ts[k].ne2, ts[k].dst, ts[k].st, tb,
                             err, errlen))
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

int model_gguf_shape(const char *path, preset_model_t *out, char *err, size_t errlen) {
    gguf_t *g = NULL;
    model_config_t c;
    int rc = -1;
    if (gguf_open(path, &g, err, errlen) != 0) return -1;
    /* the header and the tensors' shapes and types only: nothing is dequantised */
    if (read_config(g, &c, err, errlen) != 0 || load_all(g, &c, NULL, err, errlen) != 0)
        goto done;
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)(strcspn(base, ".") ? strcspn(base, ".") : strlen(base)),
             base);
    /* the layers' matrices' type (the first layer's query; a file is written in one type,
     * llama.cpp's mixes keep most matrices in it): 16-bit files at 2 bytes, F32 at 4, the
     * block types as their formats, with an fp16 scale per 32 */
    const gguf_tensor_t *wq = gguf_tensor(g, "blk.0.attn_q.weight");
    uint32_t t = wq ? wq->type : DQ_F32;
    model_preset_shape(&c, name, t == DQ_F32 ? 4 : 2, out);
    if (t == DQ_Q8_0 || t == DQ_Q4_0) {
        if (preset_model_set_format(out, t == DQ_Q8_0 ? "q8_0" : "q4_0", err, errlen) != 0)
            goto done;
    } else if (t != DQ_F32 && t != DQ_F16 && t != DQ_BF16) {
        snprintf(err, errlen, "%s: its matrices are of ggml type %u, which the model "
                 "description does not know", path, (unsigned)t);
        goto done;
    }
    rc = 0;
done:
    gguf_close(g);
    return rc;
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

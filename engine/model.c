/* model: format dispatch, configuration checks, the shared weight arena. */
#include "engine/model.h"

#include "engine/gguf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bounds for a configuration read from a file: far above any real Llama (405B has dim
 * 16384, 126 layers, 128k vocab and context), low enough that products stay exact. */
#define MAX_DIM (1 << 17)
#define MAX_LAYERS 4096
#define MAX_HEADS 4096
#define MAX_HEAD_DIM 4096
#define MAX_HIDDEN (1 << 20)
#define MAX_VOCAB (1 << 22)
#define MAX_SEQ (1 << 24)
/* DeepSeek-V3 has 256 routed experts; layers x experts stays below 2^21 so that every
 * expert's dummy tensor id fits (engine/dummy_weight.h, DUMMY_T_EXPERT). */
#define MAX_EXPERTS 4096
#define MAX_LAYER_EXPERTS (1 << 21)

/* The mixture-of-experts fields: all 0 (dense), or a consistent MoE. */
static int moe_check(const model_config_t *c, const char *what, char *err, size_t errlen) {
    if (c->n_experts == 0) {
        if (c->experts_per_tok || c->moe_hidden || c->n_dense_layers || c->shared_hidden) {
            snprintf(err, errlen, "%s: experts_per_tok %d, moe_hidden %d, n_dense_layers %d, "
                     "shared_hidden %d without experts (n_experts = 0)", what,
                     (int)c->experts_per_tok, (int)c->moe_hidden, (int)c->n_dense_layers,
                     (int)c->shared_hidden);
            return -1;
        }
        return 0;
    }
    if (c->n_experts < 2 || c->n_experts > MAX_EXPERTS) {
        snprintf(err, errlen, "%s: n_experts = %d is out of range (0 for a dense model, or "
                 "2..%d)", what, (int)c->n_experts, MAX_EXPERTS);
        return -1;
    }
    if (c->experts_per_tok < 1 || c->experts_per_tok > c->n_experts) {
        snprintf(err, errlen, "%s: experts_per_tok = %d is out of range (1..n_experts = %d)",
                 what, (int)c->experts_per_tok, (int)c->n_experts);
        return -1;
    }
    if (c->moe_hidden <= 0 || c->moe_hidden > MAX_HIDDEN || c->shared_hidden < 0 ||
        c->shared_hidden > MAX_HIDDEN) {
        snprintf(err, errlen, "%s: moe_hidden = %d, shared_hidden = %d (need 1..%d and 0..%d)",
                 what, (int)c->moe_hidden, (int)c->shared_hidden, MAX_HIDDEN, MAX_HIDDEN);
        return -1;
    }
    if (c->n_dense_layers < 0 || c->n_dense_layers >= c->n_layers) {
        snprintf(err, errlen, "%s: n_dense_layers = %d is out of range (0..n_layers - 1 = %d)",
                 what, (int)c->n_dense_layers, (int)c->n_layers - 1);
        return -1;
    }
    if ((int64_t)c->n_layers * c->n_experts > MAX_LAYER_EXPERTS) {
        snprintf(err, errlen, "%s: %d layers x %d experts is more than the engine takes (%d)",
                 what, (int)c->n_layers, (int)c->n_experts, MAX_LAYER_EXPERTS);
        return -1;
    }
    return 0;
}

int model_layer_is_moe(const model_config_t *c, int32_t l) {
    return c->n_experts > 0 && l >= c->n_dense_layers;
}

int model_config_check(const model_config_t *c, const char *what, char *err, size_t errlen) {
    struct { const char *name; int32_t v, max; } f[] = {
        {"dim", c->dim, MAX_DIM},           {"n_layers", c->n_layers, MAX_LAYERS},
        {"n_heads", c->n_heads, MAX_HEADS}, {"n_kv_heads", c->n_kv_heads, MAX_HEADS},
        {"head_dim", c->head_dim, MAX_HEAD_DIM}, {"hidden_dim", c->hidden_dim, MAX_HIDDEN},
        {"vocab", c->vocab, MAX_VOCAB},     {"max_seq", c->max_seq, MAX_SEQ},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v <= 0 || f[i].v > f[i].max) {
            snprintf(err, errlen, "%s: %s = %d is out of range (1..%d)", what, f[i].name,
                     (int)f[i].v, (int)f[i].max);
            return -1;
        }
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0) {
        snprintf(err, errlen, "%s: n_heads = %d is not a multiple of n_kv_heads = %d", what,
                 (int)c->n_heads, (int)c->n_kv_heads);
        return -1;
    }
    if (c->head_dim % 2 != 0) {
        snprintf(err, errlen, "%s: head_dim = %d is odd (RoPE rotates pairs)", what,
                 (int)c->head_dim);
        return -1;
    }
    if (!isfinite(c->rope_theta) || c->rope_theta <= 0) {
        snprintf(err, errlen, "%s: rope_theta = %g is not a positive number", what,
                 (double)c->rope_theta);
        return -1;
    }
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0 || c->norm_eps >= 1) {
        snprintf(err, errlen, "%s: norm_eps = %g is outside (0, 1)", what, (double)c->norm_eps);
        return -1;
    }
    if (c->tied != 0 && c->tied != 1) {
        snprintf(err, errlen, "%s: tied = %d (must be 0 or 1)", what, (int)c->tied);
        return -1;
    }
    return moe_check(c, what, err, errlen);
}

/* Per-layer tensors, in arena order: the dense ones, then a mixture of experts'. */
#define N_SLOTS 16

/* Layer l's tensor sizes in floats, in arena order (0: the layer has no such tensor). */
static void layer_sizes(const model_config_t *c, int32_t l, size_t sz[N_SLOTS]) {
    size_t d = (size_t)c->dim, q = (size_t)c->n_heads * (size_t)c->head_dim;
    size_t kv = (size_t)c->n_kv_heads * (size_t)c->head_dim, h = (size_t)c->hidden_dim;
    int moe = model_layer_is_moe(c, l);
    size_t e = moe ? (size_t)c->n_experts : 0, eh = (size_t)c->moe_hidden * e;
    size_t sh = moe ? (size_t)c->shared_hidden : 0;
    if (moe) h = 0;
    size_t s[N_SLOTS] = {d, q * d, kv * d, kv * d, d * q, d, h * d, d * h, h * d,
                         e * d, eh * d, d * eh, eh * d, sh * d, d * sh, sh * d};
    memcpy(sz, s, sizeof s);
}

double model_params(const model_config_t *c) {
    double layers = 0;
    for (int32_t l = 0; l < c->n_layers; l++) {
        size_t sz[N_SLOTS];
        layer_sizes(c, l, sz);
        for (int i = 0; i < N_SLOTS; i++) layers += (double)sz[i];
    }
    double emb = (double)c->vocab * c->dim;
    return emb + layers + c->dim + (c->tied ? 0 : emb);
}

void model_preset_shape(const model_config_t *c, const char *name, int32_t dtype_bytes,
                        preset_model_t *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->n_layers = c->n_layers;
    out->d_model = c->dim;
    out->n_heads = c->n_heads;
    out->n_kv_heads = c->n_kv_heads;
    out->head_dim = c->head_dim;
    out->d_ff = c->hidden_dim;
    out->vocab = c->vocab;
    out->max_seq = c->max_seq;
    out->tied_embeddings = c->tied;
    out->dtype_bytes = dtype_bytes;
    out->n_experts = c->n_experts;
    out->experts_per_tok = c->experts_per_tok;
    out->moe_d_ff = c->moe_hidden;
    out->n_dense_layers = c->n_dense_layers;
    out->shared_d_ff = c->shared_hidden;
}

size_t model_body_floats(const model_config_t *c) {
    size_t n = (size_t)c->vocab * (size_t)c->dim + (size_t)c->dim;
    for (int32_t l = 0; l < c->n_layers; l++) {
        size_t sz[N_SLOTS];
        layer_sizes(c, l, sz);
        for (int i = 0; i < N_SLOTS; i++) n += sz[i];
    }
    return n;
}

static int alloc_model(const model_config_t *c, const char *source, const char *format,
                       int matrices, model_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (model_config_check(c, source, err, errlen) != 0) return -1;
    /* Checked bounds keep every product below 2^62 floats, so this double is exact
     * enough to compare; the size_t sums below cannot overflow once it passes. */
    double bytes = model_params(c) * sizeof(float);
    double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    if (matrices && phys > 0 && bytes > phys) {
        snprintf(err, errlen,
                 "%s: %.2f GB of fp32 weights do not fit in this machine's %.2f GB of memory",
                 source, bytes / 1e9, phys / 1e9);
        return -1;
    }
    if (bytes > (double)(SIZE_MAX / 2)) {
        snprintf(err, errlen, "%s: %.3g bytes of weights overflow the address space", source,
                 bytes);
        return -1;
    }
    model_t *m = calloc(1, sizeof *m);
    if (m) m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    size_t nf = (size_t)(2 * c->n_layers + 1) * (size_t)c->dim;
    if (matrices) nf = model_body_floats(c) + (c->tied ? 0 : (size_t)c->vocab * (size_t)c->dim);
    void *arena = NULL;
    if (!m || !m->layers || posix_memalign(&arena, 64, nf * sizeof(float)) != 0) {
        snprintf(err, errlen, "%s: out of memory for %.2f GB of weights", source,
                 (double)nf * sizeof(float) / 1e9);
        if (m) free(m->layers);
        free(m);
        return -1;
    }
    m->cfg = *c;
    m->arena = arena;
    float *p = arena;
    if (matrices) {
        m->tok_emb = p;
        p += (size_t)c->vocab * (size_t)c->dim;
    }
    for (int k = 0; k < N_SLOTS; k++) {
        if (!matrices && k != 0 && k != 5) continue;   /* attn_norm and ffn_norm only */
        for (int32_t l = 0; l < c->n_layers; l++) {
            model_layer_t *L = &m->layers[l];
            float **slot[N_SLOTS] = {&L->attn_norm, &L->wq,       &L->wk,       &L->wv,
                                     &L->wo,        &L->ffn_norm, &L->w1,       &L->w2,
                                     &L->w3,        &L->router,   &L->exp_gate, &L->exp_down,
                                     &L->exp_up,    &L->sh_w1,    &L->sh_w2,    &L->sh_w3};
            size_t sz[N_SLOTS];
            layer_sizes(c, l, sz);
            if (sz[k] == 0) continue;   /* NULL: this layer has no such tensor */
            *slot[k] = p;
            p += sz[k];
        }
    }
    m->final_norm = p;
    p += c->dim;
    if (matrices) m->lm_head = c->tied ? m->tok_emb : p;
    snprintf(m->source, sizeof m->source, "%s", source);
    snprintf(m->format, sizeof m->format, "%s", format);
    snprintf(m->weight_type, sizeof m->weight_type, "F32");
    *out = m;
    return 0;
}

int model_alloc(const model_config_t *c, const char *source, const char *format,
                model_t **out, char *err, size_t errlen) {
    return alloc_model(c, source, format, 1, out, err, errlen);
}

int model_alloc_norms(const model_config_t *c, const char *source, const char *format,
                      model_t **out, char *err, size_t errlen) {
    return alloc_model(c, source, format, 0, out, err, errlen);
}

void model_free(model_t *m) {
    if (!m) return;
    gguf_close(m->file);
    free(m->stored_layers);
    free(m->arena);
    free(m->layers);
    free(m);
}

int model_load(const char *spec, uint64_t seed, model_t **out, char *err, size_t errlen) {
    return model_open(spec, seed, 0, out, err, errlen);
}

int model_is_gguf(const char *path) {
    char magic[4] = {0};
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return 0;
    struct stat sb;
    size_t got = fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) ? fread(magic, 1, 4, f) : 0;
    fclose(f);
    return got == 4 && memcmp(magic, "GGUF", 4) == 0;
}

int model_shape_resolve(const char *name, preset_model_t *out, char *note, size_t notelen,
                        char *err, size_t errlen) {
    if (note && notelen) note[0] = '\0';
    if (model_is_gguf(name)) return model_gguf_shape(name, out, err, errlen);
    return preset_model_get_noted(name, out, note, notelen, err, errlen);
}

int model_open(const char *spec, uint64_t seed, int flags, model_t **out, char *err,
               size_t errlen) {
    *out = NULL;
    if (!spec || !*spec) {
        snprintf(err, errlen, "no model given (a .bin or .gguf file, or dummy:PRESET)");
        return -1;
    }
    if (strncmp(spec, "dummy:", 6) == 0)
        return model_load_dummy(spec + 6, seed, flags, out, err, errlen);
    FILE *f = fopen(spec, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open model file: %s", spec, strerror(errno));
        return -1;
    }
    /* fopen opens a directory; its reads then fail as if the file were short. */
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        snprintf(err, errlen, "%s: cannot open model file: %s", spec, strerror(EISDIR));
        return -1;
    }
    char magic[4] = {0};
    size_t got = fread(magic, 1, 4, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0)
        return model_load_gguf(spec, flags, out, err, errlen);
    return model_load_llama2c(spec, out, err, errlen);
}

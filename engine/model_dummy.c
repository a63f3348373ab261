/* model_dummy: seeded random weights in the shape of a simulator preset (vLLM's
 * --load-format dummy), for timing studies where only the shape matters.
 *
 * Values: engine/dummy_weight.h, a pure function of (seed, tensor, element), so the weights
 * depend only on the seed (never on the thread count) and a backend can generate the same
 * ones where they live (MODEL_SHAPE_ONLY: the host holds no weights at all). RMSNorm weights
 * are 1. rope_theta is 500000 for llama-3 presets (as those models use), 10000 otherwise.
 *
 * A mixture-of-experts preset (n_experts) gets a router and its experts in every layer from
 * n_dense_layers on, and a shared expert there when shared_d_ff > 0 (DeepSeek's plain sum:
 * no gate of its own). Latent attention and sliding windows are refused: the forward pass
 * has neither. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "engine/dummy_weight.h"
#include "engine/model.h"
#include "sim/presets.h"

#define CHUNK_FLOATS ((size_t)1 << 20)
#define MAX_THREADS 16

typedef struct {
    float *p;
    size_t n;
    uint64_t tensor;
} tensor_job_t;

typedef struct {
    const tensor_job_t *t;
    int n_t;
    uint64_t key;
    int cur;              /* next (tensor, chunk), shared under lock */
    size_t cur_off;
    pthread_mutex_t lock;
} fill_job_t;

static void *fill_worker(void *arg) {
    fill_job_t *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->lock);
        while (j->cur < j->n_t && j->cur_off >= j->t[j->cur].n) {
            j->cur++;
            j->cur_off = 0;
        }
        int t = j->cur;
        size_t off = j->cur_off;
        j->cur_off += CHUNK_FLOATS;
        pthread_mutex_unlock(&j->lock);
        if (t >= j->n_t) break;
        const tensor_job_t *tj = &j->t[t];
        size_t end = tj->n - off < CHUNK_FLOATS ? tj->n : off + CHUNK_FLOATS;
        for (size_t i = off; i < end; i++) tj->p[i] = dummy_weight_k(j->key, tj->tensor, i);
    }
    return NULL;
}

static void fill_all(const tensor_job_t *t, int n_t, uint64_t seed) {
    fill_job_t j = {.t = t, .n_t = n_t, .key = dummy_key(seed)};
    pthread_mutex_init(&j.lock, NULL);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (int i = 1; i < nt; i++)
        if (pthread_create(&th[started], NULL, fill_worker, &j) == 0) started++;
    fill_worker(&j); /* this thread works too; it also finishes alone if none started */
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&j.lock);
}

static int fill_model(model_t *m, uint64_t seed, char *err, size_t errlen) {
    const model_config_t *c = &m->cfg;
    size_t dim = (size_t)c->dim, qd = (size_t)c->n_heads * c->head_dim;
    size_t kvd = (size_t)c->n_kv_heads * c->head_dim, hid = (size_t)c->hidden_dim;
    size_t eh = (size_t)c->moe_hidden, sh = (size_t)c->shared_hidden;
    int n = 0;
    tensor_job_t *t = malloc(((size_t)c->n_layers * (11 + 3 * (size_t)c->n_experts) + 2) *
                             sizeof *t);
    if (!t) {
        snprintf(err, errlen, "%s: out of memory", m->source);
        return -1;
    }
    t[n++] = (tensor_job_t){m->tok_emb, (size_t)c->vocab * dim, DUMMY_T_TOK_EMB};
    if (!c->tied) t[n++] = (tensor_job_t){m->lm_head, (size_t)c->vocab * dim, DUMMY_T_LM_HEAD};
    for (int32_t l = 0; l < c->n_layers; l++) {
        model_layer_t *L = &m->layers[l];
        t[n++] = (tensor_job_t){L->wq, qd * dim, DUMMY_T_LAYER(l, DUMMY_K_WQ)};
        t[n++] = (tensor_job_t){L->wk, kvd * dim, DUMMY_T_LAYER(l, DUMMY_K_WK)};
        t[n++] = (tensor_job_t){L->wv, kvd * dim, DUMMY_T_LAYER(l, DUMMY_K_WV)};
        t[n++] = (tensor_job_t){L->wo, dim * qd, DUMMY_T_LAYER(l, DUMMY_K_WO)};
        if (!model_layer_is_moe(c, l)) {
            t[n++] = (tensor_job_t){L->w1, hid * dim, DUMMY_T_LAYER(l, DUMMY_K_W1)};
            t[n++] = (tensor_job_t){L->w2, dim * hid, DUMMY_T_LAYER(l, DUMMY_K_W2)};
            t[n++] = (tensor_job_t){L->w3, hid * dim, DUMMY_T_LAYER(l, DUMMY_K_W3)};
        } else {
            int32_t ne = c->n_experts;
            t[n++] = (tensor_job_t){L->router, (size_t)ne * dim, DUMMY_T_LAYER(l, DUMMY_K_ROUTER)};
            /* each expert its own tensor id, elements r * cols + c of its own matrix: what
             * gen_matrix makes of that id on a backend (MODEL_SHAPE_ONLY) */
            for (int32_t e = 0; e < ne; e++) {
                size_t off = (size_t)e * eh * dim;
                t[n++] = (tensor_job_t){L->exp_gate + off, eh * dim,
                                        DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W1)};
                t[n++] = (tensor_job_t){L->exp_down + off, dim * eh,
                                        DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W2)};
                t[n++] = (tensor_job_t){L->exp_up + off, eh * dim,
                                        DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W3)};
            }
            if (sh) {
                t[n++] = (tensor_job_t){L->sh_w1, sh * dim, DUMMY_T_LAYER(l, DUMMY_K_SH_W1)};
                t[n++] = (tensor_job_t){L->sh_w2, dim * sh, DUMMY_T_LAYER(l, DUMMY_K_SH_W2)};
                t[n++] = (tensor_job_t){L->sh_w3, sh * dim, DUMMY_T_LAYER(l, DUMMY_K_SH_W3)};
            }
        }
        for (size_t i = 0; i < dim; i++) L->attn_norm[i] = L->ffn_norm[i] = 1.0f;
    }
    for (size_t i = 0; i < dim; i++) m->final_norm[i] = 1.0f;
    fill_all(t, n, seed);
    free(t);
    return 0;
}

int model_load_dummy(const char *preset, uint64_t seed, int flags, model_t **out, char *err,
                     size_t errlen) {
    *out = NULL;
    preset_model_t p;
    if (preset_model_get(preset, &p, err, errlen) != 0) return -1;
    if (p.kv_lora_rank > 0 || p.sliding_window > 0) {
        snprintf(err, errlen, "dummy:%s: %s; the engine runs Llama-family models (dense or a "
                 "mixture of experts) with full attention only (simulate it with `twinserve "
                 "sim --model %s`)", preset,
                 p.kv_lora_rank > 0 ? "multi-head latent attention" : "a sliding window",
                 preset);
        return -1;
    }
    int moe = preset_model_is_moe(&p);
    model_config_t c = {
        .dim = p.d_model, .n_layers = p.n_layers, .n_heads = p.n_heads,
        .n_kv_heads = p.n_kv_heads, .head_dim = p.head_dim,
        /* a preset with experts only in every layer may leave d_ff unused (0) */
        .hidden_dim = p.d_ff > 0 || !moe ? p.d_ff : p.moe_d_ff,
        .vocab = p.vocab, .max_seq = p.max_seq,
        .rope_theta = strncasecmp(p.name, "llama-3", 7) == 0 ? 500000.0f : 10000.0f,
        .norm_eps = 1e-5f, .tied = p.tied_embeddings ? 1 : 0,
    };
    if (moe) {
        c.n_experts = p.n_experts;
        c.experts_per_tok = p.experts_per_tok;
        c.moe_hidden = p.moe_d_ff;
        c.n_dense_layers = p.n_dense_layers;
        c.shared_hidden = p.shared_d_ff;
    }
    char source[512];
    snprintf(source, sizeof source, "dummy:%s", preset);
    model_t *m;
    if (flags & MODEL_SHAPE_ONLY) {
        if (model_config_check(&c, source, err, errlen)) return -1;
        if (!(m = calloc(1, sizeof *m))) {
            snprintf(err, errlen, "%s: out of memory", source);
            return -1;
        }
        m->cfg = c;
        m->shape_only = 1;
        m->dummy_seed = seed;
        snprintf(m->source, sizeof m->source, "%s", source);
        snprintf(m->format, sizeof m->format, "dummy");
        snprintf(m->weight_type, sizeof m->weight_type, "F32");
        *out = m;
        return 0;
    }
    if (model_alloc(&c, source, "dummy", &m, err, errlen) != 0) return -1;
    m->dummy_seed = seed;
    if (fill_model(m, seed, err, errlen)) {
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

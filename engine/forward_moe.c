/* forward_moe: the mixture-of-experts MLP of the forward pass (engine/forward_internal.h).
 *
 * A step through an MoE layer, for the step's m tokens (x = the normalised rows in f->xb):
 *  1. router logits r = x . router^T on the backend ([m][n_experts], fp32), downloaded: small;
 *  2. on the host, per token: the k = experts_per_tok largest logits (ties: the lower expert
 *     id), and their weights softmax over those k logits only. That is Mixtral's rule (and
 *     Qwen3-MoE's, norm_topk_prob): the full softmax's top-k probabilities renormalised to
 *     sum to 1. Models that keep the unnormalised probabilities (Qwen2-MoE), or route with a
 *     sigmoid and groups (DeepSeek-V3), are run with this rule too: for dummy weights only
 *     the shape matters; GGUF files that say otherwise are refused (model_gguf.c);
 *  3. the (token, choice) pairs grouped by expert, tokens in increasing order within an
 *     expert; for each expert with tokens: its rows gathered (gather_idx), SwiGLU through its
 *     gate, up and down, the outputs in that expert's range of ye;
 *  4. the shared expert (if any) over every token into ys;
 *  5. f->xb row t = ys[t] + sum over the token's choices, in rank order, of weight x its
 *     expert's output row (moe_combine).
 * Batch invariance (bk_opts_t.batch_invariant): a token's router row, its top-k and
 * weights, its expert rows (products whose rows do not depend on the other rows, on a
 * backend that promises it) and its combine order depend on that token alone, so its output
 * is the same alone or in any batch (tests/test_moe.c checks it).
 *
 * Weights: the router is one matrix; each expert's gate and up one buffer (up at e_up_off),
 * its down another, uploaded like the dense MLP's (stored types where the backend multiplies
 * them: a GGUF file's 3-D tensor is sliced per expert, expert e at e x its bytes). */
#include "engine/forward_internal.h"

#include "engine/dequant.h"
#include "engine/dummy_weight.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const model_layer_t *host_layer(const model_t *m, int32_t l) {
    static const model_layer_t none;
    return m->layers ? &m->layers[l] : &none;
}

static const model_stored_layer_t *stored_layer(const model_t *m, int32_t l) {
    static const model_stored_layer_t none;
    return m->stored_layers ? &m->stored_layers[l] : &none;
}

/* Expert e's slice of a stored [n_experts][rows][cols] tensor (data NULL: none). */
static model_stored_t slice(const model_stored_t *t, int32_t e, int32_t rows, int32_t cols) {
    uint64_t bytes = 0;
    if (!t->data || dq_bytes(t->type, (uint64_t)rows * (uint64_t)cols, &bytes) != 0)
        return (model_stored_t){t->type, NULL};
    return (model_stored_t){t->type, (const char *)t->data + (size_t)e * bytes};
}

/* Expert e's gate and up (gu[0], gu[1]) and down sources; st holds their stored slices. */
static void expert_sources(const fwd_t *f, const model_t *m, int32_t l, int32_t e,
                           model_stored_t st[3], wsrc_t gu[2], wsrc_t *down) {
    const model_config_t *c = &f->cfg;
    const model_layer_t *L = host_layer(m, l);
    const model_stored_layer_t *S = stored_layer(m, l);
    int32_t ne = c->n_experts, h = c->moe_hidden, dim = c->dim;
    size_t off = (size_t)e * (size_t)h * (size_t)dim;
    st[0] = slice(&S->exp_gate, e, h, dim);
    st[1] = slice(&S->exp_up, e, h, dim);
    st[2] = slice(&S->exp_down, e, dim, h);
    gu[0] = (wsrc_t){L->exp_gate ? L->exp_gate + off : NULL,
                     DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W1), &st[0]};
    gu[1] = (wsrc_t){L->exp_up ? L->exp_up + off : NULL, DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W3),
                     &st[1]};
    *down = (wsrc_t){L->exp_down ? L->exp_down + off : NULL,
                     DUMMY_T_EXPERT(l, e, ne, DUMMY_K_W2), &st[2]};
}

static void shared_sources(const model_t *m, int32_t l, wsrc_t gu[2], wsrc_t *down) {
    const model_layer_t *L = host_layer(m, l);
    const model_stored_layer_t *S = stored_layer(m, l);
    gu[0] = (wsrc_t){L->sh_w1, DUMMY_T_LAYER(l, DUMMY_K_SH_W1), &S->sh_w1};
    gu[1] = (wsrc_t){L->sh_w3, DUMMY_T_LAYER(l, DUMMY_K_SH_W3), &S->sh_w3};
    *down = (wsrc_t){L->sh_w2, DUMMY_T_LAYER(l, DUMMY_K_SH_W2), &S->sh_w2};
}

int fmoe_check(const fwd_t *f, char *err, size_t errlen) {
    const model_config_t *c = &f->cfg;
    if (c->n_experts == 0 || (f->b->gather_idx && f->b->moe_combine)) return 0;
    snprintf(err, errlen, "backend %s does not run mixture-of-experts layers (this model has "
             "%d experts, top %d); use --backend cpu", f->b->name, (int)c->n_experts,
             (int)c->experts_per_tok);
    return -1;
}

void fmoe_plan(fwd_t *f, const model_t *m, int32_t l, size_t *n) {
    const model_config_t *c = &f->cfg;
    fwd_layer_t *d = &f->layers[l];
    int32_t dim = c->dim, ne = c->n_experts, h = c->moe_hidden, sh = c->shared_hidden;
    int32_t rgu[] = {h, h}, sgu[] = {sh, sh};
    const model_layer_t *L = host_layer(m, l);
    const model_stored_layer_t *S = stored_layer(m, l);
    wsrc_t router = {L->router, DUMMY_T_LAYER(l, DUMMY_K_ROUTER), &S->router};
    d->moe = 1;
    d->t_router = fwd_group_type(f, 1, &router, &ne, dim);
    fwd_count(f, n, d->t_router, fwd_mat_elems(f, d->t_router, ne, dim));
    /* one type for every expert: a file stores them in one tensor; expert 0 decides */
    model_stored_t st[3];
    wsrc_t gu[2], down;
    expert_sources(f, m, l, 0, st, gu, &down);
    d->t_egu = fwd_group_type(f, 2, gu, rgu, dim);
    d->t_edown = fwd_group_type(f, 1, &down, &dim, h);
    d->e_up_off = fwd_mat_elems(f, d->t_egu, h, dim);
    for (int32_t e = 0; e < ne; e++) {
        fwd_count(f, n, d->t_egu, 2 * d->e_up_off);
        fwd_count(f, n, d->t_edown, fwd_mat_elems(f, d->t_edown, dim, h));
    }
    if (sh > 0) {
        shared_sources(m, l, gu, &down);
        d->t_sgu = fwd_group_type(f, 2, gu, sgu, dim);
        d->t_sdown = fwd_group_type(f, 1, &down, &dim, sh);
        d->s_up_off = fwd_mat_elems(f, d->t_sgu, sh, dim);
        fwd_count(f, n, d->t_sgu, 2 * d->s_up_off);
        fwd_count(f, n, d->t_sdown, fwd_mat_elems(f, d->t_sdown, dim, sh));
    }
}

int fmoe_upload(fwd_t *f, const model_t *m, int32_t l) {
    const model_config_t *c = &f->cfg;
    fwd_layer_t *d = &f->layers[l];
    int32_t dim = c->dim, ne = c->n_experts, h = c->moe_hidden, sh = c->shared_hidden;
    int32_t rgu[] = {h, h}, sgu[] = {sh, sh};
    const model_layer_t *L = host_layer(m, l);
    const model_stored_layer_t *S = stored_layer(m, l);
    wsrc_t router = {L->router, DUMMY_T_LAYER(l, DUMMY_K_ROUTER), &S->router};
    if (!(d->e13 = calloc((size_t)ne, sizeof *d->e13)) ||
        !(d->e2 = calloc((size_t)ne, sizeof *d->e2)))
        return fwd_fail(f, "out of memory (layer %d's %d experts)", (int)l, (int)ne);
    if (!(d->router = fwd_upload_mats(f, 1, &router, &ne, dim, d->t_router))) return -1;
    for (int32_t e = 0; e < ne; e++) {
        model_stored_t st[3];
        wsrc_t gu[2], down;
        expert_sources(f, m, l, e, st, gu, &down);
        if (!(d->e13[e] = fwd_upload_mats(f, 2, gu, rgu, dim, d->t_egu)) ||
            !(d->e2[e] = fwd_upload_mats(f, 1, &down, &dim, h, d->t_edown)))
            return -1;
    }
    if (sh > 0) {
        wsrc_t gu[2], down;
        shared_sources(m, l, gu, &down);
        if (!(d->s13 = fwd_upload_mats(f, 2, gu, sgu, dim, d->t_sgu)) ||
            !(d->s2 = fwd_upload_mats(f, 1, &down, &dim, sh, d->t_sdown)))
            return -1;
    }
    return 0;
}

int fmoe_alloc(fwd_t *f) {
    const model_config_t *c = &f->cfg;
    if (c->n_experts == 0) return 0;
    size_t T = (size_t)f->o.max_tokens, E = (size_t)c->n_experts, K = (size_t)c->experts_per_tok;
    size_t dim = (size_t)c->dim;
    size_t hid = (size_t)(c->moe_hidden > c->shared_hidden ? c->moe_hidden : c->shared_hidden);
    if (!(f->rl = fwd_alloc(f, BK_F32, T * E)) || !(f->xe = fwd_alloc(f, BK_ACT, T * dim)) ||
        !(f->he = fwd_alloc(f, BK_ACT, T * 2 * hid)) ||
        !(f->ye = fwd_alloc(f, BK_ACT, T * K * dim)) ||
        (c->shared_hidden > 0 && !(f->ys = fwd_alloc(f, BK_ACT, T * dim))))
        return -1;
    f->h_logits = malloc(T * E * sizeof *f->h_logits);
    f->h_w = malloc(T * K * sizeof *f->h_w);
    f->h_sel = malloc(T * K * sizeof *f->h_sel);
    f->h_src = malloc(T * K * sizeof *f->h_src);
    f->h_rows = malloc(T * K * sizeof *f->h_rows);
    f->h_cnt = malloc(E * sizeof *f->h_cnt);
    f->h_off = malloc((E + 1) * sizeof *f->h_off);
    if (!f->h_logits || !f->h_w || !f->h_sel || !f->h_src || !f->h_rows || !f->h_cnt ||
        !f->h_off)
        return fwd_fail(f, "out of memory (routing %zu tokens over %zu experts)", T, E);
    return 0;
}

void fmoe_free(fwd_t *f) {
    backend_t *b = f->b;
    if (f->layers)
        for (int32_t l = 0; l < f->cfg.n_layers; l++) {
            fwd_layer_t *d = &f->layers[l];
            if (!d->moe) continue;
            b->release(b, d->router);
            for (int32_t e = 0; e < f->cfg.n_experts; e++) {
                if (d->e13) b->release(b, d->e13[e]);
                if (d->e2) b->release(b, d->e2[e]);
            }
            b->release(b, d->s13);
            b->release(b, d->s2);
            free(d->e13);
            free(d->e2);
        }
    void *bufs[] = {f->rl, f->xe, f->he, f->ye, f->ys};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) b->release(b, bufs[i]);
    free(f->h_logits), free(f->h_w), free(f->h_sel), free(f->h_src), free(f->h_rows);
    free(f->h_cnt), free(f->h_off);
}

/* Step 2 for one token: the k largest of lg[n] (ties: the lower index) into sel[k], in
 * rank order, and their softmax into w[k]. */
static void route(const float *lg, int32_t n, int32_t k, int32_t *sel, float *w) {
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < n; e++) {
            int taken = 0;
            for (int32_t i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (!taken && (best < 0 || lg[e] > lg[best])) best = e;
        }
        sel[j] = best;
    }
    double sum = 0, mx = lg[sel[0]];
    for (int32_t j = 0; j < k; j++) sum += exp((double)lg[sel[j]] - mx);
    for (int32_t j = 0; j < k; j++) w[j] = (float)(exp((double)lg[sel[j]] - mx) / sum);
}

#define BKM(call)                                                                      \
    do {                                                                               \
        if (call) return fwd_fail(f, "backend %s: layer %d (experts): %s", b->name,     \
                                  (int)l, b->errmsg);                                  \
    } while (0)

int fmoe_step(fwd_t *f, int32_t l, int32_t m) {
    backend_t *b = f->b;
    const model_config_t *c = &f->cfg;
    const fwd_layer_t *w = &f->layers[l];
    int32_t ne = c->n_experts, k = c->experts_per_tok, dim = c->dim, h = c->moe_hidden;
    int32_t sh = c->shared_hidden;
    BKM(fwd_mm(f, f->rl, BK_F32, f->xb, w->router, w->t_router, m, ne, dim));
    BKM(b->download_f32(b, f->h_logits, f->rl, BK_F32, (size_t)m * ne));
    for (int32_t t = 0; t < m; t++)
        route(f->h_logits + (size_t)t * ne, ne, k, f->h_sel + (size_t)t * k,
              f->h_w + (size_t)t * k);
    /* counting sort of the (token, choice) pairs by expert: h_rows[h_off[e]..] are expert
     * e's tokens in increasing order, h_src[t k + j] the row of ye that choice j of t gets */
    memset(f->h_cnt, 0, (size_t)ne * sizeof *f->h_cnt);
    for (size_t i = 0; i < (size_t)m * k; i++) f->h_cnt[f->h_sel[i]]++;
    f->h_off[0] = 0;
    for (int32_t e = 0; e < ne; e++) f->h_off[e + 1] = f->h_off[e] + f->h_cnt[e];
    memset(f->h_cnt, 0, (size_t)ne * sizeof *f->h_cnt);
    for (int32_t t = 0; t < m; t++)
        for (int32_t j = 0; j < k; j++) {
            int32_t e = f->h_sel[(size_t)t * k + j], r = f->h_off[e] + f->h_cnt[e]++;
            f->h_rows[r] = t;
            f->h_src[(size_t)t * k + j] = r;
        }
    for (int32_t e = 0; e < ne; e++) {
        int32_t n = f->h_off[e + 1] - f->h_off[e];
        if (n == 0) continue;
        void *gate = f->he, *up = fwd_at(f, BK_ACT, f->he, (size_t)n * h);
        void *y = fwd_at(f, BK_ACT, f->ye, (size_t)f->h_off[e] * dim);
        BKM(b->gather_idx(b, f->xe, f->xb, dim, f->h_rows + f->h_off[e], n));
        BKM(fwd_mm(f, gate, BK_ACT, f->xe, w->e13[e], w->t_egu, n, h, dim));
        BKM(fwd_mm(f, up, BK_ACT, f->xe, fwd_at(f, BK_WEIGHT, w->e13[e], w->e_up_off), w->t_egu,
                   n, h, dim));
        BKM(b->silu_mul(b, gate, gate, up, (size_t)n * h));
        BKM(fwd_mm(f, y, BK_ACT, gate, w->e2[e], w->t_edown, n, dim, h));
    }
    if (sh > 0) {
        void *gate = f->he, *up = fwd_at(f, BK_ACT, f->he, (size_t)m * sh);
        BKM(fwd_mm(f, gate, BK_ACT, f->xb, w->s13, w->t_sgu, m, sh, dim));
        BKM(fwd_mm(f, up, BK_ACT, f->xb, fwd_at(f, BK_WEIGHT, w->s13, w->s_up_off), w->t_sgu, m,
                   sh, dim));
        BKM(b->silu_mul(b, gate, gate, up, (size_t)m * sh));
        BKM(fwd_mm(f, f->ys, BK_ACT, gate, w->s2, w->t_sdown, m, dim, sh));
    }
    BKM(b->moe_combine(b, f->xb, f->ye, sh > 0 ? f->ys : NULL, f->h_src, f->h_w, m, k, dim));
    return 0;
}

/* forward: see forward.h.
 *
 * Weight layout on the backend: every matrix goes through upload_matrix, in the backend's
 * own layout. Per layer, Q, K and V are uploaded one after the other into one buffer, and
 * the gate and up projections likewise. When every part's row count is a multiple of the
 * backend's matrix_row_align, the buffer is the stored [(q_dim + 2 kv_dim)][dim] (resp.
 * [2 hidden][dim]) matrix, and a single-token step multiplies by it once (one
 * matrix-vector product instead of three, whose output rows q|k|v are then contiguous).
 * Otherwise, and in larger steps, each part is multiplied separately, writing [m][q_dim],
 * [m][kv_dim], [m][kv_dim] one after the other, so the same activation buffer serves both
 * cases. The embedding table is a matrix too ([vocab][dim]), so a tied LM head shares it.
 *
 * Stored types (backend.h): on a backend that multiplies them, each group of matrices
 * whose parts a GGUF file stores in one type the backend supports (F16, BF16, Q8_0, Q4_0)
 * is uploaded in that type and multiplied with matmul_q; every other matrix goes through
 * the fp32 copy as before. So types are per group and per layer (fwd_layer_t), and the
 * parts' offsets too. The embedding table stays an upload_matrix matrix (embed reads it);
 * a tied LM head of a stored type is then uploaded a second time, in that type. */
#include "engine/forward.h"
#include "engine/forward_internal.h"

#include "engine/dequant.h"
#include "engine/dummy_weight.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int fwd_fail(fwd_t *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->errmsg, sizeof f->errmsg, fmt, ap);
    va_end(ap);
    return -1;
}

/* A buffer n elements past p: device pointers are opaque but offsets within one are valid. */
void *fwd_at(const fwd_t *f, bk_kind_t kind, const void *p, size_t n) {
    return (char *)p + n * f->b->elem_size(f->b, kind);
}

void *fwd_alloc(fwd_t *f, bk_kind_t kind, size_t n) {
    void *p = f->b->alloc(f->b, kind, n);
    if (!p) fwd_fail(f, "backend %s: %s", f->b->name, f->b->errmsg);
    return p;
}


/* Elements of a [rows][cols] matrix kept in `type` (DQ_F32: the backend's own layout). */
size_t fwd_mat_elems(const fwd_t *f, uint32_t type, int32_t rows, int32_t cols) {
    backend_t *b = f->b;
    return type == DQ_F32 ? b->matrix_elems(b, rows, cols) : b->qmatrix_elems(b, type, rows, cols);
}

/* The type a group of matrices is kept in: the parts' common stored type where the
 * backend multiplies it, else DQ_F32. */
uint32_t fwd_group_type(const fwd_t *f, int parts, const wsrc_t *src, const int32_t *rows,
                           int32_t cols) {
    backend_t *b = f->b;
    if (f->shape_only || !b->qmatrix_elems || !b->upload_qmatrix || !b->matmul_q ||
        !src[0].st || !src[0].st->data || src[0].st->type == DQ_F32)
        return DQ_F32;
    for (int i = 0; i < parts; i++)
        if (!src[i].st || !src[i].st->data || src[i].st->type != src[0].st->type ||
            !b->qmatrix_elems(b, src[0].st->type, rows[i], cols))
            return DQ_F32;
    return src[0].st->type;
}

/* Stores `parts` matrices [rows[i]][cols] one after the other in one new weight buffer,
 * in `type`; part i starts mat_elems of the parts before it into the buffer. */
void *fwd_upload_mats(fwd_t *f, int parts, const wsrc_t *src, const int32_t *rows,
                         int32_t cols, uint32_t type) {
    backend_t *b = f->b;
    size_t total = 0;
    for (int i = 0; i < parts; i++) total += fwd_mat_elems(f, type, rows[i], cols);
    void *dst = fwd_alloc(f, BK_WEIGHT, total);
    if (!dst) return NULL;
    size_t off = 0;
    for (int i = 0; i < parts; i++) {
        void *d = fwd_at(f, BK_WEIGHT, dst, off);
        const float *host = src[i].host;
        float *conv = NULL;
        if (!f->shape_only && type == DQ_F32 && !host) {
            /* a lazily loaded file's matrix (MODEL_LAZY): converted for this upload only */
            size_t n = (size_t)rows[i] * (size_t)cols;
            if (!src[i].st || !src[i].st->data) {
                fwd_fail(f, "a %d x %d matrix has neither host weights nor a stored form", rows[i],
                     cols);
                return NULL;
            }
            if (!(conv = malloc(n * sizeof *conv))) {
                fwd_fail(f, "out of memory converting a %d x %d %s matrix", rows[i], cols,
                     dq_type_name(src[i].st->type));
                return NULL;
            }
            dq_convert(src[i].st->type, src[i].st->data, conv, n);
            host = conv;
        }
        int rc = f->shape_only ? b->gen_matrix(b, d, rows[i], cols, f->seed, src[i].tensor)
                 : type == DQ_F32 ? b->upload_matrix(b, d, host, rows[i], cols)
                                  : b->upload_qmatrix(b, d, src[i].st->data, type, rows[i], cols);
        free(conv);
        if (rc) {
            fwd_fail(f, "backend %s: %s a %d x %d %s matrix: %s", b->name,
                 f->shape_only ? "generating" : "uploading", rows[i], cols,
                 dq_type_name(type), b->errmsg);
            return NULL;
        }
        off += fwd_mat_elems(f, type, rows[i], cols);
    }
    return dst;
}

static void *upload_mat(fwd_t *f, const wsrc_t *s, int32_t rows, int32_t cols, uint32_t type) {
    return fwd_upload_mats(f, 1, s, &rows, cols, type);
}

/* A vector (norm weights): the backend's weight type, no layout. Shape-only dummy models
 * have all-ones norms. */
static void *upload1(fwd_t *f, const float *src, size_t n) {
    float *ones = NULL;
    if (!src) {
        if (!(ones = malloc(n * sizeof *ones))) {
            fwd_fail(f, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
        src = ones;
    }
    void *dst = fwd_alloc(f, BK_WEIGHT, n);
    if (dst && f->b->upload_weight(f->b, dst, src, n)) {
        fwd_fail(f, "backend %s: uploading weights: %s", f->b->name, f->b->errmsg);
        dst = NULL;
    }
    free(ones);
    return dst;
}

/* Per layer, the matrices' sources (shape-only dummies have no host tensors). */
typedef struct {
    wsrc_t qkv[3], wo, gu[2], w2;
} layer_src_t;

static void layer_sources(const model_t *m, int32_t l, layer_src_t *s) {
    static const model_layer_t none;
    static const model_stored_layer_t snone;
    const model_layer_t *w = m->layers ? &m->layers[l] : &none;
    const model_stored_layer_t *st = m->stored_layers ? &m->stored_layers[l] : &snone;
    *s = (layer_src_t){
        {{w->wq, DUMMY_T_LAYER(l, DUMMY_K_WQ), &st->wq},
         {w->wk, DUMMY_T_LAYER(l, DUMMY_K_WK), &st->wk},
         {w->wv, DUMMY_T_LAYER(l, DUMMY_K_WV), &st->wv}},
        {w->wo, DUMMY_T_LAYER(l, DUMMY_K_WO), &st->wo},
        {{w->w1, DUMMY_T_LAYER(l, DUMMY_K_W1), &st->w1},
         {w->w3, DUMMY_T_LAYER(l, DUMMY_K_W3), &st->w3}},
        {w->w2, DUMMY_T_LAYER(l, DUMMY_K_W2), &st->w2},
    };
}

/* Adds a group's elements to *elems and its bytes to the per-type count. */
void fwd_count(fwd_t *f, size_t *elems, uint32_t type, size_t n) {
    *elems += n;
    if (type < 32) f->type_bytes[type] += (double)n * (double)f->b->elem_size(f->b, BK_WEIGHT);
}

/* Chooses every matrix's type and the fused matrices' offsets; returns the weight
 * elements upload_model allocates, so the backend can reserve them at once. */
static size_t plan(fwd_t *f, const model_t *m, const wsrc_t *head) {
    const model_config_t *c = &f->cfg;
    int32_t dim = c->dim, hid = c->hidden_dim, al = f->b->matrix_row_align;
    int32_t rqkv[] = {f->q_dim, f->kv_dim, f->kv_dim}, rgu[] = {hid, hid};
    size_t n = (size_t)c->n_layers * 2 * (size_t)dim + (size_t)dim;   /* the norms */
    memset(f->type_bytes, 0, sizeof f->type_bytes);
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_src_t s;
        fwd_layer_t *d = &f->layers[l];
        layer_sources(m, l, &s);
        d->t_qkv = fwd_group_type(f, 3, s.qkv, rqkv, dim);
        d->t_o = fwd_group_type(f, 1, &s.wo, &dim, f->q_dim);
        d->k_off = fwd_mat_elems(f, d->t_qkv, f->q_dim, dim);
        d->v_off = d->k_off + fwd_mat_elems(f, d->t_qkv, f->kv_dim, dim);
        d->fuse_qkv = al >= 1 && f->q_dim % al == 0 && f->kv_dim % al == 0;
        fwd_count(f, &n, d->t_qkv, d->v_off + fwd_mat_elems(f, d->t_qkv, f->kv_dim, dim));
        fwd_count(f, &n, d->t_o, fwd_mat_elems(f, d->t_o, dim, f->q_dim));
        if (model_layer_is_moe(c, l)) {
            fmoe_plan(f, m, l, &n);
            continue;
        }
        d->t_gu = fwd_group_type(f, 2, s.gu, rgu, dim);
        d->t_down = fwd_group_type(f, 1, &s.w2, &dim, hid);
        d->up_off = fwd_mat_elems(f, d->t_gu, hid, dim);
        d->fuse_gu = al >= 1 && hid % al == 0;
        fwd_count(f, &n, d->t_gu, 2 * d->up_off);
        fwd_count(f, &n, d->t_down, fwd_mat_elems(f, d->t_down, dim, hid));
    }
    f->t_head = fwd_group_type(f, 1, head, &c->vocab, dim);
    size_t emb = f->b->matrix_elems(f->b, c->vocab, dim);
    int shared = c->tied && f->t_head == DQ_F32;
    /* the table: its bytes count as weights only when the LM head multiplies it, or when
     * untied (a decode step then gathers rows of it: cmd_bench's accounting) */
    n += emb;
    if (shared || !c->tied) f->type_bytes[DQ_F32] += (double)emb * f->b->elem_size(f->b, BK_WEIGHT);
    if (!shared) fwd_count(f, &n, f->t_head, fwd_mat_elems(f, f->t_head, c->vocab, dim));
    f->weight_bytes = (double)c->dim * (2 * c->n_layers + 1) * f->b->elem_size(f->b, BK_WEIGHT);
    for (int t = 0; t < 32; t++) f->weight_bytes += f->type_bytes[t];
    return n;
}

static int upload_model(fwd_t *f, const model_t *m) {
    const model_config_t *c = &f->cfg;
    backend_t *b = f->b;
    int32_t dim = c->dim, hid = c->hidden_dim;
    f->layers = calloc((size_t)c->n_layers, sizeof *f->layers);
    if (!f->layers) return fwd_fail(f, "out of memory");
    wsrc_t head = {c->tied ? m->tok_emb : m->lm_head, c->tied ? DUMMY_T_TOK_EMB : DUMMY_T_LM_HEAD,
                   c->tied ? &m->stored_tok_emb : &m->stored_lm_head};
    size_t total = plan(f, m, &head);
    /* Refuse before filling the memory: on the CPU a host copy (a load without MODEL_LAZY)
     * is still held while the backend's copy is made, so a model larger than half the
     * memory would be killed. */
    size_t free_b = 0, total_b = 0;
    double need = (double)total * (double)b->elem_size(b, BK_WEIGHT);
    if (b->mem_info(b, &free_b, &total_b) == 0 && need > (double)free_b)
        return fwd_fail(f, "the weights need %.2f GB on backend %s, only %.2f GB are free",
                    need / 1e9, b->name, (double)free_b / 1e9);
    if (b->reserve_weights(b, total))
        return fwd_fail(f, "backend %s: reserving %.2f GB of weights: %s", b->name, need / 1e9,
                    b->errmsg);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const model_layer_t *w = m->layers ? &m->layers[l] : NULL;
        fwd_layer_t *d = &f->layers[l];
        layer_src_t s;
        layer_sources(m, l, &s);
        int32_t rqkv[] = {f->q_dim, f->kv_dim, f->kv_dim}, rgu[] = {hid, hid};
        if (!(d->attn_norm = upload1(f, w ? w->attn_norm : NULL, (size_t)dim)) ||
            !(d->wqkv = fwd_upload_mats(f, 3, s.qkv, rqkv, dim, d->t_qkv)) ||
            !(d->wo = upload_mat(f, &s.wo, dim, f->q_dim, d->t_o)) ||
            !(d->ffn_norm = upload1(f, w ? w->ffn_norm : NULL, (size_t)dim)))
            return -1;
        if (d->moe ? fmoe_upload(f, m, l)
                   : !(d->w13 = fwd_upload_mats(f, 2, s.gu, rgu, dim, d->t_gu)) ||
                         !(d->w2 = upload_mat(f, &s.w2, dim, hid, d->t_down)))
            return -1;
    }
    wsrc_t emb = {m->tok_emb, DUMMY_T_TOK_EMB, &m->stored_tok_emb};
    if (!(f->tok_emb = upload_mat(f, &emb, c->vocab, dim, DQ_F32)) ||
        !(f->final_norm = upload1(f, m->final_norm, (size_t)dim)))
        return -1;
    if (c->tied && f->t_head == DQ_F32) f->lm_head = f->tok_emb;
    else if (!(f->lm_head = upload_mat(f, &head, c->vocab, dim, f->t_head)))
        return -1;
    return 0;
}

int fwd_new(backend_t *b, const model_t *m, const fwd_opts_t *o, fwd_t **out, char *err,
            size_t errlen) {
    *out = NULL;
    const model_config_t *c = &m->cfg;
    if (model_config_check(c, m->source, err, errlen) != 0) return -1;
    if (o->max_tokens <= 0 || o->max_sample <= 0 || o->max_sample > o->max_tokens ||
        o->n_blocks < 0 || o->block_size <= 0) {
        snprintf(err, errlen, "forward: bad options (max_tokens %d, max_sample %d, n_blocks "
                 "%d, block_size %d): each must be positive (n_blocks may be 0), max_sample "
                 "<= max_tokens",
                 o->max_tokens, o->max_sample, o->n_blocks, o->block_size);
        return -1;
    }
    fwd_t *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(err, errlen, "forward: out of memory");
        return -1;
    }
    f->b = b;
    f->cfg = *c;
    f->o = *o;
    f->q_dim = c->n_heads * c->head_dim;
    f->kv_dim = c->n_kv_heads * c->head_dim;
    f->shape_only = m->shape_only;
    f->seed = m->dummy_seed;
    if (fmoe_check(f, err, errlen)) {
        free(f);
        return -1;
    }
    size_t T = (size_t)o->max_tokens, S = (size_t)o->max_sample, dim = (size_t)c->dim;
    if (upload_model(f, m) || !(f->x = fwd_alloc(f, BK_F32, T * dim)) ||
        !(f->xb = fwd_alloc(f, BK_ACT, T * dim)) ||
        !(f->qkv = fwd_alloc(f, BK_ACT, T * (size_t)(f->q_dim + 2 * f->kv_dim))) ||
        !(f->att = fwd_alloc(f, BK_ACT, T * (size_t)f->q_dim)) ||
        !(f->hb = fwd_alloc(f, BK_ACT, T * 2 * (size_t)c->hidden_dim)) ||
        !(f->xs = fwd_alloc(f, BK_F32, S * dim)) || !(f->xsn = fwd_alloc(f, BK_ACT, S * dim)) ||
        !(f->logits = fwd_alloc(f, BK_F32, S * (size_t)c->vocab)) || fmoe_alloc(f))
        goto fail;
    f->o.n_blocks = 0;
    if (o->n_blocks > 0 && fwd_kv_init(f, o->n_blocks)) goto fail;
    *out = f;
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", m->source, f->errmsg);
    fwd_free(f);
    return -1;
}

int fwd_kv_init(fwd_t *f, int32_t n_blocks) {
    backend_t *b = f->b;
    const model_config_t *c = &f->cfg;
    if (f->o.n_blocks > 0) return fwd_fail(f, "forward: the KV pool is already reserved");
    if (n_blocks <= 0) return fwd_fail(f, "forward: a KV pool of %d blocks", n_blocks);
    bk_kv_shape_t kvs = {c->n_layers, n_blocks, f->o.block_size, c->n_kv_heads, c->head_dim};
    if (b->kv_init(b, &kvs))
        return fwd_fail(f, "backend %s: KV pool of %d blocks: %s", b->name, n_blocks, b->errmsg);
    f->o.n_blocks = n_blocks;
    return 0;
}

void fwd_free(fwd_t *f) {
    if (!f) return;
    backend_t *b = f->b;
    if (f->layers)
        for (int32_t l = 0; l < f->cfg.n_layers; l++) {
            fwd_layer_t *d = &f->layers[l];
            b->release(b, d->attn_norm);
            b->release(b, d->wqkv);
            b->release(b, d->wo);
            b->release(b, d->ffn_norm);
            b->release(b, d->w13);
            b->release(b, d->w2);
        }
    fmoe_free(f);
    if (f->lm_head != f->tok_emb) b->release(b, f->lm_head);
    void *bufs[] = {f->tok_emb, f->final_norm, f->x, f->xb, f->qkv, f->att,
                    f->hb, f->xs, f->xsn, f->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) b->release(b, bufs[i]);
    free(f->layers);
    free(f);
}

const char *fwd_errmsg(const fwd_t *f) { return f->errmsg; }

const model_config_t *fwd_config(const fwd_t *f) { return &f->cfg; }

double fwd_weight_bytes(const fwd_t *f) { return f->weight_bytes; }

const char *fwd_weight_type(const fwd_t *f) {
    int best = -1;
    for (int t = 1; t < 32; t++)
        if (f->type_bytes[t] > 0 && (best < 0 || f->type_bytes[t] > f->type_bytes[best])) best = t;
    return best < 0 ? NULL : dq_type_name((uint32_t)best);
}

/* Everything the backend will index with, checked on the host before the one upload. */
static int check_batch(fwd_t *f, const bk_batch_t *bt) {
    const fwd_opts_t *o = &f->o;
    int32_t nt = bt->n_tokens, ns = bt->n_seqs;
    if (o->n_blocks <= 0) return fwd_fail(f, "batch: no KV pool yet (fwd_kv_init)");
    if (nt <= 0 || nt > o->max_tokens)
        return fwd_fail(f, "batch: %d tokens (this forward pass takes 1..%d)", nt, o->max_tokens);
    if (ns <= 0 || ns > nt)
        return fwd_fail(f, "batch: %d sequences for %d tokens", ns, nt);
    if (bt->n_sample < 0 || bt->n_sample > o->max_sample)
        return fwd_fail(f, "batch: %d sampled rows (at most %d)", bt->n_sample, o->max_sample);
    if (!bt->tokens || !bt->pos || !bt->seq_start || !bt->seq_len || !bt->bt_start ||
        (bt->n_sample && (!bt->sample_rows || !bt->sample)))
        return fwd_fail(f, "batch: a required array is missing");
    if (bt->seq_start[0] != 0 || bt->seq_start[ns] != nt)
        return fwd_fail(f, "batch: seq_start must run from 0 to n_tokens %d (got %d .. %d)", nt,
                    bt->seq_start[0], bt->seq_start[ns]);
    if (bt->bt_start[0] != 0) return fwd_fail(f, "batch: bt_start[0] is %d, not 0", bt->bt_start[0]);
    for (int32_t s = 0; s < ns; s++) {
        int32_t a = bt->seq_start[s], e = bt->seq_start[s + 1];
        if (e <= a)
            return fwd_fail(f, "batch: sequence %d: seq_start not increasing (%d then %d)", s, a, e);
        if (bt->pos[e - 1] + 1 != bt->seq_len[s])
            return fwd_fail(f, "batch: sequence %d: seq_len %d but its last position is %d", s,
                        bt->seq_len[s], bt->pos[e - 1]);
        if (bt->seq_len[s] > f->cfg.max_seq)
            return fwd_fail(f, "batch: sequence %d: position %d is past the model's context of %d",
                        s, bt->seq_len[s] - 1, f->cfg.max_seq);
        for (int32_t i = a; i < e; i++) {
            if (bt->pos[i] < 0 || (i > a && bt->pos[i] != bt->pos[i - 1] + 1))
                return fwd_fail(f, "batch: sequence %d, token %d: position %d (positions must be "
                            "consecutive and >= 0)", s, i, bt->pos[i]);
            if (bt->tokens[i] < 0 || bt->tokens[i] >= f->cfg.vocab)
                return fwd_fail(f, "batch: token %d: id %d outside the vocabulary of %d", i,
                            bt->tokens[i], f->cfg.vocab);
        }
        int32_t nb = bt->bt_start[s + 1] - bt->bt_start[s];
        int32_t need = (bt->seq_len[s] + o->block_size - 1) / o->block_size;
        if (nb < need)
            return fwd_fail(f, "batch: sequence %d: %d KV blocks for a context of %d (needs %d of "
                        "%d tokens)", s, nb, bt->seq_len[s], need, o->block_size);
        for (int32_t j = bt->bt_start[s]; j < bt->bt_start[s + 1]; j++)
            if (!bt->block_table || bt->block_table[j] < 0 || bt->block_table[j] >= o->n_blocks)
                return fwd_fail(f, "batch: sequence %d: block id %d outside the pool of %d blocks",
                            s, bt->block_table ? bt->block_table[j] : -1, o->n_blocks);
    }
    for (int32_t j = 0; j < bt->n_sample; j++) {
        const bk_sample_t *p = &bt->sample[j];
        if (bt->sample_rows[j] < 0 || bt->sample_rows[j] >= nt)
            return fwd_fail(f, "batch: sampled row %d is token %d, outside 0..%d", j,
                        bt->sample_rows[j], nt - 1);
        if (!isfinite(p->temperature) || p->temperature < 0 || p->top_k < 0 ||
            !(p->top_p > 0))
            return fwd_fail(f, "batch: sampled row %d: temperature %g, top_k %d, top_p %g (need "
                        "temperature >= 0, top_k >= 0, top_p > 0)", j, p->temperature,
                        p->top_k, p->top_p);
    }
    return 0;
}

/* A product with a matrix kept in `type` (DQ_F32: the backend's weight type). */
int fwd_mm(fwd_t *f, void *y, bk_kind_t y_kind, const void *x, const void *w, uint32_t type,
              int32_t m, int32_t n, int32_t k) {
    backend_t *b = f->b;
    return type == DQ_F32 ? b->matmul(b, y, y_kind, x, w, m, n, k)
                          : b->matmul_q(b, y, y_kind, x, w, type, m, n, k);
}

#define BK(call)                                                                        \
    do {                                                                                \
        if (call) {                                                                     \
            fwd_fail(f, "backend %s: %s", b->name, b->errmsg);                              \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

int fwd_step(fwd_t *f, const bk_batch_t *bt, int32_t *ids) {
    backend_t *b = f->b;
    const model_config_t *c = &f->cfg;
    int rc = -1;
    f->last_sample = 0;
    if (check_batch(f, bt)) return -1;
    int32_t m = bt->n_tokens, dim = c->dim, hid = c->hidden_dim;
    size_t qd = (size_t)f->q_dim, kvd = (size_t)f->kv_dim;
    void *q = f->qkv, *k = fwd_at(f, BK_ACT, q, m * qd), *v = fwd_at(f, BK_ACT, k, m * kvd);
    void *gate = f->hb, *up = fwd_at(f, BK_ACT, gate, (size_t)m * hid);
    BK(b->prepare(b, bt));
    BK(b->embed(b, f->x, f->tok_emb, dim));
    for (int32_t l = 0; l < c->n_layers; l++) {
        fwd_layer_t *w = &f->layers[l];
        /* layer 0 normalises the embeddings; later layers first add the previous MLP output */
        BK(b->rmsnorm(b, f->xb, f->x, l ? f->xb : NULL, w->attn_norm, m, dim, c->norm_eps));
        if (m == 1 && w->fuse_qkv) {
            BK(fwd_mm(f, f->qkv, BK_ACT, f->xb, w->wqkv, w->t_qkv, 1, (int32_t)(qd + 2 * kvd), dim));
        } else {
            BK(fwd_mm(f, q, BK_ACT, f->xb, w->wqkv, w->t_qkv, m, (int32_t)qd, dim));
            BK(fwd_mm(f, k, BK_ACT, f->xb, fwd_at(f, BK_WEIGHT, w->wqkv, w->k_off), w->t_qkv, m,
                  (int32_t)kvd, dim));
            BK(fwd_mm(f, v, BK_ACT, f->xb, fwd_at(f, BK_WEIGHT, w->wqkv, w->v_off), w->t_qkv, m,
                  (int32_t)kvd, dim));
        }
        BK(b->rope_kv(b, q, k, v, l, c->n_heads, c->n_kv_heads, c->head_dim, c->rope_theta));
        BK(b->attention(b, f->att, q, l, c->n_heads, c->n_kv_heads, c->head_dim));
        BK(fwd_mm(f, f->xb, BK_ACT, f->att, w->wo, w->t_o, m, dim, (int32_t)qd));
        BK(b->rmsnorm(b, f->xb, f->x, f->xb, w->ffn_norm, m, dim, c->norm_eps));
        if (w->moe) {
            /* the layer's MLP is a mixture of experts: f->xb in, f->xb out */
            if (fmoe_step(f, l, m)) goto done;
            continue;
        }
        if (m == 1 && w->fuse_gu) {
            BK(fwd_mm(f, f->hb, BK_ACT, f->xb, w->w13, w->t_gu, 1, 2 * hid, dim));
        } else {
            BK(fwd_mm(f, gate, BK_ACT, f->xb, w->w13, w->t_gu, m, hid, dim));
            BK(fwd_mm(f, up, BK_ACT, f->xb, fwd_at(f, BK_WEIGHT, w->w13, w->up_off), w->t_gu, m, hid,
                  dim));
        }
        BK(b->silu_mul(b, gate, gate, up, (size_t)m * hid));
        BK(fwd_mm(f, f->xb, BK_ACT, gate, w->w2, w->t_down, m, dim, hid));
    }
    if (bt->n_sample > 0) {
        /* the last MLP output joins the residual stream only in the sampled rows */
        BK(b->gather_rows(b, f->xs, f->x, BK_F32, dim));
        BK(b->gather_rows(b, f->xsn, f->xb, BK_ACT, dim));
        BK(b->rmsnorm(b, f->xsn, f->xs, f->xsn, f->final_norm, bt->n_sample, dim, c->norm_eps));
        BK(fwd_mm(f, f->logits, BK_F32, f->xsn, f->lm_head, f->t_head, bt->n_sample, c->vocab, dim));
        BK(b->sample(b, ids, f->logits, BK_F32, c->vocab));
    }
    BK(b->sync(b));
    f->last_sample = bt->n_sample;
    rc = 0;
done:
    return rc;
}

int fwd_warm_up(fwd_t *f, const int32_t *table, int32_t n_blocks, int32_t n, int32_t ns) {
    if (n > f->o.max_tokens) n = f->o.max_tokens;
    if ((int64_t)n > (int64_t)n_blocks * f->o.block_size) n = n_blocks * f->o.block_size;
    if (ns > n) ns = n;
    if (ns > f->o.max_sample) ns = f->o.max_sample;
    if (n < 1) return 0;
    int32_t *tok = malloc(sizeof *tok * (size_t)n), *pos = malloc(sizeof *pos * (size_t)n);
    int32_t *rows = malloc(sizeof *rows * (size_t)(ns > 0 ? ns : 1));
    int32_t *ids = malloc(sizeof *ids * (size_t)(ns > 0 ? ns : 1));
    bk_sample_t *sp = malloc(sizeof *sp * (size_t)(ns > 0 ? ns : 1));
    int rc = -1;
    if (!tok || !pos || !rows || !ids || !sp) {
        fwd_fail(f, "out of memory (warm-up pass)");
        goto done;
    }
    for (int32_t i = 0; i < n; i++) {
        tok[i] = i % f->cfg.vocab;
        pos[i] = i;
    }
    for (int32_t j = 0; j < ns; j++) {
        rows[j] = n - ns + j;
        sp[j] = (bk_sample_t){ .temperature = 0, .top_p = 1 };
    }
    int32_t seq_start[2] = { 0, n }, seq_len[1] = { n }, bt_start[2] = { 0, n_blocks };
    bk_batch_t b = {
        .n_tokens = n, .n_seqs = 1, .tokens = tok, .pos = pos, .seq_start = seq_start,
        .seq_len = seq_len, .bt_start = bt_start, .block_table = table, .n_sample = ns,
        .sample_rows = rows, .sample = sp,
    };
    rc = fwd_step(f, &b, ids);
done:
    free(tok), free(pos), free(rows), free(ids), free(sp);
    return rc;
}

int fwd_logits(fwd_t *f, float *dst) {
    backend_t *b = f->b;
    if (f->last_sample == 0) return 0;
    if (b->download_f32(b, dst, f->logits, BK_F32, (size_t)f->last_sample * f->cfg.vocab))
        return fwd_fail(f, "backend %s: %s", b->name, b->errmsg);
    return 0;
}

int fwd_logits_rows(fwd_t *f, int32_t row0, int32_t n, float *dst) {
    backend_t *b = f->b;
    if (row0 < 0 || n < 0 || row0 + n > f->last_sample)
        return fwd_fail(f, "forward: logits rows %d..%d of the last step's %d", row0, row0 + n - 1,
                    f->last_sample);
    if (n > 0 && b->download_f32(b, dst, fwd_at(f, BK_F32, f->logits, (size_t)row0 * f->cfg.vocab),
                                 BK_F32, (size_t)n * f->cfg.vocab))
        return fwd_fail(f, "backend %s: %s", b->name, b->errmsg);
    return 0;
}

int32_t fwd_kv_blocks_for(backend_t *b, const model_config_t *c, int32_t block_size,
                          double bytes) {
    bk_kv_shape_t s = {c->n_layers, 1, block_size, c->n_kv_heads, c->head_dim};
    size_t per = b->kv_block_bytes(b, &s);
    if (per == 0 || bytes <= 0) return 0;
    double n = floor(bytes / (double)per);
    return n > 2147483647.0 ? 2147483647 : (int32_t)n;
}

void fwd_batch_features(const bk_batch_t *b, cost_features_t *f) {
    memset(f, 0, sizeof *f);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t n = b->seq_start[s + 1] - b->seq_start[s];
        cost_features_add(f, n, b->seq_len[s] - n, 0);
    }
    f->sampled = b->n_sample;   /* a sum: which sequence a row belongs to does not matter */
}

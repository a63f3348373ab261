/* forward_internal: the forward pass's state and weight helpers, shared by engine/forward.c
 * (the pass, the dense layers) and engine/forward_moe.c (mixture-of-experts layers) only.
 *
 * Invariants: every pointer in fwd_layer_t and struct fwd is a backend buffer owned by the
 * fwd_t (fwd_free releases each once); a layer is either dense (w13, w2 set, moe 0) or a
 * mixture of experts (moe 1: router, e13[], e2[] and optionally s13, s2 set; w13, w2 NULL).
 * The host arrays (h_*) are the fwd_t's too, sized for max_tokens. */
#ifndef TWIN_FORWARD_INTERNAL_H
#define TWIN_FORWARD_INTERNAL_H

#include "engine/forward.h"

/* Where a matrix comes from: host weights, or (a shape-only dummy model) generated on the
 * backend as dummy tensor `tensor`; st: the matrix as its file stores it, or NULL. */
typedef struct {
    const float *host;
    uint64_t tensor;
    const model_stored_t *st;
} wsrc_t;

typedef struct {
    void *attn_norm, *wqkv, *wo, *ffn_norm, *w13, *w2;
    /* the type each matrix is kept in: DQ_F32 = the backend's weight type, uploaded from
     * the fp32 copy; otherwise a stored type */
    uint32_t t_qkv, t_o, t_gu, t_down;
    size_t k_off, v_off, up_off;            /* elements into wqkv (K, V) and w13 (up) */
    int fuse_qkv, fuse_gu;                  /* the fused matrix is valid (aligned parts) */
    /* a mixture of experts (forward_moe.c): the router [n_experts][dim]; per expert its
     * gate and up one after the other (up at e_up_off) and its down; the shared expert
     * likewise (s13, s2; NULL when none) */
    int moe;
    void *router, **e13, **e2, *s13, *s2;
    uint32_t t_router, t_egu, t_edown, t_sgu, t_sdown;
    size_t e_up_off, s_up_off;
} fwd_layer_t;

struct fwd {
    backend_t *b;
    model_config_t cfg;
    fwd_opts_t o;
    int32_t q_dim, kv_dim;
    fwd_layer_t *layers;
    void *tok_emb, *lm_head, *final_norm;   /* lm_head == tok_emb when tied and DQ_F32 */
    uint32_t t_head;
    double weight_bytes;                    /* see fwd_weight_bytes */
    double type_bytes[32];                  /* bytes of matrices per stored type */
    /* activations: x, xb [max_tokens][dim]; qkv [max_tokens][q_dim + 2 kv_dim];
     * att [max_tokens][q_dim]; hb [max_tokens][2 hidden]; xs, xsn [max_sample][dim];
     * logits [max_sample][vocab]. x and xs (the residual stream) and logits are BK_F32. */
    void *x, *xb, *qkv, *att, *hb, *xs, *xsn, *logits;
    /* mixture of experts (NULL for a dense model): router logits rl [max_tokens][n_experts]
     * (BK_F32); an expert's rows xe [max_tokens][dim], its hidden he [max_tokens][2 max(moe
     * hidden, shared hidden)], every (token, expert) output ye [max_tokens k][dim], the shared
     * expert's ys [max_tokens][dim]; and their host side: logits, the chosen experts, their
     * weights, each choice's row in ye, the tokens grouped by expert, per-expert counts */
    void *rl, *xe, *he, *ye, *ys;
    float *h_logits, *h_w;
    int32_t *h_sel, *h_src, *h_rows, *h_cnt, *h_off;
    int32_t last_sample;                    /* rows in logits from the last step */
    int shape_only;                         /* weights generated on the backend */
    uint64_t seed;
    char errmsg[256];
};

/* forward.c's helpers. fwd_fail sets f->errmsg and returns -1; fwd_at is p offset by n
 * elements of kind; fwd_alloc a backend buffer (NULL with errmsg); fwd_mat_elems the
 * elements of a matrix kept in type (DQ_F32: the backend's layout); fwd_group_type the
 * type a group of matrices is kept in; fwd_upload_mats stores `parts` matrices one after
 * the other in one new buffer; fwd_count adds a group's elements and its bytes per type;
 * fwd_mm a product with a matrix kept in `type`. */
int fwd_fail(fwd_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *fwd_at(const fwd_t *f, bk_kind_t kind, const void *p, size_t n);
void *fwd_alloc(fwd_t *f, bk_kind_t kind, size_t n);
size_t fwd_mat_elems(const fwd_t *f, uint32_t type, int32_t rows, int32_t cols);
uint32_t fwd_group_type(const fwd_t *f, int parts, const wsrc_t *src, const int32_t *rows,
                        int32_t cols);
void *fwd_upload_mats(fwd_t *f, int parts, const wsrc_t *src, const int32_t *rows,
                      int32_t cols, uint32_t type);
void fwd_count(fwd_t *f, size_t *elems, uint32_t type, size_t n);
int fwd_mm(fwd_t *f, void *y, bk_kind_t y_kind, const void *x, const void *w, uint32_t type,
           int32_t m, int32_t n, int32_t k);

/* forward_moe.c: layer l of m as a mixture of experts. fmoe_plan chooses the types and
 * adds the layer's weight elements to *n (and their bytes per type); fmoe_upload uploads
 * them (after fmoe_plan, in the order reserve_weights counted); fmoe_alloc the step's
 * buffers (once, after the layers); fmoe_step runs the MLP of layer l for the step's
 * m_tok tokens, from f->xb (normalised) into f->xb; fmoe_free releases what they made.
 * 0, or -1 with a message in f->errmsg. fmoe_check (before any upload): 0 when the model
 * is dense or the backend has the MoE ops, else -1 with a message in err. */
int fmoe_check(const fwd_t *f, char *err, size_t errlen);
void fmoe_plan(fwd_t *f, const model_t *m, int32_t l, size_t *n);
int fmoe_upload(fwd_t *f, const model_t *m, int32_t l);
int fmoe_alloc(fwd_t *f);
int fmoe_step(fwd_t *f, int32_t l, int32_t m_tok);
void fmoe_free(fwd_t *f);

#endif

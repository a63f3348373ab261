/* backend: the compute interface the engine's forward pass runs on. A backend is a struct
 * of function pointers over device-resident buffers, so that a CPU backend (engine/cpu/)
 * and a CUDA backend (engine/cuda/, issue #5) are interchangeable.
 *
 * Buffers: `alloc` returns an opaque device pointer; the engine never dereferences one. The
 * element type depends on the kind: BK_WEIGHT holds the backend's weight type (fp32 on the
 * CPU; bf16/fp16/fp32 on the GPU), BK_ACT its activation type, BK_F32 floats, BK_I32 int32.
 * Sizes are element counts. upload_weight converts fp32 host data to the weight type.
 * The residual stream (embed's output, rmsnorm's x) and the logits are BK_F32 buffers, so
 * that a 16-bit backend rounds only what it multiplies: the stream accumulates every
 * layer's output, and sampling compares logits. reserve_weights announces the total weight
 * elements before the first BK_WEIGHT alloc, so a backend can hold them in one allocation.
 *
 * Weight matrices (the projections, the LM head, the embedding table) go through
 * upload_matrix instead, so that each backend stores them in the layout its product
 * kernel wants: w [rows][cols], rows = outputs n, cols = inputs k, in a BK_WEIGHT buffer of
 * matrix_elems(rows, cols) elements (the CPU packs panels of 16 rows k-major; a GPU keeps
 * rows, matrix_elems = rows x cols). matmul and embed take such a matrix. Layouts keep row
 * groups: for r0 and r multiples of matrix_row_align, rows [r0, r0 + r) of a stored
 * matrix are elements [r0 cols, (r0 + r) cols) of it and form the stored matrix of those
 * rows. So a slice at aligned rows is an offset, and aligned matrices uploaded one after
 * the other form the stored matrix of their concatenation (the forward pass's fused
 * Q/K/V and gate/up matrices rely on both).
 *
 * A step: `prepare` takes the host-side description of a ragged batch (bk_batch_t) and makes
 * it available to the ops in one upload; every op of the step then refers to that batch
 * (token i of the step is row i of every [n_tokens][...] activation). Tokens of one
 * sequence are contiguous, with consecutive positions; each sequence has its block table.
 *
 * The KV pool: kv_init reserves n_blocks blocks for every layer, indexed by the block ids
 * that the scheduler core hands out (policies/sched.h): the engine never allocates KV on
 * its own. Position p of a sequence lives in block table[p / block_size], slot
 * p % block_size. rope_kv writes this step's K and V before attention reads the cache, so
 * a token attends to positions 0..pos of its own sequence (causal within the step too).
 *
 * Stored types (optional; NULL on a backend that multiplies its weight type only): a
 * matrix of a ggml type (engine/dequant.h: F16, BF16, Q8_0, Q4_0) kept in that type, for
 * products that dequantise inside the kernel. qmatrix_elems(type, rows, cols) is the
 * BK_WEIGHT buffer such a matrix occupies (0: not this type, or not this shape), with
 * matrix_elems's rule for aligned row slices and concatenations; upload_qmatrix takes the
 * type's bytes row-major (GGUF's layout); matmul_q is matmul with such a matrix. Embedding
 * tables stay upload_matrix matrices.
 *
 * Dummy weights: gen_matrix stores the matrix whose element (r, c) is
 * dummy_weight(seed, tensor, r * cols + c) (engine/dummy_weight.h), generated where the
 * weights live, so an 8B dummy model never exists on the host.
 *
 * Sampling happens on the device: only token ids come back to the host. A row's draw is a
 * pure function of its logits and its bk_sample_t (seed and output index), so a request's
 * output does not depend on the rest of its batch (engine/sampler.h is the reference).
 *
 * Errors: ops return 0, or -1 with the message in b->errmsg. Ops may be asynchronous; sync
 * and download wait for them.
 *
 * Ownership: backend_new returns an object owned by the caller (b->destroy(b) frees it and
 * every buffer and pool it still holds). Batch arrays are borrowed during `prepare` only. */
#ifndef TWIN_BACKEND_H
#define TWIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {   /* the CUDA backend (C++) implements and calls this interface */
#endif

typedef enum { BK_WEIGHT = 0, BK_ACT = 1, BK_F32 = 2, BK_I32 = 3 } bk_kind_t;

/* Per sampled row. temperature 0 = greedy (argmax, lowest id on ties); top_k 0 = off;
 * top_p >= 1 = off. seed: the request's stream; idx: the output position being drawn. */
typedef struct {
    float temperature;
    int32_t top_k;
    float top_p;
    uint64_t seed;
    int32_t idx;
} bk_sample_t;

typedef struct {
    int32_t n_tokens;
    int32_t n_seqs;
    const int32_t *tokens;      /* [n_tokens] input token ids */
    const int32_t *pos;         /* [n_tokens] positions */
    const int32_t *seq_start;   /* [n_seqs + 1] first token of each sequence in the step */
    const int32_t *seq_len;     /* [n_seqs] context after the step: last position + 1 */
    const int32_t *bt_start;    /* [n_seqs + 1] offsets into block_table */
    const int32_t *block_table; /* [bt_start[n_seqs]] KV block ids, per sequence in order */
    int32_t n_sample;
    const int32_t *sample_rows; /* [n_sample] token indices whose logits are needed */
    const bk_sample_t *sample;  /* [n_sample] */
} bk_batch_t;

typedef struct {
    int32_t n_layers;
    int32_t n_blocks;
    int32_t block_size;
    int32_t n_kv_heads;
    int32_t head_dim;
} bk_kv_shape_t;

typedef struct backend backend_t;

struct backend {
    const char *name;           /* "cpu" | "cuda" */
    const char *weight_type;    /* "f32" | "bf16" | "f16" */
    char errmsg[256];
    void *impl;

    /* memory */
    int (*mem_info)(backend_t *b, size_t *free_bytes, size_t *total_bytes);
    size_t (*elem_size)(backend_t *b, bk_kind_t kind);
    void *(*alloc)(backend_t *b, bk_kind_t kind, size_t n);   /* NULL + errmsg on failure */
    void (*release)(backend_t *b, void *p);
    /* the weight elements (BK_WEIGHT) that will be allocated next, in total; 0 or -1 */
    int (*reserve_weights)(backend_t *b, size_t n);
    int (*upload_weight)(backend_t *b, void *dst, const float *src, size_t n);
    int32_t matrix_row_align;   /* >= 1; see "Weight matrices" above */
    size_t (*matrix_elems)(backend_t *b, int32_t rows, int32_t cols);
    /* src host [rows][cols] row-major fp32; dst a BK_WEIGHT buffer of matrix_elems */
    int (*upload_matrix)(backend_t *b, void *dst, const float *src, int32_t rows,
                         int32_t cols);
    /* dst a BK_WEIGHT buffer of matrix_elems(rows, cols): see "Dummy weights" above */
    int (*gen_matrix)(backend_t *b, void *dst, int32_t rows, int32_t cols, uint64_t seed,
                      uint64_t tensor);
    /* stored types: see "Stored types" above */
    size_t (*qmatrix_elems)(backend_t *b, uint32_t type, int32_t rows, int32_t cols);
    int (*upload_qmatrix)(backend_t *b, void *dst, const void *src, uint32_t type,
                          int32_t rows, int32_t cols);
    int (*matmul_q)(backend_t *b, void *y, bk_kind_t y_kind, const void *x, const void *w,
                    uint32_t type, int32_t m, int32_t n, int32_t k);
    int (*upload)(backend_t *b, void *dst, const void *src, size_t bytes);  /* F32/I32 */
    /* dst host; src any buffer, converted to fp32 when it holds weights or activations */
    int (*download_f32)(backend_t *b, float *dst, const void *src, bk_kind_t kind, size_t n);
    int (*kv_init)(backend_t *b, const bk_kv_shape_t *shape);
    size_t (*kv_block_bytes)(backend_t *b, const bk_kv_shape_t *shape); /* all layers */

    /* a step */
    int (*prepare)(backend_t *b, const bk_batch_t *batch);

    /* ops over the prepared batch; act buffers are [n_tokens][width] unless stated */
    /* x (BK_F32) = table[tokens]; table a matrix (upload_matrix) of dim columns */
    int (*embed)(backend_t *b, void *x, const void *table, int32_t dim);
    /* y[m][n] = x[m][k] . w[n][k]^T: the projections (w a matrix from upload_matrix, or an
     * aligned row slice of one); x BK_ACT, y of y_kind (BK_ACT, or BK_F32 for logits) */
    int (*matmul)(backend_t *b, void *y, bk_kind_t y_kind, const void *x, const void *w,
                  int32_t m, int32_t n, int32_t k);
    /* x the residual stream (BK_F32), residual and out BK_ACT: with residual, x += residual
     * first (in place); then out = x / rms(x) * w */
    int (*rmsnorm)(backend_t *b, void *out, void *x, const void *residual, const void *w,
                   int32_t m, int32_t dim, float eps);
    /* rotates q [n_tokens][n_heads*hd] and k [n_tokens][n_kv*hd] in place at the batch
     * positions, then stores k and v in layer's paged cache */
    int (*rope_kv)(backend_t *b, void *q, void *k, const void *v, int32_t layer,
                   int32_t n_heads, int32_t n_kv_heads, int32_t head_dim, float theta);
    /* out [n_tokens][n_heads*hd]: softmax(q k^T / sqrt(hd)) v over each token's context */
    int (*attention)(backend_t *b, void *out, const void *q, int32_t layer, int32_t n_heads,
                     int32_t n_kv_heads, int32_t head_dim);
    int (*silu_mul)(backend_t *b, void *out, const void *gate, const void *up, size_t n);
    int (*add)(backend_t *b, void *x, const void *y, size_t n);     /* x += y, BK_ACT */
    /* out [n_sample][dim] = x[sample_rows[i]], both of `kind` */
    int (*gather_rows)(backend_t *b, void *out, const void *x, bk_kind_t kind, int32_t dim);
    /* Mixture of experts (optional: NULL on a backend without them; engine/forward_moe.c
     * refuses such a model there). Index and weight arrays are host memory, read before the
     * call returns. Both BK_ACT and independent of the prepared batch.
     *  - gather_idx: out [n][dim] = x[rows[i]] (a token's rows for one expert);
     *  - moe_combine: out [n][dim], row t = base[t] (or 0 when base is NULL), then
     *    + w[t k + j] * y[src[t k + j]] for j = 0..k-1 in that order, accumulated in fp32:
     *    a row's sum depends only on its own k terms and their order, never on other rows
     *    (the batch-invariance promise, bk_opts_t). out may not overlap y or base. */
    int (*gather_idx)(backend_t *b, void *out, const void *x, int32_t dim, const int32_t *rows,
                      int32_t n);
    int (*moe_combine)(backend_t *b, void *out, const void *y, const void *base,
                       const int32_t *src, const float *w, int32_t n, int32_t k, int32_t dim);
    /* ids_host [n_sample]: draws from logits [n_sample][vocab]; kind BK_F32 (the forward
     * pass's logits) is the one every backend takes */
    int (*sample)(backend_t *b, int32_t *ids_host, const void *logits, bk_kind_t kind,
                  int32_t vocab);
    int (*sync)(backend_t *b);
    /* the device's own ceilings, measured now: memory read bandwidth (bytes/s) and the
     * matrix-product rate of the weight type (FLOP/s); each the best of reps runs */
    int (*roofs)(backend_t *b, int reps, double *mem_bw, double *gemm_flops);
    /* optional (NULL: nothing to do): on != 0 keeps the backend's own threads spinning
     * between ops instead of sleeping, until turned off; for an engine that keeps its
     * cores awake through idle waits (engine.h, idle_spin) */
    void (*keep_warm)(backend_t *b, int on);
    /* optional (NULL: none): the backend's own counters as one line of name=value pairs
     * (CUDA: its decode-step graphs), for tests and logs; the text is b's, valid until
     * the next call */
    const char *(*counters)(backend_t *b);
    void (*destroy)(backend_t *b);
};

typedef struct {
    int n_threads;              /* CPU: 0 = all cores */
    const char *dtype;          /* GPU weights: "bf16" (default), "f16", "f32" */
    int device;                 /* GPU ordinal */
    /* "native" or NULL: matrices in their stored type where the backend can (stored
     * types above); "f32": dequantised to the weight type at upload, as before */
    const char *weights;
    /* the CPU backend's KV cache elements: "f32" or NULL (the default) or "f16" (IEEE
     * half, as llama.cpp keeps it by default: half the bytes per block, so twice the
     * blocks in the same memory and half the bytes attention reads; K and V are rounded
     * to nearest even when stored). The CUDA backend keeps K and V in its weight type
     * (dtype) and refuses this option. */
    const char *kv_type;
    /* 1: a row's result never depends on the rest of its batch (the CPU backend always
     * holds this; the GPU then uses one product kernel and one attention kernel for every
     * shape, slower for large steps): greedy outputs are identical under every policy */
    int batch_invariant;
} bk_opts_t;

/* name: "cpu" or "cuda". NULL with a message in err when unknown or unavailable (a build
 * without CUDA, or no GPU). */
backend_t *backend_new(const char *name, const bk_opts_t *opts, char *err, size_t errlen);

/* 1 when backend `name` can be created here; 0 when it is known but unavailable (a build
 * without CUDA, a machine without a GPU: tests skip, with the reason in err); -1 unknown. */
int backend_available(const char *name, char *err, size_t errlen);

/* Sets b->errmsg; returns -1 so ops can `return bk_fail(b, ...)`. */
int bk_fail(backend_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks every backend shares, so that each fails the same way (0, or -1 via bk_fail with
 * b->name in the message):
 *  - bk_check_kv_shape: kv_init's shape, every size positive;
 *  - bk_check_kv_use: an op on layer `layer` with these heads against the pool's shape
 *    (pool NULL: kv_init has not run). */
int bk_check_kv_shape(backend_t *b, const bk_kv_shape_t *s);
int bk_check_kv_use(backend_t *b, const bk_kv_shape_t *pool, const char *op, int32_t layer,
                    int32_t n_heads, int32_t n_kv_heads, int32_t head_dim);

/* RoPE's inverse frequencies theta^(-2i/head_dim), i < head_dim / 2, rounded to float: one
 * formula for every backend, so their rotations agree bit for bit. */
void bk_rope_inv_freq(float *f, int32_t head_dim, float theta);

#ifdef __cplusplus
}
#endif

#endif

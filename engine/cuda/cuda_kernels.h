/* cuda_kernels: the CUDA backend's internal kernel API, shared by the .cu files of
 * engine/cuda/ (C linkage, so that C tests can call the host-side planners without a GPU;
 * nothing else outside this directory includes it). The backend
 * (backend_cuda.cu) owns the memory, the stream and the step's metadata; the kernel files
 * launch on the stream they are given and never allocate, except the sampler's own
 * scratch (ck_sampler_t).
 *
 * Types: weights, activations and the KV cache share one element type (ck_dtype_t); every
 * kernel computes in fp32 and rounds once when it stores. The residual stream and the
 * logits are fp32 (BK_F32 buffers).
 *
 * KV pool layout (kv_init): layer-major; in a layer, block-major; in a block, K then V; in
 * each, [kv_head][slot][head_dim]. So one (block, K|V, head) is block_size x head_dim
 * contiguous elements: a tile of keys for one head is one coalesced read. ck_kv_at gives
 * the element offset of (layer, block, which, head, slot, 0).
 *
 * The batch (ck_batch_t): device pointers into the one metadata buffer that `prepare`
 * uploads per step, plus the host-side scalars that launch configurations need. Tokens of
 * one sequence are contiguous with consecutive positions (engine/backend.h); a token
 * attends to positions 0..pos[t] of its own sequence.
 *
 * Attention work lists: prepare calls ck_attn_plan on the host, which splits the step's
 * tokens between the decode kernel (sequences with few new tokens: decodes and speculative
 * verifies) and the prefill kernel (tiles of up to CK_PF_TILE_Q new tokens of one
 * sequence), writing int32 lists that travel in the same upload. Errors: every launcher
 * returns the launch's cudaError_t (cudaGetLastError after the launch). */
#ifndef TWIN_CUDA_KERNELS_H
#define TWIN_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CK_F32 = 0, CK_BF16 = 1, CK_F16 = 2 } ck_dtype_t;

#ifdef __CUDACC__
#define CK_HD __host__ __device__
#else
#define CK_HD
#endif

static inline size_t ck_dtype_size(ck_dtype_t t) { return t == CK_F32 ? 4 : 2; }

typedef struct {
    void *base;                 /* the pool: n_layers x n_blocks x kv_block elements */
    ck_dtype_t dtype;
    int32_t n_layers, n_blocks, block_size, n_kv_heads, head_dim;
} ck_kv_t;

static inline CK_HD size_t ck_kv_at(const ck_kv_t *kv, int32_t layer, int32_t block, int32_t which,
                              int32_t head, int32_t slot) {
    return (((((size_t)layer * kv->n_blocks + block) * 2 + which) * kv->n_kv_heads + head) *
                kv->block_size + slot) * kv->head_dim;
}

/* Prefill tiles cover at most this many new tokens of one sequence. */
#define CK_PF_TILE_Q 64
/* Sequences with at most this many new tokens in the step go to the decode kernel. */
#define CK_DEC_MAX_Q 8
/* The batch-invariant plan's context split, in positions. */
#define CK_INV_SPLIT 256

typedef struct {
    /* host scalars */
    int32_t n_tokens, n_seqs, n_sample;
    int32_t n_dec;              /* tokens for the decode kernel */
    int32_t n_pf;               /* prefill tiles */
    int32_t dec_splits;         /* context splits of the decode kernel (>= 1) */
    int32_t dec_split_len;      /* positions per split, a multiple of the block size */
    int32_t invariant;          /* set before ck_attn_plan: batch-invariant plan (below) */
    int32_t n_sm;               /* set before ck_attn_plan: the device's multiprocessors
                                 * (0: 132, an H200's) */
    /* device arrays */
    const int32_t *tokens, *pos, *tok_seq, *seq_start, *seq_len, *bt_start, *block_table;
    const int32_t *sample_rows;
    const bk_sample_t *sample;
    const int32_t *dec_tok;     /* [n_dec] token indices */
    const int32_t *pf_tile;     /* [n_pf][3]: sequence, first token, token count */
} ck_batch_t;

/* ---- attention (cuda_attention.cu) ---------------------------------------------------- */

/* Host side of prepare: int32 entries the plan of this batch may need (an upper bound). */
size_t ck_attn_plan_cap(const bk_batch_t *bt);
/* Fills ints[0 .. returned) with the decode token list then the prefill tiles, and sets
 * the host scalars n_dec, n_pf, dec_splits, dec_split_len of *b. kv: the pool's shape
 * (block size, kv heads, head dim, type: the decode splits are sized by them); NULL or
 * zero sizes (no pool yet) plan for 16-position blocks of one bf16 head of 128.
 * With b->invariant set, every token goes to the decode kernel and the split length is
 * fixed (CK_INV_SPLIT rounded up to whole blocks): a token's attention is then computed
 * the same way whatever else is in the step.
 * *dec_off / *pf_off: where each list starts in ints (the backend turns them into device
 * pointers after the upload). */
size_t ck_attn_plan(const bk_batch_t *bt, const ck_kv_t *kv, int32_t *ints, ck_batch_t *b,
                    size_t *dec_off, size_t *pf_off);
/* fp32 scratch the attention launches of this batch need (decode split partials). */
size_t ck_attn_scratch_floats(const ck_batch_t *b, int32_t n_heads, int32_t head_dim);
/* out, q: [n_tokens][n_heads * head_dim] of kv->dtype; q already rotated; this step's K
 * and V already in the pool. scratch: ck_attn_scratch_floats floats. */
cudaError_t ck_attention(cudaStream_t st, const ck_kv_t *kv, int32_t layer, void *out,
                         const void *q, int32_t n_heads, const ck_batch_t *b, float *scratch);

/* ---- sampling (cuda_sample.cu) --------------------------------------------------------- */

typedef struct ck_sampler ck_sampler_t;
ck_sampler_t *ck_sampler_new(void);
void ck_sampler_free(ck_sampler_t *s);
/* ids [n] (device) <- one draw per row of logits [n][vocab] (fp32, device), with the
 * semantics of engine/sampler.h (sampler_pick): params_dev [n] on the device, params_host
 * the same on the host (to see which rows need more than an argmax). Grows its own
 * scratch with cudaMalloc when a larger batch comes (never shrinks). Does not write the
 * logits. cudaSuccess, or the error with a message in err. */
cudaError_t ck_sample(ck_sampler_t *s, cudaStream_t st, int32_t *ids, const float *logits,
                      int32_t n, int32_t vocab, const bk_sample_t *params_dev,
                      const bk_sample_t *params_host, char *err, size_t errlen);

/* ---- element-wise and small ops (cuda_ops.cu) ------------------------------------------ */

/* dst[i] = (dtype) src[i] (fp32 src) and the reverse. */
cudaError_t ck_from_f32(cudaStream_t st, ck_dtype_t t, void *dst, const float *src, size_t n);
cudaError_t ck_to_f32(cudaStream_t st, ck_dtype_t t, float *dst, const void *src, size_t n);
/* Dummy weights (engine/dummy_weight.h): dst[i] = dummy_weight(seed, tensor, offset + i). */
cudaError_t ck_gen_dummy(cudaStream_t st, ck_dtype_t t, void *dst, size_t n, uint64_t seed,
                         uint64_t tensor, uint64_t offset);
/* x [n_tokens][dim] fp32 <- table[tokens[i]] */
cudaError_t ck_embed(cudaStream_t st, ck_dtype_t t, float *x, const void *table, int32_t dim,
                     const ck_batch_t *b);
/* x fp32 [m][dim] += residual (dtype, optional); out (dtype) = x / rms(x) * w. out may
 * alias residual. */
cudaError_t ck_rmsnorm(cudaStream_t st, ck_dtype_t t, void *out, float *x, const void *residual,
                       const void *w, int32_t m, int32_t dim, float eps);
/* Rotates q and k (in place) at the batch positions and writes k, v to the pool. */
cudaError_t ck_rope_kv(cudaStream_t st, const ck_kv_t *kv, int32_t layer, void *q, void *k,
                       const void *v, int32_t n_heads, const float *inv_freq,
                       const ck_batch_t *b);
cudaError_t ck_silu_mul(cudaStream_t st, ck_dtype_t t, void *out, const void *gate,
                        const void *up, size_t n);
/* x += y; x_kind/y_kind: 1 = fp32, 0 = dtype */
cudaError_t ck_add(cudaStream_t st, ck_dtype_t t, void *x, int x_f32, const void *y, int y_f32,
                   size_t n);
/* out[j] = x[sample_rows[j]], rows of dim elements of esize bytes */
cudaError_t ck_gather_rows(cudaStream_t st, void *out, const void *x, int32_t dim, size_t esize,
                           const ck_batch_t *b);

/* ---- small-batch products (cuda_gemv.cu) -------------------------------------------------- */

#define CK_GEMV_MAX_M 8
/* 1 when ck_gemv's fast path takes this product: 1 <= m <= CK_GEMV_MAX_M, k a multiple
 * of the 16-byte vector, x and w 16-byte aligned. */
int ck_gemv_ok(ck_dtype_t t, const void *x, const void *w, int32_t m, int32_t k);
/* y[m][n] (fp32 when y_f32, else dtype) = x[m][k] . w[n][k]^T, x and w of dtype; any
 * m >= 1 (chunks of CK_GEMV_MAX_M rows) and alignment. A row's result depends on k and
 * the type only (the batch-invariant mode's products). */
cudaError_t ck_gemv(cudaStream_t st, ck_dtype_t t, void *y, int y_f32, const void *x,
                    const void *w, int32_t m, int32_t n, int32_t k);

/* ---- step graphs (cuda_graph.cu) ----------------------------------------------------------- */

/* A cache of CUDA graphs of whole steps, keyed by the bytes of everything their launches
 * depend on (cuda_graph.cu says when a key is captured and when it runs as plain launches). */
typedef struct ck_graphs ck_graphs_t;
typedef struct {
    long long eager;      /* steps run as plain launches */
    long long captured;   /* steps captured (and launched) */
    long long replayed;   /* steps launched from a held graph */
    long long evicted;    /* graphs dropped for room */
    long long failed;     /* captures the driver refused (graphs are off after one) */
} ck_graph_stats_t;
ck_graphs_t *ck_graphs_new(void);
void ck_graphs_free(ck_graphs_t *g);
const ck_graph_stats_t *ck_graphs_stats(const ck_graphs_t *g);
/* Runs one step on st: ops(ctx) launches every op of the step on st, as plain launches or
 * inside a capture (and once more as plain launches when that capture fails: nothing ran
 * in it); key: key_bytes bytes that determine every launch. cudaSuccess, or the error
 * (ops' own, *what ""; or of the call named in *what). */
cudaError_t ck_graph_run(ck_graphs_t *g, cudaStream_t st, const void *key, size_t key_bytes,
                         cudaError_t (*ops)(void *ctx), void *ctx, const char **what);

/* ---- the device's roofs (cuda_roofs.cu) --------------------------------------------------- */

/* Device memory read bandwidth (bytes/s), the best of reps after a warm-up. 0, or -1 with
 * a message in err. */
int ck_roof_read_bw(int reps, double *bytes_per_s, char *err, size_t errlen);
/* cublasGemmEx n x n x n FLOP/s with inputs of dtype (a ck_dtype_t) and fp32 accumulate;
 * n 0 = a default size. */
int ck_roof_gemm(int dtype, int n, int reps, double *flops, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif

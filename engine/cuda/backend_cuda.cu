/* backend_cuda: see backend_cuda.h. This file holds the backend object: memory, uploads,
 * the step's metadata, the cuBLAS products, and the dispatch of each op to its kernel file
 * (cuda_ops.cu, cuda_attention.cu, cuda_sample.cu).
 *
 * Why one metadata upload: a step's ops all index the same batch (tokens, positions, block
 * tables, attention work lists, sampling parameters); prepare packs them into one pinned
 * host buffer and copies it with one cudaMemcpyAsync, so a decode step pays one transfer
 * latency, not ten. The pinned buffer is reused only after an event says the last copy
 * from it finished.
 *
 * Decode steps as graphs: when every sequence of a step has at most CK_DEC_MAX_Q new
 * tokens, prepare starts holding the ops (op_t records, with every argument their launch
 * reads) instead of launching them; sample or sync (or any other entry point: nothing is
 * reordered) hands them to ck_graph_run (cuda_graph.cu), which replays a graph of an equal
 * step or captures one. Validation and every host-side allocation happen when an op is
 * recorded, never inside a capture; cuBLAS works in a workspace of ours for the same
 * reason. TWIN_CUDA_GRAPHS=0 launches every op as it comes; b->counters says how the
 * steps ran.
 *
 * Errors: every CUDA and cuBLAS call is checked; the message names the call and the op. An
 * error inside a kernel surfaces at the next synchronising call (sync, download, sample),
 * whose message then carries it; so does a launch error of a held op. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cuda/backend_cuda.h"
#include "engine/cuda/cuda_kernels.h"

namespace {

const size_t ALIGN = 256;                    /* sub-allocations in the weight arena */
const size_t STAGE_FLOATS = (size_t)16 << 20; /* fp32 staging for conversions: 64 MB */
const size_t BLAS_WS_BYTES = (size_t)32 << 20;  /* cuBLAS's workspace (Hopper's advice) */

struct op_t;

struct cuda_t {
    int device;
    ck_dtype_t dt;
    int use_gemv;                   /* small-m products on our kernel (TWIN_CUDA_GEMV=0: off) */
    int invariant;                  /* bk_opts_t.batch_invariant */
    int n_sm;                       /* the device's multiprocessors (the attention plan) */
    cudaStream_t st;
    cublasHandle_t blas;
    ck_sampler_t *sampler;

    char *warena;                   /* the weights: one cudaMalloc (reserve_weights) */
    size_t wcap, wused, wlive;      /* wlive: tensors carved and not yet released */
    void **allocs;                  /* every other live cudaMalloc, freed by destroy */
    size_t n_allocs, cap_allocs;
    float *stage;                   /* fp32 staging for uploads and downloads */

    ck_kv_t kv;

    /* the step: metadata packed on the host (pinned), uploaded into meta_dev */
    char *meta_host, *meta_dev;
    size_t meta_cap;
    cudaEvent_t meta_done;          /* the last upload from meta_host has completed */
    ck_batch_t batch;
    const bk_sample_t *sample_host; /* the step's sampling parameters, in meta_host (valid
                                     * until the next prepare rewrites it) */
    int32_t *ids_dev, *ids_host;    /* sampled ids; ids_host pinned */
    size_t ids_cap;
    float *attn_scratch;
    size_t attn_cap;

    float *inv_freq;                /* RoPE frequencies for (rope_hd, rope_theta) */
    int32_t rope_hd;
    float rope_theta;

    /* decode steps as graphs (flush; TWIN_CUDA_GRAPHS=0: off) */
    int use_graphs;
    ck_graphs_t *graphs;
    void *blas_ws;                  /* cuBLAS's workspace, ours so that captures use it */
    int deferring;                  /* this step's ops are held for flush */
    op_t *ops;
    size_t n_ops, cap_ops;
    char *key;                      /* the step's graph key (flush) */
    size_t key_cap;
    char counters[200];
};

cuda_t *C(backend_t *b) { return (cuda_t *)b->impl; }

int cu_fail(backend_t *b, const char *what, cudaError_t e) {
    return bk_fail(b, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CU(b, call, what)                                                               \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) return cu_fail(b, what, e_);                             \
    } while (0)

#define BLAS(b, call, what)                                                             \
    do {                                                                                \
        cublasStatus_t s_ = (call);                                                     \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                \
            return bk_fail(b, "cuda: %s: %s", what, cublasGetStatusString(s_));         \
    } while (0)

int flush(backend_t *b);

size_t dt_size(const cuda_t *c, bk_kind_t kind) {
    return kind == BK_WEIGHT || kind == BK_ACT ? ck_dtype_size(c->dt) : 4;
}

cudaDataType_t blas_type(ck_dtype_t t) {
    return t == CK_BF16 ? CUDA_R_16BF : t == CK_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* ---- memory ------------------------------------------------------------------------- */

int cuda_mem_info(backend_t *b, size_t *free_bytes, size_t *total_bytes) {
    CU(b, cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo");
    return 0;
}

size_t cuda_elem_size(backend_t *b, bk_kind_t kind) { return dt_size(C(b), kind); }

int track(backend_t *b, void *p) {
    cuda_t *c = C(b);
    if (c->n_allocs == c->cap_allocs) {
        size_t cap = c->cap_allocs ? 2 * c->cap_allocs : 64;
        void **a = (void **)realloc(c->allocs, cap * sizeof *a);
        if (!a) return bk_fail(b, "cuda: out of host memory");
        c->allocs = a;
        c->cap_allocs = cap;
    }
    c->allocs[c->n_allocs++] = p;
    return 0;
}

void *dev_alloc(backend_t *b, size_t bytes, const char *what) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        bk_fail(b, "cuda: cudaMalloc of %.1f MB (%s): %s", bytes / 1e6, what,
                cudaGetErrorString(e));
        return NULL;
    }
    if (track(b, p)) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

void dev_free(backend_t *b, void *p) {
    cuda_t *c = C(b);
    if (!p) return;
    for (size_t i = c->n_allocs; i-- > 0;)
        if (c->allocs[i] == p) {
            c->allocs[i] = c->allocs[--c->n_allocs];
            cudaFree(p);
            return;
        }
}

void free_arena(cuda_t *c) {
    cudaFree(c->warena);
    c->warena = NULL;
    c->wcap = c->wused = c->wlive = 0;
}

int cuda_reserve_weights(backend_t *b, size_t n) {
    cuda_t *c = C(b);
    if (flush(b)) return -1;
    if (c->warena && c->wlive)
        return bk_fail(b, "cuda: reserve_weights while %zu weight tensors are still held",
                       c->wlive);
    if (c->warena) free_arena(c);
    /* every tensor is rounded up to ALIGN: room for 4096 of them */
    size_t bytes = n * ck_dtype_size(c->dt) + 4096 * ALIGN;
    CU(b, cudaMalloc((void **)&c->warena, bytes), "cudaMalloc of the weights");
    c->wcap = bytes;
    c->wused = 0;
    return 0;
}

void *cuda_alloc(backend_t *b, bk_kind_t kind, size_t n) {
    cuda_t *c = C(b);
    if (n > ((size_t)1 << 40)) {
        bk_fail(b, "cuda: allocation of %zu elements is too large", n);
        return NULL;
    }
    size_t bytes = n * dt_size(c, kind);
    if (kind == BK_WEIGHT && c->warena) {
        size_t need = (bytes + ALIGN - 1) & ~(ALIGN - 1);
        if (c->wused + need <= c->wcap) {
            void *p = c->warena + c->wused;
            c->wused += need;
            c->wlive++;
            return p;
        }
    }
    return dev_alloc(b, bytes, kind == BK_WEIGHT ? "weights" : "activations");
}

void cuda_release(backend_t *b, void *p) {
    cuda_t *c = C(b);
    flush(b);   /* a held op may read p (an error shows at the next sync) */
    if (c->warena && (char *)p >= c->warena && (char *)p < c->warena + c->wcap) {
        /* the arena goes back when its last tensor does (a second model can follow) */
        if (--c->wlive == 0) {
            cudaStreamSynchronize(c->st);
            free_arena(c);
        }
        return;
    }
    dev_free(b, p);
}

/* Host to device on the backend's stream, complete on return. A plain cudaMemcpy would go
 * on the legacy stream, which is not ordered with ours (created non-blocking), and from
 * pageable memory may return before the data lands. */
int copy_in(backend_t *b, void *dst, const void *src, size_t bytes, const char *what) {
    cuda_t *c = C(b);
    CU(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->st), what);
    CU(b, cudaStreamSynchronize(c->st), what);
    return 0;
}

/* fp32 host data into a buffer of the weight type, through the staging buffer. */
int to_device(backend_t *b, void *dst, const float *src, size_t n) {
    cuda_t *c = C(b);
    if (c->dt == CK_F32) return copy_in(b, dst, src, n * 4, "upload");
    for (size_t off = 0; off < n; off += STAGE_FLOATS) {
        size_t k = n - off < STAGE_FLOATS ? n - off : STAGE_FLOATS;
        CU(b, cudaMemcpyAsync(c->stage, src + off, k * 4, cudaMemcpyHostToDevice, c->st),
           "cudaMemcpyAsync (upload)");
        CU(b, ck_from_f32(c->st, c->dt, (char *)dst + off * ck_dtype_size(c->dt), c->stage, k),
           "converting an upload");
        /* the host source may be freed after return, and the stage is reused */
        CU(b, cudaStreamSynchronize(c->st), "cudaStreamSynchronize (upload)");
    }
    return 0;
}

int cuda_upload_weight(backend_t *b, void *dst, const float *src, size_t n) {
    if (flush(b)) return -1;
    return to_device(b, dst, src, n);
}

size_t cuda_matrix_elems(backend_t *b, int32_t rows, int32_t cols) {
    (void)b;
    return (size_t)rows * (size_t)cols;
}

int cuda_upload_matrix(backend_t *b, void *dst, const float *src, int32_t rows, int32_t cols) {
    if (rows <= 0 || cols <= 0)
        return bk_fail(b, "cuda: upload_matrix: bad shape %d x %d", rows, cols);
    if (flush(b)) return -1;
    return to_device(b, dst, src, (size_t)rows * (size_t)cols);
}

int cuda_gen_matrix(backend_t *b, void *dst, int32_t rows, int32_t cols, uint64_t seed,
                    uint64_t tensor) {
    if (rows <= 0 || cols <= 0)
        return bk_fail(b, "cuda: gen_matrix: bad shape %d x %d", rows, cols);
    if (flush(b)) return -1;
    CU(b, ck_gen_dummy(C(b)->st, C(b)->dt, dst, (size_t)rows * (size_t)cols, seed, tensor, 0),
       "generating dummy weights");
    return 0;
}

int cuda_upload(backend_t *b, void *dst, const void *src, size_t bytes) {
    if (flush(b)) return -1;
    return copy_in(b, dst, src, bytes, "upload");
}

int cuda_download_f32(backend_t *b, float *dst, const void *src, bk_kind_t kind, size_t n) {
    cuda_t *c = C(b);
    if (flush(b)) return -1;
    CU(b, cudaStreamSynchronize(c->st), "a step before download (cudaStreamSynchronize)");
    if (dt_size(c, kind) == 4) {   /* fp32 or int32 as stored: no conversion */
        CU(b, cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToHost, c->st),
           "cudaMemcpyAsync (download)");
        CU(b, cudaStreamSynchronize(c->st), "cudaStreamSynchronize (download)");
        return 0;
    }
    const size_t es = dt_size(c, kind);   /* 2: a 16-bit weight or activation type */
    for (size_t off = 0; off < n; off += STAGE_FLOATS) {
        size_t k = n - off < STAGE_FLOATS ? n - off : STAGE_FLOATS;
        CU(b, ck_to_f32(c->st, c->dt, c->stage, (const char *)src + off * es, k),
           "converting a download");
        CU(b, cudaMemcpyAsync(dst + off, c->stage, k * 4, cudaMemcpyDeviceToHost, c->st),
           "cudaMemcpyAsync (download)");
        CU(b, cudaStreamSynchronize(c->st), "cudaStreamSynchronize (download)");
    }
    return 0;
}

size_t cuda_kv_block_bytes(backend_t *b, const bk_kv_shape_t *s) {
    return (size_t)s->n_layers * 2 * (size_t)s->block_size * (size_t)s->n_kv_heads *
           (size_t)s->head_dim * ck_dtype_size(C(b)->dt);
}

int cuda_kv_init(backend_t *b, const bk_kv_shape_t *s) {
    cuda_t *c = C(b);
    if (bk_check_kv_shape(b, s) || flush(b)) return -1;
    size_t bytes = cuda_kv_block_bytes(b, s) * (size_t)s->n_blocks;
    dev_free(b, c->kv.base);
    c->kv.base = NULL;
    if (!(c->kv.base = dev_alloc(b, bytes, "the KV pool"))) return -1;
    /* zeroed: timing runs that only set positions then read finite numbers */
    CU(b, cudaMemsetAsync(c->kv.base, 0, bytes, c->st), "cudaMemsetAsync (KV pool)");
    c->kv.dtype = c->dt;
    c->kv.n_layers = s->n_layers;
    c->kv.n_blocks = s->n_blocks;
    c->kv.block_size = s->block_size;
    c->kv.n_kv_heads = s->n_kv_heads;
    c->kv.head_dim = s->head_dim;
    return 0;
}

/* ---- the step's batch ------------------------------------------------------------------ */

/* Grows a pinned host buffer and its device twin to at least `bytes` (contents dropped). */
int grow_meta(backend_t *b, size_t bytes) {
    cuda_t *c = C(b);
    if (bytes <= c->meta_cap) return 0;
    size_t cap = c->meta_cap ? c->meta_cap : 4096;
    while (cap < bytes) cap *= 2;
    CU(b, cudaStreamSynchronize(c->st), "cudaStreamSynchronize (metadata)");
    cudaFreeHost(c->meta_host);
    dev_free(b, c->meta_dev);
    c->meta_host = NULL;
    c->meta_dev = NULL;
    c->meta_cap = 0;
    CU(b, cudaMallocHost((void **)&c->meta_host, cap), "cudaMallocHost (metadata)");
    if (!(c->meta_dev = (char *)dev_alloc(b, cap, "step metadata"))) return -1;
    c->meta_cap = cap;
    return 0;
}

/* Appends n items of `size` bytes at an 8-byte aligned offset; returns the offset. */
size_t pack(char *base, size_t *used, const void *src, size_t n, size_t size) {
    size_t off = (*used + 7) & ~(size_t)7;
    if (src && n) memcpy(base + off, src, n * size);
    *used = off + n * size;
    return off;
}

int cuda_prepare(backend_t *b, const bk_batch_t *bt) {
    cuda_t *c = C(b);
    if (flush(b)) return -1;   /* a step left without sync */
    memset(&c->batch, 0, sizeof c->batch);   /* the last step's may point at freed metadata */
    c->sample_host = NULL;
    int32_t nt = bt->n_tokens, ns = bt->n_seqs, nsm = bt->n_sample;
    size_t nbt = (size_t)bt->bt_start[ns];
    size_t plan_cap = ck_attn_plan_cap(bt);
    size_t bytes = 8 * 12 + 4 * (2 * (size_t)nt + 3 * (size_t)ns + 2 + nbt + (size_t)nsm +
                                 plan_cap) +
                   sizeof(bk_sample_t) * (size_t)nsm + (size_t)nt * 4;
    if (grow_meta(b, bytes)) return -1;
    /* the previous step's copy must have left meta_host before it is overwritten */
    CU(b, cudaEventSynchronize(c->meta_done), "cudaEventSynchronize (metadata)");
    if ((size_t)nsm > c->ids_cap) {
        cudaFreeHost(c->ids_host);
        dev_free(b, c->ids_dev);
        c->ids_host = NULL;
        c->ids_dev = NULL;
        c->ids_cap = 0;
        size_t cap = (size_t)nsm < 256 ? 256 : (size_t)nsm;
        CU(b, cudaMallocHost((void **)&c->ids_host, cap * 4), "cudaMallocHost (ids)");
        if (!(c->ids_dev = (int32_t *)dev_alloc(b, cap * 4, "sampled ids"))) return -1;
        c->ids_cap = cap;
    }

    char *h = c->meta_host;
    size_t used = 0;
    /* filled locally and kept only on success: a failed prepare leaves no half-made
     * batch for an op to launch on */
    ck_batch_t kb;
    memset(&kb, 0, sizeof kb);
    ck_batch_t *k = &kb;
    k->invariant = c->invariant;
    k->n_sm = c->n_sm;
    k->n_tokens = nt;
    k->n_seqs = ns;
    k->n_sample = nsm;
    /* the sequence of each token */
    size_t o_tokseq = pack(h, &used, NULL, (size_t)nt, 4);
    int32_t *tok_seq = (int32_t *)(h + o_tokseq);
    for (int32_t s = 0; s < ns; s++)
        for (int32_t i = bt->seq_start[s]; i < bt->seq_start[s + 1]; i++) tok_seq[i] = s;
    size_t o_tok = pack(h, &used, bt->tokens, (size_t)nt, 4);
    size_t o_pos = pack(h, &used, bt->pos, (size_t)nt, 4);
    size_t o_ss = pack(h, &used, bt->seq_start, (size_t)ns + 1, 4);
    size_t o_sl = pack(h, &used, bt->seq_len, (size_t)ns, 4);
    size_t o_bs = pack(h, &used, bt->bt_start, (size_t)ns + 1, 4);
    size_t o_sr = pack(h, &used, bt->sample_rows, (size_t)nsm, 4);
    size_t o_sp = pack(h, &used, bt->sample, (size_t)nsm, sizeof(bk_sample_t));
    size_t o_plan = pack(h, &used, NULL, plan_cap, 4);
    size_t dec_off = 0, pf_off = 0;
    size_t n_plan = ck_attn_plan(bt, &c->kv, (int32_t *)(h + o_plan), k, &dec_off, &pf_off);
    used = o_plan + n_plan * 4;
    /* the block table last: it grows as the contexts do, and everything before it then
     * keeps its place from one decode step to the next (the step graphs' keys) */
    size_t o_bt = pack(h, &used, bt->block_table, nbt, 4);
    if (used > c->meta_cap) return bk_fail(b, "cuda: prepare: metadata overflow (a bug)");
    CU(b, cudaMemcpyAsync(c->meta_dev, h, used, cudaMemcpyHostToDevice, c->st),
       "cudaMemcpyAsync (step metadata)");
    CU(b, cudaEventRecord(c->meta_done, c->st), "cudaEventRecord (metadata)");
    const char *d = c->meta_dev;
    k->tok_seq = (const int32_t *)(d + o_tokseq);
    k->tokens = (const int32_t *)(d + o_tok);
    k->pos = (const int32_t *)(d + o_pos);
    k->seq_start = (const int32_t *)(d + o_ss);
    k->seq_len = (const int32_t *)(d + o_sl);
    k->bt_start = (const int32_t *)(d + o_bs);
    k->block_table = (const int32_t *)(d + o_bt);
    k->sample_rows = (const int32_t *)(d + o_sr);
    k->sample = (const bk_sample_t *)(d + o_sp);
    k->dec_tok = (const int32_t *)(d + o_plan) + dec_off;
    k->pf_tile = (const int32_t *)(d + o_plan) + pf_off;
    memcpy(&c->batch, &kb, sizeof kb);   /* padding too (the graph keys compare bytes) */
    c->sample_host = (const bk_sample_t *)(h + o_sp);
    /* a step of decodes (and verifies) is held for a graph; prefill steps change shape
     * from step to step and run as they come */
    c->deferring = c->use_graphs;
    for (int32_t s = 0; s < ns && c->deferring; s++)
        c->deferring = bt->seq_start[s + 1] - bt->seq_start[s] <= CK_DEC_MAX_Q;
    return 0;
}

/* ---- ops (the records and the graphs: backend_cuda_step.cuh) ------------------------- */

#include "engine/cuda/backend_cuda_step.cuh"

int cuda_embed(backend_t *b, void *x, const void *table, int32_t dim) {
    op_t o = op_new(OP_EMBED);
    o.p[0] = x, o.p[1] = table, o.i[0] = dim;
    return issue(b, &o);
}

/* A few rows (decode steps of a few sequences) go to our bandwidth-bound kernel
 * (cuda_gemv.cu), and every product in the batch-invariant mode, because cuBLAS chooses
 * its kernel (and its summation order) by shape; the rest to cuBLAS (weights transposed,
 * the activations as they are, every leading dimension the row length). */
int cuda_matmul(backend_t *b, void *y, bk_kind_t y_kind, const void *x, const void *w,
                int32_t m, int32_t n, int32_t k) {
    cuda_t *c = C(b);
    if (m <= 0 || n <= 0 || k <= 0)
        return bk_fail(b, "cuda: matmul: bad shape m %d n %d k %d", m, n, k);
    op_t o = op_new(c->invariant || (c->use_gemv && ck_gemv_ok(c->dt, x, w, m, k)) ? OP_GEMV
                                                                                   : OP_GEMM);
    o.p[0] = y, o.p[1] = x, o.p[2] = w;
    o.i[0] = m, o.i[1] = n, o.i[2] = k, o.i[3] = y_kind == BK_F32;
    return issue(b, &o);
}

int cuda_rmsnorm(backend_t *b, void *out, void *x, const void *residual, const void *w,
                 int32_t m, int32_t dim, float eps) {
    op_t o = op_new(OP_RMSNORM);
    o.p[0] = out, o.p[1] = x, o.p[2] = residual, o.p[3] = w;
    o.i[0] = m, o.i[1] = dim, o.f = eps;
    return issue(b, &o);
}

static int check_kv(backend_t *b, const char *op, int32_t layer, int32_t n_heads,
                    int32_t n_kv_heads, int32_t head_dim) {
    const ck_kv_t *kv = &C(b)->kv;
    bk_kv_shape_t pool;
    pool.n_layers = kv->n_layers;
    pool.n_blocks = kv->n_blocks;
    pool.block_size = kv->block_size;
    pool.n_kv_heads = kv->n_kv_heads;
    pool.head_dim = kv->head_dim;
    return bk_check_kv_use(b, kv->base ? &pool : NULL, op, layer, n_heads, n_kv_heads, head_dim);
}

int cuda_rope_kv(backend_t *b, void *q, void *k, const void *v, int32_t layer, int32_t n_heads,
                 int32_t n_kv_heads, int32_t head_dim, float theta) {
    cuda_t *c = C(b);
    if (check_kv(b, "rope_kv", layer, n_heads, n_kv_heads, head_dim)) return -1;
    if (head_dim % 2) return bk_fail(b, "cuda: rope_kv: head_dim %d is odd", head_dim);
    if (c->rope_hd != head_dim || c->rope_theta != theta) {
        /* the CPU reference's frequencies (bk_rope_inv_freq, on the host); uploaded once
         * per model, not per step */
        float f[1024];
        if (head_dim / 2 > 1024)
            return bk_fail(b, "cuda: rope_kv: head_dim %d too large", head_dim);
        bk_rope_inv_freq(f, head_dim, theta);
        c->rope_hd = 0;   /* no table until the new one is in place */
        dev_free(b, c->inv_freq);
        if (!(c->inv_freq = (float *)dev_alloc(b, (size_t)head_dim / 2 * 4, "RoPE"))) return -1;
        if (copy_in(b, c->inv_freq, f, (size_t)head_dim / 2 * 4, "RoPE frequencies")) return -1;
        c->rope_hd = head_dim;
        c->rope_theta = theta;
    }
    op_t o = op_new(OP_ROPE);
    o.p[0] = q, o.p[1] = k, o.p[2] = v, o.p[3] = c->inv_freq;
    o.i[0] = layer, o.i[1] = n_heads;
    return issue(b, &o);
}

int cuda_attention(backend_t *b, void *out, const void *q, int32_t layer, int32_t n_heads,
                   int32_t n_kv_heads, int32_t head_dim) {
    cuda_t *c = C(b);
    if (check_kv(b, "attention", layer, n_heads, n_kv_heads, head_dim)) return -1;
    size_t need = ck_attn_scratch_floats(&c->batch, n_heads, head_dim);
    if (need > c->attn_cap) {
        size_t cap = need + need / 2;
        CU(b, cudaStreamSynchronize(c->st), "cudaStreamSynchronize (attention scratch)");
        dev_free(b, c->attn_scratch);
        c->attn_scratch = NULL;
        c->attn_cap = 0;
        if (!(c->attn_scratch = (float *)dev_alloc(b, cap * 4, "attention scratch"))) return -1;
        c->attn_cap = cap;
    }
    op_t o = op_new(OP_ATTN);
    o.p[0] = out, o.p[1] = q, o.p[2] = c->attn_scratch;
    o.i[0] = layer, o.i[1] = n_heads;
    return issue(b, &o);
}

int cuda_silu_mul(backend_t *b, void *out, const void *gate, const void *up, size_t n) {
    op_t o = op_new(OP_SILU);
    o.p[0] = out, o.p[1] = gate, o.p[2] = up, o.z = n;
    return issue(b, &o);
}

int cuda_add(backend_t *b, void *x, const void *y, size_t n) {
    op_t o = op_new(OP_ADD);
    o.p[0] = x, o.p[1] = y, o.z = n;
    return issue(b, &o);
}

int cuda_gather_rows(backend_t *b, void *out, const void *x, bk_kind_t kind, int32_t dim) {
    op_t o = op_new(OP_GATHER);
    o.p[0] = out, o.p[1] = x, o.i[0] = dim, o.z = dt_size(C(b), kind);
    return issue(b, &o);
}

int cuda_sample(backend_t *b, int32_t *ids_host, const void *logits, bk_kind_t kind,
                int32_t vocab) {
    cuda_t *c = C(b);
    int32_t n = c->batch.n_sample;
    if (n <= 0) return 0;
    if (kind != BK_F32) return bk_fail(b, "cuda: sample: logits must be fp32 (BK_F32)");
    if (flush(b)) return -1;
    char msg[200] = "";
    cudaError_t e = ck_sample(c->sampler, c->st, c->ids_dev, (const float *)logits, n, vocab,
                              c->batch.sample, c->sample_host, msg, sizeof msg);
    if (e != cudaSuccess)
        return bk_fail(b, "cuda: sample: %s (%s)", msg[0] ? msg : cudaGetErrorString(e),
                       cudaGetErrorName(e));
    CU(b, cudaMemcpyAsync(c->ids_host, c->ids_dev, (size_t)n * 4, cudaMemcpyDeviceToHost, c->st),
       "cudaMemcpyAsync (sampled ids)");
    CU(b, cudaStreamSynchronize(c->st), "the step (cudaStreamSynchronize after sampling)");
    memcpy(ids_host, c->ids_host, (size_t)n * 4);
    return 0;
}

int cuda_sync(backend_t *b) {
    if (flush(b)) return -1;
    CU(b, cudaStreamSynchronize(C(b)->st), "the step (cudaStreamSynchronize)");
    CU(b, cudaGetLastError(), "the step");
    return 0;
}

int cuda_roofs(backend_t *b, int reps, double *mem_bw, double *gemm_flops) {
    char msg[200];
    if (flush(b)) return -1;
    if (ck_roof_read_bw(reps, mem_bw, msg, sizeof msg))
        return bk_fail(b, "cuda: read bandwidth: %s", msg);
    if (ck_roof_gemm((int)C(b)->dt, 0, reps, gemm_flops, msg, sizeof msg))
        return bk_fail(b, "cuda: GEMM rate: %s", msg);
    return 0;
}

void cuda_destroy(backend_t *b) {
    if (!b) return;
    cuda_t *c = C(b);
    if (c) {
        if (c->st) cudaStreamSynchronize(c->st);   /* held ops are dropped */
        ck_graphs_free(c->graphs);
        free(c->ops);
        free(c->key);
        ck_sampler_free(c->sampler);
        if (c->blas) cublasDestroy(c->blas);
        cudaFree(c->blas_ws);
        for (size_t i = 0; i < c->n_allocs; i++) cudaFree(c->allocs[i]);
        free(c->allocs);
        free_arena(c);
        cudaFree(c->stage);
        cudaFreeHost(c->meta_host);
        cudaFreeHost(c->ids_host);
        if (c->meta_done) cudaEventDestroy(c->meta_done);
        if (c->st) cudaStreamDestroy(c->st);
        free(c);
    }
    free(b);
}

const char *cuda_counters(backend_t *b) {
    cuda_t *c = C(b);
    const ck_graph_stats_t *g = ck_graphs_stats(c->graphs);
    snprintf(c->counters, sizeof c->counters,
             "graphs=%s graph_captured=%lld graph_replayed=%lld graph_eager=%lld "
             "graph_evicted=%lld graph_failed=%lld", c->use_graphs ? "on" : "off", g->captured,
             g->replayed, g->eager, g->evicted, g->failed);
    return c->counters;
}

int parse_dtype(const char *s, ck_dtype_t *t) {
    if (!s || !strcmp(s, "bf16")) *t = CK_BF16;
    else if (!strcmp(s, "f16") || !strcmp(s, "fp16")) *t = CK_F16;
    else if (!strcmp(s, "f32") || !strcmp(s, "fp32")) *t = CK_F32;
    else return -1;
    return 0;
}

}  // namespace

extern "C" int backend_cuda_available(int device, char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* no driver (cudaErrorInsufficientDriver, 35) or no device (100): a machine without
         * a GPU, which is not an error of ours */
        snprintf(err, errlen, "no GPU here (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
        cudaGetLastError();
        return 0;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "no GPU %d here (%d device%s)", device, n, n == 1 ? "" : "s");
        return 0;
    }
    return 1;
}

extern "C" backend_t *backend_cuda_new(const bk_opts_t *opts, char *err, size_t errlen) {
    bk_opts_t def = {};
    if (!opts) opts = &def;
    ck_dtype_t dt;
    if (parse_dtype(opts->dtype, &dt)) {
        snprintf(err, errlen, "backend cuda: --dtype '%s' is not bf16, f16 or f32", opts->dtype);
        return NULL;
    }
    char why[200];
    if (!backend_cuda_available(opts->device, why, sizeof why)) {
        snprintf(err, errlen, "backend cuda: %s", why);
        return NULL;
    }
    backend_t *b = (backend_t *)calloc(1, sizeof *b);
    cuda_t *c = (cuda_t *)calloc(1, sizeof *c);
    cudaError_t e = cudaSuccess;
    const char *what = "";
    if (!b || !c) {
        snprintf(err, errlen, "backend cuda: out of host memory");
        free(b);
        free(c);
        return NULL;
    }
    b->impl = c;
    c->device = opts->device;
    c->dt = dt;
    c->invariant = opts->batch_invariant != 0;
    {
        const char *g = getenv("TWIN_CUDA_GEMV");
        c->use_gemv = !(g && !strcmp(g, "0"));
        g = getenv("TWIN_CUDA_GRAPHS");
        c->use_graphs = !(g && !strcmp(g, "0"));
    }
    if ((e = cudaSetDevice(c->device)) != cudaSuccess) what = "cudaSetDevice";
    else if ((e = cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount,
                                         c->device)) != cudaSuccess)
        what = "cudaDeviceGetAttribute (multiprocessors)";
    else if ((e = cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking)) != cudaSuccess)
        what = "cudaStreamCreate";
    else if ((e = cudaEventCreateWithFlags(&c->meta_done, cudaEventDisableTiming)) != cudaSuccess)
        what = "cudaEventCreate";
    else if ((e = cudaMalloc((void **)&c->stage, STAGE_FLOATS * 4)) != cudaSuccess)
        what = "cudaMalloc (staging)";
    if (e != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: %s: %s", what, cudaGetErrorString(e));
        goto fail;
    }
    /* recorded once so the first prepare's wait returns at once */
    cudaEventRecord(c->meta_done, c->st);
    /* cuBLAS gets a workspace of ours (after SetStream, which resets it), so that a
     * captured product never allocates one of its own inside a capture */
    if ((e = cudaMalloc(&c->blas_ws, BLAS_WS_BYTES)) != cudaSuccess) {
        snprintf(err, errlen, "backend cuda: cudaMalloc (cuBLAS workspace): %s",
                 cudaGetErrorString(e));
        goto fail;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->blas, c->st) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "backend cuda: cublasCreate failed");
        goto fail;
    }
    if (!(c->graphs = ck_graphs_new())) {
        snprintf(err, errlen, "backend cuda: out of host memory");
        goto fail;
    }
    if (!(c->sampler = ck_sampler_new())) {
        snprintf(err, errlen, "backend cuda: cannot create the sampler");
        goto fail;
    }
    b->name = "cuda";
    b->weight_type = dt == CK_BF16 ? "bf16" : dt == CK_F16 ? "f16" : "f32";
    b->mem_info = cuda_mem_info;
    b->elem_size = cuda_elem_size;
    b->alloc = cuda_alloc;
    b->release = cuda_release;
    b->reserve_weights = cuda_reserve_weights;
    b->upload_weight = cuda_upload_weight;
    b->matrix_row_align = 1;
    b->matrix_elems = cuda_matrix_elems;
    b->upload_matrix = cuda_upload_matrix;
    b->gen_matrix = cuda_gen_matrix;
    b->upload = cuda_upload;
    b->download_f32 = cuda_download_f32;
    b->kv_init = cuda_kv_init;
    b->kv_block_bytes = cuda_kv_block_bytes;
    b->prepare = cuda_prepare;
    b->embed = cuda_embed;
    b->matmul = cuda_matmul;
    b->rmsnorm = cuda_rmsnorm;
    b->rope_kv = cuda_rope_kv;
    b->attention = cuda_attention;
    b->silu_mul = cuda_silu_mul;
    b->add = cuda_add;
    b->gather_rows = cuda_gather_rows;
    /* mixtures of experts are not on the GPU yet: without these ops the forward pass
     * refuses an MoE model here with a message naming the backend (engine/forward_moe.c) */
    b->gather_idx = NULL;
    b->moe_combine = NULL;
    b->sample = cuda_sample;
    b->sync = cuda_sync;
    b->roofs = cuda_roofs;
    b->counters = cuda_counters;
    b->destroy = cuda_destroy;
    return b;
fail:
    cuda_destroy(b);
    return NULL;
}

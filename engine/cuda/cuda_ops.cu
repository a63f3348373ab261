/* cuda_ops: the CUDA backend's small kernels (cuda_kernels.h): type conversion, dummy
 * weights, embedding gather, RMSNorm fused with the residual add, RoPE fused with the KV
 * write, SiLU-mul, add, row gather. Each matches its CPU reference op
 * (engine/cpu/backend_cpu.c) and is checked against it in tests/test_backend_cuda.c.
 *
 * Element-wise ops are memory-bound: grid-stride loops, one element per thread per
 * iteration, except silu_mul (the MLP's widest activation), which moves 16-byte vectors
 * when its length and pointers allow. rmsnorm takes one block per row, so that the row's
 * reduction stays in the block; rope_kv one block per token, or, in a step of fewer
 * tokens than the device has SMs (decode), several blocks per token, each with whole
 * heads (each computes the token's angles: 64 pairs, cheaper than a second launch). All
 * arithmetic in fp32 (the RoPE angles in fp64, as the CPU reference computes them),
 * rounded once at the store. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/cuda/cuda_elem.cuh"
#include "engine/cuda/cuda_kernels.h"
#include "engine/dummy_weight.h"

namespace {

template <typename T> __device__ __forceinline__ float ld(const T *p, size_t i) {
    return to_f(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T *p, size_t i, float v) {
    p[i] = from_f<T>(v);
}

/* Grid size for n independent items: enough blocks to fill the GPU a few times over; the
 * kernels loop over the rest. */
unsigned grid_for(size_t n, unsigned threads) {
    size_t g = (n + threads - 1) / threads;
    return g > 4096 ? 4096u : g < 1 ? 1u : (unsigned)g;
}

#define GRID_STRIDE(i, n)                                                               \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
         i += (size_t)gridDim.x * blockDim.x)

template <typename T> __global__ void from_f32_k(T *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) st(dst, i, src[i]);
}

template <typename T> __global__ void to_f32_k(float *dst, const T *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = ld(src, i);
}

template <typename T>
__global__ void gen_dummy_k(T *dst, size_t n, uint64_t key, uint64_t tensor, uint64_t off) {
    GRID_STRIDE(i, n) st(dst, i, dummy_weight_k(key, tensor, off + i));
}

template <typename T>
__global__ void embed_k(float *x, const T *table, int32_t dim, const int32_t *tokens) {
    const T *row = table + (size_t)tokens[blockIdx.x] * dim;
    float *out = x + (size_t)blockIdx.x * dim;
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) out[j] = ld(row, j);
}

/* Sum over the block; every thread gets the total. blockDim.x a multiple of 32, <= 1024. */
__device__ float block_sum(float v) {
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();   /* part[] may still be read by a previous call */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    int nw = (int)(blockDim.x >> 5);
    v = lane < nw ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* One block per row. Each thread adds, stores and later scales the same elements, so out
 * may alias residual: an element's residual is read before its output is written. */
template <typename T>
__global__ void rmsnorm_k(T *out, float *x, const T *res, const T *w, int32_t dim, float eps) {
    size_t base = (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x) {
        float v = x[base + j];
        if (res) {
            v += ld(res, base + j);
            x[base + j] = v;
        }
        ss += v * v;
    }
    ss = block_sum(ss);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int32_t j = threadIdx.x; j < dim; j += blockDim.x)
        st(out, base + j, x[base + j] * scale * ld(w, j));
}

/* grid (n_tokens, chunks): block (t, y) rotates rows y x rpb .. + rpb - 1 of token t, a
 * row being a head of q (rows 0 .. n_heads - 1) or of k (the rest), and stores the k and v
 * of the kv heads among its rows in the token's slot (so each is stored once, by the block
 * that rotated it). The token's angles first into shared memory (fp64 as on the CPU). */
template <typename T>
__global__ void rope_kv_k(T *q, T *k, const T *v, T *pool, ck_kv_t kv, int32_t layer,
                          int32_t n_heads, const float *inv_freq, ck_batch_t b, int32_t rpb) {
    extern __shared__ float cs_sn[];   /* [pairs] cos, then [pairs] sin */
    int32_t t = blockIdx.x, hd = kv.head_dim, pairs = hd / 2, nkv = kv.n_kv_heads;
    int32_t p = b.pos[t], s = b.tok_seq[t];
    for (int32_t f = threadIdx.x; f < pairs; f += blockDim.x) {
        double sn, cs;
        sincos((double)p * (double)inv_freq[f], &sn, &cs);
        cs_sn[f] = (float)cs;
        cs_sn[pairs + f] = (float)sn;
    }
    __syncthreads();
    size_t qd = (size_t)n_heads * hd, kvd = (size_t)nkv * hd;
    int32_t r0 = (int32_t)blockIdx.y * rpb, rows = min(n_heads + nkv, r0 + rpb) - r0;
    for (int32_t i = threadIdx.x; i < rows * pairs; i += blockDim.x) {
        int32_t h = r0 + i / pairs, f = i % pairs;
        T *vec = h < n_heads ? q + t * qd + (size_t)h * hd
                             : k + t * kvd + (size_t)(h - n_heads) * hd;
        float x0 = ld(vec, 2 * f), x1 = ld(vec, 2 * f + 1);
        float c = cs_sn[f], sn = cs_sn[pairs + f];
        /* products rounded before the sum, as the CPU computes it (nvcc would fuse) */
        st(vec, 2 * f, __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn)));
        st(vec, 2 * f + 1, __fadd_rn(__fmul_rn(x0, sn), __fmul_rn(x1, c)));
    }
    __syncthreads();   /* the rotated k is read back below by other threads */
    int32_t blk = b.block_table[b.bt_start[s] + p / kv.block_size], slot = p % kv.block_size;
    const int32_t k0 = max(r0, n_heads) - n_heads, k1 = max(r0 + rows, n_heads) - n_heads;
    for (int32_t i = k0 * hd + threadIdx.x; i < k1 * hd; i += blockDim.x) {
        int32_t h = i / hd, d = i % hd;
        size_t ko = ck_kv_at(&kv, layer, blk, 0, h, slot) + d;
        size_t vo = ck_kv_at(&kv, layer, blk, 1, h, slot) + d;
        pool[ko] = k[t * kvd + i];
        pool[vo] = v[t * kvd + i];
    }
}

template <typename T> __device__ __forceinline__ T silu_mul_1(T g, T u) {
    float gf = to_f(g);
    return from_f<T>(gf / (1.0f + expf(-gf)) * to_f(u));
}

template <typename T>
__global__ void silu_mul_k(T *out, const T *gate, const T *up, size_t n) {
    GRID_STRIDE(i, n) out[i] = silu_mul_1(gate[i], up[i]);
}

/* nv 16-byte vectors of each array (16-byte aligned): one load of gate and of up and one
 * store per thread per iteration, the same arithmetic per element as silu_mul_k */
template <typename T>
__global__ void silu_mul_v(T *out, const T *gate, const T *up, size_t nv) {
    constexpr int E = 16 / sizeof(T);
    union V {
        uint4 r;
        T e[E];
    };
    GRID_STRIDE(i, nv) {
        V g, u, o;
        g.r = reinterpret_cast<const uint4 *>(gate)[i];
        u.r = reinterpret_cast<const uint4 *>(up)[i];
#pragma unroll
        for (int j = 0; j < E; j++) o.e[j] = silu_mul_1(g.e[j], u.e[j]);
        reinterpret_cast<uint4 *>(out)[i] = o.r;
    }
}

template <typename X, typename Y> __global__ void add_k(X *x, const Y *y, size_t n) {
    GRID_STRIDE(i, n) st(x, i, ld(x, i) + ld(y, i));
}

/* Rows as 4-byte words when the row allows, else bytes. */
__global__ void gather_k(char *out, const char *x, size_t row_bytes, const int32_t *rows) {
    const char *src = x + (size_t)rows[blockIdx.x] * row_bytes;
    char *dst = out + (size_t)blockIdx.x * row_bytes;
    if (row_bytes % 4 == 0) {
        for (size_t j = threadIdx.x; j < row_bytes / 4; j += blockDim.x)
            ((uint32_t *)dst)[j] = ((const uint32_t *)src)[j];
    } else {
        for (size_t j = threadIdx.x; j < row_bytes; j += blockDim.x) dst[j] = src[j];
    }
}

unsigned row_threads(int32_t dim) {
    unsigned t = 32;
    while (t < 1024 && t < (unsigned)dim) t *= 2;
    return t;
}

}  // namespace

/* Calls f with a typed null pointer of the element type, so one switch serves every op. */
#define DISPATCH(t, body)                                                               \
    switch (t) {                                                                        \
    case CK_F32: { typedef float E; body; } break;                                      \
    case CK_BF16: { typedef __nv_bfloat16 E; body; } break;                             \
    case CK_F16: { typedef __half E; body; } break;                                     \
    default: return cudaErrorInvalidValue;                                              \
    }

extern "C" cudaError_t ck_from_f32(cudaStream_t st, ck_dtype_t t, void *dst, const float *src,
                                   size_t n) {
    if (!n) return cudaSuccess;
    DISPATCH(t, (from_f32_k<E><<<grid_for(n, 256), 256, 0, st>>>((E *)dst, src, n)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_to_f32(cudaStream_t st, ck_dtype_t t, float *dst, const void *src,
                                 size_t n) {
    if (!n) return cudaSuccess;
    DISPATCH(t, (to_f32_k<E><<<grid_for(n, 256), 256, 0, st>>>(dst, (const E *)src, n)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_gen_dummy(cudaStream_t st, ck_dtype_t t, void *dst, size_t n,
                                    uint64_t seed, uint64_t tensor, uint64_t offset) {
    if (!n) return cudaSuccess;
    uint64_t key = dummy_key(seed);
    DISPATCH(t, (gen_dummy_k<E><<<grid_for(n, 256), 256, 0, st>>>((E *)dst, n, key, tensor,
                                                                   offset)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_embed(cudaStream_t st, ck_dtype_t t, float *x, const void *table,
                                int32_t dim, const ck_batch_t *b) {
    if (dim <= 0 || b->n_tokens <= 0) return cudaErrorInvalidValue;
    DISPATCH(t, (embed_k<E><<<b->n_tokens, row_threads(dim), 0, st>>>(x, (const E *)table, dim,
                                                                       b->tokens)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_rmsnorm(cudaStream_t st, ck_dtype_t t, void *out, float *x,
                                  const void *residual, const void *w, int32_t m, int32_t dim,
                                  float eps) {
    if (m <= 0 || dim <= 0) return cudaErrorInvalidValue;
    DISPATCH(t, (rmsnorm_k<E><<<m, row_threads(dim), 0, st>>>((E *)out, x, (const E *)residual,
                                                               (const E *)w, dim, eps)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_rope_kv(cudaStream_t st, const ck_kv_t *kv, int32_t layer, void *q,
                                  void *k, const void *v, int32_t n_heads,
                                  const float *inv_freq, const ck_batch_t *b) {
    if (b->n_tokens <= 0 || kv->head_dim <= 0 || kv->head_dim % 2 || n_heads <= 0 ||
        layer < 0 || layer >= kv->n_layers)
        return cudaErrorInvalidValue;
    /* a step of few tokens spreads each token's heads over several blocks, so that the
     * device's SMs (b->n_sm, 0: 132) all take part; each block recomputes the angles */
    const int32_t rows = n_heads + kv->n_kv_heads, sms = b->n_sm > 0 ? b->n_sm : 132;
    int32_t chunks = b->n_tokens >= sms ? 1 : (sms + b->n_tokens - 1) / b->n_tokens;
    if (chunks > rows) chunks = rows;
    const int32_t rpb = (rows + chunks - 1) / chunks;
    chunks = (rows + rpb - 1) / rpb;
    size_t smem = (size_t)kv->head_dim * sizeof(float);
    unsigned threads = row_threads(rpb * kv->head_dim / 2);
    DISPATCH(kv->dtype, (rope_kv_k<E><<<dim3(b->n_tokens, chunks), threads, smem, st>>>(
                            (E *)q, (E *)k, (const E *)v, (E *)kv->base, *kv, layer, n_heads,
                            inv_freq, *b, rpb)));
    return cudaGetLastError();
}

extern "C" cudaError_t ck_silu_mul(cudaStream_t st, ck_dtype_t t, void *out, const void *gate,
                                   const void *up, size_t n) {
    if (!n) return cudaSuccess;
    const size_t epv = 16 / ck_dtype_size(t);
    if (n % epv == 0 && ((uintptr_t)out | (uintptr_t)gate | (uintptr_t)up) % 16 == 0) {
        DISPATCH(t, (silu_mul_v<E><<<grid_for(n / epv, 256), 256, 0, st>>>(
                        (E *)out, (const E *)gate, (const E *)up, n / epv)));
    } else {
        DISPATCH(t, (silu_mul_k<E><<<grid_for(n, 256), 256, 0, st>>>((E *)out, (const E *)gate,
                                                                      (const E *)up, n)));
    }
    return cudaGetLastError();
}

extern "C" cudaError_t ck_add(cudaStream_t st, ck_dtype_t t, void *x, int x_f32, const void *y,
                              int y_f32, size_t n) {
    if (!n) return cudaSuccess;
    unsigned g = grid_for(n, 256);
    if (x_f32 && y_f32) {
        add_k<float, float><<<g, 256, 0, st>>>((float *)x, (const float *)y, n);
    } else if (x_f32) {
        DISPATCH(t, (add_k<float, E><<<g, 256, 0, st>>>((float *)x, (const E *)y, n)));
    } else if (y_f32) {
        DISPATCH(t, (add_k<E, float><<<g, 256, 0, st>>>((E *)x, (const float *)y, n)));
    } else {
        DISPATCH(t, (add_k<E, E><<<g, 256, 0, st>>>((E *)x, (const E *)y, n)));
    }
    return cudaGetLastError();
}

extern "C" cudaError_t ck_gather_rows(cudaStream_t st, void *out, const void *x, int32_t dim,
                                      size_t esize, const ck_batch_t *b) {
    if (b->n_sample <= 0) return cudaSuccess;
    if (dim <= 0 || !esize || out == x) return cudaErrorInvalidValue;
    gather_k<<<b->n_sample, 256, 0, st>>>((char *)out, (const char *)x, (size_t)dim * esize,
                                          b->sample_rows);
    return cudaGetLastError();
}

/* cuda_gemv: y[m][n] = x[m][k] . w[n][k]^T for the few rows of a decode step (m <= 8), our
 * own kernel beside cuBLAS (cuda_kernels.h: ck_gemv).
 *
 * Why: a decode step of a few sequences is a stream over every weight once; its roof is the
 * memory's read bandwidth, and what reaches it is many independent 16-byte loads in flight.
 * One warp owns one output row: its lanes read the row in 16-byte vectors (8 bf16/f16 or 4
 * fp32 weights), unrolled so each lane has UNROLL loads outstanding, multiply each vector
 * by the same k-slice of all m activation rows (which stay in L1/L2: m x k x 2 bytes is
 * at most 128 KB), and reduce the m sums across the warp at the end. Each weight is read
 * once for all m rows, so the traffic is the matrix, whatever m is.
 *
 * The fast path (ck_gemv_ok): 1 <= m <= CK_GEMV_MAX_M, k a multiple of the vector width,
 * w and x 16-byte aligned; the backend sends such products here and larger ones to cuBLAS
 * (TWIN_CUDA_GEMV=0: everything to cuBLAS, so bench/gpu.sh can time both in one run).
 * ck_gemv itself takes any m (chunks of CK_GEMV_MAX_M rows) and any alignment (scalar
 * loads, in the same summation order): the batch-invariant mode sends every product here,
 * because a row's result then never depends on the rest of the batch. fp32 accumulation;
 * the sum order differs from cuBLAS's, so results agree with it to rounding. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "engine/cuda/cuda_elem.cuh"
#include "engine/cuda/cuda_kernels.h"

namespace {

const int WARPS = 8;    /* rows per block */
const int UNROLL = 4;   /* 16-byte loads in flight per lane */

/* A 16-byte vector of weights or activations, widened to fp32. */
template <typename T> struct vec;
template <> struct vec<float> {
    static const int N = 4;
    __device__ static void load(const float *p, float *o) {
        float4 v = *(const float4 *)p;
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
    }
};
template <> struct vec<__nv_bfloat16> {
    static const int N = 8;
    __device__ static void load(const __nv_bfloat16 *p, float *o) {
        uint4 v = *(const uint4 *)p;
        const __nv_bfloat162 *h = (const __nv_bfloat162 *)&v;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __bfloat1622float2(h[i]);
            o[2 * i] = f.x, o[2 * i + 1] = f.y;
        }
    }
};
template <> struct vec<__half> {
    static const int N = 8;
    __device__ static void load(const __half *p, float *o) {
        uint4 v = *(const uint4 *)p;
        const __half2 *h = (const __half2 *)&v;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 f = __half22float2(h[i]);
            o[2 * i] = f.x, o[2 * i + 1] = f.y;
        }
    }
};

/* Lane `lane` owns vectors lane, lane + 32, ... of the row (V elements each; a last,
 * partial vector when V does not divide k) and sums them in that order, element by element:
 * the same order whether the loads are 16-byte vectors (VEC) or scalars, so the result
 * for a row depends on k and the type alone, never on m, on the row's place in x or on
 * alignment. That is what the batch-invariant mode relies on. */
template <typename T, typename Y, int M, bool VEC>
__global__ void __launch_bounds__(WARPS * 32)
    gemv_k(Y *y, const T *x, const T *w, int32_t n, int32_t k) {
    const int V = vec<T>::N;
    int lane = threadIdx.x & 31;
    int32_t row = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (row >= n) return;   /* whole warps leave together: no barrier below */
    x += (size_t)blockIdx.y * M * k;   /* this block's chunk of M activation rows */
    y += (size_t)blockIdx.y * M * n;
    const T *wr = w + (size_t)row * k;
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; r++) acc[r] = 0.0f;
    int32_t nv = k / V;     /* whole vectors in the row */
    int32_t j = lane;
    if (VEC) {
        /* UNROLL independent weight loads issued before any is used */
        for (; j + 32 * (UNROLL - 1) < nv; j += 32 * UNROLL) {
            float wv[UNROLL][V];
#pragma unroll
            for (int u = 0; u < UNROLL; u++) vec<T>::load(wr + (size_t)(j + 32 * u) * V, wv[u]);
#pragma unroll
            for (int u = 0; u < UNROLL; u++) {
#pragma unroll
                for (int r = 0; r < M; r++) {
                    float xv[V];
                    vec<T>::load(x + (size_t)r * k + (size_t)(j + 32 * u) * V, xv);
#pragma unroll
                    for (int e = 0; e < V; e++) acc[r] += wv[u][e] * xv[e];
                }
            }
        }
        for (; j < nv; j += 32) {
            float wv[V];
            vec<T>::load(wr + (size_t)j * V, wv);
#pragma unroll
            for (int r = 0; r < M; r++) {
                float xv[V];
                vec<T>::load(x + (size_t)r * k + (size_t)j * V, xv);
#pragma unroll
                for (int e = 0; e < V; e++) acc[r] += wv[e] * xv[e];
            }
        }
    }
    /* scalar loads: every vector when !VEC, then the partial vector */
    for (; j * V < k; j += 32) {
        int32_t e_end = k - j * V < V ? k - j * V : V;
        for (int e = 0; e < e_end; e++) {
            float wv = to_f(wr[(size_t)j * V + e]);
#pragma unroll
            for (int r = 0; r < M; r++) acc[r] += wv * to_f(x[(size_t)r * k + (size_t)j * V + e]);
        }
    }
#pragma unroll
    for (int r = 0; r < M; r++) {
        float v = acc[r];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) y[(size_t)r * n + row] = from_f<Y>(v);
    }
}

/* Rows in chunks of CK_GEMV_MAX_M (grid y), then the remaining rows. */
template <typename T, typename Y, bool VEC>
cudaError_t launch(cudaStream_t st, Y *y, const T *x, const T *w, int32_t m, int32_t n,
                   int32_t k) {
    const int MM = CK_GEMV_MAX_M;
    unsigned gx = (unsigned)((n + WARPS - 1) / WARPS);
    int32_t full = m / MM, rest = m % MM;
    if (full > 65535) return cudaErrorInvalidValue;
    if (full) gemv_k<T, Y, MM, VEC><<<dim3(gx, (unsigned)full), WARPS * 32, 0, st>>>(y, x, w, n, k);
    if (rest) {
        const T *xr = x + (size_t)full * MM * k;
        Y *yr = y + (size_t)full * MM * n;
        dim3 grid(gx, 1);
        switch (rest) {
#define CASE(R) case R: gemv_k<T, Y, R, VEC><<<grid, WARPS * 32, 0, st>>>(yr, xr, w, n, k); break;
            CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7)
#undef CASE
        }
    }
    return cudaGetLastError();
}

template <typename T>
cudaError_t dispatch_y(cudaStream_t st, int y_f32, int vec_ok, void *y, const void *x,
                       const void *w, int32_t m, int32_t n, int32_t k) {
    const T *xt = (const T *)x, *wt = (const T *)w;
    if (vec_ok) {
        if (y_f32) return launch<T, float, true>(st, (float *)y, xt, wt, m, n, k);
        return launch<T, T, true>(st, (T *)y, xt, wt, m, n, k);
    }
    if (y_f32) return launch<T, float, false>(st, (float *)y, xt, wt, m, n, k);
    return launch<T, T, false>(st, (T *)y, xt, wt, m, n, k);
}

}  // namespace

extern "C" int ck_gemv_ok(ck_dtype_t t, const void *x, const void *w, int32_t m, int32_t k) {
    int v = t == CK_F32 ? 4 : 8;
    return m >= 1 && m <= CK_GEMV_MAX_M && k > 0 && k % v == 0 &&
           ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 16) == 0;
}

extern "C" cudaError_t ck_gemv(cudaStream_t st, ck_dtype_t t, void *y, int y_f32, const void *x,
                               const void *w, int32_t m, int32_t n, int32_t k) {
    if (n <= 0 || m <= 0 || k <= 0) return cudaErrorInvalidValue;
    int v = t == CK_F32 ? 4 : 8;
    /* 16-byte loads when every row start is 16-byte aligned */
    int vec_ok = k % v == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)w % 16) == 0;
    switch (t) {
    case CK_F32: return dispatch_y<float>(st, y_f32, vec_ok, y, x, w, m, n, k);
    case CK_BF16: return dispatch_y<__nv_bfloat16>(st, y_f32, vec_ok, y, x, w, m, n, k);
    case CK_F16: return dispatch_y<__half>(st, y_f32, vec_ok, y, x, w, m, n, k);
    }
    return cudaErrorInvalidValue;
}

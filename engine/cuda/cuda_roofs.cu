/* cuda_roofs: the GPU's own ceilings, measured in the process that is judged against them
 * (`twinserve bench --backend cuda`, through the backend's roofs op): device memory
 * bandwidth and the cuBLAS matrix-product rate of each weight type.
 *
 * Memory:
 *  - ck_roof_read_bw: a kernel reads one large buffer with 16-byte loads (several loads in
 *    flight per thread, every thread of every SM resident) and writes one word per block.
 *    Bytes counted: the bytes read. This is the memory roof `bench` uses: a decode step
 *    only reads (weights and KV cache) and writes almost nothing, so the fraction of
 *    reachable read bandwidth is the figure that says how close decode is to its limit.
 *    A copy's writes cost the HBM bus turnarounds that a read stream does not pay, so a
 *    copy figure (the ~4.3 TB/s cited for the H200) is not what decode can reach.
 *  Buffer: up to 4 GiB (at least 256 MiB, over four times the H200's 60 MB L2, so the
 *  caches do not flatter the figure), smaller when the device has less free memory (the
 *  bench measures after the model is loaded), filled with non-zero data first.
 *
 * GEMM: ck_roof_gemm times cublasGemmEx n x n x n in the layout the backend's matmul uses
 * (y^T = W^T x: op T on the weights, op N on the activations), inputs and output of the
 * weight type, fp32 accumulation (CUBLAS_COMPUTE_32F, default math mode: no TF32 for
 * fp32, as the backend), on its own handle and stream. Inputs are uniform in [-1, 1):
 * tensor-core power, and so the clock the GPU holds, depends on the data, and zeros would
 * flatter the rate.
 *
 * Timing (every roof): the device is synchronised first (the backend's work must not
 * compete), two untimed warm-ups (the first loads cuBLAS's kernels; the second is timed to
 * size a repetition at ~10 ms of back-to-back operations, so event resolution and launch
 * gaps do not matter), then reps repetitions timed with cudaEvents; the result is the best
 * one (the ceiling, not the mean), as engine/roofs.c does on the CPU.
 *
 * Errors: every CUDA and cuBLAS call is checked; a failure returns -1 with a message that
 * names the call ("cudaMalloc: out of memory"; the backend's roofs op says which roof),
 * after freeing what was allocated. C linkage. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/cuda/cuda_elem.cuh"
#include "engine/cuda/cuda_kernels.h"
#include "engine/dummy_weight.h"

#define READ_THREADS 256
#define READ_UNROLL 4
#define FILL_THREADS 256
#define MAX_REPS 1000
#define REP_TARGET_S 0.010       /* one timed repetition: about this long */
#define MAX_INNER 256
static const size_t BUF_MAX = (size_t)4 << 30;
static const size_t BUF_MIN = (size_t)256 << 20;

/* Check a CUDA runtime / cuBLAS call; on failure set err ("call: reason") and jump to
 * done. Expect `err`, `errlen` and a `done` label in scope. */
#define CK(fn, args)                                                                       \
    do {                                                                                   \
        cudaError_t e_ = fn args;                                                          \
        if (e_ != cudaSuccess) {                                                           \
            snprintf(err, errlen, "%s: %s", #fn, cudaGetErrorString(e_));                  \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)

#define CB(fn, args)                                                                       \
    do {                                                                                   \
        cublasStatus_t s_ = fn args;                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            snprintf(err, errlen, "%s: %s", #fn, cublasGetStatusString(s_));               \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)

static __device__ __forceinline__ uint32_t hash32(uint64_t x) {
    return (uint32_t)(dummy_mix64(x) >> 32);
}

/* Non-zero words, different per element, so no compression or zero-skipping can help. */
static __global__ void fill_words(uint32_t *p, size_t n, uint64_t seed) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = hash32(seed * 0x9E3779B97F4A7C15ull + i) | 1u;
}

/* Uniform in [-1, 1) from the top 24 bits of the hash. */
template <typename T> static __global__ void fill_uniform(T *p, size_t n, uint64_t seed) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int32_t r = (int32_t)(hash32(seed * 0x9E3779B97F4A7C15ull + i) >> 8) - 8388608;
        p[i] = from_f<T>((float)r * (1.0f / 8388608.0f));
    }
}

/* Reads p[0 .. n) (16-byte words) once in total: thread t of the grid reads words t,
 * t + stride, ..., READ_UNROLL of them per iteration (independent loads in flight), and
 * XORs them so no load can be dropped. One word per block goes to out[blockIdx.x]. A
 * warp's loads of one iteration are 32 consecutive words: 512 contiguous bytes. */
static __global__ void __launch_bounds__(READ_THREADS)
    read_words(const uint4 *__restrict__ p, size_t n, uint32_t *__restrict__ out) {
    __shared__ uint32_t part[READ_THREADS / 32];
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + (READ_UNROLL - 1) * stride < n; i += READ_UNROLL * stride) {
        uint4 v[READ_UNROLL];
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++) v[u] = __ldcs(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < READ_UNROLL; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        uint4 v = __ldcs(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc ^= __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t x = 0;
        for (int w = 0; w < READ_THREADS / 32; w++) x ^= part[w];
        out[blockIdx.x] = x;
    }
}

/* One operation of a roof, enqueued on st; 0, or -1 with err set. */
typedef int (*roof_op_t)(void *ctx, cudaStream_t st, char *err, size_t errlen);

/* Best seconds per operation: two warm-ups (the second sizes a repetition at about
 * REP_TARGET_S), then reps timed repetitions of `inner` back-to-back operations. */
static int best_time(roof_op_t op, void *ctx, cudaStream_t st, int reps, double *best_s,
                     char *err, size_t errlen) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1, inner = 1;
    float ms = 0;
    double best = 0;
    CK(cudaEventCreate, (&e0));
    CK(cudaEventCreate, (&e1));
    if (op(ctx, st, err, errlen)) goto done;
    CK(cudaStreamSynchronize, (st));
    CK(cudaEventRecord, (e0, st));
    if (op(ctx, st, err, errlen)) goto done;
    CK(cudaEventRecord, (e1, st));
    CK(cudaEventSynchronize, (e1));
    CK(cudaEventElapsedTime, (&ms, e0, e1));
    if (ms > 0) {
        double k = REP_TARGET_S / (ms * 1e-3);
        inner = k < 1 ? 1 : k > MAX_INNER ? MAX_INNER : (int)(k + 0.999);
    }
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord, (e0, st));
        for (int j = 0; j < inner; j++)
            if (op(ctx, st, err, errlen)) goto done;
        CK(cudaEventRecord, (e1, st));
        CK(cudaEventSynchronize, (e1));
        CK(cudaEventElapsedTime, (&ms, e0, e1));
        double s = ms * 1e-3 / inner;
        if (s > 0 && (best == 0 || s < best)) best = s;
    }
    if (best <= 0) {
        snprintf(err, errlen, "the events measured no time");
        goto done;
    }
    *best_s = best;
    rc = 0;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    return rc;
}

/* Bytes of the read buffer: 80% of the free device memory, BUF_MAX at most, a multiple of
 * 1 MiB; 0 with err set when under BUF_MIN. */
static size_t buffer_bytes(char *err, size_t errlen) {
    size_t free_b = 0, total_b = 0, b;
    CK(cudaMemGetInfo, (&free_b, &total_b));
    b = free_b / 5 * 4;
    b = (b < BUF_MAX ? b : BUF_MAX) & ~(((size_t)1 << 20) - 1);
    if (b < BUF_MIN) {
        snprintf(err, errlen, "%.2f GB of device memory free; a buffer of at least %.0f MB "
                 "is needed", free_b / 1e9, BUF_MIN / 1e6);
        return 0;
    }
    return b;
done:
    return 0;
}

static int check_args(int reps, const double *out, char *err, size_t errlen) {
    if (reps < 1 || reps > MAX_REPS || !out) {
        snprintf(err, errlen, "bad arguments (reps %d must be in [1, %d], result %s)", reps,
                 MAX_REPS, out ? "given" : "NULL");
        return -1;
    }
    return 0;
}

static int fill_grid(void) { return 132 * 8; }   /* a full wave on an H200; any size works */

/* ---- read ------------------------------------------------------------------------------ */

typedef struct {
    const uint4 *p;
    size_t words;
    uint32_t *out;
    int grid;
} read_ctx_t;

static int read_op(void *ctx, cudaStream_t st, char *err, size_t errlen) {
    read_ctx_t *c = (read_ctx_t *)ctx;
    read_words<<<c->grid, READ_THREADS, 0, st>>>(c->p, c->words, c->out);
    CK(cudaGetLastError, ());
    return 0;
done:
    return -1;
}

extern "C" int ck_roof_read_bw(int reps, double *bytes_per_s, char *err, size_t errlen) {
    void *a = NULL;
    uint32_t *out = NULL;
    cudaStream_t st = NULL;
    read_ctx_t c;
    int rc = -1, dev = 0, sms = 0, per_sm = 0;
    double s = 0;
    size_t bytes;
    if (check_args(reps, bytes_per_s, err, errlen)) return -1;
    CK(cudaDeviceSynchronize, ());
    CK(cudaGetDevice, (&dev));
    CK(cudaDeviceGetAttribute, (&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor, (&per_sm, read_words, READ_THREADS, 0));
    if (sms < 1 || per_sm < 1) {
        snprintf(err, errlen, "%d SMs, %d blocks per SM", sms, per_sm);
        goto done;
    }
    if (!(bytes = buffer_bytes(err, errlen))) goto done;
    CK(cudaStreamCreateWithFlags, (&st, cudaStreamNonBlocking));
    CK(cudaMalloc, (&a, bytes));
    c.grid = sms * per_sm;
    CK(cudaMalloc, (&out, (size_t)c.grid * sizeof *out));
    fill_words<<<fill_grid(), FILL_THREADS, 0, st>>>((uint32_t *)a, bytes / 4, 3);
    CK(cudaGetLastError, ());
    c.p = (const uint4 *)a;
    c.words = bytes / sizeof(uint4);
    c.out = out;
    if (best_time(read_op, &c, st, reps, &s, err, errlen)) goto done;
    *bytes_per_s = (double)bytes / s;
    rc = 0;
done:
    if (st) cudaStreamSynchronize(st);
    if (a) cudaFree(a);
    if (out) cudaFree(out);
    if (st) cudaStreamDestroy(st);
    return rc;
}

/* ---- GEMM ------------------------------------------------------------------------------ */

typedef struct {
    cublasHandle_t h;
    cudaDataType_t t;
    int n;
    const void *w, *x;
    void *y;
} gemm_ctx_t;

static int gemm_op(void *ctx, cudaStream_t st, char *err, size_t errlen) {
    gemm_ctx_t *c = (gemm_ctx_t *)ctx;
    const float one = 1.0f, zero = 0.0f;
    (void)st;   /* the handle is bound to st */
    CB(cublasGemmEx, (c->h, CUBLAS_OP_T, CUBLAS_OP_N, c->n, c->n, c->n, &one, c->w, c->t,
                      c->n, c->x, c->t, c->n, &zero, c->y, c->t, c->n, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    return 0;
done:
    return -1;
}

extern "C" int ck_roof_gemm(int dtype, int n, int reps, double *flops, char *err,
                            size_t errlen) {
    void *buf[3] = {NULL, NULL, NULL};
    cudaStream_t st = NULL;
    cublasHandle_t h = NULL;
    gemm_ctx_t c;
    int rc = -1;
    double s = 0;
    size_t elems, es;
    if (check_args(reps, flops, err, errlen)) return -1;
    if (dtype < 0 || dtype > 2) {
        snprintf(err, errlen, "bad dtype %d (0 fp32, 1 bf16, 2 fp16)", dtype);
        return -1;
    }
    if (n == 0) n = dtype == 0 ? 4096 : 8192;
    if (n < 16 || n > 32768 || n % 16) {
        snprintf(err, errlen, "bad n %d (a multiple of 16 in [16, 32768])", n);
        return -1;
    }
    es = dtype == 0 ? 4 : 2;
    elems = (size_t)n * n;
    CK(cudaDeviceSynchronize, ());
    CK(cudaStreamCreateWithFlags, (&st, cudaStreamNonBlocking));
    for (int i = 0; i < 3; i++) CK(cudaMalloc, (&buf[i], elems * es));
    for (int i = 0; i < 3; i++) {
        if (dtype == 0)
            fill_uniform<<<fill_grid(), FILL_THREADS, 0, st>>>((float *)buf[i], elems, 11 + i);
        else if (dtype == 1)
            fill_uniform<<<fill_grid(), FILL_THREADS, 0, st>>>((__nv_bfloat16 *)buf[i], elems,
                                                              11 + i);
        else
            fill_uniform<<<fill_grid(), FILL_THREADS, 0, st>>>((__half *)buf[i], elems, 11 + i);
        CK(cudaGetLastError, ());
    }
    CB(cublasCreate, (&h));
    CB(cublasSetStream, (h, st));
    CB(cublasSetMathMode, (h, CUBLAS_DEFAULT_MATH));
    c.h = h;
    c.t = dtype == 0 ? CUDA_R_32F : dtype == 1 ? CUDA_R_16BF : CUDA_R_16F;
    c.n = n;
    c.w = buf[0];
    c.x = buf[1];
    c.y = buf[2];
    if (best_time(gemm_op, &c, st, reps, &s, err, errlen)) goto done;
    *flops = 2.0 * (double)n * (double)n * (double)n / s;
    rc = 0;
done:
    if (st) cudaStreamSynchronize(st);
    if (h) cublasDestroy(h);
    for (int i = 0; i < 3; i++)
        if (buf[i]) cudaFree(buf[i]);
    if (st) cudaStreamDestroy(st);
    return rc;
}

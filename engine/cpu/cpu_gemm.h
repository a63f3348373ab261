/* cpu_gemm: the CPU backend's vectorised kernels: y = x w^T for the few-row products of
 * decode steps (m up to CGEMM_SKINNY_MAX), and attention over one token's context.
 *
 * Why not OpenBLAS here: its sgemm packs the weight matrix on every call, which for a few
 * rows costs more than the product (measured on the 2-core dev machine: 2.8 GB/s of weight
 * reads at m = 32, against 12 GB/s for a plain streaming read). These kernels read each
 * weight row once and reuse it, from L1, for every x row.
 *
 * cgemm_rows computes the output columns [n_lo, n_hi) only, so the caller can split n over
 * threads. x [m][k], w [n][k], y [m][n], all row-major fp32. AVX-512 when the CPU has it
 * (chosen at run time: the build uses no -march flag), a portable kernel otherwise. */
#ifndef TWIN_CPU_GEMM_H
#define TWIN_CPU_GEMM_H

#include <stdint.h>

#define CGEMM_SKINNY_MAX 64

void cgemm_rows(float *y, const float *x, const float *w, int32_t m, int32_t n, int32_t k,
                int32_t n_lo, int32_t n_hi);

/* One token's attention for the g query heads that share a KV head: out[r][hd] =
 * softmax(q[r] . K^T * scale) V over n positions, K and V given as row pointers (their
 * places in the paged pool). scores: scratch of g * n floats. */
void cgemm_attn(float *out, const float *q, int32_t g, int32_t hd, const float *const *krow,
                const float *const *vrow, int32_t n, float scale, float *scores);

/* "avx512" or "portable": the kernel cgemm_rows uses on this CPU. */
const char *cgemm_kernel(void);

#endif

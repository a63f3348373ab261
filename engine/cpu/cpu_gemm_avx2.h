/* cpu_gemm_avx2: cpu_gemm's products for CPUs with AVX2 + FMA (+ F16C) but no AVX-512;
 * cpu_gemm.c chooses them at run time. Same arguments as cgemm_panels / cgemm_qpanels,
 * less the scratch: x is read in place (row i at x + i k); F16/BF16 are converted in
 * registers. Every output is the
 * same in-order FMA chain over k as the AVX-512 kernels', so the floats are theirs.
 * Internal to engine/cpu. */
#ifndef TWIN_CPU_GEMM_AVX2_H
#define TWIN_CPU_GEMM_AVX2_H

#include <stdint.h>

void cgemm_avx2_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                       int32_t k, int32_t p_lo, int32_t p_hi);
void cgemm_avx2_qpanels(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                        int32_t n, int32_t k, int32_t p_lo, int32_t p_hi);

#endif

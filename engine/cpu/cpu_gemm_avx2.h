/* cpu_gemm_avx2: cpu_gemm's products for CPUs with AVX2 + FMA (+ F16C) but no AVX-512;
 * cpu_gemm.c chooses them at run time. Same arguments as cgemm_panels / cgemm_qpanels
 * (wbuf: 16 x 128 floats, 32-byte aligned). Internal to engine/cpu. */
#ifndef TWIN_CPU_GEMM_AVX2_H
#define TWIN_CPU_GEMM_AVX2_H

#include <stdint.h>

void cgemm_avx2_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                       int32_t k, int32_t p_lo, int32_t p_hi);
void cgemm_avx2_qpanels(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                        int32_t n, int32_t k, int32_t p_lo, int32_t p_hi, float *wbuf);

#endif

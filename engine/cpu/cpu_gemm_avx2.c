/* cpu_gemm_avx2: the product kernels for CPUs with AVX2 and FMA but no AVX-512 (chosen at
 * run time by cpu_gemm.c): the same packed panels (cpu_gemm.h) and F16/BF16 matrices
 * (cpu_qgemm.h), a panel's 16 columns as two 8-float vectors.
 *
 * A tile is up to 4 rows of x by one panel: 8 accumulators, each weight vector loaded once
 * for the rows. A stored matrix is dequantised QKC steps at a time into an L1 buffer (the
 * AVX2 dequantisers in cpu_qgemm.c) and multiplied by the same tile, so a stored matrix
 * and its dequantised fp32 copy give the same sums, in the same order. */
#include "engine/cpu/cpu_gemm_avx2.h"

#include <immintrin.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_qgemm.h"

#define PW CGEMM_PANEL
#define QKC 128

#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* rows [m0, m0 + MR_) of x by one panel (columns c0 .. c0 + nc) over steps [k0, k1);
 * w: the panel's step kk at w + (kk - wk0) PW; acc: add to what y holds */
AVX2 __attribute__((always_inline)) static inline void tile(float *y, const float *x,
                                                            const float *w, int32_t wk0,
                                                            int32_t k, int32_t n, int32_t c0,
                                                            int nc, int32_t m0, const int MR_,
                                                            int32_t k0, int32_t k1, int acc) {
    __m256 a[4][2];
    float tmp[PW];
    for (int i = 0; i < MR_; i++) {
        if (acc) {
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, y + (size_t)(m0 + i) * n + c0, (size_t)nc * sizeof(float));
            a[i][0] = _mm256_loadu_ps(tmp);
            a[i][1] = _mm256_loadu_ps(tmp + 8);
        } else {
            a[i][0] = a[i][1] = _mm256_setzero_ps();
        }
    }
    const float *xr[4];
    for (int i = 0; i < MR_; i++) xr[i] = x + (size_t)(m0 + i) * k;
    for (int32_t kk = k0; kk < k1; kk++) {
        const float *wk = w + (size_t)(kk - wk0) * PW;
        __m256 w0 = _mm256_loadu_ps(wk), w1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) {
            __m256 xv = _mm256_broadcast_ss(xr[i] + kk);
            a[i][0] = _mm256_fmadd_ps(xv, w0, a[i][0]);
            a[i][1] = _mm256_fmadd_ps(xv, w1, a[i][1]);
        }
    }
    for (int i = 0; i < MR_; i++) {
        _mm256_storeu_ps(tmp, a[i][0]);
        _mm256_storeu_ps(tmp + 8, a[i][1]);
        memcpy(y + (size_t)(m0 + i) * n + c0, tmp, (size_t)nc * sizeof(float));
    }
}

/* every row of x, 4 at a time, against one panel's steps [k0, k1) */
AVX2 static void rows(float *y, const float *x, const float *w, int32_t wk0, int32_t m,
                      int32_t n, int32_t k, int32_t p, int32_t k0, int32_t k1, int acc) {
    int32_t c0 = p * PW;
    int nc = n - c0 < PW ? n - c0 : PW;
    for (int32_t m0 = 0; m0 < m; m0 += 4) {
        switch (m - m0 < 4 ? m - m0 : 4) {
        case 1: tile(y, x, w, wk0, k, n, c0, nc, m0, 1, k0, k1, acc); break;
        case 2: tile(y, x, w, wk0, k, n, c0, nc, m0, 2, k0, k1, acc); break;
        case 3: tile(y, x, w, wk0, k, n, c0, nc, m0, 3, k0, k1, acc); break;
        default: tile(y, x, w, wk0, k, n, c0, nc, m0, 4, k0, k1, acc); break;
        }
    }
}

void cgemm_avx2_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                       int32_t k, int32_t p_lo, int32_t p_hi) {
    /* in QKC-step chunks as the stored types, so both sum in the same order */
    for (int32_t p = p_lo; p < p_hi; p++)
        for (int32_t k0 = 0; k0 < k; k0 += QKC)
            rows(y, x, wp + (size_t)p * PW * k, 0, m, n, k, p, k0,
                 k - k0 > QKC ? k0 + QKC : k, k0 > 0);
}

void cgemm_avx2_qpanels(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                        int32_t n, int32_t k, int32_t p_lo, int32_t p_hi, float *wbuf) {
    for (int32_t p = p_lo; p < p_hi; p++)
        for (int32_t k0 = 0; k0 < k; k0 += QKC) {
            int32_t k1 = k - k0 > QKC ? k0 + QKC : k;
            cqg_dequant(wbuf, wq, type, k, p, k0, k1, CQG_AVX2);
            if (k1 < k) cqg_prefetch(wq, type, k, p, k1, k - k1 > QKC ? k1 + QKC : k);
            else if (p + 1 < p_hi) cqg_prefetch(wq, type, k, p + 1, 0, k > QKC ? QKC : k);
            rows(y, x, wbuf, k0, m, n, k, p, k0, k1, k0 > 0);
        }
}

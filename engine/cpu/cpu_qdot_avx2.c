/* cpu_qdot_avx2: cqd_panels for AVX2 + FMA + F16C without AVX-512 (cpu_qdot.h). Bit for
 * bit cqd_panels_portable: each (row, column, block) integer sum is exact in int32, so the
 * order the partial sums are added in is free; the floats then follow the header's order,
 * block after block, with dw d rounded to fp32 before the FMA, as the portable's fmaf.
 *
 * A panel's 16 columns are two 8-lane halves; a 32-byte load of one half holds 8 columns
 * by 4 steps (one dword each), so the 4 activation bytes of those steps, broadcast, meet
 * their weights in vpmaddubsw (unsigned by signed bytes, pairs summed into int16) and
 * vpmaddwd with ones sums each column's pair of pairs into int32.
 *   Q8_0: u = w + 128 is stored; u ^ 0x80 is the signed w, and maddubs(|w|, sign(q, w))
 *     is w q per pair without saturating (|w| <= 128, |q| <= 127: a pair <= 32512), so
 *     the int32 sums are sum w q itself.
 *   Q4_0: nibbles u in 0..15 by q: a pair is at most 2 15 127 = 3810, so the block's 8
 *     maddubs (4 dwords, low and high nibbles) add in int16 (at most 30480) before the
 *     one widening madd; isum = sum u q - 8 s.
 * Register blocking: a tile is R rows by one or both halves, so each weight vector is
 * loaded (and, for Q8_0, made absolute) once for R rows (panels() says which tiles). The
 * dword loops unroll by 2 only: unrolled fully, GCC hoisted the loads and spilled ymm
 * registers, and Q8_0 ran at two thirds of the speed.
 * One thread, 1536x576 in cache, Zen 5 (the kernel forced), noisy shared VM: batch 1
 * Q8_0 61-67 G weights/s, Q4_0 102-106; batch 32 Q8_0 79-85 G weight-rows/s, Q4_0
 * 119-128; the portable kernel 1.0-1.1 for both. */
#include "engine/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"

#define PW CGEMM_PANEL
#define QK CQD_BLOCK
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE __attribute__((always_inline)) static inline

/* The first tile over a panel prefetches the weights this many bytes ahead, across panel
 * ends (a prefetch never faults). One thread, batch 1, 8192x8192 from memory, noisy shared
 * VM: Q8_0 31 -> 36-45 G weights/s, Q4_0 56 -> 87-92 (4 blocks ahead was slower than
 * none, 8 KiB between). */
#define PF_DIST 16384

/* the 4 activation bytes at p in every dword */
AVX2 INLINE __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* One tile: rows 0..R_-1 of the activations (q [.][k], d and s [.][nb] at the tile's first
 * row), output columns of halves H0_ .. H0_ + NH_ - 1 of the panel at w (nb blocks of bb
 * bytes), into y (row stride n) at the panel's first column, ncol of its columns valid.
 * Q8_ a constant at each call site, so the block loop has no type test. */
AVX2 INLINE void tile(float *y, int32_t n, const int8_t *q, const float *d, const int32_t *s,
                      int32_t k, int32_t nb, const uint8_t *w, size_t bb, int ncol, int pf,
                      const int Q8_, const int R_, const int H0_, const int NH_) {
    const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0f);
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256 acc[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < R_; r++)
#pragma GCC unroll 2
        for (int h = 0; h < NH_; h++) acc[r][h] = _mm256_setzero_ps();
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t *blk = w + (size_t)b * bb;
        if (pf)
            for (size_t o = 0; o < bb; o += 64)
                _mm_prefetch((const char *)blk + PF_DIST + o, _MM_HINT_T0);
        const uint8_t *wb = blk + PW * 2 + 32 * H0_;
        const int8_t *qb = q + (size_t)b * QK;
        __m256i isum[4][2];
        if (Q8_) {
#pragma GCC unroll 4
            for (int r = 0; r < R_; r++)
#pragma GCC unroll 2
                for (int h = 0; h < NH_; h++) isum[r][h] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int g = 0; g < 8; g++) {
                __m256i wv[2], aw[2];
#pragma GCC unroll 2
                for (int h = 0; h < NH_; h++) {
                    wv[h] = _mm256_xor_si256(
                        _mm256_loadu_si256((const __m256i *)(wb + 64 * g + 32 * h)), flip);
                    aw[h] = _mm256_abs_epi8(wv[h]);
                }
#pragma GCC unroll 4
                for (int r = 0; r < R_; r++) {
                    __m256i qv = bcast4(qb + (size_t)r * k + 4 * g);
#pragma GCC unroll 2
                    for (int h = 0; h < NH_; h++) {
                        __m256i p = _mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(qv, wv[h]));
                        isum[r][h] = _mm256_add_epi32(isum[r][h], _mm256_madd_epi16(p, ones));
                    }
                }
            }
        } else {
            __m256i s16[4][2];
#pragma GCC unroll 4
            for (int r = 0; r < R_; r++)
#pragma GCC unroll 2
                for (int h = 0; h < NH_; h++) s16[r][h] = _mm256_setzero_si256();
#pragma GCC unroll 2
            for (int v = 0; v < 4; v++) {
                __m256i lo[2], hi[2];
#pragma GCC unroll 2
                for (int h = 0; h < NH_; h++) {
                    __m256i raw = _mm256_loadu_si256((const __m256i *)(wb + 64 * v + 32 * h));
                    lo[h] = _mm256_and_si256(raw, m4);
                    hi[h] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
                }
#pragma GCC unroll 4
                for (int r = 0; r < R_; r++) {
                    __m256i ql = bcast4(qb + (size_t)r * k + 4 * v);
                    __m256i qh = bcast4(qb + (size_t)r * k + 16 + 4 * v);
#pragma GCC unroll 2
                    for (int h = 0; h < NH_; h++)
                        s16[r][h] = _mm256_add_epi16(
                            s16[r][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo[h], ql),
                                                        _mm256_maddubs_epi16(hi[h], qh)));
                }
            }
#pragma GCC unroll 4
            for (int r = 0; r < R_; r++) {
                __m256i o = _mm256_set1_epi32(8 * s[(size_t)r * nb + b]);
#pragma GCC unroll 2
                for (int h = 0; h < NH_; h++)
                    isum[r][h] = _mm256_sub_epi32(_mm256_madd_epi16(s16[r][h], ones), o);
            }
        }
        __m256 dw[2];
#pragma GCC unroll 2
        for (int h = 0; h < NH_; h++)
            dw[h] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * (H0_ + h))));
#pragma GCC unroll 4
        for (int r = 0; r < R_; r++) {
            __m256 dr = _mm256_broadcast_ss(d + (size_t)r * nb + b);
#pragma GCC unroll 2
            for (int h = 0; h < NH_; h++)
                acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h]),
                                            _mm256_mul_ps(dw[h], dr), acc[r][h]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < NH_; h++) {
        int c0 = 8 * (H0_ + h), left = ncol - c0;
        if (left >= 8) {
#pragma GCC unroll 4
            for (int r = 0; r < R_; r++) _mm256_storeu_ps(y + (size_t)r * n + c0, acc[r][h]);
        } else if (left > 0) {
            __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(left),
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
            for (int r = 0; r < R_; r++)
                _mm256_maskstore_ps(y + (size_t)r * n + c0, mask, acc[r][h]);
        }
    }
}

/* one type's panels [p_lo, p_hi). Q4_0: rows in pairs over both halves. Q8_0: 1 or 2 rows
 * over both halves, more in tiles of 4 rows (then 1-3) over one half at a time, since each
 * row's 4 operations per dword leave fewer registers for rows (measured: Q4_0 pairs ~8%
 * faster than 4 rows of one half, Q8_0 ~4% slower). */
AVX2 INLINE void panels(float *y, const cqd_act_t *a, const uint8_t *wq, int32_t n,
                        int32_t p_lo, int32_t p_hi, const int Q8_) {
    int32_t k = a->k, nb = k / QK, m = a->m;
    size_t bb = Q8_ ? PW * 2 + QK * PW : PW * 2 + QK * PW / 2;
    for (int32_t p = p_lo; p < p_hi; p++) {
        const uint8_t *w = wq + (size_t)p * nb * bb;
        int ncol = n - p * PW < PW ? n - p * PW : PW;
        float *yp = y + (size_t)p * PW;
        /* the weights are prefetched by the panel's first tile only */
#define TILE(R, H0, NH, PF)                                                                   \
    tile(yp + (size_t)r * n, n, a->q + (size_t)r * k, a->d + (size_t)r * nb,                   \
         a->s + (size_t)r * nb, k, nb, w, bb, ncol, PF, Q8_, R, H0, NH)
        if (!Q8_ || m <= 2) {
            for (int32_t r = 0; r < m; r += 2) {
                int pf = r == 0;
                if (ncol > 8) {
                    if (m - r >= 2) TILE(2, 0, 2, pf);
                    else TILE(1, 0, 2, pf);
                } else {
                    if (m - r >= 2) TILE(2, 0, 1, pf);
                    else TILE(1, 0, 1, pf);
                }
            }
            continue;
        }
        for (int h = 0; h < 2 && 8 * h < ncol; h++) {
            int32_t r = 0;
            for (; r + 4 <= m; r += 4) {
                if (h == 0) TILE(4, 0, 1, r == 0);
                else TILE(4, 1, 1, 0);
            }
            switch (m - r) {
            case 1: if (h == 0) TILE(1, 0, 1, 0); else TILE(1, 1, 1, 0); break;
            case 2: if (h == 0) TILE(2, 0, 1, 0); else TILE(2, 1, 1, 0); break;
            case 3: if (h == 0) TILE(3, 0, 1, 0); else TILE(3, 1, 1, 0); break;
            default: break;
            }
        }
#undef TILE
    }
}

AVX2 void cqd_panels_avx2(float *y, const cqd_act_t *a, const void *wq, uint32_t type, int32_t n,
                          int32_t p_lo, int32_t p_hi) {
    if (type == DQ_Q8_0) panels(y, a, wq, n, p_lo, p_hi, 1);
    else panels(y, a, wq, n, p_lo, p_hi, 0);
}

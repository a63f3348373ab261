/* cpu_qgemm: see cpu_qgemm.h. Dequantising a run of steps writes 16 floats per step, the
 * packed fp32 layout, into a buffer the product then reads from L1: the stored bytes
 * stream from memory once, and the register-blocked fp32 tile (cpu_gemm.c) serves every
 * type. */
#include "engine/cpu/cpu_qgemm.h"

#include <immintrin.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"

#define PW CGEMM_PANEL
#define QK 32                  /* steps per block of the block types */

int cqg_supported(uint32_t type) {
    return type == DQ_F16 || type == DQ_BF16 || type == DQ_Q8_0 || type == DQ_Q4_0;
}

/* bytes of one panel of k steps */
static size_t panel_bytes(uint32_t type, int32_t k) {
    switch (type) {
    case DQ_F16:
    case DQ_BF16: return (size_t)k * PW * 2;
    case DQ_Q8_0: return (size_t)(k / QK) * (PW * 2 + QK * PW);
    case DQ_Q4_0: return (size_t)(k / QK) * (PW * 2 + QK * PW / 2);
    default: return 0;
    }
}

size_t cqg_elems(uint32_t type, int32_t n, int32_t k) {
    if (!cqg_supported(type) || n <= 0 || k <= 0) return 0;
    if ((type == DQ_Q8_0 || type == DQ_Q4_0) && k % QK != 0) return 0;
    return (size_t)((n + PW - 1) / PW) * panel_bytes(type, k) / 4;
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

void cqg_pack(void *dst, const void *src, uint32_t type, int32_t n, int32_t k) {
    const uint8_t *s = src;
    size_t pb = panel_bytes(type, k);
    int32_t panels = (n + PW - 1) / PW;
    memset(dst, 0, (size_t)panels * pb);
    for (int32_t r = 0; r < n; r++) {
        uint8_t *d = (uint8_t *)dst + (size_t)(r / PW) * pb;
        int c = r % PW;
        if (type == DQ_F16 || type == DQ_BF16) {
            const uint8_t *row = s + (size_t)r * k * 2;
            for (int32_t kk = 0; kk < k; kk++) memcpy(d + ((size_t)kk * PW + c) * 2, row + 2 * kk, 2);
        } else if (type == DQ_Q8_0) {
            const uint8_t *row = s + (size_t)r * (k / QK) * 34;
            for (int32_t b = 0; b < k / QK; b++, row += 34, d += PW * 2 + QK * PW) {
                memcpy(d + 2 * c, row, 2);
                for (int j = 0; j < QK; j++) d[PW * 2 + j * PW + c] = row[2 + j];
            }
        } else {
            const uint8_t *row = s + (size_t)r * (k / QK) * 18;
            for (int32_t b = 0; b < k / QK; b++, row += 18, d += PW * 2 + QK * PW / 2) {
                memcpy(d + 2 * c, row, 2);
                for (int j = 0; j < QK / 2; j++) d[PW * 2 + j * PW + c] = row[2 + j];
            }
        }
    }
}

static void dequant_portable(float *dst, const uint8_t *w, uint32_t type, int32_t k0,
                             int32_t k1) {
    for (int32_t kk = k0; kk < k1; kk++, dst += PW) {
        int32_t b = kk / QK, j = kk % QK;
        for (int r = 0; r < PW; r++) {
            switch (type) {
            case DQ_F16: dst[r] = dq_f16_to_f32(rd16(w + ((size_t)kk * PW + r) * 2)); break;
            case DQ_BF16: dst[r] = dq_bf16_to_f32(rd16(w + ((size_t)kk * PW + r) * 2)); break;
            case DQ_Q8_0: {
                const uint8_t *blk = w + (size_t)b * (PW * 2 + QK * PW);
                dst[r] = dq_f16_to_f32(rd16(blk + 2 * r)) * (float)(int8_t)blk[PW * 2 + j * PW + r];
                break;
            }
            default: {
                const uint8_t *blk = w + (size_t)b * (PW * 2 + QK * PW / 2);
                uint8_t q = blk[PW * 2 + (j % 16) * PW + r];
                int v = (j < 16 ? q & 0x0f : q >> 4) - 8;
                dst[r] = dq_f16_to_f32(rd16(blk + 2 * r)) * (float)v;
                break;
            }
            }
        }
    }
}

#define AVX512 __attribute__((target("avx512f,fma")))

AVX512 static void dequant_avx512(float *dst, const uint8_t *w, uint32_t type, int32_t k0,
                                  int32_t k1) {
    if (type == DQ_F16 || type == DQ_BF16) {
        const uint8_t *s = w + (size_t)k0 * PW * 2;
        for (int32_t kk = k0; kk < k1; kk++, s += PW * 2, dst += PW) {
            __m256i h = _mm256_loadu_si256((const __m256i *)s);
            __m512 v = type == DQ_F16
                           ? _mm512_cvtph_ps(h)
                           : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            _mm512_store_ps(dst, v);
        }
        return;
    }
    size_t bb = type == DQ_Q8_0 ? PW * 2 + QK * PW : PW * 2 + QK * PW / 2;
    const uint8_t *blk = w + (size_t)(k0 / QK) * bb;
    for (int32_t kk = k0; kk < k1; kk += QK, blk += bb, dst += QK * PW) {
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
        const uint8_t *q = blk + PW * 2;
        if (type == DQ_Q8_0) {
#pragma GCC unroll 8
            for (int j = 0; j < QK; j++) {
                __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j * PW)));
                _mm512_store_ps(dst + j * PW, _mm512_mul_ps(_mm512_cvtepi32_ps(v), d));
            }
        } else {
            const __m512i lo4 = _mm512_set1_epi32(0x0f), eight = _mm512_set1_epi32(8);
#pragma GCC unroll 8
            for (int j = 0; j < QK / 2; j++) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + j * PW)));
                __m512i a = _mm512_sub_epi32(_mm512_and_si512(v, lo4), eight);
                __m512i b = _mm512_sub_epi32(_mm512_srli_epi32(v, 4), eight);
                _mm512_store_ps(dst + j * PW, _mm512_mul_ps(_mm512_cvtepi32_ps(a), d));
                _mm512_store_ps(dst + (j + 16) * PW, _mm512_mul_ps(_mm512_cvtepi32_ps(b), d));
            }
        }
    }
}

/* ---- few rows: dequantise in registers ------------------------------------------------
 * For up to 4 rows the product is bound by the dequantisation, and writing the dequantised
 * steps to L1 and reading them back (a 64-byte store and load per 16 weights) was the
 * limit: Q8_0 ran at about 22 G weights/s per core in cache, the fp32 kernel at 25-30.
 * Here each weight vector is made in a register (x = d q for the block types, exactly
 * dq_convert's product) and fed straight to the FMAs, step after step, so every output
 * still sums the same values in the same order as the fp32 kernel: the results are bit
 * for bit the same (test_cpu_qgemm). */

/* one step's weight vector of a panel; blk: the step's block (block types), j: the step
 * in it (Q4_0: 0..31, the nibble chosen by j / 16); nd8: -8 d (Q4_0).
 * Q4_0's d (q - 8) is made as one FMA, q d + (-8 d): q d is exact and so is the sum (it is
 * d (q - 8), which a float holds), so the FMA's one rounding changes nothing. Only the sign
 * of a zero weight can differ (+0 for -0 when d < 0), which no sum sees: accumulators start
 * at +0 and adding a zero of either sign to +0 gives +0. One operation fewer per vector
 * than and/shift, subtract, convert, multiply. */
AVX512 __attribute__((always_inline)) static inline __m512 wvec(const uint8_t *w, uint32_t type,
                                                                 int32_t kk, const uint8_t *blk,
                                                                 int j, __m512 d, __m512 nd8) {
    if (type == DQ_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + (size_t)kk * PW * 2)));
    if (type == DQ_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + (size_t)kk * PW * 2))), 16));
    const uint8_t *q = blk + PW * 2;
    __m512i v;
    if (type == DQ_Q8_0) {
        v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j * PW)));
    } else {
        v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + (j % 16) * PW)));
        v = j < 16 ? _mm512_and_si512(v, _mm512_set1_epi32(0x0f)) : _mm512_srli_epi32(v, 4);
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), d, nd8);
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), d);
}

/* rows 0..MR_ of x [MR_][k] by panels p0 .. p0 + NV_, for one type (TYPE_ a constant at
 * every call site, so the step loop has no type tests; block types loop per block).
 * Prefetching runs four blocks ahead in each panel and, near a panel's end, into the
 * panel that slot takes next (p0 + NV_ + j, when below p_hi): a 576-input panel is only
 * 18 blocks, and without it the first four of every group came cold. */
AVX512 __attribute__((always_inline)) static inline void fused_tile(
    float *y, const float *x, const uint8_t *wq, const uint32_t TYPE_, int32_t n, int32_t k,
    int32_t p0, int32_t p_hi, const int MR_, const int NV_) {
    size_t pb = panel_bytes(TYPE_, k), bb = panel_bytes(TYPE_, QK);
    const uint8_t *w[4];
    __m512 acc[4][4], d[4] = {0}, nd8[4] = {0};
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) w[j] = wq + (size_t)(p0 + j) * pb;
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++) acc[i][j] = _mm512_setzero_ps();
/* one step: the NV_ weight vectors, then MR_ x NV_ FMAs */
#define FSTEP(kk, BLK, JB)                                                                \
    do {                                                                                  \
        __m512 wv[4];                                                                     \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV_; j++)                             \
            wv[j] = wvec(w[j], TYPE_, (kk), (BLK)[j], (JB), d[j], nd8[j]);                \
        _Pragma("GCC unroll 4") for (int i = 0; i < MR_; i++) {                           \
            __m512 xv = _mm512_set1_ps(x[(size_t)i * k + (kk)]);                          \
            _Pragma("GCC unroll 4") for (int j = 0; j < NV_; j++)                         \
                acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);                        \
        }                                                                                 \
    } while (0)
    if (TYPE_ == DQ_Q8_0 || TYPE_ == DQ_Q4_0) {
        int32_t nb = k / QK;
        for (int32_t b = 0; b < nb; b++) {
            const uint8_t *blk[4];
#pragma GCC unroll 4
            for (int j = 0; j < NV_; j++) {
                blk[j] = w[j] + (size_t)b * bb;
                d[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk[j]));
                nd8[j] = _mm512_mul_ps(d[j], _mm512_set1_ps(-8.0f));
                const uint8_t *pf = b + 4 < nb ? blk[j] + 4 * bb
                                    : p0 + NV_ + j < p_hi
                                        ? w[j] + (size_t)NV_ * pb + (size_t)(b + 4 - nb) * bb
                                        : NULL;
                if (pf)
                    for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
            }
            /* two loops, so that each step's half of the byte (Q4_0) is known at compile
             * time: one loop of 32 kept a test and the index arithmetic per step */
#pragma GCC unroll 16
            for (int jb = 0; jb < QK / 2; jb++) FSTEP(b * QK + jb, blk, jb);
#pragma GCC unroll 16
            for (int jb = QK / 2; jb < QK; jb++) FSTEP(b * QK + jb, blk, jb);
        }
    } else {
        const uint8_t *none[4] = {0};
        for (int32_t kk = 0; kk < k; kk++) {
            if (kk % 2 == 0)
#pragma GCC unroll 4
                for (int j = 0; j < NV_; j++)
                    _mm_prefetch((const char *)w[j] + (size_t)(kk + 64) * PW * 2, _MM_HINT_T0);
            FSTEP(kk, none, 0);
        }
    }
#undef FSTEP
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) {
        int32_t c0 = (p0 + j) * PW;
        __mmask16 mask = n - c0 >= PW ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - c0)) - 1);
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) _mm512_mask_storeu_ps(y + (size_t)i * n + c0, mask, acc[i][j]);
    }
}

/* one type's tiles over panels [p_lo, p_hi): four panels at a time, then one */
AVX512 __attribute__((always_inline)) static inline void fused_type(
    float *y, const float *x, const uint8_t *wq, const uint32_t TYPE_, int32_t m, int32_t n,
    int32_t k, int32_t p_lo, int32_t p_hi) {
    for (int32_t p0 = p_lo; p0 < p_hi;) {
        int g = p_hi - p0 >= 4 ? 4 : 1;
#define FT(MR, NV) fused_tile(y, x, wq, TYPE_, n, k, p0, p_hi, MR, NV)
        if (g == 4) {
            switch (m) { case 1: FT(1, 4); break; case 2: FT(2, 4); break;
                         case 3: FT(3, 4); break; default: FT(4, 4); break; }
        } else {
            switch (m) { case 1: FT(1, 1); break; case 2: FT(2, 1); break;
                         case 3: FT(3, 1); break; default: FT(4, 1); break; }
        }
#undef FT
        p0 += g;
    }
}

AVX512 void cqg_fused_avx512(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                             int32_t n, int32_t k, int32_t p_lo, int32_t p_hi) {
    switch (type) {
    case DQ_Q8_0: fused_type(y, x, wq, DQ_Q8_0, m, n, k, p_lo, p_hi); break;
    case DQ_Q4_0: fused_type(y, x, wq, DQ_Q4_0, m, n, k, p_lo, p_hi); break;
    case DQ_F16: fused_type(y, x, wq, DQ_F16, m, n, k, p_lo, p_hi); break;
    default: fused_type(y, x, wq, DQ_BF16, m, n, k, p_lo, p_hi); break;
    }
}

#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* As dequant_avx512, a panel step as two 8-float halves. */
AVX2 static void dequant_avx2(float *dst, const uint8_t *w, uint32_t type, int32_t k0,
                              int32_t k1) {
    if (type == DQ_F16 || type == DQ_BF16) {
        const uint8_t *s = w + (size_t)k0 * PW * 2;
        for (int32_t kk = k0; kk < k1; kk++, s += PW * 2, dst += PW) {
            for (int h = 0; h < 2; h++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(s + 16 * h));
                __m256 f = type == DQ_F16
                               ? _mm256_cvtph_ps(v)
                               : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
                _mm256_store_ps(dst + 8 * h, f);
            }
        }
        return;
    }
    size_t bb = type == DQ_Q8_0 ? PW * 2 + QK * PW : PW * 2 + QK * PW / 2;
    const uint8_t *blk = w + (size_t)(k0 / QK) * bb;
    const __m256i lo4 = _mm256_set1_epi32(0x0f), eight = _mm256_set1_epi32(8);
    for (int32_t kk = k0; kk < k1; kk += QK, blk += bb, dst += QK * PW) {
        __m256 d[2] = {_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)),
                       _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16)))};
        const uint8_t *q = blk + PW * 2;
        for (int j = 0; j < (type == DQ_Q8_0 ? QK : QK / 2); j++)
            for (int h = 0; h < 2; h++) {
                __m128i b = _mm_loadl_epi64((const __m128i *)(q + j * PW + 8 * h));
                if (type == DQ_Q8_0) {
                    __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
                    _mm256_store_ps(dst + j * PW + 8 * h, _mm256_mul_ps(f, d[h]));
                } else {
                    __m256i v = _mm256_cvtepu8_epi32(b);
                    __m256i a = _mm256_sub_epi32(_mm256_and_si256(v, lo4), eight);
                    __m256i c = _mm256_sub_epi32(_mm256_srli_epi32(v, 4), eight);
                    _mm256_store_ps(dst + j * PW + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(a), d[h]));
                    _mm256_store_ps(dst + (j + 16) * PW + 8 * h,
                                    _mm256_mul_ps(_mm256_cvtepi32_ps(c), d[h]));
                }
            }
    }
}

void cqg_dequant(float *dst, const void *wq, uint32_t type, int32_t k, int32_t p, int32_t k0,
                 int32_t k1, int level) {
    const uint8_t *w = (const uint8_t *)wq + (size_t)p * panel_bytes(type, k);
    if (level == CQG_AVX512) dequant_avx512(dst, w, type, k0, k1);
    else if (level == CQG_AVX2) dequant_avx2(dst, w, type, k0, k1);
    else dequant_portable(dst, w, type, k0, k1);
}

/* bytes of steps [k0, k1) of a panel, and their offset in it (k0, k1 on blocks, or k) */
static size_t steps_bytes(uint32_t type, int32_t k0, int32_t k1, size_t *off) {
    size_t a, b;
    if (type == DQ_F16 || type == DQ_BF16) {
        a = (size_t)k0 * PW * 2;
        b = (size_t)k1 * PW * 2;
    } else {
        size_t bb = panel_bytes(type, QK);
        a = (size_t)(k0 / QK) * bb;
        b = (size_t)((k1 + QK - 1) / QK) * bb;
    }
    *off = a;
    return b - a;
}

void cqg_prefetch(const void *wq, uint32_t type, int32_t k, int32_t p, int32_t k0, int32_t k1) {
    size_t off, n = steps_bytes(type, k0, k1, &off);
    const char *s = (const char *)wq + (size_t)p * panel_bytes(type, k) + off;
    for (size_t o = 0; o < n; o += 64) _mm_prefetch(s + o, _MM_HINT_T0);
}

void cqg_unpack_row(float *dst, const void *wq, uint32_t type, int32_t k, int32_t r) {
    float step[PW];
    const uint8_t *w = (const uint8_t *)wq + (size_t)(r / PW) * panel_bytes(type, k);
    for (int32_t kk = 0; kk < k; kk++) {
        dequant_portable(step, w, type, kk, kk + 1);
        dst[kk] = step[r % PW];
    }
}

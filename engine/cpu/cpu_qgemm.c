/* cpu_qgemm: see cpu_qgemm.h. */
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
                for (int j = 0; j < QK; j++)
                    d[PW * 2 + 64 * (j / 4) + 4 * c + j % 4] = (uint8_t)(row[2 + j] ^ 0x80);
            }
        } else {
            const uint8_t *row = s + (size_t)r * (k / QK) * 18;
            for (int32_t b = 0; b < k / QK; b++, row += 18, d += PW * 2 + QK * PW / 2) {
                memcpy(d + 2 * c, row, 2);
                /* ggml's byte j holds steps j and j + 16, as ours does */
                for (int j = 0; j < QK / 2; j++) d[PW * 2 + 64 * (j / 4) + 4 * c + j % 4] = row[2 + j];
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
                int v = blk[PW * 2 + 64 * (j / 4) + 4 * r + j % 4] - 128;
                dst[r] = dq_f16_to_f32(rd16(blk + 2 * r)) * (float)v;
                break;
            }
            default: {
                const uint8_t *blk = w + (size_t)b * (PW * 2 + QK * PW / 2);
                uint8_t q = blk[PW * 2 + 64 * ((j % 16) / 4) + 4 * r + j % 4];
                int v = (j < 16 ? q & 0x0f : q >> 4) - 8;
                dst[r] = dq_f16_to_f32(rd16(blk + 2 * r)) * (float)v;
                break;
            }
            }
        }
    }
}

#define AVX512 __attribute__((target("avx512f,fma")))

/* ---- AVX-512: convert in registers ---------------------------------------------------
 * Each weight vector is made in a register and fed straight to the FMAs of a row block,
 * step after step, so every output sums the same values in the same order as the fp32
 * kernel: the results are bit for bit the same (test_cpu_qgemm). The first version
 * converted runs of steps into an L1 buffer that the fp32 tile then read; the 64-byte
 * store and load per 16 weights were the limit: in cache, at 8 rows it ran at 63% of the
 * fp32 kernel's rate and at 32 rows at 93%, where this runs at 100-106% (one conversion
 * per 6-12 FMAs, which on this Zen 5 costs no FMA throughput). */

/* one step's 16 weights of a panel */
AVX512 __attribute__((always_inline)) static inline __m512 wvec(const uint8_t *w, uint32_t type,
                                                                 int32_t kk) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(w + (size_t)kk * PW * 2));
    if (type == DQ_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows 0..MR_ of a row block xb (packed k-major: row i of step kk at kk MR_ + i) by
 * panels p0 .. p0 + NV_, over steps [k0, k1): from zero where k0 = 0, else adding to what
 * y holds. One type per instance (TYPE_ a constant at every call site, so the step loop
 * has no type tests); prefetches 128 steps (16 KB over four panels) ahead: one row, one
 * thread, 4096 x 4096 F16, 45 GFLOP/s with 64 steps, 50-52 with 128, 38-42 with 256 or
 * 512. */
AVX512 __attribute__((always_inline)) static inline void fused_tile(
    float *y, const float *xb, const uint8_t *wq, const uint32_t TYPE_, int32_t n, int32_t k,
    int32_t p0, int32_t k0, int32_t k1, const int MR_, const int NV_) {
    size_t pb = panel_bytes(TYPE_, k);
    const uint8_t *w[4];
    __m512 acc[CQG_ROWS_MAX][4];
    __mmask16 mask[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) {
        int32_t c0 = (p0 + j) * PW;
        w[j] = wq + (size_t)(p0 + j) * pb;
        mask[j] = cgemm_tail16(n - c0);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++)
            acc[i][j] = k0 ? _mm512_maskz_loadu_ps(mask[j], y + (size_t)i * n + (p0 + j) * PW)
                           : _mm512_setzero_ps();
    for (int32_t kk = k0; kk < k1; kk++) {
        __m512 wv[4];
        if (kk % 2 == 0)
#pragma GCC unroll 4
            for (int j = 0; j < NV_; j++)
                _mm_prefetch((const char *)w[j] + (size_t)(kk + 128) * PW * 2, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++) {
            wv[j] = wvec(w[j], TYPE_, kk);
            __asm__("" : "+v"(wv[j]));   /* one conversion per step, not one per FMA */
        }
#pragma GCC unroll 16
        for (int i = 0; i < MR_; i++) {
            __m512 xv = _mm512_set1_ps(xb[(size_t)kk * MR_ + i]);
#pragma GCC unroll 4
            for (int j = 0; j < NV_; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++)
#pragma GCC unroll 16
        for (int i = 0; i < MR_; i++)
            _mm512_mask_storeu_ps(y + (size_t)i * n + (p0 + j) * PW, mask[j], acc[i][j]);
}

/* mr rows (1..12; 1..6 with four panels) against nv panels (1, 2 or 4) */
AVX512 __attribute__((always_inline)) static inline void fused_block(
    float *y, const float *xb, const uint8_t *wq, const uint32_t TYPE_, int32_t n, int32_t k,
    int32_t p0, int32_t k0, int32_t k1, int32_t mr, int nv) {
#define FT(MR, NV) fused_tile(y, xb, wq, TYPE_, n, k, p0, k0, k1, MR, NV)
#define FT_LO(NV)                                                                       \
    case 1: FT(1, NV); break; case 2: FT(2, NV); break; case 3: FT(3, NV); break;       \
    case 4: FT(4, NV); break; case 5: FT(5, NV); break; case 6: FT(6, NV); break
#define FT_HI(NV)                                                                       \
    case 7: FT(7, NV); break; case 8: FT(8, NV); break; case 9: FT(9, NV); break;       \
    case 10: FT(10, NV); break; case 11: FT(11, NV); break; default: FT(12, NV); break
    if (nv == 4) {
        switch (mr) { FT_LO(4); default: break; }
    } else if (nv == 2) {
        switch (mr) { FT_LO(2); FT_HI(2); }
    } else {
        switch (mr) { FT_LO(1); FT_HI(1); }
    }
#undef FT_HI
#undef FT_LO
#undef FT
}

/* One type's product over panels [p_lo, p_hi), a group of panels at a time (four up to 6
 * rows, else two: at most 24 accumulators). With several row blocks, k runs in chunks of
 * 128 steps, every block over a chunk before the next, so the chunk's stored bytes come
 * from memory once and then from L1. */
AVX512 __attribute__((always_inline)) static inline void fused_type(
    float *y, const float *xp, const uint8_t *wq, const uint32_t TYPE_, int32_t m, int32_t n,
    int32_t k, int32_t p_lo, int32_t p_hi) {
    int32_t blocks = (m + CQG_ROWS_MAX - 1) / CQG_ROWS_MAX, kc = blocks == 1 ? k : 128;
    int nv = m <= 6 ? 4 : 2;
    for (int32_t p0 = p_lo; p0 < p_hi;) {
        int g = p_hi - p0 >= nv ? nv : 1;
        for (int32_t k0 = 0; k0 < k; k0 += kc) {
            int32_t k1 = k - k0 > kc ? k0 + kc : k;
            for (int32_t bi = 0, m0 = 0; bi < blocks; bi++) {
                int32_t m1 = (int32_t)((int64_t)m * (bi + 1) / blocks);
                fused_block(y + (size_t)m0 * n, xp + (size_t)m0 * k, wq, TYPE_, n, k, p0, k0,
                            k1, m1 - m0, g);
                m0 = m1;
            }
        }
        p0 += g;
    }
}

AVX512 void cqg_panels_avx512(float *y, const float *xp, const void *wq, uint32_t type,
                              int32_t m, int32_t n, int32_t k, int32_t p_lo, int32_t p_hi) {
    if (type == DQ_F16) fused_type(y, xp, wq, DQ_F16, m, n, k, p_lo, p_hi);
    else fused_type(y, xp, wq, DQ_BF16, m, n, k, p_lo, p_hi);
}

void cqg_dequant(float *dst, const void *wq, uint32_t type, int32_t k, int32_t p, int32_t k0,
                 int32_t k1) {
    dequant_portable(dst, (const uint8_t *)wq + (size_t)p * panel_bytes(type, k), type, k0, k1);
}

void cqg_unpack_row(float *dst, const void *wq, uint32_t type, int32_t k, int32_t r) {
    float step[PW];
    const uint8_t *w = (const uint8_t *)wq + (size_t)(r / PW) * panel_bytes(type, k);
    for (int32_t kk = 0; kk < k; kk++) {
        dequant_portable(step, w, type, kk, kk + 1);
        dst[kk] = step[r % PW];
    }
}

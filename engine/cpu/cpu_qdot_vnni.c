/* cpu_qdot_vnni: cqd_panels for AVX-512 with VNNI (cpu_qdot.h). A block's 32 steps of a
 * panel are 8 vectors of 16 columns x 4 steps (Q8_0; Q4_0: 4 vectors, each giving two by
 * its nibbles), and vpdpbusd adds each column's 4 products of unsigned weights by the
 * row's 4 signed activations (broadcast from memory) into an int32 lane: 64
 * multiply-adds an instruction, where the fp32 kernel converts, scales and multiplies
 * every weight. The accumulator starts at -o s (the offset of the unsigned weights times
 * the block's activation sum), so it ends at the exact signed sum; then one convert and
 * one FMA per block fold it into the fp32 output, as cqd_panels_portable does. */
#include "engine/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"

#define PW CGEMM_PANEL
#define QK CQD_BLOCK
#define AHEAD 4   /* blocks prefetched ahead in each panel */

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

static inline int32_t rd32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* rows r0 .. r0 + MR_ by panels p0 .. p0 + NV_ (TYPE_, MR_, NV_ constants at every call
 * site, so the block loop has no tests). pf: the first row tile, which streams the panels
 * from memory (the later ones find them in cache), prefetches AHEAD blocks ahead, and near
 * a panel's end into the panel its slot takes next, when below p_hi (a 576-input panel is
 * only 18 blocks: without it the first blocks of every group came cold). Except Q8_0 with
 * one row (batch-1 decode): timed on the products of 30 smollm2-135m layers, software
 * prefetch on and off in turn in one process, it ran 5-14% faster without (one or two
 * threads; every other line, or one line a block, in between), and batch-1 decode 6-15%:
 * its 544-byte blocks are runs the hardware prefetcher follows, and 9 prefetches a block
 * cost more than they brought. Q4_0 ran 9-24% slower without, and Q8_0 at batch 8 17%. */
VNNI __attribute__((always_inline)) static inline void tile(
    float *y, const cqd_act_t *a, int32_t r0, const uint8_t *wq, const uint32_t TYPE_,
    int32_t n, int32_t p0, int32_t p_hi, int pf, const int MR_, const int NV_) {
    const int32_t k = a->k, nb = k / QK;
    const size_t bb = TYPE_ == DQ_Q8_0 ? PW * 2 + QK * PW : PW * 2 + QK * PW / 2;
    const size_t pb = (size_t)nb * bb;
    const int32_t off = TYPE_ == DQ_Q8_0 ? 128 : 8;
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    const uint8_t *w[4];
    const int8_t *q[4];
    const float *d[4];
    const int32_t *s[4];
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) w[j] = wq + (size_t)(p0 + j) * pb;
#pragma GCC unroll 4
    for (int i = 0; i < MR_; i++) {
        q[i] = a->q + (size_t)(r0 + i) * k;
        d[i] = a->d + (size_t)(r0 + i) * nb;
        s[i] = a->s + (size_t)(r0 + i) * nb;
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++) acc[i][j] = _mm512_setzero_ps();
    }
    for (int32_t b = 0; b < nb; b++) {
        const uint8_t *blk[4];
        __m512 dw[4];
        __m512i is[4][4];
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++) {
            blk[j] = w[j] + (size_t)b * bb;
            if (pf && (TYPE_ == DQ_Q4_0 || MR_ > 1)) {
                const uint8_t *p = b + AHEAD < nb ? blk[j] + AHEAD * bb
                                   : p0 + NV_ + j < p_hi
                                       ? w[j] + (size_t)NV_ * pb + (size_t)(b + AHEAD - nb) * bb
                                       : NULL;
                if (p)
                    for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
            }
            dw[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk[j]));
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) {
            __m512i c = _mm512_set1_epi32(-off * s[i][b]);
#pragma GCC unroll 4
            for (int j = 0; j < NV_; j++) is[i][j] = c;
        }
        if (TYPE_ == DQ_Q8_0) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++)
#pragma GCC unroll 4
                for (int j = 0; j < NV_; j++) {
                    __m512i wv = _mm512_loadu_si512((const void *)(blk[j] + PW * 2 + 64 * g));
#pragma GCC unroll 4
                    for (int i = 0; i < MR_; i++)
                        is[i][j] = _mm512_dpbusd_epi32(
                            is[i][j], wv, _mm512_set1_epi32(rd32(q[i] + b * QK + 4 * g)));
                }
        } else {
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++)
#pragma GCC unroll 4
                for (int j = 0; j < NV_; j++) {
                    __m512i raw = _mm512_loadu_si512((const void *)(blk[j] + PW * 2 + 64 * v));
                    __m512i lo = _mm512_and_si512(raw, lo4);
                    __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
#pragma GCC unroll 4
                    for (int i = 0; i < MR_; i++) {
                        is[i][j] = _mm512_dpbusd_epi32(
                            is[i][j], lo, _mm512_set1_epi32(rd32(q[i] + b * QK + 4 * v)));
                        is[i][j] = _mm512_dpbusd_epi32(
                            is[i][j], hi, _mm512_set1_epi32(rd32(q[i] + b * QK + 16 + 4 * v)));
                    }
                }
        }
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++) {
            __m512 da = _mm512_set1_ps(d[i][b]);
#pragma GCC unroll 4
            for (int j = 0; j < NV_; j++)
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[i][j]),
                                            _mm512_mul_ps(dw[j], da), acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) {
        int32_t c0 = (p0 + j) * PW;
        __mmask16 mask = cgemm_tail16(n - c0);
#pragma GCC unroll 4
        for (int i = 0; i < MR_; i++)
            _mm512_mask_storeu_ps(y + (size_t)(r0 + i) * n + c0, mask, acc[i][j]);
    }
}

/* Rows in tiles of up to MR (as even as they go), each tile over the group of panels:
 * the group's bytes stream from memory for the first tile and stay in cache for the
 * rest. One or two rows take four panels at a time (their accumulators fit beside the
 * four weight vectors); more take two. */
VNNI __attribute__((always_inline)) static inline void panels_type(
    float *y, const cqd_act_t *a, const uint8_t *wq, const uint32_t TYPE_, int32_t n,
    int32_t p_lo, int32_t p_hi) {
    int32_t m = a->m;
    int nv = m <= 2 ? 4 : 2;
    int32_t tiles = (m + 3) / 4;
    for (int32_t p0 = p_lo; p0 < p_hi;) {
        /* the tail two at a time where it can: a lone panel is one memory stream */
        int g = p_hi - p0 >= nv ? nv : p_hi - p0 >= 2 ? 2 : 1;
        for (int32_t t = 0, r0 = 0; t < tiles; t++) {
            int32_t r1 = (int32_t)((int64_t)m * (t + 1) / tiles);
            int mr = r1 - r0, pf = t == 0;
#define T(MR, NV) tile(y, a, r0, wq, TYPE_, n, p0, p_hi, pf, MR, NV)
            if (g == 4) {
                if (mr == 1) T(1, 4);
                else T(2, 4);
            } else if (g == 2) {
                switch (mr) { case 1: T(1, 2); break; case 2: T(2, 2); break;
                              case 3: T(3, 2); break; default: T(4, 2); break; }
            } else {
                switch (mr) { case 1: T(1, 1); break; case 2: T(2, 1); break;
                              case 3: T(3, 1); break; default: T(4, 1); break; }
            }
#undef T
            r0 = r1;
        }
        p0 += g;
    }
}

VNNI void cqd_panels_vnni(float *y, const cqd_act_t *a, const void *wq, uint32_t type,
                          int32_t n, int32_t p_lo, int32_t p_hi) {
    if (type == DQ_Q8_0) panels_type(y, a, wq, DQ_Q8_0, n, p_lo, p_hi);
    else panels_type(y, a, wq, DQ_Q4_0, n, p_lo, p_hi);
}

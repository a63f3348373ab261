/* cpu_gemm_avx2: the product kernels for CPUs with AVX2 and FMA but no AVX-512 (chosen at
 * run time by cpu_gemm.c): the same packed panels (cpu_gemm.h) and F16/BF16 matrices
 * (cpu_qgemm.h), a panel's 16 columns as two 8-float vectors. The design is the AVX-512
 * kernels' (cpu_gemm.c's panels_avx512, cpu_qgemm.c's fused_tile), sized for 16 registers.
 *
 * A tile is MR_ rows of x by NV_ panels: 2 MR_ NV_ accumulators that stay in registers
 * (at most 12: with the weight vectors or the broadcasts of x, 16 registers in all). Per
 * k step it makes the NV_ panels' weight vectors (loaded, or converted from F16/BF16 in
 * registers: the same floats the dequantised matrix holds) and feeds them straight to the
 * FMAs. Shapes: one row by four panels (8 independent FMA chains, enough to hide the FMA
 * latency), two rows by three, three by two, four to six rows by one panel; from seven
 * rows on, blocks of two rows by three panels (panels() says why).
 *
 * Invariant: every output is one in-order FMA chain over k from zero, acc = fma(x[kk],
 * w[kk], acc); a tile that starts at k0 > 0 reloads what the previous chunk stored. So the
 * F16/BF16 products equal the fp32 product over the dequantised matrix bit for bit, and
 * this kernel the AVX-512 one (test_cpu_qgemm checks both).
 *
 * x is read in place, a row a fixed k floats apart: with at most 6 rows a tile's row
 * pointers fit in the general registers (the AVX-512 kernel, 12 rows, packs x k-major
 * because they did not), and cgemm_avx2_panels has no scratch to pack into. One row
 * block streams its panels, prefetching ahead; several run k in chunks of KC steps, every
 * block over a chunk before the next, so that the chunk's weights come from memory once
 * and then from L1, each block prefetching a share of the next chunk. */
#include "engine/cpu/cpu_gemm_avx2.h"

#include <immintrin.h>
#include <stddef.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"

#define PW CGEMM_PANEL
#define MR_MAX 6       /* rows per tile with one panel: 12 accumulators of 16 registers */
#define KC 128         /* k steps per chunk when several row blocks share the panels */
/* Bytes that a single row block prefetches ahead, shared by its panels (16 KB / g each):
 * measured at 4096 x 4096, one panel 2 KB ahead ran 4 rows at 56 GFLOP/s, 16 KB ahead
 * at 90; four panels (one row) are best at 2-4 KB each. */
#define PF_TOTAL 16384

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX2_INLINE AVX2 __attribute__((always_inline)) static inline

/* One tile's work: rows [0, MR_) of x (row i at x + i k) by panels p0 .. p0 + NV_ - 1
 * (columns c0 .. c0 + 16 NV_ - 1, those below n), over steps [k0, k1). w: panel p0's
 * step 0, the next panel wpanel bytes on. pf: prefetch the tile's own panels pf_bytes
 * ahead; else pn_lines cache lines from pn in each of pn_np panels (wpanel apart), spread
 * evenly over the tile's steps (a share of the next chunk). */
typedef struct {
    float *y;
    const float *x;
    const uint8_t *w, *pn;
    size_t wpanel;
    int32_t n, k, c0, k0, k1, pn_lines;
    int pf, pn_np, pf_bytes;
} tile_t;

/* Half h of the panel step at p as 8 floats; TYPE_: DQ_F32, DQ_F16 or DQ_BF16. fp32 and
 * F16: columns 8 h .. 8 h + 7. BF16: the even columns (h = 0) or the odd ones (h = 1) of
 * the whole step, each one instruction on one 32-byte load: a bf16 is the top half of its
 * float, so the even ones are the step shifted left 16 bits and the odd ones the step
 * with the low halves cleared (widening 8 halves, then shifting, was two instructions per
 * vector: BF16 ran 10-20% behind F16). acc_load / acc_store reorder the columns. */
AVX2_INLINE __m256 wvec(const uint8_t *p, const uint32_t TYPE_, int h, const int TIGHT_) {
    if (TYPE_ == DQ_F32) return _mm256_loadu_ps((const float *)p + 8 * h);
    if (TYPE_ == DQ_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16 * h)));
    __m256i v = _mm256_loadu_si256((const __m256i *)p);
    if (h == 0) return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    /* TIGHT_: no register is left for the mask (the 3 x 2 tile: with it, GCC spilled an
     * accumulator and BF16 ran at half speed): two shifts instead */
    if (TIGHT_) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_srli_epi32(v, 16), 16));
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* a[0], a[1] = one panel's 16 outputs at yc, nc of them below n (the rest read as 0), in
 * wvec's column order */
AVX2_INLINE void acc_load(__m256 *a, const float *yc, int32_t nc, const uint32_t TYPE_) {
    float tmp[PW] = {0};
    if (nc < PW) {
        for (int32_t c = 0; c < nc; c++) tmp[c] = yc[c];
        yc = tmp;
    }
    __m256 y0 = _mm256_loadu_ps(yc), y1 = _mm256_loadu_ps(yc + 8);
    if (TYPE_ != DQ_BF16) {
        a[0] = y0;
        a[1] = y1;
        return;
    }
    /* lo: columns 0-3 | 8-11, hi: 4-7 | 12-15; then the even ones, the odd ones */
    __m256 lo = _mm256_permute2f128_ps(y0, y1, 0x20), hi = _mm256_permute2f128_ps(y0, y1, 0x31);
    a[0] = _mm256_shuffle_ps(lo, hi, 0x88);
    a[1] = _mm256_shuffle_ps(lo, hi, 0xDD);
}

/* the inverse: a[0], a[1] to the panel's first nc outputs at yc */
AVX2_INLINE void acc_store(float *yc, const __m256 *a, int32_t nc, const uint32_t TYPE_) {
    __m256 y0 = a[0], y1 = a[1];
    if (TYPE_ == DQ_BF16) {
        /* even, odd interleaved: columns 0-3 | 8-11 and 4-7 | 12-15 */
        __m256 lo = _mm256_unpacklo_ps(a[0], a[1]), hi = _mm256_unpackhi_ps(a[0], a[1]);
        y0 = _mm256_permute2f128_ps(lo, hi, 0x20);
        y1 = _mm256_permute2f128_ps(lo, hi, 0x31);
    }
    if (nc >= PW) {
        _mm256_storeu_ps(yc, y0);
        _mm256_storeu_ps(yc + 8, y1);
        return;
    }
    float tmp[PW];
    _mm256_storeu_ps(tmp, y0);
    _mm256_storeu_ps(tmp + 8, y1);
    for (int32_t c = 0; c < nc; c++) yc[c] = tmp[c];
}

AVX2_INLINE void tile(const tile_t *t, const uint32_t TYPE_, const int MR_, const int NV_) {
    const int SB = TYPE_ == DQ_F32 ? PW * 4 : PW * 2;   /* bytes of one panel step */
    int32_t k = t->k, n = t->n;
    const float *xr[MR_MAX];
    const uint8_t *wp[4];
    __m256 acc[MR_MAX][8];
    int32_t nc[4];   /* outputs of each panel below n */
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) {
        int32_t r = n - t->c0 - j * PW;
        nc[j] = r < 0 ? 0 : r > PW ? PW : r;
    }
#pragma GCC unroll 6
    for (int i = 0; i < MR_; i++) xr[i] = t->x + (size_t)i * k;
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) wp[j] = t->w + (size_t)j * t->wpanel;
#pragma GCC unroll 6
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++) {
            if (t->k0) acc_load(&acc[i][2 * j], t->y + (size_t)i * n + t->c0 + j * PW, nc[j], TYPE_);
            else acc[i][2 * j] = acc[i][2 * j + 1] = _mm256_setzero_ps();
        }
    /* One k step. With the weight vectors in registers when they fit beside the
     * accumulators and a broadcast (each loaded or converted once, then MR_ FMAs);
     * else the MR_ broadcasts in registers and each weight vector made just before its
     * FMAs. The empty asm keeps GCC from folding a load (or a conversion) into every
     * FMA that uses it. */
#define STEP(kk)                                                                        \
    do {                                                                                \
        size_t o_ = (size_t)(kk) * SB;                                                  \
        if (2 * MR_ * NV_ + 2 * NV_ + 1 <= 16) {                                        \
            __m256 w_[8];                                                               \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NV_; v++) {                 \
                w_[v] = wvec(wp[v / 2] + o_, TYPE_, v % 2, 0);                          \
                if (MR_ > 1) __asm__("" : "+x"(w_[v]));                                 \
            }                                                                           \
            _Pragma("GCC unroll 6") for (int i = 0; i < MR_; i++) {                     \
                __m256 xv = _mm256_broadcast_ss(xr[i] + (kk));                          \
                _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NV_; v++)               \
                    acc[i][v] = _mm256_fmadd_ps(xv, w_[v], acc[i][v]);                  \
            }                                                                           \
        } else {                                                                        \
            __m256 xv[MR_MAX];                                                          \
            _Pragma("GCC unroll 6") for (int i = 0; i < MR_; i++) {                     \
                xv[i] = _mm256_broadcast_ss(xr[i] + (kk));                              \
                __asm__("" : "+x"(xv[i]));                                              \
            }                                                                           \
            _Pragma("GCC unroll 8") for (int v = 0; v < 2 * NV_; v++) {                 \
                __m256 w_ = wvec(wp[v / 2] + o_, TYPE_, v % 2,                          \
                                 2 * MR_ * NV_ + MR_ + 1 >= 16);                        \
                __asm__("" : "+x"(w_));                                                 \
                _Pragma("GCC unroll 6") for (int i = 0; i < MR_; i++)                   \
                    acc[i][v] = _mm256_fmadd_ps(xv[i], w_, acc[i][v]);                  \
            }                                                                           \
        }                                                                               \
    } while (0)
    /* two loops rather than a test per step */
    if (t->pf) {
        for (int32_t kk = t->k0; kk < t->k1; kk++) {
            /* a cache line per panel every 64 / SB steps */
            if (SB == 64 || (kk & 1) == 0)
#pragma GCC unroll 4
                for (int j = 0; j < NV_; j++)
                    _mm_prefetch((const char *)wp[j] + (size_t)kk * SB + t->pf_bytes, _MM_HINT_T0);
            STEP(kk);
        }
    } else {
        const uint8_t *pn = t->pn;
        int32_t due = 0, lines = t->pn_lines, span = t->k1 - t->k0;
        for (int32_t kk = t->k0; kk < t->k1; kk++) {
            due += lines;
            if (due >= span) {
                due -= span;
                for (int j = 0; j < t->pn_np; j++)
                    _mm_prefetch((const char *)pn + (size_t)j * t->wpanel, _MM_HINT_T0);
                pn += 64;
            }
            STEP(kk);
        }
    }
#undef STEP
#pragma GCC unroll 6
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++)
            acc_store(t->y + (size_t)i * n + t->c0 + j * PW, &acc[i][2 * j], nc[j], TYPE_);
}

/* Each (type, rows, panels) instance is a function of its own, not inlined into the
 * dispatch: in one large function GCC's register allocation spilled an accumulator of
 * the 3 x 2 tile (16 of 16 registers live) to the stack, and the F16 product at 3 rows
 * ran at half speed. */
#define TILE_FN(NAME, TYPE, MR, NV)                                                     \
    AVX2 __attribute__((noinline)) static void NAME##_##MR##_##NV(const tile_t *t) {    \
        tile(t, TYPE, MR, NV);                                                          \
    }
#define TILE_FNS(NAME, TYPE)                                                            \
    TILE_FN(NAME, TYPE, 1, 1) TILE_FN(NAME, TYPE, 2, 1) TILE_FN(NAME, TYPE, 3, 1)       \
    TILE_FN(NAME, TYPE, 4, 1) TILE_FN(NAME, TYPE, 5, 1) TILE_FN(NAME, TYPE, 6, 1)       \
    TILE_FN(NAME, TYPE, 1, 2) TILE_FN(NAME, TYPE, 2, 2) TILE_FN(NAME, TYPE, 3, 2)       \
    TILE_FN(NAME, TYPE, 1, 3) TILE_FN(NAME, TYPE, 2, 3) TILE_FN(NAME, TYPE, 1, 4)
TILE_FNS(tf32, DQ_F32)
TILE_FNS(tf16, DQ_F16)
TILE_FNS(tbf16, DQ_BF16)

/* mr rows against nv panels: 1..6 rows by one panel, 1..3 by two, 1..2 by three, one
 * by four (at most 12 accumulators) */
#define TILE_SWITCH(NAME)                                                               \
    switch (nv * 8 + mr) {                                                              \
    case 8 + 1: NAME##_1_1(t); break;                                                   \
    case 8 + 2: NAME##_2_1(t); break;                                                   \
    case 8 + 3: NAME##_3_1(t); break;                                                   \
    case 8 + 4: NAME##_4_1(t); break;                                                   \
    case 8 + 5: NAME##_5_1(t); break;                                                   \
    case 8 + 6: NAME##_6_1(t); break;                                                   \
    case 16 + 1: NAME##_1_2(t); break;                                                  \
    case 16 + 2: NAME##_2_2(t); break;                                                  \
    case 16 + 3: NAME##_3_2(t); break;                                                  \
    case 24 + 1: NAME##_1_3(t); break;                                                  \
    case 24 + 2: NAME##_2_3(t); break;                                                  \
    case 32 + 1: NAME##_1_4(t); break;                                                  \
    default: break;                                                                     \
    }
AVX2_INLINE void tile_any(const tile_t *t, const uint32_t TYPE_, int32_t mr, int nv) {
    if (TYPE_ == DQ_F32) TILE_SWITCH(tf32)
    else if (TYPE_ == DQ_F16) TILE_SWITCH(tf16)
    else TILE_SWITCH(tbf16)
}

/* The product over panels [p_lo, p_hi) of a matrix at w (bytes) whose steps are of type
 * TYPE_: a group of nv panels at a time, every row block over it before the next group,
 * so that the group streams from memory once. */
AVX2_INLINE void panels(float *y, const float *x, const uint8_t *w, const uint32_t TYPE_,
                        int32_t m, int32_t n, int32_t k, int32_t p_lo, int32_t p_hi) {
    const int SB = TYPE_ == DQ_F32 ? PW * 4 : PW * 2;
    size_t wpanel = (size_t)PW * k * (TYPE_ == DQ_F32 ? 4 : 2);
    /* Up to 6 rows: one row block, as many panels as 12 accumulators allow (1 x 4, 2 x 3,
     * 3 x 2, then 4-6 rows by one panel), so that each weight vector feeds as many FMAs
     * as it can. More rows: blocks of 2 rows by 3 panels. Measured (8 rows, 1536 x 576,
     * fp32 / F16 / BF16): 112 / 117 / 113 GFLOP/s, against 103 / 97 / 95 with blocks of
     * 4 rows by one panel; and from 32 rows on as good or better. Two blocks of 2 x 3 at
     * 4-6 rows were slower than the one block (out of cache 50-70 against 80-110). */
    int nv = m == 1 ? 4 : m == 2 ? 3 : m == 3 ? 2 : m <= MR_MAX ? 1 : 3;
    int32_t rows = m <= MR_MAX ? MR_MAX : 2;
    int32_t blocks = (m + rows - 1) / rows;
    int32_t kc = blocks == 1 ? k : KC;
    tile_t t = {0};
    t.x = x;
    t.wpanel = wpanel;
    t.n = n;
    t.k = k;
    t.pf = blocks == 1;
    for (int32_t p0 = p_lo; p0 < p_hi;) {
        int g = p_hi - p0 >= nv ? nv : 1;
        t.c0 = p0 * PW;
        t.w = w + (size_t)p0 * wpanel;
        t.pf_bytes = PF_TOTAL / g / 64 * 64;
        for (int32_t k0 = 0; k0 < k; k0 += kc) {
            int32_t k1 = k - k0 > kc ? k0 + kc : k;
            t.k0 = k0;
            t.k1 = k1;
            /* the next chunk: the same panels further on, or the next group's first */
            int32_t nk = k1 < k ? (k - k1 < kc ? k - k1 : kc) : 0;
            int next_g = nk ? g : (p0 + g < p_hi ? (p_hi - p0 - g >= nv ? nv : 1) : 0);
            if (!nk) nk = k < kc ? k : kc;
            const uint8_t *pn = k1 < k ? t.w + (size_t)k1 * SB : t.w + (size_t)g * wpanel;
            int32_t lines = (int32_t)(((size_t)nk * SB + 63) / 64);
            t.pn_np = blocks == 1 ? 0 : next_g;
            for (int32_t bi = 0, m0 = 0; bi < blocks; bi++) {
                int32_t m1 = (int32_t)((int64_t)m * (bi + 1) / blocks);
                int32_t l0 = (int32_t)((int64_t)lines * bi / blocks);
                int32_t l1 = (int32_t)((int64_t)lines * (bi + 1) / blocks);
                t.pn = pn + (size_t)l0 * 64;
                t.pn_lines = l1 - l0 < k1 - k0 ? l1 - l0 : k1 - k0;
                t.y = y + (size_t)m0 * n;
                t.x = x + (size_t)m0 * k;
                tile_any(&t, TYPE_, m1 - m0, g);
                m0 = m1;
            }
        }
        p0 += g;
    }
}

AVX2 void cgemm_avx2_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                            int32_t k, int32_t p_lo, int32_t p_hi) {
    panels(y, x, (const uint8_t *)wp, DQ_F32, m, n, k, p_lo, p_hi);
}

AVX2 void cgemm_avx2_qpanels(float *y, const float *x, const void *wq, uint32_t type,
                             int32_t m, int32_t n, int32_t k, int32_t p_lo, int32_t p_hi) {
    if (type == DQ_F16) panels(y, x, wq, DQ_F16, m, n, k, p_lo, p_hi);
    else panels(y, x, wq, DQ_BF16, m, n, k, p_lo, p_hi);
}

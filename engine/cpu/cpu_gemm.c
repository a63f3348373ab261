/* cpu_gemm: see cpu_gemm.h.
 *
 * Products: a tile is MR_ rows of x by NV_ panels (16 output columns each). Per k step it
 * loads NV_ weight vectors, broadcasts MR_ values of x, and does MR_ x NV_ FMAs into
 * accumulators that stay in registers: no horizontal sums, and each weight vector
 * feeds MR_ FMAs. A thread takes its panels a group of NV_ at a time and runs every row
 * block over the group before moving on, so the group streams from memory once; with
 * several row blocks, in k chunks that later blocks find in L1 (panels_avx512).
 *
 * Attention and silu use exp_ps, our vectorised e^x (3e-7 relative to libm's expf). */
#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_gemm_avx2.h"
#include "engine/cpu/cpu_qdot.h"
#include "engine/cpu/cpu_qgemm.h"
#include "engine/dequant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define PW CGEMM_PANEL
#define MR_MAX 12      /* rows per tile with two panels: 24 accumulators of 32 registers */
_Static_assert(CQG_ROWS_MAX == MR_MAX, "cqg_panels_avx512 reads x as pack_blocks packs it");
#define PF_DIST 512    /* floats ahead that a single row block prefetches in each panel */
#define KV_AHEAD 16    /* K/V positions that attention prefetches ahead */
#define KC 128         /* k steps per chunk when several row blocks share the panels */

/* MR_ and NV_ are constants at every call site, so each instance keeps its accumulators in
 * registers with the loops fully unrolled. */
#define AVX512 __attribute__((target("avx512f,avx512dq,fma"), always_inline)) static inline

/* The four horizontal sums of a0..a3 in one vector: pairs first, then within and across
 * the 128-bit lanes, a dozen shuffles and adds instead of four full reductions. */
AVX512 __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    /* lanes of t0: a0 a1 a0 a1 sums; combine to s0 s1 s2 s3 per 128-bit lane */
    __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* One tile's work: rows [m0, m0 + MR_) of x by panels [p0, p0 + NV_) over k steps
 * [k0, k1). acc = 0: start the sums; 1: add to what y holds. pf: prefetch the tile's own
 * panels PF_DIST ahead. pn, pn_steps, pn_np: pn_steps steps from pn in each of pn_np
 * panels (k PW floats apart) to fetch into L1, spread evenly over the tile's steps.
 * wq: NULL for the packed matrix wp; else the tile's panels dequantised (cgemm_qpanels),
 * steps [k0, k1) of panel p0 + j at wq + j wq_stride. */
typedef struct {
    float *y;
    const float *x, *wp, *pn, *wq;
    int32_t m0, p0, n, k, k0, k1, pn_steps;
    int acc, pf, pn_np;
    size_t wq_stride;
} ptile_t;

AVX512 void ptile(const ptile_t *t, const int MR_, const int NV_) {
    const float *wv[4], *pn = t->pn;
    int32_t k = t->k, n = t->n, span = t->k1 - t->k0;
    /* the block's rows of x, packed k-major: one pointer, the row a fixed offset */
    const float *xb = t->x + (size_t)t->m0 * k;
    /* wv[j] + kk PW is step kk of panel j: the packed matrix, or the dequantised steps,
     * whose first is k0 (the offset is applied to kk, not to the pointer) */
    int32_t wk0 = t->wq ? t->k0 : 0;
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++)
        wv[j] = t->wq ? t->wq + (size_t)j * t->wq_stride : t->wp + (size_t)(t->p0 + j) * PW * k;
    __m512 acc[MR_MAX][4];
    __mmask16 mask[4];
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++) {
        int32_t c0 = (t->p0 + j) * PW;
        mask[j] = cgemm_tail16(n - c0);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NV_; j++)
            acc[i][j] = t->acc ? _mm512_maskz_loadu_ps(mask[j], t->y + (size_t)(t->m0 + i) * n +
                                                                  (t->p0 + j) * PW)
                               : _mm512_setzero_ps();
    /* one k step: NV_ weight vectors (kept in registers: GCC would otherwise fold the
     * load into every FMA, MR_ loads of one vector per step, and the load ports become
     * the limit), MR_ broadcasts of x, MR_ x NV_ FMAs */
#define PSTEP(kk)                                                                       \
    do {                                                                                \
        __m512 w[4];                                                                    \
        _Pragma("GCC unroll 4") for (int j = 0; j < NV_; j++) {                         \
            w[j] = _mm512_load_ps(wv[j] + (size_t)((kk) - wk0) * PW);                  \
            __asm__("" : "+v"(w[j]));                                                   \
        }                                                                               \
        _Pragma("GCC unroll 16") for (int i = 0; i < MR_; i++) {                        \
            __m512 xv = _mm512_set1_ps(xb[(size_t)(kk) * MR_ + i]);                     \
            _Pragma("GCC unroll 4") for (int j = 0; j < NV_; j++)                       \
                acc[i][j] = _mm512_fmadd_ps(xv, w[j], acc[i][j]);                       \
        }                                                                               \
    } while (0)
    /* two loops rather than a test per step */
    if (t->pf) {
        for (int32_t kk = t->k0; kk < t->k1; kk++) {
            _Pragma("GCC unroll 4") for (int j = 0; j < NV_; j++)
                _mm_prefetch((const char *)(wv[j] + (size_t)kk * PW + PF_DIST), _MM_HINT_T0);
            PSTEP(kk);
        }
    } else {
        int32_t due = 0, steps = t->pn_steps, np = t->pn_np;
        for (int32_t kk = t->k0; kk < t->k1; kk++) {
            due += steps;
            if (due >= span) {
                due -= span;
                for (int j = 0; j < np; j++)
                    _mm_prefetch((const char *)(pn + (size_t)j * PW * k), _MM_HINT_T0);
                pn += PW;
            }
            PSTEP(kk);
        }
    }
#undef PSTEP
#pragma GCC unroll 4
    for (int j = 0; j < NV_; j++)
#pragma GCC unroll 16
        for (int i = 0; i < MR_; i++)
            _mm512_mask_storeu_ps(t->y + (size_t)(t->m0 + i) * n + (t->p0 + j) * PW, mask[j],
                                  acc[i][j]);
}

#define PT_CASES(NVV)                                                                   \
    case 1: ptile(t, 1, NVV); break;                                                    \
    case 2: ptile(t, 2, NVV); break;                                                    \
    case 3: ptile(t, 3, NVV); break;                                                    \
    case 4: ptile(t, 4, NVV); break;                                                    \
    case 5: ptile(t, 5, NVV); break;                                                    \
    case 6: ptile(t, 6, NVV); break
#define PT_CASES_HI(NVV)                                                                \
    case 7: ptile(t, 7, NVV); break;                                                    \
    case 8: ptile(t, 8, NVV); break;                                                    \
    case 9: ptile(t, 9, NVV); break;                                                    \
    case 10: ptile(t, 10, NVV); break;                                                  \
    case 11: ptile(t, 11, NVV); break;                                                  \
    default: ptile(t, 12, NVV); break

/* mr rows (1..MR_MAX; 1..6 with four panels) against nv panels (1, 2 or 4). */
__attribute__((target("avx512f,avx512dq,fma"))) static void tile_avx512(const ptile_t *t,
                                                                        int32_t mr, int nv) {
    if (nv == 4) {
        switch (mr) { PT_CASES(4); default: break; }
    } else if (nv == 2) {
        switch (mr) { PT_CASES(2); PT_CASES_HI(2); }
    } else {
        switch (mr) { PT_CASES(1); PT_CASES_HI(1); }
    }
}

/* d [k][mr] = xb [mr][k] transposed, 16 outputs per gather: output o reads row o % mr,
 * column o / mr; the lanes' row and source index advance by 16 outputs per step, with a
 * carry into the next column where the row wraps. Twice as fast as a scalar loop. */
__attribute__((target("avx512f,avx512dq,fma"))) static void pack_x_avx512(
    float *d, const float *xb, int32_t mr, int32_t k) {
    size_t total = (size_t)mr * k, o = 0;
    int32_t row[16], src[16];
    for (int l = 0; l < 16; l++) {
        row[l] = l % mr;
        src[l] = (l % mr) * k + l / mr;
    }
    __m512i rv = _mm512_loadu_si512(row), idx = _mm512_loadu_si512(src);
    __m512i step_r = _mm512_set1_epi32(16 % mr), mrv = _mm512_set1_epi32(mr);
    __m512i step_i = _mm512_set1_epi32(16 / mr + (16 % mr) * k);
    __m512i wrap = _mm512_set1_epi32(1 - mr * k);
    for (; o + 16 <= total; o += 16) {
        _mm512_storeu_ps(d + o, _mm512_i32gather_ps(idx, xb, 4));
        rv = _mm512_add_epi32(rv, step_r);
        idx = _mm512_add_epi32(idx, step_i);
        __mmask16 w = _mm512_cmpge_epi32_mask(rv, mrv);
        rv = _mm512_mask_sub_epi32(rv, w, rv, mrv);
        idx = _mm512_mask_add_epi32(idx, w, idx, wrap);
    }
    for (; o < total; o++) d[o] = xb[(o % mr) * k + o / mr];
}

/* x packed per row block, k-major: block [m0, m1) at xp + m0 k, element (i, kk) at
 * kk (m1 - m0) + i. With one row pointer per row, the tile ran out of general registers
 * and shuffled pointers through vector registers on the FMA port. Rows in balanced
 * blocks of at most MR_MAX; returns the number of blocks. */
static int32_t pack_blocks(float *xp, const float *x, int32_t m, int32_t k) {
    int32_t blocks = (m + MR_MAX - 1) / MR_MAX;
    for (int32_t bi = 0, m0 = 0; bi < blocks; bi++) {
        int32_t m1 = (int32_t)((int64_t)m * (bi + 1) / blocks);
        pack_x_avx512(xp + (size_t)m0 * k, x + (size_t)m0 * k, m1 - m0, k);
        m0 = m1;
    }
    return blocks;
}

static void panels_avx512(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                          int32_t k, int32_t p_lo, int32_t p_hi, float *xp) {
    /* up to 6 rows: four panels per tile (more independent FMA chains for the stream);
     * more rows: two panels */
    int nv = m <= 6 ? 4 : 2;
    int32_t blocks = pack_blocks(xp, x, m, k);
    /* One row block streams its panels, prefetching ahead. Several: k runs in chunks of
     * KC steps, every block over a chunk before the next chunk, so that the chunk's
     * weights are read from memory once and then from L1, and each block fetches a share
     * of the next chunk: the memory stream is spread evenly over the FMAs instead of
     * idling while later blocks compute. */
    int32_t kc = blocks == 1 ? k : KC;
    ptile_t t = {y, xp, wp, NULL, NULL, 0, 0, n, k, 0, 0, 0, 0, blocks == 1, 0, 0};
    for (int32_t p0 = p_lo; p0 < p_hi;) {
        int g = p_hi - p0 >= nv ? nv : 1;
        t.p0 = p0;
        for (int32_t k0 = 0; k0 < k; k0 += kc) {
            int32_t k1 = k - k0 > kc ? k0 + kc : k;
            t.k0 = k0;
            t.k1 = k1;
            t.acc = k0 > 0;
            /* the next chunk: the same panels further on, or the next group's first */
            int32_t nk = k1 < k ? (k - k1 < kc ? k - k1 : kc) : 0;
            int next_g = nk ? g : (p0 + g < p_hi ? (p_hi - p0 - g >= nv ? nv : 1) : 0);
            if (!nk) nk = k < kc ? k : kc;
            t.pn_np = blocks == 1 ? 0 : next_g;
            const float *pn =
                wp + ((size_t)(k1 < k ? p0 : p0 + g) * k + (k1 < k ? k1 : 0)) * PW;
            for (int32_t bi = 0, m0 = 0; bi < blocks; bi++) {
                int32_t m1 = (int32_t)((int64_t)m * (bi + 1) / blocks);
                int32_t s0 = (int32_t)((int64_t)nk * bi / blocks);
                int32_t s1 = (int32_t)((int64_t)nk * (bi + 1) / blocks);
                t.pn = pn + (size_t)s0 * PW;
                t.pn_steps = s1 - s0 < k1 - k0 ? s1 - s0 : k1 - k0;
                t.m0 = m0;
                tile_avx512(&t, m1 - m0, g);
                m0 = m1;
            }
        }
        p0 += g;
    }
}

/* 16 elements of a K or V row from element d: fp32, or IEEE half (H_, a constant per call
 * site) widened exactly. */
AVX512 __m512 kv_load(const void *row, int32_t d, const int H_) {
    return H_ ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)))
              : _mm512_loadu_ps((const float *)row + d);
}

/* The address of element d of a K or V row (for its prefetch). */
AVX512 const char *kv_addr(const void *row, int32_t d, const int H_) {
    return (const char *)row + (size_t)d * (H_ ? 2 : 4);
}

/* Up to four query heads of a group against four positions at a time: each K vector is
 * loaded once for the heads, and one hsum4 yields four scores. G_ and H_ are constants per
 * call site (registers: 4 G_ accumulators + 4 K vectors). */
AVX512 void attn_scores(float *scores, const float *q, const int G_, int32_t hd,
                        const void *const *krow, int32_t n, float scale, const int H_) {
    /* a half row is 32 elements a line, an fp32 row 16 */
    const int32_t line = H_ ? 32 : 16;
    for (int32_t t = 0; t < n; t += 4) {
        const void *k0 = krow[t], *k1 = krow[t + 1 < n ? t + 1 : t],
                   *k2 = krow[t + 2 < n ? t + 2 : t], *k3 = krow[t + 3 < n ? t + 3 : t];
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < G_; r++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) acc[r][u] = _mm512_setzero_ps();
        /* K rows are scattered over blocks: fetch four quads ahead of use */
        if (t + KV_AHEAD < n)
            for (int u = 0; u < 4 && t + KV_AHEAD + u < n; u++)
                for (int32_t d = 0; d < hd; d += line)
                    _mm_prefetch(kv_addr(krow[t + KV_AHEAD + u], d, H_), _MM_HINT_T0);
        for (int32_t d = 0; d < hd; d += 16) {
            __m512 kv0 = kv_load(k0, d, H_), kv1 = kv_load(k1, d, H_);
            __m512 kv2 = kv_load(k2, d, H_), kv3 = kv_load(k3, d, H_);
#pragma GCC unroll 4
            for (int r = 0; r < G_; r++) {
                __m512 qv = _mm512_loadu_ps(q + (size_t)r * hd + d);
                acc[r][0] = _mm512_fmadd_ps(qv, kv0, acc[r][0]);
                acc[r][1] = _mm512_fmadd_ps(qv, kv1, acc[r][1]);
                acc[r][2] = _mm512_fmadd_ps(qv, kv2, acc[r][2]);
                acc[r][3] = _mm512_fmadd_ps(qv, kv3, acc[r][3]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < G_; r++) {
            float s4[4];
            _mm_storeu_ps(s4, _mm_mul_ps(hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]),
                                         _mm_set1_ps(scale)));
            for (int u = 0; u < 4 && t + u < n; u++) scores[(size_t)r * n + t + u] = s4[u];
        }
    }
}

/* e^x: x = j ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor series to r^7 (truncation
 * below 1e-8 relative), then scaled by 2^j (scalef: infinity past the float range). Below
 * -100 the result is under 4e-44: clamped there. */
AVX512 __m512 exp_ps(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-100.0f));
    __m512 j = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln 2 in two parts, so j ln2_hi is exact and r keeps its low bits */
    __m512 r = _mm512_fnmadd_ps(j, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(j, _mm512_set1_ps(1.4286068202862268e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, j);
}

__attribute__((target("avx512f,avx512dq,fma"))) static void silu_mul_avx512(
    float *out, const float *gate, const float *up, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 k = cgemm_tail16(n - i);
        __m512 g = _mm512_maskz_loadu_ps(k, gate + i), u = _mm512_maskz_loadu_ps(k, up + i);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));   /* e^-g */
        __m512 s = _mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(s, u));
    }
}

/* Stable softmax of sc[0..n) in place: the maximum off, e^x, normalised. */
AVX512 void softmax_avx512(float *sc, int32_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY), sum = _mm512_setzero_ps();
    int32_t t = 0;
    for (; t + 16 <= n; t += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(sc + t));
    if (t < n) {
        __mmask16 k = cgemm_tail16(n - t);
        mx = _mm512_mask_max_ps(mx, k, mx, _mm512_maskz_loadu_ps(k, sc + t));
    }
    __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
    for (t = 0; t < n; t += 16) {
        __mmask16 k = cgemm_tail16(n - t);
        __m512 e = exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + t), m));
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(k, e));
        _mm512_mask_storeu_ps(sc + t, k, e);
    }
    __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
    for (t = 0; t < n; t += 16) {
        __mmask16 k = cgemm_tail16(n - t);
        _mm512_mask_storeu_ps(sc + t, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, sc + t), inv));
    }
}

/* out[r] = sum_t p[r][t] V_t over NV_ x 16 columns from d0; each V vector is loaded once
 * for the heads. G_, NV_ and H_ are constants per call site, so the body has no branches. */
AVX512 void attn_values_cols(float *out, const float *p, const int G_, const int NV_,
                             int32_t hd, int32_t d0, const void *const *vrow, int32_t n,
                             const int H_) {
    __m512 o[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < G_; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NV_; c++) o[r][c] = _mm512_setzero_ps();
    for (int32_t t = 0; t < n; t++) {
        __m512 v[4];
        if (t + KV_AHEAD < n)
#pragma GCC unroll 4
            for (int c = 0; c < NV_; c++)
                if (!H_ || c % 2 == 0)   /* a line holds two half vectors */
                    _mm_prefetch(kv_addr(vrow[t + KV_AHEAD], d0 + 16 * c, H_), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int c = 0; c < NV_; c++) v[c] = kv_load(vrow[t], d0 + 16 * c, H_);
#pragma GCC unroll 4
        for (int r = 0; r < G_; r++) {
            __m512 pv = _mm512_set1_ps(p[(size_t)r * n + t]);
#pragma GCC unroll 4
            for (int c = 0; c < NV_; c++) o[r][c] = _mm512_fmadd_ps(pv, v[c], o[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < G_; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NV_; c++)
            _mm512_storeu_ps(out + (size_t)r * hd + d0 + 16 * c, o[r][c]);
}

AVX512 void attn_values(float *out, const float *p, const int G_, int32_t hd,
                        const void *const *vrow, int32_t n, const int H_) {
    for (int32_t d0 = 0; d0 < hd; d0 += 64) {
        switch (hd - d0 < 64 ? (hd - d0) / 16 : 4) {
        case 1: attn_values_cols(out, p, G_, 1, hd, d0, vrow, n, H_); break;
        case 2: attn_values_cols(out, p, G_, 2, hd, d0, vrow, n, H_); break;
        case 3: attn_values_cols(out, p, G_, 3, hd, d0, vrow, n, H_); break;
        default: attn_values_cols(out, p, G_, 4, hd, d0, vrow, n, H_); break;
        }
    }
}

AVX512 void attn_avx512_rows(float *out, const float *q, int32_t g, int32_t hd,
                             const void *const *krow, const void *const *vrow, int32_t n,
                             float scale, float *scores, const int H_) {
    for (int32_t r0 = 0; r0 < g; r0 += 4) {
        int32_t G = g - r0 < 4 ? g - r0 : 4;
        const float *qr = q + (size_t)r0 * hd;
        switch (G) {
        case 1: attn_scores(scores, qr, 1, hd, krow, n, scale, H_); break;
        case 2: attn_scores(scores, qr, 2, hd, krow, n, scale, H_); break;
        case 3: attn_scores(scores, qr, 3, hd, krow, n, scale, H_); break;
        default: attn_scores(scores, qr, 4, hd, krow, n, scale, H_); break;
        }
        /* the first V rows load while the softmax runs */
        for (int32_t t = 0; t < KV_AHEAD && t < n; t++)
            for (int32_t d = 0; d < hd; d += H_ ? 32 : 16)
                _mm_prefetch(kv_addr(vrow[t], d, H_), _MM_HINT_T0);
        for (int32_t r = 0; r < G; r++) softmax_avx512(scores + (size_t)r * n, n);
        float *o = out + (size_t)r0 * hd;
        switch (G) {
        case 1: attn_values(o, scores, 1, hd, vrow, n, H_); break;
        case 2: attn_values(o, scores, 2, hd, vrow, n, H_); break;
        case 3: attn_values(o, scores, 3, hd, vrow, n, H_); break;
        default: attn_values(o, scores, 4, hd, vrow, n, H_); break;
        }
    }
}

/* One instance per KV element type. */
__attribute__((target("avx512f,avx512dq,fma"))) static void attn_avx512(
    float *out, const float *q, int32_t g, int32_t hd, const void *const *krow,
    const void *const *vrow, int kv_f16, int32_t n, float scale, float *scores) {
    if (kv_f16) attn_avx512_rows(out, q, g, hd, krow, vrow, n, scale, scores, 1);
    else attn_avx512_rows(out, q, g, hd, krow, vrow, n, scale, scores, 0);
}

/* Element d of a K or V row. */
static inline float kv_elem(const void *row, int32_t d, int kv_f16) {
    return kv_f16 ? dq_f16_to_f32(((const uint16_t *)row)[d]) : ((const float *)row)[d];
}

static void attn_portable(float *out, const float *q, int32_t g, int32_t hd,
                          const void *const *krow, const void *const *vrow, int kv_f16,
                          int32_t n, float scale, float *scores) {
    for (int32_t r = 0; r < g; r++) {
        const float *qr = q + (size_t)r * hd;
        float *sc = scores + (size_t)r * n, *o = out + (size_t)r * hd, mx = 0, sum = 0;
        for (int32_t t = 0; t < n; t++) {
            float s = 0;
            for (int32_t d = 0; d < hd; d++) s += qr[d] * kv_elem(krow[t], d, kv_f16);
            sc[t] = s * scale;
            mx = t == 0 || sc[t] > mx ? sc[t] : mx;
        }
        for (int32_t t = 0; t < n; t++) {
            sc[t] = expf(sc[t] - mx);
            sum += sc[t];
        }
        float inv = 1.0f / sum;
        memset(o, 0, (size_t)hd * sizeof *o);
        for (int32_t t = 0; t < n; t++) {
            float p = sc[t] * inv;
            for (int32_t d = 0; d < hd; d++) o[d] += p * kv_elem(vrow[t], d, kv_f16);
        }
    }
}

/* First the maximum (any NaN: the caller's scalar loop decides), then its first index:
 * two passes over a vocabulary's logits, which sit in L2. */
__attribute__((target("avx512f,avx512dq,fma"))) static int32_t argmax_avx512(const float *v,
                                                                             int32_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    __mmask16 nan = 0;
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(v + i);
        nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, x);
    }
    float best = _mm512_reduce_max_ps(mx);
    for (int32_t j = i; j < n; j++) {
        if (v[j] != v[j]) nan = 1;
        best = v[j] > best ? v[j] : best;
    }
    if (nan) return -1;
    __m512 b = _mm512_set1_ps(best);
    for (i = 0; i + 16 <= n; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(v + i), b, _CMP_EQ_OQ);
        if (eq) return i + __builtin_ctz(eq);
    }
    for (; i < n; i++)
        if (v[i] == best) return i;
    return -1;
}

/* The output columns of panel p, its k steps at w (packed fp32). */
static void panel_portable(float *y, const float *x, const float *w, int32_t m, int32_t n,
                           int32_t k, int32_t p) {
    int32_t c0 = p * PW, nc = n - c0 < PW ? n - c0 : PW;
    for (int32_t i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * k;
        float acc[PW] = {0};
        for (int32_t kk = 0; kk < k; kk++)
            for (int c = 0; c < PW; c++) acc[c] += xi[kk] * w[(size_t)kk * PW + c];
        memcpy(y + (size_t)i * n + c0, acc, (size_t)nc * sizeof *acc);
    }
}

static void panels_portable(float *y, const float *x, const float *wp, int32_t m, int32_t n,
                            int32_t k, int32_t p_lo, int32_t p_hi) {
    for (int32_t p = p_lo; p < p_hi; p++) panel_portable(y, x, wp + (size_t)p * PW * k, m, n, k, p);
}

static int cached = -1;   /* CQG_AVX512, CQG_AVX2 or CQG_PORTABLE; -1: not yet detected */

static int cpu_level(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("fma"))
        return CQG_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CQG_AVX2;
    return CQG_PORTABLE;
}

static int level(void) {
    if (cached < 0) cached = cpu_level();
    return cached;
}

/* attention, silu and argmax have AVX-512 and portable forms only */
static int have_avx512(void) { return level() == CQG_AVX512; }

/* The sum of squares in 16 running double sums, lane u taking elements i = u mod 16, then
 * added pairwise in a fixed order: every square of a float is exact in double, so the
 * vector path and the portable one give the same sum, bit for bit. sumsq_finish adds
 * elements [i, dim) to their lanes of s and folds the lanes. */
static double sumsq_finish(double s[16], const float *x, int32_t i, int32_t dim) {
    for (; i < dim; i++) s[i % 16] += (double)x[i] * x[i];
    for (int w = 8; w >= 1; w /= 2)
        for (int u = 0; u < w; u++) s[u] += s[u + w];
    return s[0];
}

__attribute__((target("avx512f,avx512dq,fma"))) static double sumsq_avx512(const float *x,
                                                                          int32_t dim) {
    __m512d a = _mm512_setzero_pd(), b = _mm512_setzero_pd();
    int32_t i = 0;
    for (; i + 16 <= dim; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
        a = _mm512_fmadd_pd(lo, lo, a);   /* exact products: fma = mul + add */
        b = _mm512_fmadd_pd(hi, hi, b);
    }
    double s[16];
    _mm512_storeu_pd(s, a);
    _mm512_storeu_pd(s + 8, b);
    return sumsq_finish(s, x, i, dim);
}

static double sumsq_portable(const float *x, int32_t dim) {
    double s[16] = {0};
    return sumsq_finish(s, x, 0, dim);
}

/* cgemm_rmsnorm: each element rounded as the portable loops round it */
__attribute__((target("avx512f,avx512dq,fma"))) static void rmsnorm_avx512(
    float *out, float *x, const float *res, const float *w, int32_t dim, float eps) {
    for (int32_t i = 0; res && i < dim; i += 16) {
        __mmask16 k = cgemm_tail16(dim - i);
        _mm512_mask_storeu_ps(x + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + i),
                                                      _mm512_maskz_loadu_ps(k, res + i)));
    }
    __m512 sc = _mm512_set1_ps((float)(1.0 / sqrt(sumsq_avx512(x, dim) / dim + eps)));
    for (int32_t i = 0; i < dim; i += 16) {
        __mmask16 k = cgemm_tail16(dim - i);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), sc);
        _mm512_mask_storeu_ps(out + i, k, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i)));
    }
}

void cgemm_rmsnorm(float *out, float *x, const float *res, const float *w, int32_t dim,
                   float eps) {
    if (have_avx512()) {
        rmsnorm_avx512(out, x, res, w, dim, eps);
        return;
    }
    for (int32_t i = 0; res && i < dim; i++) x[i] += res[i];
    float scale = (float)(1.0 / sqrt(sumsq_portable(x, dim) / dim + eps));
    for (int32_t i = 0; i < dim; i++) out[i] = x[i] * scale * w[i];
}

void cgemm_silu_mul(float *out, const float *gate, const float *up, size_t n) {
    if (have_avx512()) {
        silu_mul_avx512(out, gate, up, n);
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

int32_t cgemm_argmax(const float *v, int32_t n) {
    int32_t r = n >= 16 && have_avx512() ? argmax_avx512(v, n) : -1;
    if (r >= 0) return r;
    r = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[r]) r = i;
    return r;
}

static const char *const kernel_names[] = {"portable", "avx2", "avx512"};

const char *cgemm_kernel(void) { return kernel_names[level()]; }

int cgemm_force(const char *kernel) {
    if (!kernel) {
        cached = -1;
        return 0;
    }
    for (int l = 0; l < 3; l++)
        if (!strcmp(kernel, kernel_names[l])) {
            if (l > cpu_level()) return -1;
            cached = l;
            return 0;
        }
    return -1;
}

void cgemm_force_portable(int on) { cgemm_force(on ? "portable" : NULL); }

int cgemm_qdot_level(void) {
    int cpu = cqd_cpu_level();
    switch (level()) {
    case CQG_AVX512: return cpu;   /* AVX-512 without VNNI runs the AVX2 integer kernel */
    case CQG_AVX2: return cpu < CQD_AVX2 ? cpu : CQD_AVX2;
    default: return CQD_PORTABLE;
    }
}

void cgemm_attn(float *out, const float *q, int32_t g, int32_t hd, const void *const *krow,
                const void *const *vrow, int kv_f16, int32_t n, float scale, float *scores) {
    if (have_avx512() && hd % 16 == 0 && hd <= 256)
        attn_avx512(out, q, g, hd, krow, vrow, kv_f16, n, scale, scores);
    else
        attn_portable(out, q, g, hd, krow, vrow, kv_f16, n, scale, scores);
}

/* Round to nearest even: _mm512_cvtps_ph and dq_f32_to_f16 agree on every finite value
 * and on infinities (NaNs: both quiet, with different payloads). */
__attribute__((target("avx512f"))) static void to_f16_avx512(uint16_t *dst, const float *src,
                                                              int32_t n) {
    int32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = dq_f32_to_f16(src[i]);
}

void cgemm_to_f16(uint16_t *dst, const float *src, int32_t n) {
    if (have_avx512()) to_f16_avx512(dst, src, n);
    else
        for (int32_t i = 0; i < n; i++) dst[i] = dq_f32_to_f16(src[i]);
}

size_t cgemm_packed_elems(int32_t n, int32_t k) {
    return (size_t)((n + PW - 1) / PW) * PW * (size_t)k;
}

void cgemm_pack(float *dst, const float *w, int32_t n, int32_t k) {
    int32_t panels = (n + PW - 1) / PW;
    for (int32_t p = 0; p < panels; p++) {
        float *d = dst + (size_t)p * PW * k;
        const float *src[PW];
        for (int c = 0; c < PW; c++) {
            int32_t r = p * PW + c;
            src[c] = r < n ? w + (size_t)r * k : NULL;
        }
        /* k outer: the panel is written sequentially while its 16 source rows stream in
         * (row by row, every store touched a new cache line: 5x slower on large models) */
        for (int32_t kk = 0; kk < k; kk++, d += PW)
            for (int c = 0; c < PW; c++) d[c] = src[c] ? src[c][kk] : 0.0f;
    }
}

void cgemm_unpack_row(float *dst, const float *wp, int32_t k, int32_t r) {
    const float *s = wp + (size_t)(r / PW) * PW * k + r % PW;
    for (int32_t kk = 0; kk < k; kk++) dst[kk] = s[(size_t)kk * PW];
}

void cgemm_panels(float *y, const float *x, const float *wp, int32_t m, int32_t n, int32_t k,
                  int32_t p_lo, int32_t p_hi, float *scratch) {
    if (level() == CQG_AVX512)
        panels_avx512(y, x, wp, m, n, k, p_lo, p_hi, scratch);
    else if (level() == CQG_AVX2)
        cgemm_avx2_panels(y, x, wp, m, n, k, p_lo, p_hi);
    else
        panels_portable(y, x, wp, m, n, k, p_lo, p_hi);
}

size_t cgemm_qscratch(int32_t m, int32_t k) {
    size_t xp = ((size_t)m * k + 15) & ~(size_t)15;
    return xp + (size_t)PW * k;   /* x packed, and the portable kernel's converted panel */
}

void cgemm_qpanels(float *y, const float *x, const void *wq, uint32_t type, int32_t m,
                   int32_t n, int32_t k, int32_t p_lo, int32_t p_hi, float *scratch) {
    float *wbuf = scratch + (((size_t)m * k + 15) & ~(size_t)15);
    if (level() == CQG_AVX512) {
        pack_blocks(scratch, x, m, k);
        cqg_panels_avx512(y, scratch, wq, type, m, n, k, p_lo, p_hi);
        return;
    }
    if (level() == CQG_AVX2) {
        cgemm_avx2_qpanels(y, x, wq, type, m, n, k, p_lo, p_hi);
        return;
    }
    for (int32_t p = p_lo; p < p_hi; p++) {   /* a whole panel at a time: one k loop */
        cqg_dequant(wbuf, wq, type, k, p, 0, k);
        panel_portable(y, x, wbuf, m, n, k, p);
    }
}

/* cpu_gemm: see cpu_gemm.h. Tiles of 4 weight rows x 4 x rows keep 16 accumulators in
 * registers; a tile at an edge repeats its last valid row (computed, then not stored) so
 * that one kernel body serves every shape. */
#include "engine/cpu/cpu_gemm.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define NR 4
#define MR 4

/* MR_ is a constant at every call site, so each instance keeps its MR_ x NR accumulators
 * in registers with the loops fully unrolled. */
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

AVX512 void tile_avx512(float *y, const float *x, const float *w, const int MR_, int32_t m0,
                        int32_t n0, int32_t nr, int32_t n, int32_t k, const float *pf) {
    const float *xr[MR], *wr[NR];
    for (int i = 0; i < MR_; i++) xr[i] = x + (size_t)(m0 + i) * k;
    for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(n0 + (j < nr ? j : nr - 1)) * k;
    __m512 acc[MR][NR];
#pragma GCC unroll 16
    for (int i = 0; i < MR_; i++)
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) acc[i][j] = _mm512_setzero_ps();
    int32_t kk = 0;
    for (; kk + 16 <= k; kk += 16) {
        __m512 wv[NR];
        /* the next tile's rows (contiguous: NR rows of k) stream in while this one
         * computes; weight rows are too short for the hardware prefetcher to ramp up */
        if (pf)
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) _mm_prefetch((const char *)(pf + (size_t)j * k + kk), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) wv[j] = _mm512_loadu_ps(wr[j] + kk);
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++) {
            __m512 xv = _mm512_loadu_ps(xr[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
    if (kk < k) {
        __mmask16 mask = (__mmask16)((1u << (k - kk)) - 1);
        __m512 wv[NR];
#pragma GCC unroll 4
        for (int j = 0; j < NR; j++) wv[j] = _mm512_maskz_loadu_ps(mask, wr[j] + kk);
#pragma GCC unroll 8
        for (int i = 0; i < MR_; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(mask, xr[i] + kk);
#pragma GCC unroll 4
            for (int j = 0; j < NR; j++) acc[i][j] = _mm512_fmadd_ps(xv, wv[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR_; i++) {
        __m128 s = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        float *yr = y + (size_t)(m0 + i) * n + n0;
        if (nr == NR) {
            _mm_storeu_ps(yr, s);
        } else {
            float t[4];
            _mm_storeu_ps(t, s);
            for (int j = 0; j < nr; j++) yr[j] = t[j];
        }
    }
}

__attribute__((target("avx512f,avx512dq,fma"))) static void rows_avx512(
    float *y, const float *x, const float *w, int32_t m, int32_t n, int32_t k, int32_t n_lo,
    int32_t n_hi) {
    for (int32_t n0 = n_lo; n0 < n_hi; n0 += NR) {
        int32_t nr = n_hi - n0 < NR ? n_hi - n0 : NR, m0 = 0;
        const float *pf = n0 + 2 * NR <= n_hi ? w + (size_t)(n0 + NR) * k : NULL;
        for (; m0 + MR <= m; m0 += MR, pf = NULL) tile_avx512(y, x, w, MR, m0, n0, nr, n, k, pf);
        switch (m - m0) {
        case 1: tile_avx512(y, x, w, 1, m0, n0, nr, n, k, pf); break;
        case 2: tile_avx512(y, x, w, 2, m0, n0, nr, n, k, pf); break;
        case 3: tile_avx512(y, x, w, 3, m0, n0, nr, n, k, pf); break;
        default: break;
        }
    }
}

/* Up to four query heads of a group against four positions at a time: each K vector is
 * loaded once for the heads, and one hsum4 yields four scores. G_ is a constant per call
 * site (registers: 4 G_ accumulators + 4 K vectors). */
AVX512 void attn_scores(float *scores, const float *q, const int G_, int32_t hd,
                        const float *const *krow, int32_t n, float scale) {
    for (int32_t t = 0; t < n; t += 4) {
        const float *k0 = krow[t], *k1 = krow[t + 1 < n ? t + 1 : t],
                    *k2 = krow[t + 2 < n ? t + 2 : t], *k3 = krow[t + 3 < n ? t + 3 : t];
        __m512 acc[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < G_; r++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) acc[r][u] = _mm512_setzero_ps();
        /* K rows are scattered over blocks: fetch the quad after next ahead of use */
        if (t + 8 < n)
            for (int u = 0; u < 4 && t + 8 + u < n; u++)
                for (int32_t d = 0; d < hd; d += 16)
                    _mm_prefetch((const char *)(krow[t + 8 + u] + d), _MM_HINT_T0);
        for (int32_t d = 0; d < hd; d += 16) {
            __m512 kv0 = _mm512_loadu_ps(k0 + d), kv1 = _mm512_loadu_ps(k1 + d);
            __m512 kv2 = _mm512_loadu_ps(k2 + d), kv3 = _mm512_loadu_ps(k3 + d);
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

/* out[r] = sum_t p[r][t] V_t over NV_ x 16 columns from d0; each V vector is loaded once
 * for the heads. G_ and NV_ are constants per call site, so the body has no branches. */
AVX512 void attn_values_cols(float *out, const float *p, const int G_, const int NV_,
                             int32_t hd, int32_t d0, const float *const *vrow, int32_t n) {
    __m512 o[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < G_; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NV_; c++) o[r][c] = _mm512_setzero_ps();
    for (int32_t t = 0; t < n; t++) {
        __m512 v[4];
        if (t + 4 < n)
#pragma GCC unroll 4
            for (int c = 0; c < NV_; c++)
                _mm_prefetch((const char *)(vrow[t + 4] + d0 + 16 * c), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int c = 0; c < NV_; c++) v[c] = _mm512_loadu_ps(vrow[t] + d0 + 16 * c);
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
                        const float *const *vrow, int32_t n) {
    for (int32_t d0 = 0; d0 < hd; d0 += 64) {
        switch (hd - d0 < 64 ? (hd - d0) / 16 : 4) {
        case 1: attn_values_cols(out, p, G_, 1, hd, d0, vrow, n); break;
        case 2: attn_values_cols(out, p, G_, 2, hd, d0, vrow, n); break;
        case 3: attn_values_cols(out, p, G_, 3, hd, d0, vrow, n); break;
        default: attn_values_cols(out, p, G_, 4, hd, d0, vrow, n); break;
        }
    }
}

__attribute__((target("avx512f,avx512dq,fma"))) static void attn_avx512(
    float *out, const float *q, int32_t g, int32_t hd, const float *const *krow,
    const float *const *vrow, int32_t n, float scale, float *scores) {
    for (int32_t r0 = 0; r0 < g; r0 += 4) {
        int32_t G = g - r0 < 4 ? g - r0 : 4;
        const float *qr = q + (size_t)r0 * hd;
        switch (G) {
        case 1: attn_scores(scores, qr, 1, hd, krow, n, scale); break;
        case 2: attn_scores(scores, qr, 2, hd, krow, n, scale); break;
        case 3: attn_scores(scores, qr, 3, hd, krow, n, scale); break;
        default: attn_scores(scores, qr, 4, hd, krow, n, scale); break;
        }
        for (int32_t r = 0; r < G; r++) {   /* stable softmax, normalised in place */
            float *sc = scores + (size_t)r * n, mx = sc[0], sum = 0;
            for (int32_t t = 1; t < n; t++) mx = sc[t] > mx ? sc[t] : mx;
            for (int32_t t = 0; t < n; t++) {
                sc[t] = expf(sc[t] - mx);
                sum += sc[t];
            }
            float inv = 1.0f / sum;
            for (int32_t t = 0; t < n; t++) sc[t] *= inv;
        }
        float *o = out + (size_t)r0 * hd;
        switch (G) {
        case 1: attn_values(o, scores, 1, hd, vrow, n); break;
        case 2: attn_values(o, scores, 2, hd, vrow, n); break;
        case 3: attn_values(o, scores, 3, hd, vrow, n); break;
        default: attn_values(o, scores, 4, hd, vrow, n); break;
        }
    }
}

static void attn_portable(float *out, const float *q, int32_t g, int32_t hd,
                          const float *const *krow, const float *const *vrow, int32_t n,
                          float scale, float *scores) {
    for (int32_t r = 0; r < g; r++) {
        const float *qr = q + (size_t)r * hd;
        float *sc = scores + (size_t)r * n, *o = out + (size_t)r * hd, mx = 0, sum = 0;
        for (int32_t t = 0; t < n; t++) {
            float s = 0;
            for (int32_t d = 0; d < hd; d++) s += qr[d] * krow[t][d];
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
            for (int32_t d = 0; d < hd; d++) o[d] += p * vrow[t][d];
        }
    }
}

typedef float v8f __attribute__((vector_size(32)));

static void tile_portable(float *y, const float *x, const float *w, int32_t m0, int32_t mr,
                          int32_t n0, int32_t nr, int32_t n, int32_t k) {
    const float *xr[MR], *wr[NR];
    for (int i = 0; i < MR; i++) xr[i] = x + (size_t)(m0 + (i < mr ? i : mr - 1)) * k;
    for (int j = 0; j < NR; j++) wr[j] = w + (size_t)(n0 + (j < nr ? j : nr - 1)) * k;
    v8f acc[MR][NR];
    memset(acc, 0, sizeof acc);
    int32_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
        v8f wv[NR];
        for (int j = 0; j < NR; j++) memcpy(&wv[j], wr[j] + kk, sizeof wv[j]);
        for (int i = 0; i < MR; i++) {
            v8f xv;
            memcpy(&xv, xr[i] + kk, sizeof xv);
            for (int j = 0; j < NR; j++) acc[i][j] += xv * wv[j];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float s = 0;
            for (int l = 0; l < 8; l++) s += acc[i][j][l];
            for (int32_t t = kk; t < k; t++) s += xr[i][t] * wr[j][t];
            y[(size_t)(m0 + i) * n + n0 + j] = s;
        }
}

static int have_avx512(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                 __builtin_cpu_supports("fma");
    }
    return cached;
}

const char *cgemm_kernel(void) { return have_avx512() ? "avx512" : "portable"; }

void cgemm_attn(float *out, const float *q, int32_t g, int32_t hd, const float *const *krow,
                const float *const *vrow, int32_t n, float scale, float *scores) {
    if (have_avx512() && hd % 16 == 0 && hd <= 256)
        attn_avx512(out, q, g, hd, krow, vrow, n, scale, scores);
    else
        attn_portable(out, q, g, hd, krow, vrow, n, scale, scores);
}

void cgemm_rows(float *y, const float *x, const float *w, int32_t m, int32_t n, int32_t k,
                int32_t n_lo, int32_t n_hi) {
    if (have_avx512()) {
        rows_avx512(y, x, w, m, n, k, n_lo, n_hi);
        return;
    }
    for (int32_t n0 = n_lo; n0 < n_hi; n0 += NR) {
        int32_t nr = n_hi - n0 < NR ? n_hi - n0 : NR;
        for (int32_t m0 = 0; m0 < m; m0 += MR)
            tile_portable(y, x, w, m0, m - m0 < MR ? m - m0 : MR, n0, nr, n, k);
    }
}

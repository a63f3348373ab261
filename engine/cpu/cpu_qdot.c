/* cpu_qdot: see cpu_qdot.h. The activation quantiser and the portable kernel, which is
 * the definition the vector kernels (cpu_qdot_avx2.c, cpu_qdot_vnni.c) must match bit for
 * bit, and the dispatch. */
#include "engine/cpu/cpu_qdot.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"

#define PW CGEMM_PANEL
#define QK CQD_BLOCK

static size_t up64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t cqd_act_bytes(int32_t m, int32_t k) {
    size_t nb = (size_t)m * (size_t)(k / QK);
    return up64((size_t)m * k) + 2 * up64(nb * 4);
}

void cqd_act_bind(cqd_act_t *a, void *buf, int32_t m, int32_t k) {
    size_t nb = (size_t)m * (size_t)(k / QK);
    a->q = buf;
    a->d = (float *)((char *)buf + up64((size_t)m * k));
    a->s = (int32_t *)((char *)a->d + up64(nb * 4));
    a->m = m;
    a->k = k;
}

static int detect_level(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
        return CQD_VNNI;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        return CQD_AVX2;
    return CQD_PORTABLE;
}

/* Detected once, as cpu_gemm.c's level: every Q8_0/Q4_0 product asks (a decode step makes
 * over a hundred), from the backend's calling thread. */
int cqd_cpu_level(void) {
    static int cached = -1;
    if (cached < 0) cached = detect_level();
    return cached;
}

/* Below this a block counts as zeros: 127 / amax would overflow to infinity near
 * 127 / FLT_MAX, and infinity times a zero is NaN. */
#define TINY 1e-30f

/* One block's scale for its largest magnitude (NaN when not finite); the quantised values
 * are then rint(x (127 / amax)), which the vector form computes with the same two roundings. */
static void quant_block_portable(int8_t *q, float *d, int32_t *s, const float *x) {
    float amax = 0;
    int bad = 0;
    for (int i = 0; i < QK; i++) {
        float v = fabsf(x[i]);
        if (!(v <= INFINITY) || v == INFINITY) bad = 1;
        amax = v > amax ? v : amax;
    }
    int32_t sum = 0;
    if (bad || amax < TINY) {
        memset(q, 0, QK);
        *d = bad ? NAN : 0.0f;
    } else {
        float id = 127.0f / amax;
        for (int i = 0; i < QK; i++) {
            float r = nearbyintf(x[i] * id);
            r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
            q[i] = (int8_t)r;
            sum += q[i];
        }
        *d = amax / 127.0f;
    }
    *s = sum;
}

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

/* As quant_block_portable, 16 lanes at a time: the max, product and rounding
 * (cvtps, round to nearest even under the default MXCSR) are the same IEEE operations. */
AVX512 static void quant_block_avx512(int8_t *q, float *d, int32_t *s, const float *x) {
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 a = _mm512_and_ps(_mm512_loadu_ps(x), absm);
    __m512 b = _mm512_and_ps(_mm512_loadu_ps(x + 16), absm);
    /* not finite: |x| not below infinity (NaN compares false) */
    __mmask16 bad = _mm512_cmp_ps_mask(a, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ) |
                    _mm512_cmp_ps_mask(b, _mm512_set1_ps(INFINITY), _CMP_NLT_UQ);
    float amax = _mm512_reduce_max_ps(_mm512_max_ps(a, b));
    if (bad || amax < TINY) {
        memset(q, 0, QK);
        *d = bad ? NAN : 0.0f;
        *s = 0;
        return;
    }
    __m512 id = _mm512_set1_ps(127.0f / amax), lim = _mm512_set1_ps(127.0f);
    __m512 ra = _mm512_mul_ps(_mm512_loadu_ps(x), id), rb = _mm512_mul_ps(_mm512_loadu_ps(x + 16), id);
    ra = _mm512_max_ps(_mm512_min_ps(ra, lim), _mm512_set1_ps(-127.0f));
    rb = _mm512_max_ps(_mm512_min_ps(rb, lim), _mm512_set1_ps(-127.0f));
    __m512i ia = _mm512_cvtps_epi32(ra), ib = _mm512_cvtps_epi32(rb);
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(ia));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(ib));
    *s = _mm512_reduce_add_epi32(_mm512_add_epi32(ia, ib));
    *d = amax / 127.0f;
}

#define AVX2 __attribute__((target("avx2,fma")))

/* As quant_block_avx512, 8 lanes at a time. One thread, 512 x 576 activations: portable
 * 2.1 ns each, this 0.26, AVX-512 0.16 (the scalar one cost an AVX2 CPU's prefill about a
 * tenth of its products' time). */
AVX2 static void quant_block_avx2(int8_t *q, float *d, int32_t *s, const float *x) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 inf = _mm256_set1_ps(INFINITY);
    __m256 v[4], mx = _mm256_setzero_ps();
    int bad = 0;
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        __m256 a = _mm256_and_ps(v[j], absm);
        bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ));
        mx = _mm256_max_ps(mx, a);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float amax = _mm_cvtss_f32(m4);
    if (bad || amax < TINY) {
        memset(q, 0, QK);
        *d = bad ? NAN : 0.0f;
        *s = 0;
        return;
    }
    __m256 id = _mm256_set1_ps(127.0f / amax), hi = _mm256_set1_ps(127.0f);
    __m256 lo = _mm256_set1_ps(-127.0f);
    __m256i iv[4], sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        __m256 r = _mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(v[j], id), hi), lo);
        iv[j] = _mm256_cvtps_epi32(r);
        sum = _mm256_add_epi32(sum, iv[j]);
    }
    /* int32 -> int8 by two saturating packs (no value saturates: |q| <= 127), which
     * interleave the 128-bit lanes; the permute puts the dwords back in order */
    __m256i p16a = _mm256_packs_epi32(iv[0], iv[1]), p16b = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)q, p8);
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    *s = _mm_cvtsi128_si32(s4);
    *d = amax / 127.0f;
}

void cqd_quantize(cqd_act_t *a, const float *x, int32_t r0, int32_t r1, int level) {
    int32_t nb = a->k / QK;
    for (int32_t r = r0; r < r1; r++)
        for (int32_t b = 0; b < nb; b++) {
            size_t i = (size_t)r * nb + b;
            const float *xb = x + (size_t)r * a->k + (size_t)b * QK;
            int8_t *qb = a->q + (size_t)r * a->k + (size_t)b * QK;
            if (level == CQD_VNNI) quant_block_avx512(qb, a->d + i, a->s + i, xb);
            else if (level == CQD_AVX2) quant_block_avx2(qb, a->d + i, a->s + i, xb);
            else quant_block_portable(qb, a->d + i, a->s + i, xb);
        }
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

void cqd_panels_portable(float *y, const cqd_act_t *a, const void *wq, uint32_t type,
                         int32_t n, int32_t p_lo, int32_t p_hi) {
    int32_t k = a->k, nb = k / QK;
    size_t bb = type == DQ_Q8_0 ? PW * 2 + QK * PW : PW * 2 + QK * PW / 2;
    int32_t off = type == DQ_Q8_0 ? 128 : 8;
    for (int32_t p = p_lo; p < p_hi; p++) {
        const uint8_t *w = (const uint8_t *)wq + (size_t)p * nb * bb;
        for (int c = 0; c < PW && p * PW + c < n; c++)
            for (int32_t r = 0; r < a->m; r++) {
                float acc = 0.0f;
                for (int32_t b = 0; b < nb; b++) {
                    const uint8_t *blk = w + (size_t)b * bb + PW * 2;
                    const int8_t *q = a->q + (size_t)r * k + (size_t)b * QK;
                    int32_t isum = 0;
                    for (int i = 0; i < QK; i++) {
                        int u;
                        if (type == DQ_Q8_0) u = blk[64 * (i / 4) + 4 * c + i % 4];
                        else {
                            uint8_t byte = blk[64 * ((i % 16) / 4) + 4 * c + i % 4];
                            u = i < 16 ? byte & 0x0f : byte >> 4;
                        }
                        isum += u * q[i];
                    }
                    isum -= off * a->s[(size_t)r * nb + b];
                    float dw = dq_f16_to_f32(rd16(w + (size_t)b * bb + 2 * c));
                    acc = fmaf((float)isum, dw * a->d[(size_t)r * nb + b], acc);
                }
                y[(size_t)r * n + (size_t)p * PW + c] = acc;
            }
    }
}

void cqd_panels(float *y, const cqd_act_t *a, const void *wq, uint32_t type, int32_t n,
                int32_t p_lo, int32_t p_hi, int level) {
    if (level == CQD_VNNI) cqd_panels_vnni(y, a, wq, type, n, p_lo, p_hi);
    else if (level == CQD_AVX2) cqd_panels_avx2(y, a, wq, type, n, p_lo, p_hi);
    else cqd_panels_portable(y, a, wq, type, n, p_lo, p_hi);
}

/* test_cpu_qdot: the integer-dot-product products of Q8_0 / Q4_0 matrices with activations
 * quantised per block of 32 (engine/cpu/cpu_qdot.h), on every kernel level the CPU has.
 *
 * The weights are written here as ggml block bytes (Q8_0: fp16 d + 32 int8; Q4_0: fp16 d +
 * 16 bytes, byte j holding step j low and j + 16 high, weight nibble - 8), with random
 * scales of both signs and every code (Q8_0's -128 too), then stored by cqg_pack; the
 * references use cqg_unpack_row's weights, which are first checked against the bytes.
 *
 * Tolerances:
 *  - quantiser: exact (the header's formula evaluated here in fp32), and the AVX-512 form
 *    bit for bit the portable one;
 *  - portable kernel against a double-precision sum of the quantised activations times the
 *    dequantised weights: |y - ref| <= 1e-5 sum |terms| (fp32 accumulation over <= 48
 *    blocks, about 48 * 2^-24 of it);
 *  - against the product with the unquantised activations: the header's bound
 *    sum_b (d_b / 2) sum_i |w_i|, plus 1e-5 sum |x w| for the fp32 roundings;
 *  - every level against the portable one, any row count, any panel range: bit for bit
 *    (memcmp), outputs outside the range untouched; also on the extreme codes (Q8_0 -128 /
 *    127, Q4_0 nibbles 0 / 15 against activations of +-127), where a kernel's narrow
 *    partial sums would saturate. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_qdot.h"
#include "engine/cpu/cpu_qgemm.h"
#include "engine/dequant.h"
#include "tests/testutil.h"

static const char *const LEVEL_NAME[] = {"portable", "avx2", "vnni"};

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint32_t urand(void) {   /* xorshift */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) {   /* uniform in [-1, 1) */
    return (float)(urand() * (1.0 / 2147483648.0) - 1);
}

static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) & ~(size_t)63); }

/* 1 when the level can run here; otherwise one SKIP line per test that wanted it */
static int level_ok(int level, const char *test) {
    if (level <= cqd_cpu_level()) return 1;
    fprintf(stderr, "SKIP: %s: this CPU lacks the %s kernel's instructions\n", test,
            LEVEL_NAME[level]);
    return 0;
}

/* ------------------------------------------------------------------ weights */

typedef struct {
    uint32_t type;
    int32_t n, k;
    uint8_t *ggml;    /* [n] rows of k / 32 blocks in ggml's bytes */
    float *wd;        /* [n][k] the weights the bytes mean */
    void *packed;     /* cqg_pack */
} wmat_t;

static const char *tname(uint32_t type) { return type == DQ_Q8_0 ? "Q8_0" : "Q4_0"; }

/* extreme: codes by (column + block) % 4: all the lowest, all the highest, the two
 * alternating, random (the integer sums' largest magnitudes); else random */
static void wmat_make(wmat_t *w, uint32_t type, int32_t n, int32_t k, int extreme) {
    int32_t nb = k / CQD_BLOCK;
    size_t bb = type == DQ_Q8_0 ? 34 : 18;
    w->type = type;
    w->n = n;
    w->k = k;
    w->ggml = malloc((size_t)n * nb * bb);
    w->wd = malloc((size_t)n * k * sizeof *w->wd);
    for (int32_t r = 0; r < n; r++)
        for (int32_t b = 0; b < nb; b++) {
            uint8_t *blk = w->ggml + ((size_t)r * nb + b) * bb;
            /* scales of both signs over a few octaves (ggml's Q4_0 scales are mostly
             * negative), an occasional zero block */
            float d = frand() * ldexpf(1, -(int)(urand() % 8)) / 64;
            if (urand() % 61 == 0) d = 0;
            uint16_t h = dq_f32_to_f16(d);
            blk[0] = (uint8_t)h;
            blk[1] = (uint8_t)(h >> 8);
            float df = dq_f16_to_f32(h);
            float *row = w->wd + (size_t)r * k + (size_t)b * CQD_BLOCK;
            int pat = extreme ? (r + b) % 4 : 3;
            if (type == DQ_Q8_0)
                for (int j = 0; j < CQD_BLOCK; j++) {
                    int8_t q = (int8_t)(urand() & 0xff);   /* -128 .. 127 */
                    if (pat < 3) q = pat == 0 || (pat == 2 && j % 2) ? -128 : 127;
                    blk[2 + j] = (uint8_t)q;
                    row[j] = df * q;
                }
            else
                for (int j = 0; j < CQD_BLOCK / 2; j++) {
                    uint8_t byte = (uint8_t)(urand() & 0xff);
                    if (pat < 3) byte = pat == 0 ? 0x00 : pat == 1 ? 0xff : j % 2 ? 0xf0 : 0x0f;
                    blk[2 + j] = byte;
                    row[j] = df * ((byte & 0x0f) - 8);
                    row[j + 16] = df * ((byte >> 4) - 8);
                }
        }
    w->packed = alloc64(cqg_elems(type, n, k) * 4);
    ck_assert_msg(w->packed != NULL && cqg_elems(type, n, k) > 0, "%s n %d k %d: no layout",
                  tname(type), n, k);
    cqg_pack(w->packed, w->ggml, type, n, k);
    float *row = malloc((size_t)k * sizeof *row);
    for (int32_t r = 0; r < n; r++) {
        cqg_unpack_row(row, w->packed, type, k, r);
        for (int32_t c = 0; c < k; c++)
            if (memcmp(&row[c], &w->wd[(size_t)r * k + c], 4) != 0)
                ck_abort_msg("%s n %d k %d: cqg_unpack_row(row %d) step %d = %g, the ggml bytes "
                             "mean %g", tname(type), n, k, r, c, row[c], w->wd[(size_t)r * k + c]);
    }
    free(row);
}

static void wmat_free(wmat_t *w) {
    free(w->ggml);
    free(w->wd);
    free(w->packed);
}

/* ------------------------------------------------------------------ activations */

typedef struct {
    cqd_act_t a;
    void *buf;
} act_t;

static void act_make(act_t *t, const float *x, int32_t m, int32_t k, int level) {
    t->buf = alloc64(cqd_act_bytes(m, k));
    cqd_act_bind(&t->a, t->buf, m, k);
    cqd_quantize(&t->a, x, 0, m, level);
}

static void act_free(act_t *t) { free(t->buf); }

/* rows of different magnitudes, some blocks with one large value (outliers, as in real
 * activations), so that block scales differ */
static void fill_x(float *x, int32_t m, int32_t k) {
    for (int32_t r = 0; r < m; r++) {
        float mag = ldexpf(1, (int)(urand() % 9) - 4);
        for (int32_t c = 0; c < k; c++) x[(size_t)r * k + c] = frand() * mag;
        for (int32_t b = 0; b < k / CQD_BLOCK; b++)
            if (urand() % 5 == 0) x[(size_t)r * k + b * CQD_BLOCK + urand() % 32] = 20 * mag;
    }
}

/* blocks by (row + block) % 3: all +1 (q = 127), all -1, alternating signs */
static void fill_x_extreme(float *x, int32_t m, int32_t k) {
    for (int32_t r = 0; r < m; r++)
        for (int32_t c = 0; c < k; c++) {
            int pat = (r + c / CQD_BLOCK) % 3;
            x[(size_t)r * k + c] = pat == 0 ? 1.0f : pat == 1 ? -1.0f : c % 2 ? -1.0f : 1.0f;
        }
}

/* ------------------------------------------------------------------ 1. quantiser */

/* One block as the header defines it, evaluated independently; 1 when it matches. */
static int block_matches(const int8_t *q, float d, int32_t s, const float *x, char *why,
                         size_t len) {
    float amax = 0;
    int bad = 0;
    for (int i = 0; i < CQD_BLOCK; i++) {
        if (!isfinite(x[i])) bad = 1;
        else amax = fmaxf(amax, fabsf(x[i]));
    }
    int32_t sum = 0;
    for (int i = 0; i < CQD_BLOCK; i++) {
        int want = 0;
        if (!bad && amax >= 1e-30f) {   /* below: zeros (the header's rule) */
            float r = nearbyintf(x[i] * (127.0f / amax));
            want = (int)fmaxf(-127.0f, fminf(127.0f, r));
        }
        if (q[i] != want) {
            snprintf(why, len, "q[%d] = %d for x %.9g (amax %.9g), want %d", i, q[i], x[i], amax,
                     want);
            return 0;
        }
        if (q[i] < -127) {
            snprintf(why, len, "q[%d] = %d out of range", i, q[i]);
            return 0;
        }
        sum += q[i];
    }
    if (s != sum) {
        snprintf(why, len, "s = %d, sum of q = %d", s, sum);
        return 0;
    }
    float wd = bad ? NAN : amax < 1e-30f ? 0.0f : amax / 127.0f;
    if (bad ? !isnan(d) : memcmp(&d, &wd, 4) != 0) {
        snprintf(why, len, "d = %.9g, want %.9g", d, wd);
        return 0;
    }
    return 1;
}

/* Blocks that exercise the rules: random, ties, zero, -0, NaN, infinities, one nonzero. */
#define QROWS 3
#define QK 1024
static void special_rows(float *x) {
    fill_x(x, QROWS, QK);
    float *b = x;   /* block 0: amax 127, so 127 / amax = 1 and x.5 are exact ties */
    for (int i = 0; i < 32; i++) b[i] = (float)(i - 16) + 0.5f;
    b[31] = 127;
    b += 32;   /* block 1: zeros */
    memset(b, 0, 32 * sizeof *b);
    b += 32;   /* block 2: negative zeros */
    for (int i = 0; i < 32; i++) b[i] = -0.0f;
    b += 32;   /* block 3: a NaN */
    b[7] = NAN;
    b += 32;   /* block 4: +inf */
    b[31] = INFINITY;
    b += 32;   /* block 5: -inf, among zeros */
    memset(b, 0, 32 * sizeof *b);
    b[0] = -INFINITY;
    b += 32;   /* block 6: one nonzero */
    memset(b, 0, 32 * sizeof *b);
    b[13] = -3.25e-3f;
    b += 32;   /* block 7: the largest magnitude negative, ties at half steps of amax / 127 */
    for (int i = 0; i < 32; i++) b[i] = (float)(i - 20) * 2.5f;
    b[0] = -254;
    b += 32;   /* block 8: huge values (127 / amax stays normal) */
    for (int i = 0; i < 32; i++) b[i] = frand() * 3e38f;
    b += 32;   /* block 9: small normal values */
    for (int i = 0; i < 32; i++) b[i] = frand() * 1e-28f;
    b += 32;   /* block 10: amax at the header's threshold: quantised */
    for (int i = 0; i < 32; i++) b[i] = frand() * 1e-30f;
    b[3] = -1e-30f;
    b += 32;   /* block 11: amax just under it: zeros */
    for (int i = 0; i < 32; i++) b[i] = frand() * 1e-31f;
    b[30] = nextafterf(1e-30f, 0);
}

START_TEST(quantiser_follows_the_header) {
    float *x = malloc((size_t)QROWS * QK * sizeof *x);
    special_rows(x);
    int32_t nb = QK / CQD_BLOCK;
    act_t ref;
    act_make(&ref, x, QROWS, QK, CQD_PORTABLE);
    char why[200];
    for (int32_t r = 0; r < QROWS; r++)
        for (int32_t b = 0; b < nb; b++) {
            size_t i = (size_t)r * nb + b;
            if (!block_matches(ref.a.q + (size_t)r * QK + b * 32, ref.a.d[i], ref.a.s[i],
                               x + (size_t)r * QK + b * 32, why, sizeof why))
                ck_abort_msg("portable quantiser, row %d block %d: %s", r, b, why);
        }
    /* rows [1, 3) only (the backend splits rows over threads): row 0 untouched */
    for (int level = CQD_PORTABLE; level <= cqd_cpu_level(); level++) {
        act_t part;
        part.buf = alloc64(cqd_act_bytes(QROWS, QK));
        memset(part.buf, 0x5a, cqd_act_bytes(QROWS, QK));
        cqd_act_bind(&part.a, part.buf, QROWS, QK);
        cqd_quantize(&part.a, x, 1, QROWS, level);
        for (int32_t i = 0; i < QK; i++)
            ck_assert_msg(part.a.q[i] == 0x5a, "%s cqd_quantize rows [1, 3) wrote row 0's q[%d]",
                          LEVEL_NAME[level], i);
        for (int32_t i = 0; i < nb; i++)
            ck_assert_msg(!memcmp(&part.a.s[i], "\x5a\x5a\x5a\x5a", 4),
                          "%s cqd_quantize rows [1, 3) wrote row 0's s[%d]", LEVEL_NAME[level], i);
        ck_assert_msg(!memcmp(part.a.q + QK, ref.a.q + QK, (size_t)(QROWS - 1) * QK),
                      "%s cqd_quantize rows [1, 3): q differs from the portable one's, all rows",
                      LEVEL_NAME[level]);
        act_free(&part);
    }
    /* the vector levels: bit for bit the portable quantiser (a NaN scale as any NaN) */
    for (int level = CQD_AVX2; level <= CQD_VNNI; level++) {
        if (!level_ok(level, "quantiser")) continue;
        act_t v;
        act_make(&v, x, QROWS, QK, level);
        for (int32_t r = 0; r < QROWS; r++)
            for (int32_t b = 0; b < nb; b++) {
                size_t i = (size_t)r * nb + b;
                size_t at = (size_t)r * QK + b * 32;
                int dsame = isnan(ref.a.d[i]) ? isnan(v.a.d[i])
                                              : !memcmp(&v.a.d[i], &ref.a.d[i], 4);
                if (memcmp(v.a.q + at, ref.a.q + at, 32) || !dsame || v.a.s[i] != ref.a.s[i])
                    ck_abort_msg("%s quantiser, row %d block %d: differs from the portable one "
                                 "(d %.9g vs %.9g, s %d vs %d)", LEVEL_NAME[level], r, b,
                                 v.a.d[i], ref.a.d[i], v.a.s[i], ref.a.s[i]);
            }
        act_free(&v);
    }
    act_free(&ref);
    free(x);
}
END_TEST

/* Blocks whose largest magnitude is under 127 / FLT_MAX (about 3.7e-37), where 127 / amax
 * would overflow to infinity (x (127 / amax) +-inf, or NaN for a zero): the header counts
 * blocks under 1e-30 as zeros, and every level must agree. */
START_TEST(quantiser_tiny_blocks) {
    float x[4 * 32];
    for (int i = 0; i < 32; i++) x[i] = frand() * 1e-37f;   /* normal, tiny */
    for (int i = 0; i < 32; i++) x[32 + i] = i % 3 ? 0.0f : frand() * 1e-38f;   /* with zeros */
    for (int i = 0; i < 32; i++) x[64 + i] = i % 2 ? 0.0f : ldexpf(frand(), -140);   /* subnormal */
    for (int i = 0; i < 32; i++) x[96 + i] = 0;
    x[96 + 5] = 1.4e-45f;   /* the smallest subnormal alone */
    act_t ref;
    act_make(&ref, x, 1, 128, CQD_PORTABLE);
    for (int b = 0; b < 4; b++) {
        for (int i = 0; i < 32; i++)
            ck_assert_msg(ref.a.q[b * 32 + i] == 0, "portable, tiny block %d: q[%d] = %d, not 0",
                          b, i, ref.a.q[b * 32 + i]);
        ck_assert_msg(ref.a.s[b] == 0 && ref.a.d[b] == 0 && !signbit(ref.a.d[b]),
                      "portable, tiny block %d: s = %d, d = %g, not zeros", b, ref.a.s[b],
                      ref.a.d[b]);
    }
    for (int level = CQD_AVX2; level <= CQD_VNNI; level++) {
        if (!level_ok(level, "quantiser_tiny_blocks")) continue;
        act_t v;
        act_make(&v, x, 1, 128, level);
        for (int b = 0; b < 4; b++) {
            for (int i = 0; i < 32; i++)
                if (v.a.q[b * 32 + i] != ref.a.q[b * 32 + i])
                    ck_abort_msg("%s quantiser, tiny block %d (amax < 127 / FLT_MAX): q[%d] = %d "
                                 "for x %g, portable %d", LEVEL_NAME[level], b, i,
                                 v.a.q[b * 32 + i], x[b * 32 + i], ref.a.q[b * 32 + i]);
            if (v.a.s[b] != ref.a.s[b] || memcmp(&v.a.d[b], &ref.a.d[b], 4))
                ck_abort_msg("%s quantiser, tiny block %d: s %d d %g, portable s %d d %g",
                             LEVEL_NAME[level], b, v.a.s[b], v.a.d[b], ref.a.s[b], ref.a.d[b]);
        }
        act_free(&v);
    }
    act_free(&ref);
}
END_TEST

/* ------------------------------------------------------------------ 2, 3. references */

static void check_range(const act_t *t, const wmat_t *w, const float *ref, int level,
                        int32_t p0, int32_t p1);

/* extreme: the codes and activations with the largest integer sums (wmat_make,
 * fill_x_extreme), and every level against the portable kernel too */
static void check_references(uint32_t type, int32_t m, int32_t n, int32_t k, int extreme) {
    wmat_t w;
    wmat_make(&w, type, n, k, extreme);
    int32_t nb = k / CQD_BLOCK, np = (n + 15) / 16;
    float *x = malloc((size_t)m * k * sizeof *x), *y = malloc((size_t)m * n * sizeof *y);
    if (extreme) fill_x_extreme(x, m, k);
    else fill_x(x, m, k);
    act_t t;
    act_make(&t, x, m, k, CQD_PORTABLE);
    cqd_panels_portable(y, &t.a, w.packed, type, n, 0, np);
    for (int32_t r = 0; r < m; r++)
        for (int32_t c = 0; c < n; c++) {
            const float *wr = w.wd + (size_t)c * k, *xr = x + (size_t)r * k;
            const int8_t *qr = t.a.q + (size_t)r * k;
            double ref = 0, mag = 0, exact = 0, xmag = 0, bound = 0;
            for (int32_t b = 0; b < nb; b++) {
                double da = t.a.d[(size_t)r * nb + b], wsum = 0;
                for (int i = b * 32; i < b * 32 + 32; i++) {
                    double term = da * qr[i] * wr[i];
                    ref += term;
                    mag += fabs(term);
                    exact += (double)xr[i] * wr[i];
                    xmag += fabs((double)xr[i] * wr[i]);
                    wsum += fabs(wr[i]);
                }
                bound += da / 2 * wsum;
            }
            double got = y[(size_t)r * n + c];
            if (!(fabs(got - ref) <= 1e-5 * mag + 1e-30))
                ck_abort_msg("%s m %d n %d k %d: portable y[%d][%d] = %.9g, double reference on "
                             "the quantised activations %.9g (tolerance %.3g)", tname(type), m, n,
                             k, r, c, got, ref, 1e-5 * mag);
            if (!(fabs(got - exact) <= bound + 1e-5 * xmag + 1e-30))
                ck_abort_msg("%s m %d n %d k %d: y[%d][%d] = %.9g, unquantised activations give "
                             "%.9g: error %.3g over the header's bound %.3g", tname(type), m, n, k,
                             r, c, got, exact, fabs(got - exact), bound);
        }
    for (int level = CQD_AVX2; extreme && level <= CQD_VNNI; level++)
        if (level_ok(level, "extreme codes")) check_range(&t, &w, y, level, 0, np);
    act_free(&t);
    free(x);
    free(y);
    wmat_free(&w);
}

START_TEST(portable_matches_double_reference) {
    static const int32_t shapes[][3] = {{1, 16, 32}, {3, 24, 64}, {5, 40, 576}, {2, 17, 1504},
                                        {4, 33, 1536}, {9, 8, 96}};
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
            check_references(t ? DQ_Q4_0 : DQ_Q8_0, shapes[i][0], shapes[i][1], shapes[i][2], 0);
}
END_TEST

/* Q8_0 codes -128 and 127, Q4_0 nibbles 0 and 15, activations +-127 in every combination:
 * the integer sums a kernel could saturate or overflow (an AVX2 kernel's int16 pairs) */
START_TEST(extreme_codes) {
    for (int t = 0; t < 2; t++) {
        check_references(t ? DQ_Q4_0 : DQ_Q8_0, 12, 64, 384, 1);
        check_references(t ? DQ_Q4_0 : DQ_Q8_0, 1, 24, 1536, 1);
        check_references(t ? DQ_Q4_0 : DQ_Q8_0, 5, 45, 256, 1);
    }
}
END_TEST

/* ------------------------------------------------------------------ 4, 5. levels */

static const uint32_t SENT = 0x7fa5a5a5u;   /* a NaN no kernel produces */

/* y [m][n] + 16 guard floats, filled with the sentinel */
static float *ybuf(int32_t m, int32_t n) {
    size_t e = (size_t)m * n + 16;
    float *y = malloc(e * sizeof *y);
    for (size_t i = 0; i < e; i++) memcpy(&y[i], &SENT, 4);
    return y;
}

static int is_sent(const float *v) { return !memcmp(v, &SENT, 4); }

/* y from the level over panels [p0, p1): those columns equal ref's, the rest and the guard
 * untouched */
static void check_range(const act_t *t, const wmat_t *w, const float *ref, int level,
                        int32_t p0, int32_t p1) {
    int32_t m = t->a.m, n = w->n;
    float *y = ybuf(m, n);
    cqd_panels(y, &t->a, w->packed, w->type, n, p0, p1, level);
    for (int32_t r = 0; r < m; r++)
        for (int32_t c = 0; c < n; c++) {
            const float *g = &y[(size_t)r * n + c];
            int in = c / 16 >= p0 && c / 16 < p1;
            if (in && memcmp(g, &ref[(size_t)r * n + c], 4) != 0)
                ck_abort_msg("%s kernel, %s m %d n %d k %d panels [%d, %d): y[%d][%d] = %.9g, the "
                             "portable kernel gives %.9g", LEVEL_NAME[level],
                             tname(w->type), m, n, w->k, p0, p1, r, c, *g, ref[(size_t)r * n + c]);
            if (!in && !is_sent(g))
                ck_abort_msg("%s kernel, %s m %d n %d k %d panels [%d, %d): wrote y[%d][%d] = %.9g "
                             "outside the range", LEVEL_NAME[level], tname(w->type), m, n, w->k, p0,
                             p1, r, c, *g);
        }
    for (int i = 0; i < 16; i++)
        if (!is_sent(&y[(size_t)m * n + i]))
            ck_abort_msg("%s kernel, %s m %d n %d k %d panels [%d, %d): wrote %d floats past y",
                         LEVEL_NAME[level], tname(w->type), m, n, w->k, p0, p1, i + 1);
    free(y);
}

/* _i: the level. Every m of the grid on every (n, k): full range, the last (tail) panel, a
 * middle run and an empty range; and for batch invariance, each row alone. */
START_TEST(levels_match_portable) {
    int level = _i;
    if (!level_ok(level, "levels_match_portable")) return;
    static const int32_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 17, 32, 33, 64};
    /* 24 and 200 end in a panel of 8 columns (an AVX2 half), 3, 20, 45 in partial halves */
    static const int32_t ns[] = {3, 16, 20, 24, 45, 200, 576};
    static const int32_t ks[] = {32, 64, 576, 1504, 1536};
    const int32_t nm = sizeof ms / sizeof *ms, mmax = 64;
    for (int t = 0; t < 2; t++)
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
                uint32_t type = t ? DQ_Q4_0 : DQ_Q8_0;
                int32_t n = ns[ni], k = ks[ki], np = (n + 15) / 16;
                wmat_t w;
                wmat_make(&w, type, n, k, 0);
                float *x = malloc((size_t)mmax * k * sizeof *x);
                fill_x(x, mmax, k);
                /* portable per row once: rows alone are the batch invariance reference */
                float *ref1 = malloc((size_t)mmax * n * sizeof *ref1);
                for (int32_t r = 0; r < mmax; r++) {
                    act_t t1;
                    act_make(&t1, x + (size_t)r * k, 1, k, CQD_PORTABLE);
                    cqd_panels_portable(ref1 + (size_t)r * n, &t1.a, w.packed, type, n, 0, np);
                    act_free(&t1);
                }
                for (int32_t mi = 0; mi < nm; mi++) {
                    int32_t m = ms[mi];
                    act_t tm, tp;
                    act_make(&tm, x, m, k, level);
                    act_make(&tp, x, m, k, CQD_PORTABLE);
                    size_t nbk = (size_t)m * (k / CQD_BLOCK);
                    if (memcmp(tm.a.q, tp.a.q, (size_t)m * k) ||
                        memcmp(tm.a.d, tp.a.d, nbk * 4) || memcmp(tm.a.s, tp.a.s, nbk * 4))
                        ck_abort_msg("%s quantiser, m %d k %d: differs from the portable one",
                                     LEVEL_NAME[level], m, k);
                    act_free(&tp);
                    /* ref1's first m rows are the m-row reference: equality is both item 4
                     * (the portable kernel's floats) and item 5 (each row as if alone) */
                    check_range(&tm, &w, ref1, level, 0, np);
                    /* the sub-ranges on a subset of m (each costs up to a full range) */
                    if (m <= 9 || m == 33) {
                        check_range(&tm, &w, ref1, level, np - 1, np);
                        check_range(&tm, &w, ref1, level, np / 3, np / 3 + (np + 2) / 3);
                        check_range(&tm, &w, ref1, level, np / 2, np / 2);
                    }
                    /* the level's own rows alone */
                    if (level != CQD_PORTABLE && (m == 64 || m == 7)) {
                        float *y1 = ybuf(1, n);
                        for (int32_t r = 0; r < m; r++) {
                            act_t t1;
                            act_make(&t1, x + (size_t)r * k, 1, k, level);
                            cqd_panels(y1, &t1.a, w.packed, type, n, 0, np, level);
                            act_free(&t1);
                            if (memcmp(y1, ref1 + (size_t)r * n, (size_t)n * 4))
                                ck_abort_msg("%s kernel, %s m 1 n %d k %d: row %d alone differs "
                                             "from the portable row", LEVEL_NAME[level],
                                             tname(type), n, k, r);
                        }
                        free(y1);
                    }
                    act_free(&tm);
                }
                free(ref1);
                free(x);
                wmat_free(&w);
            }
}
END_TEST

/* ------------------------------------------------------------------ 6. NaN */

START_TEST(nan_block_poisons_its_row) {
    int level = _i;
    if (!level_ok(level, "nan_block_poisons_its_row")) return;
    const int32_t m = 5, n = 40, k = 256, np = 3;
    for (int t = 0; t < 2; t++)
        for (int kind = 0; kind < 2; kind++) {
            uint32_t type = t ? DQ_Q4_0 : DQ_Q8_0;
            wmat_t w;
            wmat_make(&w, type, n, k, 0);
            float x[5 * 256];
            fill_x(x, m, k);
            x[2 * k + 3 * 32 + 17] = kind ? INFINITY : NAN;   /* row 2, block 3 */
            act_t tm;
            act_make(&tm, x, m, k, level);
            float *y = ybuf(m, n);
            cqd_panels(y, &tm.a, w.packed, type, n, 0, np, level);
            for (int32_t r = 0; r < m; r++)
                for (int32_t c = 0; c < n; c++) {
                    float v = y[(size_t)r * n + c];
                    if (r == 2 ? !isnan(v) : !isfinite(v))
                        ck_abort_msg("%s kernel, %s, %s in row 2 block 3: y[%d][%d] = %g",
                                     LEVEL_NAME[level], tname(type), kind ? "inf" : "NaN", r, c, v);
                }
            free(y);
            act_free(&tm);
            wmat_free(&w);
        }
}
END_TEST

static Suite *qdot_suite(void) {
    Suite *s = suite_create("cpu_qdot");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantiser_follows_the_header);
    tcase_add_test(tc, quantiser_tiny_blocks);
    tcase_add_test(tc, portable_matches_double_reference);
    tcase_add_test(tc, extreme_codes);
    tcase_add_loop_test(tc, levels_match_portable, CQD_PORTABLE, CQD_VNNI + 1);
    tcase_add_loop_test(tc, nan_block_poisons_its_row, CQD_PORTABLE, CQD_VNNI + 1);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return testutil_run(qdot_suite()); }

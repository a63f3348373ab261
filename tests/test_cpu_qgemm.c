/* test_cpu_qgemm: matrices kept in a stored type (F16, BF16, Q8_0, Q4_0) on the CPU: the
 * layout of all four, and the products of F16 / BF16 (fp32 activations) on every kernel
 * (the CPU's own; AVX2 and the portable one forced). Q8_0 / Q4_0 products quantise the
 * activations and run cpu_qdot's integer kernels (test_cpu_qdot checks those against their
 * references); here only what the whole chain costs, and the backend's use of it.
 *
 * Tolerances, per type:
 *  - F16 / BF16 against the dequantise-then-fp32 path (the same matrix dequantised by
 *    dq_convert and multiplied by the fp32 kernel): 0, bit for bit: dequantisation is exact
 *    and the kernels sum in the same order;
 *  - F16 / BF16 against a double-precision product with the dequantised weights: relative
 *    error (norm of the difference over norm of the reference) under 1e-5;
 *  - against the original fp32 weights (what quantising costs), per output
 *    |y - y_fp32| <= sum_k |x_k| e_k + a + 1e-4 sum_k |x_k w_k|, with e_k the type's rounding
 *    bound for that weight: F16 |w| 2^-11 (normal range), BF16 |w| 2^-8, Q8_0 d / 2 and
 *    Q4_0 d (d the block's scale; ggml's Q4_0 clamps the top code, so up to a whole step);
 *    a = 0 for F16 / BF16, and for Q8_0 / Q4_0 the activations' rounding bound
 *    sum_b (d_b / 2) sum_k |w'_k| (cpu_qdot.h; w' the dequantised weights).
 * Also: rows of a batch equal the same rows alone (batch invariance), aligned row slices
 * and concatenations of stored matrices are offsets (the forward pass's fused Q/K/V and
 * gate/up), cqg_unpack_row gives the dequantised weights (all four types), the backend's
 * upload_qmatrix/matmul_q (bit for bit the single-threaded kernels) and its refusals, and
 * --weights f32 leaving the stored-type ops out; and the AVX2 products (fp32, F16, BF16)
 * bit for bit the AVX-512 ones. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_qdot.h"
#include "engine/cpu/cpu_qgemm.h"
#include "engine/dequant.h"
#include "tests/testutil.h"

static const uint32_t TYPES[] = {DQ_F16, DQ_BF16, DQ_Q8_0, DQ_Q4_0};
#define NTYPES 4

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static float frand(void) {   /* xorshift: uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

typedef struct {
    int32_t n, k;
    uint32_t type;
    float *w;        /* [n][k] original fp32 */
    uint8_t *q;      /* [n][k] in the type's ggml bytes */
    float *wd;       /* dequantised */
    void *packed;    /* cqg_pack */
    float *fp;       /* wd packed for the fp32 kernel */
} mat_t;

static void mat_make(mat_t *a, uint32_t type, int32_t n, int32_t k) {
    a->n = n;
    a->k = k;
    a->type = type;
    size_t e = (size_t)n * k;
    uint64_t bytes;
    ck_assert_int_eq(dq_bytes(type, e, &bytes), 0);
    a->w = malloc(e * sizeof *a->w);
    a->q = malloc(bytes);
    a->wd = malloc(e * sizeof *a->wd);
    a->packed = aligned_alloc(64, (cqg_elems(type, n, k) * 4 + 63) & ~(size_t)63);
    a->fp = aligned_alloc(64, (cgemm_packed_elems(n, k) * 4 + 63) & ~(size_t)63);
    /* rows of different magnitudes, so that block scales differ */
    for (int32_t r = 0; r < n; r++)
        for (int32_t c = 0; c < k; c++) a->w[(size_t)r * k + c] = frand() * (float)(1 + r % 5);
    dq_quantize(type, a->w, a->q, e);
    dq_convert(type, a->q, a->wd, e);
    cqg_pack(a->packed, a->q, type, n, k);
    cgemm_pack(a->fp, a->wd, n, k);
}

static void mat_free(mat_t *a) {
    free(a->w);
    free(a->q);
    free(a->wd);
    free(a->packed);
    free(a->fp);
}

static int int_dot(uint32_t type) { return type == DQ_Q8_0 || type == DQ_Q4_0; }

/* y [m][n] = x w^T through the stored-type kernel, all panels, on one thread: F16 / BF16
 * the fp32 kernels; Q8_0 / Q4_0 x quantised, then the integer kernel of the CPU's level
 * (every level gives the same floats: test_cpu_qdot) */
static void qmul(float *y, const float *x, const mat_t *a, int32_t m) {
    if (int_dot(a->type)) {
        void *buf = aligned_alloc(64, (cqd_act_bytes(m, a->k) + 63) & ~(size_t)63);
        cqd_act_t act;
        cqd_act_bind(&act, buf, m, a->k);
        cqd_quantize(&act, x, 0, m, cqd_cpu_level());
        cqd_panels(y, &act, a->packed, a->type, a->n, 0, (a->n + 15) / 16, cqd_cpu_level());
        free(buf);
        return;
    }
    float *s = aligned_alloc(64, (cgemm_qscratch(m, a->k) * 4 + 63) & ~(size_t)63);
    cgemm_qpanels(y, x, a->packed, a->type, m, a->n, a->k, 0, (a->n + 15) / 16, s);
    free(s);
}

/* the activations' rounding bound of row i against stored row j (cpu_qdot.h):
 * sum_b (d_b / 2) sum |w'| with d_b = max |x| / 127 over block b */
static double act_bound(const float *x, const mat_t *a, int32_t j) {
    double bound = 0;
    for (int32_t b0 = 0; b0 < a->k; b0 += 32) {
        double amax = 0, wsum = 0;
        for (int c = b0; c < b0 + 32; c++) {
            amax = fmax(amax, fabs(x[c]));
            wsum += fabs(a->wd[(size_t)j * a->k + c]);
        }
        bound += amax / 127 / 2 * wsum;
    }
    return bound;
}

static void f32mul(float *y, const float *x, const mat_t *a, int32_t m) {
    float *s = aligned_alloc(64, ((size_t)m * a->k * 4 + 63) & ~(size_t)63);
    cgemm_panels(y, x, a->fp, m, a->n, a->k, 0, (a->n + 15) / 16, s);
    free(s);
}

/* e_k: the rounding bound of weight (r, c) in its type */
static double round_bound(const mat_t *a, int32_t r, int32_t c) {
    double w = fabs(a->w[(size_t)r * a->k + c]);
    if (a->type == DQ_F16) return w * ldexp(1, -11) + ldexp(1, -25);
    if (a->type == DQ_BF16) return w * ldexp(1, -8);
    int32_t b0 = c / 32 * 32;
    double amax = 0;
    for (int j = 0; j < 32; j++) amax = fmax(amax, fabs(a->w[(size_t)r * a->k + b0 + j]));
    /* the fp16 scale's own rounding adds 2^-11 of the largest value */
    return a->type == DQ_Q8_0 ? amax / 127 / 2 + amax * ldexp(1, -10) : amax / 8 + amax * ldexp(1, -9);
}

static void check_one(uint32_t type, int32_t m, int32_t n, int32_t k) {
    mat_t a;
    mat_make(&a, type, n, k);
    float *x = malloc((size_t)m * k * sizeof *x), *y = malloc((size_t)m * n * sizeof *y);
    float *yf = malloc((size_t)m * n * sizeof *yf), *y1 = malloc((size_t)n * sizeof *y1);
    for (size_t i = 0; i < (size_t)m * k; i++) x[i] = frand();
    qmul(y, x, &a, m);
    f32mul(yf, x, &a, m);
    if (!int_dot(type) && memcmp(y, yf, (size_t)m * n * sizeof *y) != 0)
        ck_abort_msg("%s m %d n %d k %d (%s): differs from the fp32 kernel on the dequantised "
                     "matrix", dq_type_name(type), m, n, k, cgemm_kernel());
    double d = 0, r2 = 0;
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = 0; j < n; j++) {
            double ref = 0, orig = 0, bound = 0, mag = 0;
            for (int32_t c = 0; c < k; c++) {
                double xv = x[(size_t)i * k + c];
                ref += xv * a.wd[(size_t)j * k + c];
                orig += xv * a.w[(size_t)j * k + c];
                bound += fabs(xv) * round_bound(&a, j, c);
                mag += fabs(xv * a.w[(size_t)j * k + c]);
            }
            if (int_dot(type)) bound += act_bound(x + (size_t)i * k, &a, j);
            double got = y[(size_t)i * n + j];
            d += (got - ref) * (got - ref);
            r2 += ref * ref;
            if (fabs(got - orig) > bound + 1e-4 * mag)
                ck_abort_msg("%s m %d n %d k %d: y[%d][%d] = %g, fp32 weights give %g (bound %g)",
                             dq_type_name(type), m, n, k, i, j, got, orig, bound);
        }
    if (!int_dot(type) && sqrt(d) / (sqrt(r2) + 1e-30) > 1e-5)
        ck_abort_msg("%s m %d n %d k %d: relative error %g", dq_type_name(type), m, n, k,
                     sqrt(d) / sqrt(r2));
    /* batch invariance: each row alone gives the batch's row */
    for (int32_t i = 0; i < m; i += m > 4 ? 3 : 1) {
        qmul(y1, x + (size_t)i * k, &a, 1);
        if (memcmp(y1, y + (size_t)i * n, (size_t)n * sizeof *y1) != 0)
            ck_abort_msg("%s m %d: row %d alone differs", dq_type_name(type), m, i);
    }
    free(x);
    free(y);
    free(yf);
    free(y1);
    mat_free(&a);
}

/* _i: 0 the CPU's own kernel, 1 the portable one, 2 AVX2 (where the CPU has it); Q8_0 /
 * Q4_0 once (cgemm_force does not choose their kernels) */
START_TEST(qmatmul_matches_references) {
    if (cgemm_force(_i == 0 ? NULL : _i == 1 ? "portable" : "avx2") != 0) {
        fprintf(stderr, "SKIP: this CPU has no AVX2 + FMA + F16C: the AVX2 kernel is untested\n");
        return;
    }
    static const int32_t ms[] = {1, 2, 3, 4, 5, 6, 7, 12, 13, 30};
    static const int32_t nk[][2] = {{16, 32}, {40, 64}, {3, 96}, {33, 320}, {64, 160}};
    for (int t = 0; t < (_i == 0 ? NTYPES : 2); t++)
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
            for (size_t b = 0; b < sizeof nk / sizeof *nk; b++)
                check_one(TYPES[t], ms[a], nk[b][0], nk[b][1]);
    /* 16-bit types take any k, and chunks that end inside a k of several chunks */
    check_one(DQ_F16, 3, 20, 7);
    check_one(DQ_BF16, 9, 17, 300);
    check_one(DQ_F16, 1, 48, 1024);
    check_one(DQ_BF16, 14, 48, 544);
    if (_i == 0) {
        check_one(DQ_Q8_0, 1, 48, 1024);
        check_one(DQ_Q4_0, 14, 48, 544);
    }
    cgemm_force_portable(0);
}
END_TEST

/* the first output where a and b differ, -1 where none does */
static long first_diff(const float *a, const float *b, size_t count) {
    for (size_t i = 0; i < count; i++)
        if (memcmp(a + i, b + i, sizeof *a) != 0) return (long)i;
    return -1;
}

/* The AVX2 products equal the AVX-512 ones bit for bit (both sum every output as one
 * in-order FMA chain over k from zero, whatever their tiles and k chunks): fp32 over
 * arbitrary weights, and F16 / BF16. Rows 1..7 (one row block, the few-row tiles), 12, 13,
 * 30, 64 (several blocks, k in chunks of 128); n a multiple of 16 or not; k from under
 * one chunk to several, ending inside one. */
START_TEST(avx2_matches_avx512) {
    if (cgemm_force("avx512") != 0 || cgemm_force("avx2") != 0) {
        fprintf(stderr, "SKIP: this CPU lacks AVX-512 or AVX2: AVX2 vs AVX-512 untested\n");
        cgemm_force(NULL);
        return;
    }
    static const int32_t ms[] = {1, 2, 3, 4, 5, 6, 7, 12, 13, 30, 64};
    static const int32_t nk[][2] = {{16, 32}, {40, 300}, {3, 129}, {100, 544}, {72, 1000}};
    for (size_t b = 0; b < sizeof nk / sizeof *nk; b++) {
        int32_t n = nk[b][0], k = nk[b][1];
        mat_t q[2];
        mat_make(&q[0], DQ_F16, n, k);
        mat_make(&q[1], DQ_BF16, n, k);
        /* the original fp32 weights, packed: values no 16-bit type holds */
        float *wp = aligned_alloc(64, (cgemm_packed_elems(n, k) * 4 + 63) & ~(size_t)63);
        cgemm_pack(wp, q[0].w, n, k);
        int32_t mmax = ms[sizeof ms / sizeof *ms - 1];
        float *x = malloc((size_t)mmax * k * sizeof *x);
        float *y2 = malloc((size_t)mmax * n * sizeof *y2), *y5 = malloc((size_t)mmax * n * sizeof *y5);
        float *s = aligned_alloc(64, (cgemm_qscratch(mmax, k) * 4 + 63) & ~(size_t)63);
        for (size_t i = 0; i < (size_t)mmax * k; i++) x[i] = frand();
        for (size_t a = 0; a < sizeof ms / sizeof *ms; a++) {
            int32_t m = ms[a], P = (n + 15) / 16;
            size_t cnt = (size_t)m * n;
            long d;
            for (int kern = 0; kern < 2; kern++) {
                cgemm_force(kern ? "avx2" : "avx512");
                cgemm_panels(kern ? y2 : y5, x, wp, m, n, k, 0, P, s);
            }
            if ((d = first_diff(y2, y5, cnt)) >= 0)
                ck_abort_msg("fp32 m %d n %d k %d: y[%ld][%ld] AVX2 %.9g, AVX-512 %.9g", m, n, k,
                             d / n, d % n, y2[d], y5[d]);
            for (int t = 0; t < 2; t++) {
                for (int kern = 0; kern < 2; kern++) {
                    cgemm_force(kern ? "avx2" : "avx512");
                    cgemm_qpanels(kern ? y2 : y5, x, q[t].packed, q[t].type, m, n, k, 0, P, s);
                }
                if ((d = first_diff(y2, y5, cnt)) >= 0)
                    ck_abort_msg("%s m %d n %d k %d: y[%ld][%ld] AVX2 %.9g, AVX-512 %.9g",
                                 dq_type_name(q[t].type), m, n, k, d / n, d % n, y2[d], y5[d]);
            }
        }
        free(x);
        free(y2);
        free(y5);
        free(s);
        free(wp);
        mat_free(&q[0]);
        mat_free(&q[1]);
    }
    cgemm_force(NULL);
}
END_TEST

START_TEST(layout_sizes_slices_and_rows) {
    /* bytes per weight of a whole panel: 2, 2, 34/32, 18/32 */
    ck_assert_uint_eq(cqg_elems(DQ_F16, 16, 64), 16 * 64 * 2 / 4);
    ck_assert_uint_eq(cqg_elems(DQ_Q8_0, 16, 64), 16 * 2 * 34 / 4);
    ck_assert_uint_eq(cqg_elems(DQ_Q4_0, 17, 64), 2 * 16 * 2 * 18 / 4);  /* padded panel */
    ck_assert_uint_eq(cqg_elems(DQ_Q8_0, 16, 48), 0);   /* not whole blocks */
    ck_assert_uint_eq(cqg_elems(DQ_F32, 16, 64), 0);    /* the fp32 layout is cgemm's */
    ck_assert_uint_eq(cqg_elems(9, 16, 64), 0);
    for (int t = 0; t < NTYPES; t++) {
        mat_t a;
        mat_make(&a, TYPES[t], 48, 96);
        /* rows 16..47 stored alone are the stored matrix from row 16 on */
        void *tail = aligned_alloc(64, cqg_elems(TYPES[t], 32, 96) * 4);
        uint64_t off;
        dq_bytes(TYPES[t], 16 * 96, &off);
        cqg_pack(tail, a.q + off, TYPES[t], 32, 96);
        ck_assert(!memcmp(tail, (float *)a.packed + cqg_elems(TYPES[t], 16, 96),
                          cqg_elems(TYPES[t], 32, 96) * 4));
        float row[96];
        for (int32_t r = 0; r < 48; r += 7) {
            cqg_unpack_row(row, a.packed, TYPES[t], 96, r);
            ck_assert_msg(!memcmp(row, a.wd + (size_t)r * 96, sizeof row),
                          "%s: cqg_unpack_row(%d) is not the dequantised row",
                          dq_type_name(TYPES[t]), r);
        }
        free(tail);
        mat_free(&a);
    }
}
END_TEST

START_TEST(backend_ops) {
    char err[256];
    bk_opts_t o = {.n_threads = 2};
    backend_t *b = backend_new("cpu", &o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert(b->qmatrix_elems && b->upload_qmatrix && b->matmul_q);
    /* two threads split the panels (and Q8_0 / Q4_0's quantising the rows): the same sums
     * as one thread's kernel, F16 the fp32 kernel's on the dequantised matrix */
    static const uint32_t types[] = {DQ_F16, DQ_Q8_0, DQ_Q4_0};
    static const int32_t ms[] = {1, 9};
    for (int t = 0; t < 3; t++)
        for (int mi = 0; mi < 2; mi++) {
            int32_t m = ms[mi];
            mat_t q;
            mat_make(&q, types[t], 70, 128);
            size_t ne = b->qmatrix_elems(b, types[t], 70, 128);
            void *w = b->alloc(b, BK_WEIGHT, ne), *x = b->alloc(b, BK_ACT, (size_t)m * 128);
            void *y = b->alloc(b, BK_ACT, (size_t)m * 70);
            float xs[9 * 128], ys[9 * 70], yr[9 * 70];
            for (int i = 0; i < m * 128; i++) xs[i] = frand();
            ck_assert_int_eq(b->upload_qmatrix(b, w, q.q, types[t], 70, 128), 0);
            ck_assert_int_eq(b->upload(b, x, xs, (size_t)m * 128 * 4), 0);
            ck_assert_int_eq(b->matmul_q(b, y, BK_ACT, x, w, types[t], m, 70, 128), 0);
            ck_assert_int_eq(b->download_f32(b, ys, y, BK_ACT, (size_t)m * 70), 0);
            if (int_dot(types[t])) qmul(yr, xs, &q, m);
            else f32mul(yr, xs, &q, m);
            ck_assert_msg(!memcmp(ys, yr, (size_t)m * 70 * 4),
                          "%s m %d: the backend's matmul_q differs from one thread's kernel",
                          dq_type_name(types[t]), m);
            b->release(b, w);
            b->release(b, x);
            b->release(b, y);
            mat_free(&q);
        }
    mat_t a;
    mat_make(&a, DQ_Q4_0, 70, 128);
    int32_t m = 9;
    void *w = b->alloc(b, BK_WEIGHT, b->qmatrix_elems(b, DQ_Q4_0, 70, 128));
    void *x = b->alloc(b, BK_ACT, (size_t)m * 128), *y = b->alloc(b, BK_ACT, (size_t)m * 70);
    /* refusals name the type and shape */
    ck_assert_int_eq(b->upload_qmatrix(b, w, a.q, DQ_Q8_0, 70, 100), -1);
    ck_assert_ptr_nonnull(strstr(b->errmsg, "Q8_0"));
    ck_assert_int_eq(b->matmul_q(b, y, BK_ACT, x, w, 12 /* Q4_K */, m, 70, 128), -1);
    ck_assert_ptr_nonnull(strstr(b->errmsg, "Q4_K"));
    mat_free(&a);
    b->destroy(b);
    o.weights = "f32";
    b = backend_new("cpu", &o, err, sizeof err);
    ck_assert(b && !b->qmatrix_elems && !b->upload_qmatrix && !b->matmul_q);
    b->destroy(b);
}
END_TEST

static Suite *qgemm_suite(void) {
    Suite *s = suite_create("cpu_qgemm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, qmatmul_matches_references, 0, 3);
    tcase_add_test(tc, avx2_matches_avx512);
    tcase_add_test(tc, layout_sizes_slices_and_rows);
    tcase_add_test(tc, backend_ops);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return testutil_run(qgemm_suite()); }

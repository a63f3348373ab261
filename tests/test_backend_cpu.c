/* test_backend_cpu: every op of the CPU backend against a naive reference (double precision)
 * on random inputs: relative error (norm of the difference over norm of the reference)
 * under 1e-5. Products use weights packed by upload_matrix; shapes cover single-row,
 * few-row and many-row products on both kernels, partial panels, aligned row slices and
 * concatenations, head sizes with and without the AVX-512 attention path, GQA, and KV
 * blocks scattered through the pool. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/cpu/backend_cpu.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/dequant.h"
#include "engine/sampler.h"
#include "tests/testutil.h"

#define TOL 1e-5

static uint64_t rng = 88172645463325252ULL;
static float frand(void) {   /* xorshift: uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
}

static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = frand();
}

static double rel_err(const float *got, const double *want, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += (got[i] - want[i]) * (got[i] - want[i]);
        r += want[i] * want[i];
    }
    return sqrt(d) / (sqrt(r) + 1e-30);
}

static backend_t *new_cpu_kv(int threads, const char *kv_type) {
    char err[256];
    bk_opts_t o = {.n_threads = threads, .kv_type = kv_type};
    backend_t *b = backend_new("cpu", &o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    return b;
}

static backend_t *new_cpu(int threads) {
    char err[256];
    bk_opts_t o = {.n_threads = threads};
    backend_t *b = backend_new("cpu", &o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    return b;
}

static void *put(backend_t *b, const float *x, size_t n) {
    void *p = b->alloc(b, BK_F32, n);
    ck_assert_msg(p != NULL, "%s", b->errmsg);
    ck_assert_int_eq(b->upload(b, p, x, n * sizeof *x), 0);
    return p;
}

static void get(backend_t *b, float *dst, const void *src, size_t n) {
    ck_assert_int_eq(b->download_f32(b, dst, src, BK_ACT, n), 0);
}

/* A one-sequence batch of m tokens at positions 0..m-1 (ops that ignore positions). */
static void prepare_flat(backend_t *b, int32_t m) {
    int32_t *tok = calloc((size_t)m, sizeof *tok), *pos = calloc((size_t)m, sizeof *pos);
    for (int32_t i = 0; i < m; i++) pos[i] = i;
    int32_t ss[2] = {0, m}, sl[1] = {m}, bts[2] = {0, 0};
    bk_batch_t bt = {m, 1, tok, pos, ss, sl, bts, NULL, 0, NULL, NULL};
    ck_assert_int_eq(b->prepare(b, &bt), 0);
    free(tok);
    free(pos);
}

/* _i: 0 = the kernels this CPU picks, 1 = the portable ones, 2 = AVX2 (same packed
 * layout; skipped, visibly, on a CPU without AVX2) */
START_TEST(matmul_matches_reference) {
    if (cgemm_force(_i == 0 ? NULL : _i == 1 ? "portable" : "avx2") != 0) {
        fprintf(stderr, "SKIP: this CPU has no AVX2 + FMA + F16C: the AVX2 kernel is untested\n");
        return;
    }
    backend_t *b = new_cpu(2);
    int32_t ms[] = {1, 2, 3, 5, 7, 13, 17, 32, 64, 65, 100}, ns[] = {1, 5, 33, 130};
    int32_t ks[] = {7, 64, 100};
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t c = 0; c < sizeof ns / sizeof *ns; c++)
            for (size_t d = 0; d < sizeof ks / sizeof *ks; d++) {
                int32_t m = ms[a], n = ns[c], k = ks[d];
                float *x = malloc(sizeof(float) * m * k), *w = malloc(sizeof(float) * n * k);
                float *y = malloc(sizeof(float) * m * n);
                double *ref = malloc(sizeof(double) * m * n);
                fill(x, (size_t)m * k);
                fill(w, (size_t)n * k);
                for (int32_t i = 0; i < m; i++)
                    for (int32_t j = 0; j < n; j++) {
                        double s = 0;
                        for (int32_t l = 0; l < k; l++) s += (double)x[i * k + l] * w[j * k + l];
                        ref[i * n + j] = s;
                    }
                void *dx = put(b, x, (size_t)m * k), *dy = b->alloc(b, BK_ACT, (size_t)m * n);
                void *dw = b->alloc(b, BK_WEIGHT, b->matrix_elems(b, n, k));
                ck_assert_int_eq(b->upload_matrix(b, dw, w, n, k), 0);
                ck_assert_int_eq(b->matmul(b, dy, BK_ACT, dx, dw, m, n, k), 0);
                get(b, y, dy, (size_t)m * n);
                double e = rel_err(y, ref, (size_t)m * n);
                ck_assert_msg(e < TOL, "matmul (%s) m %d n %d k %d: rel err %g", cgemm_kernel(),
                              m, n, k, e);
                b->release(b, dx);
                b->release(b, dy);
                b->release(b, dw);
                free(x);
                free(w);
                free(y);
                free(ref);
            }
    ck_assert_int_ne(b->matmul(b, NULL, BK_ACT, NULL, NULL, 0, 1, 1), 0);
    ck_assert(strstr(b->errmsg, "matmul") != NULL);
    b->destroy(b);
    cgemm_force_portable(0);
}
END_TEST

/* The layout contract the forward pass relies on (backend.h, "Weight matrices"): aligned
 * parts uploaded one after the other multiply as their concatenation, and an aligned row
 * slice is an offset. */
START_TEST(matmul_slices_and_concatenation) {
    backend_t *b = new_cpu(2);
    int32_t al = b->matrix_row_align, r1 = 2 * al, r2 = al, k = 37, m = 9, n = r1 + r2;
    ck_assert_int_ge(al, 1);
    float *w = malloc(sizeof(float) * n * k), *x = malloc(sizeof(float) * m * k);
    float *y = malloc(sizeof(float) * m * n);
    double *ref = malloc(sizeof(double) * m * n);
    fill(w, (size_t)n * k);
    fill(x, (size_t)m * k);
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = 0; j < n; j++) {
            double acc = 0;
            for (int32_t l = 0; l < k; l++) acc += (double)x[i * k + l] * w[j * k + l];
            ref[i * n + j] = acc;
        }
    size_t e1 = b->matrix_elems(b, r1, k);
    ck_assert_uint_eq(e1 + b->matrix_elems(b, r2, k), b->matrix_elems(b, n, k));
    void *dw = b->alloc(b, BK_WEIGHT, b->matrix_elems(b, n, k));
    void *dx = put(b, x, (size_t)m * k), *dy = b->alloc(b, BK_ACT, (size_t)m * n);
    size_t es = b->elem_size(b, BK_WEIGHT);
    ck_assert_int_eq(b->upload_matrix(b, dw, w, r1, k), 0);
    ck_assert_int_eq(b->upload_matrix(b, (char *)dw + e1 * es, w + (size_t)r1 * k, r2, k), 0);
    ck_assert_int_eq(b->matmul(b, dy, BK_ACT, dx, dw, m, n, k), 0);   /* the concatenation */
    get(b, y, dy, (size_t)m * n);
    ck_assert_msg(rel_err(y, ref, (size_t)m * n) < TOL, "concatenated parts");
    /* rows [al, n): a slice at an aligned row */
    ck_assert_int_eq(b->matmul(b, dy, BK_ACT, dx, (char *)dw + (size_t)al * k * es, m, n - al, k), 0);
    get(b, y, dy, (size_t)m * (n - al));
    for (int32_t i = 0; i < m; i++)
        for (int32_t j = al; j < n; j++)
            ck_assert_msg(fabs(y[i * (n - al) + j - al] - ref[i * n + j]) <= 1e-4,
                          "slice row %d col %d", i, j);
    ck_assert_int_ne(b->upload_matrix(b, dw, w, 0, k), 0);
    ck_assert(strstr(b->errmsg, "upload_matrix") != NULL);
    free(w);
    free(x);
    free(y);
    free(ref);
    b->destroy(b);
}
END_TEST

/* The vectorised greedy pick equals the reference's argmax: ties to the lowest id, the
 * maximum in the vector body or the scalar tail, and a NaN anywhere. */
START_TEST(argmax_matches_the_reference) {
    int32_t lens[] = {1, 15, 16, 17, 49, 512, 1000};
    float *v = malloc(sizeof(float) * 1000);
    for (size_t a = 0; a < sizeof lens / sizeof *lens; a++) {
        int32_t n = lens[a];
        for (int trial = 0; trial < 6; trial++) {
            fill(v, (size_t)n);
            if (trial == 1) v[n - 1] = 2;                        /* in the tail */
            if (trial == 2) v[n / 2] = v[n - 1] = v[0] = 3;      /* ties */
            if (trial == 3) v[n / 3] = NAN;
            if (trial == 4) v[0] = NAN;
            if (trial == 5) for (int32_t i = 0; i < n; i++) v[i] = -INFINITY;
            ck_assert_msg(cgemm_argmax(v, n) == sampler_argmax(v, n), "n %d trial %d: %d vs %d",
                          n, trial, cgemm_argmax(v, n), sampler_argmax(v, n));
        }
    }
    free(v);
}
END_TEST

/* The vectorised row norm gives the portable one's floats, bit for bit, with and without a
 * residual, in place or not, over dims with and without a 16-element tail (both add the
 * exact squares in the same 16 running double sums; a different order would still round
 * to the same float scale almost always, so this checks the element-wise work and the
 * tails, not the order). */
/* The f16 KV cache's stores: every non-NaN float, rounded to the nearest half (ties to
 * even, overflow to infinity, subnormal halves, signed zeros) as dq_f32_to_f16 does, on
 * the AVX-512 path and the portable one, in vector bodies and tails. */
START_TEST(f16_stores_round_as_the_reference) {
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N);
    uint16_t *h = malloc(sizeof(uint16_t) * N);
    fill(x, N);
    const float special[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -1e9f, INFINITY,
                             -INFINITY, 5.96e-8f, 2.98e-8f, 2.99e-8f, 6.1e-5f, 1e-40f,
                             1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 2049.0f, 2051.0f};
    for (int i = 0; i < N; i++) {
        if (i % 5 == 0) x[i] *= 1e5f;       /* past the half range: infinities */
        if (i % 7 == 0) x[i] *= 1e-6f;      /* subnormal halves */
    }
    memcpy(x + 100, special, sizeof special);
    for (int k = 0; k < 2; k++) {
        if (cgemm_force(k ? "portable" : "avx512") != 0) {
            fprintf(stderr, "SKIP: this CPU has no AVX-512: the portable f16 stores only\n");
            continue;
        }
        for (int32_t n = 1; n <= N; n += n < 40 ? 1 : 1000) {
            memset(h, 0xff, sizeof(uint16_t) * N);
            cgemm_to_f16(h, x, n);
            for (int32_t i = 0; i < n; i++)
                ck_assert_msg(h[i] == dq_f32_to_f16(x[i]), "%s, n %d: %.9g -> 0x%04x, not 0x%04x",
                              k ? "portable" : "avx512", n, x[i], h[i], dq_f32_to_f16(x[i]));
            ck_assert_msg(n == N || h[n] == 0xffff, "a store past n (%d)", n);
        }
    }
    cgemm_force(NULL);
    free(x);
    free(h);
}
END_TEST

START_TEST(rmsnorm_kernels_agree_bit_for_bit) {
    if (cgemm_force("avx512") != 0) {
        fprintf(stderr, "SKIP: this CPU has no AVX-512: one rmsnorm kernel only\n");
        return;
    }
    cgemm_force(NULL);
    int32_t dims[] = {1, 15, 16, 17, 64, 257, 576, 1000};
    float *x = malloc(sizeof(float) * 1000), *r = malloc(sizeof(float) * 1000);
    float *w = malloc(sizeof(float) * 1000), *out[2], *xs[2];
    for (int k = 0; k < 2; k++) {
        out[k] = malloc(sizeof(float) * 1000);
        xs[k] = malloc(sizeof(float) * 1000);
    }
    for (size_t a = 0; a < sizeof dims / sizeof *dims; a++)
        for (int mode = 0; mode < 3; mode++) {   /* no residual, residual, in place */
            int32_t dim = dims[a];
            fill(x, (size_t)dim);
            fill(r, (size_t)dim);
            fill(w, (size_t)dim);
            for (int32_t i = 0; i < dim; i += 3) x[i] *= 1000;   /* a wide range of squares */
            for (int k = 0; k < 2; k++) {
                ck_assert_int_eq(cgemm_force(k ? "portable" : "avx512"), 0);
                memcpy(xs[k], x, sizeof(float) * dim);
                cgemm_rmsnorm(mode == 2 ? xs[k] : out[k], xs[k], mode ? r : NULL, w, dim, 1e-5f);
                if (mode == 2) memcpy(out[k], xs[k], sizeof(float) * dim);
            }
            cgemm_force(NULL);
            ck_assert_msg(!memcmp(out[0], out[1], sizeof(float) * dim) &&
                              !memcmp(xs[0], xs[1], sizeof(float) * dim),
                          "dim %d mode %d: the AVX-512 rmsnorm differs from the portable one",
                          dim, mode);
        }
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        free(xs[k]);
    }
    free(x);
    free(r);
    free(w);
}
END_TEST

START_TEST(rmsnorm_with_and_without_residual) {
    backend_t *b = new_cpu(2);
    int32_t m = 300, dim = 257;   /* enough rows to split over the pool */
    float *x = malloc(sizeof(float) * m * dim), *r = malloc(sizeof(float) * m * dim);
    float *w = malloc(sizeof(float) * dim), *out = malloc(sizeof(float) * m * dim);
    double *ref = malloc(sizeof(double) * m * dim), *refx = malloc(sizeof(double) * m * dim);
    fill(x, (size_t)m * dim);
    fill(r, (size_t)m * dim);
    fill(w, (size_t)dim);
    for (int with = 0; with < 2; with++) {
        void *dx = put(b, x, (size_t)m * dim), *dr = put(b, r, (size_t)m * dim);
        void *dw = put(b, w, (size_t)dim), *dout = b->alloc(b, BK_ACT, (size_t)m * dim);
        for (int32_t i = 0; i < m; i++) {
            double ss = 0;
            for (int32_t j = 0; j < dim; j++) {
                refx[i * dim + j] = (double)x[i * dim + j] + (with ? r[i * dim + j] : 0);
                ss += refx[i * dim + j] * refx[i * dim + j];
            }
            double sc = 1 / sqrt(ss / dim + 1e-5);
            for (int32_t j = 0; j < dim; j++) ref[i * dim + j] = refx[i * dim + j] * sc * w[j];
        }
        ck_assert_int_eq(b->rmsnorm(b, dout, dx, with ? dr : NULL, dw, m, dim, 1e-5f), 0);
        get(b, out, dout, (size_t)m * dim);
        double e = rel_err(out, ref, (size_t)m * dim);
        ck_assert_msg(e < TOL, "rmsnorm (residual %d): rel err %g", with, e);
        get(b, out, dx, (size_t)m * dim);   /* the residual was added in place */
        ck_assert_msg(rel_err(out, refx, (size_t)m * dim) < TOL, "rmsnorm: x not updated");
        /* the forward pass normalises into the residual's own buffer */
        if (with) {
            ck_assert_int_eq(b->upload(b, dx, x, sizeof(float) * m * dim), 0);
            ck_assert_int_eq(b->rmsnorm(b, dr, dx, dr, dw, m, dim, 1e-5f), 0);
            get(b, out, dr, (size_t)m * dim);
            ck_assert_msg(rel_err(out, ref, (size_t)m * dim) < TOL, "rmsnorm in place");
        }
        b->release(b, dx);
        b->release(b, dr);
        b->release(b, dw);
        b->release(b, dout);
    }
    free(x);
    free(r);
    free(w);
    free(out);
    free(ref);
    free(refx);
    b->destroy(b);
}
END_TEST

static void ref_rotate(double *v, int32_t hd, int32_t pos, float theta) {
    for (int32_t i = 0; i < hd / 2; i++) {
        double a = pos * pow(theta, -2.0 * i / hd), c = cos(a), s = sin(a);
        double x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
    }
}

/* Two steps over three sequences whose blocks are scattered through the pool: rope_kv
 * rotates Q and K and writes K and V where the block tables say (with kv_type f16, rounded
 * to the nearest half); attention over the paged cache matches attention over contiguous
 * per-sequence histories of what was stored. */
static void paged_attention_case(int32_t n_heads, int32_t n_kv, int32_t hd, int threads,
                                 const char *kv_type) {
    backend_t *b = new_cpu_kv(threads, kv_type);
    int half = kv_type && !strcmp(kv_type, "f16");
    const int32_t bs = 4, n_blocks = 40, layer = 1, maxlen = 40;
    const float theta = 10000.0f;
    bk_kv_shape_t shape = {2, n_blocks, bs, n_kv, hd};
    ck_assert_int_eq(b->kv_init(b, &shape), 0);
    int32_t qd = n_heads * hd, kvd = n_kv * hd, g = n_heads / n_kv;
    /* block tables: each sequence owns 10 scattered blocks */
    int32_t table[3][10];
    for (int32_t s = 0; s < 3; s++)
        for (int32_t j = 0; j < 10; j++) table[s][j] = (j * 7 + s * 13 + 5) % n_blocks;
    /* contiguous reference histories of rotated K and V per sequence */
    double *hk[3], *hv[3];
    int32_t len[3] = {0, 0, 0};
    for (int32_t s = 0; s < 3; s++) {
        hk[s] = calloc((size_t)maxlen * kvd, sizeof(double));
        hv[s] = calloc((size_t)maxlen * kvd, sizeof(double));
    }
    /* step 1: prefill seq 0 (9 tokens) and seq 2 (3 tokens); step 2: seq 0 decodes one,
     * seq 1 prefills 6, seq 2 continues with a chunk of 5 */
    int32_t steps[2][3] = {{9, 0, 3}, {1, 6, 5}};
    for (int st = 0; st < 2; st++) {
        int32_t nt = 0, ns = 0, ss[4] = {0}, sl[3], bts[4] = {0}, bt[30], pos[32], tok[32];
        int32_t who[32];
        for (int32_t s = 0; s < 3; s++) {
            if (!steps[st][s]) continue;
            for (int32_t i = 0; i < steps[st][s]; i++) {
                pos[nt] = len[s] + i;
                tok[nt] = 0;
                who[nt++] = s;
            }
            sl[ns] = len[s] + steps[st][s];
            memcpy(bt + bts[ns], table[s], sizeof table[s]);
            bts[ns + 1] = bts[ns] + 10;
            ss[++ns] = nt;
        }
        bk_batch_t batch = {nt, ns, tok, pos, ss, sl, bts, bt, 0, NULL, NULL};
        ck_assert_int_eq(b->prepare(b, &batch), 0);
        float *q = malloc(sizeof(float) * nt * qd), *k = malloc(sizeof(float) * nt * kvd);
        float *v = malloc(sizeof(float) * nt * kvd), *out = malloc(sizeof(float) * nt * qd);
        double *rq = malloc(sizeof(double) * nt * qd), *rk = malloc(sizeof(double) * nt * kvd);
        double *ro = malloc(sizeof(double) * nt * qd);
        fill(q, (size_t)nt * qd);
        fill(k, (size_t)nt * kvd);
        fill(v, (size_t)nt * kvd);
        for (int32_t i = 0; i < nt; i++) {
            int32_t s = who[i];
            for (int32_t j = 0; j < qd; j++) rq[i * qd + j] = q[i * qd + j];
            for (int32_t j = 0; j < kvd; j++) rk[i * kvd + j] = k[i * kvd + j];
            for (int32_t h = 0; h < n_heads; h++) ref_rotate(rq + i * qd + h * hd, hd, pos[i], theta);
            for (int32_t h = 0; h < n_kv; h++) ref_rotate(rk + i * kvd + h * hd, hd, pos[i], theta);
            memcpy(hk[s] + (size_t)pos[i] * kvd, rk + i * kvd, sizeof(double) * kvd);
            for (int32_t j = 0; j < kvd; j++) hv[s][(size_t)pos[i] * kvd + j] = v[i * kvd + j];
        }
        for (int32_t s = 0; s < 3; s++) len[s] += steps[st][s];
        void *dq = put(b, q, (size_t)nt * qd), *dk = put(b, k, (size_t)nt * kvd);
        void *dv = put(b, v, (size_t)nt * kvd), *dout = b->alloc(b, BK_ACT, (size_t)nt * qd);
        ck_assert_int_eq(b->rope_kv(b, dq, dk, dv, layer, n_heads, n_kv, hd, theta), 0);
        get(b, q, dq, (size_t)nt * qd);
        get(b, k, dk, (size_t)nt * kvd);
        ck_assert_msg(rel_err(q, rq, (size_t)nt * qd) < TOL, "rope q");
        ck_assert_msg(rel_err(k, rk, (size_t)nt * kvd) < TOL, "rope k");
        /* placement: each token's K and V sit in its block's slot, as stored (halves:
         * each element rounded to nearest even); the reference attends over those */
        float kr[64], vr[64], ks[64], vs[64];
        ck_assert_int_le(hd, 64);
        for (int32_t i = 0; i < nt; i++) {
            int32_t s = who[i], blk = table[s][pos[i] / bs], slot = pos[i] % bs;
            for (int32_t h = 0; h < n_kv; h++) {
                const float *kw = k + i * kvd + h * hd, *vw = v + i * kvd + h * hd;
                for (int32_t d = 0; d < hd; d++) {
                    ks[d] = half ? dq_f16_to_f32(dq_f32_to_f16(kw[d])) : kw[d];
                    vs[d] = half ? dq_f16_to_f32(dq_f32_to_f16(vw[d])) : vw[d];
                }
                ck_assert_int_eq(backend_cpu_kv_read(b, layer, blk, 0, h, slot, kr), 0);
                ck_assert_int_eq(backend_cpu_kv_read(b, layer, blk, 1, h, slot, vr), 0);
                ck_assert_msg(memcmp(kr, ks, sizeof(float) * hd) == 0, "K placement (%s)",
                              half ? "f16" : "f32");
                ck_assert_msg(memcmp(vr, vs, sizeof(float) * hd) == 0, "V placement (%s)",
                              half ? "f16" : "f32");
                if (half)
                    for (int32_t d = 0; d < hd; d++) {
                        hk[s][(size_t)pos[i] * kvd + h * hd + d] = ks[d];
                        hv[s][(size_t)pos[i] * kvd + h * hd + d] = vs[d];
                    }
            }
        }
        /* reference attention: causal over the token's own sequence */
        for (int32_t i = 0; i < nt; i++) {
            int32_t s = who[i], n = pos[i] + 1;
            for (int32_t h = 0; h < n_heads; h++) {
                int32_t kh = h / g;
                double *sc = malloc(sizeof(double) * n), mx = -1e300, sum = 0;
                for (int32_t t = 0; t < n; t++) {
                    double d = 0;
                    for (int32_t j = 0; j < hd; j++)
                        d += rq[i * qd + h * hd + j] * hk[s][(size_t)t * kvd + kh * hd + j];
                    sc[t] = d / sqrt((double)hd);
                    mx = sc[t] > mx ? sc[t] : mx;
                }
                for (int32_t t = 0; t < n; t++) sum += sc[t] = exp(sc[t] - mx);
                for (int32_t j = 0; j < hd; j++) {
                    double o = 0;
                    for (int32_t t = 0; t < n; t++) o += sc[t] / sum * hv[s][(size_t)t * kvd + kh * hd + j];
                    ro[i * qd + h * hd + j] = o;
                }
                free(sc);
            }
        }
        ck_assert_int_eq(b->attention(b, dout, dq, layer, n_heads, n_kv, hd), 0);
        get(b, out, dout, (size_t)nt * qd);
        double e = rel_err(out, ro, (size_t)nt * qd);
        ck_assert_msg(e < TOL, "attention heads %d/%d hd %d step %d, %s KV: rel err %g", n_heads,
                      n_kv, hd, st, half ? "f16" : "f32", e);
        b->release(b, dq);
        b->release(b, dk);
        b->release(b, dv);
        b->release(b, dout);
        free(q);
        free(k);
        free(v);
        free(out);
        free(rq);
        free(rk);
        free(ro);
    }
    /* a shape that does not match the pool is refused with a message */
    ck_assert_int_ne(b->attention(b, NULL, NULL, 2, n_heads, n_kv, hd), 0);
    ck_assert(strstr(b->errmsg, "attention") != NULL);
    for (int32_t s = 0; s < 3; s++) {
        free(hk[s]);
        free(hv[s]);
    }
    b->destroy(b);
}

START_TEST(rope_kv_and_paged_attention_gqa) {
    for (int h = 0; h < 2; h++) {
        const char *kt = h ? "f16" : NULL;
        paged_attention_case(4, 2, 8, 2, kt);    /* portable kernel (hd 8), groups of 2 */
        paged_attention_case(6, 2, 64, 2, kt);   /* AVX-512 kernel where present, groups of 3 */
        paged_attention_case(4, 4, 32, 1, kt);   /* plain multi-head, one thread */
        paged_attention_case(8, 1, 16, 2, kt);   /* multi-query */
    }
}
END_TEST

START_TEST(elementwise_embed_gather_sample) {
    backend_t *b = new_cpu(2);
    size_t n = 100003;
    float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
    float *o = malloc(sizeof(float) * n);
    double *ref = malloc(sizeof(double) * n);
    fill(g, n);
    fill(u, n);
    void *dg = put(b, g, n), *du = put(b, u, n), *dout = b->alloc(b, BK_ACT, n);
    for (size_t i = 0; i < n; i++) ref[i] = g[i] / (1 + exp(-(double)g[i])) * u[i];
    ck_assert_int_eq(b->silu_mul(b, dout, dg, du, n), 0);
    get(b, o, dout, n);
    ck_assert_msg(rel_err(o, ref, n) < TOL, "silu_mul");
    for (size_t i = 0; i < n; i++) ref[i] = (double)g[i] + u[i];
    ck_assert_int_eq(b->add(b, dg, du, n), 0);
    get(b, o, dg, n);
    ck_assert_msg(rel_err(o, ref, n) < TOL, "add");

    /* embed and gather over a ragged batch */
    int32_t vocab = 11, dim = 6, nt = 5;
    float table[66], x[30];
    fill(table, 66);
    int32_t tok[5] = {3, 0, 10, 3, 7}, pos[5] = {0, 1, 2, 0, 0};
    int32_t ss2[4] = {0, 3, 4, 5}, sl2[3] = {3, 1, 1}, bts[4] = {0, 1, 2, 3}, blk[3] = {0, 1, 2};
    int32_t rows[2] = {2, 4};
    bk_sample_t smp[2] = {{0, 0, 1, 1, 0}, {0, 0, 1, 2, 0}};
    bk_batch_t bt = {nt, 3, tok, pos, ss2, sl2, bts, blk, 2, rows, smp};
    ck_assert_int_eq(b->prepare(b, &bt), 0);
    void *dt = b->alloc(b, BK_WEIGHT, b->matrix_elems(b, vocab, dim));
    void *dx = b->alloc(b, BK_ACT, 30), *ds = b->alloc(b, BK_ACT, 12);
    ck_assert_int_eq(b->upload_matrix(b, dt, table, vocab, dim), 0);
    ck_assert_int_eq(b->embed(b, dx, dt, dim), 0);
    get(b, x, dx, 30);
    for (int32_t i = 0; i < nt; i++)
        ck_assert(memcmp(x + i * dim, table + tok[i] * dim, sizeof(float) * dim) == 0);
    ck_assert_int_eq(b->gather_rows(b, ds, dx, BK_ACT, dim), 0);
    float sx[12];
    get(b, sx, ds, 12);
    ck_assert(memcmp(sx, table + 10 * dim, sizeof(float) * dim) == 0);
    ck_assert(memcmp(sx + dim, table + 7 * dim, sizeof(float) * dim) == 0);
    /* greedy sampling of the two gathered rows, treated as logits over 6 ids */
    int32_t ids[2];
    ck_assert_int_eq(b->sample(b, ids, ds, BK_ACT, dim), 0);
    for (int r = 0; r < 2; r++) {
        int32_t best = 0;
        for (int32_t j = 1; j < dim; j++) best = sx[r * dim + j] > sx[r * dim + best] ? j : best;
        ck_assert_int_eq(ids[r], best);
    }
    size_t fr = 0, tot = 0;
    ck_assert_int_eq(b->mem_info(b, &fr, &tot), 0);
    ck_assert(tot > 0 && fr <= tot);
    free(g);
    free(u);
    free(o);
    free(ref);
    b->destroy(b);   /* frees the buffers still allocated */
}
END_TEST

/* Sampling on the pool's threads gives each row exactly the reference sampler's draw, so a
 * row's token does not depend on the other rows of its batch. */
START_TEST(sampling_matches_the_reference_per_row) {
    backend_t *b = new_cpu(2);
    enum { R = 12, VOC = 3000 };
    float *logits = malloc(sizeof(float) * R * VOC), *probs = malloc(sizeof(float) * VOC);
    int32_t *idx = malloc(sizeof(int32_t) * VOC), tok[R], pos[R], ss[R + 1], sl[R], bts[R + 1];
    int32_t blk[R], rows[R], ids[R];
    bk_sample_t smp[R];
    fill(logits, (size_t)R * VOC);
    for (int32_t i = 0; i < R * VOC; i++) logits[i] *= 4;
    for (int32_t r = 0; r <= R; r++) ss[r] = bts[r] = r;
    for (int32_t r = 0; r < R; r++) {
        tok[r] = 0;
        pos[r] = 0;
        sl[r] = 1;
        blk[r] = r;
        rows[r] = r;
        smp[r] = (bk_sample_t){r % 4 ? 0.5f + 0.1f * r : 0, (r % 3) * 40, r % 2 ? 0.9f : 1,
                               1000 + (uint64_t)r, r};
    }
    bk_batch_t bt = {R, R, tok, pos, ss, sl, bts, blk, R, rows, smp};
    ck_assert_int_eq(b->prepare(b, &bt), 0);
    void *dl = put(b, logits, (size_t)R * VOC);
    for (int rep = 0; rep < 3; rep++) {
        ck_assert_int_eq(b->sample(b, ids, dl, BK_F32, VOC), 0);
        for (int32_t r = 0; r < R; r++)
            ck_assert_int_eq(ids[r], sampler_pick(logits + (size_t)r * VOC, VOC, &smp[r], probs, idx));
    }
    free(logits);
    free(probs);
    free(idx);
    b->destroy(b);
}
END_TEST

START_TEST(backend_registry) {
    char err[256];
    /* cuda is known everywhere; where it cannot run (no GPU, or a build without it) it is
     * refused with the reason */
    if (backend_available("cuda", err, sizeof err) != 1) {
        ck_assert(backend_new("cuda", NULL, err, sizeof err) == NULL);
        ck_assert_msg(strstr(err, "CUDA") || strstr(err, "GPU"), "%s", err);
    }
    ck_assert_int_eq(backend_available("cpu", err, sizeof err), 1);
    ck_assert_int_eq(backend_available("tpu", err, sizeof err), -1);
    ck_assert(backend_new("tpu", NULL, err, sizeof err) == NULL);
    ck_assert(strstr(err, "tpu") != NULL);
    backend_t *b = backend_new("cpu", NULL, err, sizeof err);
    ck_assert(b && !strcmp(b->name, "cpu") && !strcmp(b->weight_type, "f32"));
    bk_kv_shape_t s = {3, 10, 16, 2, 8};
    ck_assert_uint_eq(b->kv_block_bytes(b, &s), 3 * 2 * 16 * 2 * 8 * 4);
    bk_kv_shape_t bad = {3, 0, 16, 2, 8};
    ck_assert_int_ne(b->kv_init(b, &bad), 0);
    ck_assert_msg(strstr(b->errmsg, "cpu: kv_init: every size must be positive") != NULL, "%s",
                  b->errmsg);
    float row[8];
    ck_assert_int_eq(backend_cpu_kv_read(b, 0, 0, 0, 0, 0, row), -1);
    ck_assert_int_ne(b->attention(b, NULL, NULL, 0, 4, 2, 8), 0);
    ck_assert_msg(strstr(b->errmsg, "cpu: attention before kv_init") != NULL, "%s", b->errmsg);
    prepare_flat(b, 3);
    b->destroy(b);
    /* --kv-type: f16 halves a block; anything else is refused by name; the GPU keeps K
     * and V in its weight type and refuses the option whether or not it is present */
    bk_opts_t h = {.kv_type = "f16"}, q8 = {.kv_type = "q8_0"};
    b = backend_new("cpu", &h, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    ck_assert_uint_eq(b->kv_block_bytes(b, &s), 3 * 2 * 16 * 2 * 8 * 2);
    b->destroy(b);
    ck_assert(backend_new("cpu", &q8, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "--kv-type 'q8_0' is not f32 or f16") != NULL, "%s", err);
    ck_assert(backend_new("cuda", &h, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "--kv-type is a CPU backend option") != NULL, "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("ops");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, matmul_matches_reference, 0, 3);
    tcase_add_test(tc, matmul_slices_and_concatenation);
    tcase_add_test(tc, argmax_matches_the_reference);
    tcase_add_test(tc, rmsnorm_kernels_agree_bit_for_bit);
    tcase_add_test(tc, f16_stores_round_as_the_reference);
    tcase_add_test(tc, rmsnorm_with_and_without_residual);
    tcase_add_test(tc, rope_kv_and_paged_attention_gqa);
    tcase_add_test(tc, elementwise_embed_gather_sample);
    tcase_add_test(tc, sampling_matches_the_reference_per_row);
    tcase_add_test(tc, backend_registry);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

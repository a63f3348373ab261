/* cuda_pair: the fixture of test_backend_cuda.c (its only includer), kept apart so that
 * the suite's file holds the tests: the run's random streams (a seed per run, a stream per
 * (seed, test, dtype): TWIN_TEST_SEED replays a run), rounding to the GPU's types, a CUDA
 * backend beside the CPU reference with buffers on both (every output poisoned with NaN
 * bytes before its op), the relative-error checks, and batches with scattered block
 * tables. Static functions: one translation unit uses them. */
#ifndef TWIN_TESTS_CUDA_PAIR_H
#define TWIN_TESTS_CUDA_PAIR_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

#define THETA 10000.0f
static const char *DTYPE[3] = {"f32", "bf16", "f16"};
static const double TOL[3] = {1e-5, 1e-2, 1e-2};

static uint64_t seed0;          /* the run's seed (main) */
static uint64_t rng;            /* the current test's stream */
static char what[256];          /* the current check's label */
#define W(...) (snprintf(what, sizeof what, __VA_ARGS__), what)
#define OK(b, call) ck_assert_msg((call) == 0, "%s: %s: %s", (b)->name, #call, (b)->errmsg)
#define REFUSED(b, call, word)                                                          \
    ck_assert_msg((call) != 0 && strstr((b)->errmsg, word), "%s: %s: not refused, or "  \
                  "'%s' does not name %s", (b)->name, #call, (b)->errmsg, word)

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static void seed_test(const char *test, int i) {
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a of the test's name */
    for (const char *c = test; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    rng = mix64(seed0 ^ mix64(h + (uint64_t)i));
}

static uint64_t next_u64(void) { return mix64(rng += 0x9E3779B97F4A7C15ULL); }
static int32_t irand(int32_t n) { return (int32_t)(next_u64() % (uint64_t)n); }

/* Uniform in [-1, 1), never 0. */
static float frand(void) {
    float x;
    do x = (float)((double)(next_u64() >> 11) * (2.0 / 9007199254740992.0) - 1);
    while (x == 0);
    return x;
}

static float *randv(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = scale * frand();
    return x;
}

/* x rounded to nearest-even with p significant bits and no spacing below 2^qmin: what the
 * GPU stores (fp16: p 11, qmin -24, overflow to infinity; bf16: p 8, qmin -133). */
static float round_to(int dt, float x) {
    if (dt == 0 || !isfinite(x) || x == 0) return x;
    int p = dt == 1 ? 8 : 11, qmin = dt == 1 ? -133 : -24, e;
    float a = fabsf(x);
    if (dt == 2 && a >= 65520.0f) return copysignf(INFINITY, x);
    frexpf(a, &e);   /* a in [2^(e-1), 2^e): spacing 2^(e-p) */
    float ulp = ldexpf(1.0f, e - p > qmin ? e - p : qmin);
    return copysignf(nearbyintf(a / ulp) * ulp, x);
}

/* ---- two backends, buffers on both, comparisons ------------------------------------------ */

typedef struct {
    backend_t *g, *c;   /* the CUDA backend under test; the CPU reference */
    int dt;             /* index into DTYPE */
    double tol, worst;  /* the tolerance; the largest error measured */
    const char *test;
} pair_t;

/* dt < 0: the CPU backend; else the CUDA backend with weight type DTYPE[dt]. */
static backend_t *new_backend(int dt) {
    char err[256];
    bk_opts_t o = {.n_threads = 4, .dtype = dt < 0 ? NULL : DTYPE[dt]};
    backend_t *b = backend_new(dt < 0 ? "cpu" : "cuda", &o, err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    return b;
}

static pair_t open_pair(const char *test, int dt) {
    seed_test(test, dt);
    pair_t p = {new_backend(dt), new_backend(-1), dt, TOL[dt], 0, test};
    return p;
}

/* Prints the worst error of the test, so the GPU run's log shows the margins. */
static void close_pair(pair_t *p) {
    fprintf(stderr, "test_backend_cuda: %s [%s]: worst rel err %.3g\n", p->test, DTYPE[p->dt],
            p->worst);
    p->g->destroy(p->g);
    p->c->destroy(p->c);
}

static void *xalloc(backend_t *b, bk_kind_t kind, size_t n) {
    void *p = b->alloc(b, kind, n);
    ck_assert_msg(p != NULL, "%s: alloc of %zu: %s", b->name, n, b->errmsg);
    return p;
}

static void poison(backend_t *b, void *p, bk_kind_t kind, size_t n) {
    size_t bytes = n * b->elem_size(b, kind);
    unsigned char *h = malloc(bytes);
    memset(h, 0xFF, bytes);
    OK(b, b->upload(b, p, h, bytes));
    free(h);
}

static void get(backend_t *b, float *dst, const void *src, bk_kind_t kind, size_t n) {
    OK(b, b->download_f32(b, dst, src, kind, n));
}

/* x [n] as `kind` on both backends, the same values: x is overwritten with what the GPU
 * holds (rounded to its type unless kind is BK_F32), and the CPU gets that. */
static void put(pair_t *p, bk_kind_t kind, float *x, size_t n, void **g, void **c) {
    *g = xalloc(p->g, kind, n);
    *c = xalloc(p->c, kind, n);
    if (kind == BK_F32) {
        OK(p->g, p->g->upload(p->g, *g, x, n * sizeof *x));
        OK(p->c, p->c->upload(p->c, *c, x, n * sizeof *x));
        return;
    }
    OK(p->g, p->g->upload_weight(p->g, *g, x, n));
    get(p->g, x, *g, kind, n);
    OK(p->c, p->c->upload_weight(p->c, *c, x, n));
}

/* A weight matrix [rows][cols] on both, in each backend's layout (the GPU keeps rows). */
static void put_matrix(pair_t *p, float *w, int32_t rows, int32_t cols, void **g, void **c) {
    size_t n = (size_t)rows * (size_t)cols;
    ck_assert_uint_eq(p->g->matrix_elems(p->g, rows, cols), n);
    *g = xalloc(p->g, BK_WEIGHT, n);
    OK(p->g, p->g->upload_matrix(p->g, *g, w, rows, cols));
    get(p->g, w, *g, BK_WEIGHT, n);
    *c = xalloc(p->c, BK_WEIGHT, p->c->matrix_elems(p->c, rows, cols));
    OK(p->c, p->c->upload_matrix(p->c, *c, w, rows, cols));
}

/* An output buffer on both, poisoned. */
static void out2(pair_t *p, bk_kind_t kind, size_t n, void **g, void **c) {
    *g = xalloc(p->g, kind, n);
    *c = xalloc(p->c, kind, n);
    poison(p->g, *g, kind, n);
    poison(p->c, *c, kind, n);
}

static void release2(pair_t *p, void *g, void *c) {
    p->g->release(p->g, g);
    p->c->release(p->c, c);
}

/* ||got - ref|| / ||ref||, infinite when an element of got is not finite. */
static double rel_err(const float *got, const float *ref, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        d += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return sqrt(d) / (sqrt(r) + 1e-300);
}

/* Every element finite, then the relative error under tol. The first bad element is found
 * before asserting: a passing ck_assert writes to the test's log, too slow per element. */
static double expect_close(const float *got, const float *ref, size_t n, double tol,
                           const char *dtype, const char *label) {
    size_t i = 0, j = 0;
    while (i < n && isfinite(ref[i])) i++;
    while (j < n && isfinite(got[j])) j++;
    ck_assert_msg(i == n, "%s [%s]: the CPU's element %zu of %zu is %g", label, dtype, i, n,
                  i < n ? ref[i] : 0);
    ck_assert_msg(j == n, "%s [%s]: element %zu of %zu is %g (left poisoned, or not finite; "
                  "the CPU has %g)", label, dtype, j, n, j < n ? got[j] : 0, j < n ? ref[j] : 0);
    double e = rel_err(got, ref, n);
    ck_assert_msg(e < tol, "%s [%s]: rel err %.3g (tolerance %g)", label, dtype, e, tol);
    return e;
}

/* Downloads an output of both backends and compares them. */
static void check2(pair_t *p, const void *g, const void *c, bk_kind_t kind, size_t n,
                   const char *label) {
    float *a = malloc(n * sizeof *a), *r = malloc(n * sizeof *r);
    get(p->g, a, g, kind, n);
    get(p->c, r, c, kind, n);
    double e = expect_close(a, r, n, p->tol, DTYPE[p->dt], label);
    if (e > p->worst) p->worst = e;
    free(a), free(r);
}

/* ---- batches ------------------------------------------------------------------------------ */

typedef struct {
    bk_batch_t b;
    int32_t *ints;       /* every int array of b, in one allocation */
    bk_sample_t *smp;    /* b.sample: [n] greedy rows */
} step_t;

/* A batch as fwd_step gets one: sequence s brings cnt[s] tokens at positions from[s],
 * from[s] + 1, ... (it is left out when cnt[s] is 0) and its whole block table tables[s]
 * of nblk[s] ids; with `sample`, each sequence's last token is a greedy sampled row. Token
 * ids: toks[s] when toks is given, else random below vocab. */
static void step_make(step_t *st, int32_t n, const int32_t *from, const int32_t *cnt,
                      int32_t *const *tables, const int32_t *nblk, int32_t *const *toks,
                      int32_t vocab, int sample) {
    int32_t nt = 0, nb = 0, ns = 0, t = 0;
    for (int32_t s = 0; s < n; s++) nt += cnt[s], nb += cnt[s] ? nblk[s] : 0;
    int32_t *tok = st->ints = calloc(2 * (size_t)nt + 4 * (size_t)n + 2 + (size_t)nb, 4);
    int32_t *pos = tok + nt, *ss = pos + nt, *bts = ss + n + 1, *sl = bts + n + 1;
    int32_t *rows = sl + n, *bt = rows + n;
    st->smp = calloc((size_t)n, sizeof *st->smp);
    for (int32_t s = 0; s < n; s++) {
        if (!cnt[s]) continue;
        for (int32_t i = 0; i < cnt[s]; i++) {
            tok[t] = toks ? toks[s][i] : irand(vocab);
            pos[t++] = from[s] + i;
        }
        sl[ns] = from[s] + cnt[s];
        memcpy(bt + bts[ns], tables[s], sizeof(int32_t) * (size_t)nblk[s]);
        bts[ns + 1] = bts[ns] + nblk[s];
        rows[ns] = t - 1;
        st->smp[ns] = (bk_sample_t){0, 0, 1, 0, 0};
        ss[++ns] = t;
    }
    st->b = (bk_batch_t){nt, ns, tok, pos, ss, sl, bts, bt, sample ? ns : 0, rows, st->smp};
}

static void step_free(step_t *st) {
    free(st->ints), free(st->smp);
}

/* n <= 64 one-token sequences at position 0 (block i each), every token a sampled row. */
static void flat_step(step_t *st, int32_t n) {
    int32_t zero[64] = {0}, one[64], blk[64], *tabs[64];
    ck_assert(n <= 64);
    for (int32_t i = 0; i < n; i++) one[i] = 1, blk[i] = i, tabs[i] = blk + i;
    step_make(st, n, zero, one, tabs, one, NULL, 1, 1);
}

/* Disjoint block tables: sequence s gets need[s] blocks, all of them together a random
 * permutation of a pool `spare` blocks larger than needed. *perm holds them (the caller
 * frees it); returns the pool size. */
static int32_t deal_blocks(int32_t n, const int32_t *need, int32_t spare, int32_t **tables,
                           int32_t **perm) {
    int32_t total = spare, at = 0;
    for (int32_t s = 0; s < n; s++) total += need[s];
    int32_t *p = malloc(sizeof *p * (size_t)total);
    for (int32_t i = 0; i < total; i++) p[i] = i;
    for (int32_t i = total - 1; i > 0; i--) {   /* Fisher-Yates */
        int32_t j = irand(i + 1), t = p[i];
        p[i] = p[j], p[j] = t;
    }
    for (int32_t s = 0; s < n; s++) tables[s] = p + at, at += need[s];
    *perm = p;
    return total;
}

static void prepare2(pair_t *p, const bk_batch_t *b) {
    OK(p->g, p->g->prepare(p->g, b));
    OK(p->c, p->c->prepare(p->c, b));
}

#endif

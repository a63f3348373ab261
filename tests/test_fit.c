/* test_fit: the calibration pieces of sim/: non-negative least squares (nnls.c), the
 * linear cost model (cost_linear.c), its fit with cross-validation (fit.c) and the cost
 * files that carry it (cost_file.c). The fit must recover the coefficients of a known
 * model from a synthetic profile of it, say which terms the points cannot determine, and
 * refuse too few or degenerate points. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "traces/rng.h"
#include "sim/cost.h"
#include "sim/cost_file.h"
#include "sim/fit.h"
#include "sim/nnls.h"
#include "tests/testutil.h"

#define REL_NEAR(a, b, tol)                                                                   \
    ck_assert_msg(fabs((a) - (b)) <= (tol) * fabs(b), "%s = %.9g, want %.9g (tol %g)", #a,      \
                  (double)(a), (double)(b), (double)(tol))

/* ------------------------------------------------------------------ nnls */

/* Normal equations of a small A x = b. */
static void gram(const double *A, const double *b, int m, int n, double *G, double *c) {
    memset(G, 0, sizeof *G * (size_t)n * (size_t)n);
    memset(c, 0, sizeof *c * (size_t)n);
    for (int r = 0; r < m; r++)
        for (int i = 0; i < n; i++) {
            c[i] += A[r * n + i] * b[r];
            for (int j = 0; j < n; j++) G[i * n + j] += A[r * n + i] * A[r * n + j];
        }
}

START_TEST(test_nnls) {
    char err[256];
    /* consistent, positive solution (1, 2, 3): found exactly */
    double A[5 * 3] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 2, 0, 1};
    double x0[3] = {1, 2, 3}, b[5], G[9], c[3], x[3];
    for (int r = 0; r < 5; r++) b[r] = A[r * 3] * x0[0] + A[r * 3 + 1] * x0[1] + A[r * 3 + 2] * x0[2];
    gram(A, b, 5, 3, G, c);
    ck_assert_int_ge(nnls_solve(G, c, 3, x, err, sizeof err), 0);
    for (int i = 0; i < 3; i++) REL_NEAR(x[i], x0[i], 1e-9);
    /* the unconstrained optimum has a negative component: the constraint binds.
     * min (x1 - 1)^2 + (x2 + 1)^2 + (x1 + x2)^2 over x >= 0: x2 = 0, x1 = 1/2 */
    double A2[3 * 2] = {1, 0, 0, 1, 1, 1}, b2[3] = {1, -1, 0}, G2[4], c2[2], y[2];
    gram(A2, b2, 3, 2, G2, c2);
    ck_assert_int_ge(nnls_solve(G2, c2, 2, y, err, sizeof err), 0);
    REL_NEAR(y[0], 0.5, 1e-9);
    ck_assert(y[1] == 0);
    /* a zero column and a duplicated column: the zero one stays 0, the pair shares */
    double A3[4 * 3] = {1, 0, 1, 2, 0, 2, 3, 0, 3, 4, 0, 4}, b3[4] = {2, 4, 6, 8}, G3[9], c3[3];
    double z[3];
    gram(A3, b3, 4, 3, G3, c3);
    int dep[3];
    ck_assert_int_eq(nnls_dependent(G3, 3, 1e-7, dep), 2);
    ck_assert(dep[1] && dep[2] && !dep[0]);
    ck_assert_int_ge(nnls_solve(G3, c3, 3, z, err, sizeof err), 0);
    ck_assert(z[1] == 0);
    REL_NEAR(z[0] + z[2], 2.0, 1e-9);
}
END_TEST

/* ------------------------------------------------------------------ a known model */

/* A physically shaped truth: gemm flat (memory-bound) up to 16 rows, then linear. */
static void truth(cost_linear_params_t *p) {
    memset(p, 0, sizeof *p);
    p->step_s = 2e-4;
    p->seq_s = 3e-6;
    p->sampled_s = 5e-6;
    p->kv_token_s = 2e-8;
    p->attn_pair_s = 4e-9;
    p->layer_params = 1e8;
    p->lm_params = 3e7;
    double rows[] = {1, 16, 64, 256, 1024};
    for (int k = 0; k < 5; k++) {
        p->knot_rows[k] = rows[k];
        p->knot_s[k] = rows[k] <= 16 ? 1e-10 : 1e-10 * rows[k] / 16;
    }
    p->n_knots = 5;
    p->host_step_s = 2e-5;
    p->host_seq_s = 1e-6;
    p->host_token_s = 1e-8;
}

/* A profile-like grid: decodes at several contexts, prompt chunks (sampled at context 0,
 * unsampled after it), mixed steps; times from the truth times (1 + noise * u). */
static size_t grid(const cost_model_t *m, double noise, int decode_only, fit_point_t *pts) {
    rng_t r;
    rng_seed3(&r, 7, 1, 2);
    size_t n = 0;
    int32_t bs[] = {1, 2, 4, 8, 16, 32, 64}, ctxs[] = {16, 128, 512, 2048};
    int32_t chunks[] = {16, 32, 64, 128, 256, 512, 1024};
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 4; j++) {
            cost_seq_t s = {1, ctxs[j], 1};
            cost_features_t f = {0};
            for (int b = 0; b < bs[i]; b++) cost_features_add(&f, s.n_new, s.ctx, s.n_sampled);
            pts[n++].f = f;
        }
    if (!decode_only) {
        for (int i = 0; i < 7; i++)
            for (int c = 0; c < 2; c++) {
                cost_features_t f = {0};
                cost_features_add(&f, chunks[i], c ? 512 : 0, c ? 0 : 1);
                pts[n++].f = f;
            }
        /* mixed: decodes beside a whole prompt (sampled) or a middle chunk (not): the
         * latter make sampled rows differ from sequences, so both terms are determined */
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int mid = 0; mid < 2; mid++) {
                    cost_features_t f = {0};
                    for (int b = 0; b < (int[]){1, 8, 32}[i]; b++)
                        cost_features_add(&f, 1, 256, 1);
                    cost_features_add(&f, (int[]){64, 256, 512}[j], mid ? 256 : 0, !mid);
                    pts[n++].f = f;
                }
    }
    for (size_t i = 0; i < n; i++) {
        pts[i].t = cost_pass_time(m, &pts[i].f) * (1 + noise * (2 * rng_uniform(&r) - 1));
        pts[i].w = 1;
    }
    return n;
}

START_TEST(test_linear_model_by_hand) {
    cost_linear_params_t p;
    truth(&p);
    cost_model_t *m = cost_linear_new(&p);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->name, "linear");
    ck_assert_ptr_eq(cost_linear_params(m), cost_linear_params(m));
    /* one decode at context 9: gemm(1) = 1e-10 for layers and LM head */
    cost_features_t f = {0};
    cost_features_add(&f, 1, 9, 1);
    double want = 2e-4 + 3e-6 + 1e8 * 1e-10 + 3e7 * 1e-10 + 5e-6 + 2e-8 * 10 + 4e-9 * 10;
    REL_NEAR(cost_pass_time(m, &f), want, 1e-12);
    REL_NEAR(cost_host_time(m, &f), 2e-5 + 1e-6 + 1e-8, 1e-12);
    /* a middle chunk of 40 tokens: gemm between knots 16 and 64, no LM head */
    cost_features_t g = {0};
    cost_features_add(&g, 40, 100, 0);
    double g40 = 1e-10 + (40.0 - 16) / 48 * (4e-10 - 1e-10);
    want = 2e-4 + 3e-6 + 1e8 * g40 + 2e-8 * 140 + 4e-9 * (40 * 100 + 40 * 41 / 2);
    REL_NEAR(cost_pass_time(m, &g), want, 1e-12);
    /* beyond the last knot: proportional to the rows */
    cost_features_t h = {0};
    cost_features_add(&h, 4096, 0, 0);
    want = 2e-4 + 3e-6 + 1e8 * (64e-10 * 4) + 2e-8 * 4096 + 4e-9 * (4096.0 * 4097 / 2);
    REL_NEAR(cost_pass_time(m, &h), want, 1e-12);
    cost_features_t none = {0};
    ck_assert(cost_pass_time(m, &none) == 0 && cost_host_time(m, &none) == 0);
    cost_free(m);
    /* the checks name the field */
    char err[256];
    truth(&p);
    p.kv_token_s = -1;
    ck_assert_int_eq(cost_linear_check(&p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "kv_token_s"));
    truth(&p);
    p.knot_s[3] = p.knot_s[2] / 2;
    ck_assert_int_eq(cost_linear_check(&p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "must not decrease"));
    truth(&p);
    p.knot_rows[2] = p.knot_rows[1];
    ck_assert_int_eq(cost_linear_check(&p, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "ascending"));
    ck_assert_ptr_null(cost_linear_new(&p));
}
END_TEST

START_TEST(test_fit_recovers_known_model) {
    cost_linear_params_t t, p;
    truth(&t);
    cost_model_t *m = cost_linear_new(&t);
    fit_point_t pts[128];
    size_t n = grid(m, 0, 0, pts);
    fit_opts_t o;
    fit_opts_defaults(&o);
    fit_report_t r;
    char err[512];
    memset(&p, 0, sizeof p);
    p.layer_params = t.layer_params;
    p.lm_params = t.lm_params;
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    /* exact data: the coefficients come back, and every point, in and out of sample */
    REL_NEAR(p.step_s, t.step_s, 1e-4);
    REL_NEAR(p.kv_token_s, t.kv_token_s, 1e-4);
    REL_NEAR(p.attn_pair_s, t.attn_pair_s, 1e-4);
    REL_NEAR(p.seq_s, t.seq_s, 1e-3);
    REL_NEAR(p.sampled_s, t.sampled_s, 1e-3);
    for (int k = 0; k < FIT_TERMS; k++) ck_assert_msg(!r.folded[k], "%s folded", fit_term_names[k]);
    double rows[] = {1, 16, 64, 256, 1024};
    cost_model_t *fm = cost_linear_new(&p);
    ck_assert_ptr_nonnull(fm);
    for (int k = 0; k < 5; k++) {
        double w[COST_MAX_KNOTS], g = 0;
        cost_linear_gemm_weights(p.knot_rows, p.n_knots, rows[k], w);
        for (int j = 0; j < p.n_knots; j++) g += w[j] * p.knot_s[j];
        REL_NEAR(g, t.knot_s[k], 1e-4);
    }
    ck_assert(r.fit_median < 1e-6 && r.fit_p90 < 1e-6);
    ck_assert_msg(r.cv_median < 0.01, "cv median %g", r.cv_median);
    ck_assert_int_eq((int)r.dropped, 0);
    ck_assert(r.max_tokens == 1024 && r.max_seqs == 64);
    fit_report_free(&r);
    cost_free(fm);

    /* 2% noise: predictions within a few percent, held out too */
    n = grid(m, 0.02, 0, pts);
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(r.fit_median < 0.02 && r.cv_median < 0.03, "fit %g cv %g", r.fit_median,
                  r.cv_median);
    fit_report_free(&r);

    /* the host model, from host points of the same shapes */
    for (size_t i = 0; i < n; i++) pts[i].t = cost_host_time(m, &pts[i].f);
    ck_assert_msg(fit_host(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    REL_NEAR(p.host_step_s, t.host_step_s, 1e-6);
    REL_NEAR(p.host_seq_s, t.host_seq_s, 1e-6);
    REL_NEAR(p.host_token_s, t.host_token_s, 1e-6);
    fit_report_free(&r);
    /* a point of weight 2 counts as the point twice */
    for (size_t i = 0; i < n; i++) pts[i].t *= 1 + 0.1 * (double)(i % 3);
    pts[n] = pts[0];
    cost_linear_params_t twice = p, weighted = p;
    ck_assert_int_eq(fit_host(pts, n + 1, &o, &twice, &r, err, sizeof err), 0);
    fit_report_free(&r);
    pts[0].w = 2;
    ck_assert_int_eq(fit_host(pts, n, &o, &weighted, &r, err, sizeof err), 0);
    fit_report_free(&r);
    REL_NEAR(weighted.host_step_s, twice.host_step_s, 1e-9);
    REL_NEAR(weighted.host_seq_s, twice.host_seq_s, 1e-9);
    cost_free(m);
}
END_TEST

/* A mixture of experts (issue #29): points from a known model with an experts' term on
 * the gemm curve come back exactly when the fit is told the experts, and a fit that does
 * not know them (the dense design) cannot follow them. */
START_TEST(test_fit_recovers_moe) {
    cost_linear_params_t t, p;
    truth(&t);
    t.moe_layers = 3;
    t.moe_experts = 8;
    t.moe_top_k = 2;
    t.moe_expert_params = 2e7;
    cost_model_t *m = cost_linear_new(&t);
    ck_assert_ptr_nonnull(m);
    fit_point_t pts[128];
    size_t n = grid(m, 0, 0, pts);
    fit_opts_t o;
    fit_opts_defaults(&o);
    fit_report_t r;
    char err[512];
    memset(&p, 0, sizeof p);
    p.layer_params = t.layer_params;
    p.lm_params = t.lm_params;
    p.moe_layers = t.moe_layers;
    p.moe_experts = t.moe_experts;
    p.moe_top_k = t.moe_top_k;
    p.moe_expert_params = t.moe_expert_params;
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(r.fit_median < 1e-6 && r.cv_median < 0.01, "fit %g cv %g", r.fit_median,
                  r.cv_median);
    REL_NEAR(p.step_s, t.step_s, 1e-4);
    fit_report_free(&r);
    cost_linear_params_t dense;
    memset(&dense, 0, sizeof dense);
    dense.layer_params = t.layer_params;
    dense.lm_params = t.lm_params;
    ck_assert_msg(fit_pass(pts, n, &o, &dense, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(r.fit_median > 1e-3, "a dense fit follows experts it is not told of (%g)",
                  r.fit_median);
    fit_report_free(&r);
    cost_free(m);
}
END_TEST

/* A K/V read rate that rises past a cache-sized knot: the fitted curve follows it. */
START_TEST(test_fit_kv_curve) {
    cost_linear_params_t t, p;
    truth(&t);
    t.n_kv_knots = 1;
    t.kv_knots[0] = 4000;
    t.kv_extra_s[0] = 3e-8;
    cost_model_t *m = cost_linear_new(&t);
    ck_assert_ptr_nonnull(m);
    fit_point_t pts[128];
    size_t n = grid(m, 0, 0, pts);
    fit_opts_t o;
    fit_opts_defaults(&o);
    fit_report_t r;
    char err[512];
    memset(&p, 0, sizeof p);
    p.layer_params = t.layer_params;
    p.lm_params = t.lm_params;
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    /* a linear KV term cannot follow the kink; the curve does, nearly (its knots sit at
     * the points' KV positions, not at 4000), and is kept */
    ck_assert_msg(r.fit_median < 2e-3, "fit median %g", r.fit_median);
    double curve_median = r.fit_median;
    ck_assert_int_eq(r.kv_curve, 1);
    ck_assert_int_ge(p.n_kv_knots, 1);
    /* the decodes' KV positions: at 16, 128, 1024 and 2048 context, 1 to 64 sequences */
    double ps[] = {17, 2064, 8200, 32800, 131136};
    for (size_t k = 0; k < sizeof ps / sizeof *ps; k++)
        REL_NEAR(cost_linear_kv_time(&p, ps[k]) + p.attn_pair_s * ps[k],
                 cost_linear_kv_time(&t, ps[k]) + t.attn_pair_s * ps[k], 0.05);
    fit_report_free(&r);
    /* forced linear, the same points cannot be fitted exactly */
    o.kv_curve = 0;
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(r.kv_curve == 0 && p.n_kv_knots == 0 && r.fit_median > 3 * curve_median,
                  "linear %g vs curve %g", r.fit_median, curve_median);
    fit_report_free(&r);
    cost_free(m);
    /* the model's checks: knots ascending, extra rates >= 0 */
    t.n_kv_knots = 2;
    t.kv_knots[1] = 100;
    t.kv_extra_s[1] = 1e-9;
    ck_assert_int_eq(cost_linear_check(&t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "kv_knots must be ascending"));
    t.kv_knots[1] = 8000;
    t.kv_extra_s[1] = -1e-9;
    ck_assert_int_eq(cost_linear_check(&t, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "kv_extra_s must be finite numbers >= 0"));
}
END_TEST

START_TEST(test_fit_outlier_dropped) {
    cost_linear_params_t t, p;
    truth(&t);
    cost_model_t *m = cost_linear_new(&t);
    fit_point_t pts[128];
    size_t n = grid(m, 0.01, 0, pts);
    pts[5].t *= 20;   /* a step the OS interrupted */
    fit_opts_t o;
    fit_opts_defaults(&o);
    fit_report_t r;
    char err[512];
    memset(&p, 0, sizeof p);
    p.layer_params = t.layer_params;
    p.lm_params = t.lm_params;
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq((int)r.dropped, 1);
    ck_assert(isnan(r.fit_err[5]) && isnan(r.cv_err[5]));
    ck_assert(r.fit_median < 0.01);
    fit_report_free(&r);
    cost_free(m);
}
END_TEST

START_TEST(test_fit_degenerate) {
    cost_linear_params_t t, p;
    truth(&t);
    cost_model_t *m = cost_linear_new(&t);
    fit_point_t pts[128];
    fit_opts_t o;
    fit_opts_defaults(&o);
    fit_report_t r;
    char err[512];
    memset(&p, 0, sizeof p);
    p.layer_params = t.layer_params;
    p.lm_params = t.lm_params;
    size_t n = grid(m, 0, 0, pts);
    /* too few */
    ck_assert_int_eq(fit_pass(pts, 5, &o, &p, &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "too few"));
    /* one token count only: no GEMM curve */
    for (int i = 0; i < 10; i++) {
        memset(&pts[i], 0, sizeof pts[i]);
        cost_features_add(&pts[i].f, 8, 100 * i, 1);
        pts[i].t = 1e-3 * (1 + i);
    }
    ck_assert_int_eq(fit_pass(pts, 10, &o, &p, &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "every point computes 8 tokens"));
    /* a bad time names the point */
    n = grid(m, 0, 0, pts);
    pts[3].t = 0;
    ck_assert_int_eq(fit_pass(pts, n, &o, &p, &r, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "point 4"));
    /* decodes only: pairs equal KV positions; sequences, sampled rows and tokens are one
     * number, which the GEMM curve already follows; and the fixed time per pass is that
     * curve's floor (every pass reads the LM head). Those terms cannot be told apart, so
     * they are folded (fixed at 0), not invented; the KV term stays */
    n = grid(m, 0, 1, pts);
    ck_assert_msg(fit_pass(pts, n, &o, &p, &r, err, sizeof err) == 0, "%s", err);
    ck_assert(r.folded[FIT_TERM_PAIR] && r.folded[FIT_TERM_SAMPLED] &&
              r.folded[FIT_TERM_STEP] && r.folded[FIT_TERM_SEQ]);
    ck_assert(!r.folded[FIT_TERM_KV]);
    ck_assert(p.attn_pair_s == 0 && p.sampled_s == 0 && p.step_s == 0 && p.seq_s == 0);
    /* a decode's pairs are its KV positions: the folded pair time is carried by kv_token_s */
    REL_NEAR(p.kv_token_s, t.kv_token_s + t.attn_pair_s, 1e-4);
    ck_assert(r.fit_median < 1e-6);   /* and the decodes are still predicted exactly */
    fit_report_free(&r);
    cost_free(m);
}
END_TEST

/* ------------------------------------------------------------------ cost files */

static void fitted_file(cost_file_t *cf) {
    memset(cf, 0, sizeof *cf);
    cf->kind = COST_FILE_LINEAR;
    cf->model = *preset_model_find("smollm2-135m");
    truth(&cf->lin);
    cf->lin.layer_params = preset_model_layer_matrix_params(&cf->model);
    cf->lin.lm_params = preset_model_lm_params(&cf->model);
    snprintf(cf->fitted_for, sizeof cf->fitted_for, "dummy:smollm2-135m on cpu # not a comment");
    snprintf(cf->source, sizeof cf->source, "profile p.csv (64 points)");
    cf->lin.n_kv_knots = 2;
    cf->lin.kv_knots[0] = 1000;
    cf->lin.kv_extra_s[0] = 2e-9;
    cf->lin.kv_knots[1] = 50000;
    cf->lin.kv_extra_s[1] = 7e-9;
    cf->fit_points = 64;
    cf->cv_median_err = 0.01;
    cf->cv_p90_err = 0.03;
    cf->fit_median_err = 0.005;
    cf->range_tokens = 1024;
    cf->range_seqs = 64;
    cf->range_kv_tokens = 131072;
    cf->range_attn_pairs = 1e6;
    cf->lin.tp = 1;
}

START_TEST(test_cost_file_round_trip) {
    char path[256], err[512];
    cost_file_t cf, back;
    fitted_file(&cf);
    testutil_tmpfile(path, sizeof path, ".cost");
    ck_assert_msg(cost_file_write(path, &cf, "fitted by a test\nsecond line", err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(cost_file_read(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.kind, COST_FILE_LINEAR);
    ck_assert_int_eq(cost_file_same_shape(&back.model, &cf.model, err, sizeof err), 0);
    ck_assert(memcmp(&back.lin, &cf.lin, sizeof cf.lin) == 0);   /* %.17g round-trips */
    ck_assert(back.cv_median_err == 0.01 && back.range_attn_pairs == 1e6);
    ck_assert_str_eq(back.fitted_for, "dummy:smollm2-135m on cpu   not a comment");
    cost_model_t *m = cost_file_model(&back, 1, err, sizeof err);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->name, "linear");
    cost_free(m);
    ck_assert_ptr_null(cost_file_model(&back, 2, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "--tp 2"));
    /* a roofline file */
    cost_file_t rf = cf;
    rf.kind = COST_FILE_ROOFLINE;
    rf.hw = *preset_hw_find("h100");
    cost_roofline_defaults(&rf.roof);
    rf.roof.flops_eff = 0.5;
    ck_assert_int_eq(cost_file_write(path, &rf, NULL, err, sizeof err), 0);
    ck_assert_msg(cost_file_read(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.kind, COST_FILE_ROOFLINE);
    ck_assert(back.roof.flops_eff == 0.5 && back.hw.mem_bw == rf.hw.mem_bw);
    m = cost_file_model(&back, 1, err, sizeof err);
    ck_assert_ptr_nonnull(m);
    ck_assert_str_eq(m->name, "roofline");
    cost_free(m);
    unlink(path);
}
END_TEST

/* Rewrites a good file with one line replaced (or appended when `match` is NULL). */
static void damaged(const char *good, const char *path, const char *match, const char *line) {
    FILE *in = fopen(good, "r"), *out = fopen(path, "w");
    char buf[4096];
    while (fgets(buf, sizeof buf, in)) {
        if (match && strncmp(buf, match, strlen(match)) == 0) {
            if (line) fprintf(out, "%s\n", line);
            continue;
        }
        fputs(buf, out);
    }
    if (!match) fprintf(out, "%s\n", line);
    fclose(in);
    fclose(out);
}

START_TEST(test_cost_file_errors) {
    char good[256], bad[256], err[512];
    cost_file_t cf, back;
    fitted_file(&cf);
    testutil_tmpfile(good, sizeof good, ".cost");
    testutil_tmpfile(bad, sizeof bad, ".cost");
    ck_assert_int_eq(cost_file_write(good, &cf, NULL, err, sizeof err), 0);
    struct { const char *match, *line, *want; } cases[] = {
        {NULL, "flops_eff_typo = 3", "unknown key 'flops_eff_typo'"},
        {"kv_token_s", "kv_token_s = -1e-8", "kv_token_s must be a finite number >= 0"},
        {"kv_token_s", "kv_token_s = fast", "'fast' is not a number (kv_token_s)"},
        {"step_s", NULL, "missing required key 'step_s'"},
        {"gemm_rows", "gemm_rows = 1, 16, 64, 256", "gemm_rows has 4 knots but gemm_s_per_param 5"},
        {"gemm_rows", "gemm_rows = 1, 16, 16, 256, 1024", "ascending"},
        {"gemm_rows", "gemm_rows = 1, 16; 64", "expected ','"},
        {"gemm_s_per_param", "gemm_s_per_param = 1e-9, 1e-10, 1e-10, 1e-10, 1e-10",
         "must not decrease"},
        {"format", "format = 2", "format 2 is not one this twinserve reads"},
        {"kind", "kind = magic", "kind 'magic' is not linear or roofline"},
        {NULL, "flops_eff = 0.5", "key 'flops_eff' belongs to a roofline cost file"},
        {NULL, "mem_bw = 1e12", "key 'mem_bw' belongs to a roofline cost file"},
        {"layer_params", "layer_params = 12345", "does not match the model shape"},
        {"n_layers", "n_layers = 0", "n_layers must be positive"},
        {NULL, "step_s = 1", "duplicate key 'step_s'"},
        {"d_model", "d_model 576", "expected 'key = value'"},
        {"kv_extra_s", "kv_extra_s = 2e-9", "kv_knots has 2 knots but kv_extra_s 1"},
        {"kv_knots", "kv_knots = 1000, 900", "kv_knots must be ascending"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        damaged(good, bad, cases[i].match, cases[i].line);
        ck_assert_msg(cost_file_read(bad, &back, err, sizeof err) == -1, "case %zu read", i);
        ck_assert_msg(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err,
                      cases[i].want);
        ck_assert_msg(strncmp(err, bad, strlen(bad)) == 0, "case %zu: '%s' does not name the file",
                      i, err);
    }
    /* a line-level error names the line */
    damaged(good, bad, NULL, "bogus = 1");
    ck_assert_int_eq(cost_file_read(bad, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, ".cost:") && strstr(err, ": unknown key 'bogus'"), "%s", err);
    ck_assert_int_eq(cost_file_read("/nonexistent/x.cost", &back, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
    unlink(good);
    unlink(bad);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fit");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_nnls);
    tcase_add_test(tc, test_linear_model_by_hand);
    tcase_add_test(tc, test_fit_recovers_known_model);
    tcase_add_test(tc, test_fit_recovers_moe);
    tcase_add_test(tc, test_fit_kv_curve);
    tcase_add_test(tc, test_fit_outlier_dropped);
    tcase_add_test(tc, test_fit_degenerate);
    tcase_add_test(tc, test_cost_file_round_trip);
    tcase_add_test(tc, test_cost_file_errors);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_compare: the bootstrap core (statistics, exact cases, determinism, CI width against
 * theory, calibration on equal distributions), verdicts, and compare_runs on simulator runs:
 * a known difference is found, two seeds of one policy on one trace mostly are not, pairing
 * detection within and across databases, and the empty-run error. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/compare.h"
#include "analysis/experiment.h"
#include "analysis/report.h"
#include "traces/stats.h"
#include "traces/rng.h"
#include "sim/sim.h"
#include "tests/testutil.h"
#include "traces/recorder.h"
#include "traces/trace_gen.h"

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9)

static const compare_stat_t MEAN = {COMPARE_MEAN, 0}, P50 = {COMPARE_PCTL, 50},
                            P99 = {COMPARE_PCTL, 99};

/* ---------------------------------------------------------------- the core */

START_TEST(stat_excludes_missing_values) {
    double x[] = {3, NAN, 1, 2, NAN, 4};
    EQ(compare_stat(MEAN, x, 6), 2.5);
    EQ(compare_stat(P50, x, 6), 2.5);
    double sorted[] = {1, 2, 3, 4};
    EQ(compare_stat(P99, x, 6), stats_percentile_sorted(sorted, 4, 99));
    double none[] = {NAN, NAN};
    ck_assert(isnan(compare_stat(MEAN, none, 2)));
    ck_assert(isnan(compare_stat(P50, none, 0)));
}
END_TEST

static void fill_lognormal(rng_t *r, double *x, size_t n, double mu, double sigma) {
    for (size_t i = 0; i < n; i++) x[i] = exp(mu + sigma * rng_normal(r));
}

START_TEST(paired_exact_cases) {
    enum { N = 200 };
    double a[N], b[N];
    rng_t r;
    rng_seed(&r, 1);
    fill_lognormal(&r, a, N, 0, 1);
    compare_est_t e;
    char err[128];
    /* Identical runs: every resampled difference is exactly 0. */
    ck_assert_int_eq(compare_bootstrap(a, N, a, N, 1, P99, 500, 7, 0.95, &e, err, sizeof err), 0);
    ck_assert(e.diff == 0 && e.lo == 0 && e.hi == 0 && e.dropped == 0);
    ck_assert_int_eq(compare_verdict(&e, 0), COMPARE_SAME);
    /* B = A + 1 request by request: paired, every statistic moves by exactly 1. */
    for (int i = 0; i < N; i++) b[i] = a[i] + 1;
    const compare_stat_t st[] = {MEAN, P50, P99};
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(compare_bootstrap(a, N, b, N, 1, st[k], 500, 7, 0.95, &e, err,
                                           sizeof err), 0);
        EQ(e.diff, 1);
        EQ(e.lo, 1);
        EQ(e.hi, 1);
        ck_assert_int_eq(compare_verdict(&e, 0), COMPARE_WORSE);
        ck_assert_int_eq(compare_verdict(&e, 1), COMPARE_BETTER);
    }
    EQ(e.rel_pct, 100 * (e.b - e.a) / e.a);
    ck_assert_str_eq(compare_verdict_name(COMPARE_SAME), "no significant difference");
    compare_est_t none = {.lo = NAN, .hi = NAN};
    ck_assert_int_eq(compare_verdict(&none, 0), COMPARE_NA);
}
END_TEST

START_TEST(deterministic_and_seeded) {
    enum { N = 300 };
    double a[N], b[N];
    rng_t r;
    rng_seed(&r, 2);
    fill_lognormal(&r, a, N, 0, 1);
    fill_lognormal(&r, b, N, 0, 1);
    compare_est_t e1, e2, e3;
    char err[128];
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, P50, 300, 11, 0.95, &e1, err, sizeof err), 0);
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, P50, 300, 11, 0.95, &e2, err, sizeof err), 0);
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, P50, 300, 12, 0.95, &e3, err, sizeof err), 0);
    ck_assert(e1.lo == e2.lo && e1.hi == e2.hi);
    ck_assert(e1.lo != e3.lo || e1.hi != e3.hi);
    ck_assert(e1.lo <= e1.diff && e1.diff <= e1.hi);
    ck_assert_int_eq(e1.resamples, 300);
}
END_TEST

START_TEST(bad_arguments) {
    double a[3] = {1, 2, 3};
    compare_est_t e;
    char err[128];
    ck_assert_int_eq(compare_bootstrap(a, 3, a, 2, 1, MEAN, 10, 1, 0.95, &e, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "equal sizes"));
    ck_assert_int_eq(compare_bootstrap(a, 3, a, 3, 0, MEAN, 0, 1, 0.95, &e, err, sizeof err), -1);
    ck_assert_int_eq(compare_bootstrap(a, 3, a, 3, 0, MEAN, 10, 1, 1.0, &e, err, sizeof err), -1);
    compare_stat_t bad = {COMPARE_PCTL, 101};
    ck_assert_int_eq(compare_bootstrap(a, 3, a, 3, 0, bad, 10, 1, 0.95, &e, err, sizeof err), -1);
    /* No values on one side: estimates NAN, every resample dropped, no verdict. */
    double none[2] = {NAN, NAN};
    ck_assert_int_eq(compare_bootstrap(a, 3, none, 2, 0, MEAN, 10, 1, 0.95, &e, err, sizeof err),
                     0);
    ck_assert(isnan(e.b) && isnan(e.lo) && e.dropped == 10);
    ck_assert_int_eq(compare_verdict(&e, 0), COMPARE_NA);
}
END_TEST

/* Unpaired means of N(0,1) samples: the CI half-width is about 1.96 sqrt(2/n); the median's
 * about 1.96 sqrt(pi/2) sqrt(2/n). Checks that the weighted-count statistics are right. */
START_TEST(ci_width_matches_theory) {
    enum { N = 2000 };
    static double a[N], b[N];
    rng_t r;
    rng_seed(&r, 3);
    for (int i = 0; i < N; i++) a[i] = rng_normal(&r), b[i] = rng_normal(&r);
    compare_est_t e;
    char err[128];
    double se = sqrt(2.0 / N);
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, MEAN, 2000, 5, 0.95, &e, err, sizeof err), 0);
    double half = (e.hi - e.lo) / 2;
    ck_assert_msg(half > 0.85 * 1.96 * se && half < 1.15 * 1.96 * se, "mean half-width %g", half);
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, P50, 2000, 5, 0.95, &e, err, sizeof err), 0);
    half = (e.hi - e.lo) / 2;
    double want = 1.96 * sqrt(M_PI / 2) * se;
    ck_assert_msg(half > 0.8 * want && half < 1.2 * want, "median half-width %g vs %g", half,
                  want);
}
END_TEST

/* A and B drawn from one distribution: "no significant difference" in >= 90% of 20 trials
 * for the mean and the median, unpaired and paired (B = A's request plus noise around 0). */
START_TEST(calibration_on_equal_distributions) {
    enum { N = 300, TRIALS = 20 };
    double a[N], b[N];
    rng_t r;
    rng_seed(&r, 4);
    const compare_stat_t st[] = {MEAN, P50};
    int same[2][2] = {{0, 0}, {0, 0}};
    char err[128];
    for (int t = 0; t < TRIALS; t++) {
        fill_lognormal(&r, a, N, -2, 0.8);
        fill_lognormal(&r, b, N, -2, 0.8);
        for (int k = 0; k < 2; k++) {
            compare_est_t e;
            ck_assert_int_eq(compare_bootstrap(a, N, b, N, 0, st[k], 1000, (uint64_t)t, 0.95,
                                               &e, err, sizeof err), 0);
            same[0][k] += compare_verdict(&e, 0) == COMPARE_SAME;
        }
        /* Paired: each request's B is its A plus symmetric noise. */
        for (int i = 0; i < N; i++) b[i] = a[i] + 0.02 * rng_normal(&r);
        for (int k = 0; k < 2; k++) {
            compare_est_t e;
            ck_assert_int_eq(compare_bootstrap(a, N, b, N, 1, st[k], 1000, (uint64_t)t, 0.95,
                                               &e, err, sizeof err), 0);
            same[1][k] += compare_verdict(&e, 0) == COMPARE_SAME;
        }
    }
    for (int p = 0; p < 2; p++)
        for (int k = 0; k < 2; k++)
            ck_assert_msg(same[p][k] >= 18, "%s %s: %d of %d trials without difference",
                          p ? "paired" : "unpaired", k ? "p50" : "mean", same[p][k], TRIALS);
}
END_TEST


/* Runs of one configuration differ by a run-level shift (the load, the machine) on top of
 * request noise. Two experiments of 6 runs from one distribution: the hierarchical
 * bootstrap says "no significant difference" in >= 17 of 20 trials, while treating each
 * side's pooled requests as one run (the flat bootstrap) finds a difference in most. */
START_TEST(hierarchical_bootstrap_carries_run_noise) {
    enum { R = 6, N = 200, TRIALS = 20 };
    static double a[R * N], b[R * N];
    size_t off[R + 1];
    for (int k = 0; k <= R; k++) off[k] = (size_t)k * N;
    rng_t r;
    rng_seed(&r, 12);
    int hier_same = 0, flat_same = 0;
    char err[128];
    for (int t = 0; t < TRIALS; t++) {
        double *side[2] = {a, b};
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < R; k++) {
                double shift = 0.5 * rng_normal(&r);
                fill_lognormal(&r, side[s] + k * N, N, 0, 0.5);
                for (int i = 0; i < N; i++) side[s][k * N + i] += shift;
            }
        compare_est_t h, f;
        ck_assert_int_eq(compare_bootstrap_runs(a, off, R, b, off, R, 0, MEAN, 500, (uint64_t)t,
                                                0.95, &h, err, sizeof err), 0);
        ck_assert_int_eq(compare_bootstrap(a, R * N, b, R * N, 0, MEAN, 500, (uint64_t)t, 0.95,
                                           &f, err, sizeof err), 0);
        EQ(h.a, f.a);   /* the point estimate is the pooled one either way */
        ck_assert(h.hi - h.lo > f.hi - f.lo);
        hier_same += compare_verdict(&h, 0) == COMPARE_SAME;
        flat_same += compare_verdict(&f, 0) == COMPARE_SAME;
    }
    ck_assert_msg(hier_same >= 17, "hierarchical: %d of %d without difference", hier_same,
                  TRIALS);
    ck_assert_msg(flat_same <= 12, "flat: %d of %d without difference", flat_same, TRIALS);
    /* One run a side is exactly the single-run bootstrap, paired and not. */
    for (int paired = 0; paired < 2; paired++) {
        compare_est_t x, y;
        const size_t one[2] = {0, N};
        ck_assert_int_eq(compare_bootstrap_runs(a, one, 1, b, one, 1, paired, P99, 300, 5, 0.95,
                                                &x, err, sizeof err), 0);
        ck_assert_int_eq(compare_bootstrap(a, N, b, N, paired, P99, 300, 5, 0.95, &y, err,
                                           sizeof err), 0);
        ck_assert(x.lo == y.lo && x.hi == y.hi && x.diff == y.diff);
    }
}
END_TEST

/* A 0.5% shift on every request is significant (the paired interval is tight), but below
 * the default 1% minimum effect: "no meaningful difference"; with min_effect 0 it counts. */
/* Paired by run: run k of A and B hold the same requests (b = a + 0.5 s each), runs of other
 * sizes and levels; every draw keeps pairs together, so the mean's interval is exactly
 * [0.5, 0.5]; resampled without pairing it is wide. */
START_TEST(paired_by_run_keeps_pairs) {
    enum { N0 = 50, N1 = 80 };
    double a[N0 + N1], b[N0 + N1];
    rng_t r;
    rng_seed(&r, 5);
    fill_lognormal(&r, a, N0, 0, 0.5);
    fill_lognormal(&r, a + N0, N1, 2, 0.5);
    for (int i = 0; i < N0 + N1; i++) b[i] = a[i] + 0.5;
    const size_t off[3] = {0, N0, N0 + N1};
    compare_est_t e;
    char err[256];
    ck_assert_int_eq(compare_bootstrap_runs(a, off, 2, b, off, 2, COMPARE_PAIR_RUN, MEAN, 400, 3,
                                            0.95, &e, err, sizeof err), 0);
    ck_assert_msg(fabs(e.lo - 0.5) < 1e-9 && fabs(e.hi - 0.5) < 1e-9, "%g..%g", e.lo, e.hi);
    ck_assert_int_eq(compare_bootstrap_runs(a, off, 2, b, off, 2, COMPARE_PAIR_NONE, MEAN, 400,
                                            3, 0.95, &e, err, sizeof err), 0);
    ck_assert_msg(e.hi - e.lo > 1, "unpaired %g..%g", e.lo, e.hi);
    /* runs of other sizes on the two sides cannot pair */
    const size_t off2[3] = {0, N1, N0 + N1};
    ck_assert_int_eq(compare_bootstrap_runs(a, off, 2, b, off2, 2, COMPARE_PAIR_RUN, MEAN, 10,
                                            3, 0.95, &e, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "paired by run"), "%s", err);
}
END_TEST

START_TEST(min_effect_rule) {
    enum { N = 500 };
    double a[N], b[N];
    rng_t r;
    rng_seed(&r, 3);
    fill_lognormal(&r, a, N, 0, 1);
    for (int i = 0; i < N; i++) b[i] = a[i] * 1.005;
    compare_est_t e;
    char err[128];
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 1, MEAN, 500, 1, 0.95, &e, err, sizeof err),
                     0);
    ck_assert(e.lo > 0);
    ck_assert_int_eq(compare_verdict_min(&e, 0, COMPARE_DEFAULT_MIN_EFFECT), COMPARE_NEGLIGIBLE);
    ck_assert_str_eq(compare_verdict_name(COMPARE_NEGLIGIBLE), "no meaningful difference");
    ck_assert_int_eq(compare_verdict_min(&e, 0, 0), COMPARE_WORSE);
    ck_assert_int_eq(compare_verdict(&e, 0), COMPARE_WORSE);
    for (int i = 0; i < N; i++) b[i] = a[i] * 1.02;
    ck_assert_int_eq(compare_bootstrap(a, N, b, N, 1, MEAN, 500, 1, 0.95, &e, err, sizeof err),
                     0);
    ck_assert_int_eq(compare_verdict_min(&e, 0, COMPARE_DEFAULT_MIN_EFFECT), COMPARE_WORSE);
    /* An interval holding 0 stays "no significant difference" whatever the threshold. */
    compare_est_t z = {1, 1.001, 0.001, 0.1, -0.01, 0.01, 100, 0};
    ck_assert_int_eq(compare_verdict_min(&z, 0, 0.01), COMPARE_SAME);
}
END_TEST

/* ---------------------------------------------------------------- two runs */

static char db[256], db2[256], trace[256];

static void setup(void) {
    ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db"));
    ck_assert_ptr_nonnull(testutil_tmpfile(db2, sizeof db2, ".db"));
    testutil_gen_trace(trace, sizeof trace, 300, 2, 7, "lognormal:500:0.8",
                       "lognormal:100:0.8");
}

static void teardown(void) {
    testutil_unlink_db(db);
    testutil_unlink_db(db2);
    unlink(trace);
}

static int64_t sim(const char *path, const char *policy, const char *name, uint64_t seed) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = policy;
    o.db_path = path;
    o.run_name = name;
    o.seed = seed;
    o.roofline = 1;   /* the load these verdict rates were established on */
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    return res.run_id;
}

static compare_result_t *compare(const char *pa, int64_t a, const char *pb, int64_t b,
                                 int resamples, uint64_t seed) {
    sqlite3 *ha, *hb;
    char err[1024];
    ck_assert_msg(summary_open(pa, &ha, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(summary_open(pb, &hb, err, sizeof err) == 0, "%s", err);
    compare_opts_t o;
    compare_opts_default(&o);
    o.resamples = resamples;
    o.seed = seed;
    compare_result_t *res = malloc(sizeof *res);
    ck_assert_msg(compare_runs(ha, pa, a, hb, pb, b, &o, res, err, sizeof err) == 0, "%s", err);
    sqlite3_close(ha);
    sqlite3_close(hb);
    return res;
}

static const compare_metric_t *metric(const compare_result_t *r, const char *name) {
    for (size_t k = 0; k < r->n_metrics; k++)
        if (strcmp(r->m[k].name, name) == 0) return &r->m[k];
    ck_abort_msg("no metric %s", name);
    return NULL;
}

/* Static batching waits for a whole batch to finish: continuous batching (B) has far lower
 * TTFT and E2E on the same trace, and the runs pair by request. */
START_TEST(known_difference_is_significant) {
    int64_t a = sim(db, "policies/static.lua", "static", 0);
    int64_t b = sim(db, "policies/continuous.lua", "continuous", 0);
    compare_result_t *r = compare(db, a, db, b, 1000, COMPARE_DEFAULT_SEED);
    ck_assert_int_eq(r->paired, 1);
    ck_assert_ptr_nonnull(strstr(r->pairing, "paired by request"));
    const char *better[] = {"ttft_mean", "ttft_p50", "ttft_p99", "e2e_mean", "e2e_p50"};
    for (size_t i = 0; i < sizeof better / sizeof better[0]; i++) {
        const compare_metric_t *m = metric(r, better[i]);
        ck_assert_msg(m->verdict == COMPARE_BETTER, "%s: %s (diff %g, CI %g..%g)", better[i],
                      compare_verdict_name(m->verdict), m->est.diff, m->est.lo, m->est.hi);
    }
    /* Throughput rows: values, no CI. */
    const compare_metric_t *t = metric(r, "out_tok_per_s");
    ck_assert(isnan(t->est.lo) && t->verdict == COMPARE_NA && t->est.a > 0);
    EQ(t->est.a, r->a.out_tok_per_s);
    /* Swapping A and B flips the verdicts. */
    compare_result_t *s = compare(db, b, db, a, 1000, COMPARE_DEFAULT_SEED);
    ck_assert_int_eq(metric(s, "ttft_mean")->verdict, COMPARE_WORSE);
    EQ(metric(s, "ttft_mean")->est.diff, -metric(r, "ttft_mean")->est.diff);
    /* The printers. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    compare_print(f, r);
    compare_json(f, r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "1000 resamples, seed 20240611"));
    ck_assert_ptr_nonnull(strstr(buf, "\"ttft_mean\": {\"a\": "));
    ck_assert_ptr_nonnull(strstr(buf, "\"verdict\": \"better\""));
    ck_assert_ptr_null(strstr(buf, "nan"));
    free(buf);
    free(r);
    free(s);
}
END_TEST

/* The speculative policy's acceptances follow the seed: two seeds on one trace differ
 * request by request, yet neither is better. Of 20 seeded pairs, >= 90% of the latency
 * verdicts are "no significant difference" (and >= 80% for every single metric). */
START_TEST(two_seeds_mostly_no_difference) {
    enum { TRIALS = 20 };
    int same_total = 0, total = 0, per_metric[COMPARE_MAX_METRICS] = {0};
    size_t nlat = 0;
    for (int t = 0; t < TRIALS; t++) {
        char na[32], nb[32];
        snprintf(na, sizeof na, "spec-%d", 2 * t + 1);
        snprintf(nb, sizeof nb, "spec-%d", 2 * t + 2);
        int64_t a = sim(db, "policies/speculative.lua", na, (uint64_t)(2 * t + 1));
        int64_t b = sim(db, "policies/speculative.lua", nb, (uint64_t)(2 * t + 2));
        compare_result_t *r = compare(db, a, db, b, 500, (uint64_t)t);
        ck_assert_int_eq(r->paired, 1);
        nlat = 0;
        for (size_t k = 0; k < r->n_metrics; k++) {
            if (r->m[k].higher_is_better) continue;   /* throughput: no verdict */
            int same = r->m[k].verdict == COMPARE_SAME;
            per_metric[nlat++] += same;
            same_total += same;
            total++;
        }
        free(r);
    }
    ck_assert_uint_eq(nlat, 12);
    ck_assert_msg(same_total >= 0.9 * total, "%d of %d verdicts without difference", same_total,
                  total);
    for (size_t k = 0; k < nlat; k++)
        ck_assert_msg(per_metric[k] >= 16, "metric %zu: %d of %d", k, per_metric[k], TRIALS);
}
END_TEST

START_TEST(across_databases_and_unpaired) {
    int64_t a = sim(db, "policies/continuous.lua", "a", 0);
    int64_t b = sim(db2, "policies/chunked_prefill.lua", "b", 0);
    compare_result_t *r = compare(db, a, db2, b, 200, 1);
    ck_assert_int_eq(r->paired, 1);   /* same trace text and requests, other database */
    ck_assert_str_eq(r->b.name, "b");
    ck_assert_str_eq(r->path_b, db2);
    free(r);
    /* A hand-made run with other arrivals is not paired. */
    rec_t *w = rec_open(db2);
    ck_assert_msg(rec_errmsg(w) == NULL, "%s", rec_errmsg(w));
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT trace FROM runs WHERE id = 1", -1, &st,
                                        NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    rec_run_info_t in = {.name = "shifted", .kind = "sim",
                         .trace = (const char *)sqlite3_column_text(st, 0)};
    int64_t c;
    ck_assert(rec_run_begin(w, &in, &c) == 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    for (int i = 0; i < 300; i++) {
        rec_request_t q = {.req_id = i, .arrival_s = i + 0.5, .prompt_tokens = 10,
                           .output_tokens = 5, .generated_tokens = 5, .first_scheduled_s = i + 0.5,
                           .first_token_s = i + 0.6, .finish_s = i + 1, .status = "finished"};
        ck_assert(rec_request(w, c, &q) == 0);
    }
    ck_assert(rec_run_end(w, c, 1, NULL, 0) == 0);
    rec_close(w);
    r = compare(db, a, db2, c, 200, 1);
    ck_assert_int_eq(r->paired, 0);
    ck_assert_ptr_nonnull(strstr(r->pairing, "request 0 differs"));
    free(r);
}
END_TEST

/* One run's requests.COL in req_id order, NULL as NAN (as compare_runs reads them). */
static double *column(const char *path, int64_t run, const char *col, size_t *n) {
    sqlite3 *h;
    sqlite3_stmt *st;
    char sql[160];
    ck_assert_int_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    snprintf(sql, sizeof sql, "SELECT %s FROM requests WHERE run_id = ?1 ORDER BY req_id", col);
    ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    double *x = NULL;
    *n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        x = realloc(x, (*n + 1) * sizeof *x);
        ck_assert_ptr_nonnull(x);
        x[(*n)++] = sqlite3_column_type(st, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return x;
}

static int same_double(double x, double y) { return (isnan(x) && isnan(y)) || x == y; }

/* compare_runs bootstraps all its metrics from one set of draws: each metric's estimate is
 * bit for bit what compare_bootstrap gives for that column and statistic alone with the same
 * seed, paired and unpaired (B on another trace), with missing values (rejected requests'
 * TTFT, one-token TPOT) on the sides. */
START_TEST(joint_bootstrap_equals_one_metric_at_a_time) {
    int64_t a = sim(db, "policies/static.lua", "static", 0);
    int64_t b = sim(db, "policies/continuous.lua", "continuous", 0);
    char other[256];
    testutil_gen_trace(other, sizeof other, 200, 3, 8, "lognormal:500:0.8", "uniform:1:4");
    char keep[256];
    snprintf(keep, sizeof keep, "%s", trace);
    snprintf(trace, sizeof trace, "%s", other);
    int64_t c = sim(db2, "policies/chunked_prefill.lua", "other", 0);
    snprintf(trace, sizeof trace, "%s", keep);
    unlink(other);
    static const char *const cols[] = {"ttft_s", "tpot_s", "e2e_s", "queue_s"};
    static const char *const names[] = {"ttft", "tpot", "e2e", "queue"};
    const compare_stat_t st[] = {MEAN, P50, P99};
    const char *const stname[] = {"mean", "p50", "p99"};
    for (int pair = 0; pair < 2; pair++) {
        const char *pb = pair ? db2 : db;
        int64_t rb = pair ? c : b;
        compare_result_t *r = compare(db, a, pb, rb, 300, 17);
        ck_assert_int_eq(r->paired, !pair);
        for (int k = 0; k < 4; k++) {
            size_t na, nb;
            double *xa = column(db, a, cols[k], &na), *xb = column(pb, rb, cols[k], &nb);
            for (int q = 0; q < 3; q++) {
                char name[32], err[128];
                snprintf(name, sizeof name, "%s_%s", names[k], stname[q]);
                compare_est_t e;
                ck_assert_int_eq(compare_bootstrap(xa, na, xb, nb, r->paired, st[q], 300, 17,
                                                   COMPARE_DEFAULT_LEVEL, &e, err, sizeof err),
                                 0);
                const compare_est_t *j = &metric(r, name)->est;
                ck_assert_msg(same_double(j->a, e.a) && same_double(j->b, e.b) &&
                                  same_double(j->diff, e.diff) &&
                                  same_double(j->rel_pct, e.rel_pct) &&
                                  same_double(j->lo, e.lo) && same_double(j->hi, e.hi) &&
                                  j->dropped == e.dropped && j->resamples == e.resamples,
                              "%s (%s): joint CI %.17g..%.17g, alone %.17g..%.17g", name,
                              pair ? "unpaired" : "paired", j->lo, j->hi, e.lo, e.hi);
            }
            free(xa);
            free(xb);
        }
        free(r);
    }
}
END_TEST


static int64_t sim_exp(const char *policy, const char *name, int k, int of, uint64_t seed) {
    char run[160], member[256];
    sim_opts_t o;
    sim_opts_defaults(&o);
    experiment_run_name(run, sizeof run, name, k);
    experiment_member(member, sizeof member, name, k, of, seed);
    o.trace_path = trace;
    o.policy_path = policy;
    o.db_path = db;
    o.run_name = run;
    o.seed = seed;
    o.roofline = 1;
    o.config_extra = member;
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    return res.run_id;
}

/* Two experiments of the speculative policy (acceptances drawn from the seed), seeds 0..4
 * against 5..9 on one trace: no latency row is better or worse, and the experiment names
 * resolve to their runs in index order; a plain run resolves to itself. */
START_TEST(experiments_with_other_seeds_no_difference) {
    enum { R = 5 };
    int64_t ia[R], ib[R];
    for (int k = 0; k < R; k++) {
        ia[k] = sim_exp("policies/speculative.lua", "ea", k, R, (uint64_t)k);
        ib[k] = sim_exp("policies/speculative.lua", "eb", k, R, (uint64_t)(R + k));
    }
    sqlite3 *h;
    char err[1024];
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    int64_t *ids;
    size_t n;
    int is_exp;
    ck_assert_int_eq(experiment_resolve(h, "eb", &ids, &n, &is_exp, err, sizeof err), 0);
    ck_assert(is_exp && n == R && ids[0] == ib[0] && ids[R - 1] == ib[R - 1]);
    free(ids);
    ck_assert_int_eq(experiment_resolve(h, "ea-r2", &ids, &n, &is_exp, err, sizeof err), 0);
    ck_assert(!is_exp && n == 1 && ids[0] == ia[2]);
    free(ids);
    compare_opts_t o;
    compare_opts_default(&o);
    o.resamples = 500;
    compare_input_t a = {h, db, "ea", ia, R}, b = {h, db, "eb", ib, R};
    compare_result_t *r = malloc(sizeof *r);
    ck_assert_msg(compare_experiments(&a, &b, &o, r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r->paired, 1);
    ck_assert_uint_eq(r->sa.runs, R);
    ck_assert_str_eq(r->sb.experiment, "eb");
    int latency_rows = 0;
    for (size_t k = 0; k < r->n_metrics; k++) {
        const compare_metric_t *m = &r->m[k];
        if (m->higher_is_better) continue;
        latency_rows++;
        ck_assert_msg(m->verdict == COMPARE_SAME || m->verdict == COMPARE_NEGLIGIBLE,
                      "%s: %s (diff %g, CI %g..%g)", m->name, compare_verdict_name(m->verdict),
                      m->est.diff, m->est.lo, m->est.hi);
    }
    ck_assert_int_eq(latency_rows, 12);
    /* Throughput has an interval with several runs a side, and so do both speculative rows:
     * other seeds, same alpha, so no different acceptance either. */
    ck_assert(!isnan(metric(r, "req_per_s")->est.lo));
    for (size_t k = 0; k < 2; k++) {
        const compare_metric_t *m = metric(r, k ? "spec_tokens_per_step" : "spec_acceptance");
        ck_assert_msg(!isnan(m->est.lo) && (m->verdict == COMPARE_SAME ||
                                            m->verdict == COMPARE_NEGLIGIBLE),
                      "%s: %s (diff %g, CI %g..%g)", m->name, compare_verdict_name(m->verdict),
                      m->est.diff, m->est.lo, m->est.hi);
    }
    free(r);
    sqlite3_close(h);
}
END_TEST

/* The speculative rows: present when a run of either side verified drafts, with report's
 * figures for each run; the acceptance rate resampled by request (an interval for single
 * runs), tokens per step one figure per run; absent between two runs without drafts. */
START_TEST(speculative_rows) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/speculative.lua";
    o.db_path = db;
    o.roofline = 1;
    const char *sets[] = {"alpha=0.5", "k=2"};
    o.sets = sets;
    o.n_sets = 2;
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    int64_t lo = res.run_id;
    int64_t hi = sim(db, "policies/speculative.lua", "spec", 0);   /* alpha 0.7, k 4 */
    int64_t cont = sim(db, "policies/continuous.lua", "cont", 0);
    int64_t chunk = sim(db, "policies/chunked_prefill.lua", "chunk", 0);
    sqlite3 *h;
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    report_spec_t slo, shi;
    ck_assert_int_eq(report_load_spec(h, lo, &slo, err, sizeof err), 0);
    ck_assert_int_eq(report_load_spec(h, hi, &shi, err, sizeof err), 0);
    sqlite3_close(h);
    ck_assert(slo.proposed > 0 && shi.proposed > 0);

    compare_result_t *r = compare(db, lo, db, hi, 200, COMPARE_DEFAULT_SEED);
    const compare_metric_t *acc = metric(r, "spec_acceptance");
    const compare_metric_t *tps = metric(r, "spec_tokens_per_step");
    EQ(acc->est.a, slo.acceptance);
    EQ(acc->est.b, shi.acceptance);
    EQ(tps->est.a, slo.tokens_per_step);
    EQ(tps->est.b, shi.tokens_per_step);
    /* acceptance pools the drawn requests' drafts: an interval even for single runs, and
     * alpha 0.7 against 0.5 is better; tokens per step is one figure per run */
    ck_assert_msg(acc->verdict == COMPARE_BETTER && acc->est.lo > 0 && acc->est.lo < acc->est.diff
                  && acc->est.diff < acc->est.hi && acc->est.dropped == 0,
                  "%s: diff %g, CI %g..%g", compare_verdict_name(acc->verdict), acc->est.diff,
                  acc->est.lo, acc->est.hi);
    ck_assert(tps->est.b > tps->est.a);
    ck_assert(isnan(tps->est.lo) && tps->verdict == COMPARE_NA);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    compare_print(f, r);
    compare_json(f, r);
    fclose(f);
    ck_assert_msg(strstr(buf, "\nspec accept ") && strstr(buf, "\ntokens/step "), "%s", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\"spec_tokens_per_step\": {\"a\": "));
    free(buf);
    free(r);

    /* A run against itself: paired, every draw the same on both sides. */
    r = compare(db, hi, db, hi, 200, COMPARE_DEFAULT_SEED);
    acc = metric(r, "spec_acceptance");
    ck_assert(acc->est.diff == 0 && acc->est.lo == 0 && acc->est.hi == 0);
    ck_assert_int_eq(acc->verdict, COMPARE_SAME);
    free(r);
    /* One side without drafts: the rows are there, its values missing, no verdict. */
    r = compare(db, cont, db, hi, 200, COMPARE_DEFAULT_SEED);
    acc = metric(r, "spec_acceptance");
    ck_assert(isnan(acc->est.a) && isnan(acc->est.lo) && acc->verdict == COMPARE_NA);
    EQ(acc->est.b, shi.acceptance);
    free(r);
    /* Neither side: no speculative rows. */
    r = compare(db, cont, db, chunk, 200, COMPARE_DEFAULT_SEED);
    for (size_t k = 0; k < r->n_metrics; k++)
        ck_assert_msg(strncmp(r->m[k].name, "spec_", 5) != 0, "%s", r->m[k].name);
    free(r);
}
END_TEST

static void exec_sql(const char *path, const char *sql) {
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(path, &h), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(h, sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_close(h);
}

/* B is A with its 30 slowest requests turned away. Paired, latency covers the requests both
 * finished (the same values: no difference), the counts say what B dropped, and the
 * finished row finds B worse. Unpaired (other trace text), B's latency looks better, and
 * that win carries a caveat. With an SLO, attainment matches report's. */
START_TEST(dropped_requests_never_win_silently) {
    int64_t a = sim(db, "policies/continuous.lua", "a", 0);
    int64_t b = sim(db, "policies/continuous.lua", "b", 0);
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE requests SET status = 'rejected', reason = 'test', "
             "first_token_s = NULL, finish_s = NULL, ttft_s = NULL, tpot_s = NULL, e2e_s = NULL "
             "WHERE run_id = %lld AND req_id IN (SELECT req_id FROM requests WHERE run_id = "
             "%lld ORDER BY e2e_s DESC LIMIT 30)", (long long)b, (long long)b);
    exec_sql(db, sql);
    compare_result_t *r = compare(db, a, db, b, 300, 1);
    ck_assert_int_eq(r->paired, 1);
    ck_assert_int_eq(r->sb.rejected, r->sa.rejected + 30);
    ck_assert_int_eq(r->sb.finished, r->sa.finished - 30);
    ck_assert_msg(strstr(r->latency, "finished in every run of both sides") != NULL, "%s",
                  r->latency);
    ck_assert_int_eq(metric(r, "e2e_mean")->verdict, COMPARE_SAME);
    EQ(metric(r, "e2e_mean")->est.diff, 0);
    ck_assert_int_eq(metric(r, "finished")->verdict, COMPARE_WORSE);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    compare_print(f, r);
    compare_json(f, r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "  rejected "));
    ck_assert_ptr_nonnull(strstr(buf, "\"rejected\": "));
    ck_assert_ptr_null(strstr(buf, "nan"));
    free(buf);
    free(r);
    snprintf(sql, sizeof sql, "UPDATE runs SET trace = 'elsewhere' WHERE id = %lld",
             (long long)b);
    exec_sql(db, sql);
    r = compare(db, a, db, b, 300, 1);
    ck_assert_int_eq(r->paired, 0);
    const compare_metric_t *m = metric(r, "e2e_mean");
    ck_assert_int_eq(m->verdict, COMPARE_BETTER);
    ck_assert_msg(strstr(m->caveat, "B finished fewer") != NULL, "caveat '%s'", m->caveat);
    free(r);
    /* SLO rows: attainment as report computes it, goodput, both with intervals. */
    sqlite3 *ha, *hb;
    char err[1024];
    ck_assert_int_eq(summary_open(db, &ha, err, sizeof err), 0);
    hb = ha;
    compare_opts_t o;
    compare_opts_default(&o);
    o.resamples = 300;
    o.has_slo = 1;
    o.slo = (report_slo_t){1.0, 0.05, NAN};
    r = malloc(sizeof *r);
    ck_assert_msg(compare_runs(ha, db, a, hb, db, b, &o, r, err, sizeof err) == 0, "%s", err);
    report_t ra;
    ck_assert_int_eq(report_load_summary(ha, b, &o.slo, &ra, err, sizeof err), 0);
    const compare_metric_t *att = metric(r, "slo_attainment"), *gp = metric(r, "goodput");
    EQ(att->est.b, ra.attainment);
    EQ(gp->est.b, ra.goodput);
    ck_assert(!isnan(att->est.lo) && !isnan(gp->est.lo));
    free(r);
    sqlite3_close(ha);
}
END_TEST

static int64_t sim_win(const char *policy, const char *name, int k, int of, double len) {
    char run[160], member[320];
    sim_opts_t o;
    sim_opts_defaults(&o);
    experiment_run_name(run, sizeof run, name, k);
    experiment_member_window(member, sizeof member, name, k, of, 0, k * len, len);
    o.trace_path = trace;
    o.policy_path = policy;
    o.db_path = db;
    o.run_name = run;
    o.roofline = 1;
    o.config_extra = member;
    o.trace_opts.start_s = k * len;
    o.trace_opts.duration_s = len;
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    return res.run_id;
}

static compare_result_t *compare_exps(const char *na, const int64_t *ia, size_t n_a,
                                      const char *nb, const int64_t *ib, size_t n_b) {
    sqlite3 *h;
    char err[1024];
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    compare_opts_t o;
    compare_opts_default(&o);
    o.resamples = 300;
    compare_input_t a = {h, db, na, ia, n_a}, b = {h, db, nb, ib, n_b};
    compare_result_t *r = malloc(sizeof *r);
    ck_assert_msg(compare_experiments(&a, &b, &o, r, err, sizeof err) == 0, "%s", err);
    sqlite3_close(h);
    return r;
}

/* Three seeds of a trace replay are copies: each side counts as one run, says so, and its
 * throughput gets no interval (copies would make one of zero width). */
START_TEST(copies_count_as_one_run) {
    int64_t ia[3], ib[3];
    for (int k = 0; k < 3; k++) {
        ia[k] = sim_exp("policies/continuous.lua", "ca", k, 3, (uint64_t)k);
        ib[k] = sim_exp("policies/chunked_prefill.lua", "cb", k, 3, (uint64_t)k);
    }
    sqlite3 *h;
    char err[256];
    int same = 0;
    ck_assert_int_eq(summary_open(db, &h, err, sizeof err), 0);
    ck_assert_int_eq(experiment_identical(h, ia, 3, &same, err, sizeof err), 0);
    ck_assert(same);
    int64_t mixed[2] = {ia[0], ib[0]};
    ck_assert_int_eq(experiment_identical(h, mixed, 2, &same, err, sizeof err), 0);
    ck_assert(!same);
    sqlite3_close(h);
    compare_result_t *r = compare_exps("ca", ia, 3, "cb", ib, 3);
    ck_assert_uint_eq(r->sa.runs, 1);
    ck_assert_uint_eq(r->sa.identical, 3);
    ck_assert_uint_eq(r->sb.identical, 3);
    ck_assert(isnan(metric(r, "req_per_s")->est.lo));
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    compare_print(f, r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "runs are copies"));
    free(buf);
    free(r);
}
END_TEST

/* Windows of the trace: each side's runs differ, run k of A and of B replay the same
 * requests, so the comparison pairs them by run; copies would not have been. */
START_TEST(windows_pair_by_run) {
    int64_t ia[3], ib[3];
    for (int k = 0; k < 3; k++) {
        ia[k] = sim_win("policies/continuous.lua", "wa", k, 3, 50);
        ib[k] = sim_win("policies/static.lua", "wb", k, 3, 50);
    }
    compare_result_t *r = compare_exps("wa", ia, 3, "wb", ib, 3);
    ck_assert_int_eq(r->paired, COMPARE_PAIR_RUN);
    ck_assert_uint_eq(r->sa.runs, 3);
    ck_assert_uint_eq(r->sa.identical, 0);
    ck_assert_msg(strstr(r->pairing, "paired by run"), "%s", r->pairing);
    /* static batching waits for whole batches: its TTFT is worse in every window */
    ck_assert_int_eq(metric(r, "ttft_mean")->verdict, COMPARE_WORSE);
    ck_assert(!isnan(metric(r, "req_per_s")->est.lo));
    free(r);
}
END_TEST

/* Shedding is never negligible: B rejects 6 of 1,000 requests A finished (0.6%, under the
 * 1% minimum effect): the finished row says worse, not "no meaningful difference". */
START_TEST(shed_requests_are_not_negligible) {
    char big[256];
    testutil_gen_trace(big, sizeof big, 1000, 2, 9, "lognormal:300:0.5", "lognormal:50:0.5");
    unlink(trace);   /* the fixture's; teardown removes this one */
    snprintf(trace, sizeof trace, "%s", big);
    int64_t a = sim(db, "policies/continuous.lua", "a", 0);
    int64_t b = sim(db, "policies/continuous.lua", "b", 0);
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE requests SET status = 'rejected', reason = 'shed', "
             "first_token_s = NULL, finish_s = NULL, ttft_s = NULL, tpot_s = NULL, e2e_s = NULL "
             "WHERE run_id = %lld AND req_id IN (SELECT req_id FROM requests WHERE run_id = "
             "%lld AND status = 'finished' LIMIT 6)", (long long)b, (long long)b);
    exec_sql(db, sql);
    compare_result_t *r = compare(db, a, db, b, 2000, 1);
    const compare_metric_t *m = metric(r, "finished");
    ck_assert_msg(fabs(m->est.rel_pct) < 1, "%g%%", m->est.rel_pct);
    ck_assert_msg(m->verdict == COMPARE_WORSE, "%s (CI %g..%g)", compare_verdict_name(m->verdict),
                  m->est.lo, m->est.hi);
    free(r);
}
END_TEST

START_TEST(empty_run_is_an_error) {
    int64_t a = sim(db, "policies/continuous.lua", "a", 0);
    rec_t *w = rec_open(db);
    rec_run_info_t in = {.name = "empty", .kind = "sim"};
    int64_t e;
    ck_assert(rec_run_begin(w, &in, &e) == 0);
    ck_assert(rec_run_end(w, e, 1, NULL, 0) == 0);
    rec_close(w);
    sqlite3 *h;
    char err[1024];
    ck_assert_int_eq(summary_open(db, &h, err, sizeof err), 0);
    compare_opts_t o;
    compare_opts_default(&o);
    compare_result_t *r = malloc(sizeof *r);
    ck_assert_int_eq(compare_runs(h, db, a, h, db, e, &o, r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "run 'empty' has no requests") != NULL, "%s", err);
    free(r);
    sqlite3_close(h);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("compare");
    TCase *core = tcase_create("bootstrap");
    tcase_add_test(core, stat_excludes_missing_values);
    tcase_add_test(core, paired_exact_cases);
    tcase_add_test(core, deterministic_and_seeded);
    tcase_add_test(core, bad_arguments);
    tcase_add_test(core, ci_width_matches_theory);
    tcase_add_test(core, calibration_on_equal_distributions);
    tcase_add_test(core, hierarchical_bootstrap_carries_run_noise);
    tcase_add_test(core, min_effect_rule);
    tcase_add_test(core, paired_by_run_keeps_pairs);
    suite_add_tcase(s, core);
    TCase *runs = tcase_create("runs");
    tcase_add_checked_fixture(runs, setup, teardown);
    tcase_set_timeout(runs, 60);
    tcase_add_test(runs, known_difference_is_significant);
    tcase_add_test(runs, two_seeds_mostly_no_difference);
    tcase_add_test(runs, across_databases_and_unpaired);
    tcase_add_test(runs, joint_bootstrap_equals_one_metric_at_a_time);
    tcase_add_test(runs, empty_run_is_an_error);
    tcase_add_test(runs, experiments_with_other_seeds_no_difference);
    tcase_add_test(runs, dropped_requests_never_win_silently);
    tcase_add_test(runs, speculative_rows);
    tcase_add_test(runs, copies_count_as_one_run);
    tcase_add_test(runs, windows_pair_by_run);
    tcase_add_test(runs, shed_requests_are_not_negligible);
    suite_add_tcase(s, runs);
    return s;
}

int main(void) { return testutil_run(suite()); }

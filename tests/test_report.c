/* test_report: report_load against independent computations: percentiles straight from the
 * requests table (SQL, then sorted and interpolated here), SLO attainment and goodput on a
 * hand-computed run written through the recorder, ITL from a hand-built tokens table, the
 * time-weighted step statistics, the JSON printer, the views, and SLO parsing errors. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/report.h"
#include "sim/sim.h"
#include "tests/testutil.h"
#include "traces/recorder.h"
#include "traces/trace_gen.h"

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9)

static char db[256], trace[256];

static void setup(void) { ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db")); }
static void teardown(void) { testutil_unlink_db(db); }

/* ---------------------------------------------------------------- independent reference */

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* numpy's default percentile, written out again here on purpose (not stats.c). */
static double ref_pct(const double *x, size_t n, double p) {
    double rank = p / 100 * (double)(n - 1);
    size_t lo = (size_t)rank, hi = lo + 1 < n ? lo + 1 : lo;
    return x[lo] + (rank - (double)lo) * (x[hi] - x[lo]);
}

static void check_dist(const char *what, double *x, size_t n, const stats_dist_t *d) {
    qsort(x, n, sizeof *x, cmp_dbl);
    ck_assert_msg(d->n == n, "%s: n %zu, expected %zu", what, d->n, n);
    ck_assert(n > 10);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    const double ps[] = {50, 90, 95, 99};
    const double got[] = {d->p50, d->p90, d->p95, d->p99};
    ck_assert_msg(fabs(d->mean - sum / (double)n) <= 1e-12 * fmax(1, fabs(d->mean)),
                  "%s mean %.17g vs %.17g", what, d->mean, sum / (double)n);
    for (int i = 0; i < 4; i++) {
        double want = ref_pct(x, n, ps[i]);
        ck_assert_msg(fabs(got[i] - want) <= 1e-12 * fmax(1, fabs(want)),
                      "%s p%g: %.17g, expected %.17g", what, ps[i], got[i], want);
    }
    ck_assert(d->max == x[n - 1] && d->min == x[0]);
}

/* The values of one SQL query (first column, NULLs skipped), unsorted, malloc'd. */
static double *sql_values(sqlite3 *h, const char *sql, int64_t run, size_t *n) {
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, run);
    size_t cap = 1024;
    double *x = malloc(cap * sizeof *x);
    *n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (sqlite3_column_type(st, 0) == SQLITE_NULL) continue;
        if (*n == cap) x = realloc(x, (cap *= 2) * sizeof *x);
        x[(*n)++] = sqlite3_column_double(st, 0);
    }
    sqlite3_finalize(st);
    return x;
}

static void gen_trace(int n, double rate, uint64_t seed) {
    testutil_gen_trace(trace, sizeof trace, n, rate, seed, "lognormal:400:0.8",
                       "lognormal:100:0.8:600");
}

START_TEST(percentiles_match_the_requests_table) {
    gen_trace(400, 6, 3);
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/continuous.lua";
    o.db_path = db;
    o.save_tokens = 1;
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    unlink(trace);

    sqlite3 *h;
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    report_t r;
    ck_assert_msg(report_load(h, res.run_id, NULL, &r, err, sizeof err) == 0, "%s", err);
    const char *cols[] = {"ttft_s", "tpot_s", "e2e_s", "queue_s"};
    const stats_dist_t *d[] = {&r.base.ttft, &r.base.tpot, &r.base.e2e, &r.base.queue};
    for (int c = 0; c < 4; c++) {
        char sql[128];
        size_t n;
        snprintf(sql, sizeof sql, "SELECT %s FROM requests WHERE run_id = ?1", cols[c]);
        double *x = sql_values(h, sql, res.run_id, &n);
        check_dist(cols[c], x, n, d[c]);
        free(x);
    }
    /* ITL: consecutive tokens of one request, walked here in (req_id, idx) order. */
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT req_id, t_s FROM tokens WHERE run_id = ?1 "
                                        "ORDER BY req_id, idx", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, res.run_id);
    size_t n = 0, cap = 1 << 16;
    double *gaps = malloc(cap * sizeof *gaps), prev_t = 0;
    int64_t prev_req = -1;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t req = sqlite3_column_int64(st, 0);
        double t = sqlite3_column_double(st, 1);
        if (req == prev_req && t != prev_t) { /* tokens of one step: one emission */
            if (n == cap) gaps = realloc(gaps, (cap *= 2) * sizeof *gaps);
            gaps[n++] = t - prev_t;
        }
        prev_req = req;
        prev_t = t;
    }
    sqlite3_finalize(st);
    check_dist("itl", gaps, n, &r.itl);
    free(gaps);
    /* Every step of a sim run has a duration: the batch mean is the duration-weighted one. */
    size_t ns;
    double *w = sql_values(h, "SELECT sum(dur_s * num_seqs) / sum(dur_s) FROM steps "
                              "WHERE run_id = ?1", res.run_id, &ns);
    ck_assert_uint_eq(ns, 1);
    ck_assert_double_eq_tol(r.batch.mean, w[0], 1e-9 * w[0]);
    ck_assert_uint_eq(r.batch.n, (size_t)r.base.steps);
    ck_assert(r.kv_util.max <= 1 && r.kv_util.p50 <= r.kv_util.p99);
    free(w);
    sqlite3_close(h);
}
END_TEST

/* ---------------------------------------------------------------- hand-computed run */

static void add(rec_t *r, int64_t run, int id, double arr, double sched, double first,
                double fin, int gen, const char *status) {
    rec_request_t q = {.req_id = id, .arrival_s = arr, .prompt_tokens = 100,
                       .output_tokens = gen, .generated_tokens = gen, .first_scheduled_s = sched,
                       .first_token_s = first, .finish_s = fin, .status = status};
    ck_assert_msg(rec_request(r, run, &q) == 0, "%s", rec_errmsg(r));
}

/*   req arrival first finish gen status     ttft  tpot        e2e
 *   0   0.0     0.2   2.2    11  finished   0.2   0.2         2.2
 *   1   1.0     1.5   2.5    11  finished   0.5   0.1         1.5
 *   2   2.0     3.0   3.0    1   finished   1.0   NULL        1.0
 *   3   3.0     -     -      0   rejected   -     -           -
 *   4   4.0     4.1   6.0    20  finished   0.1   0.1         2.0
 *   5   5.0     5.1   -      3   aborted    0.1   -           -
 * makespan 6.0. Steps (dur, seqs, kv used/total): (1, 2, 10/100), (3, 4, 50/100),
 * (0, 100, 100/100). Tokens: request 0 at 0.2 0.5 0.6, request 1 at 1.5 2.0 2.5 (written out
 * of order): gaps 0.1 0.3 0.5 0.5. */
static int64_t build_hand(void) {
    rec_t *r = rec_open(db);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    rec_run_info_t in = {.name = "hand", .kind = "sim", .policy = "p.lua", .trace = "t.csv"};
    int64_t run;
    ck_assert(rec_run_begin(r, &in, &run) == 0);
    add(r, run, 0, 0.0, 0.0, 0.2, 2.2, 11, "finished");
    add(r, run, 1, 1.0, 1.0, 1.5, 2.5, 11, "finished");
    add(r, run, 2, 2.0, 2.1, 3.0, 3.0, 1, "finished");
    add(r, run, 3, 3.0, -1, -1, -1, 0, "rejected");
    add(r, run, 4, 4.0, 4.0, 4.1, 6.0, 20, "finished");
    add(r, run, 5, 5.0, 5.0, 5.1, -1, 3, "aborted");
    const double dur[] = {1, 3, 0};
    const int seqs[] = {2, 4, 100}, used[] = {10, 50, 100};
    for (int i = 0; i < 3; i++) {
        rec_step_t s = {.step = i, .start_s = i, .dur_s = dur[i], .num_seqs = seqs[i],
                        .kv_used = used[i], .kv_total = 100};
        ck_assert(rec_step(r, run, &s) == 0);
    }
    const int treq[] = {0, 0, 0, 1, 1, 1}, tidx[] = {0, 1, 2, 2, 0, 1};
    const double tt[] = {0.2, 0.5, 0.6, 2.5, 1.5, 2.0};
    for (int i = 0; i < 6; i++) {
        rec_token_t t = {.req_id = treq[i], .idx = tidx[i], .token_id = -1, .t_s = tt[i]};
        ck_assert(rec_token(r, run, &t) == 0);
    }
    ck_assert(rec_run_end(r, run, 1, NULL, 0.1) == 0);
    rec_close(r);
    return run;
}

static report_t load_hand(int64_t run, const char *slo_spec) {
    char err[512];
    sqlite3 *h;
    report_slo_t slo;
    report_t r;
    if (slo_spec) ck_assert_msg(report_parse_slo(slo_spec, &slo, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(report_load(h, run, slo_spec ? &slo : NULL, &r, err, sizeof err) == 0, "%s",
                  err);
    sqlite3_close(h);
    return r;
}

START_TEST(slo_attainment_and_goodput_by_hand) {
    int64_t run = build_hand();
    report_t r = load_hand(run, NULL);
    ck_assert_int_eq(r.has_slo, 0);
    ck_assert(isnan(r.attainment) && isnan(r.goodput));
    EQ(r.base.makespan_s, 6.0);

    /* TTFT <= 0.5 s: requests 0, 1 (exactly 0.5) and 4; 5 is aborted, 2 too slow. */
    r = load_hand(run, "ttft=0.5");
    ck_assert_int_eq(r.has_slo, 1);
    ck_assert_int_eq(r.slo_met, 3);
    EQ(r.attainment, 3.0 / 6);
    EQ(r.goodput, 3.0 / 6.0);
    r = load_hand(run, "ttft=500ms");
    ck_assert_int_eq(r.slo_met, 3);
    /* TPOT <= 0.15 s: 1, 4, and 2 (one token, no TPOT, meets it). */
    r = load_hand(run, "tpot=0.15");
    ck_assert_int_eq(r.slo_met, 3);
    ck_assert(isnan(r.slo.ttft_s) && isnan(r.slo.e2e_s));
    /* All three: only request 1 (E2E 1.5 <= 1.8; request 4's E2E is 2.0). */
    r = load_hand(run, "ttft=0.5,tpot=0.15,e2e=1.8");
    ck_assert_int_eq(r.slo_met, 1);
    EQ(r.attainment, 1.0 / 6);
    EQ(r.goodput, 1.0 / 6.0);
    /* E2E <= 2.2 s: 0, 1, 2, 4. */
    r = load_hand(run, "e2e=2.2s");
    ck_assert_int_eq(r.slo_met, 4);
    EQ(r.goodput, 4.0 / 6.0);
}
END_TEST

START_TEST(itl_and_steps_by_hand) {
    report_t r = load_hand(build_hand(), NULL);
    ck_assert_uint_eq(r.itl.n, 4);
    EQ(r.itl.mean, 0.35);
    EQ(r.itl.p50, 0.4);
    EQ(r.itl.min, 0.1);
    EQ(r.itl.max, 0.5);
    /* KV 0.1 for 1 s, 0.5 for 3 s, 1.0 for 0 s: mean 1.6 / 4; half and 99% of the time at or
     * below 0.5; max over all steps. */
    ck_assert_uint_eq(r.kv_util.n, 3);
    EQ(r.kv_util.mean, 0.4);
    EQ(r.kv_util.p50, 0.5);
    EQ(r.kv_util.p99, 0.5);
    EQ(r.kv_util.max, 1.0);
    EQ(r.batch.mean, 3.5);
    EQ(r.batch.p50, 4);
    EQ(r.batch.p99, 4);
    EQ(r.batch.max, 100);
}
END_TEST

/* report_load_summary gives report_load's summary and SLO figures, bit for bit, without the
 * per-token and per-step ones (sweep loads every point with it): with and without SLOs, and
 * with the tokens table gone, which report_load needs and it does not read. */
START_TEST(load_summary_is_report_load_without_tokens_and_steps) {
    int64_t run = build_hand();
    const char *specs[] = {NULL, "ttft=0.5", "ttft=0.5,tpot=0.15,e2e=1.8", "e2e=2.2s"};
    char err[512];
    sqlite3 *h;
    ck_assert_msg(summary_open(db, &h, err, sizeof err) == 0, "%s", err);
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        report_slo_t slo;
        const report_slo_t *sp = specs[k] ? &slo : NULL;
        if (specs[k])
            ck_assert_msg(report_parse_slo(specs[k], &slo, err, sizeof err) == 0, "%s", err);
        static report_t full, part;
        ck_assert_msg(report_load(h, run, sp, &full, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(report_load_summary(h, run, sp, &part, err, sizeof err) == 0, "%s", err);
        ck_assert(memcmp(&full.base, &part.base, sizeof full.base) == 0);
        ck_assert_int_eq(part.has_slo, full.has_slo);
        ck_assert(memcmp(&full.slo, &part.slo, sizeof full.slo) == 0);
        ck_assert_int_eq(part.slo_met, full.slo_met);
        ck_assert(memcmp(&full.attainment, &part.attainment, sizeof full.attainment) == 0);
        ck_assert(memcmp(&full.goodput, &part.goodput, sizeof full.goodput) == 0);
        ck_assert(full.itl.n == 4 && full.kv_util.n == 3 && full.batch.n > 0);
        ck_assert(part.itl.n == 0 && isnan(part.itl.mean) && isnan(part.itl.p99));
        ck_assert(part.kv_util.n == 0 && isnan(part.kv_util.mean) && isnan(part.kv_util.max));
        ck_assert(part.batch.n == 0 && isnan(part.batch.p50));
    }
    sqlite3_close(h);
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(h, "DROP TABLE tokens", NULL, NULL, NULL), SQLITE_OK);
    static report_t r;
    ck_assert_int_eq(report_load(h, run, NULL, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot read the tokens") != NULL, "%s", err);
    ck_assert_msg(report_load_summary(h, run, NULL, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.base.requests, 6);
    sqlite3_close(h);
}
END_TEST

/* A speculative step emits several tokens at once (one t_s). ITL is the gap between a
 * request's successive emissions, as vLLM's benchmark takes it between streamed chunks: the
 * tokens of one step add no zero gaps (they made a speculative run's ITL p50 read 0 ms).
 * Request 0: idx 0 at 1.0, idx 1..3 at 1.2 (one step), idx 4 and 5 at 1.5: gaps 0.2, 0.3. */
START_TEST(itl_counts_emissions_not_tokens) {
    rec_t *r = rec_open(db);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    rec_run_info_t in = {.name = "spec", .kind = "sim", .policy = "p.lua", .trace = "t.csv"};
    int64_t run;
    ck_assert(rec_run_begin(r, &in, &run) == 0);
    add(r, run, 0, 0.0, 0.0, 1.0, 1.5, 6, "finished");
    const double tt[] = {1.0, 1.2, 1.2, 1.2, 1.5, 1.5};
    for (int i = 0; i < 6; i++) {
        rec_token_t t = {.req_id = 0, .idx = i, .token_id = -1, .t_s = tt[i]};
        ck_assert(rec_token(r, run, &t) == 0);
    }
    ck_assert(rec_run_end(r, run, 1, NULL, 0.1) == 0);
    rec_close(r);
    report_t rep = load_hand(run, NULL);
    ck_assert_uint_eq(rep.itl.n, 2);
    EQ(rep.itl.mean, 0.25);
    EQ(rep.itl.min, 0.2);
    EQ(rep.itl.max, 0.3);
    sqlite3 *h;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT count(*), avg(gap_s) FROM token_gaps", -1,
                                        &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 2);
    EQ(sqlite3_column_double(st, 1), 0.25);
    sqlite3_finalize(st);
    sqlite3_close(h);
}
END_TEST

/* Speculative figures by hand. Request 0 verified 4 drafts in each of 2 steps (8, 5
 * accepted), request 1 2 drafts in each of 2 steps (4, none accepted) and decoded once
 * without drafts; request 2 was rejected. The steps' decode_tokens are 1 + k per decode:
 * 5 + 5 + 3 + 3 + 1 = 17, less 12 drafts: 5 decoding request-steps, which emitted 5 + 5
 * tokens: 2.00 per request-step; acceptance 5 / 12. */
START_TEST(speculative_figures_by_hand) {
    rec_t *r = rec_open(db);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    rec_run_info_t in = {.name = "spec", .kind = "sim", .policy = "p.lua", .trace = "t.csv"};
    int64_t run, plain;
    ck_assert(rec_run_begin(r, &in, &run) == 0);
    const int prop[] = {8, 4, 0}, acc[] = {5, 0, 0};
    for (int i = 0; i < 3; i++) {
        rec_request_t q = {.req_id = i, .arrival_s = i, .prompt_tokens = 10,
                           .output_tokens = 12, .generated_tokens = i < 2 ? 12 : 0,
                           .first_scheduled_s = i < 2 ? i : -1, .first_token_s = i < 2 ? i + 1 : -1,
                           .finish_s = i < 2 ? i + 2 : -1, .spec_proposed = prop[i],
                           .spec_accepted = acc[i], .status = i < 2 ? "finished" : "rejected"};
        ck_assert_msg(rec_request(r, run, &q) == 0, "%s", rec_errmsg(r));
    }
    const int decode[] = {5, 5, 3, 3, 1};
    for (int i = 0; i < 5; i++) {
        rec_step_t st = {.step = i, .start_s = i, .dur_s = 0.5, .num_seqs = 1,
                         .decode_tokens = decode[i], .kv_total = 100};
        ck_assert(rec_step(r, run, &st) == 0);
    }
    ck_assert(rec_run_end(r, run, 1, NULL, 0.1) == 0);
    rec_close(r);
    report_t rep = load_hand(run, NULL);
    ck_assert_int_eq(rep.spec.proposed, 12);
    ck_assert_int_eq(rep.spec.accepted, 5);
    ck_assert_int_eq(rep.spec.decode_steps, 5);
    EQ(rep.spec.acceptance, 5.0 / 12.0);
    EQ(rep.spec.tokens_per_step, 2.0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    report_print(f, &rep);
    report_json(f, &rep);
    fclose(f);
    ck_assert_msg(strstr(buf, "\nspec      acceptance 41.7% (5 of 12 drafts), 2.00 tokens per "
                              "request-step (5 decoding request-steps)\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "\"speculative\": {\"proposed\": 12, \"accepted\": 5, "
                              "\"decode_steps\": 5, \"acceptance\": 0.41666666666666669, "
                              "\"tokens_per_step\": 2},"), "%s", buf);
    free(buf);
    /* A run without drafts has no spec line and "speculative": null. */
    plain = build_hand();
    rep = load_hand(plain, NULL);
    ck_assert_int_eq(rep.spec.proposed, 0);
    ck_assert(isnan(rep.spec.acceptance) && isnan(rep.spec.tokens_per_step));
    f = open_memstream(&buf, &len);
    report_print(f, &rep);
    report_json(f, &rep);
    fclose(f);
    ck_assert_msg(!strstr(buf, "\nspec "), "%s", buf);
    ck_assert_msg(strstr(buf, "\"speculative\": null,"), "%s", buf);
    free(buf);
}
END_TEST

/* speculative.lua in the simulator draws each draft's acceptance with probability alpha:
 * a decoding request's step emits (1 - alpha^(k+1)) / (1 - alpha) tokens on average (2.773
 * for alpha 0.7, k 4) and accepts (that - 1) / k of its drafts (44.3%). Over ~5,000
 * request-steps the sampling error is under 1%; drafts past a request's true end (the
 * policy sees the limit only) are cut there, which moves both by about 1%. */
START_TEST(speculative_figures_match_the_expected_tokens_formula) {
    testutil_gen_trace(trace, sizeof trace, 50, 2, 5, "lognormal:200:0.3", "lognormal:300:0.1");
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/speculative.lua";
    o.db_path = db;
    sim_result_t res;
    char err[4096];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    unlink(trace);
    report_t r = load_hand(res.run_id, NULL);
    double alpha = 0.7, k = 4, want = (1 - pow(alpha, k + 1)) / (1 - alpha);
    ck_assert_int_gt(r.spec.decode_steps, 3000);
    ck_assert_msg(fabs(r.spec.tokens_per_step / want - 1) < 0.04, "tokens per step %.4f, "
                  "expected about %.4f", r.spec.tokens_per_step, want);
    ck_assert_msg(fabs(r.spec.acceptance / ((want - 1) / k) - 1) < 0.04, "acceptance %.4f, "
                  "expected about %.4f", r.spec.acceptance, (want - 1) / k);
}
END_TEST

START_TEST(json_and_text_printers) {
    report_t r = load_hand(build_hand(), "ttft=0.5");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    report_json(f, &r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "\"ttft_s\": {\"n\": 5, \"mean\": "));
    ck_assert_ptr_nonnull(strstr(buf, "\"p50\": "));
    ck_assert_ptr_nonnull(strstr(buf, "\"completed\": 4, \"rejected\": 1"));
    ck_assert_ptr_nonnull(strstr(buf, "\"tpot_s\": null"));   /* the unset SLO bound */
    ck_assert_ptr_nonnull(strstr(buf, "\"met\": 3"));
    ck_assert_ptr_null(strstr(buf, "nan"));
    free(buf);
    f = open_memstream(&buf, &len);
    report_print(f, &r);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "ITL"));
    ck_assert_ptr_nonnull(strstr(buf, "attainment 50.0%"));
    /* The ITL row is summary_print's distribution row, lined up under TTFT's. */
    const char *ttft = strstr(buf, "\n  TTFT "), *itl = strstr(buf, "\n  ITL ");
    ck_assert(ttft && itl);
    ck_assert_uint_eq(strcspn(itl + 1, "\n"), strcspn(ttft + 1, "\n"));
    free(buf);
    /* The JSON pieces compare uses. */
    f = open_memstream(&buf, &len);
    report_json_key_num(f, "ci_lo", 0.1, ", ");
    report_json_key_num(f, "ci_hi", NAN, "}");
    fclose(f);
    ck_assert_str_eq(buf, "\"ci_lo\": 0.10000000000000001, \"ci_hi\": null}");
    free(buf);
}
END_TEST

/* The views come with every database the recorder writes and agree with the summary. */
START_TEST(views_agree_with_the_summary) {
    int64_t run = build_hand();
    report_t r = load_hand(run, NULL);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT requests, completed, rejected, makespan_s, "
                                        "req_per_s, mean_ttft_s, (SELECT count(*) FROM "
                                        "token_gaps), (SELECT count(*) FROM request_metrics) "
                                        "FROM run_summary WHERE run = 'hand'", -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 6);
    ck_assert_int_eq(sqlite3_column_int(st, 1), 4);
    ck_assert_int_eq(sqlite3_column_int(st, 2), 1);
    EQ(sqlite3_column_double(st, 3), r.base.makespan_s);
    EQ(sqlite3_column_double(st, 4), r.base.req_per_s);
    EQ(sqlite3_column_double(st, 5), r.base.ttft.mean);
    ck_assert_int_eq(sqlite3_column_int(st, 6), 4);
    ck_assert_int_eq(sqlite3_column_int(st, 7), 6);
    sqlite3_finalize(st);
    sqlite3_close(h);
}
END_TEST

/* ---------------------------------------------------------------- SLO parsing */

START_TEST(slo_parsing) {
    report_slo_t s;
    char err[256];
    ck_assert_int_eq(report_parse_slo("ttft=0.5,tpot=50ms,e2e=10s", &s, err, sizeof err), 0);
    EQ(s.ttft_s, 0.5);
    EQ(s.tpot_s, 0.05);
    EQ(s.e2e_s, 10);
    ck_assert_int_eq(report_parse_slo("e2e=2", &s, err, sizeof err), 0);
    ck_assert(isnan(s.ttft_s) && isnan(s.tpot_s));
    static const struct {
        const char *spec, *msg;
    } bad[] = {
        {"", "empty SLO"},
        {"ttft", "lacks '='"},
        {"itl=1", "unknown SLO metric 'itl'"},
        {"ttft=abc", "ttft=abc: not a positive number"},
        {"ttft=-1", "ttft=-1: not a positive"},
        {"ttft=0", "ttft=0: not a positive"},
        {"tpot=", "tpot=: not a positive"},
        {"ttft=1ms5", "ttft=1ms5"},
        {"e2e=inf", "e2e=inf"},
        {"ttft=1,ttft=2", "'ttft' given twice"},
        {"ttft=1,,e2e=2", "empty item"},
        {"ttft=1,", "empty item"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        s.ttft_s = 42;
        ck_assert_msg(report_parse_slo(bad[i].spec, &s, err, sizeof err) == -1, "'%s' accepted",
                      bad[i].spec);
        ck_assert_msg(strstr(err, bad[i].msg) != NULL, "'%s': message '%s' lacks '%s'",
                      bad[i].spec, err, bad[i].msg);
        ck_assert(s.ttft_s == 42);   /* untouched on error */
    }
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, percentiles_match_the_requests_table);
    tcase_add_test(tc, slo_attainment_and_goodput_by_hand);
    tcase_add_test(tc, itl_and_steps_by_hand);
    tcase_add_test(tc, load_summary_is_report_load_without_tokens_and_steps);
    tcase_add_test(tc, itl_counts_emissions_not_tokens);
    tcase_add_test(tc, speculative_figures_by_hand);
    tcase_add_test(tc, speculative_figures_match_the_expected_tokens_formula);
    tcase_add_test(tc, json_and_text_printers);
    tcase_add_test(tc, views_agree_with_the_summary);
    tcase_add_test(tc, slo_parsing);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return testutil_run(suite()); }

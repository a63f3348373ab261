/* test_sweep: the sweep helpers (rates, trace rate, run names, parallel runs merged in
 * order), the plot format parser, and the simulator's step hooks and per-token rows that
 * explain and sweep rely on. */
#include <math.h>
#include <sqlite3.h>

#include "analysis/plot.h"
#include "analysis/sweep.h"
#include "testutil.h"

static char tpath[256], db_path[256];

/* 40 requests, 0.05 s apart: 20 req/s. */
static void setup(void) {
    char text[4096];
    size_t len = (size_t)snprintf(text, sizeof text, "arrival_s,prompt_tokens,output_tokens\n");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%.2f,%d,%d\n", 0.05 * i,
                                200 + 37 * i % 300, 5 + i % 7);
    ck_assert_ptr_nonnull(testutil_write_tmp(tpath, sizeof tpath, ".csv", text));
    ck_assert_ptr_nonnull(testutil_tmpfile(db_path, sizeof db_path, ".db"));
    unlink(db_path);
}

static void teardown(void) {
    unlink(tpath);
    testutil_unlink_db(db_path);
}

static void sim_defaults(sim_opts_t *o) {
    sim_opts_defaults(o);
    o->trace_path = tpath;
    o->policy_path = "policies/chunked_prefill.lua";
    o->db_path = db_path;
}

static int64_t query_i64(const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

START_TEST(parse_rates) {
    double r[4];
    char err[256];
    ck_assert_int_eq(sweep_parse_rates("1,2.5,40", r, 4, err, sizeof err), 3);
    ck_assert(r[0] == 1 && r[1] == 2.5 && r[2] == 40);
    ck_assert_int_eq(sweep_parse_rates("7", r, 4, err, sizeof err), 1);
    const char *bad[] = { "", "1,", ",1", "1,,2", "x", "0", "-2", "1e999", "nan", "2 ", "1,2,3,4,5", "3,3",
                          "2,1,2" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        ck_assert_msg(sweep_parse_rates(bad[i], r, 4, err, sizeof err) == -1, "%s", bad[i]);
        ck_assert_msg(strstr(err, "--rates") != NULL, "%s: %s", bad[i], err);
    }
}
END_TEST

START_TEST(trace_rate) {
    double rate;
    int64_t n;
    char err[512];
    trace_opts_t o = { .rate_scale = 5 }; /* ignored: the rate is at scale 1 */
    ck_assert_int_eq(sweep_trace_rate(tpath, &o, &rate, &n, err, sizeof err), 0);
    ck_assert_int_eq(n, 40);
    ck_assert_double_eq_tol(rate, 20.0, 1e-9);
    o.limit = 1;
    ck_assert_int_eq(sweep_trace_rate(tpath, &o, &rate, &n, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "at least two requests"));
    ck_assert_int_eq(sweep_trace_rate("/nonexistent.csv", &o, &rate, &n, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent.csv"));
}
END_TEST

START_TEST(plot_formats) {
    plot_opts_t o = { 0 };
    char err[256];
    ck_assert_int_eq(plot_parse_formats("png,svg", &o, err, sizeof err), 0);
    ck_assert(o.png && o.svg);
    ck_assert_int_eq(plot_parse_formats("svg", &o, err, sizeof err), 0);
    ck_assert(!o.png && o.svg);
    ck_assert_int_eq(plot_parse_formats("png,jpg", &o, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "'jpg'"));
    ck_assert_int_eq(plot_parse_formats("", &o, err, sizeof err), -1);
}
END_TEST

/* The attainment ceiling counts the rejections no rate removes, not a router's or a
 * policy's shedding. */
START_TEST(attainment_bound) {
    summary_t s;
    memset(&s, 0, sizeof s);
    ck_assert(isnan(sweep_attainment_bound(&s)));
    s.requests = 200;
    ck_assert_double_eq(sweep_attainment_bound(&s), 1.0);
    s.rejected_by[SUMMARY_REJ_CONTEXT] = 10;
    s.rejected_by[SUMMARY_REJ_KV] = 2;
    s.rejected_by[SUMMARY_REJ_STEP] = 4;
    s.rejected_by[SUMMARY_REJ_EMPTY] = 4;
    ck_assert_double_eq_tol(sweep_attainment_bound(&s), 0.9, 1e-12);
    s.rejected_by[SUMMARY_REJ_ROUTER] = 50;  /* load-dependent: not in the ceiling */
    s.rejected_by[SUMMARY_REJ_OTHER] = 50;
    s.rejected = 120;
    ck_assert_double_eq_tol(sweep_attainment_bound(&s), 0.9, 1e-12);
}
END_TEST

/* A trace whose every fourth prompt is past llama-2-7b's 4096-token context: attainment is
 * at most 75% at any rate, so a 90% search stops after its first point, saying so. */
START_TEST(capacity_stops_on_rejections) {
    char text[4096], longpath[256];
    size_t len = (size_t)snprintf(text, sizeof text, "arrival_s,prompt_tokens,output_tokens\n");
    for (int i = 0; i < 40; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%.2f,%d,%d\n", 0.05 * i,
                                i % 4 == 3 ? 5000 : 300, 8);
    ck_assert_ptr_nonnull(testutil_write_tmp(longpath, sizeof longpath, ".csv", text));
    sweep_t sw = { .jobs = 1, .quiet = 1, .has_slo = 1, .slo = { .ttft_s = 10 } };
    sim_defaults(&sw.sim);
    sw.sim.trace_path = longpath;
    char err[1024], prefix[160];
    int64_t n;
    ck_assert_int_eq(sweep_trace_rate(longpath, &sw.sim.trace_opts, &sw.base_rate, &n, err,
                                      sizeof err), 0);
    ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), 0);
    sweep_capacity_t c;
    ck_assert_msg(sweep_capacity(&sw, prefix, 0, 0, 0.05, 0.9, &c, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(c.infeasible && !c.found_lo);
    ck_assert_uint_eq(c.n_points, 1);
    ck_assert_uint_eq(c.bound_point, 0);
    ck_assert_double_eq_tol(c.bound, 0.75, 1e-12);
    ck_assert_int_eq(c.points[0].rep.base.rejected_by[SUMMARY_REJ_CONTEXT], 10);
    /* every point says which cost model ran it: the calibration shipped for the default */
    ck_assert_str_eq(c.points[0].cost_model, "builtin:llama-2-7b.a100-80g.tp1");
    free(c.points);
    /* a target the ceiling allows searches on */
    ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), 0);
    ck_assert_msg(sweep_capacity(&sw, prefix, 0, 0, 0.05, 0.7, &c, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(!c.infeasible && c.n_points > 1);
    free(c.points);
    unlink(longpath);
}
END_TEST

/* ------------------------------------------------------------------ hooks */

typedef struct {
    int64_t steps, finals, mixed, stop_after;
    int64_t tokens_in_plans; /* decode + prefill tokens the hook saw */
    double last_end;
    int order_ok;
} hook_ud_t;

static int on_step(void *ud, const sim_step_info_t *si) {
    hook_ud_t *h = ud;
    if (h->stop_after && h->steps == h->stop_after) return 1;
    h->steps++;
    h->mixed += si->plan->prefill_tokens > 0 && si->plan->decode_tokens > 0;
    h->tokens_in_plans += si->plan->prefill_tokens + si->plan->decode_tokens;
    if (si->start_s < h->last_end - 1e-12 || si->dur_s <= 0) h->order_ok = 0;
    h->last_end = si->start_s + si->dur_s;
    /* before the commit: entries still describe the pre-step state */
    for (int32_t i = 0; i < si->plan->n; i++) {
        const sched_entry_t *e = &si->plan->entries[i];
        if (e->start != e->req->computed) h->order_ok = 0;
    }
    if (si->kv_used > si->kv_total) h->order_ok = 0;
    return 0;
}

static int on_final(void *ud, const sched_req_t *r, const char *reason) {
    hook_ud_t *h = ud;
    (void)reason;
    h->finals += r->state == SCHED_FINISHED;
    return 0;
}

START_TEST(hooks_see_every_step) {
    sim_opts_t o;
    sim_result_t res;
    char err[4096];
    hook_ud_t h = { .order_ok = 1 };
    sim_defaults(&o);
    const char *sets[] = { "chunk=128" };
    o.sets = sets;
    o.n_sets = 1;
    o.on_step = on_step;
    o.on_final = on_final;
    o.hook_ud = &h;
    o.save_tokens = 1;
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(h.steps, res.steps);
    ck_assert_int_eq(h.finals, 40);
    ck_assert(h.order_ok);
    ck_assert_int_gt(h.mixed, 0); /* chunked prefill mixes chunks and decodes */
    ck_assert_int_eq(h.tokens_in_plans,
                     query_i64("SELECT sum(prefill_tokens + decode_tokens) FROM steps"));
    ck_assert_int_eq(query_i64("SELECT count(*) FROM tokens"),
                     query_i64("SELECT sum(generated_tokens) FROM requests"));
    ck_assert_int_eq(query_i64("SELECT count(*) FROM tokens t JOIN requests r USING (run_id, "
                               "req_id) WHERE t.idx = 0 AND t.t_s != r.first_token_s"), 0);
}
END_TEST

START_TEST(hook_stops_the_run) {
    sim_opts_t o;
    sim_result_t res;
    char err[4096];
    hook_ud_t h = { .order_ok = 1, .stop_after = 5 };
    sim_defaults(&o);
    o.on_step = on_step;
    o.hook_ud = &h;
    ck_assert_int_eq(sim_run(&o, &res, err, sizeof err), -1);
    ck_assert(res.stopped);
    ck_assert_int_eq(h.steps, 5);
    ck_assert_ptr_nonnull(strstr(err, "stopped by the caller"));
    ck_assert_int_eq(query_i64("SELECT status = 'failed' FROM runs"), 1);
}
END_TEST

/* ------------------------------------------------------------------ sweep */

START_TEST(sweep_merges_in_rate_order) {
    sweep_t sw = { .jobs = 3 };
    sim_defaults(&sw.sim);
    sw.sim.policy_path = "policies/continuous.lua";
    sw.quiet = 1;
    char err[4096], prefix[160];
    int64_t n;
    ck_assert_int_eq(sweep_trace_rate(tpath, &sw.sim.trace_opts, &sw.base_rate, &n, err,
                                      sizeof err), 0);
    ck_assert_int_eq(report_parse_slo("ttft=0.5", &sw.slo, err, sizeof err), 0);
    sw.has_slo = 1;
    ck_assert_msg(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(prefix, "sweep-continuous");
    double rates[] = { 8, 2, 4 };
    sweep_point_t pts[3];
    ck_assert_msg(sweep_run(&sw, prefix, rates, 3, pts, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 3; i++) {
        ck_assert(pts[i].ok);
        ck_assert_int_eq(pts[i].run_id, i + 1); /* given order, whatever finished first */
        ck_assert_double_eq_tol(pts[i].scale, rates[i] / 20.0, 1e-9);
        ck_assert(pts[i].rep.attainment >= 0 && pts[i].rep.attainment <= 1);
        ck_assert_int_eq(pts[i].rep.base.requests, 40);
    }
    ck_assert_str_eq(pts[1].name, "sweep-continuous@2rps");
    ck_assert_int_eq(query_i64("SELECT count(*) FROM runs WHERE json_extract(config, "
                               "'$.sweep.name') = 'sweep-continuous'"), 3);
    ck_assert_int_eq(query_i64("SELECT count(DISTINCT run_id) FROM steps"), 3);
    /* the next sweep into the same database gets a free name; an explicit used one fails */
    ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), 0);
    ck_assert_str_eq(prefix, "sweep-continuous-2");
    sw.prefix = "sweep-continuous";
    ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "already holds"));
}
END_TEST

/* Rates that agree to six digits (a capacity search with a small --tol) still get distinct
 * run names: a name clash made the merge fail on runs.name's uniqueness. */
START_TEST(sweep_close_rates_distinct_names) {
    sweep_t sw = { .jobs = 2 };
    sim_defaults(&sw.sim);
    sw.quiet = 1;
    char err[4096];
    int64_t n;
    ck_assert_int_eq(sweep_trace_rate(tpath, &sw.sim.trace_opts, &sw.base_rate, &n, err,
                                      sizeof err), 0);
    sw.prefix = "close";
    char prefix[160];
    ck_assert_msg(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err) == 0, "%s", err);
    double rates[] = { 4, 4.0000001, 7.961014090445905 };
    sweep_point_t pts[3];
    ck_assert_msg(sweep_run(&sw, prefix, rates, 3, pts, err, sizeof err) == 0, "%s", err);
    ck_assert(pts[0].ok && pts[1].ok && pts[2].ok);
    ck_assert_str_eq(pts[0].name, "close@4rps");
    ck_assert_str_eq(pts[1].name, "close@4.0000001rps");
    ck_assert_str_eq(pts[2].name, "close@7.96101rps"); /* six digits unless taken */
    /* a later round (capacity search) next to a recorded rate */
    double more[] = { 4.000000001 };
    ck_assert_msg(sweep_run(&sw, prefix, more, 1, pts, err, sizeof err) == 0, "%s", err);
    ck_assert(pts[0].ok);
    ck_assert_str_eq(pts[0].name, "close@4.000000001rps");
    ck_assert_int_eq(query_i64("SELECT count(*) FROM runs"), 4);
}
END_TEST

/* A name that would break the points' config JSON is refused before anything runs (each
 * point used to fail on runs.config's CHECK), and no database is created for it. */
START_TEST(sweep_rejects_json_unsafe_names) {
    sweep_t sw = { .jobs = 1 };
    sim_defaults(&sw.sim);
    sw.quiet = 1;
    char err[4096], prefix[160];
    static const struct { const char *name, *why; } bad[] = {
        { "my\"sweep", "cannot hold '\"'" },
        { "back\\slash", "cannot hold '\\'" },
        { "two\nlines", "cannot hold a control character (0x0a)" },
        { "tab\tname", "cannot hold a control character (0x09)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sw.prefix = bad[i].name;
        ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad[i].why) != NULL, "%s: %s", bad[i].name, err);
        ck_assert_msg(strncmp(err, "--name '", 8) == 0, "%s", err);
        ck_assert_int_eq(access(db_path, F_OK), -1);
    }
    /* the same from a policy file name when no --name is given */
    sw.prefix = NULL;
    sw.sim.policy_path = "/nowhere/odd\"policy.lua";
    ck_assert_int_eq(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "policy file name 'odd\"policy', which holds '\"'") != NULL &&
                  strstr(err, "--name") != NULL, "%s", err);
    ck_assert_int_eq(access(db_path, F_OK), -1);
    /* unicode and spaces are fine, and the name reaches the JSON intact */
    sw.sim.policy_path = "policies/continuous.lua";
    sw.prefix = "λ sweep";
    ck_assert_msg(sweep_prefix(&sw, prefix, sizeof prefix, err, sizeof err) == 0, "%s", err);
    int64_t n;
    ck_assert_int_eq(sweep_trace_rate(tpath, &sw.sim.trace_opts, &sw.base_rate, &n, err,
                                      sizeof err), 0);
    double rates[] = { 4 };
    sweep_point_t pts[1];
    ck_assert_msg(sweep_run(&sw, prefix, rates, 1, pts, err, sizeof err) == 0, "%s", err);
    ck_assert(pts[0].ok);
    ck_assert_int_eq(query_i64("SELECT count(*) FROM runs WHERE json_extract(config, "
                               "'$.sweep.name') = 'λ sweep'"), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sweep");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, parse_rates);
    tcase_add_test(tc, trace_rate);
    tcase_add_test(tc, plot_formats);
    tcase_add_test(tc, attainment_bound);
    tcase_add_test(tc, capacity_stops_on_rejections);
    tcase_add_test(tc, hooks_see_every_step);
    tcase_add_test(tc, hook_stops_the_run);
    tcase_add_test(tc, sweep_merges_in_rate_order);
    tcase_add_test(tc, sweep_close_rates_distinct_names);
    tcase_add_test(tc, sweep_rejects_json_unsafe_names);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

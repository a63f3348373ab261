/* Check suite for the simulator's client-side metrics (sim/sim.h): the front end before
 * the scheduler (one worker, first come first served), each request's serial output
 * stream, the terms' sources (options over the cost file), the run config's "metrics",
 * the summary's line, and that zero terms leave every record exactly server-side. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/summary.h"
#include "sim/cost.h"
#include "sim/cost_file.h"
#include "sim/presets.h"
#include "sim/sim.h"
#include "tests/testutil.h"

static char db[256];

static void setup(void) { ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db")); }
static void teardown(void) { testutil_unlink_db(db); }

/* ------------------------------------------------------------------ helpers */

#define q1(...) testutil_sql_num(db, __VA_ARGS__)

static const char *tmp_trace(const char *text) {
    static char p[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", text));
    return p;
}

static void opts(sim_opts_t *o, const char *trace) {
    sim_opts_defaults(o);
    o->trace_path = trace;
    o->policy_path = "policies/continuous.lua";
    o->db_path = db;
    o->save_tokens = 1;
    o->roofline = 1;   /* the known answers below are the roofline's */
    o->serving = "none";   /* the client terms given here, not a serving profile's */
}

static int64_t run_ok(const sim_opts_t *o) {
    sim_result_t res;
    char err[8192];
    int rc = sim_run(o, &res, err, sizeof err);
    ck_assert_msg(rc == 0, "sim failed: %s", err);
    return res.run_id;
}

/* The roofline's time of one sequence's pass on the default model and hardware. */
static double pass(int32_t n_new, int32_t ctx) {
    cost_roofline_params_t cp;
    cost_roofline_defaults(&cp);
    cost_model_t *cm = cost_roofline_new(preset_model_find(SIM_DEFAULT_MODEL),
                                         preset_hw_find("a100-80g"), &cp);
    cost_seq_t s = { n_new, ctx, 1 };
    double t = cost_step_time(cm, &s, 1);
    cost_free(cm);
    return t;
}

/* Rows of run a that run b lacks, over every column but run_id: 0 when the two record the
 * same requests, steps and tokens, value for value. */
static double rows_differ(int64_t a, int64_t b) {
    static const char *const q[] = {
        "SELECT req_id, arrival_s, prompt_tokens, output_tokens, generated_tokens, "
        "first_scheduled_s, first_token_s, finish_s, ttft_s, tpot_s, e2e_s, queue_s, "
        "preemptions, status FROM requests WHERE run_id=",
        "SELECT step, start_s, dur_s, prefill_tokens, decode_tokens, num_seqs, kv_used, "
        "host_s FROM steps WHERE run_id=",
        "SELECT req_id, idx, t_s FROM tokens WHERE run_id=",
    };
    double n = 0;
    for (size_t i = 0; i < sizeof q / sizeof *q; i++)
        n += q1("SELECT count(*) FROM (%s%lld EXCEPT %s%lld)", q[i], (long long)a, q[i],
                (long long)b) +
             q1("SELECT count(*) FROM (%s%lld EXCEPT %s%lld)", q[i], (long long)b, q[i],
                (long long)a);
    return n;
}

static void metrics_of(int64_t id, char *out, size_t len) {
    testutil_sql_text(db, out, len, "SELECT json_extract(config, '$.metrics') FROM runs "
                      "WHERE id=%lld", (long long)id);
}

/* A roofline cost file for the default model and hardware (the same model as no --cost),
 * with the given client terms. */
static void write_cost(char *path, size_t len, double req, double prompt, double tok) {
    cost_file_t cf;
    memset(&cf, 0, sizeof cf);
    cf.kind = COST_FILE_ROOFLINE;
    cf.model = *preset_model_find(SIM_DEFAULT_MODEL);
    cf.hw = *preset_hw_find("a100-80g");
    cost_roofline_defaults(&cf.roof);
    cf.fit_points = cf.fit_median_err = cf.cv_median_err = cf.cv_p90_err = NAN;
    cf.range_tokens = cf.range_seqs = cf.range_kv_tokens = cf.range_attn_pairs = NAN;
    cf.client_request_s = req;
    cf.client_prompt_token_s = prompt;
    cf.client_token_s = tok;
    char err[512];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, len, ".cost"));
    ck_assert_msg(cost_file_write(path, &cf, NULL, err, sizeof err) == 0, "%s", err);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ------------------------------------------------------------------ zero terms */

static const char CONTENDED[] = "arrival_s,prompt_tokens,output_tokens\n0,500,50\n0.01,700,80\n"
                                "0.02,300,120\n0.5,1000,30\n0.6,200,200\n0.6,3000,10\n";

START_TEST(zero_terms_are_the_server_side_records) {
    /* Zero terms given explicitly, or through a cost file that has none, record exactly
     * what the defaults record (the server side), and say so in the config. */
    const char *tr = tmp_trace(CONTENDED);
    sim_opts_t o;
    opts(&o, tr);
    int64_t base = run_ok(&o);
    o.client = (sim_client_t){ 0, 0, 0 };
    int64_t zero = run_ok(&o);
    char cost[256];
    write_cost(cost, sizeof cost, 0, 0, 0);
    ck_assert_ptr_null(strstr(slurp(cost), "client"));  /* zero terms are not written */
    opts(&o, tr);
    o.cost_path = cost;
    int64_t file = run_ok(&o);
    ck_assert_double_eq(rows_differ(base, zero), 0);
    ck_assert_double_eq(rows_differ(base, file), 0);
    char m[32];
    metrics_of(base, m, sizeof m);
    ck_assert_str_eq(m, "server");
    metrics_of(zero, m, sizeof m);
    ck_assert_str_eq(m, "server");
    ck_assert(isnan(q1("SELECT json_extract(config, '$.client_token_s') FROM runs WHERE id=%lld",
                       (long long)zero)));
    /* the comparison itself can fail: any term changes some row */
    o.client.token_s = 1e-9;
    int64_t tiny = run_ok(&o);
    ck_assert_double_gt(rows_differ(base, tiny), 0);
    unlink(cost);
    unlink(tr);
}
END_TEST

START_TEST(stream_term_alone_keeps_the_schedule) {
    /* client_token_s only: nothing reaches the scheduler later, so the steps are the
     * server run's, and each request's first token reaches the client token_s after its
     * step. */
    const char *tr = tmp_trace(CONTENDED);
    sim_opts_t o;
    opts(&o, tr);
    int64_t srv = run_ok(&o);
    o.client.token_s = 0.003;
    int64_t cli = run_ok(&o);
    ck_assert_double_eq(q1("SELECT count(*) FROM (SELECT step, start_s, dur_s FROM steps WHERE "
                           "run_id=%lld EXCEPT SELECT step, start_s, dur_s FROM steps WHERE "
                           "run_id=%lld)", (long long)srv, (long long)cli), 0);
    ck_assert_double_eq(q1("SELECT count(*) FROM requests a JOIN requests b USING (req_id) "
                           "WHERE a.run_id=%lld AND b.run_id=%lld AND "
                           "(a.first_scheduled_s != b.first_scheduled_s OR "
                           "abs(b.ttft_s - a.ttft_s - 0.003) > 1e-12 OR b.e2e_s < a.e2e_s + 0.003 "
                           "- 1e-12)", (long long)srv, (long long)cli), 0);
    unlink(tr);
}
END_TEST

/* ------------------------------------------------------------------ known answers */

/* One request (prompt 100, output 4) alone: the server's token times e_1..e_4 are the
 * prefill and three decodes after it reaches the scheduler at s. */
static void lone_request(double req, double prompt, double tok) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n2.0,100,4\n");
    sim_opts_t o;
    opts(&o, tr);
    o.client = (sim_client_t){ req, prompt, tok };
    int64_t id = run_ok(&o);
    double s = req + prompt * 100, e[4], c[4];
    e[0] = s + pass(100, 0);
    for (int j = 1; j < 4; j++) e[j] = e[j - 1] + pass(1, 100 + j - 1);
    c[0] = e[0] + tok;
    for (int j = 1; j < 4; j++) c[j] = fmax(e[j], c[j - 1]) + tok;
    long long r = (long long)id;
    /* the front end delays the scheduler's arrival (the trace's first arrival is time 0) */
    ck_assert_double_eq_tol(q1("SELECT arrival_s FROM requests WHERE run_id=%lld", r), 0, 1e-15);
    ck_assert_double_eq_tol(q1("SELECT first_scheduled_s FROM requests WHERE run_id=%lld", r), s,
                            1e-12);
    ck_assert_double_eq_tol(q1("SELECT start_s FROM steps WHERE run_id=%lld AND step=0", r), s,
                            1e-12);
    ck_assert_double_eq_tol(q1("SELECT queue_s FROM requests WHERE run_id=%lld", r), s, 1e-12);
    /* the client's times */
    ck_assert_double_eq_tol(q1("SELECT first_token_s FROM requests WHERE run_id=%lld", r), c[0],
                            1e-12);
    ck_assert_double_eq_tol(q1("SELECT ttft_s FROM requests WHERE run_id=%lld", r), c[0], 1e-12);
    ck_assert_double_eq_tol(q1("SELECT finish_s FROM requests WHERE run_id=%lld", r), c[3], 1e-12);
    ck_assert_double_eq_tol(q1("SELECT e2e_s FROM requests WHERE run_id=%lld", r), c[3], 1e-12);
    ck_assert_double_eq_tol(q1("SELECT tpot_s FROM requests WHERE run_id=%lld", r),
                            (c[3] - c[0]) / 3, 1e-12);
    for (int j = 0; j < 4; j++)
        ck_assert_double_eq_tol(q1("SELECT t_s FROM tokens WHERE run_id=%lld AND idx=%d", r, j),
                                c[j], 1e-12);
    /* the steps stay the server's: their ends are the e_i */
    ck_assert_double_eq_tol(q1("SELECT max(start_s + dur_s) FROM steps WHERE run_id=%lld", r),
                            e[3], 1e-12);
    unlink(tr);
}

START_TEST(lone_request_stream_keeps_up) {
    /* token_s below a decode step: each token reaches the client token_s after its step */
    double tok = 1e-3;
    ck_assert_double_lt(tok, pass(1, 100));
    lone_request(0.01, 1e-4, tok);
}
END_TEST

START_TEST(lone_request_stream_falls_behind) {
    /* token_s above a decode step: the tokens queue in the stream, one token_s apart */
    double tok = 0.02;
    ck_assert_double_gt(tok, pass(1, 100) * 1.5);
    lone_request(0.01, 1e-4, tok);
    ck_assert_double_eq_tol(q1("SELECT tpot_s FROM requests"), tok, 1e-12);
    ck_assert_double_eq_tol(q1("SELECT max(t_s) - min(t_s) FROM tokens"), 3 * tok, 1e-12);
}
END_TEST

START_TEST(front_end_queues_first_come_first_served) {
    /* Three requests at once through one front end: they reach the scheduler at
     * 0.02, 0.06 and 0.08 (10 ms each + 0.1 ms per prompt token, one after the other). */
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,5\n0,300,5\n"
                               "0,100,5\n");
    sim_opts_t o;
    opts(&o, tr);
    int64_t srv = run_ok(&o);
    o.client = (sim_client_t){ 0.01, 1e-4, 0 };
    int64_t cli = run_ok(&o);
    const double s[3] = { 0.02, 0.06, 0.08 };
    /* server side: all three are batched at once, nobody queues */
    ck_assert_double_eq(q1("SELECT max(queue_s) FROM requests WHERE run_id=%lld",
                           (long long)srv), 0);
    ck_assert_double_eq_tol(q1("SELECT first_scheduled_s FROM requests WHERE run_id=%lld AND "
                               "req_id=0", (long long)cli), s[0], 1e-12);
    for (int i = 1; i < 3; i++) {
        double fs = q1("SELECT first_scheduled_s FROM requests WHERE run_id=%lld AND req_id=%d",
                       (long long)cli, i);
        /* not before the front end hands it on, and at the first step boundary after */
        ck_assert_double_ge(fs, s[i] - 1e-12);
        ck_assert_double_le(fs, s[i] + pass(100, 0) + pass(300, 0));
        ck_assert_double_eq_tol(q1("SELECT queue_s FROM requests WHERE run_id=%lld AND "
                                   "req_id=%d", (long long)cli, i), fs, 1e-12);
    }
    /* the first step batches request 0 alone: the others have not reached it yet */
    ck_assert_double_eq(q1("SELECT num_seqs FROM steps WHERE run_id=%lld AND step=0",
                           (long long)cli), 1);
    unlink(tr);
}
END_TEST

/* ------------------------------------------------------------------ sources, records */

START_TEST(cost_file_terms_and_option_override) {
    char cost[256], err[1024];
    write_cost(cost, sizeof cost, 0.01, 0, 0.002);
    const char *text = slurp(cost);
    ck_assert_ptr_nonnull(strstr(text, "client_request_s = 0.01"));
    ck_assert_ptr_nonnull(strstr(text, "client_token_s = 0.002"));
    ck_assert_ptr_null(strstr(text, "client_prompt_token_s"));  /* 0: not written */
    cost_file_t cf;
    ck_assert_msg(cost_file_read(cost, &cf, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq(cf.client_request_s, 0.01);
    ck_assert_double_eq(cf.client_prompt_token_s, 0);
    ck_assert_double_eq(cf.client_token_s, 0.002);

    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,4\n");
    sim_opts_t o;
    opts(&o, tr);
    o.cost_path = cost;
    int64_t from_file = run_ok(&o);
    o.client.token_s = 0;               /* an option overrides the file's term ... */
    o.client.prompt_token_s = 1e-4;     /* ... and adds one the file lacks */
    int64_t over = run_ok(&o);
    o.client = (sim_client_t){ 0, 0, 0 };
    int64_t off = run_ok(&o);
    char m[32];
    metrics_of(from_file, m, sizeof m);
    ck_assert_str_eq(m, "client");
    metrics_of(over, m, sizeof m);
    ck_assert_str_eq(m, "client");
    metrics_of(off, m, sizeof m);
    ck_assert_str_eq(m, "server");
    const char *terms = "SELECT json_extract(config, '$.client_%s') FROM runs WHERE id=%lld";
    ck_assert_double_eq(q1(terms, "request_s", (long long)from_file), 0.01);
    ck_assert_double_eq(q1(terms, "prompt_token_s", (long long)from_file), 0);
    ck_assert_double_eq(q1(terms, "token_s", (long long)from_file), 0.002);
    ck_assert_double_eq(q1(terms, "request_s", (long long)over), 0.01);
    ck_assert_double_eq(q1(terms, "prompt_token_s", (long long)over), 1e-4);
    ck_assert_double_eq(q1(terms, "token_s", (long long)over), 0);
    /* and the records follow the terms in effect */
    ck_assert_double_eq_tol(q1("SELECT first_scheduled_s FROM requests WHERE run_id=%lld",
                               (long long)over), 0.02, 1e-12);
    ck_assert_double_eq_tol(q1("SELECT ttft_s FROM requests WHERE run_id=%lld",
                               (long long)over), 0.02 + pass(100, 0), 1e-12);
    ck_assert_double_eq_tol(q1("SELECT ttft_s FROM requests WHERE run_id=%lld",
                               (long long)from_file), 0.01 + pass(100, 0) + 0.002, 1e-12);
    unlink(cost);
    unlink(tr);
}
END_TEST

START_TEST(bad_terms_are_named) {
    /* In a cost file: PATH:LINE and the key; negative, non-finite and twice are refused. */
    static const char *const bad[][2] = {
        { "client_token_s = -1e-3\n", ":2: client_token_s must be a number of seconds >= 0" },
        { "client_request_s = inf\n", ":2: client_request_s must be" },
        { "client_prompt_token_s = x\n", ":2: client_prompt_token_s must be" },
        { "client_token_s = 1\nclient_token_s = 2\n", ":3: duplicate key 'client_token_s'" },
    };
    char good[256], err[1024];
    write_cost(good, sizeof good, 0, 0, 0);
    char body[16384];
    snprintf(body, sizeof body, "%s", slurp(good));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[20000], path[256];
        /* after "format = 1" on line 1 */
        snprintf(text, sizeof text, "format = 1\n%s%s", bad[i][0],
                 strstr(body, "format = 1\n") + strlen("format = 1\n"));
        ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".cost", text));
        cost_file_t cf;
        ck_assert_int_eq(cost_file_read(path, &cf, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad[i][1]) && strstr(err, path), "%s", err);
        unlink(path);
    }
    unlink(good);
    /* Through the library: refused before anything runs; nothing recorded (a usage error). */
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,4\n");
    sim_opts_t o;
    opts(&o, tr);
    o.client.token_s = -0.5;
    sim_result_t res;
    ck_assert_int_eq(sim_run(&o, &res, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "client_token_s must be a finite number of seconds >= 0"), "%s",
                  err);
    opts(&o, tr);
    o.client.request_s = INFINITY;
    ck_assert_int_eq(sim_run(&o, &res, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "client_request_s"), "%s", err);
    ck_assert(res.setup_failed && res.run_id == -1);
    ck_assert_double_eq(q1("SELECT count(*) FROM runs"), 0);
    unlink(tr);
}
END_TEST

/* Run id's summary says metrics and prints line. */
static void want_side(sqlite3 *h, int64_t id, const char *metrics, const char *line) {
    summary_t s;
    char err[512];
    ck_assert_msg(summary_load(h, id, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.metrics, metrics);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    summary_print(f, &s);
    fclose(f);
    ck_assert_msg(strstr(buf, line) != NULL, "missing '%s' in:\n%s", line, buf);
    free(buf);
}

START_TEST(summary_says_which_side) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,4\n");
    sim_opts_t o;
    opts(&o, tr);
    int64_t srv = run_ok(&o);
    o.client = (sim_client_t){ 0.002, 1e-6, 5e-5 };
    int64_t cli = run_ok(&o);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    want_side(h, srv, "server", "metrics   server-side\n");
    want_side(h, cli, "client", "metrics   client-side: front end 2 ms per request + 1 us per "
                                "prompt token before the scheduler, 50 us per streamed token\n");
    summary_t s;
    char err[512];
    ck_assert_msg(summary_load(h, cli, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq(s.client_token_s, 5e-5);

    /* Measured runs (analysis/import.h) say nothing of the side: vLLM's serving benchmark
     * times at its HTTP client; a CSV may come from anywhere. */
    char *msg = NULL;
    if (sqlite3_exec(h, "INSERT INTO runs (id, name, kind, config, status) VALUES "
                        "(101, 'mv', 'measured', '{\"source\":{\"format\":\"vllm\"}}', 'done'),"
                        "(102, 'mc', 'measured', '{\"source\":{\"format\":\"csv\"}}', 'done')",
                     NULL, NULL, &msg) == SQLITE_OK) {
        want_side(h, 101, "client", "metrics   client-side (measured at the client)\n");
        want_side(h, 102, "", "metrics   as measured (the run does not say which side)\n");
    } else { /* a schema from before measured runs */
        ck_assert_msg(strstr(msg, "CHECK") != NULL, "%s", msg);
        fprintf(stderr, "SKIP: measured runs: this schema has none (%s)\n", msg);
        sqlite3_free(msg);
    }
    sqlite3_close(h);
    unlink(tr);
}
END_TEST

int main(void) {
    Suite *s = suite_create("client");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, zero_terms_are_the_server_side_records);
    tcase_add_test(tc, stream_term_alone_keeps_the_schedule);
    tcase_add_test(tc, lone_request_stream_keeps_up);
    tcase_add_test(tc, lone_request_stream_falls_behind);
    tcase_add_test(tc, front_end_queues_first_come_first_served);
    tcase_add_test(tc, cost_file_terms_and_option_override);
    tcase_add_test(tc, bad_terms_are_named);
    tcase_add_test(tc, summary_says_which_side);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_calibrate_sim: the free terms of a cost model fitted to a measured run by simulation.
 * The "measurement" is a simulated run with a known CPU time per step, exported as a
 * per-request CSV and imported: the search must find that time again. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/calibrate_sim.h"
#include "sim/cost_file.h"
#include "sim/sim.h"
#include "analysis/import.h"
#include "testutil.h"

static char db[256], meas_db[256], trace[256], truth[256], csv[256];

/* A measured run in meas_db: 40 requests simulated with llama-2-7b's A100 calibration and
 * host_step_s = 2 ms, their times exported as ttft_s/e2e_s and imported. */
static void setup(void) {
    char err[4096];
    ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db"));
    ck_assert_ptr_nonnull(testutil_tmpfile(meas_db, sizeof meas_db, ".db"));
    testutil_gen_trace(trace, sizeof trace, 40, 3.0, 5, "lognormal:400:0.6", "lognormal:60:0.5");
    cost_file_t cf;
    ck_assert_msg(cost_file_read("builtin:llama-2-7b.a100-80g.tp1", &cf, err, sizeof err) == 0,
                  "%s", err);
    cf.lin.host_step_s = 0.002;
    ck_assert_ptr_nonnull(testutil_tmpfile(truth, sizeof truth, ".cost"));
    ck_assert_msg(cost_file_write(truth, &cf, NULL, err, sizeof err) == 0, "%s", err);
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/continuous.lua";
    o.db_path = db;
    o.cost_path = truth;
    o.serving = "none";   /* the truth is the cost file's own host term */
    sim_result_t res;
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    char rows[65536];
    testutil_sql_text(db, rows, sizeof rows, "SELECT group_concat(printf('%%.9f,%%d,%%d,%%.9f,"
                      "%%.9f', arrival_s, prompt_tokens, output_tokens, ttft_s, e2e_s), char(10)) "
                      "FROM requests WHERE run_id = %lld AND status = 'finished'",
                      (long long)res.run_id);
    char text[70000];
    snprintf(text, sizeof text, "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n%s\n", rows);
    ck_assert_ptr_nonnull(testutil_write_tmp(csv, sizeof csv, ".csv", text));
    import_opts_t io = {.db_path = meas_db, .path = csv, .format = IMPORT_CSV,
                        .name = "bench", .model = "llama-2-7b", .hw = "a100-80g",
                        .version = "test"};
    import_result_t ir;
    ck_assert_msg(import_run(&io, &ir, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(ir.finished, 40);
}

static void teardown(void) {
    testutil_unlink_db(db);
    testutil_unlink_db(meas_db);
    unlink(trace);
    unlink(truth);
    unlink(csv);
}

static int fit(const char *base, const char *terms, calsim_result_t *r, char *err, size_t len) {
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.policy_path = "policies/continuous.lua";
    calsim_opts_t o = {.db_path = meas_db, .run = "bench", .base_cost = base, .sim = &so,
                       .terms = terms};
    return calsim_fit(&o, r, err, len);
}

static calsim_result_t r;

START_TEST(finds_the_cpu_time_per_step) {
    char err[8192];
    ck_assert_msg(fit("builtin:llama-2-7b.a100-80g.tp1", "host_step_s", &r, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(r.n_terms, 1);
    ck_assert(r.before[0] == 0);
    ck_assert_msg(fabs(r.value[0] / 0.002 - 1) < 0.05, "host_step_s %g", r.value[0]);
    ck_assert_msg(r.mape_after < 0.01 && r.mape_before > 5 * r.mape_after, "%g -> %g",
                  r.mape_before, r.mape_after);
    ck_assert(fabs(r.cf.lin.host_step_s - r.value[0]) == 0);
    ck_assert(r.evals > 20);
    /* the user's database gained nothing: the replays ran in a copy */
    ck_assert(testutil_sql_num(meas_db, "SELECT count(*) FROM runs") == 1);
}
END_TEST

START_TEST(default_terms_and_refusals) {
    char err[8192];
    /* a server-side CSV: the host terms by default */
    ck_assert_msg(fit(NULL, NULL, &r, err, sizeof err) == -1, "no base accepted");
    ck_assert_msg(strstr(err, "give the base cost model"), "%s", err);
    ck_assert_msg(fit("builtin:llama-2-7b.a100-80g.tp1", NULL, &r, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(r.n_terms, 2);
    ck_assert_str_eq(r.term[0], "host_step_s");
    ck_assert_str_eq(r.term[1], "host_seq_s");
    ck_assert(r.mape_after <= r.mape_before);
    ck_assert_int_eq(fit("builtin:llama-2-7b.a100-80g.tp1", "gpu_speed", &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "unknown term 'gpu_speed'"), "%s", err);
    /* a roofline base has no host terms */
    char roof[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(roof, sizeof roof, ".cost",
        "format = 1\nkind = roofline\nname = llama-2-7b\nn_layers = 32\nd_model = 4096\n"
        "n_heads = 32\nn_kv_heads = 32\nhead_dim = 128\nd_ff = 11008\nvocab = 32000\n"
        "max_seq = 4096\ntied_embeddings = 0\ndtype_bytes = 2\nmem_bw = 2e12\nflops = 3e14\n"
        "mem_bytes = 8e10\nflops_eff = 0.7\nbw_eff = 0.85\nattn_eff = 0.5\noverhead_s = 4e-4\n"));
    ck_assert_int_eq(fit(roof, NULL, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is a roofline cost file"), "%s", err);
    unlink(roof);
    /* a simulated run is not a measurement */
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.policy_path = "policies/continuous.lua";
    calsim_opts_t o = {.db_path = db, .run = "1", .base_cost = "builtin:llama-2-7b.a100-80g.tp1",
                       .sim = &so};
    ck_assert_int_eq(calsim_fit(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is a sim run: fitting by simulation is for measured runs"), "%s",
                  err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("calibrate_sim");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, finds_the_cpu_time_per_step);
    tcase_add_test(tc, default_terms_and_refusals);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

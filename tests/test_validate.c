/* test_validate: `twinserve validate` (analysis/validate.c) and the simulator's cost files.
 * A simulated run relabelled as an engine run, validated with the cost model that made it,
 * must replay identically: every error 0, per step too. Bad input is refused with the
 * reason: a simulator run, an unfinished run, a speculative run, a trace that is gone, no
 * cost model. The step rows' features equal a hand computation. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "analysis/validate.h"
#include "sim/cost_file.h"
#include "sim/sim.h"
#include "tests/testutil.h"

/* A cost file for stories260k's shape with every term non-zero, host time included. */
static void write_cost(char *path, size_t len) {
    cost_file_t cf;
    memset(&cf, 0, sizeof cf);
    cf.kind = COST_FILE_LINEAR;
    cf.model = *preset_model_find("stories260k");
    cf.model.dtype_bytes = 4;
    cost_linear_params_t *p = &cf.lin;
    p->step_s = 4e-5;
    p->seq_s = 2e-6;
    p->sampled_s = 1e-6;
    p->kv_token_s = 3e-8;
    p->attn_pair_s = 2e-8;
    p->layer_params = preset_model_layer_matrix_params(&cf.model);
    p->lm_params = preset_model_lm_params(&cf.model);
    double rows[] = {1, 8, 64, 512};
    for (int k = 0; k < 4; k++) {
        p->knot_rows[k] = rows[k];
        p->knot_s[k] = rows[k] <= 8 ? 2e-11 : 2e-11 * rows[k] / 8;
    }
    p->n_knots = 4;
    p->host_step_s = 5e-6;
    p->host_seq_s = 5e-7;
    p->host_token_s = 1e-8;
    snprintf(cf.fitted_for, sizeof cf.fitted_for, "a test");
    char err[256];
    testutil_tmpfile(path, len, ".cost");
    ck_assert_msg(cost_file_write(path, &cf, NULL, err, sizeof err) == 0, "%s", err);
}

static int64_t simulate(const char *trace, const char *db, const char *cost, const char *name,
                        const char *policy, const char *set) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    const char *sets[1] = {set};
    o.trace_path = trace;
    o.policy_path = policy;
    o.sets = sets;
    o.n_sets = set ? 1 : 0;
    o.cost_path = cost;
    o.kv_blocks = 400;
    o.max_seqs = 16;
    o.max_tokens = 512;
    o.db_path = db;
    o.run_name = name;
    o.seed = 3;
    o.save_tokens = 1;
    o.trace_opts.max_prompt = 300;
    sim_result_t res;
    char err[2048];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    return res.run_id;
}

static void exec(const char *db, const char *sql) {
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    char *msg = NULL;
    ck_assert_msg(sqlite3_exec(h, sql, NULL, NULL, &msg) == SQLITE_OK, "%s: %s", sql, msg);
    sqlite3_close(h);
}

/* What an engine run's config holds beyond a simulated one's: the model's shape. */
static void as_engine(const char *db, const char *name) {
    char sql[1024];
    snprintf(sql, sizeof sql,
             "UPDATE runs SET kind = 'engine', config = json_set(config, '$.shape', json('{"
             "\"name\":\"stories260k\",\"n_layers\":5,\"d_model\":64,\"n_heads\":8,"
             "\"n_kv_heads\":4,\"head_dim\":8,\"d_ff\":172,\"vocab\":512,\"max_seq\":512,"
             "\"tied_embeddings\":1,\"dtype_bytes\":4}'), '$.model_spec', "
             "'dummy:stories260k') WHERE name = '%s'", name);
    exec(db, sql);
}

START_TEST(test_self_replay_is_exact) {
    char trace[256], db[256], cost[256], err[4096];
    testutil_gen_trace(trace, sizeof trace, 60, 40, 5, "lognormal:120:0.8", "lognormal:24:0.6");
    testutil_tmpfile(db, sizeof db, ".db");
    write_cost(cost, sizeof cost);
    const char *policies[][2] = {
        {"policies/continuous.lua", NULL}, {"policies/chunked_prefill.lua", "chunk=64"},
    };
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "fake-engine-%d", k);
        simulate(trace, db, cost, name, policies[k][0], policies[k][1]);
        as_engine(db, name);
        validate_opts_t o = {.db_path = db, .run = name, .cost_path = cost, .version = "t"};
        validate_result_t r;
        ck_assert_msg(validate_run(&o, &r, err, sizeof err) == 0, "%s", err);
        ck_assert_int_gt(r.n, 20);
        for (int i = 0; i < r.n; i++)
            ck_assert_msg(r.m[i].err == 0 || (isnan(r.m[i].err) && r.m[i].measured == 0),
                          "%s: %s measured %g predicted %g", name, r.m[i].name,
                          r.m[i].measured, r.m[i].predicted);
        ck_assert(r.mape == 0 && r.mape_n == 10);
        ck_assert_int_gt((int)r.pass.n, 10);
        /* dur_s is (start + pass) - start in seconds from the run start: rounding only */
        ck_assert_msg(r.pass.median < 1e-9 && r.pass.p90 < 1e-9, "%g %g", r.pass.median,
                      r.pass.p90);
        ck_assert(r.host.n > 10 && r.host.p90 < 1e-12);
        /* an ITL row: the run saved tokens */
        int itl = 0;
        for (int i = 0; i < r.n; i++) itl += strncmp(r.m[i].name, "ITL", 3) == 0;
        ck_assert_int_eq(itl, 4);
        /* the simulated run is recorded, as a sim run pointing at what it validated */
        sqlite3 *h;
        ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
        sqlite3_stmt *st;
        ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT kind, status, json_extract(config, "
                         "'$.validate.of'), name FROM runs WHERE id = ?1", -1, &st, NULL),
                         SQLITE_OK);
        sqlite3_bind_int64(st, 1, r.sim_id);
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "sim");
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 1), "done");
        ck_assert_int_eq(sqlite3_column_int64(st, 2), r.engine_id);
        char want[64];
        snprintf(want, sizeof want, "validate-%s", name);
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 3), want);
        sqlite3_finalize(st);
        sqlite3_close(h);
    }
    /* a second validation of the same run gets a fresh name */
    validate_opts_t o = {.db_path = db, .run = "fake-engine-0", .cost_path = cost, .version = "t"};
    validate_result_t r;
    ck_assert_msg(validate_run(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(r.sim_name, "validate-fake-engine-0-2");
    /* the roofline instead: errors now, and no host model */
    o.cost_path = NULL;
    o.hw = "h100";
    ck_assert_msg(validate_run(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert(r.mape > 0.01 && r.host.n == 0);
    testutil_unlink_db(db);
    unlink(trace);
    unlink(cost);
}
END_TEST

START_TEST(test_engine_replay_has_no_client_terms) {
    /* An engine run records server-side times: a cost file's client-side terms (sim.h) are
     * not applied to its replay, which stays exact, and the simulated run says server. */
    char trace[256], db[256], cost[256], err[4096];
    testutil_gen_trace(trace, sizeof trace, 30, 40, 7, "lognormal:100:0.5", "lognormal:10:0.5");
    testutil_tmpfile(db, sizeof db, ".db");
    write_cost(cost, sizeof cost);
    simulate(trace, db, cost, "fake-engine", "policies/continuous.lua", NULL);
    as_engine(db, "fake-engine");
    FILE *f = fopen(cost, "a");
    ck_assert_ptr_nonnull(f);
    fputs("client_request_s = 0.05\nclient_token_s = 0.01\n", f);
    fclose(f);
    validate_opts_t o = {.db_path = db, .run = "fake-engine", .cost_path = cost, .version = "t"};
    validate_result_t r;
    ck_assert_msg(validate_run(&o, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(r.mape == 0, "MAPE %g", r.mape);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT json_extract(config, '$.metrics') = 'server' FROM runs "
             "WHERE id = %lld", (long long)r.sim_id);
    ck_assert_double_eq(testutil_sql_num(db, "%s", sql), 1);
    testutil_unlink_db(db);
    unlink(trace);
    unlink(cost);
}
END_TEST

START_TEST(test_refusals) {
    char trace[256], db[256], cost[256], err[4096];
    testutil_gen_trace(trace, sizeof trace, 30, 40, 6, "lognormal:100:0.5", "lognormal:10:0.5");
    testutil_tmpfile(db, sizeof db, ".db");
    write_cost(cost, sizeof cost);
    simulate(trace, db, cost, "a-sim-run", "policies/continuous.lua", NULL);
    validate_opts_t o = {.db_path = db, .run = "a-sim-run", .cost_path = cost, .version = "t"};
    validate_result_t r;
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is a sim run") != NULL, "%s", err);
    /* nothing to validate in a database without engine runs */
    o.run = NULL;
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "has no engine, serve or measured run to validate") != NULL, "%s", err);
    /* unfinished */
    simulate(trace, db, cost, "running", "policies/continuous.lua", NULL);
    as_engine(db, "running");
    exec(db, "UPDATE runs SET status = 'running' WHERE name = 'running'");
    o.run = "running";
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is running, not done") != NULL, "%s", err);
    /* speculative */
    simulate(trace, db, cost, "spec", "policies/continuous.lua", NULL);
    as_engine(db, "spec");
    exec(db, "UPDATE requests SET spec_proposed = 3 WHERE run_id = (SELECT id FROM runs WHERE "
             "name = 'spec') AND req_id = 0");
    o.run = "spec";
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is speculative") != NULL, "%s", err);
    /* no cost model */
    simulate(trace, db, cost, "ok", "policies/continuous.lua", NULL);
    as_engine(db, "ok");
    o.run = "ok";
    o.cost_path = NULL;
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "give the cost model") != NULL, "%s", err);
    /* a measured run's replay options, for an engine run (its record has them) */
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.policy_path = "policies/continuous.lua";
    o.sim = &so;
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_str_eq(err, "run 'ok' is an engine run: --policy, --set, --model, --tp, --seed and "
                     "the limits are for measured runs (twinserve import), whose record lacks "
                     "them; an engine run's come from its own record");
    o.sim = NULL;
    /* a cost file for another model */
    cost_file_t cf;
    ck_assert_int_eq(cost_file_read(cost, &cf, err, sizeof err), 0);
    cf.model = *preset_model_find("smollm2-135m");
    cf.lin.layer_params = preset_model_layer_matrix_params(&cf.model);
    cf.lin.lm_params = preset_model_lm_params(&cf.model);
    char other[256];
    testutil_tmpfile(other, sizeof other, ".cost");
    ck_assert_int_eq(cost_file_write(other, &cf, NULL, err, sizeof err), 0);
    o.cost_path = other;
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "another shape") != NULL, "%s", err);
    /* the trace is gone */
    o.cost_path = cost;
    unlink(trace);
    ck_assert_int_eq(validate_run(&o, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "which is gone") != NULL, "%s", err);
    /* nothing was changed by the refusals: the runs are as they were */
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM runs", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 4);
    sqlite3_finalize(st);
    sqlite3_close(h);
    testutil_unlink_db(db);
    unlink(cost);
    unlink(other);
}
END_TEST

/* The features a simulated step records, by hand: two requests arriving together, the
 * continuous policy prefills both in one step, then decodes both. */
START_TEST(test_step_features_by_hand) {
    char trace[256], db[256], cost[256];
    testutil_write_tmp(trace, sizeof trace, ".csv",
                       "arrival_s,prompt_tokens,output_tokens\n0,10,3\n0,6,2\n");
    testutil_tmpfile(db, sizeof db, ".db");
    write_cost(cost, sizeof cost);
    int64_t id = simulate(trace, db, cost, "hand", "policies/continuous.lua", NULL);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT tokens, pass_seqs, sampled, kv_tokens, "
                     "attn_pairs, host_s, dur_s FROM steps WHERE run_id = ?1 ORDER BY step",
                     -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    /* step 0: prompts 10 and 6 at context 0, both sampled: pairs 55 + 21 */
    /* step 1: decodes at contexts 10 and 6 */
    /* step 2: request 0's last decode at context 11 (request 1 finished with 2 tokens) */
    const long long want[3][5] = {{16, 2, 2, 16, 55 + 21}, {2, 2, 2, 11 + 7, 11 + 7},
                                  {1, 1, 1, 12, 12}};
    for (int s = 0; s < 3; s++) {
        ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
        for (int c = 0; c < 5; c++)
            ck_assert_msg(sqlite3_column_int64(st, c) == want[s][c], "step %d col %d: %lld", s,
                          c, (long long)sqlite3_column_int64(st, c));
        /* the cost file's host term: 5 us + 0.5 us per sequence + 10 ns per token */
        double host = 5e-6 + 5e-7 * (double)want[s][1] + 1e-8 * (double)want[s][0];
        ck_assert(fabs(sqlite3_column_double(st, 5) - host) < 1e-15);
    }
    ck_assert_int_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(h);
    testutil_unlink_db(db);
    unlink(trace);
    unlink(cost);
}
END_TEST

int main(void) {
    Suite *s = suite_create("validate");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_self_replay_is_exact);
    tcase_add_test(tc, test_engine_replay_has_no_client_terms);
    tcase_add_test(tc, test_refusals);
    tcase_add_test(tc, test_step_features_by_hand);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

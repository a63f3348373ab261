/* Check suite for prefix caching end to end (policies/prefix.c through the simulator): a
 * plain trace's shared-prefix columns reach the cache, the shipped policies charge a step
 * only for the tokens it computes (known answers from a hand-computed schedule on the
 * roofline), a long but mostly cached prompt is admitted by continuous batching, and the
 * run's config says whether caching was on. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/cost.h"
#include "sim/presets.h"
#include "sim/sim.h"
#include "tests/testutil.h"

static char db[256];

static void setup(void) { ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db")); }
static void teardown(void) { testutil_unlink_db(db); }

#define q1(...) testutil_sql_num(db, __VA_ARGS__)

static void opts(sim_opts_t *o, const char *trace, int caching) {
    sim_opts_defaults(o);
    o->trace_path = trace;
    o->policy_path = "policies/continuous.lua";
    o->db_path = db;
    o->roofline = 1; /* the known answers below are the roofline's */
    o->serving = "none"; /* and the bare GPU's */
    o->prefix_caching = caching;
}

static int64_t run_ok(const sim_opts_t *o) {
    sim_result_t res;
    char err[8192];
    int rc = sim_run(o, &res, err, sizeof err);
    ck_assert_msg(rc == 0, "sim failed: %s", err);
    return res.run_id;
}

/* The roofline's time of one step of n identical sequences (n_new tokens after ctx cached
 * ones, each sampled) on the default model and hardware. */
static double step_time(int32_t n, int32_t n_new, int32_t ctx) {
    cost_roofline_params_t cp;
    cost_roofline_defaults(&cp);
    cost_model_t *cm = cost_roofline_new(preset_model_find(SIM_DEFAULT_MODEL),
                                         preset_hw_find(SIM_DEFAULT_HW), &cp);
    cost_seq_t seqs[64];
    ck_assert_int_le(n, 64);
    for (int32_t i = 0; i < n; i++) seqs[i] = (cost_seq_t){ n_new, ctx, 1 };
    double t = cost_step_time(cm, seqs, n);
    cost_free(cm);
    return t;
}

/* 16 requests at once, each a 3,936-token system prompt (one group) plus 128 tokens of its
 * own, one output token (4,065 of llama-2-7b's 4,096-token context). */
static const char *system_prompt_trace(char *path, size_t len) {
    char text[4096];
    size_t k = (size_t)snprintf(text, sizeof text,
                                "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n");
    for (int i = 0; i < 16; i++)
        k += (size_t)snprintf(text + k, sizeof text - k, "0,4064,1,sys,3936\n");
    ck_assert_ptr_nonnull(testutil_write_tmp(path, len, ".csv", text));
    return path;
}

START_TEST(shared_prefix_gets_its_budget_back) {
    /* The schedule by hand, continuous batching with its 8,192-token step budget:
     *   step 1: requests 0 and 1 compute their whole 4,064-token prompts (the cache is
     *           empty until a step commits), 8,128 tokens;
     *   step 2: the other 14 each find 246 blocks (3,936 tokens) of the system prompt in
     *           the cache and compute their own 128 tokens: 1,792 tokens, one step.
     * Mean TTFT = t1 + 14/16 t2. Charging the cached tokens too (the policies before
     * prefix budgeting) would admit two requests per step: 8 steps. */
    char trace[256];
    system_prompt_trace(trace, sizeof trace);
    sim_opts_t o;
    opts(&o, trace, 1);
    int64_t run = run_ok(&o);
    double t1 = step_time(2, 4064, 0), t2 = step_time(14, 128, 3936);
    double want = t1 + 14.0 / 16.0 * t2;
    double got = q1("SELECT avg(ttft_s) FROM requests WHERE run_id=%lld", (long long)run);
    ck_assert_msg(fabs(got - want) <= 0.02 * want, "mean TTFT %.6f s, hand schedule %.6f s",
                  got, want);
    ck_assert_double_eq_tol(q1("SELECT count(*) FROM steps WHERE run_id=%lld",
                               (long long)run), 2, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT sum(cached_tokens) FROM requests WHERE run_id=%lld",
                               (long long)run), 14 * 3936, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT max(prefill_tokens) FROM steps WHERE run_id=%lld AND "
                               "step=1", (long long)run), 14 * 128, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT json_extract(config, '$.prefix_caching') FROM runs "
                               "WHERE id=%lld", (long long)run), 1, 1e-9);

    /* Without --prefix-caching nothing is cached: 8 steps of two whole prompts each, the
     * k-th pair's TTFT k x t1, mean 4.5 t1. */
    opts(&o, trace, 0);
    run = run_ok(&o);
    double off = q1("SELECT avg(ttft_s) FROM requests WHERE run_id=%lld", (long long)run);
    ck_assert_msg(fabs(off - 4.5 * t1) <= 0.02 * 4.5 * t1, "uncached mean TTFT %.6f s, hand "
                  "schedule %.6f s", off, 4.5 * t1);
    ck_assert_double_eq_tol(q1("SELECT sum(cached_tokens) FROM requests WHERE run_id=%lld",
                               (long long)run), 0, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT json_extract(config, '$.prefix_caching') FROM runs "
                               "WHERE id=%lld", (long long)run), 0, 1e-9);
    ck_assert_msg(got < off / 3, "cached %.6f s vs uncached %.6f s", got, off);
    unlink(trace);
}
END_TEST

START_TEST(chunked_prefill_charges_only_uncached_tokens) {
    /* Chunked prefill, 512 tokens a step. Request 0 (at 0 s) puts a 3,936-token system
     * prompt in the cache in 8 chunks; 16 more arrive at 10 s, each needing only its own
     * 32 tokens. By hand: all 16 in one step of 16 x (32 new after 3,936 cached), so every
     * TTFT is that step's time. Charging a whole chunk for 32 computed tokens (the policies
     * before prefix budgeting) ran one per step: 16 steps, a mean TTFT 1.6x this one on
     * the roofline. */
    char trace[256], text[4096];
    size_t k = (size_t)snprintf(text, sizeof text, "arrival_s,prompt_tokens,output_tokens,"
                                "prefix_group,prefix_tokens\n0,3968,1,sys,3936\n");
    for (int i = 0; i < 16; i++)
        k += (size_t)snprintf(text + k, sizeof text - k, "10,3968,1,sys,3936\n");
    ck_assert_ptr_nonnull(testutil_write_tmp(trace, sizeof trace, ".csv", text));
    sim_opts_t o;
    opts(&o, trace, 1);
    o.policy_path = "policies/chunked_prefill.lua";
    int64_t run = run_ok(&o);
    double t16 = step_time(16, 32, 3936);
    double got = q1("SELECT avg(ttft_s) FROM requests WHERE run_id=%lld AND req_id>0",
                    (long long)run);
    ck_assert_msg(fabs(got - t16) <= 0.02 * t16, "mean TTFT %.6f s, hand schedule %.6f s",
                  got, t16);
    ck_assert_double_eq_tol(q1("SELECT count(*) FROM steps WHERE run_id=%lld", (long long)run),
                            8 + 1, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT max(prefill_tokens) FROM steps WHERE run_id=%lld AND "
                               "step>=8", (long long)run), 512, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND "
                               "cached_tokens=3936", (long long)run), 16, 1e-9);
    unlink(trace);

    /* The rest of a step's budget goes to a prompt of its own: 64 uncached tokens of a
     * grouped prompt and 300 of an ungrouped one share one step. */
    ck_assert_ptr_nonnull(testutil_write_tmp(trace, sizeof trace, ".csv",
        "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n"
        "0,1024,1,g,960\n"
        "5,1024,1,g,960\n"
        "5,300,1,,\n"));
    opts(&o, trace, 1);
    o.policy_path = "policies/chunked_prefill.lua";
    run = run_ok(&o);
    ck_assert_double_eq_tol(q1("SELECT count(*) FROM steps WHERE run_id=%lld", (long long)run),
                            3, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT prefill_tokens FROM steps WHERE run_id=%lld AND step=2",
                               (long long)run), 364, 1e-9);
    unlink(trace);
}
END_TEST

START_TEST(mostly_cached_long_prompt_is_admitted) {
    /* A 2,048-token step budget. Request 0 (2,000 tokens) puts a 1,984-token system prompt
     * in the cache; request 1's 3,000-token prompt is longer than a step, but only its own
     * 1,016 tokens need computing: admitted. Request 2 has as long a prompt of another
     * group: nothing cached, so it can never run as one piece and is rejected. */
    char trace[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(trace, sizeof trace, ".csv",
        "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n"
        "0,2000,2,a,1984\n"
        "10,3000,2,a,1984\n"
        "20,3000,2,b,1984\n"));
    sim_opts_t o;
    opts(&o, trace, 1);
    o.max_tokens = 2048;
    int64_t run = run_ok(&o);
    ck_assert_double_eq_tol(q1("SELECT status = 'finished' AND cached_tokens = 1984 FROM "
                               "requests WHERE run_id=%lld AND req_id=1", (long long)run), 1, 1e-9);
    ck_assert_double_eq_tol(q1("SELECT status = 'rejected' AND reason LIKE '%%3000 tokens "
                               "exceeds the step budget of 2048%%' FROM requests WHERE "
                               "run_id=%lld AND req_id=2", (long long)run), 1, 1e-9);
    /* The same trace without caching rejects both long prompts. */
    opts(&o, trace, 0);
    o.max_tokens = 2048;
    run = run_ok(&o);
    ck_assert_double_eq_tol(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND "
                               "status='rejected'", (long long)run), 2, 1e-9);
    unlink(trace);
}
END_TEST

START_TEST(bad_prefix_columns_are_refused) {
    const char *bad[][2] = {
        { "arrival_s,prompt_tokens,output_tokens,prefix_group\n0,10,1,a\n",
          "no 'prefix_tokens'" },
        { "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,1,a,\n",
          "column 'prefix_tokens' is empty but 'prefix_group' is not" },
        { "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,1,a,11\n",
          "11 is more than the prompt's 10 tokens" },
        { "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n0,10,1,a,x\n",
          "column 'prefix_tokens'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char trace[256], err[8192];
        ck_assert_ptr_nonnull(testutil_write_tmp(trace, sizeof trace, ".csv", bad[i][0]));
        sim_opts_t o;
        opts(&o, trace, 1);
        sim_result_t res;
        ck_assert_int_ne(sim_run(&o, &res, err, sizeof err), 0);
        ck_assert_msg(strstr(err, bad[i][1]) != NULL, "case %zu: %s", i, err);
        unlink(trace);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("prefix");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, shared_prefix_gets_its_budget_back);
    tcase_add_test(tc, chunked_prefill_charges_only_uncached_tokens);
    tcase_add_test(tc, mostly_cached_long_prompt_is_admitted);
    tcase_add_test(tc, bad_prefix_columns_are_refused);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

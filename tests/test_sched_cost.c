/* test_sched_cost: what a step will cost, for policies (policies/sched_cost.c, sched.h):
 * the recent steps' fit recovers known costs, an executor's estimate takes precedence, the
 * last step's duration; and in the simulator, policies/slo_admission.lua sheds what would
 * miss its TTFT SLO, its reasons reaching the run's summary, while s:step_cost refuses a bad
 * shape with a clear message. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "traces/summary.h"
#include "policies/sched.h"
#include "sim/sim.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

/* Steps of known cost: 2 ms + 10 us a prefill token + 50 us a decode. */
static double truth(double prefill, double decode) { return 2e-3 + 1e-5 * prefill + 5e-5 * decode; }

START_TEST(recent_steps_fit_recovers_known_costs) {
    probe_t p = { .fn = fcfs };
    sched_t *s = make(&p, cfg(4000));
    sched_shape_t one = { 1, 100, 1 };
    int src = -1;
    ck_assert(isnan(sched_estimate(s, &one, 1, &src)) && src == SCHED_COST_NONE);
    ck_assert(isnan(sched_last_step_s(s)));
    /* requests of several prompt lengths, so that steps mix prefill and decode counts */
    double now = 0;
    int32_t id = 0;
    for (int k = 0; k < 40; k++) {
        if (k % 3 == 0) add(s, id++, now, 20 + 37 * (k % 7), 4 + k % 5);
        const sched_plan_t *plan = NULL;
        ck_assert_int_eq(sched_step(s, now, &plan), 0);
        if (plan->n == 0) continue;
        double dur = truth(plan->prefill_tokens, plan->decode_tokens);
        now += dur;
        ck_assert_int_eq(sched_commit(s, plan, NULL, now), 0);
        ck_assert(fabs(sched_last_step_s(s) - dur) < 1e-12);
    }
    sched_shape_t shape[3] = { { 300, 0, 1 }, { 1, 500, 1 }, { 1, 20, 1 } };
    double t = sched_estimate(s, shape, 3, &src);
    ck_assert_int_eq(src, SCHED_COST_RECENT);
    ck_assert_msg(fabs(t - truth(300, 2)) < 1e-6, "%g vs %g", t, truth(300, 2));
    sched_free(s);
}
END_TEST

static double fixed_cost(void *ud, const sched_shape_t *seqs, int32_t n) {
    int *calls = ud;
    (*calls)++;
    double t = 0;
    for (int32_t i = 0; i < n; i++) t += 1e-3 * seqs[i].n_new;
    return t;
}

static int plan_then_ask(sched_t *s, void *ctx) {
    double *seen = ctx;
    const sched_view_t *v = sched_view(s);
    if (v->n_waiting && sched_plan_schedule(s, v->waiting[0]->id, 10, 0)) return -1;
    sched_shape_t extra = { 5, 0, 1 };
    int src;
    seen[0] = sched_estimate_plan(s, NULL, 0, &src);
    seen[1] = sched_estimate_plan(s, &extra, 1, &src);
    seen[2] = src;
    return 0;
}

START_TEST(executor_estimate_first) {
    double seen[3] = {0};
    probe_t p = { .fn = plan_then_ask, .ctx = seen };
    sched_t *s = make(&p, cfg(100));
    int calls = 0;
    sched_set_cost_fn(s, fixed_cost, &calls);
    add(s, 1, 0, 10, 3);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), 0);
    ck_assert(fabs(seen[0] - 0.010) < 1e-12);   /* the plan: 10 tokens */
    ck_assert(fabs(seen[1] - 0.015) < 1e-12);   /* with 5 more */
    ck_assert_int_eq((int)seen[2], SCHED_COST_EXECUTOR);
    ck_assert_int_eq(calls, 2);
    sched_free(s);
}
END_TEST

static char db[256], trace[256];

static void setup(void) {
    ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db"));
    /* 10 req/s of long prompts on llama-2-7b / a100: more than the GPU serves */
    testutil_gen_trace(trace, sizeof trace, 400, 10, 3, "lognormal:1500:0.5", "lognormal:300:0.5");
}

static void teardown(void) {
    testutil_unlink_db(db);
    unlink(trace);
}

static sim_result_t run(const char *policy, const char *const *sets, int nsets) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = policy;
    o.db_path = db;
    o.sets = sets;
    o.n_sets = nsets;
    sim_result_t res;
    char err[8192];
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    return res;
}

START_TEST(slo_admission_sheds_and_says_why) {
    sim_result_t base = run("policies/continuous.lua", NULL, 0);
    const char *sets[] = { "ttft_slo=1" };
    sim_result_t shed = run("policies/slo_admission.lua", sets, 1);
    ck_assert(base.have_summary && shed.have_summary);
    /* overloaded: continuous batching's median TTFT is far past 1 s */
    ck_assert_msg(base.summary.ttft.p50 > 2, "continuous TTFT p50 %g", base.summary.ttft.p50);
    /* the shedding policy rejects some, and serves the rest in time (the estimate is the
     * simulator's own cost model, so its admissions meet the SLO up to later stalls) */
    ck_assert_msg(shed.summary.rejected > 10, "%lld rejected", (long long)shed.summary.rejected);
    ck_assert_msg(shed.summary.ttft.p50 < 1.0, "TTFT p50 %g", shed.summary.ttft.p50);
    /* grouped by the reason's kind (its words before the first detail), one example kept */
    ck_assert_msg(shed.summary.other_kinds > 0 &&
                  strcmp(shed.summary.other_reason[0], "rejected by policy: shed") == 0 &&
                  strstr(shed.summary.other_example[0], "rejected by policy: shed: its first token"),
                  "%s / %s", shed.summary.other_reason[0], shed.summary.other_example[0]);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    summary_print(f, &shed.summary);
    fclose(f);
    ck_assert_msg(strstr(buf, "would miss ttft_slo=1 s") != NULL, "%s", buf);
    free(buf);
}
END_TEST

START_TEST(step_cost_refuses_bad_shapes) {
    char pol[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(pol, sizeof pol, ".lua",
        "return { schedule = function(s)\n"
        "  local t, src = s:step_cost()\n"
        "  assert(t == 0 and src == 'executor', 'empty plan: ' .. tostring(t))\n"
        "  assert(s:step_cost{{n = 100, ctx = 0}} > 0)\n"
        "  s:step_cost{{n = 0}}\n"
        "end }\n"));
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = pol;
    o.db_path = db;
    sim_result_t res;
    char err[8192];
    ck_assert_int_eq(sim_run(&o, &res, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "step_cost: sequence 1's n must be >= 1") && strstr(err, ":5"),
                  "%s", err);
    unlink(pol);
}
END_TEST

int main(void) {
    Suite *su = suite_create("sched_cost");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, recent_steps_fit_recovers_known_costs);
    tcase_add_test(tc, executor_estimate_first);
    suite_add_tcase(su, tc);
    TCase *sim = tcase_create("sim");
    tcase_add_checked_fixture(sim, setup, teardown);
    tcase_set_timeout(sim, 120);
    tcase_add_test(sim, slo_admission_sheds_and_says_why);
    tcase_add_test(sim, step_cost_refuses_bad_shapes);
    suite_add_tcase(su, sim);
    return testutil_run(su);
}

/* test_sim_serving: the serving profile in the simulator's event loop (sim/sim_serving.c):
 * which profile a run gets and that its config names it, the async scheduler's one-step
 * delay for arrivals during a step, client timeouts (waiting, running, in flight), vLLM's
 * KV capacity, the step-time factor of a band's sides, and a model without a Vidur profile
 * priced from the GPU's operator rates. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sim/serving.h"
#include "sim/sim.h"
#include "tests/testutil.h"

static char db[256];

static void setup(void) { ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db")); }
static void teardown(void) { testutil_unlink_db(db); }

#define q1(...) testutil_sql_num(db, __VA_ARGS__)

static const char *tmp_trace(const char *text) {
    static char p[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", text));
    return p;
}

static void base(sim_opts_t *o, const char *trace) {
    sim_opts_defaults(o);
    o->trace_path = trace;
    o->policy_path = "policies/vllm.lua";
    o->db_path = db;
    o->model = "llama-2-7b";
    o->hw = "h100";
}

static sim_result_t run_ok(const sim_opts_t *o) {
    sim_result_t res;
    char err[8192];
    ck_assert_msg(sim_run(o, &res, err, sizeof err) == 0, "sim failed: %s", err);
    return res;
}

static void text(int64_t id, const char *path, char *out, size_t len) {
    testutil_sql_text(db, out, len, "SELECT json_extract(config, '%s') FROM runs WHERE id=%lld",
                      path, (long long)id);
}

START_TEST(gpu_presets_get_vllm_and_the_config_says) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,4\n");
    sim_opts_t o;
    char v[128];
    base(&o, tr);
    sim_result_t a = run_ok(&o);
    ck_assert_str_eq(a.serving, "vllm");
    text(a.run_id, "$.serving.name", v, sizeof v);
    ck_assert_str_eq(v, "vllm");
    text(a.run_id, "$.metrics", v, sizeof v);
    ck_assert_str_eq(v, "client");
    o.serving = "none";
    sim_result_t b = run_ok(&o);
    ck_assert_str_eq(b.serving, "none");
    text(b.run_id, "$.serving.name", v, sizeof v);
    ck_assert_str_eq(v, "none");
    text(b.run_id, "$.metrics", v, sizeof v);
    ck_assert_str_eq(v, "server");
    /* client-side: the front end and the stream come on top of the same work */
    ck_assert(q1("SELECT ttft_s FROM requests WHERE run_id=%lld", (long long)a.run_id) >
              q1("SELECT ttft_s FROM requests WHERE run_id=%lld", (long long)b.run_id));
    /* server-side figures from the same profile: --metrics server */
    o.serving = NULL;
    o.metrics = SIM_METRICS_SERVER;
    sim_result_t c = run_ok(&o);
    text(c.run_id, "$.metrics", v, sizeof v);
    ck_assert_str_eq(v, "server");
    /* an unknown profile lists the ones there are */
    o.serving = "trt";
    sim_result_t d;
    char err[1024];
    ck_assert_int_eq(sim_run(&o, &d, err, sizeof err), -1);
    ck_assert(d.setup_failed);
    ck_assert_msg(strstr(err, "unknown serving profile 'trt'") && strstr(err, "vllm"), "%s", err);
}
END_TEST

/* The scheduling step in which request 1 (arriving at 3 ms, inside step 0) was first
 * scheduled, counted from 0. */
static double first_step_of_r1(int64_t run) {
    return q1("SELECT count(*) FROM steps WHERE run_id=%lld AND start_s < (SELECT "
              "first_scheduled_s FROM requests WHERE run_id=%lld AND req_id=1) - 1e-12",
              (long long)run, (long long)run);
}

START_TEST(async_scheduling_delays_an_arrival_one_step) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,2000,50\n0.003,100,5\n");
    sim_opts_t o;
    base(&o, tr);
    serving_t s;
    char err[512];
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    s.request_s = s.prompt_token_s = s.token_s = 0;   /* no front end: the scheduler alone */
    o.serving_profile = &s;
    int64_t async = run_ok(&o).run_id;
    s.async_scheduling = 0;
    int64_t sync = run_ok(&o).run_id;
    /* step 0 prefills r0 and runs past 3 ms; synchronously r1 joins step 1, while the async
     * scheduler had planned step 1 before r1 came: r1 waits for step 2 */
    ck_assert(q1("SELECT start_s + dur_s FROM steps WHERE run_id=%lld AND step=0",
                 (long long)sync) > 0.003);
    ck_assert_int_eq((int)first_step_of_r1(sync), 1);
    ck_assert_int_eq((int)first_step_of_r1(async), 2);
}
END_TEST

START_TEST(client_timeouts_abort_waiting_and_running_requests) {
    /* three long requests at once, max_num_seqs 1: the first runs for seconds, the
     * others wait; a 0.5 s client timeout ends all three */
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,500,2000\n0,500,2000\n"
                               "0,500,2000\n");
    sim_opts_t o;
    base(&o, tr);
    o.max_seqs = 1;
    o.client_timeout_s = 0.5;
    sim_result_t r = run_ok(&o);
    long long id = (long long)r.run_id;
    ck_assert(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND status='aborted' AND "
                 "reason='client timeout after 0.5 s'", id) == 3);
    /* the running one ends at the first step boundary after 0.5 s: no step of it starts
     * later, and it got the tokens of the steps before */
    double step = q1("SELECT max(dur_s) FROM steps WHERE run_id=%lld", id);
    ck_assert(q1("SELECT max(start_s) FROM steps WHERE run_id=%lld", id) < 0.5);
    ck_assert(q1("SELECT max(start_s + dur_s) FROM steps WHERE run_id=%lld", id) >= 0.5);
    double got = q1("SELECT generated_tokens FROM requests WHERE run_id=%lld AND req_id=0", id);
    ck_assert_msg(got > 10 && got < 2000, "%g tokens", got);
    ck_assert(step > 0);
    /* the waiting ones never scheduled */
    ck_assert(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND req_id > 0 AND "
                 "first_scheduled_s IS NULL AND generated_tokens = 0", id) == 2);
    ck_assert(fabs(q1("SELECT json_extract(config, '$.client_timeout_s') FROM runs WHERE id=%lld",
                      id) - 0.5) < 1e-12);
}
END_TEST

START_TEST(client_timeout_in_the_front_end) {
    /* ten requests at once, 0.1 s each in the API server (one worker): the clients give up
     * after 0.35 s, so requests 3..9 are still in the front end then and never served */
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,50,3\n0,50,3\n0,50,3\n"
                               "0,50,3\n0,50,3\n0,50,3\n0,50,3\n0,50,3\n0,50,3\n0,50,3\n");
    sim_opts_t o;
    base(&o, tr);
    serving_t s;
    char err[512];
    ck_assert(serving_get("vllm", &s, err, sizeof err) == 0);
    s.request_s = 0.1;
    o.serving_profile = &s;
    o.client_timeout_s = 0.35;
    sim_result_t r = run_ok(&o);
    long long id = (long long)r.run_id;
    ck_assert(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND status='finished'", id) == 3);
    ck_assert(q1("SELECT count(*) FROM requests WHERE run_id=%lld AND status='aborted' AND "
                 "generated_tokens = 0 AND reason LIKE 'client timeout%%'", id) == 7);
}
END_TEST

START_TEST(kv_capacity_as_vllm_sizes_it) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,100,4\n");
    sim_opts_t o;
    base(&o, tr);
    o.max_tokens = 2048;
    o.max_seqs = 128;
    sim_result_t a = run_ok(&o);
    ck_assert_msg(fabs(a.num_blocks / 7462.0 - 1) < 0.02, "%d blocks (vLLM: 7462)", a.num_blocks);
    o.model = "mixtral-8x7b";
    o.tp = 2;
    sim_result_t b = run_ok(&o);
    ck_assert_msg(fabs(b.num_blocks / 27510.0 - 1) < 0.02, "%d blocks (vLLM: 27510)",
                  b.num_blocks);
    /* Mixtral has no Vidur profile: its cost comes from the GPU's operator rates */
    ck_assert_msg(strstr(b.calibration, "synthesized:mixtral-8x7b.h100.tp2"), "%s", b.calibration);
    /* --kv-blocks still pins it */
    o.kv_blocks = 1234;
    ck_assert_int_eq(run_ok(&o).num_blocks, 1234);
}
END_TEST

START_TEST(cost_scale_moves_every_step) {
    const char *tr = tmp_trace("arrival_s,prompt_tokens,output_tokens\n0,300,20\n");
    sim_opts_t o;
    base(&o, tr);
    int64_t a = run_ok(&o).run_id;
    o.cost_scale = 1.5;
    int64_t b = run_ok(&o).run_id;
    ck_assert(q1("SELECT count(*) FROM steps WHERE run_id=%lld", (long long)a) ==
              q1("SELECT count(*) FROM steps WHERE run_id=%lld", (long long)b));
    ck_assert(q1("SELECT count(*) FROM steps x JOIN steps y USING (step) WHERE x.run_id=%lld "
                 "AND y.run_id=%lld AND abs(y.dur_s - 1.5 * x.dur_s) > 1e-12 * x.dur_s",
                 (long long)a, (long long)b) == 0);
    ck_assert(fabs(q1("SELECT json_extract(config, '$.cost_scale') FROM runs WHERE id=%lld",
                      (long long)b) - 1.5) < 1e-12);
    ck_assert(q1("SELECT json_extract(config, '$.cost_scale') IS NULL FROM runs WHERE id=%lld",
                 (long long)a) == 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim_serving");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, gpu_presets_get_vllm_and_the_config_says);
    tcase_add_test(tc, async_scheduling_delays_an_arrival_one_step);
    tcase_add_test(tc, client_timeouts_abort_waiting_and_running_requests);
    tcase_add_test(tc, client_timeout_in_the_front_end);
    tcase_add_test(tc, kv_capacity_as_vllm_sizes_it);
    tcase_add_test(tc, cost_scale_moves_every_step);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

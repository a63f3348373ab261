/* test_sim_cluster: sim_run over several replicas (sim/sim_route.c, sim/replica.c): every
 * replica steps, with at most one step in flight each and step numbers unique in the run;
 * a seeded router routes the same way twice and differently under another seed; the
 * built-in round robin deals requests in turn; a router that returns nothing fails the
 * run, naming the router's line, with every request recorded; a prefill/decode cluster
 * with a small decode pool keeps every replica's KV within its cache, prefills only on
 * the prefill replica, decodes every token after the first on the decode replicas, and
 * applies back-pressure (transfers that waited for room). */
#include "sim/sim.h"
#include "tests/testutil.h"

static char db[256], trace[256];

typedef struct {
    int32_t steps[8];
    double busy_until[8];
    int overlap;
} seen_t;

static int on_step(void *ud, const sim_step_info_t *si) {
    seen_t *s = ud;
    ck_assert_int_ge(si->replica, 0);
    ck_assert_int_lt(si->replica, 8);
    if (si->start_s < s->busy_until[si->replica] - 1e-12) s->overlap = 1;
    s->busy_until[si->replica] = si->start_s + si->dur_s;
    s->steps[si->replica]++;
    return 0;
}

static int64_t run(int32_t replicas, const char *router, uint64_t seed, void *hook,
                   char *err, size_t errlen, int *rc) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/continuous.lua";
    o.db_path = db;
    o.replicas = replicas;
    o.router_path = router;
    o.seed = seed;
    if (hook) {
        o.on_step = on_step;
        o.hook_ud = hook;
    }
    sim_result_t res;
    *rc = sim_run(&o, &res, err, errlen);
    if (*rc == 0) ck_assert_int_eq(res.replicas, replicas);
    return res.run_id;
}

static long long q(const char *sql) {
    sqlite3 *h;
    sqlite3_stmt *st;
    long long v = -1;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(h));
    if (sqlite3_step(st) == SQLITE_ROW) v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}

static void setup(void) {
    testutil_gen_trace(trace, sizeof trace, 400, 20, 7, "lognormal:300:0.5", "lognormal:40:0.5");
    ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db"));
    unlink(db);
}

static void teardown(void) {
    unlink(trace);
    testutil_unlink_db(db);
}

START_TEST(every_replica_steps_one_at_a_time) {
    char err[1024];
    int rc;
    seen_t s = {0};
    int64_t id = run(4, NULL, 0, &s, err, sizeof err, &rc);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(s.overlap, 0);
    long long total = 0;
    for (int i = 0; i < 4; i++) {
        ck_assert_int_gt(s.steps[i], 0);
        total += s.steps[i];
    }
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM steps WHERE run_id = %lld", (long long)id);
    ck_assert_int_eq(q(sql), total);
    snprintf(sql, sizeof sql, "SELECT max(step) + 1 FROM steps WHERE run_id = %lld", (long long)id);
    ck_assert_int_eq(q(sql), total);
    /* round robin: request k on replica k mod 4 */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM requests WHERE run_id = %lld AND "
             "replica != req_id %% 4", (long long)id);
    ck_assert_int_eq(q(sql), 0);
}
END_TEST

START_TEST(a_seeded_router_routes_the_same_way) {
    char err[1024];
    int rc;
    int64_t a = run(3, "policies/routers/power_of_two.lua", 5, NULL, err, sizeof err, &rc);
    ck_assert_msg(rc == 0, "%s", err);
    int64_t b = run(3, "policies/routers/power_of_two.lua", 5, NULL, err, sizeof err, &rc);
    ck_assert_msg(rc == 0, "%s", err);
    int64_t c = run(3, "policies/routers/power_of_two.lua", 6, NULL, err, sizeof err, &rc);
    ck_assert_msg(rc == 0, "%s", err);
    char sql[512];
    const char *diff = "SELECT count(*) FROM requests x JOIN requests y ON x.req_id = y.req_id "
                       "WHERE x.run_id = %lld AND y.run_id = %lld AND (x.replica != y.replica "
                       "OR x.finish_s != y.finish_s)";
    snprintf(sql, sizeof sql, diff, (long long)a, (long long)b);
    ck_assert_int_eq(q(sql), 0);
    snprintf(sql, sizeof sql, diff, (long long)a, (long long)c);
    ck_assert_int_gt(q(sql), 0);
}
END_TEST

START_TEST(a_router_without_a_decision_fails_the_run) {
    char err[1024], path[256];
    int rc;
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".lua",
        "return { route = function(c, r)\n  if r.id < 10 then return 1 end\nend }\n"));
    int64_t id = run(2, path, 0, NULL, err, sizeof err, &rc);
    ck_assert_int_eq(rc, -1);
    char want[320];
    snprintf(want, sizeof want, "%s:1: route returned no decision", path);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT status = 'failed' FROM runs WHERE id = %lld", (long long)id);
    ck_assert_int_eq(q(sql), 1);
    /* every request handed to a replica has its row (the rest were never read) */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM requests WHERE run_id = %lld", (long long)id);
    ck_assert_int_eq(q(sql), 10);
    unlink(path);
}
END_TEST

/* Per step of a disaggregated run: KV within the cache, what each role computed. */
typedef struct {
    int over;
    long long decode_on_prefill, prefill_on_decode, decode_on_decode;
} pd_seen_t;

static int on_pd_step(void *ud, const sim_step_info_t *si) {
    pd_seen_t *s = ud;
    if (si->kv_used > si->kv_total) s->over = 1;
    if (si->replica == 0) s->decode_on_prefill += si->plan->decode_tokens;
    else {
        s->prefill_on_decode += si->plan->prefill_tokens;
        s->decode_on_decode += si->plan->decode_tokens;
    }
    return 0;
}

START_TEST(disaggregation_keeps_kv_within_each_cache) {
    char err[1024], conf[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(conf, sizeof conf, ".conf",
        "[cluster]\nlink_latency_s = 0.001\nlink_bandwidth_gbps = 5\n"
        "[group p]\ncount = 1\nrole = prefill\n"
        "[group d]\ncount = 2\nrole = decode\nkv_blocks = 120\n"));
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/continuous.lua";
    o.db_path = db;
    o.model = "llama-3-8b";
    o.hw = "h100";
    o.cluster_path = conf;
    pd_seen_t s = {0};
    o.on_step = on_pd_step;
    o.hook_ud = &s;
    sim_result_t res;
    ck_assert_msg(sim_run(&o, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.over, 0);
    ck_assert_int_eq(s.decode_on_prefill, 0);
    ck_assert_int_eq(q("SELECT count(*) FROM requests WHERE status != 'finished' OR "
                       "generated_tokens != output_tokens OR prefill_replica != 0 OR "
                       "(output_tokens > 1 AND replica NOT IN (1, 2))"), 0);
    /* every token after the first comes from a decode replica: a decode step's, or (once
     * per preemption there) the sampled end of its recompute, a prefill on that replica */
    long long pre = q("SELECT sum(preemptions) FROM requests");
    ck_assert_int_eq(s.decode_on_decode + pre, q("SELECT sum(output_tokens - 1) FROM requests"));
    ck_assert_int_eq(pre > 0, s.prefill_on_decode > 0);
    /* back-pressure: some transfers waited well beyond their link time */
    ck_assert_int_gt(q("SELECT count(*) FROM requests WHERE kv_transfer_s > "
                       "0.001 + prompt_tokens * 131072 / 5e9 + 0.01"), 0);
    unlink(conf);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sim_cluster");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_replica_steps_one_at_a_time);
    tcase_add_test(tc, a_seeded_router_routes_the_same_way);
    tcase_add_test(tc, a_router_without_a_decision_fails_the_run);
    tcase_add_test(tc, disaggregation_keeps_kv_within_each_cache);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

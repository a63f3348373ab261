/* test_router: the Lua router host (policies/router.h): the view as route sees it (every
 * field through the FFI layout), its verdicts, errors naming the router's line, params and
 * --set, and c:prefix_hit against a replica's real prefix cache, which it must not change. */
#include "policies/kv.h"
#include "policies/router.h"
#include "tests/testutil.h"

static char path[256];

static router_t *open_src(const char *src, const char *const *sets, int n_sets) {
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".lua", src));
    router_t *rt = router_open(path, sets, n_sets, NULL);
    ck_assert_ptr_nonnull(rt);
    return rt;
}

static void assert_has(const char *msg, const char *needle) {
    ck_assert_msg(msg && strstr(msg, needle), "message '%s' lacks '%s'", msg ? msg : "(null)",
                  needle);
}

static router_replica_t reps[3] = {
    { 1, 2, 300, 400, 10, 20, ROUTER_MIXED, 0 },
    { 5, 6, 700, 800, 1.5, 2.5, ROUTER_PREFILL, 1 },
    { 0, 0, 9, 10, 0, 0, ROUTER_DECODE, 1 },
};
static sched_t *no_scheds[3];

static void view_init(router_view_t *v) {
    memset(v, 0, sizeof *v);
    v->now = 12.5;
    v->n_held = 4;
    v->n = 3;
    v->rep = reps;
    v->scheds = no_scheds;
}

static sched_req_t req(int32_t id, int32_t prompt, int32_t limit) {
    sched_req_t r;
    memset(&r, 0, sizeof r);
    r.id = id;
    r.prompt_tokens = prompt;
    r.output_tokens = limit;
    r.true_output_tokens = 999; /* never visible */
    r.predicted_output_tokens = -1;
    r.first_scheduled_s = r.first_token_s = r.finish_s = r.deadline = -1;
    return r;
}

START_TEST(route_sees_the_view) {
    router_t *rt = open_src(
        "return { route = function(c, r)\n"
        "  return nil, string.format('%d %d %g %d %d %d %d %g %g %s %d %g %d %d', c.n, c.held, c.now,\n"
        "    c:waiting(2), c:running(2), c:free_blocks(2), c:total_blocks(2),\n"
        "    c:prompt_tokens(2), c:decode_tokens(2), c:role(2), c:group(2), c:load(1),\n"
        "    r.prompt_tokens, r.output_tokens)\n"
        "end }\n", NULL, 0);
    ck_assert_ptr_null(router_errmsg(rt));
    router_view_t v;
    view_init(&v);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    sched_req_t r = req(7, 123, 456);
    router_decision_t d;
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_int_eq(d.verdict, ROUTER_REJECT);
    ck_assert_str_eq(d.reason, "3 4 12.5 5 6 700 800 1.5 2.5 prefill 2 30 123 456");
    router_close(rt);
}
END_TEST

START_TEST(verdicts) {
    router_t *rt = open_src(
        "return { params = { mode = 'one' }, route = function(c, r)\n"
        "  local m = c.params.mode\n"
        "  if m == 'one' then return 3 end\n"
        "  if m == 'two' then return 2, 3 end\n"
        "  if m == 'hold' then return 'hold' end\n"
        "  return false, 'too big'\n"
        "end }\n", NULL, 0);
    router_view_t v;
    view_init(&v);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    sched_req_t r = req(1, 10, 10);
    router_decision_t d;
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_int_eq(d.verdict, ROUTER_ROUTED);
    ck_assert_int_eq(d.replica, 2);
    ck_assert_int_eq(d.decode, -1);
    router_close(rt);

    const char *two[] = { "mode=two" }, *hold[] = { "mode=hold" }, *rej[] = { "mode=no" };
    rt = open_src("return { params = { mode = 'one' }, route = function(c, r)\n"
                  "  local m = c.params.mode\n"
                  "  if m == 'two' then return 2, 3 end\n"
                  "  if m == 'hold' then return 'hold' end\n"
                  "  return false, 'too big'\n"
                  "end }\n", two, 1);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_int_eq(d.verdict, ROUTER_ROUTED);
    ck_assert_int_eq(d.replica, 1);
    ck_assert_int_eq(d.decode, 2);
    assert_has(router_params_json(rt), "\"mode\":\"two\"");
    router_close(rt);
    rt = router_open(path, hold, 1, NULL);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_int_eq(d.verdict, ROUTER_HOLD);
    router_close(rt);
    rt = router_open(path, rej, 1, NULL);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_int_eq(d.verdict, ROUTER_REJECT);
    ck_assert_str_eq(d.reason, "too big");
    router_close(rt);
}
END_TEST

/* route fails with a message holding `needle` (a format: %s is the router's path) */
static void route_fails(const char *src, const char *needle) {
    router_t *rt = open_src(src, NULL, 0);
    char want[512];
    snprintf(want, sizeof want, needle, path);
    ck_assert_ptr_null(router_errmsg(rt));
    router_view_t v;
    view_init(&v);
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    sched_req_t r = req(4, 10, 10);
    router_decision_t d;
    ck_assert_int_eq(router_route(rt, 0, &r, &d), -1);
    assert_has(router_errmsg(rt), want);
    assert_has(router_errmsg(rt), path);
    ck_assert_int_eq(router_usage_error(rt), 0);
    router_close(rt);
}

START_TEST(errors_name_the_line) {
    route_fails("return {\n route = function(c, r)\n  return 4\n end }\n",
                "%s:2: route returned replica 4, but the cluster has replicas 1..3");
    route_fails("return { route = function(c, r) return 1.5 end }\n", "returned replica 1.5");
    route_fails("return { route = function(c, r) return 'x' end }\n", "returned replica x");
    route_fails("return { route = function(c, r) end }\n", "returned no decision");
    route_fails("return { route = function(c, r) return 1, 0 end }\n", "returned replica 0");
    route_fails("return { route = function(c, r)\n  local x = 1\n  x = x + c:waiting(9)\n  return x\nend }\n",
                "%s:3: waiting: replica index must be an integer in 1..3");
    route_fails("return { route = function(c, r)\n  error('boom')\nend }\n", "%s:2: boom");
    route_fails("return { route = function(c, r) return r.true_output_tokens end }\n",
                "has no member named 'true_output_tokens'");
}
END_TEST

START_TEST(bad_router_files) {
    router_t *rt = open_src("return { schedule = function(s) end }\n", NULL, 0);
    assert_has(router_errmsg(rt), "the router table has no route(c, r) function");
    router_close(rt);
    rt = open_src("return {\n route = function(c, r) return 1 end,\n route_decode = 3 }\n", NULL, 0);
    assert_has(router_errmsg(rt), "'route_decode' must be a function");
    router_close(rt);
    rt = open_src("return { route = function(c, r) return 1 end\n", NULL, 0);
    assert_has(router_errmsg(rt), "router syntax error");
    router_close(rt);
    rt = open_src("return { route = function(c, r) return io end }\n", NULL, 0);
    ck_assert_ptr_null(router_errmsg(rt));
    router_close(rt);
    const char *sets[] = { "k=2" };
    rt = open_src("return { route = function(c, r) return 1 end }\n", sets, 1);
    assert_has(router_errmsg(rt), "unknown param 'k'");
    ck_assert_int_eq(router_usage_error(rt), 1);
    router_close(rt);
    rt = router_open("/nonexistent/router.lua", NULL, 0, NULL);
    assert_has(router_errmsg(rt), "/nonexistent/router.lua");
    ck_assert_int_eq(router_usage_error(rt), 1);
    router_close(rt);
}
END_TEST

START_TEST(random_is_seeded) {
    const char *src = "return { route = function(c, r)\n"
                      "  return nil, string.format('%.17g %.17g', c:random(), math.random())\n"
                      "end }\n";
    char first[256] = "";
    for (int k = 0; k < 3; k++) {
        router_t *rt = open_src(src, NULL, 0);
        router_view_t v;
        view_init(&v);
        ck_assert_int_eq(router_attach(rt, &v, k < 2 ? 5 : 6), 0);
        sched_req_t r = req(1, 10, 10);
        router_decision_t d;
        ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
        if (k == 0) snprintf(first, sizeof first, "%s", d.reason);
        else if (k == 1) ck_assert_str_eq(d.reason, first);
        else ck_assert_str_ne(d.reason, first);
        router_close(rt);
    }
}
END_TEST

/* a C policy: schedule every waiting request's prompt */
static int sched_all(void *ud, sched_t *s, double now) {
    (void)ud;
    (void)now;
    const sched_view_t *v = sched_view(s);
    for (int32_t i = 0; i < v->n_waiting; i++)
        if (sched_plan_schedule(s, v->waiting[i]->id, sched_req_remaining(v->waiting[i]), 0))
            return -1;
    return 0;
}

START_TEST(prefix_hit_reads_the_cache_without_changing_it) {
    sched_config_t cfg = { .num_blocks = 400, .block_size = 16, .max_tokens = 8192,
                           .max_seqs = 16, .max_model_len = 8192, .prefix_caching = 1 };
    sched_policy_t pol = { .schedule = sched_all, .name = "all" };
    sched_t *s = sched_new(&cfg, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    int64_t h[3] = { 11, 12, 13 }, other[3] = { 99, 12, 13 };
    sched_new_req_t q = { .id = 0, .prompt_tokens = 1500, .output_tokens = 4,
                          .hash_ids = h, .n_hash = 3, .hash_block = 512 };
    ck_assert_int_eq(sched_add(s, &q, 0), 0);
    const sched_plan_t *p;
    ck_assert_int_eq(sched_step(s, 0, &p), 0);
    ck_assert_int_eq(p->n, 1);
    ck_assert_int_eq(sched_commit(s, p, NULL, 1), 0);

    sched_t *scheds[3] = { NULL, s, NULL };
    router_t *rt = open_src("return { route = function(c, r)\n"
                            "  return nil, c:prefix_hit(1, r) .. ' ' .. c:prefix_hit(2, r)\n"
                            "end }\n", NULL, 0);
    router_view_t v;
    view_init(&v);
    v.scheds = scheds;
    ck_assert_int_eq(router_attach(rt, &v, 1), 0);
    int32_t cached = kv_num_cached(sched_kv(s)), used = sched_kv_used(s);
    sched_req_t r = req(1, 1200, 10);
    router_decision_t d;
    /* the same three hashes: every full block of the 1200-token prompt but the one with
     * its last token is cached (prefix.h: a KV block inside a hashed prefix is named by
     * the hash covering its last token), 74 blocks of 16 */
    router_view_request(&v, 1, 1200, h, 3, 512);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_str_eq(d.reason, "0 1184");
    router_view_request(&v, 2, 1200, other, 3, 512);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_str_eq(d.reason, "0 0");
    router_view_request(&v, 3, 1200, NULL, 0, 0);
    ck_assert_int_eq(router_route(rt, 0, &r, &d), 0);
    ck_assert_str_eq(d.reason, "0 0");
    ck_assert_int_eq(kv_num_cached(sched_kv(s)), cached);
    ck_assert_int_eq(sched_kv_used(s), used);
    router_view_free(&v);
    router_close(rt);
    sched_free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("router");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, route_sees_the_view);
    tcase_add_test(tc, verdicts);
    tcase_add_test(tc, errors_name_the_line);
    tcase_add_test(tc, bad_router_files);
    tcase_add_test(tc, random_is_seeded);
    tcase_add_test(tc, prefix_hit_reads_the_cache_without_changing_it);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

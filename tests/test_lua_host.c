/* Check suite for policies/lua_host.c and prelude.lua: loading, params, the sandbox, error
 * messages, limits, and the FFI view layout. */
#include <check.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "policies/lua_host.h"
#include "policies/sched.h"
#include "tests/testutil.h"

extern const char lhost_prelude_lua[];

static char path[256];

static lhost_t *open_src(const char *src) {
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".lua", src));
    lhost_t *h = lhost_open(path, NULL);
    ck_assert_ptr_nonnull(h);
    return h;
}

static void assert_has(const char *msg, const char *needle) {
    ck_assert_msg(msg && strstr(msg, needle), "message '%s' lacks '%s'", msg ? msg : "(null)",
                  needle);
}

typedef struct {
    int finished;
} sink_t;

static void count_sink(void *ud, const sched_req_t *r, const char *reason) {
    (void)reason;
    if (r->state == SCHED_FINISHED) ((sink_t *)ud)->finished++;
}

/* A scheduler driven by the host h. */
static sched_t *attach(lhost_t *h, sink_t *sk) {
    sched_config_t c = { .num_blocks = 100, .block_size = 16, .watermark = 0.01,
                         .max_tokens = 2048, .max_seqs = 32, .max_model_len = 4096, .seed = 3 };
    sched_policy_t pol;
    lhost_policy(h, &pol);
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    if (sk) sched_set_sink(s, count_sink, sk);
    ck_assert_int_eq(lhost_attach(h, s), 0);
    return s;
}

static void add(sched_t *s, int32_t id, int32_t prompt, int32_t out) {
    sched_new_req_t r = { .id = id, .prompt_tokens = prompt, .output_tokens = out };
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
}

/* ------------------------------------------------------------------ loading and params */

START_TEST(shipped_policy_loads_with_params) {
    lhost_t *h = lhost_open("policies/continuous.lua", NULL);
    ck_assert_ptr_null(lhost_errmsg(h));
    ck_assert_str_eq(lhost_params_json(h), "{\"max_seqs\":256,\"max_tokens\":8192}");
    ck_assert_int_eq(lhost_set(h, "max_seqs=8"), 0);
    double v = 0;
    ck_assert_int_eq(lhost_param_num(h, "max_seqs", &v), 1);
    ck_assert_double_eq(v, 8);
    ck_assert_int_eq(lhost_param_num(h, "nope", &v), 0);
    ck_assert_int_eq(lhost_set(h, "max_seqs=lots"), -1);
    assert_has(lhost_errmsg(h), "param 'max_seqs' is a number, got 'lots'");
    ck_assert_int_eq(lhost_set(h, "chunk=5"), -1);
    assert_has(lhost_errmsg(h), "unknown param 'chunk'; this policy's params: max_seqs, max_tokens");
    ck_assert_int_eq(lhost_set(h, "novalue"), -1);
    assert_has(lhost_errmsg(h), "expected key=value");
    lhost_close(h);
}
END_TEST

START_TEST(param_types) {
    lhost_t *h = open_src("return { params = { on = false, name = 'x', n = 1 },\n"
                          "  schedule = function(s) end }\n");
    ck_assert_ptr_null(lhost_errmsg(h));
    ck_assert_int_eq(lhost_set(h, "on=true"), 0);
    ck_assert_int_eq(lhost_set(h, "name=llama-3.2-1b"), 0);
    ck_assert_int_eq(lhost_set(h, "on=maybe"), -1);
    assert_has(lhost_errmsg(h), "is a boolean");
    char buf[64];
    ck_assert_int_eq(lhost_param_str(h, "name", buf, sizeof buf), 1);
    ck_assert_str_eq(buf, "llama-3.2-1b");
    ck_assert_int_eq(lhost_param_str(h, "n", buf, sizeof buf), -1);
    ck_assert_str_eq(lhost_params_json(h), "{\"n\":1,\"name\":\"llama-3.2-1b\",\"on\":true}");
    lhost_close(h);
    unlink(path);
}
END_TEST

/* Params declared with a spec: plain values for the policy and in the records, every --set
 * checked against the spec, and a refused --set leaves the value as it was. */
START_TEST(param_specs_are_checked) {
    lhost_t *h = open_src("return { params = {\n"
                          "  chunk = { 512, int = true, min = 1 },\n"
                          "  alpha = { 0.7, min = 0, max = 1, only = 'sim' },\n"
                          "  mode = { 'fcfs', oneof = { 'fcfs', 'sjf' } },\n"
                          "  on = { false }, plain = 3 },\n"
                          "  schedule = function(s) assert(s.params.chunk == 512) end }\n");
    ck_assert_ptr_null(lhost_errmsg(h));
    ck_assert_int_eq(lhost_status(h), LHOST_OK);
    ck_assert_str_eq(lhost_params_json(h),
                     "{\"alpha\":0.69999999999999996,\"chunk\":512,\"mode\":\"fcfs\",\"on\":false,"
                     "\"plain\":3}");
    static const struct {
        const char *set, *msg;
    } bad[] = {
        {"chunk=0", "--set chunk=0: param chunk must be a positive integer, got 0"},
        {"chunk=64.5", "param chunk must be a positive integer, got 64.5"},
        {"chunk=1e999", "param chunk must be a positive integer, got 1e999"},
        {"alpha=1.5", "param alpha must be a number in [0, 1], got 1.5"},
        {"alpha=-0.1", "param alpha must be a number in [0, 1], got -0.1"},
        {"alpha=nan", "param 'alpha' is a number, got 'nan'"},
        {"alpha=0/0", "param 'alpha' is a number, got '0/0'"},
        {"mode=lifo", "param mode must be one of fcfs, sjf, got lifo"},
        {"on=2", "param 'on' is a boolean"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(lhost_set(h, bad[i].set), -1);
        assert_has(lhost_errmsg(h), bad[i].msg);
        assert_has(lhost_errmsg(h), path); /* the message names the policy file */
        ck_assert_int_eq(lhost_status(h), LHOST_EPARAM);
    }
    double v = 0;
    ck_assert_int_eq(lhost_param_num(h, "chunk", &v), 1);
    ck_assert_double_eq(v, 512); /* untouched by the refused values */
    ck_assert_int_eq(lhost_set(h, "chunk=1"), 0);
    ck_assert_int_eq(lhost_set(h, "alpha=1"), 0);
    ck_assert_int_eq(lhost_set(h, "alpha=0"), 0);
    ck_assert_int_eq(lhost_set(h, "mode=sjf"), 0);
    ck_assert_int_eq(lhost_set(h, "plain=-7.5"), 0); /* no spec: any number */
    ck_assert_int_eq(lhost_set(h, "nope=1"), -1);
    ck_assert_int_eq(lhost_status(h), LHOST_EPARAM);
    /* only = "sim": not recorded by another executor, where it had no effect */
    ck_assert_str_eq(lhost_params_json_for(h, "engine"),
                     "{\"chunk\":1,\"mode\":\"sjf\",\"on\":false,\"plain\":-7.5}");
    ck_assert_str_eq(lhost_params_json_for(h, "sim"),
                     "{\"alpha\":0,\"chunk\":1,\"mode\":\"sjf\",\"on\":false,\"plain\":-7.5}");
    sink_t sk = {0};
    ck_assert_int_eq(lhost_set(h, "chunk=512"), 0);
    sched_t *sc = attach(h, &sk); /* schedule() reads s.params.chunk as a plain number */
    add(sc, 0, 10, 2);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(sc, 0, &plan), 0);
    sched_free(sc);
    lhost_close(h);
    unlink(path);
}
END_TEST

/* A malformed spec, or a default outside its own spec, is the policy's bug: refused at load
 * with the file and the param named. */
START_TEST(bad_param_specs) {
    static const struct {
        const char *params, *msg;
    } bad[] = {
        {"n = { 5, intt = true }", "param n: unknown spec field 'intt'"},
        {"n = { min = 1 }", "param n: a spec's first item is the default"},
        {"n = { 'x', min = 1 }", "param n: int, min and max apply to numbers"},
        {"n = { 0, int = true, min = 1 }", "param n: the default 0 is not a positive integer"},
        {"n = { 0.5, int = true }", "param n: the default 0.5 is not an integer"},
        {"n = { 2, min = 0, max = 1 }", "param n: the default 2 is not a number in [0, 1]"},
        {"m = { 'a', oneof = { 'b' } }", "param m: the default a is not one of b"},
        {"m = { 'a', oneof = { 1 } }", "param m: oneof's values must be of the default's type"},
        {"m = { 'a', only = 'gpu' }", "param m: only must be \"sim\" or \"engine\", got gpu"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char src[512];
        snprintf(src, sizeof src, "return { params = { %s }, schedule = function(s) end }\n",
                 bad[i].params);
        lhost_t *h = open_src(src);
        assert_has(lhost_errmsg(h), bad[i].msg);
        assert_has(lhost_errmsg(h), path);
        ck_assert_int_eq(lhost_status(h), LHOST_EPOLICY);
        lhost_close(h);
    }
    unlink(path);
}
END_TEST

/* The shipped policies declare their params: the examples are refused at load. */
START_TEST(shipped_policies_check_their_params) {
    static const struct {
        const char *file, *set, *msg;
    } cases[] = {
        {"policies/chunked_prefill.lua", "chunk=0", "param chunk must be a positive integer, got 0"},
        {"policies/chunked_prefill.lua", "chunk=64.5", "param chunk must be a positive integer"},
        {"policies/chunked_prefill.lua", "max_seqs=0", "param max_seqs must be a positive integer"},
        {"policies/continuous.lua", "max_tokens=-5", "param max_tokens must be a positive integer"},
        {"policies/speculative.lua", "k=-1", "param k must be a non-negative integer, got -1"},
        {"policies/speculative.lua", "alpha=1.5", "param alpha must be a number in [0, 1], got 1.5"},
        {"policies/static.lua", "batch=0", "param batch must be a positive integer, got 0"},
        {"policies/static.lua", "timeout_s=-1", "param timeout_s must be a non-negative number"},
        {"policies/priority.lua", "max_seqs=2.5", "param max_seqs must be a positive integer"},
        {"policies/fair.lua", "w_out=-2", "param w_out must be a non-negative number, got -2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lhost_t *h = lhost_open(cases[i].file, NULL);
        ck_assert_msg(!lhost_errmsg(h), "%s: %s", cases[i].file, lhost_errmsg(h));
        ck_assert_int_eq(lhost_set(h, cases[i].set), -1);
        assert_has(lhost_errmsg(h), cases[i].file);
        assert_has(lhost_errmsg(h), cases[i].msg);
        ck_assert_int_eq(lhost_status(h), LHOST_EPARAM);
        lhost_close(h);
    }
    /* speculative's alpha and draft steer the simulator only */
    lhost_t *h = lhost_open("policies/speculative.lua", NULL);
    ck_assert_str_eq(lhost_params_json_for(h, "engine"),
                     "{\"k\":4,\"max_seqs\":256,\"max_tokens\":8192}");
    assert_has(lhost_params_json(h), "\"draft\":\"llama-3.2-1b\"");
    assert_has(lhost_params_json_for(h, "sim"), "\"alpha\":0.69999999999999996");
    lhost_close(h);
}
END_TEST

START_TEST(bad_policy_files) {
    lhost_t *h = lhost_open("/nonexistent/policy.lua", NULL);
    assert_has(lhost_errmsg(h), "cannot open policy '/nonexistent/policy.lua'");
    ck_assert_int_eq(lhost_status(h), LHOST_EFILE); /* the user's mistake: a usage error */
    lhost_close(h);

    h = open_src("return {\n  schedule = function(s)\n    local x = = 1\n  end }\n");
    assert_has(lhost_errmsg(h), "policy syntax error");
    assert_has(lhost_errmsg(h), ":3:");
    assert_has(lhost_errmsg(h), path);
    ck_assert_int_eq(lhost_status(h), LHOST_EPOLICY);
    lhost_close(h);

    h = open_src("return { params = {} }\n");
    assert_has(lhost_errmsg(h), "has no schedule(s) function");
    lhost_close(h);

    h = open_src("return 42\n");
    assert_has(lhost_errmsg(h), "must return a table with a schedule(s) function (got number)");
    lhost_close(h);

    h = open_src("return { schedule = function() end, on_finish = 3 }\n");
    assert_has(lhost_errmsg(h), "'on_finish' must be a function");
    lhost_close(h);

    h = open_src("local t = nil\nreturn t.x\n");
    assert_has(lhost_errmsg(h), "error while loading");
    assert_has(lhost_errmsg(h), ":2:");
    assert_has(lhost_errmsg(h), "stack traceback");
    lhost_close(h);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ the sandbox */

START_TEST(sandbox_blocks_dangerous_globals) {
    const char *names[] = { "io", "os", "ffi", "require", "load", "loadstring", "dofile",
                            "loadfile", "debug", "jit", "package", "setfenv", "getfenv",
                            "collectgarbage", "coroutine" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[256];
        snprintf(src, sizeof src, "local x = %s\nreturn { schedule = function() end }\n",
                 names[i]);
        lhost_t *h = open_src(src);
        char needle[64];
        snprintf(needle, sizeof needle, "'%s' is not available to policies", names[i]);
        assert_has(lhost_errmsg(h), needle);
        assert_has(lhost_errmsg(h), ":1:");
        lhost_close(h);
    }
    /* string.dump and unbounded string.rep are gone too, also through method calls. */
    lhost_t *h = open_src("local d = string.dump\nassert(d == nil and ('x').dump == nil)\n"
                          "local ok, e = pcall(string.rep, 'x', 1e9)\nassert(not ok)\n"
                          "return { schedule = function() end }\n");
    ck_assert_ptr_null(lhost_errmsg(h));
    lhost_close(h);
    unlink(path);
}
END_TEST

START_TEST(views_are_read_only) {
    const char *bodies[] = {
        "r.generated = 5", "local q = r + 1", "local q = r[1]", "r.id = 3",
    };
    const char *needles[] = {
        "attempt to write to constant location", "attempt to perform arithmetic",
        "cannot be indexed with", "attempt to write to constant location",
    };
    for (size_t i = 0; i < 4; i++) {
        char src[512];
        snprintf(src, sizeof src,
                 "return { schedule = function(s)\n  local r = s:waiting(1)\n  if r then %s end\n"
                 "end }\n", bodies[i]);
        lhost_t *h = open_src(src);
        ck_assert_ptr_null(lhost_errmsg(h));
        sched_t *s = attach(h, NULL);
        add(s, 1, 10, 5);
        const sched_plan_t *plan;
        ck_assert_int_eq(sched_step(s, 0, &plan), -1);
        assert_has(sched_errmsg(s), needles[i]);
        assert_has(sched_errmsg(s), ":3:");
        sched_free(s);
        lhost_close(h);
    }
    unlink(path);
}
END_TEST


START_TEST(sandbox_holes_stay_closed) {
    /* Bytecode is refused: LuaJIT does not verify it. */
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ck_assert_int_eq(luaL_dostring(L, "return string.dump(function() return { schedule = "
                                      "function() end } end)"), 0);
    size_t n = 0;
    const char *bc = lua_tolstring(L, -1, &n);
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".lua"));
    FILE *f = fopen(path, "wb");
    fwrite(bc, 1, n, f);
    fclose(f);
    lua_close(L);
    lhost_t *h = lhost_open(path, NULL);
    assert_has(lhost_errmsg(h), "precompiled (binary) policies are not accepted");
    lhost_close(h);

    /* Replacing string.match cannot open import's path check; getmetatable("") is closed;
     * string.rep counts its separator against the cap. */
    h = open_src("string.match = function() return true end\n"
                 "assert(getmetatable('') == false)\n"
                 "assert(not pcall(string.rep, '', 40, string.rep('x', 1000000)))\n"
                 "local x = import('../../etc/passwd')\n"
                 "return { schedule = function() end }\n");
    assert_has(lhost_errmsg(h), ":4:");
    assert_has(lhost_errmsg(h), "import: a library name is letters, digits and _");
    lhost_close(h);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ running policies */

START_TEST(errors_name_the_policy_line) {
    lhost_t *h = open_src("return { schedule = function(s)\n"
                          "  local r = s:waiting(1)\n"
                          "  if r then s:schedule(r, r.prompt_tokens + 1) end\n"
                          "end }\n");
    sched_t *s = attach(h, NULL);
    add(s, 1, 10, 5);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    const char *m = sched_errmsg(s);
    assert_has(m, "error in schedule()");
    assert_has(m, ":3: illegal plan: request 1 has 10 tokens left to compute, the plan asks for 11");
    assert_has(m, "stack traceback");
    sched_free(s);
    lhost_close(h);

    h = open_src("return { schedule = function(s)\n  s:schedule(s:waiting(1), 2.5)\nend }\n");
    s = attach(h, NULL);
    add(s, 1, 10, 5);
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    assert_has(sched_errmsg(s), ":2: schedule: token count must be a 32-bit integer, got 2.5");
    sched_free(s);
    lhost_close(h);
    unlink(path);
}
END_TEST

/* Padding past the context length is refused with the policy's line (the simulator used to
 * cost it and the engine to clamp it); up to the last position is fine. */
START_TEST(pad_past_the_context_is_refused) {
    lhost_t *h = open_src("return { schedule = function(s)\n"
                          "  s:schedule(s:waiting(1))\n"
                          "  s:pad(1, 4095)\n"
                          "  s:pad(2, 4095)\n"
                          "end }\n");
    sched_t *s = attach(h, NULL);
    add(s, 1, 10, 5);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    assert_has(sched_errmsg(s), ":4: illegal plan: pad with 2 tokens at context 4095 runs past "
               "the context length 4096");
    sched_free(s);
    lhost_close(h);
    unlink(path);
}
END_TEST

/* batching.admit bounds the running batch, not the plan (vLLM's max_num_seqs): request 2,
 * left out of step 1 because its drafts do not fit the budget, still holds one of the two
 * slots, so request 3 waits. */
START_TEST(admit_counts_running_sequences) {
    lhost_t *h = lhost_open("policies/speculative.lua", NULL);
    ck_assert_ptr_null(lhost_errmsg(h));
    ck_assert_int_eq(lhost_set(h, "k=4"), 0);
    ck_assert_int_eq(lhost_set(h, "max_tokens=8"), 0);
    ck_assert_int_eq(lhost_set(h, "max_seqs=2"), 0);
    sched_t *s = attach(h, NULL);
    add(s, 1, 3, 20);
    add(s, 2, 3, 20);
    add(s, 3, 2, 20);
    const sched_plan_t *plan;
    ck_assert_msg(sched_step(s, 0, &plan) == 0, "%s", sched_errmsg(s));
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    ck_assert_msg(sched_step(s, 1, &plan) == 0, "%s", sched_errmsg(s));
    ck_assert_int_eq(plan->n, 1); /* request 1 with 4 drafts; nobody admitted */
    ck_assert_int_eq(plan->entries[0].req_id, 1);
    ck_assert_int_eq(sched_view(s)->n_waiting, 1);
    sched_free(s);
    lhost_close(h);
}
END_TEST

/* decode_running with a budget of one token: request 1 takes it (and the last free block);
 * request 2 then needs a block too but cannot run for want of budget, so nobody may be
 * preempted for it (request 3, the newest, used to be, for nothing). */
START_TEST(decode_running_preempts_only_for_what_it_schedules) {
    char dir[] = "/tmp/twinlib-XXXXXX", cwd[512], lib[600], file[600], tgt[600];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    snprintf(lib, sizeof lib, "%s/lib", dir);
    snprintf(tgt, sizeof tgt, "%s/policies/lib", cwd);
    ck_assert_int_eq(symlink(tgt, lib), 0);
    snprintf(file, sizeof file, "%s/p.lua", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("local b = import('batching')\n"
          "return { schedule = function(s)\n"
          "  if s:num_running() == 0 then\n"
          "    for j = 1, s:num_waiting() do s:schedule(s:waiting(j)) end\n"
          "  else b.decode_running(s, 1, 8) end\n"
          "end }\n", f);
    fclose(f);
    lhost_t *h = lhost_open(file, NULL);
    ck_assert_ptr_null(lhost_errmsg(h));
    sched_config_t c = { .num_blocks = 4, .block_size = 4, .watermark = 0, .max_tokens = 64,
                         .max_seqs = 8, .max_model_len = 64, .seed = 3 };
    sched_policy_t pol;
    lhost_policy(h, &pol);
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(lhost_attach(h, s), 0);
    for (int32_t id = 1; id <= 3; id++) add(s, id, 4, 10); /* a block each, all full */
    const sched_plan_t *plan;
    ck_assert_msg(sched_step(s, 0, &plan) == 0, "%s", sched_errmsg(s));
    ck_assert_int_eq(plan->n, 3);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    ck_assert_msg(sched_step(s, 1, &plan) == 0, "%s", sched_errmsg(s));
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->num_preempted, 0);
    ck_assert_int_eq(sched_find(s, 3)->state, SCHED_RUNNING);
    sched_free(s);
    lhost_close(h);
    unlink(file);
    unlink(lib);
    rmdir(dir);
}
END_TEST

START_TEST(hooks_params_and_random) {
    lhost_t *h = open_src(
        "local seen, done = 0, 0\n"
        "return { params = { n = 3 },\n"
        "  init = function(s) assert(s.block_size == 16 and s.max_seqs == 32) end,\n"
        "  on_arrival = function(s, r) seen = seen + 1 end,\n"
        /* output_tokens is the limit (the context left: no oracle), not the 3 generated */
        "  on_finish = function(s, r) done = done + 1\n"
        "    assert(r.generated == 3 and r.output_tokens == 4096 - r.prompt_tokens) end,\n"
        "  schedule = function(s)\n"
        "    assert(seen == s:num_waiting() + s:num_running() + done)\n"
        "    local u = math.random(); assert(u >= 0 and u < 1)\n"
        "    local k = math.random(1, 6); assert(k >= 1 and k <= 6 and k % 1 == 0)\n"
        "    for i = 1, s:num_running() do s:schedule(s:running(i)) end\n"
        "    for i = 1, math.min(s:num_waiting(), s.params.n) do\n"
        "      local r = s:waiting(i)\n"
        "      if s:can_allocate(r) then s:schedule(r) end\n"
        "    end\n"
        "  end }\n");
    ck_assert_ptr_null(lhost_errmsg(h));
    ck_assert_int_eq(lhost_set(h, "n=2"), 0);
    sink_t sk = { 0 };
    sched_t *s = attach(h, &sk);
    for (int i = 0; i < 5; i++) add(s, i, 20 + i, 3);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), 0);
    ck_assert_int_eq(plan->n, 2); /* params.n overridden to 2 */
    double t = 0;
    for (int it = 0; it < 100 && sched_num_unfinished(s); it++) {
        ck_assert_int_eq(sched_commit(s, plan, NULL, t += 1), 0);
        ck_assert_msg(sched_step(s, t, &plan) == 0, "%s", sched_errmsg(s));
    }
    ck_assert_int_eq(sk.finished, 5);
    sched_free(s);
    lhost_close(h);
    unlink(path);
}
END_TEST

START_TEST(import_shares_library_code) {
    /* Shipped policies import policies/lib/batching.lua; a bad name is refused. */
    lhost_t *h = lhost_open("policies/chunked_prefill.lua", NULL);
    ck_assert_ptr_null(lhost_errmsg(h));
    lhost_close(h);
    h = open_src("local x = import('../etc/passwd')\nreturn { schedule = function() end }\n");
    assert_has(lhost_errmsg(h), "import: a library name is letters, digits and _");
    lhost_close(h);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ limits */

START_TEST(endless_loop_is_stopped) {
    /* A compiled loop never runs hooks: the watchdog ends the process with status 3 after
     * calling the abort callback. If the interpreter's hook catches it first, the call
     * fails with a time-limit message instead; both end the run. */
    lhost_limits_t lim = { .time_limit_s = 0.2 };
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".lua",
        "return { schedule = function(s)\n  local x = 0\n  while true do x = x + 1 end\nend }\n"));
    lhost_t *h = lhost_open(path, &lim);
    ck_assert_ptr_null(lhost_errmsg(h));
    sched_t *s = attach(h, NULL);
    add(s, 1, 10, 5);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    assert_has(sched_errmsg(s), "time limit exceeded");
    exit(3);
}
END_TEST

START_TEST(memory_cap_is_enforced) {
    lhost_limits_t lim = { .time_limit_s = 5, .mem_limit_mb = 16 };
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".lua",
        "local t = {}\nreturn { schedule = function(s)\n"
        "  for i = 1, 1e9 do t[i] = {i} end\nend }\n"));
    lhost_t *h = lhost_open(path, &lim);
    sched_t *s = attach(h, NULL);
    add(s, 1, 10, 5);
    const sched_plan_t *plan;
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    assert_has(sched_errmsg(s), "memory cap exceeded");
    exit(3);
}
END_TEST

/* ------------------------------------------------------------------ output lengths */

typedef struct {
    int finished;
    int32_t generated, true_output, output; /* of the last finished request */
} len_sink_t;

static void len_sink(void *ud, const sched_req_t *r, const char *reason) {
    len_sink_t *k = ud;
    (void)reason;
    if (r->state != SCHED_FINISHED) return;
    k->finished++;
    k->generated = r->generated;
    k->true_output = r->true_output_tokens;
    k->output = r->output_tokens;
}

/* Runs one request (prompt 100, true output `out`) under a policy that checks, at every
 * step, that r.output_tokens is `want` and r.predicted_output_tokens is `pred` (0: nil),
 * and that the true length is out of its reach; decoding requests verify k drafts capped at
 * the limit, every draft accepted. Returns what the sink saw when the request finished. */
static len_sink_t run_lengths(int oracle, int32_t run_cap, int32_t req_cap, int32_t pred,
                              int32_t out, int32_t want, int32_t k) {
    lhost_t *h = open_src(
        "return { params = { want = 0, pred = -1, k = 0 },\n"
        "  schedule = function(s)\n"
        "    local p = s.params\n"
        "    local function check(r)\n"
        "      assert(r.output_tokens == p.want, 'output_tokens ' .. r.output_tokens)\n"
        "      assert((r.predicted_output_tokens or -1) == p.pred,\n"
        "             'predicted ' .. tostring(r.predicted_output_tokens))\n"
        "      local ok, err = pcall(function() return r.true_output_tokens end)\n"
        "      assert(not ok and err:find('no member named'), 'true length reachable')\n"
        "    end\n"
        "    for i = 1, s:num_running() do\n"
        "      local r = s:running(i); check(r)\n"
        "      if r:is_decoding() then\n"
        "        s:schedule(r, 1, math.max(0, math.min(p.k, r.output_tokens - r.generated - 1)))\n"
        "      end\n"
        "    end\n"
        "    for i = 1, s:num_waiting() do check(s:waiting(i)); s:schedule(s:waiting(i)) end\n"
        "  end }\n");
    ck_assert_ptr_null(lhost_errmsg(h));
    char set[64];
    snprintf(set, sizeof set, "want=%d", want);
    ck_assert_int_eq(lhost_set(h, set), 0);
    snprintf(set, sizeof set, "pred=%d", pred > 0 ? pred : -1);
    ck_assert_int_eq(lhost_set(h, set), 0);
    snprintf(set, sizeof set, "k=%d", k);
    ck_assert_int_eq(lhost_set(h, set), 0);
    sched_config_t c = { .num_blocks = 400, .block_size = 16, .watermark = 0.01,
                         .max_tokens = 2048, .max_seqs = 32, .max_model_len = 4096, .seed = 3,
                         .max_output_tokens = run_cap, .oracle_lengths = oracle };
    sched_policy_t pol;
    lhost_policy(h, &pol);
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    len_sink_t sk = { 0 };
    sched_set_sink(s, len_sink, &sk);
    ck_assert_int_eq(lhost_attach(h, s), 0);
    sched_new_req_t r = { .id = 1, .prompt_tokens = 100, .output_tokens = out,
                          .max_output_tokens = req_cap, .predicted_output_tokens = pred };
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
    const sched_plan_t *plan;
    double t = 0;
    int32_t acc[8];
    ck_assert_msg(sched_step(s, t, &plan) == 0, "%s", sched_errmsg(s));
    for (int it = 0; it < 100 && sched_num_unfinished(s); it++) {
        for (int32_t i = 0; i < plan->n && i < 8; i++) acc[i] = plan->entries[i].num_spec;
        ck_assert_int_eq(sched_commit(s, plan, acc, t += 1), 0);
        ck_assert_msg(sched_step(s, t, &plan) == 0, "%s", sched_errmsg(s));
    }
    ck_assert_int_eq(sk.finished, 1);
    sched_free(s);
    lhost_close(h);
    unlink(path);
    return sk;
}

/* A policy that reads r.output_tokens without the oracle gets the limit, never the truth;
 * the request still ends at its true length (as EOS would end it). */
START_TEST(policies_see_limits_not_true_lengths) {
    /* no limit anywhere: the context left after the prompt */
    len_sink_t k = run_lengths(0, 0, 0, 0, 7, 4096 - 100, 0);
    ck_assert_int_eq(k.generated, 7);
    ck_assert_int_eq(k.true_output, 7);
    /* the oracle shows the truth */
    k = run_lengths(1, 0, 0, 0, 7, 7, 0);
    ck_assert_int_eq(k.generated, 7);
    /* the request's own max_tokens wins over the run's */
    k = run_lengths(0, 20, 50, 0, 7, 50, 0);
    ck_assert_int_eq(k.generated, 7);
    /* the run's limit; a longer answer stops there, and the oracle shows where */
    k = run_lengths(0, 5, 0, 0, 7, 5, 0);
    ck_assert_int_eq(k.generated, 5);
    ck_assert_int_eq(k.true_output, 5);
    k = run_lengths(1, 5, 0, 0, 7, 5, 0);
    ck_assert_int_eq(k.generated, 5);
    /* a predictor's guess from the trace is the policy's to read */
    k = run_lengths(0, 0, 0, 9, 7, 4096 - 100, 0);
    ck_assert_int_eq(k.generated, 7);
    /* drafts planned against the limit run past the true end: only the tokens before it
     * are emitted */
    k = run_lengths(0, 0, 0, 0, 7, 4096 - 100, 4);
    ck_assert_int_eq(k.generated, 7);
    ck_assert_int_eq(k.output, 4096 - 100);
}
END_TEST

/* ------------------------------------------------------------------ FFI layout */

START_TEST(ffi_layout_matches_c) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ck_assert_int_eq(luaL_loadbuffer(L, lhost_prelude_lua, strlen(lhost_prelude_lua), "=p"), 0);
    ck_assert_int_eq(lua_pcall(L, 0, 1, 0), 0);
    char src[2048];
    snprintf(src, sizeof src,
             "local ffi = require('ffi')\n"
             /* the FFI declares everything before the C-only true length, and not it */
             "assert(ffi.sizeof('sched_req_t') == %zu, 'sizeof sched_req_t')\n"
             "assert(ffi.offsetof('sched_req_t', 'arrival_s') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'spec_accepted') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'cached_tokens') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'predicted') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'finish_s') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'priority') == %zu)\n"
             "assert(ffi.offsetof('sched_req_t', 'tenant_name') == %zu)\n"
             "assert(ffi.sizeof('sched_view_t') == %zu, 'sizeof sched_view_t')\n"
             "assert(ffi.offsetof('sched_view_t', 'n_running') == %zu)\n"
             "assert(ffi.offsetof('sched_view_t', 'plan_seqs') == %zu)\n"
             "assert(ffi.offsetof('sched_view_t', 'wake_at') == %zu)\n",
             offsetof(sched_req_t, true_output_tokens), offsetof(sched_req_t, arrival_s),
             offsetof(sched_req_t, spec_accepted), offsetof(sched_req_t, cached_tokens),
             offsetof(sched_req_t, predicted_output_tokens), offsetof(sched_req_t, finish_s),
             offsetof(sched_req_t, priority), offsetof(sched_req_t, tenant_name),
             sizeof(sched_view_t), offsetof(sched_view_t, n_running),
             offsetof(sched_view_t, plan_seqs), offsetof(sched_view_t, wake_at));
    int rc = luaL_dostring(L, src);
    ck_assert_msg(rc == 0, "%s", rc ? lua_tostring(L, -1) : "");
    lua_close(L);
}
END_TEST

int main(void) {
    Suite *s = suite_create("lua_host");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, shipped_policy_loads_with_params);
    tcase_add_test(tc, param_types);
    tcase_add_test(tc, param_specs_are_checked);
    tcase_add_test(tc, bad_param_specs);
    tcase_add_test(tc, shipped_policies_check_their_params);
    tcase_add_test(tc, bad_policy_files);
    tcase_add_test(tc, sandbox_blocks_dangerous_globals);
    tcase_add_test(tc, views_are_read_only);
    tcase_add_test(tc, sandbox_holes_stay_closed);
    tcase_add_test(tc, errors_name_the_policy_line);
    tcase_add_test(tc, pad_past_the_context_is_refused);
    tcase_add_test(tc, admit_counts_running_sequences);
    tcase_add_test(tc, decode_running_preempts_only_for_what_it_schedules);
    tcase_add_test(tc, hooks_params_and_random);
    tcase_add_test(tc, import_shares_library_code);
    tcase_add_exit_test(tc, endless_loop_is_stopped, 3);
    tcase_add_exit_test(tc, memory_cap_is_enforced, 3);
    tcase_add_test(tc, ffi_layout_matches_c);
    tcase_add_test(tc, policies_see_limits_not_true_lengths);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

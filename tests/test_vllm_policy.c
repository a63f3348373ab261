/* Check suite for policies/vllm.lua, vLLM v1's Scheduler.schedule() (FCFS) on the core.
 *
 * Each test drives the real core (policies/sched.c) with the policy through the Lua host and
 * asserts every step's plan, entry by entry, against what vLLM's loops compute by hand
 * (the policy's header cites them): running requests first in running-list order, a long
 * prompt chunked by the token budget, long_prefill_token_threshold capping a chunk, the
 * newest running request preempted under KV pressure (also for a prefill chunk, also
 * itself) with no admission in that step and the preempted request at the head of the
 * queue, admission stopped at max_num_seqs, chunked_prefill=false stopping admission at a
 * prompt that does not fit the rest of the budget, no watermark, prefix hits free of the
 * budget, and the params refused when out of range or beyond the executor's limits. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "policies/lua_host.h"
#include "policies/sched.h"
#include "tests/testutil.h"

#define POLICY "policies/vllm.lua"

typedef struct {
    int finished, rejected;
    char reason[512];
} sink_t;

static void sink(void *ud, const sched_req_t *r, const char *reason) {
    sink_t *k = ud;
    if (r->state == SCHED_FINISHED) k->finished++;
    if (r->state == SCHED_REJECTED) {
        k->rejected++;
        snprintf(k->reason, sizeof k->reason, "%s", reason ? reason : "");
    }
}

/* One replica: the core with vllm.lua and its --set values. */
typedef struct {
    lhost_t *h;
    sched_t *s;
    sink_t k;
    double t;
    const sched_plan_t *plan;
} rig_t;

static sched_config_t config(int32_t blocks) {
    return (sched_config_t){ .num_blocks = blocks, .block_size = 16, .watermark = 0,
                             .max_tokens = 4096, .max_seqs = 64, .max_model_len = 4096,
                             .seed = 1 };
}

/* sets: NULL-terminated "key=value" list. */
static void open_rig(rig_t *g, sched_config_t c, const char *const *sets) {
    memset(g, 0, sizeof *g);
    g->h = lhost_open(POLICY, NULL);
    ck_assert_msg(lhost_errmsg(g->h) == NULL, "%s", lhost_errmsg(g->h));
    for (; sets && *sets; sets++)
        ck_assert_msg(lhost_set(g->h, *sets) == 0, "%s: %s", *sets, lhost_errmsg(g->h));
    sched_policy_t pol;
    lhost_policy(g->h, &pol);
    g->s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(g->s);
    sched_set_sink(g->s, sink, &g->k);
    ck_assert_msg(lhost_attach(g->h, g->s) == 0, "%s", lhost_errmsg(g->h));
}

static void close_rig(rig_t *g) {
    sched_free(g->s);
    lhost_close(g->h);
}

static void add_req(rig_t *g, int32_t id, int32_t prompt, int32_t out) {
    sched_new_req_t r = { .id = id, .arrival_s = g->t, .prompt_tokens = prompt,
                          .output_tokens = out };
    ck_assert_int_eq(sched_add(g->s, &r, g->t), 0);
}

/* The next step's plan must be exactly the (id, tokens) pairs of want, in order (0, 0
 * ends the list), with npre preemptions; then it is committed. */
static void expect_step(rig_t *g, int line, const int32_t (*want)[2], int npre) {
    ck_assert_msg(sched_step(g->s, g->t, &g->plan) == 0, "line %d: %s", line,
                  sched_errmsg(g->s));
    const sched_plan_t *p = g->plan;
    int n = 0;
    while (want[n][0] != 0) n++;
    char got[512] = "";
    for (int32_t i = 0; i < p->n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, " (%d,%d)", p->entries[i].req_id,
                 p->entries[i].num_tokens);
    }
    ck_assert_msg(p->n == n, "line %d: step %lld has %d entries:%s; expected %d", line,
                  (long long)p->step, p->n, got, n);
    for (int i = 0; i < n; i++)
        ck_assert_msg(p->entries[i].req_id == want[i][0] && p->entries[i].num_tokens == want[i][1],
                      "line %d: entry %d is (%d,%d), expected (%d,%d); plan:%s", line, i,
                      p->entries[i].req_id, p->entries[i].num_tokens, want[i][0], want[i][1], got);
    ck_assert_msg(p->num_preempted == npre, "line %d: %d preemptions, expected %d", line,
                  p->num_preempted, npre);
    g->t += 0.01;
    ck_assert_msg(sched_commit(g->s, p, NULL, g->t) == 0, "%s", sched_errmsg(g->s));
}

#define STEP(g, npre, ...)                                                                   \
    do {                                                                                     \
        static const int32_t w_[][2] = { __VA_ARGS__, { 0, 0 } };                            \
        expect_step(g, __LINE__, w_, npre);                                                  \
    } while (0)
#define EMPTY_STEP(g, npre)                                                                  \
    do {                                                                                     \
        static const int32_t w_[][2] = { { 0, 0 } };                                         \
        expect_step(g, __LINE__, w_, npre);                                                  \
    } while (0)

static int32_t state_of(rig_t *g, int32_t id) {
    const sched_req_t *r = sched_find(g->s, id);
    ck_assert_ptr_nonnull(r);
    return r->state;
}

/* ------------------------------------------------------------------ the budget */

/* Budget 64: request 2's 200-token prompt goes in chunks of what the running loop leaves
 * (54, 63, 63, 20) after request 1's decodes; request 3 waits until the running requests
 * have had their tokens. */
START_TEST(running_first_and_prompts_chunked_by_the_budget) {
    rig_t g;
    const char *sets[] = { "max_num_batched_tokens=64", NULL };
    open_rig(&g, config(1000), sets);
    add_req(&g, 1, 10, 20);
    add_req(&g, 2, 200, 5);
    add_req(&g, 3, 10, 5);
    STEP(&g, 0, { 1, 10 }, { 2, 54 });
    STEP(&g, 0, { 1, 1 }, { 2, 63 });
    STEP(&g, 0, { 1, 1 }, { 2, 63 });
    STEP(&g, 0, { 1, 1 }, { 2, 20 }, { 3, 10 });
    STEP(&g, 0, { 1, 1 }, { 2, 1 }, { 3, 1 });
    close_rig(&g);
}
END_TEST

/* No param: the budget and the sequence cap are the executor's (s.max_tokens, s.max_seqs). */
START_TEST(defaults_are_the_executors_limits) {
    rig_t g;
    sched_config_t c = config(1000);
    c.max_tokens = 256;
    c.max_seqs = 2;
    open_rig(&g, c, NULL);
    ck_assert_str_eq(lhost_params_json(g.h), "{\"chunked_prefill\":true,"
                     "\"long_prefill_token_threshold\":0,\"max_num_batched_tokens\":0,"
                     "\"max_num_seqs\":0}");
    add_req(&g, 1, 1000, 3);
    add_req(&g, 2, 10, 3);
    add_req(&g, 3, 10, 3);
    STEP(&g, 0, { 1, 256 });
    STEP(&g, 0, { 1, 256 });
    STEP(&g, 0, { 1, 256 });
    STEP(&g, 0, { 1, 232 }, { 2, 10 }); /* 2 running: request 3 waits */
    STEP(&g, 0, { 1, 1 }, { 2, 1 });
    close_rig(&g);
}
END_TEST

/* long_prefill_token_threshold=50 caps every request's tokens in a step, running (1 and 3
 * after their first chunk) and waiting (1 and 3 at admission) alike; the budget still
 * caps the last one (3 gets 48, the rest of 128). */
START_TEST(threshold_caps_each_chunk) {
    rig_t g;
    const char *sets[] = { "max_num_batched_tokens=128", "long_prefill_token_threshold=50", NULL };
    open_rig(&g, config(1000), sets);
    add_req(&g, 1, 300, 5);
    add_req(&g, 2, 30, 5);
    add_req(&g, 3, 120, 5);
    STEP(&g, 0, { 1, 50 }, { 2, 30 }, { 3, 48 });
    STEP(&g, 0, { 1, 50 }, { 2, 1 }, { 3, 50 });
    STEP(&g, 0, { 1, 50 }, { 2, 1 }, { 3, 22 });
    STEP(&g, 0, { 1, 50 }, { 2, 1 }, { 3, 1 });
    close_rig(&g);
}
END_TEST

/* ------------------------------------------------------------------ KV pressure */

/* 14 blocks of 16 tokens. Requests 1 and 2 (96-token prompts) take 6 blocks each and one
 * more at their first decode; request 3 (48 tokens, 3 blocks) never fits meanwhile. At the
 * 17th decode request 1 needs an 8th block: the newest running request (2) is preempted,
 * and request 3, which would now fit, is not admitted in that step. Request 2 goes to the
 * head of the queue; its recompute (113 tokens, 8 blocks) does not fit the 6 free blocks,
 * so admission stops there and request 3 behind it still waits (FCFS). */
START_TEST(kv_pressure_preempts_the_newest_and_admits_nobody) {
    rig_t g;
    open_rig(&g, config(14), NULL);
    add_req(&g, 1, 96, 100);
    add_req(&g, 2, 96, 100);
    add_req(&g, 3, 48, 5);
    STEP(&g, 0, { 1, 96 }, { 2, 96 });
    for (int j = 1; j <= 16; j++) STEP(&g, 0, { 1, 1 }, { 2, 1 });
    ck_assert_int_eq(sched_view(g.s)->free_blocks, 0);
    STEP(&g, 1, { 1, 1 });
    ck_assert_int_eq(state_of(&g, 2), SCHED_PREEMPTED);
    ck_assert_int_eq(state_of(&g, 3), SCHED_WAITING);
    ck_assert_int_eq(sched_view(g.s)->free_blocks, 6); /* request 3 needs 3 */
    const sched_view_t *v = sched_view(g.s);
    ck_assert_int_eq(v->n_waiting, 2);
    ck_assert_int_eq(v->waiting[0]->id, 2); /* preempted: back at the head */
    ck_assert_int_eq(v->waiting[1]->id, 3);
    STEP(&g, 0, { 1, 1 });
    ck_assert_int_eq(state_of(&g, 3), SCHED_WAITING);
    close_rig(&g);
}
END_TEST

/* Three requests cross a block boundary together in 15 blocks: the first one short of a
 * block preempts the LAST of the running list (3), not the next one (2), and the other two
 * then both run. */
START_TEST(the_victim_is_the_last_of_the_running_list) {
    rig_t g;
    open_rig(&g, config(15), NULL);
    for (int32_t id = 1; id <= 3; id++) add_req(&g, id, 64, 100);
    STEP(&g, 0, { 1, 64 }, { 2, 64 }, { 3, 64 });
    for (int j = 1; j <= 16; j++) STEP(&g, 0, { 1, 1 }, { 2, 1 }, { 3, 1 });
    STEP(&g, 1, { 1, 1 }, { 2, 1 });
    ck_assert_int_eq(state_of(&g, 3), SCHED_PREEMPTED);
    ck_assert_int_eq(sched_view(g.s)->free_blocks, 3);
    close_rig(&g);
}
END_TEST

/* The request that lacks a block is the newest itself (2 crosses a block boundary while 1,
 * with a 90-token prompt, does not): it preempts itself and the step runs 1 alone. */
START_TEST(the_newest_preempts_itself) {
    rig_t g;
    open_rig(&g, config(14), NULL);
    add_req(&g, 1, 90, 100);
    add_req(&g, 2, 96, 100);
    STEP(&g, 0, { 1, 90 }, { 2, 96 });
    for (int j = 1; j <= 16; j++) STEP(&g, 0, { 1, 1 }, { 2, 1 });
    STEP(&g, 1, { 1, 1 });
    ck_assert_int_eq(state_of(&g, 2), SCHED_PREEMPTED);
    ck_assert_int_eq(state_of(&g, 1), SCHED_RUNNING);
    close_rig(&g);
}
END_TEST

/* A running request's prefill CHUNK preempts too (chunked_prefill.lua only preempts for
 * decodes): with a 32-token threshold request 1's 150-token prompt goes in chunks while
 * request 2 decodes; 10 blocks fill at the 4th step, and request 1's last chunk (22
 * tokens, 2 blocks) preempts request 2, the newest. */
START_TEST(a_prefill_chunk_preempts_the_newest) {
    rig_t g;
    const char *sets[] = { "max_num_batched_tokens=64", "long_prefill_token_threshold=32", NULL };
    open_rig(&g, config(10), sets);
    add_req(&g, 1, 150, 5);
    add_req(&g, 2, 16, 50);
    STEP(&g, 0, { 1, 32 }, { 2, 16 });
    STEP(&g, 0, { 1, 32 }, { 2, 1 });
    STEP(&g, 0, { 1, 32 }, { 2, 1 });
    STEP(&g, 0, { 1, 32 }, { 2, 1 });
    ck_assert_int_eq(sched_view(g.s)->free_blocks, 0);
    STEP(&g, 1, { 1, 22 });
    ck_assert_int_eq(state_of(&g, 2), SCHED_PREEMPTED);
    close_rig(&g);
}
END_TEST

/* vLLM v1 keeps no free blocks back at admission: with --watermark 0.25 (5 of 20 blocks)
 * request 2 (7 blocks) is admitted into the 10 free blocks, which s:can_allocate, keeping
 * the watermark, would refuse. */
START_TEST(no_watermark_at_admission) {
    rig_t g;
    sched_config_t c = config(20);
    c.watermark = 0.25;
    open_rig(&g, c, NULL);
    ck_assert_int_eq(sched_view(g.s)->watermark_blocks, 5);
    add_req(&g, 1, 160, 5);
    add_req(&g, 2, 112, 5);
    STEP(&g, 0, { 1, 160 }, { 2, 112 });
    ck_assert_int_eq(sched_view(g.s)->free_blocks, 3);
    close_rig(&g);
}
END_TEST

/* ------------------------------------------------------------------ admission */

/* max_num_seqs=2: the third request waits while two run (scheduled or not), and is admitted
 * in the step after request 1 finished. */
START_TEST(admission_stops_at_max_num_seqs) {
    rig_t g;
    const char *sets[] = { "max_num_seqs=2", NULL };
    open_rig(&g, config(1000), sets);
    add_req(&g, 1, 10, 2);
    add_req(&g, 2, 10, 5);
    add_req(&g, 3, 10, 5);
    STEP(&g, 0, { 1, 10 }, { 2, 10 });
    STEP(&g, 0, { 1, 1 }, { 2, 1 }); /* 1 finishes here */
    ck_assert_int_eq(g.k.finished, 1);
    STEP(&g, 0, { 2, 1 }, { 3, 10 });
    close_rig(&g);
}
END_TEST

/* chunked_prefill=false, budget 100: request 2's whole 100-token prompt does not fit what
 * request 1's decode leaves (99), so admission stops there and request 3 (5 tokens) behind
 * it waits too; once request 1 has finished, request 2 gets the whole budget. With chunked
 * prefill on, request 2 would have had a 90-token chunk in the first step. */
START_TEST(unchunked_prompt_that_does_not_fit_stops_admission) {
    rig_t g;
    const char *sets[] = { "max_num_batched_tokens=100", "chunked_prefill=false", NULL };
    open_rig(&g, config(1000), sets);
    add_req(&g, 1, 10, 3);
    add_req(&g, 2, 100, 2);
    add_req(&g, 3, 5, 2);
    STEP(&g, 0, { 1, 10 });
    STEP(&g, 0, { 1, 1 });
    STEP(&g, 0, { 1, 1 }); /* 1 finishes */
    STEP(&g, 0, { 2, 100 });
    STEP(&g, 0, { 2, 1 }, { 3, 5 });
    close_rig(&g);

    const char *on[] = { "max_num_batched_tokens=100", NULL };
    open_rig(&g, config(1000), on);
    add_req(&g, 1, 10, 3);
    add_req(&g, 2, 100, 2);
    add_req(&g, 3, 5, 2);
    STEP(&g, 0, { 1, 10 }, { 2, 90 });
    close_rig(&g);
}
END_TEST

/* Without chunking a prompt over the whole budget could never run (vLLM refuses to start
 * so configured): it is rejected with that reason, and admission goes on behind it. */
START_TEST(unchunked_prompt_over_the_budget_is_rejected) {
    rig_t g;
    const char *sets[] = { "max_num_batched_tokens=100", "chunked_prefill=false", NULL };
    open_rig(&g, config(1000), sets);
    add_req(&g, 1, 150, 2);
    add_req(&g, 2, 20, 2);
    STEP(&g, 0, { 2, 20 });
    ck_assert_int_eq(g.plan->num_rejected, 1);
    ck_assert_int_eq(g.k.rejected, 1);
    ck_assert_msg(strstr(g.k.reason, "150 uncached tokens exceed max_num_batched_tokens=100 "
                                     "with chunked_prefill=false"), "%s", g.k.reason);
    close_rig(&g);
}
END_TEST

/* Prefix caching: request 2 shares request 1's four leading 16-token blocks, so of its
 * 80-token prompt only 16 tokens cost budget, and request 3 still gets its 10 tokens out of
 * the 40-token step (charged 39, as a prompt without hits, request 2 would leave none). */
START_TEST(prefix_hits_cost_no_budget) {
    rig_t g;
    sched_config_t c = config(1000);
    c.prefix_caching = 1;
    const char *sets[] = { "max_num_batched_tokens=40", "max_num_seqs=8", NULL };
    open_rig(&g, c, sets);
    int64_t ids[4] = { 11, 12, 13, 14 };
    sched_new_req_t r = { .id = 1, .prompt_tokens = 80, .output_tokens = 50, .hash_ids = ids,
                          .n_hash = 4, .hash_block = 16 };
    ck_assert_int_eq(sched_add(g.s, &r, 0), 0);
    STEP(&g, 0, { 1, 40 });
    STEP(&g, 0, { 1, 40 });
    r.id = 2;
    r.arrival_s = g.t;
    ck_assert_int_eq(sched_add(g.s, &r, g.t), 0);
    add_req(&g, 3, 10, 5);
    STEP(&g, 0, { 1, 1 }, { 2, 16 }, { 3, 10 });
    ck_assert_int_eq(sched_find(g.s, 2)->cached_tokens, 64);
    ck_assert_int_eq(sched_find(g.s, 2)->generated, 1);
    close_rig(&g);
}
END_TEST

/* ------------------------------------------------------------------ params */

START_TEST(bad_params_are_refused) {
    static const struct {
        const char *set, *msg;
    } bad[] = {
        { "max_num_batched_tokens=-1", "param max_num_batched_tokens must be a non-negative integer, got -1" },
        { "max_num_batched_tokens=64.5", "param max_num_batched_tokens must be a non-negative integer" },
        { "max_num_seqs=-2", "param max_num_seqs must be a non-negative integer, got -2" },
        { "long_prefill_token_threshold=-3", "param long_prefill_token_threshold must be a non-negative integer" },
        { "long_prefill_token_threshold=lots", "param 'long_prefill_token_threshold' is a number" },
        { "chunked_prefill=maybe", "param 'chunked_prefill' is a boolean" },
        { "policy=priority", "unknown param 'policy'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lhost_t *h = lhost_open(POLICY, NULL);
        ck_assert_ptr_null(lhost_errmsg(h));
        ck_assert_int_eq(lhost_set(h, bad[i].set), -1);
        ck_assert_msg(strstr(lhost_errmsg(h), bad[i].msg), "%s: '%s' lacks '%s'", bad[i].set,
                      lhost_errmsg(h), bad[i].msg);
        ck_assert_msg(strstr(lhost_errmsg(h), POLICY), "%s", lhost_errmsg(h));
        ck_assert_int_eq(lhost_status(h), LHOST_EPARAM);
        lhost_close(h);
    }
}
END_TEST

/* Limits beyond the executor's, or a budget below the sequence cap (vLLM refuses it), fail
 * in init(s) with a message saying what to change. */
START_TEST(limits_beyond_the_executor_fail_at_init) {
    static const struct {
        const char *set[3], *msg;
    } bad[] = {
        { { "max_num_batched_tokens=8192" },
          "max_num_batched_tokens=8192 exceeds the executor's step budget of 4096 tokens" },
        { { "max_num_seqs=65" }, "max_num_seqs=65 exceeds the executor's limit of 64" },
        { { "max_num_batched_tokens=16", "max_num_seqs=32" },
          "max_num_batched_tokens (16) must be >= max_num_seqs (32)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        lhost_t *h = lhost_open(POLICY, NULL);
        for (int j = 0; j < 3 && bad[i].set[j]; j++) ck_assert_int_eq(lhost_set(h, bad[i].set[j]), 0);
        sched_config_t c = config(100);
        sched_policy_t pol;
        lhost_policy(h, &pol);
        sched_t *s = sched_new(&c, &pol, NULL);
        ck_assert_int_ne(lhost_attach(h, s), 0);
        ck_assert_msg(strstr(lhost_errmsg(h), bad[i].msg), "'%s' lacks '%s'", lhost_errmsg(h),
                      bad[i].msg);
        sched_free(s);
        lhost_close(h);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("vllm_policy");
    TCase *tc = tcase_create("schedule");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, running_first_and_prompts_chunked_by_the_budget);
    tcase_add_test(tc, defaults_are_the_executors_limits);
    tcase_add_test(tc, threshold_caps_each_chunk);
    tcase_add_test(tc, kv_pressure_preempts_the_newest_and_admits_nobody);
    tcase_add_test(tc, the_victim_is_the_last_of_the_running_list);
    tcase_add_test(tc, the_newest_preempts_itself);
    tcase_add_test(tc, a_prefill_chunk_preempts_the_newest);
    tcase_add_test(tc, no_watermark_at_admission);
    tcase_add_test(tc, admission_stops_at_max_num_seqs);
    tcase_add_test(tc, unchunked_prompt_that_does_not_fit_stops_admission);
    tcase_add_test(tc, unchunked_prompt_over_the_budget_is_rejected);
    tcase_add_test(tc, prefix_hits_cost_no_budget);
    tcase_add_test(tc, bad_params_are_refused);
    tcase_add_test(tc, limits_beyond_the_executor_fail_at_init);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

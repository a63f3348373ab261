/* Check suite for the scheduler core's prefix cache (policies/prefix.c as the core uses it):
 * shared leading blocks, a preempted request's own blocks, eviction. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

static void add_hashed_out(sched_t *s, int32_t id, int32_t prompt, int32_t out,
                           const int64_t *h, int32_t nh) {
    sched_new_req_t r = { .id = id, .prompt_tokens = prompt, .output_tokens = out,
                          .hash_ids = h, .n_hash = nh, .hash_block = 64 };
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
}

static void add_hashed(sched_t *s, int32_t id, int32_t prompt, const int64_t *h, int32_t nh) {
    add_hashed_out(s, id, prompt, 3, h, nh);
}

START_TEST(prefix_cache_shares_leading_blocks) {
    probe_t p = { .fn = fcfs };
    sched_config_t c = cfg(100);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    int64_t a[] = { 10, 11, 12 }, b[] = { 10, 11, 99 }, d[] = { 7, 11, 12 };
    add_hashed(s, 1, 170, a, 3);            /* 10 full blocks, 4 hash blocks of 64 tokens */
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->entries[0].num_tokens, 170);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0); /* publishes 10 full blocks */
    add_hashed(s, 2, 170, a, 3);            /* same prompt: all but the last token's block */
    add_hashed(s, 3, 150, b, 3);            /* shares hash blocks 10, 11: 128 tokens */
    add_hashed(s, 4, 170, d, 3);            /* different first block: nothing */
    /* What a policy is told before it schedules: exactly what the step takes below. */
    ck_assert_int_eq(sched_prefix_hit(s, 2), 160);
    ck_assert_int_eq(sched_prefix_hit(s, 3), 128);
    ck_assert_int_eq(sched_prefix_hit(s, 4), 0);
    ck_assert_int_eq(sched_prefix_hit(s, 1), 0); /* running: nothing more to take */
    plan = step(s, 1);
    ck_assert_int_eq(plan->n, 4);
    ck_assert_int_eq(plan->entries[1].start, 160);  /* (170 - 1) / 16 = 10 blocks cached */
    ck_assert_int_eq(plan->entries[1].num_tokens, 10);
    ck_assert_int_eq(plan->entries[2].start, 128);
    ck_assert_int_eq(plan->entries[2].num_tokens, 22);
    ck_assert_int_eq(plan->entries[3].start, 0);
    ck_assert_int_eq(plan->entries[3].num_tokens, 170);
    ck_assert_int_eq(plan->prefill_tokens, 10 + 22 + 170);
    ck_assert_int_eq(plan->decode_tokens, 1);
    ck_assert_int_eq(sched_find(s, 2)->cached_tokens, 160);
    ck_assert_int_eq(sched_find(s, 3)->cached_tokens, 128);
    int32_t n1, n2;
    const int32_t *b1 = sched_req_blocks(s, 1, &n1), *b2 = sched_req_blocks(s, 2, &n2);
    ck_assert_int_eq(b1[0], b2[0]);
    ck_assert_int_eq(sched_kv_refcount(s, b1[0]), 3);  /* requests 1, 2 and 3 */
    ck_assert_int_eq(sched_kv_refcount(s, b1[9]), 2);
    check_invariants(s);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 2), 0);
    check_invariants(s);
    sched_free(s);
}
END_TEST

static int preempt_then_readmit(sched_t *s, void *ctx) {
    int *phase = ctx;
    const sched_view_t *v = sched_view(s);
    if (*phase == 1 && v->n_running) return sched_plan_preempt(s, v->running[0]->id);
    return fcfs(s, NULL);
}

START_TEST(preempted_request_finds_its_own_blocks) {
    int phase = 0;
    probe_t p = { .fn = preempt_then_readmit, .ctx = &phase };
    sched_config_t c = cfg(100);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    int64_t a[] = { 5, 6 };
    add_hashed(s, 1, 100, a, 2);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    phase = 1;
    step(s, 1); /* preempted: its 6 full prompt blocks go idle, still cached */
    ck_assert_int_eq(sched_kv_used(s), 0);
    phase = 0;
    plan = step(s, 2); /* recompute: 101 known tokens, 96 of them cached */
    ck_assert_int_eq(plan->entries[0].start, 96);
    ck_assert_int_eq(plan->entries[0].num_tokens, 5);
    /* cached_tokens is the prompt's share at first admission: none here */
    ck_assert_int_eq(sched_find(s, 1)->cached_tokens, 0);
    sched_free(s);
}
END_TEST

START_TEST(generated_blocks_are_cached_for_a_recompute) {
    /* No trace hashes at all: the request's own blocks, generated tokens included, are
     * keyed, so after a preemption only the unfinished last block is recomputed. */
    int phase = 0;
    probe_t p = { .fn = preempt_then_readmit, .ctx = &phase };
    sched_config_t c = cfg(100);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    add(s, 1, 0, 20, 40);
    double t = 0;
    for (int i = 0; i < 30; i++, t += 1) /* the prompt, then 29 decodes: 30 tokens out */
        ck_assert_int_eq(sched_commit(s, step(s, t), NULL, t + 0.5), 0);
    ck_assert_int_eq(sched_find(s, 1)->computed, 49); /* 3 full blocks: 28 of them generated */
    phase = 1;
    step(s, t);
    ck_assert_int_eq(sched_kv_used(s), 0);
    phase = 0;
    ck_assert_int_eq(sched_prefix_hit(s, 1), 48);
    const sched_plan_t *plan = step(s, t + 1);
    ck_assert_int_eq(plan->entries[0].start, 48);
    ck_assert_int_eq(plan->entries[0].num_tokens, 2);
    ck_assert_int_eq(plan->entries[0].sample, 1);
    ck_assert_int_eq(plan->num_tokens, 2);
    ck_assert_int_eq(sched_find(s, 1)->cached_tokens, 0); /* no prompt served twice */
    check_invariants(s);
    sched_free(s);

    /* The same run without caching recomputes all 50 known tokens. */
    c.prefix_caching = 0;
    phase = 0;
    s = make(&p, c);
    add(s, 1, 0, 20, 40);
    for (int i = 0; i < 30; i++, t += 1)
        ck_assert_int_eq(sched_commit(s, step(s, t), NULL, t + 0.5), 0);
    phase = 1;
    step(s, t);
    phase = 0;
    ck_assert_int_eq(sched_prefix_hit(s, 1), 0);
    plan = step(s, t + 1);
    ck_assert_int_eq(plan->entries[0].start, 0);
    ck_assert_int_eq(plan->entries[0].num_tokens, 50);
    sched_free(s);
}
END_TEST

START_TEST(group_prefix_of_any_length) {
    /* A plain trace's shared-prefix group is one hash over prefix_tokens tokens, whatever
     * the block size: requests of one group share the full blocks inside the shorter
     * prefix, other groups and the prompts' own tails share nothing. */
    probe_t p = { .fn = fcfs };
    sched_config_t c = cfg(100);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    int64_t g7 = 7, g8 = 8;
    sched_new_req_t r = { .id = 1, .prompt_tokens = 130, .output_tokens = 2,
                          .hash_ids = &g7, .n_hash = 1, .hash_block = 100 };
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
    ck_assert_int_eq(sched_commit(s, step(s, 0), NULL, 1), 0);
    r.id = 2;                                  /* same group and length: 6 blocks (96) */
    ck_assert_int_eq(sched_add(s, &r, 1), 0);
    r.id = 3, r.hash_block = 50;               /* same group, shorter prefix: 3 blocks */
    ck_assert_int_eq(sched_add(s, &r, 1), 0);
    r.id = 4, r.hash_block = 100, r.hash_ids = &g8; /* another group */
    ck_assert_int_eq(sched_add(s, &r, 1), 0);
    ck_assert_int_eq(sched_prefix_hit(s, 2), 96);
    ck_assert_int_eq(sched_prefix_hit(s, 3), 48);
    ck_assert_int_eq(sched_prefix_hit(s, 4), 0);
    const sched_plan_t *plan = step(s, 1);
    ck_assert_int_eq(plan->entries[1].start, 96);
    ck_assert_int_eq(plan->entries[1].num_tokens, 34);
    ck_assert_int_eq(plan->entries[2].start, 48);
    ck_assert_int_eq(plan->entries[3].start, 0);
    ck_assert_int_eq(sched_find(s, 3)->cached_tokens, 48);
    sched_free(s);
}
END_TEST

typedef struct { int32_t id, n; int rc; int32_t can; char msg[256]; } chunk_try_t;

static int checked_chunk(sched_t *s, void *ctx) {
    chunk_try_t *t = ctx;
    t->can = sched_can_allocate(s, t->id, t->n);
    t->rc = t->can ? sched_plan_schedule(s, t->id, t->n, 0) : -2;
    snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
    return 0;
}

START_TEST(idle_hits_never_break_can_allocate) {
    /* 60 blocks. Request 1 (320 tokens) finishes: 20 keyed blocks go idle. Request 2 holds
     * 36. Request 3 repeats request 1's prefix and asks for a 128-token chunk: taking all
     * 20 idle hits plus 8 new blocks would need 28 of the 24 free; can_allocate said yes,
     * so the core takes fewer hits instead of refusing. */
    chunk_try_t t = { 0 };
    probe_t p = { .fn = fcfs };
    sched_config_t c = cfg(60);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    int64_t h[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    add_hashed(s, 1, 320, h, 5);
    const sched_plan_t *plan;
    for (int i = 0; i < 3; i++) ck_assert_int_eq(sched_commit(s, step(s, i), NULL, i + 0.5), 0);
    ck_assert_int_eq(p.finished, 1);
    int64_t other[] = { 90, 91, 92, 93, 94, 95, 96, 97, 98, 99 };
    add_hashed(s, 2, 570, other, 9);
    plan = step(s, 5);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 6), 0);
    ck_assert_int_eq(sched_kv_used(s), 36);
    p.fn = checked_chunk;
    p.ctx = &t;
    t = (chunk_try_t){ .id = 3, .n = 128 };
    add_hashed(s, 3, 640, h, 10);
    plan = step(s, 7);
    ck_assert_int_eq(t.can, 1);
    ck_assert_msg(t.rc == 0, "%s", t.msg);
    ck_assert_int_eq(plan->entries[0].start % 16, 0);
    ck_assert_int_le(sched_kv_used(s), 60);
    check_invariants(s);
    sched_free(s);
}
END_TEST

START_TEST(eviction_keeps_a_prefix_root) {
    /* 40 blocks. A finished 321-token request leaves 20 idle keyed blocks; an unrelated
     * request evicts one of them. Evicting the chain's tail, not its root, leaves 19 blocks
     * a repeat can still use. */
    probe_t p = { .fn = fcfs };
    sched_config_t c = cfg(40);
    c.prefix_caching = 1;
    sched_t *s = make(&p, c);
    int64_t h[] = { 1, 2, 3, 4, 5, 6 };
    add_hashed(s, 1, 321, h, 6);
    double t = 0;
    for (int i = 0; i < 3; i++, t += 1) ck_assert_int_eq(sched_commit(s, step(s, t), NULL, t + 0.5), 0);
    ck_assert_int_eq(p.finished, 1); /* 20 keyed blocks idle, 1 unkeyed freed: 20 free */
    int64_t other[] = { 50, 51, 52, 53, 54, 55 };
    add_hashed_out(s, 2, 336, 1, other, 6); /* 21 blocks: the 20 free + 1 evicted */
    const sched_plan_t *plan = step(s, t);
    ck_assert_int_eq(plan->entries[0].num_tokens, 336);
    ck_assert_int_eq(sched_commit(s, plan, NULL, t + 0.5), 0);
    ck_assert_int_eq(p.finished, 2);
    add_hashed(s, 3, 321, h, 6);
    plan = step(s, t + 1);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->entries[0].start, 19 * 16); /* the tail block was evicted */
    sched_free(s);
}

int main(void) {
    Suite *s = suite_create("sched_prefix");
    TCase *tc = tcase_create("prefix");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, prefix_cache_shares_leading_blocks);
    tcase_add_test(tc, preempted_request_finds_its_own_blocks);
    tcase_add_test(tc, generated_blocks_are_cached_for_a_recompute);
    tcase_add_test(tc, group_prefix_of_any_length);
    tcase_add_test(tc, idle_hits_never_break_can_allocate);
    tcase_add_test(tc, eviction_keeps_a_prefix_root);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

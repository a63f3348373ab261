/* Check suite for policies/sched.c: the scheduler core, driven by small C policies. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------ lifecycle */

START_TEST(lone_request_lifecycle) {
    probe_t p = { .fn = fcfs };
    sched_t *s = make(&p, cfg(100));
    add(s, 7, 0.5, 40, 3);
    const sched_plan_t *plan = step(s, 1.0);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->entries[0].num_tokens, 40);
    ck_assert_int_eq(plan->entries[0].sample, 1);
    ck_assert_int_eq(plan->entries[0].is_decode, 0);
    ck_assert_int_eq(plan->prefill_tokens, 40);
    ck_assert_int_eq(plan->entries[0].num_blocks, 3); /* ceil(40/16) */
    ck_assert_int_eq(sched_kv_used(s), 3);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1.25), 0);
    const sched_req_t *r = sched_find(s, 7);
    ck_assert_int_eq(r->generated, 1);
    ck_assert_int_eq(r->computed, 40);
    ck_assert_double_eq(r->first_scheduled_s, 1.0);
    ck_assert_double_eq(r->first_token_s, 1.25);
    for (int i = 0; i < 2; i++) {
        plan = step(s, 2.0 + i);
        ck_assert_int_eq(plan->n, 1);
        ck_assert_int_eq(plan->entries[0].is_decode, 1);
        ck_assert_int_eq(plan->decode_tokens, 1);
        ck_assert_int_eq(sched_commit(s, plan, NULL, 2.5 + i), 0);
    }
    ck_assert_int_eq(p.finished, 1);
    ck_assert_int_eq(p.last_generated, 3);
    ck_assert_double_eq(p.last_finish, 3.5);
    ck_assert_ptr_null(sched_find(s, 7)); /* recycled */
    ck_assert_int_eq(sched_kv_used(s), 0);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    plan = step(s, 4.0);
    ck_assert_int_eq(plan->n, 0);
    ck_assert_int_eq(sched_stalled(s), 0);
    sched_free(s);
}
END_TEST

static int chunk16(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    if (v->n_running) {
        const sched_req_t *r = v->running[0];
        int32_t n = sched_req_remaining(r) < 16 ? sched_req_remaining(r) : 16;
        return sched_plan_schedule(s, r->id, n, 0);
    }
    if (v->n_waiting) return sched_plan_schedule(s, v->waiting[0]->id, 16, 0);
    return 0;
}

START_TEST(chunks_sample_only_at_the_end) {
    probe_t p = { .fn = chunk16 };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 40, 2);
    int32_t expect[] = { 16, 16, 8, 1 };
    for (int i = 0; i < 4; i++) {
        const sched_plan_t *plan = step(s, i);
        ck_assert_int_eq(plan->n, 1);
        ck_assert_int_eq(plan->entries[0].num_tokens, expect[i]);
        ck_assert_int_eq(plan->entries[0].sample, i >= 2);
        ck_assert_int_eq(plan->entries[0].start, 16 * (i < 3 ? i : 2) + (i == 3 ? 8 : 0));
        ck_assert_int_eq(sched_commit(s, plan, NULL, i + 0.5), 0);
        if (i < 2) ck_assert_double_eq(sched_find(s, 1)->first_token_s, -1);
    }
    ck_assert_int_eq(p.finished, 1);
    ck_assert_double_eq(p.last_first_token, 2.5);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ validation */

typedef struct {
    int32_t id, n, k;
    int rc;
    char msg[512];
    int32_t free_before, free_after, plan_n;
} try_t;

static int try_schedule(sched_t *s, void *ctx) {
    try_t *t = ctx;
    t->free_before = sched_view(s)->free_blocks;
    t->rc = sched_plan_schedule(s, t->id, t->n, t->k);
    snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
    t->free_after = sched_view(s)->free_blocks;
    t->plan_n = sched_view(s)->plan_seqs;
    return 0;
}

static void expect_refused(sched_t *s, probe_t *p, try_t *t, const char *needle) {
    p->fn = try_schedule;
    p->ctx = t;
    const sched_plan_t *plan = step(s, 1);
    ck_assert_int_eq(t->rc, -1);
    ck_assert_msg(strstr(t->msg, needle), "message '%s' lacks '%s'", t->msg, needle);
    ck_assert_int_eq(t->free_before, t->free_after);
    ck_assert_int_eq(t->plan_n, 0);
    ck_assert_int_eq(plan->n, 0);
}

START_TEST(illegal_plans_are_refused_with_reasons) {
    probe_t p = { 0 };
    sched_config_t c = cfg(8);
    c.max_tokens = 50;
    sched_t *s = make(&p, c);
    add(s, 1, 0, 40, 5);
    try_t t = { .id = 99, .n = 1 };
    expect_refused(s, &p, &t, "unknown request id 99");
    t = (try_t){ .id = 1, .n = 41 };
    expect_refused(s, &p, &t, "has 40 tokens left to compute, the plan asks for 41");
    t = (try_t){ .id = 1, .n = 0 };
    expect_refused(s, &p, &t, "need tokens >= 1");
    t = (try_t){ .id = 1, .n = -3 };
    expect_refused(s, &p, &t, "need tokens >= 1");
    t = (try_t){ .id = 1, .n = 1, .k = -1 };
    expect_refused(s, &p, &t, "0 <= drafts");
    t = (try_t){ .id = 1, .n = 4, .k = 2 };
    expect_refused(s, &p, &t, "only for a decoding request");
    t = (try_t){ .id = 1, .n = 1, .k = 2147483647 }; /* would overflow the sums */
    expect_refused(s, &p, &t, "drafts <= max_tokens");
    add(s, 2, 0, 55, 5); /* 55 > max_tokens 50 */
    t = (try_t){ .id = 2, .n = 55 };
    expect_refused(s, &p, &t, "token budget exceeded");
    add(s, 3, 0, 100, 1); /* 7 blocks over its life */
    p.fn = try_schedule;
    p.ctx = &t;
    for (int i = 0; i < 2; i++) { /* 48 + 48 tokens: 6 blocks held, 2 free */
        t = (try_t){ .id = 3, .n = 48 };
        const sched_plan_t *plan = step(s, 1);
        ck_assert_int_eq(t.rc, 0);
        ck_assert_int_eq(sched_commit(s, plan, NULL, 1.5), 0);
    }
    t = (try_t){ .id = 1, .n = 40 }; /* 3 more blocks, 2 free */
    expect_refused(s, &p, &t, "out of KV blocks: request 1 needs 3 more blocks, 2 are free");
    ck_assert_ptr_nonnull(strstr(t.msg, "illegal plan"));
    sched_free(s);
}
END_TEST

static int twice(sched_t *s, void *ctx) {
    try_t *t = ctx;
    if (sched_plan_schedule(s, 1, 1, 0)) return -1;
    t->rc = sched_plan_schedule(s, 1, 1, 0);
    snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
    return 0;
}

START_TEST(duplicate_entry_and_seq_limit) {
    probe_t p = { .fn = twice };
    sched_config_t c = cfg(10);
    sched_t *s = make(&p, c);
    add(s, 1, 0, 10, 5);
    try_t t;
    p.ctx = &t;
    step(s, 0);
    ck_assert_int_eq(t.rc, -1);
    ck_assert_ptr_nonnull(strstr(t.msg, "already in this step's plan"));
    sched_free(s);

    c.max_seqs = 1;
    probe_t q = { .fn = fcfs };
    s = make(&q, c);
    add(s, 1, 0, 10, 5);
    add(s, 2, 0, 10, 5);
    const sched_plan_t *plan = NULL;
    ck_assert_int_eq(sched_step(s, 0, &plan), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "sequence limit reached"));
    sched_free(s);
}
END_TEST

/* Step 0 admits everything it is given; later steps decode only request 1 and try to admit
 * request 3 while request 2 sits out the step. */
static int one_decode_then_admit(sched_t *s, void *ctx) {
    try_t *t = ctx;
    const sched_view_t *v = sched_view(s);
    if (v->n_running == 0) return fcfs(s, NULL);
    if (sched_plan_schedule(s, 1, 1, 0)) return -1;
    t->rc = sched_plan_schedule(s, 3, 10, 0);
    snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
    t->id = sched_running_seqs(s);
    return 0;
}

START_TEST(seq_limit_counts_running_requests) {
    /* vLLM's max_num_seqs bounds the running batch: request 2 holds its slot even in a step
     * that leaves it out, so a third request cannot be admitted under max_seqs = 2. */
    sched_config_t c = cfg(100);
    c.max_seqs = 2;
    try_t t = { 0 };
    probe_t p = { .fn = one_decode_then_admit, .ctx = &t };
    sched_t *s = make(&p, c);
    add(s, 1, 0, 10, 5);
    add(s, 2, 0, 10, 5);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(sched_running_seqs(s), 2);
    add(s, 3, 0.5, 10, 5);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    plan = step(s, 1);
    ck_assert_int_eq(t.rc, -1);
    ck_assert_ptr_nonnull(strstr(t.msg, "sequence limit reached (2 requests running, max_seqs 2"));
    ck_assert_int_eq(t.id, 2);
    ck_assert_int_eq(plan->n, 1);
    sched_free(s);
}
END_TEST

static int finished_target(sched_t *s, void *ctx) {
    try_t *t = ctx;
    t->rc = sched_plan_schedule(s, t->id, 1, 0);
    snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
    return 0;
}

START_TEST(rejected_requests_cannot_be_scheduled) {
    probe_t p = { .fn = finished_target };
    sched_t *s = make(&p, cfg(10));
    try_t t = { .id = 5 };
    p.ctx = &t;
    add(s, 5, 0, 3000, 5); /* beyond max_model_len: rejected at arrival, then recycled */
    ck_assert_int_eq(p.rejected, 1);
    ck_assert_ptr_nonnull(strstr(p.last_reason, "exceeds the context length 2048"));
    step(s, 0);
    ck_assert_int_eq(t.rc, -1);
    ck_assert_ptr_nonnull(strstr(t.msg, "unknown request id 5"));
    sched_free(s);
}
END_TEST

START_TEST(arrival_rejections_carry_reasons) {
    probe_t p = { 0 };
    sched_t *s = make(&p, cfg(4)); /* 64 tokens of KV */
    add(s, 1, 0, 0, 5);
    ck_assert_ptr_nonnull(strstr(p.last_reason, "empty prompt"));
    add(s, 2, 0, 10, 0);
    ck_assert_ptr_nonnull(strstr(p.last_reason, "no output tokens"));
    add(s, 3, 0, 60, 10);
    ck_assert_ptr_nonnull(strstr(p.last_reason, "needs 5 KV blocks but one request can have at most 4 (a cache of 4 minus the watermark of 0)"));
    ck_assert_int_eq(p.rejected, 3);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    sched_free(s);
    /* With a watermark, a request not yet running can never take the last blocks: one
     * that needs them could never be admitted, so it is rejected at arrival. */
    sched_config_t c = cfg(100);
    c.watermark = 0.1;
    s = make(&p, c);
    add(s, 7, 0, 1500, 5);  /* 94 blocks > 100 - 10 */
    ck_assert_ptr_nonnull(strstr(p.last_reason, "one request can have at most 90"));
    add(s, 8, 0, 1400, 5);  /* 88 blocks: fine */
    ck_assert_int_eq(p.rejected, 4);
    ck_assert_int_eq(sched_num_unfinished(s), 1);
    sched_new_req_t dup = { .id = 9, .prompt_tokens = 5, .output_tokens = 5 };
    ck_assert_int_eq(sched_add(s, &dup, 0), 0);
    ck_assert_int_eq(sched_add(s, &dup, 0), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "duplicate request id 9"));
    sched_free(s);
}
END_TEST

START_TEST(plan_calls_outside_schedule_fail) {
    probe_t p = { 0 };
    sched_t *s = make(&p, cfg(4));
    add(s, 1, 0, 5, 5);
    ck_assert_int_eq(sched_plan_schedule(s, 1, 5, 0), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "outside schedule()"));
    ck_assert_int_eq(sched_plan_pad(s, 1, 0), -1);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ preemption */

typedef struct { int phase; int rc; char msg[512]; } pre_t;

static int preempt_second(sched_t *s, void *ctx) {
    pre_t *t = ctx;
    const sched_view_t *v = sched_view(s);
    if (t->phase == 1 && v->n_running == 2) {
        int32_t victim = v->running[1]->id;
        if (sched_plan_preempt(s, victim)) return -1;
        t->rc = sched_plan_schedule(s, victim, 1, 0); /* not in the same step */
        snprintf(t->msg, sizeof t->msg, "%s", sched_errmsg(s));
        return sched_plan_schedule(s, v->running[0]->id, 1, 0);
    }
    return fcfs(s, NULL);
}

START_TEST(preemption_frees_kv_and_recomputes) {
    pre_t t = { 0 };
    probe_t p = { .fn = preempt_second, .ctx = &t };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 20, 10);
    add(s, 2, 0, 20, 10);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    ck_assert_int_eq(sched_kv_used(s), 4);
    t.phase = 1;
    plan = step(s, 1);
    ck_assert_int_eq(t.rc, -1);
    ck_assert_ptr_nonnull(strstr(t.msg, "was preempted in this step"));
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->num_preempted, 1);
    const sched_req_t *r2 = sched_find(s, 2);
    ck_assert_int_eq(r2->state, SCHED_PREEMPTED);
    ck_assert_int_eq(r2->computed, 0);
    ck_assert_int_eq(r2->num_blocks, 0);
    ck_assert_int_eq(r2->preemptions, 1);
    ck_assert_int_eq(sched_req_remaining(r2), 21); /* prompt + the token it had generated */
    ck_assert_int_eq(sched_view(s)->n_waiting, 1);
    ck_assert_ptr_eq(sched_view(s)->waiting[0], r2);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 2), 0);
    t.phase = 2;
    plan = step(s, 2); /* request 1 decodes, request 2 recomputes 21 tokens */
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(plan->entries[1].num_tokens, 21);
    ck_assert_int_eq(plan->entries[1].is_decode, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 3), 0);
    ck_assert_int_eq(sched_find(s, 2)->generated, 2);
    ck_assert_double_eq(sched_find(s, 2)->first_token_s, 1); /* kept from the first run */
    ck_assert_int_eq(sched_total_preemptions(s), 1);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ speculative */

static int spec3(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    for (int32_t i = 0; i < v->n_running; i++) {
        const sched_req_t *r = v->running[i];
        if (sched_plan_schedule(s, r->id, 1, 3)) return -1;
    }
    for (int32_t i = 0; i < v->n_waiting; i++)
        if (sched_plan_schedule(s, v->waiting[i]->id, sched_req_remaining(v->waiting[i]), 0))
            return -1;
    return 0;
}

START_TEST(speculative_commit_emits_accepted_plus_one) {
    probe_t p = { .fn = spec3 };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 15, 6);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0); /* first token */
    plan = step(s, 1);
    ck_assert_int_eq(plan->entries[0].num_spec, 3);
    ck_assert_int_eq(plan->decode_tokens, 4);
    ck_assert_int_eq(plan->entries[0].num_blocks, 2); /* 15 + 1 + 3 = 19 tokens */
    int32_t acc[1] = { 2 };
    ck_assert_int_eq(sched_commit(s, plan, acc, 2), 0);
    const sched_req_t *r = sched_find(s, 1);
    ck_assert_int_eq(r->generated, 4);   /* 1 + 2 accepted + 1 bonus */
    ck_assert_int_eq(r->computed, 18);   /* 15 + last token + 2 accepted */
    ck_assert_int_eq(r->spec_proposed, 3);
    ck_assert_int_eq(r->spec_accepted, 2);
    acc[0] = 4; /* more than proposed: inconsistent executor */
    plan = step(s, 2);
    ck_assert_int_eq(sched_commit(s, plan, acc, 3), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "accepted drafts"));
    sched_free(s);

    /* Emission stops at the target output length. */
    probe_t q = { .fn = spec3 };
    s = make(&q, cfg(100));
    add(s, 1, 0, 15, 3);
    plan = step(s, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    plan = step(s, 1);
    acc[0] = 3;
    ck_assert_int_eq(sched_commit(s, plan, acc, 2), 0);
    ck_assert_int_eq(q.finished, 1);
    ck_assert_int_eq(q.last_generated, 3);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ stalls, wake-ups, abort */

static int idle(sched_t *s, void *ctx) { (void)s; (void)ctx; return 0; }
static int wake_later(sched_t *s, void *ctx) { (void)ctx; sched_wake_at(s, 5.0); return 0; }

START_TEST(stall_and_wakeups) {
    probe_t p = { .fn = idle };
    sched_t *s = make(&p, cfg(10));
    add(s, 1, 0, 5, 5);
    const sched_plan_t *plan = step(s, 1);
    ck_assert_int_eq(plan->n, 0);
    ck_assert_int_eq(sched_stalled(s), 1);
    p.fn = wake_later;
    step(s, 1);
    ck_assert_int_eq(sched_stalled(s), 0);
    ck_assert_double_eq(sched_wakeup(s), 5.0);
    p.fn = idle;
    step(s, 5.0); /* the wake-up is consumed when its time comes */
    ck_assert(isinf(sched_wakeup(s)));
    p.fn = wake_later;
    step(s, 5.0); /* at 5.0 this is "call me again at this instant": a wake-up too */
    ck_assert_double_eq(sched_wakeup(s), 5.0);
    ck_assert_int_eq(sched_stalled(s), 0);
    p.fn = idle;
    step(s, 5.0);
    ck_assert(isinf(sched_wakeup(s)));
    ck_assert_int_eq(sched_stalled(s), 1);
    sched_free(s);
}
END_TEST

START_TEST(abort_all_reports_each_once) {
    probe_t p = { .fn = fcfs };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 5, 5);
    add(s, 2, 0, 5, 5);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    add(s, 3, 1, 5, 5);
    sched_abort_all(s, "trace error");
    ck_assert_int_eq(p.aborted, 3);
    ck_assert_str_eq(p.last_reason, "trace error");
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_abort_all(s, "again");
    ck_assert_int_eq(p.aborted, 3);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ queue order */

static int admit_middle(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    if (v->n_waiting == 3) return sched_plan_schedule(s, v->waiting[1]->id, 5, 0);
    return 0;
}

START_TEST(queue_keeps_order_after_middle_admission) {
    probe_t p = { .fn = admit_middle };
    sched_t *s = make(&p, cfg(100));
    add(s, 10, 0, 5, 5);
    add(s, 11, 0, 5, 5);
    add(s, 12, 0, 5, 5);
    step(s, 0);
    const sched_view_t *v = sched_view(s);
    ck_assert_int_eq(v->n_waiting, 2);
    ck_assert_int_eq(v->waiting[0]->id, 10);
    ck_assert_int_eq(v->waiting[1]->id, 12);
    ck_assert_int_eq(v->n_running, 1);
    ck_assert_int_eq(v->running[0]->id, 11);
    sched_free(s);
}
END_TEST

static int reject_first(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    if (v->n_waiting) return sched_plan_reject(s, v->waiting[0]->id, "too big for me");
    return 0;
}

START_TEST(policy_rejection) {
    probe_t p = { .fn = reject_first };
    sched_t *s = make(&p, cfg(100));
    add(s, 4, 0, 5, 5);
    add(s, 5, 0, 5, 5);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->num_rejected, 1);
    ck_assert_int_eq(sched_stalled(s), 0); /* the state changed: the executor asks again */
    step(s, 0);
    ck_assert_int_eq(p.rejected, 2);
    ck_assert_str_eq(p.last_reason, "rejected by policy: too big for me");
    ck_assert_int_eq(sched_view(s)->n_waiting, 0);
    ck_assert_ptr_null(sched_find(s, 4));
    ck_assert_ptr_null(sched_find(s, 5));
    sched_free(s);
}
END_TEST

/* Rejects every request of 10 or more prompt tokens, looking at the queue's head again after
 * each rejection (as a Lua loop over s:waiting(1) does), then admits the rest. */
static int shed_then_admit(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    while (v->n_waiting > 0 && v->waiting[0]->prompt_tokens >= 10)
        if (sched_plan_reject(s, v->waiting[0]->id, "shed")) return -1;
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        if (r->state != SCHED_WAITING) continue;
        if (r->prompt_tokens >= 10) {
            if (sched_plan_reject(s, r->id, "shed")) return -1;
            i--;   /* the queue closed up over it */
            continue;
        }
        if (sched_plan_schedule(s, r->id, r->prompt_tokens, 0)) return -1;
    }
    return 0;
}

/* A rejected request leaves the waiting view within the same call, so a policy that looks
 * again neither meets it nor can reject it twice; the others keep their order. */
START_TEST(rejected_leave_the_queue_at_once) {
    probe_t p = { .fn = shed_then_admit };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 12, 5);
    add(s, 2, 0, 11, 5);
    add(s, 3, 0, 4, 5);
    add(s, 4, 0, 20, 5);
    add(s, 5, 0, 6, 5);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_msg(plan, "%s", sched_errmsg(s));
    ck_assert_int_eq(plan->num_rejected, 3);
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(plan->entries[0].req_id, 3);
    ck_assert_int_eq(plan->entries[1].req_id, 5);
    ck_assert_int_eq(p.rejected, 3);
    ck_assert_ptr_null(sched_find(s, 1));
    ck_assert_ptr_null(sched_find(s, 4));
    /* the recycled slots serve new requests */
    add(s, 6, 0, 3, 5);
    ck_assert_ptr_nonnull(sched_find(s, 6));
    sched_free(s);
}
END_TEST

static int pad_twice(sched_t *s, void *ctx) {
    int *with_request = ctx;
    if (*with_request && sched_plan_schedule(s, 1, 5, 0)) return -1;
    if (sched_plan_pad(s, 3, 100)) return -1;
    return sched_plan_pad(s, 1, 0);
}

START_TEST(padding_counts_tokens_not_sequences) {
    int with_request = 1;
    probe_t p = { .fn = pad_twice, .ctx = &with_request };
    sched_t *s = make(&p, cfg(100));
    add(s, 1, 0, 5, 5);
    const sched_plan_t *plan = step(s, 0);
    ck_assert_int_eq(plan->n_pads, 2);
    ck_assert_int_eq(plan->pad_tokens, 4);
    ck_assert_int_eq(plan->num_tokens, 9);
    ck_assert_int_eq(plan->pads[0].ctx, 100);
    ck_assert_int_eq(sched_view(s)->plan_seqs, 1); /* the request; padding is not a sequence */
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1), 0);
    /* Padding alone could never make progress: refused. */
    with_request = 0;
    ck_assert_int_eq(sched_step(s, 1, &plan), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "padding tokens but no request"));
    sched_free(s);
}
END_TEST

START_TEST(clip_to_context_as_vidur) {
    /* Without the option a request past the context (2048) is rejected; with it the excess
     * comes off prompt and output in proportion, each cut rounded up, as Vidur's loader. */
    probe_t p = { 0 };
    sched_t *s = make(&p, cfg(1000));
    add(s, 1, 0, 3000, 1000);
    ck_assert_int_eq(p.rejected, 1);
    ck_assert_ptr_nonnull(strstr(p.last_reason, "exceeds the context length 2048"));
    sched_free(s);
    sched_config_t c = cfg(1000);
    c.clip_to_context = 1;
    probe_t q = { 0 };
    s = make(&q, c);
    add(s, 1, 0, 3000, 1000); /* 1952 too many: 1464 off the prompt, 488 off the output */
    add(s, 2, 0, 2000, 100);  /* 52 too many: ceil(49.5) = 50 and ceil(2.5) = 3 */
    add(s, 3, 0, 1000, 1000); /* fits: untouched */
    add(s, 4, 0, 5000, 1);    /* the output keeps its one token */
    ck_assert_int_eq(q.rejected, 0);
    const int32_t want[4][2] = { { 1536, 512 }, { 1950, 97 }, { 1000, 1000 }, { 2047, 1 } };
    for (int32_t id = 1; id <= 4; id++) {
        const sched_req_t *r = sched_find(s, id);
        ck_assert_ptr_nonnull(r);
        ck_assert_int_eq(r->prompt_tokens, want[id - 1][0]);
        ck_assert_int_eq(r->true_output_tokens, want[id - 1][1]);
    }
    sched_free(s);
}
END_TEST

START_TEST(bad_configs) {
    probe_t p = { 0 };
    sched_policy_t pol = { .schedule = probe_schedule, .ud = &p };
    const char *why = NULL;
    sched_config_t c = cfg(0);
    ck_assert_ptr_null(sched_new(&c, &pol, &why));
    ck_assert_ptr_nonnull(strstr(why, "no blocks"));
    c = cfg(10);
    c.watermark = 1.5;
    ck_assert_ptr_null(sched_new(&c, &pol, &why));
    ck_assert_ptr_nonnull(strstr(why, "watermark"));
    pol.schedule = NULL;
    c = cfg(10);
    ck_assert_ptr_null(sched_new(&c, &pol, &why));
}
END_TEST

START_TEST(window_layers_free_their_old_blocks) {
    /* half the layers see the last 64 tokens: past ceil(64/16) + 1 = 5 blocks, half of each
     * further block's worth is freed (sched.h) */
    probe_t p = { .fn = fcfs };
    sched_config_t c = cfg(1000);
    c.window_tokens = 64;
    c.window_share = 0.5;
    sched_t *s = make(&p, c);
    add(s, 1, 0, 320, 40);
    ck_assert_int_eq(sched_blocks_needed(s, 1, 320), 20 - 7);   /* 20 blocks, 15 past: 7 freed */
    ck_assert_int_eq(sched_blocks_needed(s, 1, 64), 4);         /* inside the window: all */
    const sched_plan_t *plan = step(s, 1.0);
    ck_assert_int_eq(plan->entries[0].num_blocks, 13);
    ck_assert_int_eq(sched_kv_used(s), 13);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1.5), 0);
    /* decoding on: a block's worth every other block past the window */
    int32_t last = 13;
    for (int i = 0; i < 39; i++) {
        plan = step(s, 2.0 + i);
        ck_assert_int_ge(plan->entries[0].num_blocks, last);   /* never shrinks */
        last = plan->entries[0].num_blocks;
        ck_assert_int_eq(sched_commit(s, plan, NULL, 2.5 + i), 0);
    }
    /* 359 tokens held after the last commit were 23 blocks: 18 past, 9 freed */
    ck_assert_int_eq(last, 23 - 9);
    ck_assert_int_eq(p.finished, 1);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
    /* not with prefix caching; a share past 1 is refused */
    sched_policy_t pol = { .schedule = probe_schedule, .ud = &p };
    const char *why = NULL;
    c.prefix_caching = 1;
    ck_assert_ptr_null(sched_new(&c, &pol, &why));
    ck_assert_ptr_nonnull(strstr(why, "prefix caching"));
    c.prefix_caching = 0;
    c.window_share = 1.5;
    ck_assert_ptr_null(sched_new(&c, &pol, &why));
    ck_assert_ptr_nonnull(strstr(why, "window_share"));
}
END_TEST

START_TEST(many_requests_recycle_slots) {
    /* Thousands of short requests through a small cache: ids stay findable until they
     * finish, the map survives deletions, KV returns to zero. */
    probe_t p = { .fn = fcfs };
    sched_t *s = make(&p, cfg(64));
    int32_t next = 0;
    double t = 0;
    for (int it = 0; it < 4000; it++) {
        for (int j = 0; j < 3; j++, next++) add(s, next, t, 8 + (next % 23), 1 + (next % 5));
        const sched_plan_t *plan = step(s, t);
        t += 0.01;
        ck_assert_int_eq(sched_commit(s, plan, NULL, t), 0);
        ck_assert_int_le(sched_kv_used(s), 64);
    }
    for (int it = 0; it < 100000 && sched_num_unfinished(s); it++) {
        const sched_plan_t *plan = step(s, t);
        t += 0.01;
        ck_assert_int_eq(sched_commit(s, plan, NULL, t), 0);
    }
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    ck_assert_int_eq(p.finished + p.rejected, next);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
}
END_TEST


/* ------------------------------------------------------------------ randomized invariants */

typedef struct {
    unsigned seed;
    int refused;
} chaos_t;

static unsigned chaos_rand(chaos_t *c) {
    c->seed = c->seed * 1103515245u + 12345u;
    return (c->seed >> 16) & 0x7fff;
}

/* Random proposals, many of them illegal: a refused call must change nothing. */
static int chaos_policy(sched_t *s, void *ctx) {
    chaos_t *c = ctx;
    const sched_view_t *v = sched_view(s);
    int32_t nr = v->n_running, nw = v->n_waiting;
    for (int32_t i = 0; i < nr + nw; i++) {
        const sched_req_t *r = i < nr ? v->running[i] : v->waiting[i - nr];
        int32_t rem = sched_req_remaining(r), used = sched_kv_used(s);
        unsigned x = chaos_rand(c) % 100;
        int rc = 0;
        if (x < 5) rc = sched_plan_preempt(s, r->id);
        else if (x < 7) rc = sched_plan_reject(s, r->id, "chaos");
        else if (x < 85) {
            int32_t n = 1 + (int32_t)(chaos_rand(c) % (unsigned)(rem + 3)); /* sometimes too many */
            int32_t k = rem == 1 && r->generated > 0 ? (int32_t)(chaos_rand(c) % 4) : 0;
            if (chaos_rand(c) % 50 == 0) k = 2; /* drafts on a prefill: illegal */
            rc = sched_plan_schedule(s, r->id, n, k);
        }
        if (x >= 85 && v->plan_seqs > 0 && chaos_rand(c) % 4 == 0)
            rc = sched_plan_pad(s, 1 + chaos_rand(c) % 8, 5);
        if (rc != 0) {
            c->refused++;
            if (x >= 7) ck_assert_int_eq(sched_kv_used(s), used);
        }
    }
    return 0;
}

START_TEST(random_plans_keep_invariants) {
    chaos_t c = { .seed = 12345 + (unsigned)_i };
    probe_t p = { .fn = chaos_policy, .ctx = &c };
    sched_config_t cf = cfg(40); /* small: KV pressure, refusals and preemptions */
    cf.max_tokens = 96;
    cf.max_seqs = 6;
    cf.prefix_caching = _i == 1; /* the second run shares prefixes through the cache */
    sched_t *s = make(&p, cf);
    int64_t hashes[13];
    int32_t next = 0;
    double t = 0;
    int32_t acc[64];
    for (int it = 0; it < 20000; it++) {
        if (it < 15000 && chaos_rand(&c) % 3 == 0) {
            /* prompts made of 32-token pieces drawn from a few prefixes, so they repeat */
            int32_t prompt = 1 + (int32_t)(chaos_rand(&c) % 200);
            for (int j = 0; j < 13; j++) hashes[j] = j < 2 ? (int64_t)(chaos_rand(&c) % 3) : j;
            sched_new_req_t r = { .id = next, .arrival_s = t, .prompt_tokens = prompt,
                                  .output_tokens = 1 + (int32_t)(chaos_rand(&c) % 40),
                                  .hash_ids = hashes, .n_hash = (prompt + 31) / 32,
                                  .hash_block = 32 };
            ck_assert_int_eq(sched_add(s, &r, t), 0);
            next++;
        }
        const sched_plan_t *plan = step(s, t);
        check_invariants(s);
        for (int32_t i = 0; i < plan->n; i++)
            acc[i] = plan->entries[i].num_spec ? (int32_t)(chaos_rand(&c) % (unsigned)(plan->entries[i].num_spec + 1)) : 0;
        t += 0.01;
        ck_assert_int_eq(sched_commit(s, plan, acc, t), 0);
        check_invariants(s);
    }
    sched_abort_all(s, "end of test");
    ck_assert_int_eq(p.finished + p.rejected + p.aborted, next);
    ck_assert_int_gt(p.finished, 100);
    ck_assert_int_gt(c.refused, 1000);
    ck_assert_int_gt(sched_total_preemptions(s), 100);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
}
END_TEST

/* ------------------------------------------------------------------ prefix caching */

int main(void) {
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, lone_request_lifecycle);
    tcase_add_test(tc, chunks_sample_only_at_the_end);
    tcase_add_test(tc, illegal_plans_are_refused_with_reasons);
    tcase_add_test(tc, duplicate_entry_and_seq_limit);
    tcase_add_test(tc, seq_limit_counts_running_requests);
    tcase_add_test(tc, clip_to_context_as_vidur);
    tcase_add_test(tc, rejected_requests_cannot_be_scheduled);
    tcase_add_test(tc, arrival_rejections_carry_reasons);
    tcase_add_test(tc, plan_calls_outside_schedule_fail);
    tcase_add_test(tc, preemption_frees_kv_and_recomputes);
    tcase_add_test(tc, speculative_commit_emits_accepted_plus_one);
    tcase_add_test(tc, stall_and_wakeups);
    tcase_add_test(tc, abort_all_reports_each_once);
    tcase_add_test(tc, queue_keeps_order_after_middle_admission);
    tcase_add_test(tc, policy_rejection);
    tcase_add_test(tc, rejected_leave_the_queue_at_once);
    tcase_add_test(tc, padding_counts_tokens_not_sequences);
    tcase_add_test(tc, bad_configs);
    tcase_add_test(tc, window_layers_free_their_old_blocks);
    tcase_add_test(tc, many_requests_recycle_slots);
    tcase_add_loop_test(tc, random_plans_keep_invariants, 0, 2);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

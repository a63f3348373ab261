/* Check suite for the scheduler core's prefill-to-decode hand-off (policies/sched_transfer.c):
 * a request prefilled on one core, handed off, and decoded on another. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

typedef struct {
    int calls;
    int32_t id, state;
    const sched_req_t *views[8]; /* by id: valid from the hand-off until sched_release */
} handoff_probe_t;

static void on_handoff(void *ud, const sched_req_t *r) {
    handoff_probe_t *h = ud;
    h->calls++;
    h->id = r->id;
    h->state = r->state;
    if (r->id >= 0 && r->id < 8) h->views[r->id] = r;
}

static void add_prefill(sched_t *s, int32_t id, double t, int32_t prompt, int32_t out) {
    sched_new_req_t r = { .id = id, .arrival_s = t, .prompt_tokens = prompt,
                          .output_tokens = out, .handoff = 1 };
    ck_assert_int_eq(sched_add(s, &r, t), 0);
}

/* Prefills request id on P (one step, committed at t) and checks it was handed off. */
static const sched_req_t *prefill(sched_t *P, handoff_probe_t *h, int32_t id, double t) {
    int calls = h->calls;
    const sched_plan_t *plan = step(P, t - 0.25);
    ck_assert_int_eq(sched_commit(P, plan, NULL, t), 0);
    ck_assert_int_eq(h->calls, calls + 1);
    ck_assert_int_eq(h->id, id);
    ck_assert_ptr_null(sched_find(P, id)); /* gone from the policy's sight */
    const sched_req_t *r = h->views[id];
    ck_assert_int_eq(r->state, SCHED_TRANSFER);
    return r;
}

START_TEST(handoff_keeps_blocks_until_released) {
    probe_t pp = { .fn = fcfs }, pd = { .fn = fcfs };
    handoff_probe_t h = { 0 };
    sched_t *P = make(&pp, cfg(100)), *D = make(&pd, cfg(100));
    sched_set_handoff(P, on_handoff, &h);
    add_prefill(P, 1, 0, 40, 3);
    const sched_req_t *r = prefill(P, &h, 1, 1.25);
    ck_assert_int_eq(h.state, SCHED_TRANSFER);
    ck_assert_int_eq(r->generated, 1);
    ck_assert_int_eq(pp.finished + pp.aborted, 0);    /* not final: no row here */
    ck_assert_int_eq(sched_kv_used(P), 3);            /* 40 computed + the sampled token */
    ck_assert_int_eq(sched_view(P)->n_running, 0);    /* the policy no longer sees it */
    ck_assert_int_eq(sched_num_unfinished(P), 1);
    ck_assert_int_eq(sched_num_transit(P), 1);
    ck_assert_int_eq(step(P, 2)->n, 0);
    ck_assert_int_eq(sched_stalled(P), 0);
    /* the decode side reserves before the transfer, runs it once it lands */
    ck_assert_int_eq(sched_add_transfer(D, r, 1.5), 0);
    ck_assert_int_eq(sched_kv_used(D), 3);
    ck_assert_int_eq(sched_view(D)->n_running, 0);
    ck_assert_int_eq(sched_running_seqs(D), 1);
    ck_assert_int_eq(step(D, 1.5)->n, 0);             /* in transit: not schedulable */
    ck_assert_int_eq(sched_transfer_done(D, 1, 2.0), 0);
    ck_assert_int_eq(sched_release(P, 1), 0);
    ck_assert_int_eq(sched_kv_used(P), 0);
    ck_assert_int_eq(sched_num_unfinished(P), 0);
    ck_assert_ptr_null(sched_find(P, 1));
    ck_assert_int_eq(sched_release(P, 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(P), "not in transit"));
    const sched_req_t *d = sched_find(D, 1);
    ck_assert_int_eq(d->state, SCHED_RUNNING);
    ck_assert_int_eq(d->computed, 40);
    for (int i = 0; i < 2; i++) {
        const sched_plan_t *plan = step(D, 2 + i);
        ck_assert_int_eq(plan->n, 1);
        ck_assert_int_eq(plan->entries[0].is_decode, 1);
        ck_assert_int_eq(plan->entries[0].num_tokens, 1);
        ck_assert_int_eq(sched_commit(D, plan, NULL, 2.5 + i), 0);
    }
    ck_assert_int_eq(pd.finished, 1);
    ck_assert_int_eq(pd.last_generated, 3);
    ck_assert_double_eq(pd.last_first_token, 1.25);   /* the prefill replica's */
    ck_assert_int_eq(pp.finished, 0);
    ck_assert_int_eq(sched_kv_used(D), 0);
    sched_free(P);
    sched_free(D);
}
END_TEST

START_TEST(handoff_of_a_one_token_request_finishes_it) {
    probe_t pp = { .fn = fcfs };
    handoff_probe_t h = { 0 };
    sched_t *P = make(&pp, cfg(100));
    sched_set_handoff(P, on_handoff, &h);
    add_prefill(P, 1, 0, 40, 1);
    const sched_plan_t *plan = step(P, 0);
    ck_assert_int_eq(sched_commit(P, plan, NULL, 1), 0);
    ck_assert_int_eq(h.calls, 0);
    ck_assert_int_eq(pp.finished, 1);
    ck_assert_int_eq(sched_kv_used(P), 0);
    sched_free(P);
}
END_TEST

START_TEST(transfer_waits_for_decode_room) {
    probe_t pp = { .fn = fcfs }, pd = { .fn = fcfs };
    handoff_probe_t h = { 0 };
    sched_t *P = make(&pp, cfg(100)), *D = make(&pd, cfg(5));
    sched_set_handoff(P, on_handoff, &h);
    add_prefill(P, 1, 0, 40, 20);
    add_prefill(P, 2, 0, 40, 20);
    const sched_plan_t *plan = step(P, 0);
    ck_assert_int_eq(plan->n, 2);
    ck_assert_int_eq(sched_commit(P, plan, NULL, 1), 0);
    ck_assert_int_eq(h.calls, 2);
    ck_assert_int_eq(sched_kv_used(P), 6);
    ck_assert_int_eq(sched_add_transfer(D, h.views[1], 1), 0);
    /* 3 more blocks do not fit in the 2 left: nothing changes, the KV stays on P */
    ck_assert_int_eq(sched_add_transfer(D, h.views[2], 1), 1);
    ck_assert_ptr_null(sched_find(D, 2));
    ck_assert_int_eq(sched_kv_used(D), 3);
    ck_assert_int_eq(sched_num_unfinished(D), 1);
    ck_assert_int_eq(sched_kv_used(P), 6);
    ck_assert_int_eq(sched_transfer_done(D, 1, 2), 0);
    ck_assert_int_eq(sched_release(P, 1), 0);
    ck_assert_int_eq(sched_kv_used(P), 3);
    double t = 2;
    while (pd.finished == 0) { /* request 1 decodes to its end and frees D */
        ck_assert_int_eq(sched_add_transfer(D, h.views[2], t), 1);
        plan = step(D, t);
        ck_assert_int_le(sched_kv_used(D), sched_kv_total(D));
        ck_assert_int_eq(sched_commit(D, plan, NULL, t += 1), 0);
    }
    ck_assert_int_eq(sched_add_transfer(D, h.views[2], t), 0);
    ck_assert_int_eq(sched_kv_used(D), 3);
    /* a request that could never fit here is an error, not a wait */
    add_prefill(P, 3, t, 100, 20);
    plan = step(P, t);
    ck_assert_int_eq(sched_commit(P, plan, NULL, t + 1), 0);
    char why[200];
    ck_assert_int_eq(sched_can_ever_hold(D, 100, 20, why, sizeof why), 0);
    ck_assert_ptr_nonnull(strstr(why, "KV blocks"));
    ck_assert_int_eq(sched_can_ever_hold(D, 40, 20, why, sizeof why), 1);
    ck_assert_int_eq(sched_add_transfer(D, h.views[3], t + 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(D), "can never run here"));
    ck_assert_int_eq(sched_add_transfer(D, h.views[2], t + 1), -1); /* duplicate */
    add(D, 7, t, 10, 5);
    ck_assert_int_eq(sched_add_transfer(D, sched_find(D, 7), t + 1), -1); /* not handed off */
    sched_free(P);
    sched_free(D);
}
END_TEST

START_TEST(reserved_transfers_count_against_max_seqs) {
    probe_t pp = { .fn = fcfs }, pd = { .fn = fcfs };
    handoff_probe_t h = { 0 };
    sched_config_t c = cfg(100);
    c.max_seqs = 1;
    sched_t *P = make(&pp, cfg(100)), *D = make(&pd, c);
    sched_set_handoff(P, on_handoff, &h);
    add_prefill(P, 1, 0, 10, 5);
    add_prefill(P, 2, 0, 10, 5);
    const sched_plan_t *plan = step(P, 0);
    ck_assert_int_eq(sched_commit(P, plan, NULL, 1), 0);
    ck_assert_int_eq(sched_add_transfer(D, h.views[1], 1), 0);
    ck_assert_int_eq(sched_add_transfer(D, h.views[2], 1), 1); /* blocks free, no seq */
    /* nor can a waiting request take the reserved sequence (the core refuses the plan) */
    add(D, 9, 1, 10, 5);
    ck_assert_int_eq(sched_running_seqs(D), 1);
    const sched_plan_t *dp;
    ck_assert_int_eq(sched_step(D, 1, &dp), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(D), "sequence limit reached"));
    sched_free(P);
    sched_free(D);
}
END_TEST

static int preempt_all(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    for (int32_t i = 0; i < v->n_running; i++)
        if (sched_plan_preempt(s, v->running[i]->id)) return -1;
    return 0;
}

START_TEST(transit_requests_abort_and_recompute) {
    probe_t pp = { .fn = fcfs }, pd = { .fn = preempt_all };
    handoff_probe_t h = { 0 };
    sched_t *P = make(&pp, cfg(100)), *D = make(&pd, cfg(100));
    sched_set_handoff(P, on_handoff, &h);
    add_prefill(P, 1, 0, 40, 5);
    add_prefill(P, 2, 0, 40, 5);
    const sched_plan_t *plan = step(P, 0);
    ck_assert_int_eq(sched_commit(P, plan, NULL, 1), 0);
    ck_assert_int_eq(sched_add_transfer(D, h.views[1], 1), 0);
    ck_assert_int_eq(sched_add_transfer(D, h.views[2], 1), 0);
    ck_assert_int_eq(sched_transfer_done(D, 1, 2), 0);
    ck_assert_int_eq(sched_release(P, 1), 0);
    /* preempted on the decode replica: recomputes prompt + first token there */
    step(D, 2);
    const sched_req_t *d = sched_find(D, 1);
    ck_assert_int_eq(d->state, SCHED_PREEMPTED);
    ck_assert_int_eq(sched_req_remaining(d), 41);
    ck_assert_int_eq(sched_kv_used(D), 3); /* request 2's reservation */
    /* a failed run: each side ends what it holds, once */
    sched_abort_all(P, "failed");
    ck_assert_int_eq(pp.aborted, 1);
    ck_assert_int_eq(sched_kv_used(P), 0);
    sched_abort_all(D, "failed");
    ck_assert_int_eq(pd.aborted, 2);
    ck_assert_int_eq(sched_kv_used(D), 0);
    ck_assert_int_eq(sched_running_seqs(D), 0);
    ck_assert_int_eq(sched_num_unfinished(D), 0);
    sched_free(P);
    sched_free(D);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sched_transfer");
    TCase *tc = tcase_create("transfer");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, handoff_keeps_blocks_until_released);
    tcase_add_test(tc, handoff_of_a_one_token_request_finishes_it);
    tcase_add_test(tc, transfer_waits_for_decode_room);
    tcase_add_test(tc, reserved_transfers_count_against_max_seqs);
    tcase_add_test(tc, transit_requests_abort_and_recompute);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

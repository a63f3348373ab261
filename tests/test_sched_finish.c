/* Check suite for policies/sched_finish.c: ending requests early (EOS, a stop string, a
 * client gone), as a live server does, over the core suites' fixture (sched_fixture.h). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "policies/sched.h"
#include "tests/sched_fixture.h"
#include "tests/testutil.h"

/* The fixture's probe, plus what these tests look at: the policy's on_finish calls (and
 * whether it fails them) and the true output length the records would get. */
typedef struct {
    probe_t p;
    int on_finish, fail_on_finish;
    int32_t finish_state, last_true_output;
} ender_t;

static int ender_on_finish(void *ud, sched_t *s, const sched_req_t *r) {
    ender_t *e = ud;
    e->on_finish++;
    e->finish_state = r->state;
    if (!e->fail_on_finish) return 0;
    sched_set_error(s, "policy refused request %d", r->id);
    return -1;
}

static void ender_sink(void *ud, const sched_req_t *r, const char *reason) {
    ender_t *e = ud;
    e->last_true_output = r->true_output_tokens;
    probe_sink(&e->p, r, reason);
}

/* Preempts every running request (for the preempted case). */
static int preempt_all(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
    for (int32_t i = v->n_running - 1; i >= 0; i--)
        if (sched_plan_preempt(s, v->running[i]->id)) return -1;
    return 0;
}

static sched_t *make_ender(ender_t *e, int32_t blocks) {
    e->p.fn = fcfs;
    sched_config_t c = cfg(blocks);
    sched_policy_t pol = { .schedule = probe_schedule, .on_finish = ender_on_finish,
                           .ud = &e->p, .name = "test" };
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    sched_set_sink(s, ender_sink, e);
    return s;
}

static void step_commit(sched_t *s, double now) {
    const sched_plan_t *plan = step(s, now);
    ck_assert_msg(sched_commit(s, plan, NULL, now + 0.5) == 0, "%s", sched_errmsg(s));
    check_invariants(s);
}

/* EOS after 3 of 100 tokens: finished now, with what it generated as its true length, its
 * KV freed, out of the running list; the other request runs on. */
START_TEST(eos_finishes_a_running_request) {
    ender_t e = { 0 };
    sched_t *s = make_ender(&e, 64);
    add(s, 1, 0, 40, 100);
    add(s, 2, 0, 20, 100);
    for (int i = 0; i < 3; i++) step_commit(s, i);
    ck_assert_int_eq(sched_find(s, 1)->generated, 3);
    int32_t used = sched_kv_used(s), held = sched_find(s, 1)->num_blocks;
    ck_assert_int_gt(held, 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_FINISHED, "stop: eos", 9.0), 0);
    check_invariants(s);
    ck_assert_int_eq(e.p.finished, 1);
    ck_assert_int_eq(e.on_finish, 1);
    ck_assert_int_eq(e.finish_state, SCHED_FINISHED);
    ck_assert_int_eq(e.p.last_id, 1);
    ck_assert_int_eq(e.p.last_generated, 3);
    ck_assert_int_eq(e.last_true_output, 3);
    ck_assert_double_eq(e.p.last_finish, 9.0);
    ck_assert_str_eq(e.p.last_reason, "stop: eos");
    ck_assert_int_eq(sched_kv_used(s), used - held);
    ck_assert_ptr_null(sched_find(s, 1));
    ck_assert_int_eq(sched_num_unfinished(s), 1);
    const sched_view_t *v = sched_view(s);
    ck_assert_int_eq(v->n_running, 1);
    ck_assert_int_eq(v->running[0]->id, 2);
    /* the next plan holds only request 2 */
    const sched_plan_t *plan = step(s, 10);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->entries[0].req_id, 2);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 10.5), 0);
    /* a second ending of the same request changes nothing */
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "again", 11), 1);
    ck_assert_int_eq(e.p.finished + e.p.aborted, 1);
    sched_free(s);
}
END_TEST

/* A client gone while its request waits (no room): aborted, out of the queue, no KV ever
 * held; the queue behind it moves up, and everything drains. */
START_TEST(disconnect_aborts_a_waiting_request) {
    ender_t e = { 0 };
    sched_t *s = make_ender(&e, 8); /* 8 blocks: one 100-token prompt at a time */
    add(s, 1, 0, 100, 20);
    add(s, 2, 0, 100, 20);
    add(s, 3, 0, 10, 20);
    step_commit(s, 0);
    ck_assert_int_eq(sched_view(s)->n_waiting, 2);
    ck_assert_int_eq(sched_finish_early(s, 2, SCHED_ABORTED, "client disconnected", 1), 0);
    check_invariants(s);
    ck_assert_int_eq(e.p.aborted, 1);
    ck_assert_int_eq(e.on_finish, 1);
    ck_assert_str_eq(e.p.last_reason, "client disconnected");
    ck_assert_double_eq(e.p.last_finish, -1);
    const sched_view_t *v = sched_view(s);
    ck_assert_int_eq(v->n_waiting, 1);
    ck_assert_int_eq(v->waiting[0]->id, 3);
    ck_assert_int_eq(sched_num_unfinished(s), 2);
    /* a waiting request has no output to finish with */
    ck_assert_int_eq(sched_finish_early(s, 3, SCHED_FINISHED, "eos", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "no output yet"));
    ck_assert_int_eq(sched_num_unfinished(s), 2);
    /* the running one aborted too: its KV freed, request 3 then runs to its end */
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "client disconnected", 2), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    for (int i = 0; i < 40 && sched_num_unfinished(s) > 0; i++) step_commit(s, 3 + i);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    ck_assert_int_eq(e.p.finished, 1);
    ck_assert_int_eq(e.p.aborted, 2);
    sched_free(s);
}
END_TEST

/* A preempted request (back in the queue, KV freed) can be ended too. */
START_TEST(preempted_request_ends_from_the_queue) {
    ender_t e = { 0 };
    sched_t *s = make_ender(&e, 64);
    add(s, 1, 0, 40, 50);
    step_commit(s, 0);
    step_commit(s, 1);
    e.p.fn = preempt_all;
    const sched_plan_t *plan = step(s, 2);
    ck_assert_int_eq(plan->num_preempted, 1);
    ck_assert_int_eq(sched_find(s, 1)->state, SCHED_PREEMPTED);
    ck_assert_int_eq(sched_kv_used(s), 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_FINISHED, NULL, 3), 0);
    check_invariants(s);
    ck_assert_int_eq(e.p.finished, 1);
    ck_assert_int_eq(e.last_true_output, 2);
    ck_assert_int_eq(sched_view(s)->n_waiting, 0);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    sched_free(s);
}
END_TEST

/* Between sched_step and sched_commit the plan still names the request: refused, nothing
 * changes, and the commit then goes through. A bad state is refused too. */
START_TEST(refused_inside_an_uncommitted_plan) {
    ender_t e = { 0 };
    sched_t *s = make_ender(&e, 64);
    add(s, 1, 0, 40, 5);
    step_commit(s, 0);
    const sched_plan_t *plan = step(s, 1);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "gone", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "not yet committed"));
    ck_assert_int_eq(e.p.aborted, 0);
    ck_assert_int_eq(sched_commit(s, plan, NULL, 1.5), 0);
    ck_assert_int_eq(sched_find(s, 1)->generated, 2);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_REJECTED, "no", 2), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "not an ending"));
    ck_assert_int_eq(sched_finish_early(s, 99, SCHED_ABORTED, "unknown", 2), 1);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_FINISHED, NULL, 2), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
}
END_TEST

/* The policy's on_finish failing is reported, but the request has ended all the same. */
START_TEST(on_finish_error_is_reported) {
    ender_t e = { .fail_on_finish = 1 };
    sched_t *s = make_ender(&e, 64);
    add(s, 1, 0, 40, 5);
    step_commit(s, 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "gone", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "policy refused request 1"));
    ck_assert_int_eq(e.p.aborted, 1);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    sched_free(s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("sched_finish");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, eos_finishes_a_running_request);
    tcase_add_test(tc, disconnect_aborts_a_waiting_request);
    tcase_add_test(tc, preempted_request_ends_from_the_queue);
    tcase_add_test(tc, refused_inside_an_uncommitted_plan);
    tcase_add_test(tc, on_finish_error_is_reported);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* Check suite for policies/sched_finish.c: ending requests early (EOS, a stop string, a
 * client gone), as a live server does, driven by a small FCFS policy in C. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "policies/sched.h"
#include "tests/testutil.h"

typedef struct {
    int finished, aborted, on_finish;
    int32_t last_id, last_generated, last_true_output, last_state;
    double last_finish;
    char last_reason[128];
    int fail_on_finish;
    int preempt;         /* the policy preempts every running request instead */
} probe_t;

/* FCFS: every running request's remaining tokens, then waiting ones while they fit; or,
 * when the probe says so, preempt everything running. */
static int fcfs(void *ud, sched_t *s, double now) {
    (void)now;
    const probe_t *p = ud;
    const sched_view_t *v = sched_view(s);
    if (p->preempt) {
        for (int32_t i = v->n_running - 1; i >= 0; i--)
            if (sched_plan_preempt(s, v->running[i]->id)) return -1;
        return 0;
    }
    for (int32_t i = 0; i < v->n_running; i++) {
        const sched_req_t *r = v->running[i];
        if (sched_plan_schedule(s, r->id, sched_req_remaining(r), 0)) return -1;
    }
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        if (!sched_can_allocate(s, r->id, sched_req_remaining(r))) break;
        if (sched_plan_schedule(s, r->id, sched_req_remaining(r), 0)) return -1;
    }
    return 0;
}

static int on_finish(void *ud, sched_t *s, const sched_req_t *r) {
    probe_t *p = ud;
    p->on_finish++;
    p->last_state = r->state;
    if (p->fail_on_finish) {
        sched_set_error(s, "policy refused request %d", r->id);
        return -1;
    }
    return 0;
}

static void sink(void *ud, const sched_req_t *r, const char *reason) {
    probe_t *p = ud;
    p->finished += r->state == SCHED_FINISHED;
    p->aborted += r->state == SCHED_ABORTED;
    p->last_id = r->id;
    p->last_generated = r->generated;
    p->last_true_output = r->true_output_tokens;
    p->last_finish = r->finish_s;
    snprintf(p->last_reason, sizeof p->last_reason, "%s", reason ? reason : "");
}

static sched_t *make(probe_t *p, int32_t blocks, int32_t max_tokens) {
    sched_config_t c = { .num_blocks = blocks, .block_size = 16, .max_tokens = max_tokens,
                         .max_seqs = 8, .max_model_len = 1024, .seed = 1 };
    sched_policy_t pol = { .schedule = fcfs, .on_finish = on_finish, .ud = p, .name = "t" };
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    sched_set_sink(s, sink, p);
    return s;
}

static void add(sched_t *s, int32_t id, int32_t prompt, int32_t out) {
    sched_new_req_t r = { .id = id, .prompt_tokens = prompt, .output_tokens = out };
    ck_assert_int_eq(sched_add(s, &r, 0), 0);
}

static const sched_plan_t *step_commit(sched_t *s, double now) {
    const sched_plan_t *plan = NULL;
    ck_assert_msg(sched_step(s, now, &plan) == 0, "%s", sched_errmsg(s));
    ck_assert_msg(sched_commit(s, plan, NULL, now + 0.5) == 0, "%s", sched_errmsg(s));
    return plan;
}

/* EOS after 3 of 100 tokens: finished now, with what it generated as its true length, its
 * KV freed, out of the running list; the other request runs on. */
START_TEST(eos_finishes_a_running_request) {
    probe_t p = { 0 };
    sched_t *s = make(&p, 64, 4096);
    add(s, 1, 40, 100);
    add(s, 2, 20, 100);
    for (int i = 0; i < 3; i++) step_commit(s, i);
    ck_assert_int_eq(sched_find(s, 1)->generated, 3);
    int32_t used = sched_kv_used(s), held = sched_find(s, 1)->num_blocks;
    ck_assert_int_gt(held, 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_FINISHED, "stop: eos", 9.0), 0);
    ck_assert_int_eq(p.finished, 1);
    ck_assert_int_eq(p.on_finish, 1);
    ck_assert_int_eq(p.last_state, SCHED_FINISHED);
    ck_assert_int_eq(p.last_id, 1);
    ck_assert_int_eq(p.last_generated, 3);
    ck_assert_int_eq(p.last_true_output, 3);
    ck_assert_double_eq(p.last_finish, 9.0);
    ck_assert_str_eq(p.last_reason, "stop: eos");
    ck_assert_int_eq(sched_kv_used(s), used - held);
    ck_assert_ptr_null(sched_find(s, 1));
    ck_assert_int_eq(sched_num_unfinished(s), 1);
    const sched_view_t *v = sched_view(s);
    ck_assert_int_eq(v->n_running, 1);
    ck_assert_int_eq(v->running[0]->id, 2);
    /* the next plan holds only request 2 */
    const sched_plan_t *plan = step_commit(s, 10);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(plan->entries[0].req_id, 2);
    /* a second ending of the same request changes nothing */
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "again", 11), 1);
    ck_assert_int_eq(p.finished + p.aborted, 1);
    sched_free(s);
}
END_TEST

/* A client gone while its request waits (no room): aborted, out of the queue, no KV ever
 * held; the queue behind it moves up. */
START_TEST(disconnect_aborts_a_waiting_request) {
    probe_t p = { 0 };
    sched_t *s = make(&p, 8, 4096); /* 8 blocks: one 100-token prompt at a time */
    add(s, 1, 100, 20);
    add(s, 2, 100, 20);
    add(s, 3, 10, 20);
    step_commit(s, 0);
    const sched_view_t *v = sched_view(s);
    ck_assert_int_eq(v->n_waiting, 2);
    ck_assert_int_eq(sched_finish_early(s, 2, SCHED_ABORTED, "client disconnected", 1), 0);
    ck_assert_int_eq(p.aborted, 1);
    ck_assert_str_eq(p.last_reason, "client disconnected");
    ck_assert_double_eq(p.last_finish, -1);
    v = sched_view(s);
    ck_assert_int_eq(v->n_waiting, 1);
    ck_assert_int_eq(v->waiting[0]->id, 3);
    ck_assert_int_eq(sched_num_unfinished(s), 2);
    /* a waiting request has no output to finish with */
    ck_assert_int_eq(sched_finish_early(s, 3, SCHED_FINISHED, "eos", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "no output yet"));
    ck_assert_int_eq(sched_num_unfinished(s), 2);
    /* running ones aborted too: everything drains, nothing leaks */
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "client disconnected", 2), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    for (int i = 0; i < 40 && sched_num_unfinished(s) > 0; i++) step_commit(s, 3 + i);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    ck_assert_int_eq(sched_kv_used(s), 0);
    ck_assert_int_eq(p.finished, 1);
    ck_assert_int_eq(p.aborted, 2);
    sched_free(s);
}
END_TEST

/* A preempted request (back in the queue, KV freed) can be ended too. */
START_TEST(preempted_request_ends_from_the_queue) {
    probe_t p = { 0 };
    sched_t *s = make(&p, 64, 4096);
    add(s, 1, 40, 50);
    step_commit(s, 0);
    step_commit(s, 1);
    p.preempt = 1;
    const sched_plan_t *plan = NULL;
    ck_assert_int_eq(sched_step(s, 2, &plan), 0);
    ck_assert_int_eq(plan->num_preempted, 1);
    ck_assert_int_eq(sched_find(s, 1)->state, SCHED_PREEMPTED);
    ck_assert_int_eq(sched_kv_used(s), 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_FINISHED, NULL, 3), 0);
    ck_assert_int_eq(p.finished, 1);
    ck_assert_int_eq(p.last_true_output, 2);
    ck_assert_int_eq(sched_view(s)->n_waiting, 0);
    ck_assert_int_eq(sched_num_unfinished(s), 0);
    sched_free(s);
}
END_TEST

/* Between sched_step and sched_commit the plan still names the request: refused, nothing
 * changes, and the commit then goes through. A bad state is refused too. */
START_TEST(refused_inside_an_uncommitted_plan) {
    probe_t p = { 0 };
    sched_t *s = make(&p, 64, 4096);
    add(s, 1, 40, 5);
    step_commit(s, 0);
    const sched_plan_t *plan = NULL;
    ck_assert_int_eq(sched_step(s, 1, &plan), 0);
    ck_assert_int_eq(plan->n, 1);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "gone", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "not yet committed"));
    ck_assert_int_eq(p.aborted, 0);
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
    probe_t p = { .fail_on_finish = 1 };
    sched_t *s = make(&p, 64, 4096);
    add(s, 1, 40, 5);
    step_commit(s, 0);
    ck_assert_int_eq(sched_finish_early(s, 1, SCHED_ABORTED, "gone", 1), -1);
    ck_assert_ptr_nonnull(strstr(sched_errmsg(s), "policy refused request 1"));
    ck_assert_int_eq(p.aborted, 1);
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

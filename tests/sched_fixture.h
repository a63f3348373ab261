/* sched_fixture: the small C policies and probes the scheduler core's Check suites
 * (test_sched, test_sched_transfer, test_sched_prefix) drive it with.
 *
 * A probe_t is a policy (fn(s, ctx), called from the core's schedule hook) and a sink that
 * counts final states and keeps the last one's details. make() builds a core whose policy
 * and sink are the probe; the caller frees it (sched_free). Header-only: each suite is one
 * translation unit. */
#ifndef TWIN_TESTS_SCHED_FIXTURE_H
#define TWIN_TESTS_SCHED_FIXTURE_H

#include <check.h>
#include <stdio.h>
#include <string.h>

#include "policies/sched.h"

typedef struct {
    int calls;
    int (*fn)(sched_t *s, void *ctx);
    void *ctx;
    int finished, rejected, aborted;
    char last_reason[512];
    int32_t last_id;
    double last_first_token, last_finish;
    int32_t last_generated;
} probe_t;

static inline int probe_schedule(void *ud, sched_t *s, double now) {
    (void)now;
    probe_t *p = ud;
    p->calls++;
    return p->fn ? p->fn(s, p->ctx) : 0;
}

static inline void probe_sink(void *ud, const sched_req_t *r, const char *reason) {
    probe_t *p = ud;
    if (r->state == SCHED_FINISHED) p->finished++;
    else if (r->state == SCHED_REJECTED) p->rejected++;
    else if (r->state == SCHED_ABORTED) p->aborted++;
    snprintf(p->last_reason, sizeof p->last_reason, "%s", reason ? reason : "");
    p->last_id = r->id;
    p->last_first_token = r->first_token_s;
    p->last_finish = r->finish_s;
    p->last_generated = r->generated;
}

static inline sched_config_t cfg(int32_t blocks) {
    return (sched_config_t){ .num_blocks = blocks, .block_size = 16, .watermark = 0,
                             .max_tokens = 4096, .max_seqs = 64, .max_model_len = 2048,
                             .seed = 1 };
}

static inline sched_t *make(probe_t *p, sched_config_t c) {
    sched_policy_t pol = { .schedule = probe_schedule, .ud = p, .name = "test" };
    sched_t *s = sched_new(&c, &pol, NULL);
    ck_assert_ptr_nonnull(s);
    sched_set_sink(s, probe_sink, p);
    return s;
}

static inline void add(sched_t *s, int32_t id, double t, int32_t prompt, int32_t out) {
    sched_new_req_t r = { .id = id, .arrival_s = t, .prompt_tokens = prompt, .output_tokens = out };
    ck_assert_int_eq(sched_add(s, &r, t), 0);
}

/* FCFS: running requests first (their remaining tokens), then waiting, whole remaining. */
static inline int fcfs(sched_t *s, void *ctx) {
    (void)ctx;
    const sched_view_t *v = sched_view(s);
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

static inline const sched_plan_t *step(sched_t *s, double now) {
    const sched_plan_t *plan = NULL;
    ck_assert_msg(sched_step(s, now, &plan) == 0, "%s", sched_errmsg(s));
    return plan;
}

/* ------------------------------------------------------------------ lifecycle */

/* Every KV block in use is held by live requests, as many as its reference count says
 * (more than one only when prefix caching shares it); queued requests hold none. */
static inline void check_invariants(sched_t *s) {
    const sched_view_t *v = sched_view(s);
    static int32_t holders[4096]; /* one copy per suite: tests run one at a time */
    int32_t total = sched_kv_total(s), held = 0;
    ck_assert_int_le(total, 4096);
    memset(holders, 0, sizeof holders);
    for (int32_t i = 0; i < v->n_running; i++) {
        const sched_req_t *r = v->running[i];
        ck_assert_int_eq(r->state, SCHED_RUNNING);
        ck_assert_int_ge(r->num_blocks, (r->computed + 15) / 16);
        ck_assert_int_le(r->computed, r->prompt_tokens + r->generated);
        int32_t n;
        const int32_t *b = sched_req_blocks(s, r->id, &n);
        ck_assert_int_eq(n, r->num_blocks);
        for (int32_t j = 0; j < n; j++) holders[b[j]]++;
    }
    for (int32_t b = 0; b < total; b++) {
        ck_assert_int_eq(holders[b], sched_kv_refcount(s, b));
        held += holders[b] > 0;
    }
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        ck_assert(r->state == SCHED_WAITING || r->state == SCHED_PREEMPTED);
        ck_assert_int_eq(r->num_blocks, 0);
        ck_assert_int_eq(r->computed, 0);
    }
    ck_assert_int_eq(held, sched_kv_used(s));
    ck_assert_int_eq(v->free_blocks, sched_kv_total(s) - sched_kv_used(s));
}

#endif

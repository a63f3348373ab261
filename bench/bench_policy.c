/* bench_policy: the scheduler's own cost per step, Lua policy vs the same logic in C.
 *
 * N requests decode together (all admitted in the first step, outputs long enough never to
 * finish); each measured step is sched_step (the policy builds a plan of N decodes, each
 * validated by the core) plus sched_commit. Prints microseconds per step and per request.
 *
 *   usage: build/bench/bench_policy [POLICY.lua] [STEPS]     (make bench)
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "policies/lua_host.h"
#include "policies/sched.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The C twin of continuous.lua without preemption: decodes, then whole prompts. */
static int c_fcfs(void *ud, sched_t *s, double now) {
    (void)ud;
    (void)now;
    const sched_view_t *v = sched_view(s);
    for (int32_t i = 0; i < v->n_running; i++) {
        const sched_req_t *r = v->running[i];
        if (!sched_can_allocate(s, r->id, 1)) break;
        if (sched_plan_schedule(s, r->id, sched_req_remaining(r), 0)) return -1;
    }
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        if (!sched_can_allocate(s, r->id, sched_req_remaining(r))) break;
        if (sched_plan_schedule(s, r->id, sched_req_remaining(r), 0)) return -1;
    }
    return 0;
}

/* Median-free but steady: the loop is long and deterministic. Returns us per step. */
static double run(const sched_policy_t *pol, lhost_t *h, int n, int steps) {
    sched_config_t cfg = { .num_blocks = 1 << 20, .block_size = 16, .watermark = 0.01,
                           .max_tokens = 1 << 16, .max_seqs = 1024, .max_model_len = 1 << 24,
                           .seed = 1 };
    sched_t *s = sched_new(&cfg, pol, NULL);
    if (!s || (h && lhost_attach(h, s) != 0)) {
        fprintf(stderr, "bench_policy: setup failed\n");
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        sched_new_req_t r = { .id = i, .prompt_tokens = 16, .output_tokens = 1 << 22 };
        sched_add(s, &r, 0);
    }
    const sched_plan_t *plan;
    double t = 0, t0 = 0;
    for (int it = -100; it < steps; it++) { /* 100 warm-up steps let LuaJIT compile */
        if (it == 0) t0 = now_s();
        if (sched_step(s, t, &plan) != 0 || sched_commit(s, plan, NULL, t += 0.01) != 0) {
            fprintf(stderr, "bench_policy: %s\n", sched_errmsg(s));
            exit(1);
        }
    }
    double us = (now_s() - t0) / steps * 1e6;
    if (plan->n != n) {
        fprintf(stderr, "bench_policy: expected %d decodes per step, got %d\n", n, plan->n);
        exit(1);
    }
    sched_free(s);
    return us;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "policies/continuous.lua";
    int steps = argc > 2 ? atoi(argv[2]) : 20000;
    int sizes[] = { 1, 16, 64, 256 };
    printf("scheduler cost per step (sched_step + sched_commit), %d steps each\n", steps);
    printf("%8s %14s %14s %14s %12s\n", "running", "lua us/step", "C us/step", "lua us/req",
           "lua - C");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        lhost_t *h = lhost_open(path, NULL);
        if (!h || lhost_errmsg(h)) {
            fprintf(stderr, "bench_policy: %s\n", h ? lhost_errmsg(h) : "out of memory");
            return 1;
        }
        sched_policy_t lua;
        lhost_policy(h, &lua);
        double tl = run(&lua, h, sizes[i], steps);
        lhost_close(h);
        sched_policy_t c = { .schedule = c_fcfs, .name = "C" };
        double tc = run(&c, NULL, sizes[i], steps);
        printf("%8d %14.2f %14.2f %14.3f %12.2f\n", sizes[i], tl, tc, tl / sizes[i], tl - tc);
    }
    return 0;
}

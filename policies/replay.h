/* replay: the executor-independent half of a trace replay, shared by the simulator and the
 * engine: the database and its run row, the Lua policy and its --set overrides, the
 * scheduler core, the trace, per-request rows, the first-error-wins failure state, and the
 * watchdog's abort path. The executor (sim/sim.c: a cost model; engine/engine.c: a forward
 * pass) owns the loop and the notion of time.
 *
 * Invariants:
 *  - The first failure's message is kept (the root cause); later ones are dropped.
 *  - Every request handed to replay_add reaches exactly one row in `requests`: through the
 *    scheduler's sink (finished, rejected, aborted by replay_finish), or, when the policy
 *    watchdog stops the process from its own thread, through the ledger of requests in flight
 *    (status aborted, arrival data only).
 *  - replay_finish marks the run done, or failed with the message, and flushes every row.
 *  - The run row is written only once the run can start (replay_begin after a successful
 *    setup): a configuration that cannot run (a missing file, a policy that does not load,
 *    an unknown preset, a trace without a request to replay) records nothing, so an
 *    executor reports it as a usage error (its result's setup_failed).
 *  - An interrupt (the flag `interrupt` points to, set by a signal handler to the signal's
 *    number) is polled by the executors at step boundaries (replay_interrupted) and fails
 *    the run with "interrupted by SIGINT at t=T s", which replay_finish gives every
 *    unfinished request as its abort reason.
 *
 *  - Replicas (the simulator's cluster): each has its own policy host and scheduler, and
 *    its rows say which (requests.replica, steps.replica); everything else (database,
 *    trace, ledger, failure state) is the run's. The engine has one replica, reps[0],
 *    also reachable as host and sched.
 *
 * Ownership: replay_t is embedded by the executor; replay_close frees what it holds. Option
 * strings are borrowed for the replay's lifetime. */
#ifndef TWIN_REPLAY_H
#define TWIN_REPLAY_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policies/lua_host.h"
#include "policies/sched.h"
#include "traces/recorder.h"
#include "traces/trace.h"

/* A policy that keeps asking to be called again (wake-ups, rejections) without scheduling
 * anything and without new arrivals, or that runs steps in which no request ever gets a
 * token (a preempt/re-admit livelock), would spin forever: executors bound both. */
enum { REPLAY_MAX_IDLE_WAKES = 1000000, REPLAY_MAX_STEPS_WITHOUT_TOKEN = 1000000 };

typedef struct {
    double arrival_s;
    int32_t prompt, output;
    int done;
} replay_live_t;

/* Requests in flight, for the watchdog: trace ids are consecutive, so a ring indexed by
 * id - base suffices; its size is the number of requests in flight. */
typedef struct {
    pthread_mutex_t mu;
    replay_live_t *v;
    int64_t cap, head, n, base; /* v[(head + i) % cap] is request base + i */
} replay_ledger_t;

struct replay;

/* One replica's policy host and scheduler. The engine has one; the simulator's cluster has
 * one per replica, each with its own instance of its policy (sim/sim.h). */
typedef struct {
    struct replay *rp;
    lhost_t *host;
    sched_t *sched;
    int32_t index;               /* 0-based, as recorded */
} replay_rep_t;

typedef struct replay {
    rec_t *rec;
    /* The database file replay_init created (it did not exist), else NULL: removed again at
     * replay_close when it holds no run, so that a usage error leaves nothing behind. */
    char *created_db;
    /* Set by the executor from its options; NULL: never interrupted. */
    const volatile sig_atomic_t *interrupt;
    int interrupted;             /* the run was ended by a signal */
    int64_t run_id;              /* -1 until the run row exists */
    lhost_t *host;               /* replica 0's (reps[0].host, reps[0].sched): the engine's */
    sched_t *sched;
    replay_rep_t *reps;          /* [n_reps], fixed once a policy is loaded */
    int32_t n_reps;
    trace_t *trace;
    const char *policy_path;
    char err[8192];
    int failed;
    int sink_failed;
    double wall0;                /* replay_wall() at replay_init */
    const rec_run_info_t *early_info; /* the run row to write if the watchdog fires in setup */
    replay_ledger_t live;
    int64_t requests;            /* handed to replay_add */
    int64_t idle_calls;          /* empty plans since the last step or arrival */
    int64_t steps_without_token; /* steps in a row in which no entry sampled */
    trace_req_t ahead;           /* the first request, read by replay_open_trace */
    int have_ahead;
    int64_t total;               /* requests the trace holds (replay_count_trace); 0 unknown */
    double last_progress;        /* replay_wall() of the last progress line */
    /* Called after a request's row is written (finished, rejected or aborted; reason NULL
     * when finished), e.g. for the engine to free the request's tokens. May be NULL. */
    void (*on_final)(void *ud, const sched_req_t *r, const char *reason);
    /* Called with a request's row just before it is written through the scheduler's sink
     * (not the watchdog's rows), so that an executor may restate its times (the
     * simulator's client-side metrics, sim.h). May be NULL. Both hooks get final_ud. */
    void (*on_row)(void *ud, const sched_req_t *r, rec_request_t *row);
    void *final_ud;
} replay_t;

double replay_wall(void);       /* monotonic seconds */

/* Zeroes r, starts the wall clock and opens the database (rows written by a background
 * thread). 0, or -1 with the failure recorded (r->err). A database file it creates is
 * removed by replay_close if no run was ever written to it (by this replay or another
 * process). */
int replay_init(replay_t *r, const char *db_path);

/* Records the first failure; returns -1. */
int replay_fail(replay_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Loads the policy, applies the --set overrides, with the watchdog wired to the ledger. */
int replay_load_policy(replay_t *r, const char *path, const char *const *sets, int n_sets,
                       const lhost_limits_t *limits);
/* A cluster: n replicas (default 1), set before any policy is loaded. 0, or -1. */
int replay_set_replicas(replay_t *r, int32_t n);
/* replay_load_policy and replay_start_sched for replica i: each its own policy instance. */
int replay_load_policy_at(replay_t *r, int32_t i, const char *path, const char *const *sets,
                          int n_sets, const lhost_limits_t *limits);
int replay_start_sched_at(replay_t *r, int32_t i, const sched_config_t *cfg);
/* The limits with the watchdog's abort wired to this replay (the router's host uses it). */
void replay_limits(replay_t *r, const lhost_limits_t *in, lhost_limits_t *out);
/* The policy's string param `key`: 1 found (copied), 0 absent, -1 wrong type. */
int replay_param_str(replay_t *r, const char *key, char *out, size_t len);

/* Builds the scheduler with the loaded policy, its sink writing request rows. */
int replay_start_sched(replay_t *r, const sched_config_t *cfg);
/* Opens the trace and reads its first request, so that a trace (or a --start/--duration/
 * --limit window) holding none fails here, before the run row, naming the window. */
int replay_open_trace(replay_t *r, const char *path, const trace_opts_t *opts);
/* The next request in trace order (the one read ahead first): 1, 0 at the end, -1 with the
 * trace's message recorded. */
int replay_next(replay_t *r, trace_req_t *q);
/* Counts the requests of the trace as replayed (a second reader over the same file, with
 * the same options) into r->total, for a progress line with a total and an ETA. A trace
 * that cannot be read again (stdin) leaves the total unknown. */
void replay_count_trace(replay_t *r, const char *path, const trace_opts_t *opts);
/* The progress line on stderr, at most every 0.2 s unless final: "[WHO] t=T s  requests
 * N/TOTAL (P%)  waiting W  running R  steps S  ETA E s". */
void replay_progress(replay_t *r, const char *who, double t, int64_t steps, int final);
/* "PATH (rate_scale X[, start S s][, duration D s][, limit N][, max_prompt P, max_output
 * O])" for the runs row's trace column: a start, duration or limit only when one is set. */
void replay_describe_trace(const char *path, const trace_opts_t *t, char *buf, size_t len);
/* The workload as a member of the run's config JSON, so that it can be replayed exactly
 * (validate): "trace":{"path":(absolute),"format":..,"rate_scale":..,"start_s":..,"duration_s":..,
 * "limit":..,"max_prompt":..,"max_output":..}. */
void replay_trace_json(FILE *f, const char *path, const trace_opts_t *t);
/* "KEY":"PATH" with PATH made absolute when it exists, so that a run can be replayed from
 * another directory (the trace above uses it too). */
void replay_json_path(FILE *f, const char *key, const char *path);

/* Writes the run row (status running). On failure the recorder's message is the one kept. */
int replay_begin(replay_t *r, const rec_run_info_t *info);

/* An arrival: ledger, then sched_add. hash_block: tokens per hash id (0 when none). */
int replay_add(replay_t *r, const trace_req_t *q, int32_t hash_block, double now);
/* The same on replica i. */
int replay_add_at(replay_t *r, int32_t i, const trace_req_t *q, int32_t hash_block,
                  double now);
/* The same on prefill replica i of a disaggregated cluster: the request is handed off
 * after its first token (sched.h), and its row is written by the replica that ends it. */
int replay_add_prefill(replay_t *r, int32_t i, const trace_req_t *q, int32_t hash_block,
                       double now);
/* A request a router rejected before any replica saw it: its row, status rejected. */
int replay_reject_unrouted(replay_t *r, const trace_req_t *q, const char *reason);
/* Requests not yet final on every replica. */
int32_t replay_unfinished(const replay_t *r);

/* The policy-bug guards every executor applies, so each says the same thing (0, or -1
 * through replay_fail):
 *  - replay_after_step: a plan ran; more than REPLAY_MAX_STEPS_WITHOUT_TOKEN steps in a
 *    row in which no request got a token is a livelock;
 *  - replay_after_idle: the policy returned an empty plan; more than REPLAY_MAX_IDLE_WAKES
 *    in a row without a step or an arrival (replay_add) between them is a policy bug;
 *  - replay_stalled: always -1: requests are left, nothing is scheduled, and neither a
 *    wake-up nor an arrival is coming. */
int replay_after_step(replay_t *r, const sched_plan_t *p);
int replay_after_idle(replay_t *r);
int replay_stalled(replay_t *r, double now);

/* 0, or -1 when the interrupt flag is set: the run fails with "interrupted by SIGNAME at
 * t=T s" (T the executor's time: simulated or engine seconds). */
int replay_interrupted(replay_t *r, double now);
/* Before the run row: 0, or -1 when the interrupt flag is already set (a signal during
 * setup, or a sweep's point forked after one): "not run: interrupted by SIGNAME before it
 * started", and nothing is to be recorded. */
int replay_not_started(replay_t *r);
/* "SIGINT", "SIGTERM", "SIGHUP", else "signal N" (in a static buffer). */
const char *replay_signal_name(int sig);

/* A step row; fills kv_used/kv_total/num_waiting from the scheduler. */
int replay_record_step(replay_t *r, rec_step_t *st);
/* The same for a step of replica i. */
int replay_record_step_at(replay_t *r, int32_t i, rec_step_t *st);

/* Ends the run: on failure aborts what is unfinished; marks the run done or failed and
 * commits. Returns 0 when the run succeeded. */
int replay_finish(replay_t *r);
void replay_close(replay_t *r);

#endif

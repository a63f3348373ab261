/* sim_internal: the simulator's state, shared by sim.c (the event loop and the run's
 * records), replica.c (one replica's setup and step costing) and sim_route.c (routing
 * arrivals over the replicas). Not a public interface.
 *
 * What is per run (sim_t): the options, the replay (database, trace, ledger, failure
 * state), the event heap, the router, the client-side front end and stream clocks, the
 * draft positions (indexed by request id, unique in the run) and scratch buffers. What is
 * per replica (sim_rep_t): its scheduler and policy instance (rp.reps[i]), cost model, KV
 * size, and the step in flight (at most one).
 *
 * Ownership: sim_t owns the replicas, their cost models and cost files, and the held
 * requests' copies of their hash ids. */
#ifndef TWIN_SIM_INTERNAL_H
#define TWIN_SIM_INTERNAL_H

#include <stdint.h>

#include "policies/replay.h"
#include "policies/router.h"
#include "sim/cluster.h"
#include "sim/cost_file.h"
#include "sim/heap.h"
#include "sim/parallel.h"
#include "sim/presets.h"
#include "sim/serving.h"
#include "sim/sim.h"

/* What one replica is: from --replicas (all alike, from the options) or a --cluster group. */
typedef struct {
    const char *group;        /* NULL: --replicas */
    int32_t group_index, role;
    const char *model, *hw, *policy_path;
    const char *const *sets;
    int n_sets;
    par_t par;                /* its GPUs' split (par.tp: the tensor-parallel degree) */
    int32_t kv_blocks;
    double gpu_util;
} sim_spec_t;

typedef struct {
    trace_req_t q;
    int64_t *hash;            /* owned copy of q.hash_ids */
} sim_held_t;

typedef struct {
    int32_t index;
    sim_spec_t spec;
    cost_model_t *cost, *draft_cost;
    cost_file_t *cf;          /* the --cost file or a shipped calibration; NULL: roofline */
    struct kv_tiers *tiers;   /* the KV tiers below HBM (owned), NULL: none */
    double tier_block_bytes;  /* what a block of every layer takes on one device */
    char calibration[320];
    double alpha;
    int32_t num_blocks;
    preset_model_t model;
    preset_hw_t hw;
    /* the step in flight */
    const sched_plan_t *plan;
    cost_features_t feat;
    double host_s, step_start, step_sched, pushed_wake;
    int busy, poked, dirty;
    double incoming;          /* decode side: prompt tokens routed here, KV not landed yet */
    /* a serving profile's async scheduling: arrivals during the step in flight, for the
     * scheduler after its next plan (sim_serving.c) */
    sim_held_t *inbox;
    int32_t n_inbox, inbox_cap;
    int32_t graph_max;        /* the largest CUDA graph (0: none) */
    int32_t *timed_out;       /* client timeouts of requests in the step in flight */
    int32_t n_timed_out, timed_out_cap;
    struct sim *owner;        /* the run, for the policy's step-cost estimate */
} sim_rep_t;

/* A request of a disaggregated run: where it was prefilled and is decoded, and its KV's
 * journey (SIM_PD_*); t is the hand-off time, then the transfer's end. */
enum { SIM_PD_NONE = 0, SIM_PD_ROUTED, SIM_PD_PENDING, SIM_PD_MOVING, SIM_PD_LANDED };
typedef struct {
    int32_t prefill, decode;
    int32_t stage;
    int32_t prompt;           /* counted in its decode replica's incoming until it lands */
    const sched_req_t *held;  /* the prefill side's view from the hand-off to the release */
    double handoff_s, end_s;
} sim_pd_t;

typedef struct sim {
    const sim_opts_t *o;
    serving_t serving;        /* the run's serving profile ("none": inactive) */
    replay_t rp;
    sim_rep_t *reps;
    int32_t n_reps;
    const char **policy_sets; /* the --set options that are not router.* */
    int n_policy_sets;
    sim_cluster_t cluster;    /* --cluster; n_groups 0 without */
    const char ***group_sets; /* [n_groups]: a group's set.KEY, then policy_sets */
    const char *router_path;  /* --router, else the cluster file's; NULL: round robin */
    sim_heap_t heap;
    cost_seq_t *seqs;
    int32_t seqs_cap;
    int32_t *accepted;
    int stopped;
    int64_t steps, hashed_requests;
    sim_client_t client;
    int client_on;
    double front_free;
    double first_arrival, last_arrival;   /* of the replayed requests (NAN before one) */
    double *client_last;
    int64_t client_cap;
    int32_t *draft_pos;
    int64_t draft_cap;
    int any_draft;
    /* routing */
    router_t *router;
    router_view_t view;
    router_replica_t *vrep;
    sched_t **scheds;
    int64_t rr;               /* the built-in round robin's next pick */
    sim_held_t *held;
    int32_t n_held, held_cap, held_head;
    int32_t *poked;           /* replicas with an event at this instant */
    int32_t n_poked;
    /* prefill/decode disaggregation (sim_disagg.c); disagg 0 otherwise */
    int disagg;
    int64_t rr_decode;        /* the built-in round robin's next decode pick */
    sim_pd_t *pd;             /* indexed by request id, like client_last */
    int64_t pd_cap;
    int32_t *handed;          /* ids handed off in the commit being applied */
    int32_t n_handed, handed_cap;
    int32_t *pending;         /* handed off, waiting for room on their decode replica (FIFO) */
    int32_t n_pending, pending_cap;
    double *link_free;        /* when each link is next free: [prefill * n + decode], or [0] */
    int has_route_decode;     /* the router defines route_decode */
    /* client timeouts (sim_serving.c): per request id, SIM_REQ_DELIVERED once a replica
     * has it, SIM_REQ_GONE when its client gave up before (in the front end, or held by
     * the router): it is ended the moment it reaches a replica */
    uint8_t *req_flags;
    int64_t req_flags_cap;
} sim_t;

enum { SIM_REQ_DELIVERED = 1, SIM_REQ_GONE = 2 };

#define sim_fail(m, ...) replay_fail(&(m)->rp, __VA_ARGS__)

/* replica.c */
int sim_rep_setup(sim_t *m, sim_rep_t *r);
int sim_seqs_reserve(sim_t *m, int32_t n);
double sim_step_cost(sim_t *m, sim_rep_t *r, const sched_plan_t *p, cost_features_t *f);
void sim_draw_acceptances(sim_t *m, sim_rep_t *r, const sched_plan_t *p);
void sim_draft_advance(sim_t *m, const sched_plan_t *p);
void sim_rep_free(sim_rep_t *r);

/* sim_serving.c: the serving profile's parts of the event loop */
/* The profile: o->serving, else vllm when replica spec's hardware (or cost file) is a
 * built-in GPU preset, else none. Before the replicas are set up. 0 or -1. */
int sim_serving_pick(sim_t *m, const char *hw, const cost_file_t *cf);
/* The run's band width (sim_result_t.band_err) from replica 0's cost model and the serving
 * profile: err NAN and src "" when neither states an error. */
void sim_band_width(const sim_t *m, const sim_rep_t *r0, double *err, char *src, size_t srclen);
/* Delivers a routed arrival to replica i: into its scheduler, or, with async scheduling
 * and a step in flight, into its inbox (until sim_serving_flush). 0 or -1. */
int sim_serving_deliver(sim_t *m, int32_t i, const trace_req_t *q, double now);
/* After replica r planned its next step (or found none): its inbox into its scheduler. */
int sim_serving_flush(sim_t *m, sim_rep_t *r, double now);
/* The step's wall time and the host time recorded before its pass, for a pass of `pass`
 * seconds over features f. */
void sim_serving_step_time(const sim_t *m, const sim_rep_t *r, const cost_features_t *f,
                           double pass, double *host_s, double *dur_s);
/* A client timeout event for request id at now. 0 or -1. */
int sim_serving_timeout(sim_t *m, int32_t id, double now);
/* After replica r's commit: the timeouts that came during its step. 0 or -1. */
int sim_serving_after_commit(sim_t *m, sim_rep_t *r, double now);
void sim_serving_free(sim_t *m);

/* sim_route.c */
int sim_route_setup(sim_t *m);
/* An arrival at `now`: to a replica (replay_add_at, the replica poked), rejected, or held. */
int sim_route_arrival(sim_t *m, const trace_req_t *q, double now);
/* After a step: the held requests, in arrival order, until one is held again. */
int sim_route_held(sim_t *m, double now);
void sim_poke(sim_t *m, int32_t i);
void sim_route_free(sim_t *m);

/* sim_disagg.c: prefill/decode disaggregation */
int sim_disagg_setup(sim_t *m);
/* The decode replica for a request routed to prefill replica `prefill` (recorded). */
int sim_disagg_routed(sim_t *m, const trace_req_t *q, int32_t prefill, int32_t decode);
/* 1 when some decode replica could ever hold q (else 0 and why); the arrival's check. */
int sim_disagg_fits(sim_t *m, const trace_req_t *q, int32_t decode, char *why, size_t len);
/* After replica r's commit: start or queue the hand-offs it made; retry its pending ones. */
int sim_disagg_after_commit(sim_t *m, int32_t r, double now);
int sim_disagg_transfer_done(sim_t *m, int32_t id, double now);
void sim_disagg_row(sim_t *m, const sched_req_t *q, rec_request_t *row);
/* A failed run: the prefill side's copies of transfers the decode side owns are dropped,
 * so that aborting each replica writes one row per request. */
void sim_disagg_abort(sim_t *m);
void sim_disagg_free(sim_t *m);

#endif

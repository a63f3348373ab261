/* sim: the discrete-event simulator. It replays a trace through the shared scheduler core
 * and a Lua policy, costs each planned step with a cost model (roofline by default) instead
 * of running it, and writes the same records as the engine.
 *
 * Events (arrivals, step completions, policy wake-ups, KV transfers' ends) sit on a binary
 * heap; one step is in flight per replica. Events at the same time are all applied before
 * the policy is asked for the next step. The trace is streamed: one arrival is read ahead at a time.
 *
 * A cluster (--replicas N, or --cluster FILE: sim/cluster.h) is N replicas, each with its
 * own scheduler, policy instance, KV cache and cost model (sim/replica.c), behind a router
 * (sim/sim_route.c: round robin built in, or a Lua router, policies/router.h). One heap
 * drives them all; after the events of an instant, each replica an event touched (an
 * arrival routed to it, its step's end, its wake-up) and that is idle asks its policy for
 * a step, in the order they were touched. Step numbers are the run's, in the order steps
 * end. With neither option the run is the single-replica simulator: identical requests
 * and steps rows (replica 0) and one replicas row. The client-side front end below is the
 * cluster's (one API gateway before the router). A cluster of prefill and decode groups
 * prefills each request on one replica and decodes it on another after a KV transfer
 * (sim/sim_disagg.c: routing at arrival, back-pressure, links; docs/cluster.md).
 *
 * Invariants:
 *  - Deterministic: same trace, policy, params, presets and seed => identical records
 *    (speculative acceptances are drawn per (seed, request, position)).
 *  - The KV capacity comes from the hardware preset: device memory x tp x gpu_util, minus
 *    the weights (target and draft), minus an activation reserve for the largest step,
 *    over the bytes of one block; or it is given (kv_blocks), as an engine run's is.
 *  - The cost of a step is the forward pass (cost_pass_time) after the executor's
 *    CPU-side time (cost_host_time, 0 for the roofline): the step is decided at t, its
 *    pass starts at t + host and ends host + pass later, when its tokens are emitted. The
 *    step row records both (host_s, dur_s) and the pass's features.
 *  - A run that fails (bad trace row, policy error, stall, an interrupt) is marked failed
 *    in the database with its message, and requests left unfinished are recorded as
 *    aborted. A configuration that cannot run (options, files, presets, a policy that does
 *    not load, a trace without a request to replay) fails before the run row is written:
 *    nothing is recorded and sim_result_t.setup_failed says so.
 *  - interrupt: polled before each step is planned; once non-zero (a signal's number) the
 *    run ends as failed with "interrupted by SIGINT at t=T s" (T simulated seconds). Set
 *    before the run row would be written (when sim_run is called: a sweep's later points;
 *    or during setup), nothing is run or recorded.
 *
 *  - Hooks (optional, for teaching views and tests): on_step is called once per executed
 *    step when it completes, BEFORE the scheduler commits it, so every plan entry's request
 *    view still holds its pre-step state (generated, computed) and is valid; on_final is
 *    called once per request reaching a final state (finished, rejected, aborted). A hook
 *    that returns non-zero stops the run: it ends as failed with "stopped by the caller"
 *    and sim_result_t.stopped set.
 *  - save_tokens: one tokens row per emitted output token (token_id -1, t_s = the end of
 *    the step that emitted it, or its client-side time, below), so inter-token latency
 *    works on simulated runs.
 *
 *  - A serving profile (sim/serving.h; --serving, default "vllm" for a GPU preset) adds
 *    what the serving engine does around the passes: the cost model's attention, all-reduce
 *    and MoE terms and its CUDA graphs (sim/serving_cost.h); the engine's CPU time per step,
 *    which with async scheduling overlaps the pass (the step takes max(pass, cpu)) and
 *    delays a request arriving during a step to the step after next (held in its replica's
 *    inbox until the replica has planned its next step; not in a prefill/decode cluster);
 *    the API server's client-side terms (below); and the KV capacity as vLLM computes it.
 *    The run's config records it ("serving"); "none" keeps every behaviour below as it was.
 *  - client_timeout_s: each request gets a timeout event at arrival + client_timeout_s;
 *    one still unfinished then is aborted (its KV freed, as vLLM aborts a request whose
 *    client went away), after the step in flight if it is in it, with the reason
 *    "client timeout after S s"; the run's config records "client_timeout_s".
 *  - Metrics are server-side (what the engine records: a token counts when the step that
 *    produced it ends) unless a client-side term is > 0 (sim_client_t; options or the cost
 *    file). Then the run predicts what a streaming client measures (vLLM's
 *    benchmark_serving), and its config says "metrics":"client" with the three terms:
 *      - the front end (HTTP/API handling, tokenising the prompt) comes BEFORE the
 *        scheduler, in one worker, first come first served, as vLLM's API server runs it
 *        (one event loop, one tokeniser thread): request k of the trace, arriving at a_k
 *        with P_k prompt tokens, reaches the scheduler at
 *            s_k = max(a_k, s_{k-1}) + request_s + prompt_token_s x P_k
 *        so the delay shifts queueing and batching, and under load the front end queues;
 *      - each request's output is streamed serially (detokenise, serialise, send): with
 *        e_i the end of the step that produced token i,
 *            c_i = max(e_i, c_{i-1}) + token_s        (c_0 = -infinity)
 *        so tokens queue when the server produces them faster than the stream sends them;
 *      - the request row's first_token_s and finish_s are c_1 and c_n and the tokens rows
 *        hold c_i, so TTFT, TPOT, ITL and E2E are the client's, measured from the trace's
 *        arrival a_k; first_scheduled_s, the steps and the policy's view stay server-side.
 *    With every term 0 the records are exactly the server-side ones.
 *
 * Ownership: sim_run borrows the options for the duration of the call; everything a hook
 * receives is borrowed for the duration of that hook call. */
#ifndef TWIN_SIM_H
#define TWIN_SIM_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "traces/summary.h"
#include "policies/lua_host.h"
#include "policies/sched.h"
#include "sim/cost.h"
#include "traces/trace.h"

/* What a step hook sees. The plan and the view are the core's (sched.h), borrowed. */
typedef struct {
    const sched_plan_t *plan;
    const int32_t *accepted;  /* drafts accepted per plan entry; NULL without speculation */
    double start_s, dur_s;
    const sched_view_t *view; /* queue and running list before the commit */
    int32_t kv_used, kv_total;
    int32_t replica;          /* 0-based: whose step */
} sim_step_info_t;

#define SIM_DEFAULT_MODEL "llama-2-7b"
#define SIM_DEFAULT_HW "a100-80g"

/* The client-side terms (see above), seconds. In sim_opts_t, NAN means "not given": the
 * cost file's term, else 0. */
typedef struct {
    double request_s;         /* per request: HTTP/API handling, tokeniser call */
    double prompt_token_s;    /* per prompt token: tokenising the prompt */
    double token_s;           /* per streamed output token: detokenise, serialise, send */
} sim_client_t;

/* sim_opts_t.metrics: DEFAULT is client-side with an active serving profile (what a
 * benchmark client measures) or when client terms are given, else server-side. */
enum { SIM_METRICS_DEFAULT = 0, SIM_METRICS_CLIENT = 1, SIM_METRICS_SERVER = 2 };

typedef int (*sim_step_fn)(void *ud, const sim_step_info_t *info);
/* reason: NULL when finished. */
typedef int (*sim_final_fn)(void *ud, const sched_req_t *r, const char *reason);

typedef struct {
    const char *trace_path;
    trace_opts_t trace_opts;
    const char *policy_path;
    const char *const *sets;  /* "key=value" policy param overrides; "router.key=value"
                               * the router's */
    int n_sets;
    const char *model;        /* preset name or file; NULL: model_shape, else the cost
                               * file's model, else llama-2-7b */
    const preset_model_t *model_shape; /* a shape given directly (validate: an engine run's
                               * model), used when model is NULL */
    const preset_model_t *draft_shape; /* NULL, or the draft model of a speculative policy
                               * given directly (validate: an engine run's --draft), in
                               * place of its `draft` param; a cost file fitted for a model
                               * of the same shape costs it too */
    const char *hw;           /* preset name or file; NULL: the cost file's hw, else
                               * a100-80g */
    const char *cost_path;    /* NULL: the roofline on hw with `cost`; else a cost file
                               * (sim/cost_file.h) fitted for the model */
    int32_t kv_blocks;        /* > 0: the KV capacity in blocks, as an engine run's (else
                               * from hw and gpu_util; required with a linear cost file) */
    int32_t tp;               /* tensor-parallel degree (default 1) */
    const char *parallel;     /* a parallel spec (sim/parallel.h: "tp=8,ep=8,pp=2"); NULL:
                               * tp alone. Its tp and --tp must agree when both are given. */
    const char *weight_format;/* NULL: the model's; else bf16|fp8|int4|mxfp4|nvfp4 for every
                               * replica's model (preset_model_set_format) */
    const char *kv_dtype;     /* NULL: the model's; else bf16|fp8 (the KV cache's element) */
    const char *db_path;      /* default twinserve.db */
    const char *run_name;     /* NULL: recorder's default */
    uint64_t seed;
    double gpu_util;          /* fraction of device memory for weights + KV (0.9) */
    double watermark;         /* KV fraction kept free at admission (0.01) */
    int32_t block_size;       /* 16 */
    int32_t max_tokens;       /* hard per-step budget (8192) */
    int32_t max_seqs;         /* hard per-step sequences (256) */
    int32_t max_model_len;    /* 0: the model's context length */
    int prefix_caching;       /* reuse KV of equal prompt prefixes (traces with hash ids) */
    /* KV tiers below each replica's HBM, in order (policies/kv_tier.h: "dram:256GB",
     * "ssd:2TB:read=6GB/s"; up to 4; needs prefix_caching): evicted prefix blocks are kept
     * there and reloaded at their read bandwidth instead of recomputed */
    const char *kv_tiers[4];
    int n_kv_tiers;
    int32_t max_output_tokens; /* > 0: every request's limit unless the trace gives one
                               * (sched_config_t); 0: the context left after the prompt */
    int oracle_lengths;       /* policies see true output lengths (a research oracle) */
    int clip_to_context;      /* clip over-long requests to the context instead of rejecting
                               * them (sched_config_t), as Vidur does */
    cost_roofline_params_t cost;
    int roofline;             /* the roofline even where a calibration is shipped for the
                               * model, hw and tp (--roofline, or a roofline option given) */
    sim_client_t client;      /* client-side terms; NAN each: the serving profile's (with
                               * client metrics), else the cost file's, else 0 */
    const char *serving;      /* the serving profile (sim/serving.h): "vllm", "none" or a
                               * file; NULL: vllm for a model on a built-in GPU preset (or a
                               * cost file fitted for one), else none */
    const struct serving *serving_profile; /* one given directly (calibrate --serving's
                               * trials), in place of `serving` */
    int metrics;              /* SIM_METRICS_*: which side's latencies the run records */
    double client_timeout_s;  /* > 0: a request unfinished that long after its arrival is
                               * given up by its client and aborted by the server, as
                               * "client timeout" (a benchmark client's timeout) */
    int32_t replicas;         /* > 0: a cluster of this many replicas alike (0: one, and
                               * exactly the single-replica records) */
    const char *router_path;  /* NULL: the cluster file's, else round robin */
    const char *cluster_path; /* NULL, or a --cluster file of replica groups (sim/cluster.h),
                               * instead of replicas */
    lhost_limits_t limits;
    int progress;             /* progress line on stderr when it is a terminal */
    const volatile sig_atomic_t *interrupt; /* NULL, or a flag a signal handler sets */
    const char *version;
    int save_tokens;          /* write per-token rows (see above) */
    /* Prediction bands (analysis/band.h): cost_scale multiplies every step's time (the
     * GPU's pass and the serving engine's work; 1 otherwise), so a band's two runs move the
     * cost model by its own cross-validated error. band and band_err are the drivers'
     * request (sim, sweep, validate: --band[=E]), not read by sim_run: band_err 0 means the
     * width the run's cost model states (sim_result_t.band_err). */
    double cost_scale;
    int band;
    double band_err;
    int no_steps;             /* 1: no steps rows (a calibration's throwaway replays, which
                               * read only requests and tokens); the config says so */
    const char *config_extra; /* NULL or JSON members appended to the run's config object,
                               * e.g. "\"sweep\":{...}" (sweeps record their rate here) */
    sim_step_fn on_step;      /* optional hooks, see above */
    sim_final_fn on_final;
    void *hook_ud;
} sim_opts_t;

typedef struct {
    int64_t run_id;
    int64_t requests;         /* requests read from the trace */
    int64_t skipped;          /* trace rows skipped as failed requests */
    int64_t steps;
    int32_t num_blocks;       /* KV capacity used (replica 0's) */
    int32_t replicas;
    double wall_s;
    summary_t summary;        /* loaded back from the database at the end */
    int have_summary;
    int stopped;              /* a hook stopped the run */
    int setup_failed;         /* nothing ran and nothing was recorded (run_id -1) */
    int interrupted;          /* the interrupt flag ended the run */
    char calibration[320];    /* the cost model's provenance: the --cost file, a shipped
                               * "builtin:MODEL.HW.tpN", or "none: <why the roofline>" */
    char serving[64];         /* the serving profile's name ("none" when inactive) */
    char kv_tiers[512];       /* replica 0's KV tiers at the end: what each holds, took and
                               * gave ("" without tiers) */
    /* The half-width of this run's prediction band as a fraction of step time: the larger
     * of the cost model's cross-validated median step error (its cost file's
     * cv_median_err) and the serving profile's held-out step error (step_cv_err); NAN when
     * neither says (the roofline). band_src says where it came from. Also in the config
     * ("band_width"). */
    double band_err;
    char band_src[200];
    /* Things the run went through with that the caller should say (sim --max-model-len
     * past the model's context, a --rate-scale that made the trace one burst). */
#define SIM_MAX_WARNINGS 4
    char warning[SIM_MAX_WARNINGS][256];
    int n_warnings;
} sim_result_t;

void sim_opts_defaults(sim_opts_t *o);

/* 0 on a completed run; -1 with a message in err (the run, if it began, is marked failed;
 * res->setup_failed when it did not begin). */
int sim_run(const sim_opts_t *o, sim_result_t *res, char *err, size_t errlen);

/* The KV capacity in blocks for a model on hardware (see above); -1 with err when the
 * weights do not fit. draft may be NULL. m is one pipeline stage's shape (the model at pp
 * 1) on tp x dp devices: dp > 1 data-parallel ranks (sim/parallel.h) replicate all but the
 * routed experts, and a block lives on one rank's tp devices. */
int32_t sim_kv_blocks(const preset_model_t *m, const preset_model_t *draft,
                      const preset_hw_t *hw, int32_t tp, int32_t dp, double gpu_util,
                      int32_t block_size,
                      int32_t max_tokens, int32_t max_seqs, char *err, size_t errlen);

#endif

/* engine: trace replay on the real engine. Requests arrive at their trace times on the wall
 * clock, the shared scheduler core and a Lua policy plan every step (policies/replay.h, the
 * same path as the simulator), the forward pass runs the plan on a backend, and the measured
 * times go to the same SQLite records (runs.kind = 'engine').
 *
 * Invariants:
 *  - The KV pool holds exactly the blocks the scheduler core manages (plus a few scratch
 *    blocks for static batching's padding tokens, which are computed and thrown away): the
 *    engine never allocates KV on its own, so memory pressure and preemption are the core's.
 *  - A request's prompt is synthetic token ids of its trace length that depend only on (seed,
 *    request id), but for its shared prefix (from the trace's hash ids, engine_prompt_tokens_
 *    hashed): equal prefixes are equal tokens, with or without prefix caching; generation runs to the trace's output length, ignoring EOS (as vLLM's
 *    benchmark). Lengths may be clipped to fit small models (trace_opts.max_prompt,
 *    max_output); the records hold the clipped lengths and the run's trace column says so.
 *  - The run's config JSON holds everything needed to replay it: the scheduler's limits,
 *    the backend options, the model as given (model_spec) and the workload ("trace").
 *  - Sampling is seeded per request (seed, request id) and per output index, so outputs do
 *    not depend on batching; greedy outputs are identical under every policy.
 *  - Speculative steps verify drafts from a draft model (opts.draft, engine/draft.h: its
 *    passes run first in the step, its KV in the request's own blocks; sampled requests
 *    are verified by speculative sampling) or from the n-gram (prompt-lookup) proposer over
 *    the request's own tokens (a draft accepted while it equals the token the model samples
 *    at its position). Either keeps the output distribution exact; greedy outputs are the
 *    same as without speculation. The acceptance per draft position goes to the run's
 *    config ("spec_curve") at its end.
 *  - A failed run is marked failed with its message; unfinished requests become aborted.
 *    A configuration that cannot run (options, the model file, the backend, the policy,
 *    a trace without a request to replay) fails before the run row: nothing is recorded
 *    and engine_result_t.setup_failed says so.
 *  - interrupt: polled between steps and during idle waits; once non-zero (a signal's
 *    number) the run ends as failed with "interrupted by SIGINT at t=T s" (engine time);
 *    set during setup (a model loading), nothing is run or recorded.
 *  - live (`twinserve serve`, engine/live.h): the arrivals are a server's requests, taken
 *    at step boundaries with their own prompts, sampling and max_tokens (arrival = when
 *    the server received them); EOS, stop strings and clients gone end requests early
 *    (sched_finish_early, KV freed at once). The loop waits for arrivals until interrupted;
 *    interrupted with nothing in flight, the run ends as done.
 *
 * Ownership: engine_run borrows the options for the duration of the call. */
#ifndef TWIN_ENGINE_H
#define TWIN_ENGINE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "traces/summary.h"
#include "policies/lua_host.h"
#include "traces/trace.h"

typedef struct {
    const char *trace_path;
    trace_opts_t trace_opts;
    const char *policy_path;
    const char *const *sets;  /* "key=value" policy param overrides */
    int n_sets;
    const char *model;        /* .bin / .gguf path or dummy:PRESET */
    const char *draft;        /* speculation's proposer: NULL or "ngram" (the default), or a
                               * draft model, .bin / .gguf path or dummy:PRESET (draft.h) */
    const char *backend;      /* "cpu" (default) or "cuda" */
    int n_threads;            /* CPU threads, 0 = all cores */
    const char *dtype;        /* GPU weight type (NULL = backend default) */
    const char *weights;      /* bk_opts_t.weights: "native" (NULL) or "f32" */
    const char *kv_type;      /* bk_opts_t.kv_type: "f32" (NULL) or "f16" (CPU) */
    const char *policy_cost;  /* a cost file (`calibrate` of this engine's profile or runs)
                               * that prices steps for policies (s:step_cost, source
                               * "executor"); NULL: a fit of the recent steps (sched.h) */
    int batch_invariant;      /* bk_opts_t.batch_invariant: outputs independent of batching */
    int idle_sleep;           /* 1: idle waits sleep; 0 (default): they spin, and so do the
                               * backend's threads (keep_warm), because a core that sleeps
                               * comes back slow: on this VM a 256-token stories260K prefill
                               * after 100-500 ms idle took 15-24 ms instead of 12 */
    const char *db_path;      /* default twinserve.db */
    const char *run_name;
    uint64_t seed;            /* prompts, sampling, dummy weights, policy randomness */
    float temperature;        /* 0 = greedy */
    int32_t top_k;
    float top_p;
    int save_tokens;          /* one tokens row per output token, with its id */
    int32_t block_size;       /* 16 */
    int32_t max_tokens;       /* per-step token budget (2048) */
    int32_t max_seqs;         /* per-step sequences (64) */
    int32_t max_model_len;    /* 0: the model's context */
    int32_t max_output_tokens; /* > 0: every request's limit where the trace gives none;
                               * 0: the context left (sched_config_t) */
    int oracle_lengths;       /* policies see true output lengths (a research oracle) */
    int clip_to_context;      /* clip over-long requests to the context instead of rejecting
                               * them (sched_config_t), as Vidur does */
    int prefix_caching;       /* the core's prefix cache (sched_config_t): a request admitted
                               * with cached blocks computes from there, reading their KV */
    int32_t kv_blocks;        /* KV pool in blocks; 0: from kv_mem_gb */
    double kv_mem_gb;         /* 0: enough for max_seqs full contexts, at most 1/4 of free memory */
    double gpu_util;          /* > 0: the KV pool takes what this fraction of the device's
                               * memory leaves after weights and activations (the default,
                               * ENGINE_GPU_UTIL, on cuda when no kv_blocks/kv_mem_gb) */
    double watermark;         /* 0.01 */
    lhost_limits_t limits;
    int progress;
    const volatile sig_atomic_t *interrupt; /* NULL, or a flag a signal handler sets */
    const char *version;
    const char *config_extra; /* NULL or JSON members appended to the run's config object
                               * (--repeat records "experiment":{...} here) */
    struct live *live;        /* NULL: replay trace_path; else serve the live requests
                               * submitted to it (engine/live.h) until interrupted;
                               * trace_path, if set, is then only recorded in the config
                               * (the caller writes the served requests there) */
} engine_opts_t;

typedef struct {
    int64_t run_id;
    int64_t requests, skipped, steps;
    int32_t num_blocks;
    double wall_s;
    double step_s;            /* summed measured step time (forward passes) */
    double sched_s;           /* summed scheduler time (policy + core) */
    int64_t spec_proposed, spec_accepted;
    summary_t summary;
    int have_summary;
    int setup_failed;         /* nothing ran and nothing was recorded (run_id -1) */
    int interrupted;          /* the interrupt flag ended the run */
} engine_result_t;

void engine_opts_defaults(engine_opts_t *o);

/* 0 on a completed run; -1 with a message in err (the run, if it began, is marked failed;
 * res->setup_failed when it did not begin). */
int engine_run(const engine_opts_t *o, engine_result_t *res, char *err, size_t errlen);

/* The synthetic prompt of request `id`: n ids in [3, vocab), from (seed, id) only; with
 * hash ids (n_hash > 0, each covering hash_block tokens, as trace_req_t's), token i < n_hash *
 * hash_block is instead a function of (seed, hash_ids[i / hash_block], i % hash_block), so
 * requests with equal leading hash ids open with equal tokens, as the prefix cache assumes
 * (policies/prefix.h). */
void engine_prompt_tokens(uint64_t seed, int32_t id, int32_t vocab, int32_t *out, int32_t n);
void engine_prompt_tokens_hashed(uint64_t seed, int32_t id, const int64_t *hash_ids,
                                 int32_t n_hash, int32_t hash_block, int32_t vocab,
                                 int32_t *out, int32_t n);

#endif

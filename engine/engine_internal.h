/* engine_internal: the engine's state, shared by engine.c (the loop and the steps) and
 * engine_setup.c (model, backend, KV pool and the run's config). Not a public interface.
 *
 * Ownership: engine_t owns its backend, forward pass, draft, per-request token arrays and
 * step buffers; engine_run frees them on its one exit path. */
#ifndef TWIN_ENGINE_INTERNAL_H
#define TWIN_ENGINE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/draft.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "policies/replay.h"
#include "sim/presets.h"

/* Logits of the sampled rows are fp32 [n_sample][vocab]: their buffer is capped at this. */
#define ENGINE_LOGITS_BYTES (256.0 * 1024 * 1024)
#define ENGINE_GPU_UTIL 0.9   /* vLLM's default gpu_memory_utilization */

/* Per request: every known token (prompt, then output), then room for drafts. */
typedef struct {
    int32_t *toks;
    int32_t cap;
    int32_t n_prompt;
} ereq_t;

typedef struct {
    const engine_opts_t *o;
    replay_t rp;
    model_t *model;                  /* until its weights are on the backend */
    char model_source[512];
    preset_model_t shape;            /* the model's shape, for the run's config */
    int has_shape;
    backend_t *bk;
    fwd_t *fwd;
    int32_t vocab, max_model_len;
    int32_t num_blocks;              /* the core's blocks */
    int32_t scratch_base, scratch_n; /* padding's throwaway blocks, after the core's */
    int32_t max_sample;
    ereq_t **reqs;                   /* by request id (trace ids are 0-based, consecutive) */
    int64_t reqs_cap;
    /* the step's batch, host side: tokens [max_tokens], sequences [seq_cap] */
    int32_t *tokens, *pos, *seq_start, *seq_len, *bt_start, *block_table, *sample_rows, *ids;
    bk_sample_t *sample;
    int64_t bt_cap;
    int32_t seq_cap;
    int32_t *scratch_table;
    int32_t *accepted, *drafts_at;   /* per plan entry: accepted drafts; row of its drafts */
    int32_t entry_cap;
    double t0;
    double ready_s;                  /* since when the loop has had work: the end of the last
                                      * pass, or the wake-up after an idle wait (host_s) */
    int64_t steps;
    double step_s, sched_s;
    int64_t spec_proposed, spec_accepted;
    int64_t hashed_requests;         /* arrivals that named a shared prefix (prefix caching) */
    draft_t *draft;                  /* --draft FILE|dummy:PRESET; NULL: n-gram drafts */
    spec_curve_t curve;              /* per-position acceptance, to the run's config */
    cost_model_t *policy_cost;       /* o->policy_cost's model, or NULL */
    float *lp_rows;                  /* a live request's logits rows on the host, for its
                                      * log-probabilities [lp_cap] (grown on demand) */
    size_t lp_cap;
} engine_t;

#define FAIL(e, ...) replay_fail(&(e)->rp, __VA_ARGS__)

/* Model, backend, draft, KV pool and step buffers, from e->o; 0, or -1 with the run failed
 * (FAIL). hw_desc receives the run's hardware column. */
int engine_setup(engine_t *e, char *hw_desc, size_t hw_len);

/* The run's config JSON (malloc'd; NULL when out of memory): everything a replay needs. */
char *engine_config_json(const engine_t *e);

/* Grows *p to n int32s (contents kept); -1 with the run failed when out of memory. */
int engine_grow_i32(engine_t *e, int32_t **p, int64_t n);

#endif

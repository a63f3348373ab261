/* draft: the draft MODEL of speculative decoding on the engine (engine --draft FILE|dummy:
 * PRESET). A second model, on a second instance of the target's backend (a backend holds one
 * KV pool), with its own forward pass, proposes each speculating request's k drafts; the
 * target verifies them in its own pass (engine.c), by draft_verify.
 *
 * Per step, before the target's pass (draft_step): one pass over what the draft lacks of
 * every planned request (the prompt chunks the target computes this step, and the
 * positions a speculating request's draft is behind on: after a step that accepted all k
 * drafts, the last draft and the bonus token), sampling the first draft of each speculating
 * request; then k - 1 single-token passes batched over the requests that want more. This is
 * the work the simulator charges (sim/replica.c, sim_step_cost and sim_draft_advance).
 * Decodes without drafts skip the draft, which falls behind by their tokens and catches up
 * when the request speculates again.
 *
 * Invariants:
 *  - The draft's KV pool is indexed by the block ids the scheduler core hands out: one core
 *    block holds the target's and the draft's KV of its block_size tokens (the engine sizes
 *    the pool with both per-block byte counts, as sim_kv_blocks does), so the draft's KV is
 *    freed, preempted and shared by the prefix cache with the request's, with no accounting
 *    of its own. The draft never allocates KV.
 *  - What the draft holds of a request is tracked as a position: everything before it is the
 *    draft's valid KV. A request whose target computation went back (preempted, recomputed)
 *    goes back with it; a request first seen at a cached start trusts the cached blocks' draft
 *    KV (the draft runs every prompt chunk, so a cached prompt block holds both).
 *  - Drafts are drawn from the draft's distribution q under the request's own sampling
 *    parameters: greedy requests take the argmax, sampled ones a draw whose uniform is a
 *    function of (request stream, output index, SPEC_U_DRAFT) only, and q is kept for
 *    verification. Stale draft KV can only lower acceptance, never change what the target
 *    emits: verification (spec.h) is exact for any q.
 *  - The draft's vocabulary must equal the target's, and its context cover the target's
 *    max_model_len (refused at draft_open with a message).
 *
 * Ownership: draft_open returns an object owned by the caller (draft_free). Sequences given
 * to draft_step are borrowed until the step's last draft_verify. */
#ifndef TWIN_DRAFT_H
#define TWIN_DRAFT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "policies/sched.h"
#include "sim/presets.h"

typedef struct draft draft_t;

typedef struct {
    const char *spec;        /* FILE (.bin / .gguf) or dummy:PRESET */
    const char *backend;     /* the target's backend name */
    bk_opts_t bk;            /* the target's backend options (the CPU draft runs on the
                              * calling thread alone: see draft.c) */
    uint64_t seed;           /* dummy weights */
    int32_t vocab;           /* the target's */
    int32_t max_model_len;   /* the target's context in this run */
    int32_t max_tokens;      /* the target's step budget */
    int32_t max_seqs;
    int32_t block_size;
} draft_opts_t;

/* One request of the step as the draft sees it (one per plan entry, in plan order). */
typedef struct {
    int32_t req_id;
    int32_t *toks;           /* known tokens [0, end); drafts are written at [end, end + k) */
    int32_t start;           /* the target's first position this step */
    int32_t end;             /* its known tokens after the step's computation */
    int32_t k;               /* drafts wanted (0: none) */
    int32_t prefill;         /* a prompt or recompute chunk: the draft computes it too */
    const int32_t *blocks;   /* the request's block table */
    int32_t num_blocks;
    const bk_sample_t *sample; /* [k] the request's sampling at drafts' output indices */
} draft_seq_t;

/* 0, or -1 with a message in err naming the draft (no file, a vocabulary other than the
 * target's, a context shorter than the run's). */
int draft_open(const draft_opts_t *o, draft_t **out, char *err, size_t errlen);
void draft_free(draft_t *d);
const char *draft_errmsg(const draft_t *d);
const char *draft_source(const draft_t *d);   /* the draft model as loaded */
/* The draft's shape as a simulator preset (the run's config holds it, so validate can
 * cost the draft as the simulator's speculative.lua does). */
void draft_shape(draft_t *d, preset_model_t *out);

/* The draft's KV bytes per core block (all its layers). */
size_t draft_kv_block_bytes(draft_t *d);
/* Reserves the pool: n_blocks ids, the target's core blocks and scratch. 0 or -1. */
int draft_kv_init(draft_t *d, int32_t n_blocks);
/* One untimed pass over `n` tokens of the given block table (scratch blocks). 0 or -1. */
int draft_warm_up(draft_t *d, const int32_t *table, int32_t n_blocks, int32_t n);

/* The step's draft passes over seqs[0..n): writes each speculating request's drafts. 0 or
 * -1 (draft_errmsg). */
int draft_step(draft_t *d, const draft_seq_t *seqs, int32_t n);

/* Where draft_plan finds a request's tokens and sampling (the engine's requests). */
typedef struct {
    void *ud;
    /* the request's known tokens, with room for `room` in all; NULL when there is none
     * (the callback has recorded why) */
    int32_t *(*tokens)(void *ud, int32_t req_id, int64_t room);
    bk_sample_t (*sample)(void *ud, int32_t req_id, int32_t idx);   /* at output index idx */
} draft_src_t;

/* draft_step over a scheduler plan: one sequence per entry, in plan order, so that
 * draft_verify takes the entry's index; a decode's drafts are sampled at the request's
 * output indices. 0, or -1 (draft_errmsg; empty when src->tokens failed). */
int draft_plan(draft_t *d, const sched_plan_t *p, const draft_src_t *src);

/* Verifies seqs[i]'s drafts (draft_step's, at toks[end..end + k)) against the target's last
 * pass: `row0` is the target's sampled row at the last known token (rows row0 .. row0 + k
 * hold the draft positions and one more), `ids` the target's draws at those rows, and
 * `sample` the request's sampling at them. Greedy: drafts kept while they equal the target's
 * argmax. Sampled: speculative sampling with p from the target's logits and q kept from the
 * draft (spec_verify). Writes the emitted tokens (accepted drafts, then one) to *emitted
 * (the draft's buffer, valid until the next call) and returns the number of accepted
 * drafts; -1 with a message. Advances the draft's position for the request. */
int32_t draft_verify(draft_t *d, int32_t i, fwd_t *target, int32_t row0, const int32_t *ids,
                     const bk_sample_t *sample, const int32_t **emitted);

/* The request has ended: its position is forgotten. */
void draft_forget(draft_t *d, int32_t req_id);

#endif

/* profile (engine side): times real forward passes of the engine over a grid of batch
 * shapes and fills a profile_t (sim/profile.h, the file format) that `twinserve calibrate`
 * fits the simulator's cost models to; `twinserve profile` (cli/cmd_profile.c) writes it.
 *
 * The grid (PROFILE_GRID_DEFAULT), for a model of context S, max_seqs M, max_tokens T:
 *  - decode: B in {1, 2, 4, ..., M} sequences, each one token after c cached ones, at four
 *    contexts c log-spaced from 16 to S - 16 (multiples of 16);
 *  - prefill: one chunk of n in {16, 32, ..., T} tokens at context 0 (a whole prompt, its
 *    last row sampled) and at the third context (a middle chunk, nothing sampled),
 *    n + c <= S;
 *  - mixed: B in {1, 8, 32} decodes at the third context plus one whole prompt of
 *    {32, 128, 512} tokens (sampled).
 * PROFILE_GRID_QUICK is a handful of small points of each kind, for tests.
 * Every point keeps its sequences' KV in distinct blocks (shared blocks would sit in cache
 * and undercount attention's memory traffic); the KV pool is the largest point's need,
 * within a quarter of the backend's free memory: points that do not fit are skipped, with
 * a note. A point's features come from fwd_batch_features, the engine's own formula.
 *
 * Timing: one un-timed warm-up pass of every point, then the reps in round robin (rep 1 of
 * every point, then rep 2, ...) so that a slow moment of a shared machine spreads over many
 * points. A point whose warm-up took longer than PROFILE_BIG_S gets fewer reps (at least
 * PROFILE_MIN_REPS) so that the default grid stays within minutes; the row's reps column
 * says how many. A point shorter than PROFILE_PREPASS_S runs once more, untimed, right
 * before each timed pass: in a replay a step mostly follows one of its own shape (decodes
 * beside decodes), with the model's weights and its K/V in cache, and a short pass timed
 * after the previous point of the round (a large prefill, say) ran 30% slower than the
 * engine's own decode steps (stories260K). Each pass is timed on a monotonic clock around
 * fwd_step, which returns the sampled ids, so the pass is complete when it returns (on a
 * GPU too). The backend's roofs
 * are measured before and after the grid.
 *
 * Host phase (host_policy given, run first so that a bad policy fails at once): a saturated
 * replay (PROFILE_HOST_REQUESTS requests at time 0, prompts of 16..PROFILE_HOST_PROMPT
 * tokens, outputs of 8..64) on engine_run with a temporary trace and database (both
 * removed), whose steps' host_s (the CPU-side time before each pass) become one kind=host
 * row per pass_seqs, after the grid's rows.
 *
 * Ownership: profile_run borrows the options for the call and fills `out` (the caller
 * frees it with profile_free, also after a failure). */
#ifndef TWIN_ENGINE_PROFILE_H
#define TWIN_ENGINE_PROFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/profile.h"

enum { PROFILE_GRID_DEFAULT = 0, PROFILE_GRID_QUICK = 1 };

#define PROFILE_BIG_S 0.25        /* a warm-up pass longer than this trims the point's reps */
#define PROFILE_MIN_REPS 3
#define PROFILE_PREPASS_S 0.02    /* a point shorter than this is run untimed before each rep */
#define PROFILE_HOST_REQUESTS 200
#define PROFILE_HOST_PROMPT 128   /* the replay's longest prompt (at most half the context):
                                   * a step's host time hardly depends on prompt lengths,
                                   * while the prefills are most of the replay's time */

typedef struct {
    const char *model;        /* .bin / .gguf path or dummy:PRESET (opened shape-only) */
    const char *backend;      /* "cpu" (default) or "cuda" */
    const char *dtype;        /* GPU weight type; NULL: the backend's default */
    const char *kv_type;      /* CPU KV cache elements, bk_opts_t.kv_type; NULL: f32 */
    int n_threads;            /* CPU threads, 0 = all cores */
    int reps;                 /* timed passes per point (5) */
    int32_t max_seqs;         /* 64, the engine's default */
    int32_t max_tokens;       /* 2048, the engine's default */
    int grid;                 /* PROFILE_GRID_* */
    uint64_t seed;            /* dummy weights, the host phase's trace and prompts */
    const char *host_policy;  /* the host phase's policy; NULL: no host phase */
    const char *host_skip;    /* with host_policy NULL: why (the header's host line) */
    int progress;             /* a progress line on stderr */
    FILE *notes;              /* skipped points and such, as "twinserve profile: note: ..."
                               * lines; NULL: silent (they are in the header anyway) */
    const char *version;
} profile_opts_t;

typedef struct {
    int points, skipped;      /* timed forward-pass points; points left out (memory) */
    int host_rows;
    int64_t host_steps;
    double grid_s, host_s;    /* wall seconds of the grid and of the host phase */
    double kv_gb;             /* the KV pool reserved for the grid */
} profile_stats_t;

void profile_opts_defaults(profile_opts_t *o);

/* 0, or -1 with a message naming the model (or the policy) in err. */
int profile_run(const profile_opts_t *o, profile_t *out, profile_stats_t *st, char *err,
                size_t errlen);

#endif

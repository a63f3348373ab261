/* validate_internal: what validate.c (engine runs) and validate_measured.c (measured runs,
 * analysis/import.h) share. Nothing else includes this header.
 *
 * Ownership: as validate.h; db connections are the caller's. */
#ifndef TWIN_VALIDATE_INTERNAL_H
#define TWIN_VALIDATE_INTERNAL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/validate.h"
#include "sim/errf.h"
#include "sim/presets.h"
#include "traces/trace.h"

struct sqlite3;
struct sqlite3_stmt;

/* Everything a replay of an engine run needs, from its row and its config. */
typedef struct {
    int64_t id;
    char name[256];
    char trace[PATH_MAX];
    trace_opts_t topts;
    char policy[PATH_MAX];
    char **sets;                 /* "key=value" from the run's effective params */
    int n_sets;
    uint64_t seed;
    int32_t block_size, max_tokens, max_seqs, max_model_len, num_blocks;
    double watermark;
    preset_model_t shape;
    int save_tokens;
    /* the engine's own options, for repeats */
    char model_spec[PATH_MAX], backend[32], dtype[16];
    char weights[16], kv_type[8];   /* "" in runs recorded before the options existed */
    char policy_cost[4096];         /* engine --policy-cost, "" when none */
    int threads, batch_invariant;
    double temperature, top_p;
    int32_t top_k;
    /* what the policy saw of output lengths: replayed as it was (a run recorded before
     * the option existed showed policies the true lengths) */
    int oracle_lengths;
    int clip_to_context;
    int prefix_caching;     /* the engine run reused prefix KV: the replay must too */
    int32_t max_output_tokens;
    /* a speculative run with a draft model (engine --draft): its shape and the acceptance
     * it measured (the pooled alpha of its spec_curve) replace the policy's draft and alpha */
    int draft;
    char draft_spec[PATH_MAX];
    preset_model_t draft_shape;
    double alpha;
} workload_t;

/* The replay's workload of engine or serve run id in the database at path
 * (validate_workload.c): its trace, policy and params, limits, model and draft shapes. 0, or
 * -1 with a message (a run that cannot be replayed says why). */
int validate_load_workload(struct sqlite3 *db, const char *path, int64_t id, workload_t *w,
                           char *err, size_t errlen);
void validate_workload_free(workload_t *w);
/* Column col of st as text ("" for NULL) into dst[len]. */
void validate_copy_text(char *dst, size_t len, struct sqlite3_stmt *st, int col);
/* *st = sql (with ?1 = id) prepared on db and stepped to run id's row: 0, or -1 with a
 * message naming path (*st may then still need finalizing). */
int validate_run_row(struct sqlite3 *db, const char *path, const char *sql, int64_t id,
                     struct sqlite3_stmt **st, char *err, size_t errlen);

/* Runs the replay so for r, as every path does: the band side's step-time factor applied
 * (o->cost_scale), r->sim_id set, and what the replay's cost model states of its own error
 * kept on r. 0, or -1 with "the simulated replay failed: ..."; *res filled either way. */
int validate_simulate(const validate_opts_t *o, sim_opts_t *so, validate_result_t *r,
                      sim_result_t *res, char *err, size_t errlen);

/* A temporary plain trace for a measured run's replay: $TMPDIR/twinserve-replay-XXXXXX.csv
 * (TMPDIR unset: /tmp), its path in path[len] (the caller unlinks it; "" when none was
 * made). The open file, or NULL with a message. */
FILE *validate_temp_trace(char *path, size_t len, char *err, size_t errlen);

/* Fills r's metrics (and MAPE) from the measured runs against the simulated one.
 * requests_only leaves out what only our engine measures (queueing delay, preemptions,
 * steps). 0, or -1 with a message. */
int validate_compare_runs(struct sqlite3 *db, const int64_t *meas_ids, int n_meas,
                          int64_t sim_id, int requests_only, validate_result_t *r, char *err,
                          size_t errlen);

/* Run id's kind ("sim", "engine", "measured"; "" when there is no such run) and name.
 * 0, or -1 with a message. */
int validate_run_kind(struct sqlite3 *db, int64_t id, char *kind, size_t klen, char *name,
                      size_t nlen, char *err, size_t errlen);

/* A measured run with load stages, as an inference-perf import records one: 1 or 0. */
int validate_ip_is(struct sqlite3 *db, int64_t id);
/* The whole of validate_run for such a run (validate_ip.c). */
int validate_ip(const validate_opts_t *o, int64_t id, validate_result_t *r, char *err,
                size_t errlen);

/* The whole of validate_run for a measured run (validate_measured.c). */
int validate_measured(const validate_opts_t *o, int64_t id, validate_result_t *r, char *err,
                      size_t errlen);

#endif

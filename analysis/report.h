/* report: one run's full metrics from a twinserve database (simulator and engine alike):
 * the summary (traces/summary.h) plus inter-token latency, SLO attainment and goodput,
 * KV utilisation and batch size over time.
 *
 * CONTRACT (other modules rely on these names; implementation in analysis/report.c):
 *  - SLOs are upper bounds in seconds on a request's TTFT, TPOT and E2E; a bound <= 0 or NAN
 *    is not set. A request meets the SLOs when it finished and every set bound holds (a
 *    NULL TPOT, for one-token outputs, meets a TPOT bound). Rejected and aborted requests
 *    never meet them.
 *  - attainment = requests meeting every set SLO / all requests of the run;
 *    goodput = requests meeting every set SLO / makespan (req/s), as vLLM's benchmark and
 *    DistServe define it. Both NAN when no SLO is set.
 *
 *  - KV utilisation (kv_used / kv_total, steps with kv_total > 0) and batch size (num_seqs)
 *    are over time: each step weighs by its duration dur_s (all steps weigh alike when no
 *    step has a positive duration). Their p50/p99 are weighted quantiles without
 *    interpolation: the smallest value v such that the steps with values <= v cover at least
 *    that share of the time. n == 0 (all NAN) when the run has no such step.
 *  - Speculative decoding (runs that verified drafts; report_spec_t): the acceptance rate is
 *    the run's accepted drafts over its proposed drafts (requests' spec_accepted and
 *    spec_proposed, pooled); tokens per step is the mean tokens a decoding request emits
 *    per step it decodes in: 1 + accepted / decode steps, where the decode steps (a decoding
 *    request in one step, whatever its drafts) are the steps' decode_tokens (1 + k each)
 *    less the drafts proposed. Without drafts both are NAN and no line is printed.
 *  - ITL: the gaps between consecutive t_s of one request's tokens ordered by idx, from the
 *    tokens table (pooled over requests); tokens sharing a t_s (one speculative step) are one
 *    emission and add no zero gap, as vLLM's per-chunk ITL. Latency percentiles are
 *    numpy-linear (stats.h).
 *
 * Ownership: report_t is a plain value; nothing to free. The printers write to a caller's
 * FILE and keep nothing. */
#ifndef TWIN_REPORT_H
#define TWIN_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report_replicas.h"
#include "traces/summary.h"

struct sqlite3;

typedef struct {
    double ttft_s, tpot_s, e2e_s;   /* <= 0 or NAN: not set */
} report_slo_t;

/* A quantity over time (see above); every field but n is NAN when n == 0. */
typedef struct {
    size_t n;                       /* steps counted */
    double mean, p50, p99, max;
} report_tw_t;

/* A run's speculative decoding (see above). */
typedef struct {
    int64_t proposed, accepted;     /* drafts, over the run's requests */
    int64_t decode_steps;           /* decoding request-steps: sum(decode_tokens) - proposed */
    double acceptance;              /* accepted / proposed; NAN without drafts */
    double tokens_per_step;         /* 1 + accepted / decode_steps; NAN without drafts */
} report_spec_t;

typedef struct {
    summary_t base;                 /* counts, throughput, ttft/tpot/e2e/queue distributions */
    stats_dist_t itl;               /* from the tokens table; n == 0 when it has no rows */
    int has_slo;
    report_slo_t slo;
    int64_t slo_met;                /* requests meeting every set SLO */
    double attainment;              /* fraction, NAN when no SLO */
    double goodput;                 /* req/s, NAN when no SLO */
    report_tw_t kv_util;            /* fraction of KV blocks in use, over time */
    report_tw_t batch;              /* sequences per step, over time */
    report_spec_t spec;             /* proposed == 0: no speculative decoding */
    report_replicas_t replicas;     /* a cluster run's per replica (n <= 1: one replica) */
    /* more fields may follow */
} report_t;

/* "ttft=0.5,tpot=0.05,e2e=10" (seconds; a suffix "ms" is accepted). -1 with a message. */
int report_parse_slo(const char *spec, report_slo_t *slo, char *err, size_t errlen);

/* slo may be NULL. 0, or -1 with a message in err. */
int report_load(struct sqlite3 *db, int64_t run_id, const report_slo_t *slo, report_t *out,
                char *err, size_t errlen);

/* As report_load, but reads only the requests and runs tables: base and the SLO figures
 * (has_slo, slo, slo_met, attainment, goodput), the same values report_load gives. The
 * tokens and steps tables are not read: itl, kv_util, batch and spec are left empty (n == 0
 * or 0, the rest NAN). For callers that need no more, such as sweep, over many runs. */
int report_load_summary(struct sqlite3 *db, int64_t run_id, const report_slo_t *slo,
                        report_t *out, char *err, size_t errlen);

/* The run's speculative figures from its requests and steps tables (all zero and NAN when
 * it verified no drafts). 0, or -1 with a message. */
int report_load_spec(struct sqlite3 *db, int64_t run_id, report_spec_t *out, char *err,
                     size_t errlen);

/* One gap between successive token emissions of a request, ending at t (s). */
typedef struct {
    double t, gap;
    int64_t req;
} report_gap_t;

/* The run's gaps between token emissions (ITL), ordered by request then token: tokens
 * sharing a t_s (a speculative step's) are one emission, and a token without a time breaks
 * the chain. *out is malloc'ed (the caller frees it; NULL when *n is 0 may also be freed).
 * 0, or -1 with a message. */
int report_read_gaps(struct sqlite3 *db, int64_t run_id, report_gap_t **out, size_t *n,
                     char *err, size_t errlen);

/* One screen for humans: summary_print, then ITL, SLOs, KV utilisation and batch size, and
 * the speculative figures of a run that verified drafts. */
void report_print(FILE *f, const report_t *r);

/* One JSON object (see docs/analysis.md), a newline at the end; NAN is written as null. */
void report_json(FILE *f, const report_t *r);

/* JSON pieces shared with compare: a number (NAN and infinities as null, 17 significant
 * digits so values read back exactly), a quoted, escaped string, and `"key": number`
 * followed by the text after (e.g. ", "). key is written as is (a fixed name). */
void report_json_num(FILE *f, double v);
void report_json_str(FILE *f, const char *s);
void report_json_key_num(FILE *f, const char *key, double v, const char *after);

#endif

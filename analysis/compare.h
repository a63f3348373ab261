/* compare: A/B comparison of two runs (from one database or two) with bootstrap confidence
 * intervals and a plain verdict per metric.
 *
 * Method (docs/analysis.md, "## compare"):
 *  - For each latency metric, the statistic of A and of B over the runs' requests (mean, or
 *    a numpy-linear percentile as in stats.h), the difference B - A and 100 (B - A) / A.
 *    Throughput (summary.h) is one figure per run: shown with its difference, but without a
 *    CI or verdict, since redrawing requests cannot vary the arrival process or makespan.
 *  - A percentile-method bootstrap CI of the difference: `resamples` times, requests are drawn
 *    with replacement and the statistic recomputed; the CI is the (1-level)/2 and
 *    (1+level)/2 quantiles of the resampled differences. Resampling uses counts per request
 *    (a multinomial draw), so a percentile costs O(n) per resample instead of a sort.
 *  - Paired when both runs replayed the same trace: the same runs.trace text and the same
 *    request ids with the same arrival, prompt and output lengths. Then one draw of request
 *    ids serves both runs (the request's A and B values stay together); otherwise A and B
 *    are resampled independently.
 *  - Missing values (NAN: a TTFT of a rejected request, a one-token TPOT) are excluded from
 *    a statistic; a resample in which either side has no value is dropped (counted).
 *  - Deterministic: the same inputs, seed and resample count give the same result. Every
 *    metric uses the same seed, so all metrics see the same request draws (resampled
 *    jointly) and adding a metric moves no other. compare_runs draws each resample's counts
 *    once and evaluates every metric from them (each column sorted, counted and summed once
 *    per resample for its mean and percentiles); each metric's estimate is bit for bit what
 *    compare_bootstrap gives for it alone with the same seed.
 *  - Verdict for B against A: when the CI includes 0, "no significant difference"; when it
 *    excludes 0 but |B - A| < min_effect * |A| (1% by default), "no meaningful difference";
 *    otherwise "better" if the difference goes the good way (lower latency, higher
 *    throughput, more requests finished), else "worse"; "n/a" when there is no CI.
 *  - Experiments (analysis/experiment.h): a side may be N runs of one configuration. The
 *    bootstrap is then hierarchical: each resample draws the side's runs with replacement,
 *    then requests within each drawn run (or, when paired, one draw of request ids shared by
 *    every run of both sides), and pools them; a statistic is over the pooled requests. So
 *    the interval carries run-to-run noise. With one run per side the draws are exactly the
 *    single-run bootstrap's.
 *  - Copies are one run: an experiment whose runs are identical (experiment_identical: a
 *    trace replay's seeds change nothing) counts as its first run alone, and the printout
 *    says so; otherwise its copies would give run-level figures (throughput) an interval of
 *    zero width.
 *  - Paired by run (COMPARE_PAIR_RUN): when the two sides hold as many runs, and run k of A
 *    and run k of B replayed the same requests though the runs of a side differ (windows of
 *    a trace, `--repeat windows:N`), each resample draws run indices with replacement for
 *    both sides at once, then one draw of request positions per drawn index shared by A's
 *    and B's run k: the interval carries the variation between windows and keeps each
 *    request's A and B together. The latency rows of run k then cover the requests that
 *    finished in both runs k.
 *  - Counts are not negligible: the minimum effect does not apply to the "finished" row, so
 *    a side that sheds requests (a policy that rejects on purpose) is never called "no
 *    meaningful difference" when the interval excludes 0.
 *  - Latency rows cover finished requests only. When paired, they cover the requests that
 *    finished in every run of both sides (the note says how many); unpaired, each side's
 *    own finished requests. Every comparison carries finished, rejected and aborted counts
 *    and a "finished" row (the fraction of requests finished, with its CI); a latency
 *    verdict won by the side that finished the smaller fraction carries a caveat.
 *  - With an SLO: "SLO attainment" (requests meeting every SLO / all requests, per
 *    request, so it gets a CI) and "goodput" (per run, requests meeting every SLO /
 *    makespan; pooled over an experiment's runs weighting each run by its requests).
 *  - Throughput rows get a CI only when both sides have >= 2 runs (redrawing requests
 *    cannot vary one run's makespan); an experiment's throughput is its runs' figures
 *    weighted by their requests.
 *  - When a run of either side verified speculative drafts: "spec accept" (accepted /
 *    proposed drafts) and "tokens/step" (per decoding request-step), report.h's figures.
 *    The acceptance rate is the ratio of the drawn requests' accepted and proposed drafts
 *    (every request, whatever its status), so it is resampled like the latencies, with a
 *    CI for single runs; a draw without drafts on a side is dropped. Tokens per step needs
 *    the steps' decode counts, which no request holds: a per-run figure as throughput is,
 *    a CI when both sides have >= 2 runs (a run without drafts has none, left out).
 *  - When a side is a cluster run, or the prefix cache served tokens on either side:
 *    "prefix hit" (cached over prompt tokens of the drawn requests, resampled like spec
 *    accept) and, for clusters, "imbalance" (the busiest replica's held request-time, the
 *    sum of its finished requests' E2E, over the mean across its mixed and decode
 *    replicas; 1 even, lower better), one figure per run as throughput.
 *
 * Ownership: compare_result_t is a plain value (fixed arrays); nothing to free. The
 * bootstrap core keeps no pointer it is given. Errors go to the caller's err[errlen]. */
#ifndef TWIN_COMPARE_H
#define TWIN_COMPARE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"
#include "traces/summary.h"

struct sqlite3;

#define COMPARE_DEFAULT_SEED 20240611u
#define COMPARE_DEFAULT_RESAMPLES 2000
#define COMPARE_DEFAULT_LEVEL 0.95
#define COMPARE_DEFAULT_MIN_EFFECT 0.01
#define COMPARE_MAX_RUNS 1000     /* runs per side */

/* ---------------------------------------------------------------- the bootstrap core */

/* How the two sides' requests pair in the bootstrap (see above). */
enum { COMPARE_PAIR_NONE = 0, COMPARE_PAIR_REQUEST = 1, COMPARE_PAIR_RUN = 2 };

typedef enum { COMPARE_MEAN = 0, COMPARE_PCTL } compare_stat_kind_t;

typedef struct {
    compare_stat_kind_t kind;
    double p;                 /* COMPARE_PCTL: percentile in [0, 100] */
} compare_stat_t;

typedef struct {
    double a, b;              /* the statistic of A and of B over all their values */
    double diff;              /* b - a */
    double rel_pct;           /* 100 * diff / a; NAN when a == 0 */
    double lo, hi;            /* CI of diff; NAN when no resample had values on both sides */
    int resamples;            /* requested */
    int dropped;              /* resamples with no value on a side */
} compare_est_t;

/* The statistic of x[0..n) (NAN entries excluded); NAN when no value is left. */
double compare_stat(compare_stat_t stat, const double *x, size_t n);

/* Bootstrap of stat(B) - stat(A). paired: na == nb and a[i], b[i] belong to one request.
 * level in (0, 1), resamples >= 1. 0, or -1 with a message (bad arguments, no memory). */
int compare_bootstrap(const double *a, size_t na, const double *b, size_t nb, int paired,
                      compare_stat_t stat, int resamples, uint64_t seed, double level,
                      compare_est_t *out, char *err, size_t errlen);

/* The hierarchical bootstrap of stat(B) - stat(A) over runs: side A is ra runs, run r's
 * values a[off_a[r] .. off_a[r + 1]) (off_a[0] = 0, off_a[ra] = na); likewise B. Each
 * resample draws ra runs of A with replacement (none when ra == 1), then, for each drawn
 * run, its requests with replacement; B the same; the statistic is over the pooled draws.
 * paired: every run of both sides holds the same m requests in the same order; one draw of
 * request positions then serves every run of both sides (runs are still drawn per side).
 * One run per side gives exactly compare_bootstrap. 0, or -1 with a message. */
int compare_bootstrap_runs(const double *a, const size_t *off_a, size_t ra, const double *b,
                           const size_t *off_b, size_t rb, int paired, compare_stat_t stat,
                           int resamples, uint64_t seed, double level, compare_est_t *out,
                           char *err, size_t errlen);

typedef enum {
    COMPARE_NA = 0,           /* no CI */
    COMPARE_SAME,             /* the CI includes 0 */
    COMPARE_BETTER,           /* B better than A */
    COMPARE_WORSE,            /* B worse than A */
    COMPARE_NEGLIGIBLE        /* the CI excludes 0, but |B - A| < min_effect * |A| */
} compare_verdict_t;

/* The verdict without a minimum effect (min_effect 0). */
compare_verdict_t compare_verdict(const compare_est_t *e, int higher_is_better);
/* min_effect >= 0, a fraction of |A|: a difference smaller than that is no meaningful one,
 * however narrow its interval. */
compare_verdict_t compare_verdict_min(const compare_est_t *e, int higher_is_better,
                                      double min_effect);
const char *compare_verdict_name(compare_verdict_t v);  /* "better", ..., "n/a" */

/* ---------------------------------------------------------------- two runs */

#define COMPARE_MAX_METRICS 24

typedef struct {
    char name[32];            /* e.g. "ttft_mean", "e2e_p99", "out_tok_per_s" */
    char label[32];           /* e.g. "TTFT mean" */
    char unit[8];             /* "s", "req/s", "tok/s" */
    int higher_is_better;
    int per_run;              /* one figure per run (throughput, tokens/step, imbalance):
                               * an interval only when both sides have >= 2 runs */
    compare_est_t est;
    compare_verdict_t verdict;  /* COMPARE_NA for throughput (no CI) */
    char caveat[96];          /* "" or why the verdict needs a second look (the winner
                               * finished fewer of its requests) */
} compare_metric_t;

/* One side: an experiment of runs, or one plain run. Counts are summed over the runs. */
typedef struct {
    char experiment[128];     /* "" for a plain run */
    size_t runs;
    size_t identical;         /* > 0: the experiment's that many runs were copies, counted
                               * as its first run alone (runs is then 1) */
    int64_t ids[COMPARE_MAX_RUNS];
    int64_t requests, finished, rejected, aborted;
} compare_side_t;

typedef struct {
    char path_a[512], path_b[512];   /* the databases, as given */
    summary_t a, b;           /* the first run of each side */
    compare_side_t sa, sb;
    int paired;               /* COMPARE_PAIR_NONE, _REQUEST or _RUN */
    char pairing[256];        /* why paired or not, one line */
    char latency[256];        /* which requests the latency rows cover, one line */
    double min_effect;
    int has_slo;
    report_slo_t slo;
    uint64_t seed;
    int resamples;
    double level;
    size_t n_metrics;
    compare_metric_t m[COMPARE_MAX_METRICS];
} compare_result_t;

typedef struct {
    uint64_t seed;            /* COMPARE_DEFAULT_SEED */
    int resamples;            /* COMPARE_DEFAULT_RESAMPLES */
    double level;             /* COMPARE_DEFAULT_LEVEL */
    double min_effect;        /* COMPARE_DEFAULT_MIN_EFFECT: a fraction of A's value */
    int has_slo;              /* 0; 1: slo's set bounds give attainment and goodput rows */
    report_slo_t slo;
} compare_opts_t;

void compare_opts_default(compare_opts_t *o);

/* Compares run id_b of db_b against run id_a of db_a (db_b may be db_a). Paths are only
 * copied into the result for printing. A run without requests is an error naming it.
 * 0, or -1 with a message. */
int compare_runs(struct sqlite3 *db_a, const char *path_a, int64_t id_a, struct sqlite3 *db_b,
                 const char *path_b, int64_t id_b, const compare_opts_t *o,
                 compare_result_t *out, char *err, size_t errlen);

/* One side of compare_experiments: the runs ids[0..n) of db (n <= COMPARE_MAX_RUNS), named
 * experiment (NULL for a plain run). Borrowed for the call. */
typedef struct {
    struct sqlite3 *db;
    const char *path;
    const char *experiment;
    const int64_t *ids;
    size_t n;
} compare_input_t;

/* Compares experiment b against experiment a (compare_runs is one run per side). */
int compare_experiments(const compare_input_t *a, const compare_input_t *b,
                        const compare_opts_t *o, compare_result_t *out, char *err,
                        size_t errlen);

/* A side-by-side table for humans, and one JSON object (NAN as null). */
void compare_print(FILE *f, const compare_result_t *r);
void compare_json(FILE *f, const compare_result_t *r);

#endif

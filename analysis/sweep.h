/* sweep: the simulator over request rates, in parallel processes, into one database; and
 * the capacity search (the highest rate whose SLO attainment stays at or above a target).
 *
 * Invariants:
 *  - Rates are requests per second: each point replays the trace with rate_scale = rate /
 *    the trace's own mean rate, (n - 1) / (last arrival - first arrival) over the replayed
 *    window (as `twinserve trace info` prints it).
 *  - Each point runs sim_run in a forked child that writes its own temporary database; the
 *    parent alone writes the target, merging the children's runs in the order the rates were
 *    given (so -j N gives the same records and run ids as -j 1, only faster). The parent
 *    holds no database connection while children run.
 *  - Every run of a sweep is named PREFIX@RATErps and its config carries
 *    "sweep":{"name":PREFIX,"rate_rps":RATE,"scale":SCALE} so plot can find the curve
 *    (json_extract(config, '$.sweep.rate_rps')).
 *  - A point whose simulation failed is still merged (its run marked failed, as sim records
 *    it) and reported with ok = 0; it counts as missing the SLO in a capacity search.
 *  - --emit-jobs (sweep_emit_jobs) writes the points as `twinserve sim` commands with the
 *    same names, seeds, scales and config tags instead; `twinserve merge` (traces/merge.h)
 *    gathers their databases, in point order, into what sweep_run would have recorded.
 *  - Capacity: a rate passes when attainment >= target. The search keeps lo = the highest
 *    passing rate below hi = the lowest failing one, and narrows [lo, hi] (bisection, or
 *    j + 1 equal parts with -j j) until hi - lo <= tol * hi.
 *  - Attainment (report.h) is the requests that finished meeting every given SLO bound over
 *    all requests of the run: a rejected or aborted request counts as missing. Rejections
 *    that do not depend on the load (sweep_attainment_bound) cap it at every rate, so the
 *    search stops at the first point where that cap is below the target (infeasible).
 *
 * Ownership: sweep_t is a plain value filled by the caller; its strings and the sim options
 * template are borrowed for the calls. Point arrays belong to the caller. Errors go to the
 * caller's err buffer. */
#ifndef TWIN_SWEEP_H
#define TWIN_SWEEP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"
#include "sim/sim.h"

typedef struct {
    sim_opts_t sim;          /* template: db_path is the target; run_name and the rate
                              * scale are set per point */
    const char *prefix;      /* NULL: "sweep-<policy stem>", made unique in the database */
    int jobs;                /* parallel children (>= 1) */
    report_slo_t slo;        /* used for attainment and goodput */
    int has_slo;
    double base_rate;        /* req/s of the trace at scale 1 (sweep_trace_rate) */
    int quiet;               /* no per-point progress lines on stderr */
    const uint64_t *seeds;   /* n_seeds > 0 (--repeat): every rate runs once per seed, as the
                              * experiment PREFIX@RATErps of runs PREFIX@RATErps-rK
                              * (analysis/experiment.h) */
    int n_seeds;
    int db_optional;         /* --emit-jobs: the database is read for taken names when it
                              * exists, never created */
} sweep_t;

typedef struct {
    double rate;             /* req/s */
    double scale;            /* rate / base_rate */
    int64_t run_id;          /* in the target database; -1 if no run was recorded */
    int ok;                  /* simulation completed and its report loaded */
    char name[160];
    char cost_model[320];    /* when ok: the run's cost model, its config's "calibration"
                              * (sim_result_t's: a file, "builtin:...", or "none: <why the
                              * roofline>"); "" when the run does not say */
    int index;               /* with seeds: the run's index in its rate's experiment */
    report_t rep;            /* valid when ok; by report_load_summary: the summary and the
                              * SLO figures, no ITL, KV use or batch size (n == 0) */
} sweep_point_t;

typedef struct {
    double lo, hi;           /* bracket: lo passes (0 when none did), hi fails (INFINITY
                              * when none did) */
    double lo_att, hi_att;   /* their attainments */
    int found_lo, found_hi;
    int infeasible;          /* stopped: load-independent rejections keep every rate's
                              * attainment below the target (found_lo is 0) */
    double bound;            /* with infeasible: that ceiling (sweep_attainment_bound) */
    size_t bound_point;      /* with infeasible: the point it was read from */
    sweep_point_t *points;   /* every point evaluated, ascending rate; caller frees */
    size_t n_points;
} sweep_capacity_t;

/* The trace's mean rate at scale 1 over the window topts selects; -1 with a message (also
 * for fewer than two requests or all arriving at once). */
int sweep_trace_rate(const char *path, const trace_opts_t *topts, double *rate, int64_t *n,
                     char *err, size_t errlen);

/* "1,2.5,4": ascending or not, each > 0; up to max. Returns the count, or -1 with a message
 * naming the bad item. */
int sweep_parse_rates(const char *spec, double *rates, int max, char *err, size_t errlen);

/* Picks the run-name prefix (sw->prefix, or a free "sweep-<stem>[-K]") into out; -1 when an
 * explicit prefix is already used in the database or it cannot be read, or when the name
 * holds a '"', a '\' or a control character (it goes into each point's config JSON). */
int sweep_prefix(const sweep_t *sw, char *out, size_t outlen, char *err, size_t errlen);

/* Runs rates[0..n) (prefix from sweep_prefix) and fills pts[0..n), or with sw->n_seeds > 0
 * pts[0..n * n_seeds): rate i's run with seed k is pts[i * n_seeds + k]. Returns 0 when every
 * point was recorded (some may have failed: see ok), -1 with a message otherwise. */
int sweep_run(const sweep_t *sw, const char *prefix, const double *rates, int n,
              sweep_point_t *pts, char *err, size_t errlen);

/* --emit-jobs: the sweep written as jobs for GNU parallel or Slurm instead of run. */
typedef struct {
    const char *dir;          /* created if absent; refused when it holds a jobs.txt */
    const char *bin;          /* the twinserve binary each job calls (absolute) */
    const char *const *args;  /* the shared sim options the sweep was given, as words
                               * ("--set", "k=v", "--prefix-caching"...), file arguments
                               * absolute, without --seed (each job gets its own) */
    int n_args;
} sweep_jobs_t;

/* Writes jobs->dir/jobs.txt: one self-contained `twinserve sim` command per point, in
 * sweep_run's order (rate, then seed), point k writing dir/out/pK.db (K zero-padded, so a
 * glob lists them in that order), with the run name, rate scale, seed and config tags
 * ("sweep", and "experiment" with seeds) the point would have in sweep_run; dir/slurm.sh, a
 * job array whose task i runs line i + 1; dir/run.txt, how to run and merge them (also
 * written to info when not NULL). sw->sim's trace and policy paths must be absolute. Names
 * are unique against sw->sim.db_path when it exists (sw->db_optional). The first point is
 * first simulated on the trace's first two requests in a temporary database, so a setup the
 * jobs could not run is refused before anything is written. 0, or -1 with a message. */
int sweep_emit_jobs(const sweep_t *sw, const sweep_jobs_t *jobs, const char *prefix,
                    const double *rates, int n, FILE *info, char *err, size_t errlen);

/* The highest attainment a run of this trace could reach at any rate: 1 - the requests
 * rejected for reasons the load does not change (prompt + output past the context, more
 * KV than one request may hold, a prompt past a non-chunked policy's step budget, an
 * empty prompt or no output) / all requests. A router's or a policy's own rejections
 * (shedding) depend on the load and are not counted. NAN without requests. Pure. */
double sweep_attainment_bound(const summary_t *s);

/* Capacity search; lo/hi <= 0: found by doubling/halving from base_rate. target in (0, 1].
 * Stops early, with out->infeasible, at the first point whose sweep_attainment_bound is
 * below target. 0 (also when infeasible or no rate passed: see found_lo), or -1 with a
 * message. */
int sweep_capacity(const sweep_t *sw, const char *prefix, double lo, double hi, double tol,
                   double target, sweep_capacity_t *out, char *err, size_t errlen);

/* The curve: one line per point. */
void sweep_print_header(FILE *f, int has_slo);
void sweep_print_point(FILE *f, const sweep_point_t *p, int has_slo);

#endif

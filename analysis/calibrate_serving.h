/* calibrate_serving: a serving profile's fitted terms (sim/serving.h) from several measured
 * runs at once, by simulation: `twinserve calibrate --serving --db DB [--runs R1,R2,...]
 * --out PROFILE`. This is how the shipped "vllm" profile was made from the real vLLM runs
 * (bench/vllm_fidelity.sh; docs/fidelity.md, "vLLM on H100").
 *
 * Each measured run with load stages (an inference-perf import) is replayed as validate
 * replays it (validate.h: the server's flags, the prompt cycle, the client's timeout), with
 * the candidate profile; the objective is the mean over the runs of their stage MAPE (the
 * stages that did not overload; each metric's |error| capped at 1, so that a replay that
 * collapses counts as wrong, not as infinitely wrong). Runs that overloaded (client
 * timeouts) are not fitted to: their latencies are censored; they are replayed with the
 * final profile and reported apart. Only the named terms move, each within its physical
 * range (the table in calibrate_serving.c says which and why), one at a time: a grid over
 * the range, then golden-section steps around the best, CALSERV_SWEEPS times; a term that
 * cannot change a run's replay (the MoE kernel's efficiency on a dense model) does not
 * replay it. Replays run in parallel (jobs), each in a private copy of its run's database.
 *
 * Leave-one-experiment-out (loo): every fitted run is predicted by the whole procedure run
 * on the others; its held-out MAPE is printed beside the in-sample one, and the spread of
 * the terms over the folds is the fit's uncertainty. The held-out runs' median |error| of
 * their stages' mean TPOT (the client's: a step's time, seen end to end) becomes the
 * profile's step_cv_err, the default width of --band. With loo_dir, each fold's profile is
 * written there as RUN.serving, so the held-out predictions can be replayed (validate
 * --serving DIR/RUN.serving) as bench/vllm_fidelity.sh does.
 *
 * Invariants: the user's database is not changed (the replays run in temporary copies,
 * removed at the end). Ownership: options borrowed; the result is a plain value. */
#ifndef TWIN_CALIBRATE_SERVING_H
#define TWIN_CALIBRATE_SERVING_H

#include <stdio.h>

#include "analysis/validate.h"
#include "sim/serving.h"

#define CALSERV_MAX_RUNS 16
#define CALSERV_MAX_TERMS 8
#define CALSERV_SWEEPS 2

typedef struct {
    const char *db_path;
    const char *runs;          /* comma-separated names; NULL: every measured run with stages */
    const char *base;          /* the profile to start from (default "vllm") */
    const char *terms;         /* comma-separated; NULL: the default list */
    const sim_opts_t *sim;     /* the replays' policy and options (watermark, ...) */
    const char *hw;            /* when the runs do not name their GPU */
    double skip_warmup_s;
    int loo;
    const char *loo_dir;       /* NULL, or where each fold's profile goes (made if absent) */
    int jobs;                  /* parallel replays (>= 1) */
    int progress;
} calserv_opts_t;

typedef struct {
    char name[128];
    int overloaded;            /* measured client timeouts: not fitted to */
    int moe;                   /* a mixture of experts: the MoE term applies */
    double mape_before, mape_after, loo_mape;   /* stage MAPE (uncapped; NAN when none) */
    double loo_value[CALSERV_MAX_TERMS];        /* the terms fitted without this run */
} calserv_run_t;

typedef struct {
    serving_t fitted;
    int n_runs;
    calserv_run_t run[CALSERV_MAX_RUNS];
    int n_terms;
    char term[CALSERV_MAX_TERMS][32];
    double before[CALSERV_MAX_TERMS], value[CALSERV_MAX_TERMS];
    double lo[CALSERV_MAX_TERMS], hi[CALSERV_MAX_TERMS];   /* over the folds (loo) */
    double fit_mape, cv_mape;  /* mean over the fitted runs: in sample, held out */
    double step_cv_err;        /* see above; NAN without loo */
    int step_cv_n;             /* the stages it is the median of */
    int evals, loo;
    validate_result_t final[CALSERV_MAX_RUNS];  /* every run with the fitted profile, ITL too */
} calserv_result_t;

/* 0, or -1 with the reason (no runs with stages, an unknown term, a replay that fails). */
int calserv_fit(const calserv_opts_t *o, calserv_result_t *r, char *err, size_t errlen);
void calserv_print(FILE *f, const calserv_result_t *r);

#endif

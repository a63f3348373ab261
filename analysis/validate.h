/* validate: holds the simulator against the engine. It replays a measured engine run's
 * exact workload in the simulator (the same trace slice, rate scale, clipping, seed,
 * policy file and effective params, token and sequence budgets, KV blocks and block size,
 * model shape) with a cost model, records the simulated run in the same database, and
 * compares them: every latency metric's mean and percentiles, throughput and preemptions,
 * and each engine step's measured pass and host time against the cost model's prediction
 * for that step's recorded features. With repeats it first reruns the engine on the same
 * workload, so the prediction errors stand beside the engine's own run-to-run spread.
 *
 * Definitions: error = (predicted - measured) / measured. The MAPE is the mean |error|
 * over the headline metrics: p50, p90 and p99 of TTFT, TPOT and E2E, and output
 * throughput. The spread of a metric over the measured runs is (max - min) / median; a
 * prediction is "within noise" when it lies between the measured runs' min and max.
 *
 * Measured runs (kind 'measured', analysis/import.h: measurements taken elsewhere) have no
 * workload record, so the caller supplies the policy and the simulator's options (sim).
 * Their requests are replayed exactly when the import recorded arrivals (a CSV), or over
 * arrivals regenerated as vLLM's benchmark draws them (its request rate and burstiness,
 * seeded by sim->seed) when it did not: then the comparison is of distributions, and the
 * result's note says so. Only per-request metrics are compared (no steps, queueing or
 * preemptions are measured); repeats are refused (a measurement cannot be rerun).
 *
 * Invariants: nothing already recorded changes; the simulated run (kind sim, named
 * validate-<run>[-K], config "validate":{"of":ID}) and any engine repeats are added.
 * Refused, with the reason: a run that is not an engine or measured run, not done, older
 * than the workload record (schema 3), speculative (its n-gram drafts' acceptance is not
 * modelled), or whose trace or policy file is gone; the sim options for any run but a
 * measured one (an engine run's come from its record).
 *
 * Ownership: options are borrowed for the call; the result is a plain value. */
#ifndef TWIN_VALIDATE_H
#define TWIN_VALIDATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "analysis/report.h"
#include "sim/sim.h"

typedef struct {
    const char *db_path;
    const char *run;          /* engine run name or id; NULL: the latest engine run */
    const char *cost_path;    /* a cost file; NULL: the roofline on hw */
    const char *hw;           /* hardware preset for the roofline when no cost file */
    const char *name;         /* the simulated run's name; NULL: validate-<run>[-K] */
    int repeat;               /* engine reruns of the workload, for the noise floor (0) */
    int progress;             /* progress lines on stderr */
    const char *version;
    /* Measured runs only (refused for an engine run, whose record says all this): the
     * replay's policy, params, model, tp (0: the run's), seed, limits and KV capacity.
     * Its trace, database, run name, cost model (cost_path, hw) and config are set by
     * validate. NULL: none given. */
    const sim_opts_t *sim;
    /* A measured run with load stages (an inference-perf import): requests arriving in the
     * first skip_warmup_s seconds are left out of both sides' stage metrics (a cold
     * server's first requests; 0: none); no_itl skips the per-token comparison (ITL), so
     * the replay records no tokens (calibrate --serving's many replays). */
    double skip_warmup_s;
    int no_itl;
    /* Every simulated step's time x cost_scale (0: 1), sim.h; band (validate_band) asks
     * for a prediction band of width band_err (0: the cost model's own). */
    double cost_scale;
    int band;
    double band_err;
} validate_opts_t;

#define VALIDATE_MAX_METRICS 48
#define VALIDATE_MAX_REPEAT 20

typedef struct {
    char name[32];            /* "TTFT p50" */
    int is_time;              /* seconds (printed as ms) vs a rate or a count */
    int headline;             /* part of the MAPE */
    double measured, predicted, err;
    double lo, hi, spread;    /* over the measured runs; NAN without repeats */
    double band_lo, band_hi;  /* the prediction band (validate_band); valid with band_on */
    double pred_lo, pred_hi;  /* over the arrival seeds (n_seeds > 1, a measured run whose
                               * arrivals are regenerated: --repeat N) */
    int inside;               /* the measured value lies in the band (with repeats: the
                               * band overlaps the measured runs' lo .. hi) */
} validate_metric_t;

typedef struct {
    size_t n;                 /* steps compared */
    double median, p90, bias; /* of |error|; bias = mean signed error */
} validate_steps_t;

/* Per load stage of a measured run that has them (an inference-perf import: its config's
 * "stages"): TTFT mean, p50, p90, p99; E2E mean, p50, p90, p99 over the stage's finished
 * requests; and with the client's own definitions (inference-perf: two SSE messages per
 * token), TPOT mean = (E2E - TTFT) / (2 x output + 1) and ITL p75, p90, p99 over every
 * message gap (n + 2 of a request's 2n + 1 gaps are a message pair's, ~0; the rest are the
 * real token gaps). A stage whose requests failed on either side (client timeouts: an
 * overloaded server) is marked overloaded and left out of the MAPE, whose mean is over the
 * others' metrics. */
#define VALIDATE_MAX_STAGES 16
#define VALIDATE_STAGE_METRICS 12
typedef struct {
    int stage;
    double rate, duration_s;
    int64_t first, count;
    int64_t finished_meas, finished_pred, failed_meas, failed_pred, skipped;
    int overloaded;                      /* failures on either side */
    validate_metric_t m[VALIDATE_STAGE_METRICS];
    int n;
    double mape;
    int mape_n;
} validate_stage_t;

typedef struct {
    int64_t engine_id, sim_id;            /* engine_*: the measured run, engine or measured */
    int measured;                         /* it is a measured run (analysis/import.h) */
    char note[512];                       /* how a measured run was replayed; "" otherwise */
    char engine_name[256], sim_name[256], cost_desc[300];
    int n_runs;                           /* measured runs: 1 + repeats */
    int64_t measured_ids[1 + VALIDATE_MAX_REPEAT];
    validate_metric_t m[VALIDATE_MAX_METRICS];
    int n;
    validate_steps_t pass, host, pass_decode, pass_prompt;
    double mape;
    int mape_n;
    /* a measured run with load stages (see above); n_stages 0 otherwise */
    validate_stage_t stages[VALIDATE_MAX_STAGES];
    int n_stages;
    double stage_mape;                    /* over the stages not overloaded; NAN if none */
    int stage_mape_n;
    int n_seeds;                          /* arrival seeds replayed (see pred_lo) */
    /* what the replay's cost model states of its own error (sim_result_t.band_err) */
    double band_stated;
    char band_stated_src[200];
    /* the band (validate_band): its width and where it came from, the runs of its two
     * sides, how many measured values fell inside (headline metrics; the stage metrics of
     * the stages not overloaded), and the E2E elasticity and knee verdict (band.h) */
    int band_on;
    double band_err;
    char band_src[256], band_runs[2][300];
    int band_in, band_n, stage_band_in, stage_band_n;
    double band_el;
    int band_knee;                        /* band_verdict: 2 at a knee, 1 near one, 0 not */
} validate_result_t;

int validate_run(const validate_opts_t *o, validate_result_t *r, char *err, size_t errlen);

/* validate_run, and with o->band the replay twice more with every step's time x (1 - E)
 * and x (1 + E) (analysis/band.h; runs SIM-band-lo, SIM-band-hi), each metric's band the
 * range of the three predictions, and whether the measured value fell inside. */
int validate_band(const validate_opts_t *o, validate_result_t *r, char *err, size_t errlen);

void validate_print(FILE *f, const validate_result_t *r);
/* The per-stage table alone (validate_print ends with it). */
void validate_print_stages(FILE *f, const validate_result_t *r);
void validate_json(FILE *f, const validate_result_t *r);

#endif

/* calibrate_sim: the terms a cost model cannot get from operator profiles, fitted to a
 * user's own benchmark by simulation (`twinserve calibrate --db DB --run MEASURED --policy
 * P`). A GPU calibration (analysis/vidur.h, or any linear cost file) knows the forward pass;
 * it does not know the serving engine's CPU time per step and per sequence (host_step_s,
 * host_seq_s), nor, for a benchmark timed at the client, the API front end and the stream
 * (client_request_s, client_token_s: sim.h). Those are found here by replaying the measured
 * run (validate's replay: its requests exactly, or over regenerated arrivals for a vLLM
 * result) and searching the terms that bring the simulated run closest to the measured one.
 *
 * The objective is validate's MAPE: the mean |error| of the p50, p90 and p99 of TTFT, TPOT
 * and E2E and of the output throughput. The search is coordinate-wise over each term in turn:
 * 0 and a log-spaced grid over the term's physical range, then a golden-section refinement
 * in log space around the best, for CALSIM_SWEEPS sweeps, each evaluation a full simulated
 * replay (milliseconds to a second). Only the named terms move; the forward pass is the base
 * model's, untouched.
 *
 * Invariants: the user's database is not changed (the replays run in a temporary copy,
 * removed at the end); the fit is in-sample (one run), and the result says so: hold the
 * fitted file against another measured run (another rate) with `validate` to see how it
 * generalises.
 *
 * Ownership: options borrowed for the call; the result is a plain value. */
#ifndef TWIN_CALIBRATE_SIM_H
#define TWIN_CALIBRATE_SIM_H

#include <stdio.h>

#include "analysis/validate.h"
#include "sim/cost_file.h"

#define CALSIM_MAX_TERMS 4
#define CALSIM_SWEEPS 2

typedef struct {
    const char *db_path;
    const char *run;           /* the measured run, a name or id; NULL: the latest */
    const char *base_cost;     /* a linear cost file or builtin:NAME; NULL: the calibration
                                * shipped for sim->model on hw at sim->tp */
    const char *hw;            /* with base_cost NULL: the GPU of the shipped calibration */
    const sim_opts_t *sim;     /* the replay's policy and options, as validate's */
    const char *terms;         /* comma-separated terms to fit; NULL: host_step_s,host_seq_s,
                                * plus client_request_s,client_token_s for a run measured at
                                * the client (a vLLM benchmark) */
    int progress;
} calsim_opts_t;

typedef struct {
    cost_file_t cf;            /* the base with the fitted terms */
    int n_terms;
    char term[CALSIM_MAX_TERMS][32];
    double before[CALSIM_MAX_TERMS], value[CALSIM_MAX_TERMS];
    double mape_before, mape_after;
    int evals;
    char run_name[256], base_desc[300], note[512];
    validate_result_t fitted;  /* the comparison at the fitted terms */
} calsim_result_t;

/* 0, or -1 with the reason: not a measured run, no policy, no base model, a base that is
 * not linear, an unknown term, a replay that fails. */
int calsim_fit(const calsim_opts_t *o, calsim_result_t *r, char *err, size_t errlen);

void calsim_print(FILE *f, const calsim_result_t *r);

#endif

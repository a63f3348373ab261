/* band: prediction bands. A prediction near a knee is fragile (10% more cost can turn 4 s
 * into 70 s), so a band reruns a simulation with every step's time moved down and up by the
 * cost model's own cross-validated error E (sim_opts_t.cost_scale = 1 - E and 1 + E) and
 * reports each metric as the range the three runs span. The default E is what the run's
 * cost model states (sim_result_t.band_err: the serving profile's held-out step error, or
 * the cost file's cross-validated median step error); --band=E gives it instead.
 *
 * Invariants:
 *  - The band's runs are ordinary recorded runs, named NAME-band-lo and NAME-band-hi (made
 *    unique), their config carrying "band":{"of":NAME,"side":"low"|"high","err":E} and
 *    "cost_scale"; they carry none of the nominal run's --config-json tags, so a sweep's
 *    curve or an experiment never counts them.
 *  - The range of a metric is [min, max] over the three runs (latency need not be monotone
 *    in cost: a faster server can admit more and preempt more).
 *  - The knee: a run whose mean E2E moves more than BAND_KNEE_ELASTICITY times as much as
 *    the cost (d ln E2E / d ln cost, over the band) sits where queueing feeds on itself; its
 *    point prediction is fragile, and the band says so. Away from a knee E2E follows the
 *    step time (elasticity ~1); from BAND_NEAR_KNEE_ELASTICITY on it is "near a knee"
 *    (a cost error of E becomes a latency error of twice E or more).
 *
 * Ownership: everything is borrowed for the call; errors go to the caller's buffer. */
#ifndef TWIN_BAND_H
#define TWIN_BAND_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "traces/summary.h"
#include "sim/sim.h"

#define BAND_KNEE_ELASTICITY 3.0
/* Between this and the knee, "near a knee": the latency's error is already twice the cost
 * model's. */
#define BAND_NEAR_KNEE_ELASTICITY 2.0

/* "0.05", "5%": a half-width in (0, 0.9]. 1, or 0 when s is not one. */
int band_parse(const char *s, double *err);

/* The width a band uses: given > 0 (--band=E), else the run's stated width (stated, NAN
 * when its cost model states none: the roofline). 0, or -1 with a message. */
int band_pick(double given, double stated, const char *stated_src, double *err, char *src,
              size_t srclen, char *e, size_t elen);

/* The name of side -1 (low cost) or +1 (high) of the nominal run NAME: NAME-band-lo or
 * NAME-band-hi, made unique in the database at db_path. 0, or -1 with a message. */
int band_side_name(const char *db_path, const char *name, int side, char *run, size_t runlen,
                   char *e, size_t elen);

/* The side's sim options from the nominal ones: cost_scale x (1 - err) or x (1 + err), the
 * run named run (borrowed), tagged "band"; extra[extralen] holds the config member. */
void band_side_opts(const sim_opts_t *nominal, const char *name, int side, double err,
                    const char *run, char *extra, size_t extralen, sim_opts_t *out);

/* d ln(metric) / d ln(cost) over the band; NAN when a side is not positive and finite. */
double band_elasticity(double lo, double hi, double err);

/* sim --band: runs the two sides after the nominal run nom (recorded in o->db_path). 0, or
 * -1 with a message (a side that ran and failed is recorded as failed). */
int band_sim(const sim_opts_t *o, const sim_result_t *nom, double err, sim_result_t *lo,
             sim_result_t *hi, char *e, size_t elen);

/* The three runs side by side: TTFT, TPOT and E2E (mean, p50, p90, p99), output tok/s,
 * finished requests, each with its range; then the knee verdict. */
void band_print(FILE *f, const summary_t *nom, const summary_t *lo, const summary_t *hi,
                double err, const char *src);

/* 1 when the band says the run sits at a knee (see above), *el its E2E elasticity. */
int band_at_knee(const summary_t *lo, const summary_t *hi, double err, double *el);

/* The verdict as one report line into buf (see above; "" when el is unknown and nothing
 * was lost): 2 at a knee, 1 near one, 0 neither. */
int band_verdict(double el, int lost, char *buf, size_t len);

/* A recorded run's stated width (its config's "band_width"): 0 with *err (NAN when the run
 * states none), or -1 with a message. */
int band_width_of_run(const char *db_path, int64_t run_id, double *err, char *src,
                      size_t srclen, char *e, size_t elen);

#endif

/* sweep_internal: what sweep.c shares with sweep_jobs.c, so a point run here and a point
 * emitted as a job get the same names, seeds and config tags from one place.
 *
 * Ownership: as sweep.h; nothing here allocates. */
#ifndef TWIN_SWEEP_INTERNAL_H
#define TWIN_SWEEP_INTERNAL_H

#include "analysis/sweep.h"

/* pts[0..nrates * reps), reps = sw->n_seeds or 1: rate i's run with seed k at i * reps + k,
 * with its rate, scale and index, named PREFIX@RATErps[-rK] (unique against the database
 * when it exists, and among themselves). 0, or -1 with a message. */
int sweep_init_points(const sweep_t *sw, const char *prefix, const double *rates, int nrates,
                      sweep_point_t *pts, char *err, size_t errlen);

/* The point's config members (no braces): its "sweep" tag, and with seeds its "experiment"
 * membership. */
void sweep_point_extra(const sweep_t *sw, const char *prefix, const sweep_point_t *p,
                       char *extra, size_t len);

/* The seed the point runs with: its seed of sw->seeds, else sw->sim.seed. */
uint64_t sweep_point_seed(const sweep_t *sw, const sweep_point_t *p);

#endif

/* sweep_band: prediction bands (band.h) for sweep and capacity. The same sweep, or the same
 * capacity search, runs twice more with every step's time x (1 - E) and x (1 + E), as the
 * sweeps PREFIX-band-lo and PREFIX-band-hi (their own curves for plot, their runs tagged
 * with "cost_scale"); each point's metrics, and the capacity, are reported as the range of
 * the three. E is --band=E, else what the nominal sweep's cost model states (its first
 * recorded point's "band_width").
 *
 * Ownership: the caller owns every array; the sides' capacity points are freed by the
 * caller (free(side[k].points)). Errors go to the caller's buffer. */
#ifndef TWIN_SWEEP_BAND_H
#define TWIN_SWEEP_BAND_H

#include <stddef.h>
#include <stdio.h>

#include "analysis/sweep.h"

typedef struct {
    double err;              /* the half-width, a fraction of step time */
    char src[256];           /* where it came from */
    char prefix[2][200];     /* the two sides' sweep names: low cost, high cost */
} sweep_band_t;

/* The width, from sw->sim.band_err or the first recorded point of pts[0..n). 0, or -1. */
int sweep_band_width(const sweep_t *sw, const sweep_point_t *pts, size_t n, sweep_band_t *b,
                     char *err, size_t errlen);

/* The two sides of a --rates sweep: side[k][0..n) (each n * max(1, n_seeds) points). */
int sweep_band_rates(const sweep_t *sw, const char *prefix, const double *rates, int n,
                     sweep_band_t *b, sweep_point_t *side[2], char *err, size_t errlen);

/* The two sides of a capacity search, with the nominal search's bounds and target. */
int sweep_band_capacity(const sweep_t *sw, const char *prefix, double lo, double hi, double tol,
                        double target, sweep_band_t *b, sweep_capacity_t side[2], char *err,
                        size_t errlen);

/* Per rate: the nominal figures and each one's range over the band. */
void sweep_band_print_rates(FILE *f, const sweep_point_t *nom, sweep_point_t *const side[2],
                            size_t n, int has_slo, const sweep_band_t *b);

/* The capacity with its range: the high-cost side's capacity .. the low-cost side's. */
void sweep_band_print_capacity(FILE *f, const sweep_capacity_t *nom,
                               const sweep_capacity_t side[2], const sweep_band_t *b);

#endif

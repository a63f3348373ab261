/* stats: descriptive statistics over double arrays (latency distributions).
 *
 * Invariants:
 *  - Percentiles use linear interpolation between closest ranks, numpy's default method:
 *    rank = p/100 * (n - 1), value = x[floor(rank)] + (rank - floor(rank)) *
 *    (x[ceil(rank)] - x[floor(rank)]) over the sorted values. p is in [0, 100].
 *  - An empty input, or p outside [0, 100], gives NAN, never a crash. Inputs must not
 *    contain NaN (callers exclude missing values, as SQL NULLs are excluded).
 *
 * Ownership: no function keeps a pointer it is given. stats_percentile copies its input
 * (the caller's array is left untouched); stats_sort sorts in place. */
#ifndef TWIN_STATS_H
#define TWIN_STATS_H

#include <stddef.h>

/* A distribution summary; every field but n is NAN when n == 0. */
typedef struct {
    size_t n;
    double mean, min, max;
    double p50, p90, p95, p99;
} stats_dist_t;

double stats_mean(const double *x, size_t n);
void stats_sort(double *x, size_t n);                 /* ascending, in place */
/* x must be sorted ascending. */
double stats_percentile_sorted(const double *x, size_t n, double p);
/* Any order; sorts a copy. NAN also when the copy cannot be allocated. */
double stats_percentile(const double *x, size_t n, double p);
/* x must be sorted ascending. */
void stats_describe_sorted(const double *x, size_t n, stats_dist_t *out);

#endif

/* stats: mean and numpy-compatible percentiles (contract: stats.h). */
#include "traces/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double stats_mean(const double *x, size_t n) {
    if (n == 0) return NAN;
    /* Kahan summation: latency arrays reach millions of values of similar magnitude. */
    double sum = 0, c = 0;
    for (size_t i = 0; i < n; i++) {
        double y = x[i] - c;
        double t = sum + y;
        c = (t - sum) - y;
        sum = t;
    }
    return sum / (double)n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void stats_sort(double *x, size_t n) {
    if (n > 1) qsort(x, n, sizeof *x, cmp_double);
}

double stats_percentile_sorted(const double *x, size_t n, double p) {
    if (n == 0 || !(p >= 0 && p <= 100)) return NAN;
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    size_t hi = (size_t)ceil(rank);
    if (hi >= n) hi = n - 1;   /* guards rounding of rank at p = 100 */
    if (lo > hi) lo = hi;
    double t = rank - (double)lo;
    double a = x[lo], b = x[hi];
    /* numpy's two-sided lerp: exact at both ends, and monotone in t. */
    return t < 0.5 ? a + (b - a) * t : b - (b - a) * (1.0 - t);
}

double stats_percentile(const double *x, size_t n, double p) {
    if (n == 0 || !(p >= 0 && p <= 100)) return NAN;
    double *copy = malloc(n * sizeof *copy);
    if (!copy) return NAN;
    memcpy(copy, x, n * sizeof *copy);
    stats_sort(copy, n);
    double v = stats_percentile_sorted(copy, n, p);
    free(copy);
    return v;
}

void stats_describe_sorted(const double *x, size_t n, stats_dist_t *out) {
    out->n = n;
    out->mean = stats_mean(x, n);
    out->min = n ? x[0] : NAN;
    out->max = n ? x[n - 1] : NAN;
    out->p50 = stats_percentile_sorted(x, n, 50);
    out->p90 = stats_percentile_sorted(x, n, 90);
    out->p95 = stats_percentile_sorted(x, n, 95);
    out->p99 = stats_percentile_sorted(x, n, 99);
}

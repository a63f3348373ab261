/* compare_internal: what compare.c (runs and experiments) takes from compare_boot.c (the
 * bootstrap core). Nothing else includes this header.
 *
 * Ownership: as compare.h; nothing given is kept. */
#ifndef TWIN_COMPARE_INTERNAL_H
#define TWIN_COMPARE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "analysis/compare.h"

/* The bootstrap of nstat statistics at once: statistic s is stat[s] of column col[s] < ncols,
 * whose values are a[col[s]][0..na) in A and b[col[s]][0..nb) in B; its estimate goes to
 * out[s]. Each resample draws its counts once and every statistic is evaluated from them;
 * each column is sorted, counted and summed once. The draws are the ones compare_bootstrap
 * makes for a single statistic with the same seed, so out[s] is bit for bit what
 * compare_bootstrap gives for statistic s alone. Memory: nstat * resamples differences.
 * den (NULL: none) makes ratios: when den[s] >= 0, statistic s is stat[s] over statistic
 * den[s] of the same draw (both means, den[s] itself no ratio), its difference that of the
 * two ratios; a draw whose denominator is 0 on a side is dropped. Two columns with the same
 * missing values give the ratio of their sums over the drawn requests, such as accepted
 * over proposed drafts: a pooled rate resampled by request. */
int compare_boot_stats(const double *const *a, const size_t *offa, size_t ra,
                       const double *const *b, const size_t *offb, size_t rb, size_t ncols,
                       int paired, const compare_stat_t *stat, const int *col,
                       const int *den, size_t nstat, int resamples, uint64_t seed,
                       double level, compare_est_t *out, char *err, size_t errlen);

#endif

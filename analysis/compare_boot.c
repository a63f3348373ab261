/* compare_boot: the bootstrap core of compare (contract: compare.h, "the bootstrap core";
 * the joint bootstrap compare_experiments runs: compare_internal.h). Kept apart from the
 * loading and printing of runs in compare.c: this file knows nothing of databases. */
#include "analysis/compare_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "traces/stats.h"
#include "traces/rng.h"

double compare_stat(compare_stat_t stat, const double *x, size_t n) {
    double *v = malloc((n ? n : 1) * sizeof *v);
    size_t m = 0;
    double out = NAN;
    if (!v) return NAN;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) v[m++] = x[i];
    if (m == 0) goto done;
    out = stat.kind == COMPARE_MEAN ? stats_mean(v, m) : stats_percentile(v, m, stat.p);
done:
    free(v);
    return out;
}

typedef struct {
    double v;
    size_t i;   /* position in the caller's array (the request) */
} item_t;

static int cmp_item(const void *a, const void *b) {
    double x = ((const item_t *)a)->v, y = ((const item_t *)b)->v;
    return (x > y) - (x < y);
}

/* One column of one run, built once for all its statistics and resamples. */
typedef struct {
    item_t *it;          /* the non-NAN values with their positions, sorted by value: m */
    double *sorted;      /* it[j].v, j < m: the point estimates' percentiles */
    uint32_t *ws;        /* scratch: one resample's counts of it[j], j < m */
    size_t m;
} side_t;

static void side_free(side_t *sd) {
    free(sd->it);
    free(sd->sorted);
    free(sd->ws);
    memset(sd, 0, sizeof *sd);
}

static int side_init(side_t *sd, const double *x, size_t n) {
    memset(sd, 0, sizeof *sd);
    sd->it = malloc((n ? n : 1) * sizeof *sd->it);
    sd->sorted = malloc((n ? n : 1) * sizeof *sd->sorted);
    sd->ws = malloc((n ? n : 1) * sizeof *sd->ws);
    if (!sd->it || !sd->sorted || !sd->ws) {
        side_free(sd);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) sd->it[sd->m++] = (item_t){x[i], i};
    qsort(sd->it, sd->m, sizeof *sd->it, cmp_item);
    for (size_t j = 0; j < sd->m; j++) sd->sorted[j] = sd->it[j].v;
    return 0;
}

/* The statistic over all of a side's values, as compare_stat: the mean in the caller's order
 * (stats_mean's compensated sum depends on it), a percentile from the sorted values. */
static double side_stat(compare_stat_t stat, const double *x, size_t n, const side_t *sd) {
    if (stat.kind == COMPARE_MEAN) return compare_stat(stat, x, n);
    return sd->m ? stats_percentile_sorted(sd->sorted, sd->m, stat.p) : NAN;
}

/* The value at 0-based position k of the sorted multiset where it[j] occurs ws[j] times;
 * starts the walk at *j with *below occurrences before it (positions only grow). Counts are
 * whole numbers, so the walk adds integers (a double sum of them is the same, only slower). */
static double value_at(const item_t *it, size_t m, const uint32_t *ws, size_t *j,
                       uint64_t *below, uint64_t k) {
    while (*j < m && *below + ws[*j] <= k) *below += ws[(*j)++];
    return it[*j < m ? *j : m - 1].v;
}

/* The statistics stat[idx[0..nidx)] of one resample of one side, into v[idx[q]]: value
 * it[j].v counted w[it[j].i] times. Same definitions as compare_stat (the percentile's
 * two-sided lerp is stats.c's), without materialising the resample. The count and the sum
 * are taken once for all of them, gathering the counts in sorted order into sd->ws; a
 * percentile's walk goes on from where the previous one stopped when its position is not
 * lower (a fresh walk would stop at the same place). */
static void stats_weighted(const compare_stat_t *stat, const size_t *idx, size_t nidx,
                           const side_t *sd, const uint32_t *w, double *v) {
    const item_t *it = sd->it;
    uint32_t *ws = sd->ws;
    size_t m = sd->m, j = 0;
    uint64_t n = 0, below = 0, reached = 0;
    double sum = 0;
    for (size_t q = 0; q < m; q++) {
        ws[q] = w[it[q].i];
        n += ws[q];
        sum += ws[q] * it[q].v;
    }
    double cnt = (double)n;
    for (size_t q = 0; q < nidx; q++) {
        compare_stat_t st = stat[idx[q]];
        if (n == 0) {
            v[idx[q]] = NAN;
        } else if (st.kind == COMPARE_MEAN) {
            v[idx[q]] = sum / cnt;
        } else {
            double rank = st.p / 100.0 * (cnt - 1), lo = floor(rank), t = rank - lo;
            uint64_t klo = (uint64_t)lo, khi = (uint64_t)ceil(rank);
            if (klo < reached) j = 0, below = 0;   /* a lower percentile after a higher one */
            double a = value_at(it, m, ws, &j, &below, klo);
            double b = value_at(it, m, ws, &j, &below, khi);
            reached = khi;
            v[idx[q]] = t < 0.5 ? a + (b - a) * t : b - (b - a) * (1.0 - t);
        }
    }
}

/* n draws with replacement from n positions, added to the counts per position. */
static void add_counts(rng_t *r, uint32_t *w, size_t n) {
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(rng_uniform(r) * (double)n);
        w[i < n ? i : n - 1]++;
    }
}

static void draw_counts(rng_t *r, uint32_t *w, size_t n) {
    memset(w, 0, n * sizeof *w);
    add_counts(r, w, n);
}

/* One side's weights for one resample: its runs drawn with replacement (c[k] copies of run
 * k; no draw for a single run, so one run per side consumes the draws the single-run
 * bootstrap did), then each copy's requests: from shared[0..m) when paired (every run holds
 * the same m requests), else drawn afresh per copy. w[0..off[runs]). */
static void draw_side(rng_t *r, const size_t *off, size_t runs, const uint32_t *shared,
                      uint32_t *c, uint32_t *w) {
    if (runs > 1) draw_counts(r, c, runs);
    else c[0] = 1;
    if (shared) {
        for (size_t k = 0; k < runs; k++)
            for (size_t i = off[k]; i < off[k + 1]; i++) w[i] = c[k] * shared[i - off[k]];
        return;
    }
    memset(w, 0, off[runs] * sizeof *w);
    for (size_t k = 0; k < runs; k++)
        for (uint32_t t = 0; t < c[k]; t++) add_counts(r, w + off[k], off[k + 1] - off[k]);
}

/* Paired by run: run indices drawn once for both sides (c[k] copies of run k), then each
 * copy's request positions drawn once (into tmp) and given to A's run k and B's run k. */
static void draw_pairs(rng_t *r, const size_t *offa, const size_t *offb, size_t runs,
                       uint32_t *tmp, uint32_t *c, uint32_t *wa, uint32_t *wb) {
    if (runs > 1) draw_counts(r, c, runs);
    else c[0] = 1;
    memset(wa, 0, offa[runs] * sizeof *wa);
    memset(wb, 0, offb[runs] * sizeof *wb);
    for (size_t k = 0; k < runs; k++) {
        size_t n = offa[k + 1] - offa[k];
        for (uint32_t t = 0; t < c[k]; t++) {
            draw_counts(r, tmp, n);
            for (size_t i = 0; i < n; i++) {
                wa[offa[k] + i] += tmp[i];
                wb[offb[k] + i] += tmp[i];
            }
        }
    }
}

/* x / y, NAN when y is 0 (no drafts drawn: no rate) or either is NAN. */
static double ratio(double x, double y) { return y != 0 ? x / y : NAN; }

/* See compare_internal.h. */
int compare_boot_stats(const double *const *a, const size_t *offa, size_t ra,
                       const double *const *b, const size_t *offb, size_t rb, size_t ncols,
                       int paired, const compare_stat_t *stat, const int *col,
                       const int *den, size_t nstat, int resamples, uint64_t seed,
                       double level, compare_est_t *out, char *err, size_t errlen) {
    side_t *sa = NULL, *sb = NULL;
    size_t *order = NULL, *first = NULL, *nd = NULL;
    uint32_t *wa = NULL, *wb = NULL, *w = NULL, *ca = NULL, *cb = NULL;
    double *diffs = NULL, *va = NULL, *vb = NULL;
    int ret = -1;
    size_t na = ra ? offa[ra] : 0, nb = rb ? offb[rb] : 0, m = ra ? offa[1] : 0;
    for (size_t s = 0; s < nstat; s++)
        out[s] = (compare_est_t){NAN, NAN, NAN, NAN, NAN, NAN, resamples, 0};
    if (ra < 1 || rb < 1) {
        snprintf(err, errlen, "bootstrap needs at least one run a side (%zu and %zu)", ra, rb);
        goto done;
    }
    for (size_t k = 0; paired == COMPARE_PAIR_REQUEST && k < ra + rb; k++) {
        const size_t *off = k < ra ? offa : offb;
        size_t j = k < ra ? k : k - ra;
        if (off[j + 1] - off[j] != m) {
            snprintf(err, errlen, "paired bootstrap needs equal sizes (%zu and %zu)", m,
                     off[j + 1] - off[j]);
            goto done;
        }
    }
    if (paired == COMPARE_PAIR_RUN) {
        m = 0;   /* the largest run: the size of one draw of positions */
        for (size_t k = 0; k < ra; k++) {
            if (ra != rb || offa[k + 1] - offa[k] != offb[k + 1] - offb[k]) {
                snprintf(err, errlen, "a bootstrap paired by run needs as many runs a side "
                         "(%zu and %zu) and run k of each of one size", ra, rb);
                goto done;
            }
            if (offa[k + 1] - offa[k] > m) m = offa[k + 1] - offa[k];
        }
    }
    for (size_t s = 0; s < nstat; s++) {
        if (resamples < 1 || !(level > 0 && level < 1) ||
            (stat[s].kind == COMPARE_PCTL && !(stat[s].p >= 0 && stat[s].p <= 100))) {
            snprintf(err, errlen, "bad bootstrap arguments (resamples %d, level %g, p %g)",
                     resamples, level, stat[s].p);
            goto done;
        }
        int q = den ? den[s] : -1;
        if (q >= 0 && ((size_t)q >= nstat || (size_t)q == s || den[q] >= 0 ||
                       stat[s].kind != COMPARE_MEAN || stat[q].kind != COMPARE_MEAN)) {
            snprintf(err, errlen, "bad bootstrap ratio: statistic %zu over %d", s, q);
            goto done;
        }
    }
    size_t one = nstat ? nstat : 1;
    sa = calloc(ncols ? ncols : 1, sizeof *sa);
    sb = calloc(ncols ? ncols : 1, sizeof *sb);
    order = malloc(one * sizeof *order);          /* the statistics grouped by column: */
    first = malloc((ncols + 1) * sizeof *first);  /* column c's are order[first[c]..first[c+1]) */
    nd = calloc(one, sizeof *nd);
    va = malloc(one * sizeof *va);
    vb = malloc(one * sizeof *vb);
    wa = malloc((na ? na : 1) * sizeof *wa);
    wb = malloc((nb ? nb : 1) * sizeof *wb);
    w = paired ? malloc((m ? m : 1) * sizeof *w) : NULL;   /* run mode: the largest run */
    ca = malloc(ra * sizeof *ca);
    cb = malloc(rb * sizeof *cb);
    diffs = malloc(one * (size_t)resamples * sizeof *diffs);   /* statistic s: s * resamples */
    int ok = sa && sb && order && first && nd && va && vb && wa && wb && (w || !paired) && ca &&
             cb && diffs;
    for (size_t c = 0; ok && c < ncols; c++)
        ok = side_init(&sa[c], a[c], na) == 0 && side_init(&sb[c], b[c], nb) == 0;
    if (!ok) {
        snprintf(err, errlen, "out of memory for the bootstrap (%zu and %zu values)", na, nb);
        goto done;
    }
    size_t k = 0;
    for (size_t c = 0; c < ncols; c++) {
        first[c] = k;
        for (size_t s = 0; s < nstat; s++)
            if ((size_t)col[s] == c) order[k++] = s;
    }
    first[ncols] = k;
    for (size_t s = 0; s < nstat; s++) {
        out[s].a = side_stat(stat[s], a[col[s]], na, &sa[col[s]]);
        out[s].b = side_stat(stat[s], b[col[s]], nb, &sb[col[s]]);
    }
    for (size_t s = 0; s < nstat; s++) {   /* denominators are no ratios: still plain here */
        if (den && den[s] >= 0) {
            out[s].a = ratio(out[s].a, out[den[s]].a);
            out[s].b = ratio(out[s].b, out[den[s]].b);
        }
        out[s].diff = out[s].b - out[s].a;
        out[s].rel_pct = out[s].a != 0 ? 100 * out[s].diff / out[s].a : NAN;
    }
    rng_t r;
    rng_seed(&r, seed);
    for (int rs = 0; rs < resamples; rs++) {
        if (paired == COMPARE_PAIR_RUN) {
            draw_pairs(&r, offa, offb, ra, w, ca, wa, wb);
        } else {
            if (paired) draw_counts(&r, w, m);
            draw_side(&r, offa, ra, w, ca, wa);
            draw_side(&r, offb, rb, w, cb, wb);
        }
        for (size_t c = 0; c < ncols; c++) {
            const size_t *idx = order + first[c];
            size_t nidx = first[c + 1] - first[c];
            if (nidx == 0) continue;
            stats_weighted(stat, idx, nidx, &sa[c], wa, va);
            stats_weighted(stat, idx, nidx, &sb[c], wb, vb);
        }
        /* after every column: a ratio's denominator may be in a later one */
        for (size_t s = 0; s < nstat; s++) {
            int q = den ? den[s] : -1;
            double d = q < 0 ? vb[s] - va[s] : ratio(vb[s], vb[q]) - ratio(va[s], va[q]);
            if (isnan(d)) out[s].dropped++;
            else diffs[s * (size_t)resamples + nd[s]++] = d;
        }
    }
    for (size_t s = 0; s < nstat; s++) {
        double *ds = diffs + s * (size_t)resamples;
        stats_sort(ds, nd[s]);
        out[s].lo = stats_percentile_sorted(ds, nd[s], 100 * (1 - level) / 2);
        out[s].hi = stats_percentile_sorted(ds, nd[s], 100 * (1 + level) / 2);
    }
    ret = 0;
done:
    for (size_t c = 0; c < ncols; c++) {
        if (sa) side_free(&sa[c]);
        if (sb) side_free(&sb[c]);
    }
    free(sa);
    free(sb);
    free(order);
    free(first);
    free(nd);
    free(va);
    free(vb);
    free(wb);
    free(wa);
    free(w);
    free(ca);
    free(cb);
    free(diffs);
    return ret;
}

int compare_bootstrap(const double *a, size_t na, const double *b, size_t nb, int paired,
                      compare_stat_t stat, int resamples, uint64_t seed, double level,
                      compare_est_t *out, char *err, size_t errlen) {
    const int col = 0;
    const size_t offa[2] = {0, na}, offb[2] = {0, nb};
    if (paired && na != nb) {
        *out = (compare_est_t){NAN, NAN, NAN, NAN, NAN, NAN, resamples, 0};
        snprintf(err, errlen, "paired bootstrap needs equal sizes (%zu and %zu)", na, nb);
        return -1;
    }
    return compare_boot_stats(&a, offa, 1, &b, offb, 1, 1, paired, &stat, &col, NULL, 1,
                              resamples, seed, level, out, err, errlen);
}

int compare_bootstrap_runs(const double *a, const size_t *off_a, size_t ra, const double *b,
                           const size_t *off_b, size_t rb, int paired, compare_stat_t stat,
                           int resamples, uint64_t seed, double level, compare_est_t *out,
                           char *err, size_t errlen) {
    const int col = 0;
    return compare_boot_stats(&a, off_a, ra, &b, off_b, rb, 1, paired, &stat, &col, NULL, 1,
                              resamples, seed, level, out, err, errlen);
}

compare_verdict_t compare_verdict(const compare_est_t *e, int higher_is_better) {
    return compare_verdict_min(e, higher_is_better, 0);
}

compare_verdict_t compare_verdict_min(const compare_est_t *e, int higher_is_better,
                                      double min_effect) {
    if (isnan(e->lo) || isnan(e->hi)) return COMPARE_NA;
    if (e->lo <= 0 && e->hi >= 0) return COMPARE_SAME;
    /* Significance says a difference exists, not that it matters: with many requests an
     * interval gets narrow enough to exclude 0 for a difference nobody would act on. */
    if (fabs(e->diff) < min_effect * fabs(e->a)) return COMPARE_NEGLIGIBLE;
    int up = e->lo > 0;
    return up == (higher_is_better != 0) ? COMPARE_BETTER : COMPARE_WORSE;
}

const char *compare_verdict_name(compare_verdict_t v) {
    switch (v) {
    case COMPARE_SAME: return "no significant difference";
    case COMPARE_NEGLIGIBLE: return "no meaningful difference";
    case COMPARE_BETTER: return "better";
    case COMPARE_WORSE: return "worse";
    default: return "n/a";
    }
}

/* compare: two runs side by side with bootstrap CIs (contract: compare.h). */
#include "analysis/compare.h"

#include <math.h>
#include <stddef.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/report.h"
#include "analysis/stats.h"
#include "policies/rng.h"

/* ---------------------------------------------------------------- the bootstrap core */

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

/* n draws with replacement from n positions, as counts per position. */
static void draw_counts(rng_t *r, uint32_t *w, size_t n) {
    memset(w, 0, n * sizeof *w);
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(rng_uniform(r) * (double)n);
        w[i < n ? i : n - 1]++;
    }
}

/* The bootstrap of nstat statistics at once: statistic s is stat[s] of column col[s] < ncols,
 * whose values are a[col[s]][0..na) in A and b[col[s]][0..nb) in B; its estimate goes to
 * out[s]. Each resample draws its counts once and every statistic is evaluated from them;
 * each column is sorted, counted and summed once. The draws are the ones compare_bootstrap
 * makes for a single statistic with the same seed, so out[s] is bit for bit what
 * compare_bootstrap gives for statistic s alone. Memory: nstat * resamples differences. */
static int bootstrap_stats(const double *const *a, size_t na, const double *const *b,
                           size_t nb, size_t ncols, int paired, const compare_stat_t *stat,
                           const int *col, size_t nstat, int resamples, uint64_t seed,
                           double level, compare_est_t *out, char *err, size_t errlen) {
    side_t *sa = NULL, *sb = NULL;
    size_t *order = NULL, *first = NULL, *nd = NULL;
    uint32_t *wa = NULL, *wb = NULL;
    double *diffs = NULL, *va = NULL, *vb = NULL;
    int ret = -1;
    for (size_t s = 0; s < nstat; s++)
        out[s] = (compare_est_t){NAN, NAN, NAN, NAN, NAN, NAN, resamples, 0};
    if (paired && na != nb) {
        snprintf(err, errlen, "paired bootstrap needs equal sizes (%zu and %zu)", na, nb);
        goto done;
    }
    for (size_t s = 0; s < nstat; s++) {
        if (resamples < 1 || !(level > 0 && level < 1) ||
            (stat[s].kind == COMPARE_PCTL && !(stat[s].p >= 0 && stat[s].p <= 100))) {
            snprintf(err, errlen, "bad bootstrap arguments (resamples %d, level %g, p %g)",
                     resamples, level, stat[s].p);
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
    wb = paired ? wa : malloc((nb ? nb : 1) * sizeof *wb);
    diffs = malloc(one * (size_t)resamples * sizeof *diffs);   /* statistic s: s * resamples */
    int ok = sa && sb && order && first && nd && va && vb && wa && wb && diffs;
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
        out[s].diff = out[s].b - out[s].a;
        out[s].rel_pct = out[s].a != 0 ? 100 * out[s].diff / out[s].a : NAN;
    }
    rng_t r;
    rng_seed(&r, seed);
    for (int rs = 0; rs < resamples; rs++) {
        draw_counts(&r, wa, na);
        if (!paired) draw_counts(&r, wb, nb);
        for (size_t c = 0; c < ncols; c++) {
            const size_t *idx = order + first[c];
            size_t nidx = first[c + 1] - first[c];
            if (nidx == 0) continue;
            stats_weighted(stat, idx, nidx, &sa[c], wa, va);
            stats_weighted(stat, idx, nidx, &sb[c], wb, vb);
            for (size_t q = 0; q < nidx; q++) {
                size_t s = idx[q];
                double d = vb[s] - va[s];
                if (isnan(d)) out[s].dropped++;
                else diffs[s * (size_t)resamples + nd[s]++] = d;
            }
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
    if (wb != wa) free(wb);
    free(wa);
    free(diffs);
    return ret;
}

int compare_bootstrap(const double *a, size_t na, const double *b, size_t nb, int paired,
                      compare_stat_t stat, int resamples, uint64_t seed, double level,
                      compare_est_t *out, char *err, size_t errlen) {
    const int col = 0;
    return bootstrap_stats(&a, na, &b, nb, 1, paired, &stat, &col, 1, resamples, seed, level,
                           out, err, errlen);
}

compare_verdict_t compare_verdict(const compare_est_t *e, int higher_is_better) {
    if (isnan(e->lo) || isnan(e->hi)) return COMPARE_NA;
    if (e->lo <= 0 && e->hi >= 0) return COMPARE_SAME;
    int up = e->lo > 0;
    return up == (higher_is_better != 0) ? COMPARE_BETTER : COMPARE_WORSE;
}

const char *compare_verdict_name(compare_verdict_t v) {
    switch (v) {
    case COMPARE_SAME: return "no significant difference";
    case COMPARE_BETTER: return "better";
    case COMPARE_WORSE: return "worse";
    default: return "n/a";
    }
}

/* ---------------------------------------------------------------- loading two runs */

enum { COL_TTFT, COL_TPOT, COL_E2E, COL_QUEUE, NCOLS };

/* One run's requests in req_id order; x[c][i] is column c of request i (NAN = missing). */
typedef struct {
    size_t n;
    int64_t *id;
    double *arrival;
    int64_t *prompt, *output;
    double *x[NCOLS];
} run_rows_t;

static void rows_free(run_rows_t *r) {
    free(r->id);
    free(r->arrival);
    free(r->prompt);
    free(r->output);
    for (int c = 0; c < NCOLS; c++) free(r->x[c]);
    memset(r, 0, sizeof *r);
}

static const char SQL_ROWS[] =
    "SELECT req_id, arrival_s, prompt_tokens, output_tokens, ttft_s, tpot_s, e2e_s, queue_s "
    "FROM requests WHERE run_id = ?1 ORDER BY req_id";

static int rows_load(sqlite3 *db, const summary_t *s, run_rows_t *r, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    size_t n = (size_t)s->requests, k = 0;
    int ret = -1, rc;
    memset(r, 0, sizeof *r);
    r->id = malloc(n * sizeof *r->id);
    r->arrival = malloc(n * sizeof *r->arrival);
    r->prompt = malloc(n * sizeof *r->prompt);
    r->output = malloc(n * sizeof *r->output);
    int ok = r->id && r->arrival && r->prompt && r->output;
    for (int c = 0; c < NCOLS; c++) ok = (r->x[c] = malloc(n * sizeof *r->x[c])) && ok;
    if (!ok) {
        snprintf(err, errlen, "out of memory reading the requests of run '%s'", s->name);
        goto done;
    }
    if (sqlite3_prepare_v2(db, SQL_ROWS, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, s->run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && k < n) {
        r->id[k] = sqlite3_column_int64(st, 0);
        r->arrival[k] = summary_column_or_nan(st, 1);
        r->prompt[k] = sqlite3_column_int64(st, 2);
        r->output[k] = sqlite3_column_int64(st, 3);
        for (int c = 0; c < NCOLS; c++) r->x[c][k] = summary_column_or_nan(st, 4 + c);
        k++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) goto sql_error;
    r->n = k;   /* a recorder still writing may add rows after the summary counted them */
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot read the requests of run '%s': %s", s->name,
             sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    if (ret != 0) rows_free(r);
    return ret;
}

/* Same trace text and the same requests: then the runs can be paired request by request. */
static int same_workload(const compare_result_t *res, const run_rows_t *a, const run_rows_t *b,
                         char *why, size_t len) {
    if (!res->a.trace[0] || strcmp(res->a.trace, res->b.trace) != 0) {
        snprintf(why, len, "independent resampling: the runs replayed different traces");
        return 0;
    }
    if (a->n != b->n) {
        snprintf(why, len, "independent resampling: same trace but %zu and %zu requests", a->n,
                 b->n);
        return 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        int same_arrival = a->arrival[i] == b->arrival[i] ||
            fabs(a->arrival[i] - b->arrival[i]) <= 1e-9 * fmax(1, fabs(a->arrival[i]));
        if (a->id[i] != b->id[i] || !same_arrival || a->prompt[i] != b->prompt[i] ||
            a->output[i] != b->output[i]) {
            snprintf(why, len, "independent resampling: same trace text but request %lld "
                     "differs (id, arrival or lengths)", (long long)a->id[i]);
            return 0;
        }
    }
    snprintf(why, len, "paired by request: both runs replayed the same %zu requests", a->n);
    return 1;
}

typedef struct {
    const char *name, *label, *unit;
    int col;
    compare_stat_t stat;
    int higher_is_better;
} metric_def_t;

static const metric_def_t METRICS[] = {
    {"ttft_mean", "TTFT mean", "s", COL_TTFT, {COMPARE_MEAN, 0}, 0},
    {"ttft_p50", "TTFT p50", "s", COL_TTFT, {COMPARE_PCTL, 50}, 0},
    {"ttft_p99", "TTFT p99", "s", COL_TTFT, {COMPARE_PCTL, 99}, 0},
    {"tpot_mean", "TPOT mean", "s", COL_TPOT, {COMPARE_MEAN, 0}, 0},
    {"tpot_p50", "TPOT p50", "s", COL_TPOT, {COMPARE_PCTL, 50}, 0},
    {"tpot_p99", "TPOT p99", "s", COL_TPOT, {COMPARE_PCTL, 99}, 0},
    {"e2e_mean", "E2E mean", "s", COL_E2E, {COMPARE_MEAN, 0}, 0},
    {"e2e_p50", "E2E p50", "s", COL_E2E, {COMPARE_PCTL, 50}, 0},
    {"e2e_p99", "E2E p99", "s", COL_E2E, {COMPARE_PCTL, 99}, 0},
    {"queue_mean", "queue mean", "s", COL_QUEUE, {COMPARE_MEAN, 0}, 0},
    {"queue_p50", "queue p50", "s", COL_QUEUE, {COMPARE_PCTL, 50}, 0},
    {"queue_p99", "queue p99", "s", COL_QUEUE, {COMPARE_PCTL, 99}, 0},
};
enum { N_METRICS = sizeof METRICS / sizeof METRICS[0] };

/* Throughput is one figure per run (it depends on the arrival process and the makespan,
 * which redrawing requests cannot vary), so its rows carry the values and no CI. */
static const struct {
    const char *name, *label, *unit;
    size_t off;
} THROUGHPUT[] = {
    {"req_per_s", "requests/s", "req/s", offsetof(summary_t, req_per_s)},
    {"out_tok_per_s", "output tok/s", "tok/s", offsetof(summary_t, out_tok_per_s)},
    {"tok_per_s", "total tok/s", "tok/s", offsetof(summary_t, tok_per_s)},
};

void compare_opts_default(compare_opts_t *o) {
    o->seed = COMPARE_DEFAULT_SEED;
    o->resamples = COMPARE_DEFAULT_RESAMPLES;
    o->level = COMPARE_DEFAULT_LEVEL;
}

int compare_runs(sqlite3 *db_a, const char *path_a, int64_t id_a, sqlite3 *db_b,
                 const char *path_b, int64_t id_b, const compare_opts_t *o,
                 compare_result_t *out, char *err, size_t errlen) {
    run_rows_t ra = {0}, rb = {0};
    int ret = -1;
    memset(out, 0, sizeof *out);
    snprintf(out->path_a, sizeof out->path_a, "%s", path_a ? path_a : "");
    snprintf(out->path_b, sizeof out->path_b, "%s", path_b ? path_b : "");
    out->seed = o->seed;
    out->resamples = o->resamples;
    out->level = o->level;
    if (summary_load(db_a, id_a, &out->a, err, errlen) != 0 ||
        summary_load(db_b, id_b, &out->b, err, errlen) != 0)
        goto done;
    const summary_t *side[2] = {&out->a, &out->b};
    const char *paths[2] = {out->path_a, out->path_b};
    for (int s = 0; s < 2; s++) {
        if (side[s]->requests == 0) {
            snprintf(err, errlen, "%s: run '%s' has no requests (status %s): nothing to compare",
                     paths[s], side[s]->name, side[s]->status);
            goto done;
        }
    }
    if (rows_load(db_a, &out->a, &ra, err, errlen) != 0 ||
        rows_load(db_b, &out->b, &rb, err, errlen) != 0)
        goto done;
    out->paired = same_workload(out, &ra, &rb, out->pairing, sizeof out->pairing);
    /* One bootstrap for all the metrics: the same request draws, so metrics are resampled
     * jointly, and adding one moves no other (each gets what compare_bootstrap would). */
    compare_stat_t stat[N_METRICS];
    int col[N_METRICS];
    compare_est_t est[N_METRICS];
    for (size_t k = 0; k < N_METRICS; k++) {
        stat[k] = METRICS[k].stat;
        col[k] = METRICS[k].col;
    }
    const double *const *xa = (const double *const *)ra.x;
    const double *const *xb = (const double *const *)rb.x;
    if (bootstrap_stats(xa, ra.n, xb, rb.n, NCOLS, out->paired, stat, col, N_METRICS,
                        o->resamples, o->seed, o->level, est, err, errlen) != 0)
        goto done;
    for (size_t k = 0; k < N_METRICS; k++) {
        const metric_def_t *d = &METRICS[k];
        compare_metric_t *m = &out->m[out->n_metrics++];
        snprintf(m->name, sizeof m->name, "%s", d->name);
        snprintf(m->label, sizeof m->label, "%s", d->label);
        snprintf(m->unit, sizeof m->unit, "%s", d->unit);
        m->higher_is_better = d->higher_is_better;
        m->est = est[k];
        m->verdict = compare_verdict(&m->est, m->higher_is_better);
    }
    for (size_t k = 0; k < sizeof THROUGHPUT / sizeof THROUGHPUT[0]; k++) {
        compare_metric_t *m = &out->m[out->n_metrics++];
        snprintf(m->name, sizeof m->name, "%s", THROUGHPUT[k].name);
        snprintf(m->label, sizeof m->label, "%s", THROUGHPUT[k].label);
        snprintf(m->unit, sizeof m->unit, "%s", THROUGHPUT[k].unit);
        m->higher_is_better = 1;
        double a = *(const double *)((const char *)&out->a + THROUGHPUT[k].off);
        double b = *(const double *)((const char *)&out->b + THROUGHPUT[k].off);
        m->est = (compare_est_t){a, b, b - a, a != 0 ? 100 * (b - a) / a : NAN, NAN, NAN, 0, 0};
        m->verdict = COMPARE_NA;
    }
    ret = 0;
done:
    rows_free(&ra);
    rows_free(&rb);
    return ret;
}

/* ---------------------------------------------------------------- printing */

/* One row's values in one unit: seconds as ms when the larger of A and B is below 10 s,
 * so a CI never mixes "ms" and "s"; other units as plain numbers. */
typedef struct {
    double scale;
    const char *unit;
} row_unit_t;

static row_unit_t row_unit(const compare_metric_t *m) {
    if (strcmp(m->unit, "s") != 0) return (row_unit_t){1, ""};
    double big = fmax(fabs(m->est.a), fabs(m->est.b));
    return isnan(big) || big < 10 ? (row_unit_t){1e3, " ms"} : (row_unit_t){1, " s"};
}

static const char *fmt_val(char *buf, size_t len, double v, row_unit_t u, int sign) {
    if (!isfinite(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, sign ? "%+.2f%s" : "%.2f%s", v * u.scale, u.unit);
    return buf;
}

static void print_side(FILE *f, const char *tag, const char *path, const summary_t *s) {
    fprintf(f, "%s  %s (id %lld) in %s: %s, %s, %s; %lld requests, %lld finished\n", tag,
            s->name, (long long)s->run_id, path, s->policy[0] ? s->policy : "?", s->kind,
            s->status, (long long)s->requests, (long long)s->finished);
}

void compare_print(FILE *f, const compare_result_t *r) {
    print_side(f, "A", r->path_a, &r->a);
    print_side(f, "B", r->path_b, &r->b);
    fprintf(f, "pairing    %s\n", r->pairing);
    fprintf(f, "bootstrap  %d resamples, seed %llu, %g%% CI of B - A (percentile method)\n",
            r->resamples, (unsigned long long)r->seed, 100 * r->level);
    fprintf(f, "verdict    B against A: lower latency and higher throughput are better\n\n");
    fprintf(f, "%-13s %11s %11s %12s %9s  %-27s %s\n", "metric", "A", "B", "B - A", "rel",
            "CI", "verdict");
    for (size_t k = 0; k < r->n_metrics; k++) {
        const compare_metric_t *m = &r->m[k];
        const compare_est_t *e = &m->est;
        char a[32], b[32], d[32], rel[32], lo[32], hi[32], ci[80];
        row_unit_t u = row_unit(m);
        if (isfinite(e->rel_pct)) snprintf(rel, sizeof rel, "%+.1f%%", e->rel_pct);
        else snprintf(rel, sizeof rel, "-");
        if (isnan(e->lo)) snprintf(ci, sizeof ci, "-");
        else snprintf(ci, sizeof ci, "[%s, %s]", fmt_val(lo, sizeof lo, e->lo, u, 1),
                      fmt_val(hi, sizeof hi, e->hi, u, 1));
        fprintf(f, "%-13s %11s %11s %12s %9s  %-27s %s\n", m->label,
                fmt_val(a, sizeof a, e->a, u, 0), fmt_val(b, sizeof b, e->b, u, 0),
                fmt_val(d, sizeof d, e->diff, u, 1), rel, ci,
                isnan(e->lo) && m->higher_is_better ? "n/a (one value per run)"
                                                    : compare_verdict_name(m->verdict));
    }
}

static void json_side(FILE *f, const char *key, const char *path, const summary_t *s) {
    fprintf(f, "  \"%s\": {\"db\": ", key);
    report_json_str(f, path);
    fputs(", \"run\": ", f);
    report_json_str(f, s->name);
    fprintf(f, ", \"id\": %lld, \"policy\": ", (long long)s->run_id);
    report_json_str(f, s->policy);
    fputs(", \"status\": ", f);
    report_json_str(f, s->status);
    fputs(", \"trace\": ", f);
    report_json_str(f, s->trace);
    fprintf(f, ", \"requests\": %lld, \"completed\": %lld},\n", (long long)s->requests,
            (long long)s->finished);
}

void compare_json(FILE *f, const compare_result_t *r) {
    fputs("{\n", f);
    json_side(f, "a", r->path_a, &r->a);
    json_side(f, "b", r->path_b, &r->b);
    fprintf(f, "  \"paired\": %s, \"pairing\": ", r->paired ? "true" : "false");
    report_json_str(f, r->pairing);
    fprintf(f, ",\n  \"bootstrap\": {\"method\": \"percentile\", \"resamples\": %d, "
            "\"seed\": %llu, \"level\": %g},\n  \"metrics\": {\n", r->resamples,
            (unsigned long long)r->seed, r->level);
    for (size_t k = 0; k < r->n_metrics; k++) {
        const compare_metric_t *m = &r->m[k];
        const compare_est_t *e = &m->est;
        fprintf(f, "    \"%s\": {", m->name);
        report_json_key_num(f, "a", e->a, ", ");
        report_json_key_num(f, "b", e->b, ", ");
        report_json_key_num(f, "diff", e->diff, ", ");
        report_json_key_num(f, "rel_pct", e->rel_pct, ", ");
        report_json_key_num(f, "ci_lo", e->lo, ", ");
        report_json_key_num(f, "ci_hi", e->hi, ", ");
        fprintf(f, "\"dropped\": %d, \"unit\": \"%s\", \"higher_is_better\": %s, "
                "\"verdict\": \"%s\"}%s\n", e->dropped, m->unit,
                m->higher_is_better ? "true" : "false", compare_verdict_name(m->verdict),
                k + 1 < r->n_metrics ? "," : "");
    }
    fputs("  }\n}\n", f);
}

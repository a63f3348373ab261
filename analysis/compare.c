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

/* The non-NAN values of x with their positions, sorted by value; *m of them. */
static item_t *sorted_items(const double *x, size_t n, size_t *m) {
    item_t *it = malloc((n ? n : 1) * sizeof *it);
    *m = 0;
    if (!it) return NULL;
    for (size_t i = 0; i < n; i++)
        if (!isnan(x[i])) it[(*m)++] = (item_t){x[i], i};
    qsort(it, *m, sizeof *it, cmp_item);
    return it;
}

/* The value at 0-based position k of the sorted multiset where it[j] occurs w[it[j].i] times;
 * starts the walk at *j with *below occurrences before it (positions only grow). */
static double value_at(const item_t *it, size_t m, const uint32_t *w, size_t *j, double *below,
                       double k) {
    while (*j < m && *below + w[it[*j].i] <= k) *below += w[it[(*j)++].i];
    return it[*j < m ? *j : m - 1].v;
}

/* The statistic of a resample: value it[j].v counted w[it[j].i] times. Same definitions as
 * compare_stat (the percentile's two-sided lerp is stats.c's), without materialising the
 * resample. */
static double stat_weighted(compare_stat_t stat, const item_t *it, size_t m, const uint32_t *w) {
    double cnt = 0, sum = 0;
    for (size_t j = 0; j < m; j++) {
        cnt += w[it[j].i];
        sum += w[it[j].i] * it[j].v;
    }
    if (cnt == 0) return NAN;
    if (stat.kind == COMPARE_MEAN) return sum / cnt;
    double rank = stat.p / 100.0 * (cnt - 1), lo = floor(rank), t = rank - lo, below = 0;
    size_t j = 0;
    double a = value_at(it, m, w, &j, &below, lo);
    double b = value_at(it, m, w, &j, &below, ceil(rank));
    return t < 0.5 ? a + (b - a) * t : b - (b - a) * (1.0 - t);
}

/* n draws with replacement from n positions, as counts per position. */
static void draw_counts(rng_t *r, uint32_t *w, size_t n) {
    memset(w, 0, n * sizeof *w);
    for (size_t k = 0; k < n; k++) {
        size_t i = (size_t)(rng_uniform(r) * (double)n);
        w[i < n ? i : n - 1]++;
    }
}

int compare_bootstrap(const double *a, size_t na, const double *b, size_t nb, int paired,
                      compare_stat_t stat, int resamples, uint64_t seed, double level,
                      compare_est_t *out, char *err, size_t errlen) {
    item_t *ia = NULL, *ib = NULL;
    uint32_t *wa = NULL, *wb = NULL;
    double *diffs = NULL;
    size_t ma = 0, mb = 0, nd = 0;
    int ret = -1;
    *out = (compare_est_t){NAN, NAN, NAN, NAN, NAN, NAN, resamples, 0};
    if (paired && na != nb) {
        snprintf(err, errlen, "paired bootstrap needs equal sizes (%zu and %zu)", na, nb);
        goto done;
    }
    if (resamples < 1 || !(level > 0 && level < 1) ||
        (stat.kind == COMPARE_PCTL && !(stat.p >= 0 && stat.p <= 100))) {
        snprintf(err, errlen, "bad bootstrap arguments (resamples %d, level %g, p %g)",
                 resamples, level, stat.p);
        goto done;
    }
    out->a = compare_stat(stat, a, na);
    out->b = compare_stat(stat, b, nb);
    out->diff = out->b - out->a;
    out->rel_pct = out->a != 0 ? 100 * out->diff / out->a : NAN;
    ia = sorted_items(a, na, &ma);
    ib = sorted_items(b, nb, &mb);
    wa = malloc((na ? na : 1) * sizeof *wa);
    wb = paired ? wa : malloc((nb ? nb : 1) * sizeof *wb);
    diffs = malloc((size_t)resamples * sizeof *diffs);
    if (!ia || !ib || !wa || !wb || !diffs) {
        snprintf(err, errlen, "out of memory for the bootstrap (%zu and %zu values)", na, nb);
        goto done;
    }
    rng_t r;
    rng_seed(&r, seed);
    for (int k = 0; k < resamples; k++) {
        draw_counts(&r, wa, na);
        if (!paired) draw_counts(&r, wb, nb);
        double d = stat_weighted(stat, ib, mb, wb) - stat_weighted(stat, ia, ma, wa);
        if (isnan(d)) out->dropped++;
        else diffs[nd++] = d;
    }
    stats_sort(diffs, nd);
    out->lo = stats_percentile_sorted(diffs, nd, 100 * (1 - level) / 2);
    out->hi = stats_percentile_sorted(diffs, nd, 100 * (1 + level) / 2);
    ret = 0;
done:
    free(ia);
    free(ib);
    if (wb != wa) free(wb);
    free(wa);
    free(diffs);
    return ret;
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

static double col_or_nan(sqlite3_stmt *st, int col) {
    return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
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
        r->arrival[k] = col_or_nan(st, 1);
        r->prompt[k] = sqlite3_column_int64(st, 2);
        r->output[k] = sqlite3_column_int64(st, 3);
        for (int c = 0; c < NCOLS; c++) r->x[c][k] = col_or_nan(st, 4 + c);
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
    for (size_t k = 0; k < sizeof METRICS / sizeof METRICS[0]; k++) {
        const metric_def_t *d = &METRICS[k];
        compare_metric_t *m = &out->m[out->n_metrics++];
        snprintf(m->name, sizeof m->name, "%s", d->name);
        snprintf(m->label, sizeof m->label, "%s", d->label);
        snprintf(m->unit, sizeof m->unit, "%s", d->unit);
        m->higher_is_better = d->higher_is_better;
        /* One seed for every metric: the same request draws, so metrics are resampled
         * jointly and adding one moves no other. */
        if (compare_bootstrap(ra.x[d->col], ra.n, rb.x[d->col], rb.n, out->paired, d->stat,
                              o->resamples, o->seed, o->level, &m->est, err, errlen) != 0)
            goto done;
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

static void json_kv(FILE *f, const char *key, double v, const char *after) {
    fprintf(f, "\"%s\": ", key);
    report_json_num(f, v);
    fputs(after, f);
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
        json_kv(f, "a", e->a, ", ");
        json_kv(f, "b", e->b, ", ");
        json_kv(f, "diff", e->diff, ", ");
        json_kv(f, "rel_pct", e->rel_pct, ", ");
        json_kv(f, "ci_lo", e->lo, ", ");
        json_kv(f, "ci_hi", e->hi, ", ");
        fprintf(f, "\"dropped\": %d, \"unit\": \"%s\", \"higher_is_better\": %s, "
                "\"verdict\": \"%s\"}%s\n", e->dropped, m->unit,
                m->higher_is_better ? "true" : "false", compare_verdict_name(m->verdict),
                k + 1 < r->n_metrics ? "," : "");
    }
    fputs("  }\n}\n", f);
}

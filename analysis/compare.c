/* compare: two runs side by side with bootstrap CIs (contract: compare.h): loading the runs'
 * requests into columns, the metrics, the verdicts' caveats, the printers. The bootstrap
 * itself is compare_boot.c. */
#include "analysis/compare.h"

#include <math.h>
#include <stddef.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/compare_internal.h"
#include "analysis/experiment.h"
#include "analysis/report.h"

/* ---------------------------------------------------------------- loading the runs */

/* The columns read per request, then the ones derived from them and the run's summary. */
enum {
    COL_TTFT, COL_TPOT, COL_E2E, COL_QUEUE, NRAW,
    COL_FIN = NRAW,   /* 1 finished, 0 not: the "finished" row */
    COL_SLO,          /* 1 finished and meeting every set SLO, else 0 */
    COL_GOOD,         /* COL_SLO * the run's requests / its makespan: goodput, pooled */
    COL_REQS, COL_OUT, COL_TOK,   /* the run's throughput, on each of its requests */
    COL_ACC, COL_PROP,  /* the request's accepted and proposed drafts (speculative decoding) */
    COL_TPS,            /* the run's tokens per decoding request-step (report_spec_t) */
    COL_HIT, COL_PTOK,  /* the request's cached and all prompt tokens (prefix caching) */
    COL_BAL,            /* the run's load imbalance across its replicas (cluster_load) */
    NCOLS
};

/* One run's requests in req_id order; x[c][i] is column c of request i (NAN = missing). */
typedef struct {
    size_t n;
    int64_t *id;
    double *arrival;
    int64_t *prompt, *output;
    unsigned char *fin;   /* status = 'finished' */
    double *x[NRAW];
    double *accepted, *proposed;   /* drafts, of every request whatever its status */
    double *cached;                /* prompt tokens the prefix cache served */
} run_rows_t;

static void rows_free(run_rows_t *r) {
    free(r->id);
    free(r->arrival);
    free(r->prompt);
    free(r->output);
    free(r->fin);
    for (int c = 0; c < NRAW; c++) free(r->x[c]);
    free(r->accepted);
    free(r->proposed);
    free(r->cached);
    memset(r, 0, sizeof *r);
}

static const char SQL_ROWS[] =
    "SELECT req_id, arrival_s, prompt_tokens, output_tokens, status = 'finished', "
    "ttft_s, tpot_s, e2e_s, queue_s, ifnull(spec_accepted, 0), ifnull(spec_proposed, 0), "
    "ifnull(cached_tokens, 0) "
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
    r->fin = malloc(n * sizeof *r->fin);
    r->accepted = malloc(n * sizeof *r->accepted);
    r->proposed = malloc(n * sizeof *r->proposed);
    r->cached = malloc(n * sizeof *r->cached);
    int ok = r->id && r->arrival && r->prompt && r->output && r->fin && r->accepted &&
             r->proposed && r->cached;
    for (int c = 0; c < NRAW; c++) ok = (r->x[c] = malloc(n * sizeof *r->x[c])) && ok;
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
        r->fin[k] = (unsigned char)(sqlite3_column_int(st, 4) != 0);
        for (int c = 0; c < NRAW; c++) r->x[c][k] = summary_column_or_nan(st, 5 + c);
        r->accepted[k] = sqlite3_column_double(st, 5 + NRAW);
        r->proposed[k] = sqlite3_column_double(st, 6 + NRAW);
        r->cached[k] = sqlite3_column_double(st, 7 + NRAW);
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

/* A run's load imbalance: over its replicas that hold requests to their end (mixed and
 * decode ones; a prefill replica hands each on), the load of each is the time its finished
 * requests were held there (the sum of their E2E, the area under its curve in plot's
 * replicas figure), and the imbalance is the busiest one's load over the mean: 1 when even,
 * R when one of R replicas holds everything. An idle replica counts (its load is 0). NAN for
 * a run of one replica, or when nothing finished. 0, or -1 with a message. */
static const char SQL_LOAD[] =
    "SELECT count(*), max(held), sum(held) FROM (SELECT (SELECT ifnull(sum(q.e2e_s), 0) "
    "FROM requests q WHERE q.run_id = ?1 AND q.replica = p.replica AND q.status = 'finished') "
    "AS held FROM replicas p WHERE p.run_id = ?1 AND p.role != 'prefill')";

static int cluster_load(sqlite3 *db, const summary_t *s, double *imbalance, int *cluster,
                        char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    *imbalance = NAN;
    *cluster = 0;
    if (sqlite3_prepare_v2(db, SQL_LOAD, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, s->run_id);
    if (sqlite3_step(st) != SQLITE_ROW) goto sql_error;
    int64_t n = sqlite3_column_int64(st, 0);
    double top = sqlite3_column_double(st, 1), sum = sqlite3_column_double(st, 2);
    *cluster = n > 1 || s->replicas > 1;
    if (n > 1 && sum > 0) *imbalance = top / (sum / (double)n);
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot read the replicas of run '%s': %s", s->name,
             sqlite3_errmsg(db));
done:
    sqlite3_finalize(st);
    return ret;
}

/* One side: its runs' summaries and requests, then the columns the bootstrap reads, the
 * runs' requests concatenated: run k's are x[c][off[k] .. off[k + 1]). */
typedef struct {
    size_t runs;
    size_t loaded;            /* rows loaded (runs, or more when copies were collapsed) */
    size_t identical;         /* > 0: the experiment's runs were copies: runs is 1 */
    summary_t *sum;
    report_spec_t *spec;
    double *imbalance;        /* per run: cluster_load's figure */
    int cluster;              /* a run of the side had several replicas */
    run_rows_t *rows;
    size_t *off;
    double *x[NCOLS];
} side_data_t;

static void side_data_free(side_data_t *d) {
    for (size_t k = 0; d->rows && k < d->loaded; k++) rows_free(&d->rows[k]);
    free(d->rows);
    free(d->sum);
    free(d->spec);
    free(d->imbalance);
    free(d->off);
    for (int c = 0; c < NCOLS; c++) free(d->x[c]);
    memset(d, 0, sizeof *d);
}

static int side_data_load(const compare_input_t *in, side_data_t *d, char *err, size_t errlen) {
    int ret = -1;
    memset(d, 0, sizeof *d);
    if (in->n < 1 || in->n > COMPARE_MAX_RUNS) {
        snprintf(err, errlen, "%s: a side of a comparison needs 1 to %d runs, got %zu", in->path,
                 COMPARE_MAX_RUNS, in->n);
        goto done;
    }
    d->runs = in->n;
    d->sum = calloc(in->n, sizeof *d->sum);
    d->spec = calloc(in->n, sizeof *d->spec);
    d->rows = calloc(in->n, sizeof *d->rows);
    d->off = calloc(in->n + 1, sizeof *d->off);
    d->imbalance = calloc(in->n, sizeof *d->imbalance);
    if (!d->sum || !d->spec || !d->rows || !d->off || !d->imbalance) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (size_t k = 0; k < in->n; k++) {
        if (summary_load(in->db, in->ids[k], &d->sum[k], err, errlen) != 0) goto done;
        if (d->sum[k].requests == 0) {
            snprintf(err, errlen, "%s: run '%s' has no requests (status %s): nothing to compare",
                     in->path, d->sum[k].name, d->sum[k].status);
            goto done;
        }
        if (rows_load(in->db, &d->sum[k], &d->rows[k], err, errlen) != 0) goto done;
        d->loaded = k + 1;
        if (report_load_spec(in->db, in->ids[k], &d->spec[k], err, errlen) != 0) goto done;
        int cl = 0;
        if (cluster_load(in->db, &d->sum[k], &d->imbalance[k], &cl, err, errlen) != 0)
            goto done;
        d->cluster |= cl;
        d->off[k + 1] = d->off[k] + d->rows[k].n;
    }
    /* copies (a trace replay's seeds) are one run: their run-level figures would otherwise
     * agree with themselves into intervals of zero width */
    int same = 0;
    if (in->n > 1 && experiment_identical(in->db, in->ids, in->n, &same, err, errlen) != 0)
        goto done;
    if (same) {
        d->identical = in->n;
        d->runs = 1;
    }
    size_t n = d->off[d->runs];
    for (int c = 0; c < NCOLS; c++) {
        if (!(d->x[c] = malloc((n ? n : 1) * sizeof *d->x[c]))) {
            snprintf(err, errlen, "out of memory for %zu requests", n);
            goto done;
        }
    }
    ret = 0;
done:
    if (ret != 0) side_data_free(d);
    return ret;
}

/* The same requests (ids, arrivals, lengths) in the same order; 0 when so, else -1 with why. */
static int same_requests(const run_rows_t *a, const run_rows_t *b, char *why, size_t len) {
    if (a->n != b->n) {
        snprintf(why, len, "independent resampling: same trace but %zu and %zu requests", a->n,
                 b->n);
        return -1;
    }
    for (size_t i = 0; i < a->n; i++) {
        int same_arrival = a->arrival[i] == b->arrival[i] ||
            fabs(a->arrival[i] - b->arrival[i]) <= 1e-9 * fmax(1, fabs(a->arrival[i]));
        if (a->id[i] != b->id[i] || !same_arrival || a->prompt[i] != b->prompt[i] ||
            a->output[i] != b->output[i]) {
            snprintf(why, len, "independent resampling: same trace text but request %lld "
                     "differs (id, arrival or lengths)", (long long)a->id[i]);
            return -1;
        }
    }
    return 0;
}

/* Paired by request when every run of both sides has A's first run's trace text and
 * requests; else paired by run when run k of A and run k of B have (windows of a trace);
 * else not. The mode (COMPARE_PAIR_*) and why, one line. */
static int same_workload(const side_data_t *a, const side_data_t *b, char *why, size_t len) {
    const summary_t *s0 = &a->sum[0];
    int all = 1;
    for (size_t k = 0; all && k < a->runs + b->runs; k++) {
        const side_data_t *d = k < a->runs ? a : b;
        size_t j = k < a->runs ? k : k - a->runs;
        if (!s0->trace[0] || strcmp(s0->trace, d->sum[j].trace) != 0) {
            snprintf(why, len, "independent resampling: the runs replayed different traces");
            all = 0;
        }
    }
    for (size_t k = 1; all && k < a->runs + b->runs; k++) {
        const side_data_t *d = k < a->runs ? a : b;
        if (same_requests(&a->rows[0], &d->rows[k < a->runs ? k : k - a->runs], why, len))
            all = 0;
    }
    if (all) {
        if (a->runs + b->runs == 2)
            snprintf(why, len, "paired by request: both runs replayed the same %zu requests",
                     a->rows[0].n);
        else
            snprintf(why, len, "paired by request: all %zu runs replayed the same %zu requests",
                     a->runs + b->runs, a->rows[0].n);
        return COMPARE_PAIR_REQUEST;
    }
    if (a->runs < 2 || a->runs != b->runs) return COMPARE_PAIR_NONE;
    char w[256];
    for (size_t k = 0; k < a->runs; k++)
        if (!a->sum[k].trace[0] || strcmp(a->sum[k].trace, b->sum[k].trace) != 0 ||
            same_requests(&a->rows[k], &b->rows[k], w, sizeof w))
            return COMPARE_PAIR_NONE;
    snprintf(why, len, "paired by run: run k of A and of B replayed the same requests, the %zu "
             "runs of a side different ones (windows of a trace): runs redrawn together, "
             "requests paired within them", a->runs);
    return COMPARE_PAIR_RUN;
}

static int slo_set(double b) { return b > 0 && !isnan(b); }

/* Fills a side's columns. keep[j] for the side's position j = off[k] + i (paired: the
 * request finished in every run it is paired with) or, when keep is NULL, each run's own
 * finished requests decide which latencies count. */
static void side_columns(side_data_t *d, const unsigned char *keep, const compare_opts_t *o) {
    const report_slo_t *b = &o->slo;
    for (size_t k = 0; k < d->runs; k++) {
        const run_rows_t *r = &d->rows[k];
        const summary_t *s = &d->sum[k];
        double per_req = s->makespan_s > 0 ? (double)r->n / s->makespan_s : NAN;
        for (size_t i = 0; i < r->n; i++) {
            size_t j = d->off[k] + i;
            int use = keep ? keep[j] : r->fin[i];
            for (int c = 0; c < NRAW; c++) d->x[c][j] = use ? r->x[c][i] : NAN;
            double ttft = r->x[COL_TTFT][i], tpot = r->x[COL_TPOT][i], e2e = r->x[COL_E2E][i];
            /* report.c's rule: a missing TPOT (one output token) meets a TPOT bound */
            int met = r->fin[i] && o->has_slo &&
                      (!slo_set(b->ttft_s) || ttft <= b->ttft_s) &&
                      (!slo_set(b->tpot_s) || isnan(tpot) || tpot <= b->tpot_s) &&
                      (!slo_set(b->e2e_s) || e2e <= b->e2e_s);
            d->x[COL_FIN][j] = r->fin[i];
            d->x[COL_SLO][j] = met;
            d->x[COL_GOOD][j] = met * per_req;
            d->x[COL_REQS][j] = s->req_per_s;
            d->x[COL_OUT][j] = s->out_tok_per_s;
            d->x[COL_TOK][j] = s->tok_per_s;
            d->x[COL_ACC][j] = r->accepted[i];
            d->x[COL_PROP][j] = r->proposed[i];
            d->x[COL_TPS][j] = d->spec[k].tokens_per_step;
            d->x[COL_HIT][j] = r->cached[i];
            d->x[COL_PTOK][j] = (double)r->prompt[i];
            d->x[COL_BAL][j] = d->imbalance[k];
        }
    }
}

static void side_counts(const compare_input_t *in, const side_data_t *d, compare_side_t *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->experiment, sizeof out->experiment, "%s", in->experiment ? in->experiment : "");
    out->runs = d->runs;
    out->identical = d->identical;
    for (size_t k = 0; k < d->runs; k++) {
        out->ids[k] = d->sum[k].run_id;
        out->requests += d->sum[k].requests;
        out->finished += d->sum[k].finished;
        out->rejected += d->sum[k].rejected;
        out->aborted += d->sum[k].aborted;
    }
}

typedef struct {
    const char *name, *label, *unit;
    int col;
    compare_stat_t stat;
    int higher_is_better;
    int kind;   /* ROW_LATENCY, ROW_COUNT (finished), ROW_SLO, ROW_RUN (one value per run),
                 * ROW_RATIO (sum of col over sum of den, resampled by request) and
                 * ROW_SPEC (one value per run), these two only when a run verified drafts;
                 * ROW_HIT (a ratio) when a run is a cluster or the prefix cache served
                 * tokens, ROW_BAL (one value per run) when a run is a cluster */
    int den;    /* ROW_RATIO: the denominator's column */
} metric_def_t;

enum { ROW_LATENCY, ROW_COUNT, ROW_SLO, ROW_RUN, ROW_RATIO, ROW_SPEC, ROW_HIT, ROW_BAL };

static int row_is_ratio(int kind) { return kind == ROW_RATIO || kind == ROW_HIT; }
static int row_is_run(int kind) { return kind == ROW_RUN || kind == ROW_SPEC || kind == ROW_BAL; }

static const metric_def_t METRICS[] = {
    {"ttft_mean", "TTFT mean", "s", COL_TTFT, {COMPARE_MEAN, 0}, 0, ROW_LATENCY, 0},
    {"ttft_p50", "TTFT p50", "s", COL_TTFT, {COMPARE_PCTL, 50}, 0, ROW_LATENCY, 0},
    {"ttft_p99", "TTFT p99", "s", COL_TTFT, {COMPARE_PCTL, 99}, 0, ROW_LATENCY, 0},
    {"tpot_mean", "TPOT mean", "s", COL_TPOT, {COMPARE_MEAN, 0}, 0, ROW_LATENCY, 0},
    {"tpot_p50", "TPOT p50", "s", COL_TPOT, {COMPARE_PCTL, 50}, 0, ROW_LATENCY, 0},
    {"tpot_p99", "TPOT p99", "s", COL_TPOT, {COMPARE_PCTL, 99}, 0, ROW_LATENCY, 0},
    {"e2e_mean", "E2E mean", "s", COL_E2E, {COMPARE_MEAN, 0}, 0, ROW_LATENCY, 0},
    {"e2e_p50", "E2E p50", "s", COL_E2E, {COMPARE_PCTL, 50}, 0, ROW_LATENCY, 0},
    {"e2e_p99", "E2E p99", "s", COL_E2E, {COMPARE_PCTL, 99}, 0, ROW_LATENCY, 0},
    {"queue_mean", "queue mean", "s", COL_QUEUE, {COMPARE_MEAN, 0}, 0, ROW_LATENCY, 0},
    {"queue_p50", "queue p50", "s", COL_QUEUE, {COMPARE_PCTL, 50}, 0, ROW_LATENCY, 0},
    {"queue_p99", "queue p99", "s", COL_QUEUE, {COMPARE_PCTL, 99}, 0, ROW_LATENCY, 0},
    {"finished", "finished", "frac", COL_FIN, {COMPARE_MEAN, 0}, 1, ROW_COUNT, 0},
    {"slo_attainment", "SLO attain", "frac", COL_SLO, {COMPARE_MEAN, 0}, 1, ROW_SLO, 0},
    {"goodput", "goodput", "req/s", COL_GOOD, {COMPARE_MEAN, 0}, 1, ROW_SLO, 0},
    /* Throughput is one figure per run (it depends on the arrival process and the makespan,
     * which redrawing requests cannot vary): a CI only when both sides have several runs. */
    {"req_per_s", "requests/s", "req/s", COL_REQS, {COMPARE_MEAN, 0}, 1, ROW_RUN, 0},
    {"out_tok_per_s", "output tok/s", "tok/s", COL_OUT, {COMPARE_MEAN, 0}, 1, ROW_RUN, 0},
    {"tok_per_s", "total tok/s", "tok/s", COL_TOK, {COMPARE_MEAN, 0}, 1, ROW_RUN, 0},
    /* Speculative decoding, as report computes it. The acceptance rate pools the drafts of
     * the drawn requests (accepted over proposed), so it is resampled by request like the
     * latencies; tokens per step needs the steps' decode counts, which no request holds, so
     * it is one figure per run, as throughput. More of either is better for latency at
     * equal cost; a larger k may buy them with more compute, which the latency rows show. */
    {"spec_acceptance", "spec accept", "frac", COL_ACC, {COMPARE_MEAN, 0}, 1, ROW_RATIO,
     COL_PROP},
    {"spec_tokens_per_step", "tokens/step", "tok", COL_TPS, {COMPARE_MEAN, 0}, 1, ROW_SPEC, 0},
    /* Clusters. The prefix hit rate pools the drawn requests' cached and prompt tokens, as
     * spec accept pools drafts (a router that keeps conversations together raises it); the
     * imbalance is one figure per run, as throughput, lower better (1 is even). */
    {"prefix_hit_rate", "prefix hit", "frac", COL_HIT, {COMPARE_MEAN, 0}, 1, ROW_HIT, COL_PTOK},
    {"load_imbalance", "imbalance", "x", COL_BAL, {COMPARE_MEAN, 0}, 0, ROW_BAL, 0},
};
enum { N_METRICS = sizeof METRICS / sizeof METRICS[0] };

/* The first run's figure for a ROW_RUN or ROW_SPEC column. */
static double run_figure(const side_data_t *d, int col) {
    switch (col) {
    case COL_REQS: return d->sum[0].req_per_s;
    case COL_OUT: return d->sum[0].out_tok_per_s;
    case COL_TPS: return d->spec[0].tokens_per_step;
    case COL_BAL: return d->imbalance[0];
    default: return d->sum[0].tok_per_s;
    }
}

/* Whether a run of either side verified drafts: the speculative rows are shown then. */
static int any_spec(const side_data_t *a, const side_data_t *b) {
    for (size_t k = 0; k < a->runs; k++)
        if (a->spec[k].proposed > 0) return 1;
    for (size_t k = 0; k < b->runs; k++)
        if (b->spec[k].proposed > 0) return 1;
    return 0;
}

/* Whether the prefix cache served a request of either side. */
static int any_cached(const side_data_t *a, const side_data_t *b) {
    const side_data_t *s[2] = {a, b};
    for (int q = 0; q < 2; q++)
        for (size_t k = 0; k < s[q]->runs; k++)
            for (size_t i = 0; i < s[q]->rows[k].n; i++)
                if (s[q]->rows[k].cached[i] > 0) return 1;
    return 0;
}

void compare_opts_default(compare_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->seed = COMPARE_DEFAULT_SEED;
    o->resamples = COMPARE_DEFAULT_RESAMPLES;
    o->level = COMPARE_DEFAULT_LEVEL;
    o->min_effect = COMPARE_DEFAULT_MIN_EFFECT;
    o->slo = (report_slo_t){NAN, NAN, NAN};
}

/* The latency rows' note: which requests they cover, when not every request of both. */
static void latency_note(compare_result_t *out, size_t kept, size_t m) {
    const compare_side_t *a = &out->sa, *b = &out->sb;
    if (out->paired) {
        if (kept < m)
            snprintf(out->latency, sizeof out->latency, "the %zu of %zu requests finished in "
                     "every run of both sides (A finished %lld, B %lld of their %lld and %lld)",
                     kept, m, (long long)a->finished, (long long)b->finished,
                     (long long)a->requests, (long long)b->requests);
    } else if (a->finished < a->requests || b->finished < b->requests) {
        snprintf(out->latency, sizeof out->latency, "each side's finished requests (A %lld of "
                 "%lld, B %lld of %lld): not the same requests on both sides",
                 (long long)a->finished, (long long)a->requests, (long long)b->finished,
                 (long long)b->requests);
    }
}

int compare_experiments(const compare_input_t *ia, const compare_input_t *ib,
                        const compare_opts_t *o, compare_result_t *out, char *err,
                        size_t errlen) {
    side_data_t da = {0}, db = {0};
    unsigned char *keep_a = NULL, *keep_b = NULL;
    int ret = -1;
    memset(out, 0, sizeof *out);
    snprintf(out->path_a, sizeof out->path_a, "%s", ia->path ? ia->path : "");
    snprintf(out->path_b, sizeof out->path_b, "%s", ib->path ? ib->path : "");
    out->seed = o->seed;
    out->resamples = o->resamples;
    out->level = o->level;
    out->min_effect = o->min_effect;
    out->has_slo = o->has_slo;
    out->slo = o->slo;
    if (side_data_load(ia, &da, err, errlen) != 0 || side_data_load(ib, &db, err, errlen) != 0)
        goto done;
    out->a = da.sum[0];
    out->b = db.sum[0];
    side_counts(ia, &da, &out->sa);
    side_counts(ib, &db, &out->sb);
    out->paired = same_workload(&da, &db, out->pairing, sizeof out->pairing);
    size_t m = 0, kept = 0;
    if (out->paired) {
        /* Latency of a request one side did not finish is missing there; comparing the rest
         * would set one side's survivors against the other's everything. */
        size_t na = da.off[da.runs], nb = db.off[db.runs];
        keep_a = calloc(na ? na : 1, 1);
        keep_b = calloc(nb ? nb : 1, 1);
        if (!keep_a || !keep_b) {
            snprintf(err, errlen, "out of memory");
            goto done;
        }
        if (out->paired == COMPARE_PAIR_REQUEST) {
            m = da.rows[0].n;
            for (size_t i = 0; i < m; i++) {
                unsigned char k1 = 1;
                for (size_t k = 0; k < da.runs; k++) k1 &= da.rows[k].fin[i];
                for (size_t k = 0; k < db.runs; k++) k1 &= db.rows[k].fin[i];
                for (size_t k = 0; k < da.runs; k++) keep_a[da.off[k] + i] = k1;
                for (size_t k = 0; k < db.runs; k++) keep_b[db.off[k] + i] = k1;
                kept += k1;
            }
        } else {
            for (size_t k = 0; k < da.runs; k++)
                for (size_t i = 0; i < da.rows[k].n; i++) {
                    unsigned char k1 = da.rows[k].fin[i] & db.rows[k].fin[i];
                    keep_a[da.off[k] + i] = keep_b[db.off[k] + i] = k1;
                    kept += k1;
                    m++;
                }
        }
    }
    side_columns(&da, keep_a, o);
    side_columns(&db, keep_b, o);
    latency_note(out, kept, m);
    /* One bootstrap for all the metrics: the same draws, so metrics are resampled jointly,
     * and adding one moves no other (each gets what compare_bootstrap_runs would). */
    /* which[s]: the metric of statistic s; N_METRICS for a ratio's denominator (no row) */
    compare_stat_t stat[2 * N_METRICS];
    int col[2 * N_METRICS], den[2 * N_METRICS];
    compare_est_t est[2 * N_METRICS];
    size_t nstat = 0, which[2 * N_METRICS];
    int spec = any_spec(&da, &db), cluster = da.cluster || db.cluster;
    int hits = cluster || any_cached(&da, &db);
    for (size_t k = 0; k < N_METRICS; k++) {
        int kind = METRICS[k].kind;
        if (kind == ROW_SLO && !o->has_slo) continue;
        if ((kind == ROW_RATIO || kind == ROW_SPEC) && !spec) continue;
        if ((kind == ROW_HIT && !hits) || (kind == ROW_BAL && !cluster)) continue;
        if (row_is_ratio(kind)) {
            which[nstat] = N_METRICS;
            stat[nstat] = (compare_stat_t){COMPARE_MEAN, 0};
            col[nstat] = METRICS[k].den;
            den[nstat++] = -1;
        }
        which[nstat] = k;
        stat[nstat] = METRICS[k].stat;
        col[nstat] = METRICS[k].col;
        den[nstat] = row_is_ratio(kind) ? (int)nstat - 1 : -1;
        nstat++;
    }
    const double *const *xa = (const double *const *)da.x;
    const double *const *xb = (const double *const *)db.x;
    if (compare_boot_stats(xa, da.off, da.runs, xb, db.off, db.runs, NCOLS, out->paired, stat,
                           col, den, nstat, o->resamples, o->seed, o->level, est, err,
                           errlen) != 0)
        goto done;
    double fa = (double)out->sa.finished / (double)out->sa.requests;
    double fb = (double)out->sb.finished / (double)out->sb.requests;
    for (size_t q = 0; q < nstat; q++) {
        if (which[q] == N_METRICS) continue;
        const metric_def_t *d = &METRICS[which[q]];
        compare_metric_t *mt = &out->m[out->n_metrics++];
        snprintf(mt->name, sizeof mt->name, "%s", d->name);
        snprintf(mt->label, sizeof mt->label, "%s", d->label);
        snprintf(mt->unit, sizeof mt->unit, "%s", d->unit);
        mt->higher_is_better = d->higher_is_better;
        mt->per_run = row_is_run(d->kind);
        mt->est = est[q];
        if (row_is_run(d->kind) && (da.runs < 2 || db.runs < 2)) {
            /* A single run's figure, exactly as its summary has it; no interval. */
            double a = da.runs < 2 ? run_figure(&da, d->col) : est[q].a;
            double b = db.runs < 2 ? run_figure(&db, d->col) : est[q].b;
            mt->est = (compare_est_t){a, b, b - a, a != 0 ? 100 * (b - a) / a : NAN, NAN, NAN,
                                      0, 0};
        }
        /* a count's difference is never negligible: shed requests are the point */
        mt->verdict = compare_verdict_min(&mt->est, mt->higher_is_better,
                                          d->kind == ROW_COUNT ? 0 : o->min_effect);
        /* A side that served fewer of its requests can look faster on the ones it kept:
         * its win is flagged, never silent. */
        if (d->kind == ROW_LATENCY && mt->verdict == COMPARE_BETTER && fb < fa)
            snprintf(mt->caveat, sizeof mt->caveat, "B finished fewer (%.1f%% vs %.1f%%)",
                     100 * fb, 100 * fa);
        else if (d->kind == ROW_LATENCY && mt->verdict == COMPARE_WORSE && fa < fb)
            snprintf(mt->caveat, sizeof mt->caveat, "A finished fewer (%.1f%% vs %.1f%%)",
                     100 * fa, 100 * fb);
    }
    ret = 0;
done:
    free(keep_a);
    free(keep_b);
    side_data_free(&da);
    side_data_free(&db);
    return ret;
}

int compare_runs(sqlite3 *db_a, const char *path_a, int64_t id_a, sqlite3 *db_b,
                 const char *path_b, int64_t id_b, const compare_opts_t *o,
                 compare_result_t *out, char *err, size_t errlen) {
    compare_input_t a = {db_a, path_a, NULL, &id_a, 1}, b = {db_b, path_b, NULL, &id_b, 1};
    return compare_experiments(&a, &b, o, out, err, errlen);
}

/* ---------------------------------------------------------------- printing */

/* One row's values in one unit: seconds as ms when the larger of A and B is below 10 s,
 * so a CI never mixes "ms" and "s"; other units as plain numbers. */
typedef struct {
    double scale;
    const char *unit;
} row_unit_t;

static row_unit_t row_unit(const compare_metric_t *m) {
    if (strcmp(m->unit, "frac") == 0) return (row_unit_t){100, "%"};
    if (strcmp(m->unit, "s") != 0) return (row_unit_t){1, ""};
    double big = fmax(fabs(m->est.a), fabs(m->est.b));
    return isnan(big) || big < 10 ? (row_unit_t){1e3, " ms"} : (row_unit_t){1, " s"};
}

static const char *fmt_val(char *buf, size_t len, double v, row_unit_t u, int sign) {
    if (!isfinite(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, sign ? "%+.2f%s" : "%.2f%s", v * u.scale, u.unit);
    return buf;
}

static void print_side(FILE *f, const char *tag, const char *path, const summary_t *s,
                       const compare_side_t *e) {
    if (!e->experiment[0]) {
        fprintf(f, "%s  %s (id %lld) in %s: %s, %s, %s; %lld requests, %lld finished\n", tag,
                s->name, (long long)s->run_id, path, s->policy[0] ? s->policy : "?", s->kind,
                s->status, (long long)s->requests, (long long)s->finished);
        return;
    }
    if (e->identical)
        fprintf(f, "%s  experiment %s: %zu runs, copies counted as one (id", tag, e->experiment,
                e->identical);
    else
        fprintf(f, "%s  experiment %s: %zu runs (ids", tag, e->experiment, e->runs);
    for (size_t k = 0; k < e->runs && k < 8; k++) fprintf(f, " %lld", (long long)e->ids[k]);
    fprintf(f, "%s) in %s: %s, %s; %lld requests, %lld finished\n", e->runs > 8 ? " ..." : "",
            path, s->policy[0] ? s->policy : "?", s->kind, (long long)e->requests,
            (long long)e->finished);
    if (e->identical)
        fprintf(f, "NOTE  experiment %s's %zu runs are copies (nothing in its replay depends on "
                "the seed): counted as one run, so it brings no run-to-run variation; "
                "--repeat windows:N gives the variation between parts of the trace\n",
                e->experiment, e->identical);
}

static void print_counts(FILE *f, const compare_result_t *r) {
    const compare_side_t *a = &r->sa, *b = &r->sb;
    fprintf(f, "counts     %10s %10s\n", "A", "B");
    fprintf(f, "  requests %10lld %10lld\n", (long long)a->requests, (long long)b->requests);
    fprintf(f, "  finished %10lld %10lld\n", (long long)a->finished, (long long)b->finished);
    fprintf(f, "  rejected %10lld %10lld\n", (long long)a->rejected, (long long)b->rejected);
    fprintf(f, "  aborted  %10lld %10lld\n", (long long)a->aborted, (long long)b->aborted);
}

void compare_print(FILE *f, const compare_result_t *r) {
    print_side(f, "A", r->path_a, &r->a, &r->sa);
    print_side(f, "B", r->path_b, &r->b, &r->sb);
    print_counts(f, r);
    fprintf(f, "pairing    %s\n", r->pairing);
    if (r->latency[0]) fprintf(f, "latency    over %s\n", r->latency);
    fprintf(f, "bootstrap  %d resamples, seed %llu, %g%% CI of B - A (percentile method)\n",
            r->resamples, (unsigned long long)r->seed, 100 * r->level);
    if (r->sa.runs > 1 || r->sb.runs > 1)
        fprintf(f, "           hierarchical: the runs of each side redrawn, then requests "
                "within runs (%zu and %zu runs)%s\n", r->sa.runs, r->sb.runs,
                r->sa.runs < 2 || r->sb.runs < 2
                    ? "; a side of one run brings no run-to-run noise" : "");
    if (r->has_slo) {
        char b[3][32];
        const double v[3] = {r->slo.ttft_s, r->slo.tpot_s, r->slo.e2e_s};
        for (int k = 0; k < 3; k++) {
            if (slo_set(v[k])) snprintf(b[k], sizeof b[k], "%g s", v[k]);
            else snprintf(b[k], sizeof b[k], "-");
        }
        fprintf(f, "slo        ttft <= %s, tpot <= %s, e2e <= %s\n", b[0], b[1], b[2]);
    }
    fprintf(f, "verdict    B against A: lower latency, higher throughput and more finished are "
            "better;\n           |B - A| below %g%% of A is no meaningful difference\n\n",
            100 * r->min_effect);
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
        fprintf(f, "%-13s %11s %11s %12s %9s  %-27s %s%s%s%s\n", m->label,
                fmt_val(a, sizeof a, e->a, u, 0), fmt_val(b, sizeof b, e->b, u, 0),
                fmt_val(d, sizeof d, e->diff, u, 1), rel, ci,
                isnan(e->lo) && m->per_run ? "n/a (one value per run)"
                                                    : compare_verdict_name(m->verdict),
                m->caveat[0] ? " (but " : "", m->caveat, m->caveat[0] ? ")" : "");
    }
}

static void json_side(FILE *f, const char *key, const char *path, const summary_t *s,
                      const compare_side_t *e) {
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
    fprintf(f, ", \"requests\": %lld, \"completed\": %lld, \"rejected\": %lld, "
            "\"aborted\": %lld, \"experiment\": ", (long long)e->requests,
            (long long)e->finished, (long long)e->rejected, (long long)e->aborted);
    if (e->experiment[0]) report_json_str(f, e->experiment);
    else fputs("null", f);
    fprintf(f, ", \"runs\": %zu, \"identical_runs\": %zu, \"run_ids\": [", e->runs,
            e->identical);
    for (size_t k = 0; k < e->runs; k++)
        fprintf(f, "%s%lld", k ? ", " : "", (long long)e->ids[k]);
    fputs("]},\n", f);
}

void compare_json(FILE *f, const compare_result_t *r) {
    fputs("{\n", f);
    json_side(f, "a", r->path_a, &r->a, &r->sa);
    json_side(f, "b", r->path_b, &r->b, &r->sb);
    fprintf(f, "  \"paired\": %s, \"pairing\": ", r->paired ? "true" : "false");
    report_json_str(f, r->pairing);
    fputs(", \"latency_requests\": ", f);
    if (r->latency[0]) report_json_str(f, r->latency);
    else fputs("null", f);
    fprintf(f, ",\n  \"bootstrap\": {\"method\": \"percentile\", \"hierarchical\": %s, "
            "\"resamples\": %d, \"seed\": %llu, \"level\": %g},\n  \"min_effect\": %g, "
            "\"slo\": ", r->sa.runs > 1 || r->sb.runs > 1 ? "true" : "false", r->resamples,
            (unsigned long long)r->seed, r->level, r->min_effect);
    if (r->has_slo) {
        fputc('{', f);
        report_json_key_num(f, "ttft_s", slo_set(r->slo.ttft_s) ? r->slo.ttft_s : NAN, ", ");
        report_json_key_num(f, "tpot_s", slo_set(r->slo.tpot_s) ? r->slo.tpot_s : NAN, ", ");
        report_json_key_num(f, "e2e_s", slo_set(r->slo.e2e_s) ? r->slo.e2e_s : NAN, "}");
    } else {
        fputs("null", f);
    }
    fputs(",\n  \"metrics\": {\n", f);
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
                "\"verdict\": \"%s\", \"caveat\": ", e->dropped, m->unit,
                m->higher_is_better ? "true" : "false", compare_verdict_name(m->verdict));
        if (m->caveat[0]) report_json_str(f, m->caveat);
        else fputs("null", f);
        fprintf(f, "}%s\n", k + 1 < r->n_metrics ? "," : "");
    }
    fputs("  }\n}\n", f);
}

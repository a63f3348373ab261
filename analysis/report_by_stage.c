/* report_by_stage: `report --by stage`, one run's metrics per load stage (contract:
 * report_by.h).
 *
 * The stages are the run's config "stages" ([{"stage", "rate", "duration_s", "first",
 * "count", "summary"}], written by `import --inference-perf`; validate's replays of such a
 * run carry them too): stage k holds the requests with first <= req_id < first + count.
 * Our figures come from the requests table, with twinserve's definitions (TTFT, E2E and
 * TPOT = (e2e - ttft) / (output_tokens - 1), as every grouping); the client's own per-stage
 * TPOT mean and ITL percentiles come from "summary" when the stage has one, labelled as
 * inference-perf's: they count SSE messages, not tokens (two per token with vLLM 0.15), so
 * they are printed beside ours, never in place of them. */
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/report_by.h"
#include "traces/stats.h"

typedef struct {
    double *v[3];              /* ttft, e2e, tpot of the stage's requests that have them */
    size_t n[3], cap;
    int64_t requests, finished;
} stage_acc_t;

static int acc_push(stage_acc_t *a, int k, double x) {
    if (a->n[k] == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 1024;
        for (int i = 0; i < 3; i++) {
            double *v = realloc(a->v[i], cap * sizeof *v);
            if (!v) return -1;
            a->v[i] = v;
        }
        a->cap = cap;
    }
    a->v[k][a->n[k]++] = x;
    return 0;
}

/* milliseconds, or "-" */
static void cell(char *buf, size_t len, double s) {
    if (isfinite(s)) snprintf(buf, len, "%.2f", s * 1e3);
    else snprintf(buf, len, "-");
}

/* The stage's requests into a (reset first). 0, or -1 when out of memory. */
static int gather(sqlite3_stmt *q, int64_t first, int64_t count, stage_acc_t *a, int *sql_rc) {
    a->requests = a->finished = 0;
    a->n[0] = a->n[1] = a->n[2] = 0;
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 2, first);
    sqlite3_bind_int64(q, 3, first + count);
    while ((*sql_rc = sqlite3_step(q)) == SQLITE_ROW) {
        a->requests++;
        a->finished += sqlite3_column_int(q, 0);
        for (int k = 0; k < 3; k++)
            if (sqlite3_column_type(q, 1 + k) != SQLITE_NULL &&
                acc_push(a, k, sqlite3_column_double(q, 1 + k)) != 0)
                return -1;
    }
    return 0;
}

static void print_stage(FILE *f, sqlite3_stmt *s, const stage_acc_t *a, int with_ip) {
    char c[13][24], rate[16], dur[16];
    stats_dist_t d[3];
    for (int k = 0; k < 3; k++) {
        stats_sort(a->v[k], a->n[k]);
        stats_describe_sorted(a->v[k], a->n[k], &d[k]);
    }
    const double x[9] = {d[0].mean, d[0].p50, d[0].p90, d[0].p99,
                         d[1].mean, d[1].p50, d[1].p90, d[1].p99, d[2].p50};
    for (int k = 0; k < 9; k++) cell(c[k], sizeof c[k], x[k]);
    for (int k = 0; k < 4; k++)
        cell(c[9 + k], sizeof c[k], sqlite3_column_type(s, 5 + k) == SQLITE_NULL
                                        ? NAN : sqlite3_column_double(s, 5 + k));
    snprintf(rate, sizeof rate, "%g", sqlite3_column_double(s, 1));
    snprintf(dur, sizeof dur, "%g", sqlite3_column_double(s, 2));
    fprintf(f, "%-5lld %6s %6s %8lld %8lld %7lld %9s %9s %9s %9s %10s %10s %10s %10s %8s",
            (long long)sqlite3_column_int64(s, 0), rate, dur, (long long)a->requests,
            (long long)a->finished, (long long)(a->requests - a->finished), c[0], c[1], c[2],
            c[3], c[4], c[5], c[6], c[7], c[8]);
    if (with_ip) fprintf(f, " %12s %10s %10s %10s", c[9], c[10], c[11], c[12]);
    fputc('\n', f);
}

/* The run's name, its requests and whether a stage has a summary; -1 with the message
 * when the run records no stages. */
static int stages_head(sqlite3 *db, int64_t run_id, char *name, size_t namelen,
                       int64_t *total, int *with_ip, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL;
    int ret = -1, rc;
    if (sqlite3_prepare_v2(db, "SELECT name, json_type(config, '$.stages'), "
                           "json_array_length(config, '$.stages'), (SELECT count(*) FROM "
                           "requests WHERE run_id = ?1), EXISTS (SELECT 1 FROM json_each("
                           "runs.config, '$.stages') WHERE json_type(value, '$.summary') = "
                           "'object') FROM runs WHERE id = ?1", -1, &s, NULL) != SQLITE_OK)
        goto sql_error;
    sqlite3_bind_int64(s, 1, run_id);
    if ((rc = sqlite3_step(s)) != SQLITE_ROW) {
        if (rc != SQLITE_DONE) goto sql_error;
        snprintf(err, errlen, "no run with id %lld", (long long)run_id);
        goto done;
    }
    snprintf(name, namelen, "%s", (const char *)sqlite3_column_text(s, 0));
    const char *type = (const char *)sqlite3_column_text(s, 1);
    if (!type || strcmp(type, "array") != 0 || sqlite3_column_int(s, 2) == 0) {
        snprintf(err, errlen, "run '%s' records no load stages: they come with `import "
                 "--inference-perf` and with validate's replays of such a run", name);
        goto done;
    }
    *total = sqlite3_column_int64(s, 3);
    *with_ip = sqlite3_column_int(s, 4);
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot group run %lld by stage: %s", (long long)run_id,
             sqlite3_errmsg(db));
done:
    sqlite3_finalize(s);
    return ret;
}

int report_by_ready(sqlite3 *db, int64_t run_id, const char *key, char *err, size_t errlen) {
    char name[256];
    int64_t total;
    int with_ip;
    if (!key || strcmp(key, "stage") != 0) return 0;
    return stages_head(db, run_id, name, sizeof name, &total, &with_ip, err, errlen);
}

int report_by_stage(FILE *f, sqlite3 *db, int64_t run_id, char *err, size_t errlen) {
    sqlite3_stmt *s = NULL, *q = NULL;
    stage_acc_t a = {0};
    char name[256] = "";
    int ret = -1, rc, with_ip = 0;
    int64_t covered = 0, total = 0;
    if (stages_head(db, run_id, name, sizeof name, &total, &with_ip, err, errlen) != 0)
        return -1;
    if (sqlite3_prepare_v2(db, "SELECT key, json_extract(value, '$.rate'), json_extract(value, "
                           "'$.duration_s'), json_type(value, '$.first'), json_type(value, "
                           "'$.count'), json_extract(value, '$.summary.tpot.mean'), "
                           "json_extract(value, '$.summary.itl.p75'), json_extract(value, "
                           "'$.summary.itl.p90'), json_extract(value, '$.summary.itl.p99'), "
                           "json_extract(value, '$.first'), json_extract(value, '$.count') "
                           "FROM runs, json_each(runs.config, '$.stages') WHERE runs.id = ?1 "
                           "ORDER BY key", -1, &s, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT status = 'finished', ttft_s, e2e_s, tpot_s FROM "
                           "requests WHERE run_id = ?1 AND req_id >= ?2 AND req_id < ?3", -1,
                           &q, NULL) != SQLITE_OK)
        goto sql_error;
    sqlite3_bind_int64(s, 1, run_id);
    sqlite3_bind_int64(q, 1, run_id);
    fprintf(f, "%-5s %6s %6s %8s %8s %7s %9s %9s %9s %9s %10s %10s %10s %10s %8s", "stage",
            "rate", "dur_s", "requests", "finished", "failed", "ttft_mean", "ttft_p50",
            "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p50", "e2e_p90", "e2e_p99", "tpot_p50");
    if (with_ip) fprintf(f, " %12s %10s %10s %10s", "ip_tpot_mean", "ip_itl_p75", "ip_itl_p90",
                         "ip_itl_p99");
    fputc('\n', f);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *tf = (const char *)sqlite3_column_text(s, 3);
        const char *tc = (const char *)sqlite3_column_text(s, 4);
        int64_t first = sqlite3_column_int64(s, 9), count = sqlite3_column_int64(s, 10);
        if (!tf || !tc || strcmp(tf, "integer") || strcmp(tc, "integer") || first < 0 ||
            count < 0) {
            snprintf(err, errlen, "run '%s': its config's stages[%lld] has no request range "
                     "(whole numbers \"first\" and \"count\")", name,
                     (long long)sqlite3_column_int64(s, 0));
            goto done;
        }
        int qrc;
        if (gather(q, first, count, &a, &qrc) != 0) {
            snprintf(err, errlen, "out of memory grouping run %lld by stage", (long long)run_id);
            goto done;
        }
        if (qrc != SQLITE_DONE) goto sql_error;
        covered += a.requests;
        print_stage(f, s, &a, with_ip);
    }
    if (rc != SQLITE_DONE) goto sql_error;
    if (covered != total)
        fprintf(f, "(%lld of the run's %lld requests are in no stage's range)\n",
                (long long)(total - covered), (long long)total);
    fprintf(f, "(latencies in ms; failed = rejected or aborted; ttft, e2e and tpot = (e2e - "
               "ttft) / (output_tokens - 1) are twinserve's, from the requests)\n");
    if (with_ip)
        fprintf(f, "(ip_* = inference-perf's own figures for the stage, over its SSE messages "
                   "(two per token with vLLM 0.15): tpot = (last - first message) / "
                   "(messages - 1), itl = every gap between messages)\n");
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot group run %lld by stage: %s", (long long)run_id,
             sqlite3_errmsg(db));
done:
    for (int i = 0; i < 3; i++) free(a.v[i]);
    sqlite3_finalize(s);
    sqlite3_finalize(q);
    return ret;
}

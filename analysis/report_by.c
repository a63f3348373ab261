/* report_by: per-group metrics of one run (contract: report_by.h). One ordered pass over
 * the run's requests: each group's latencies are gathered, described and printed when the
 * group ends, so memory is one group's requests. */
#include "analysis/report_by.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "traces/stats.h"

int report_by_parse(const char *key, const char **column, char *err, size_t errlen) {
    /* NULLs group with the defaults the trace reader gives: no tenant, priority 0
     * (imported runs and rows the watchdog wrote carry no metadata). */
    if (key && strcmp(key, "tenant") == 0) *column = "coalesce(tenant, '')";
    else if (key && strcmp(key, "priority") == 0) *column = "coalesce(priority, 0)";
    else if (key && strcmp(key, "stage") == 0) *column = "req_id";
    else {
        /* the wording tests/test_metadata.c checks; `report --help` lists stage too */
        snprintf(err, errlen, "cannot group by '%s' (use tenant or priority)", key ? key : "");
        return -1;
    }
    return 0;
}

typedef struct {
    double *v[3];             /* ttft, tpot, e2e of the group's requests that have them */
    size_t n[3], cap;
    int64_t requests, finished, tokens, slo_met, with_deadline, deadline_met;
} group_t;

static int push(group_t *g, int k, double x) {
    if (g->n[k] == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 256;
        for (int i = 0; i < 3; i++) {
            double *v = realloc(g->v[i], cap * sizeof *v);
            if (!v) return -1;
            g->v[i] = v;
        }
        g->cap = cap;
    }
    g->v[k][g->n[k]++] = x;
    return 0;
}

static void ms(char *buf, size_t len, const double *x, size_t n, double p) {
    if (n == 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.2f", stats_percentile_sorted(x, n, p) * 1e3);
}

static void print_group(FILE *f, const char *name, group_t *g, int64_t total_tokens,
                        int has_slo) {
    char c[6][32], slo[16] = "-", dl[32] = "-";
    for (int k = 0; k < 3; k++) {
        stats_sort(g->v[k], g->n[k]);
        ms(c[2 * k], sizeof c[0], g->v[k], g->n[k], 50);
        ms(c[2 * k + 1], sizeof c[0], g->v[k], g->n[k], 99);
    }
    if (has_slo) snprintf(slo, sizeof slo, "%.1f%%", 100.0 * (double)g->slo_met /
                                                      (double)g->requests);
    if (g->with_deadline > 0)
        snprintf(dl, sizeof dl, "%lld/%lld", (long long)g->deadline_met,
                 (long long)g->with_deadline);
    fprintf(f, "%-16s %8lld %8lld %10lld %6.1f%% %9s %9s %9s %9s %9s %9s %7s %9s\n", name,
            (long long)g->requests, (long long)g->finished, (long long)g->tokens,
            total_tokens > 0 ? 100.0 * (double)g->tokens / (double)total_tokens : 0.0, c[0],
            c[1], c[2], c[3], c[4], c[5], slo, dl);
}

int report_by_print(FILE *f, sqlite3 *db, int64_t run_id, const char *key,
                    const report_slo_t *slo, char *err, size_t errlen) {
    const char *col;
    char sql[1024];
    sqlite3_stmt *st = NULL;
    group_t g = {0};
    char cur[64] = "";
    int have = 0, ret = -1, rc, has_slo = 0;
    int64_t total = 0;

    if (report_by_parse(key, &col, err, errlen) != 0) return -1;
    if (strcmp(key, "stage") == 0) return report_by_stage(f, db, run_id, err, errlen);
    /* The SLO test is report.c's: NULL bounds unset, a NULL TPOT meets a TPOT bound. */
    snprintf(sql, sizeof sql,
             "SELECT %s, status = 'finished', ttft_s, tpot_s, e2e_s, generated_tokens,"
             " status = 'finished' AND (?2 IS NULL OR ttft_s <= ?2)"
             " AND (?3 IS NULL OR tpot_s IS NULL OR tpot_s <= ?3)"
             " AND (?4 IS NULL OR e2e_s <= ?4),"
             " deadline_s IS NOT NULL, status = 'finished' AND e2e_s <= deadline_s,"
             " (SELECT coalesce(sum(generated_tokens), 0) FROM requests WHERE run_id = ?1)"
             " FROM requests WHERE run_id = ?1 ORDER BY 1, req_id", col);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    if (slo) {
        const double b[3] = {slo->ttft_s, slo->tpot_s, slo->e2e_s};
        for (int i = 0; i < 3; i++)
            if (b[i] > 0) { /* false for NAN: not set */
                sqlite3_bind_double(st, 2 + i, b[i]);
                has_slo = 1;
            }
    }
    fprintf(f, "%-16s %8s %8s %10s %7s %9s %9s %9s %9s %9s %9s %7s %9s\n",
            strcmp(key, "tenant") == 0 ? "tenant" : "priority", "requests", "finished",
            "out_tok", "share", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50",
            "e2e_p99", "slo", "deadline");
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        char name[64];
        snprintf(name, sizeof name, "%s", (const char *)sqlite3_column_text(st, 0));
        if (!name[0]) snprintf(name, sizeof name, "(none)");
        total = sqlite3_column_int64(st, 9);
        if (have && strcmp(name, cur) != 0) {
            print_group(f, cur, &g, total, has_slo);
            g.requests = g.finished = g.tokens = g.slo_met = g.with_deadline = 0;
            g.deadline_met = 0;
            g.n[0] = g.n[1] = g.n[2] = 0;
        }
        have = 1;
        memcpy(cur, name, sizeof cur);
        g.requests++;
        g.finished += sqlite3_column_int(st, 1);
        g.tokens += sqlite3_column_int64(st, 5);
        g.slo_met += sqlite3_column_int(st, 6);
        g.with_deadline += sqlite3_column_int(st, 7);
        g.deadline_met += sqlite3_column_int(st, 8);
        for (int k = 0; k < 3; k++)
            if (sqlite3_column_type(st, 2 + k) != SQLITE_NULL &&
                push(&g, k, sqlite3_column_double(st, 2 + k)) != 0) {
                snprintf(err, errlen, "out of memory grouping run %lld", (long long)run_id);
                goto done;
            }
    }
    if (rc != SQLITE_DONE) goto sql_error;
    if (have) print_group(f, cur, &g, total, has_slo);
    fprintf(f, "(latencies in ms; share = the group's output tokens / the run's; slo = "
               "requests meeting --slo / the group's; deadline = finished within deadline_s "
               "/ requests with one)\n");
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot group run %lld by %s: %s", (long long)run_id, key,
             sqlite3_errmsg(db));
done:
    for (int i = 0; i < 3; i++) free(g.v[i]);
    sqlite3_finalize(st);
    return ret;
}

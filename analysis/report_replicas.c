/* report_replicas: see report_replicas.h. */
#include "analysis/report_replicas.h"

#include <math.h>
#include <sqlite3.h>
#include <string.h>

#include "analysis/report.h"

static const char SQL_N[] =
    "SELECT max((SELECT count(*) FROM replicas WHERE run_id = ?1), "
    "  ifnull((SELECT max(replica) + 1 FROM requests WHERE run_id = ?1), 0), "
    "  ifnull((SELECT max(replica) + 1 FROM steps WHERE run_id = ?1), 0))";
static const char SQL_ROLES[] = "SELECT replica, role FROM replicas WHERE run_id = ?1";
/* A disaggregated run's requests count on both sides: at the replica that decoded (or
 * ended) them and, when another, at the one that prefilled them, which alone has their
 * prompts, cache hits and first tokens (so a decode replica shows none). */
static const char SQL_REQS[] =
    "SELECT r, count(*), sum(status = 'finished'), sum(cached), sum(prompt), avg(ttft) "
    "FROM (SELECT replica AS r, status, "
    "  CASE WHEN prefill_replica != replica THEN NULL ELSE cached_tokens END AS cached, "
    "  CASE WHEN prefill_replica != replica THEN NULL ELSE prompt_tokens END AS prompt, "
    "  CASE WHEN prefill_replica != replica THEN NULL ELSE ttft_s END AS ttft "
    "  FROM requests WHERE run_id = ?1 AND replica IS NOT NULL "
    "UNION ALL SELECT prefill_replica, status, cached_tokens, prompt_tokens, ttft_s "
    "  FROM requests WHERE run_id = ?1 AND prefill_replica IS NOT NULL "
    "  AND prefill_replica IS NOT replica) GROUP BY r";
static const char SQL_STEPS[] =
    "SELECT replica, count(*), sum(dur_s), "
    "sum(CASE WHEN kv_total > 0 THEN dur_s * kv_used / kv_total END), "
    "sum(CASE WHEN kv_total > 0 THEN dur_s END) FROM steps WHERE run_id = ?1 "
    "AND replica IS NOT NULL GROUP BY replica";

/* Runs sql over the run's rows, handing each to fn; 0 or -1 with err. */
static int each_row(sqlite3 *db, const char *sql, int64_t run_id, report_replicas_t *out,
                    void (*fn)(sqlite3_stmt *, report_replica_t *), char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            int64_t i = sqlite3_column_int64(st, 0);
            if (i >= 0 && i < out->shown) fn(st, &out->rows[i]);
        }
    }
    if (rc != SQLITE_DONE && rc != SQLITE_OK) {
        snprintf(err, errlen, "per-replica figures: %s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    return 0;
}

static void take_role(sqlite3_stmt *st, report_replica_t *x) {
    const char *role = (const char *)sqlite3_column_text(st, 1);
    snprintf(x->role, sizeof x->role, "%s", role ? role : "mixed");
}

static void take_reqs(sqlite3_stmt *st, report_replica_t *x) {
    x->requests = sqlite3_column_int64(st, 1);
    x->finished = sqlite3_column_int64(st, 2);
    double prompt = sqlite3_column_double(st, 4);
    x->hit_rate = prompt > 0 ? sqlite3_column_double(st, 3) / prompt : NAN;
    if (sqlite3_column_type(st, 5) != SQLITE_NULL) x->ttft_mean_s = sqlite3_column_double(st, 5);
}

static void take_steps(sqlite3_stmt *st, report_replica_t *x) {
    x->steps = sqlite3_column_int64(st, 1);
    x->busy_s = sqlite3_column_double(st, 2);
    double t = sqlite3_column_double(st, 4);
    x->kv_use = t > 0 ? sqlite3_column_double(st, 3) / t : NAN;
}

int report_replicas_load(sqlite3 *db, int64_t run_id, report_replicas_t *out, char *err,
                         size_t errlen) {
    sqlite3_stmt *st = NULL;
    out->n = out->shown = 0;
    int rc = sqlite3_prepare_v2(db, SQL_N, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        rc = sqlite3_step(st);
    }
    if (rc != SQLITE_ROW) {
        snprintf(err, errlen, "per-replica figures: %s", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return -1;
    }
    out->n = (int32_t)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    if (out->n <= 1) return 0; /* one replica: the report above is its breakdown */
    out->shown = out->n < REPORT_MAX_REPLICAS ? out->n : REPORT_MAX_REPLICAS;
    for (int32_t i = 0; i < out->shown; i++)
        out->rows[i] = (report_replica_t){ .role = "mixed", .kv_use = NAN, .hit_rate = NAN,
                                           .ttft_mean_s = NAN };
    if (each_row(db, SQL_ROLES, run_id, out, take_role, err, errlen) != 0 ||
        each_row(db, SQL_REQS, run_id, out, take_reqs, err, errlen) != 0 ||
        each_row(db, SQL_STEPS, run_id, out, take_steps, err, errlen) != 0)
        return -1;
    return 0;
}

static void pct(char *buf, size_t len, double v) {
    if (isnan(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, "%.1f%%", 100 * v);
}

void report_replicas_print(FILE *f, const report_replicas_t *r, double makespan_s) {
    if (r->n <= 1) return;
    fprintf(f, "replicas  %d (requests each served, busy = its steps' time over the makespan, "
               "KV used time-weighted)\n", (int)r->n);
    fprintf(f, "  %7s %-7s %9s %9s %8s %7s %8s %9s %10s\n", "replica", "role", "requests",
            "finished", "steps", "busy", "KV used", "cache hit", "TTFT mean");
    for (int32_t i = 0; i < r->shown; i++) {
        const report_replica_t *x = &r->rows[i];
        char busy[16], kv[16], hit[16], ttft[16] = "-";
        pct(busy, sizeof busy, makespan_s > 0 ? x->busy_s / makespan_s : NAN);
        pct(kv, sizeof kv, x->kv_use);
        pct(hit, sizeof hit, x->hit_rate);
        if (!isnan(x->ttft_mean_s)) snprintf(ttft, sizeof ttft, "%.2f ms", 1e3 * x->ttft_mean_s);
        fprintf(f, "  %7d %-7s %9lld %9lld %8lld %7s %8s %9s %10s\n", (int)i, x->role,
                (long long)x->requests, (long long)x->finished, (long long)x->steps, busy, kv,
                hit, ttft);
    }
    if (r->shown < r->n)
        fprintf(f, "  (the first %d of %d replicas)\n", (int)r->shown, (int)r->n);
}

void report_replicas_json(FILE *f, const report_replicas_t *r, double makespan_s) {
    if (r->n <= 1) return;
    fputs("  \"replicas\": [", f);
    for (int32_t i = 0; i < r->shown; i++) {
        const report_replica_t *x = &r->rows[i];
        fprintf(f, "%s{\"replica\": %d, \"role\": ", i ? ", " : "", (int)i);
        report_json_str(f, x->role);
        fprintf(f, ", \"requests\": %lld, \"finished\": %lld, \"steps\": %lld, ",
                (long long)x->requests, (long long)x->finished, (long long)x->steps);
        report_json_key_num(f, "busy_s", x->busy_s, ", ");
        report_json_key_num(f, "busy", makespan_s > 0 ? x->busy_s / makespan_s : NAN, ", ");
        report_json_key_num(f, "kv_use", x->kv_use, ", ");
        report_json_key_num(f, "cache_hit_rate", x->hit_rate, ", ");
        report_json_key_num(f, "ttft_mean_s", x->ttft_mean_s, "}");
    }
    fputs("],\n", f);
}

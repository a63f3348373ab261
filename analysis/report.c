/* report: a run's full metrics (contract: report.h). The summary comes from summary.c and
 * the percentiles from stats.c; this file adds what needs the tokens and steps tables and
 * the SLOs, and the two printers. */
#include "analysis/report.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "traces/json.h"

/* ---------------------------------------------------------------- SLO parsing */

#define SLO_USAGE "expected e.g. ttft=0.5,tpot=0.05,e2e=10 (seconds, or a value with ms)"

/* One "key=value" item; item is a writable copy. */
static int parse_item(char *item, report_slo_t *slo, int *seen, char *err, size_t errlen) {
    char *eq = strchr(item, '=');
    if (!eq) {
        snprintf(err, errlen, "SLO item '%s' lacks '=' (%s)", item, SLO_USAGE);
        return -1;
    }
    *eq = '\0';
    const char *key = item;
    char *val = eq + 1;
    static const char *const keys[] = {"ttft", "tpot", "e2e"};
    double *dst[] = {&slo->ttft_s, &slo->tpot_s, &slo->e2e_s};
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(key, keys[i]) == 0) k = i;
    if (k < 0) {
        snprintf(err, errlen, "unknown SLO metric '%s' (use ttft, tpot, e2e)", key);
        return -1;
    }
    if (seen[k]) {
        snprintf(err, errlen, "SLO metric '%s' given twice", key);
        return -1;
    }
    char num[64];
    double scale = 1;
    size_t len = strlen(val);
    if (len >= sizeof num) {
        snprintf(err, errlen, "SLO %s=%.40s...: value too long", key, val);
        return -1;
    }
    memcpy(num, val, len + 1);
    if (len > 2 && strcmp(num + len - 2, "ms") == 0) {
        num[len - 2] = '\0';
        scale = 1e-3;
    } else if (len > 1 && num[len - 1] == 's') {
        num[len - 1] = '\0';
    }
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (end == num || *end || errno || !isfinite(v) || v <= 0 || v > 1e12) {
        snprintf(err, errlen, "SLO %s=%s: not a positive number of seconds (%s)", key, val,
                 SLO_USAGE);
        return -1;
    }
    *dst[k] = v * scale;
    seen[k] = 1;
    return 0;
}

int report_parse_slo(const char *spec, report_slo_t *slo, char *err, size_t errlen) {
    report_slo_t out = {NAN, NAN, NAN};
    int seen[3] = {0, 0, 0};
    char *copy = NULL;
    int ret = -1;
    if (!spec || !*spec) {
        snprintf(err, errlen, "empty SLO (%s)", SLO_USAGE);
        goto done;
    }
    copy = strdup(spec);
    if (!copy) {
        snprintf(err, errlen, "out of memory parsing the SLO");
        goto done;
    }
    /* strtok would skip empty items; "ttft=1,,e2e=2" is a typo worth reporting. */
    for (char *item = copy, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = '\0';
        if (!*item) {
            snprintf(err, errlen, "empty item in SLO '%s' (%s)", spec, SLO_USAGE);
            goto done;
        }
        if (parse_item(item, &out, seen, err, errlen) != 0) goto done;
    }
    *slo = out;
    ret = 0;
done:
    free(copy);
    return ret;
}

/* ---------------------------------------------------------------- loading */

static int slo_set(double bound) { return bound > 0; }   /* false for NAN too */

/* Tokens emitted together (a speculative step's 1 + accepted drafts share one t_s) are one
 * emission, as vLLM's benchmark takes ITL between streamed chunks: counting them as zero
 * gaps made ITL p50 read 0 under speculation. The rows come in primary-key order, so the
 * gaps are taken here in one pass: a window function (lag) and an ORDER BY in SQL took 6 s
 * on 4 M tokens against under 1 s this way. */
static const char SQL_TOKENS[] =
    "SELECT req_id, t_s FROM tokens WHERE run_id = ?1 ORDER BY req_id, idx";

/* The one pass over a run's tokens: each gap goes out as a report_gap_t (full) or as its
 * length alone (a double: report's ITL needs no more, and the run may have millions). */
static int scan_gaps(sqlite3 *db, int64_t run_id, int full, void **out, size_t *n, char *err,
                     size_t errlen) {
    sqlite3_stmt *st = NULL;
    size_t elem = full ? sizeof(report_gap_t) : sizeof(double), cap = 0;
    char *g = NULL;
    double prev_t = 0;
    int64_t prev_req = 0;
    int have_prev = 0;
    int ret = -1, rc;
    *out = NULL;
    *n = 0;
    if (sqlite3_prepare_v2(db, SQL_TOKENS, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t req = sqlite3_column_int64(st, 0);
        int null_t = sqlite3_column_type(st, 1) == SQLITE_NULL;
        double t = sqlite3_column_double(st, 1);
        if (have_prev && req == prev_req && !null_t && t != prev_t) {
            if (*n == cap) {
                size_t ncap = cap ? 2 * cap : 4096;
                char *grown = realloc(g, ncap * elem);
                if (!grown) {
                    snprintf(err, errlen, "out of memory reading the tokens of run %lld",
                             (long long)run_id);
                    goto done;
                }
                g = grown;
                cap = ncap;
            }
            if (full) ((report_gap_t *)(void *)g)[*n] = (report_gap_t){ t, t - prev_t, req };
            else ((double *)(void *)g)[*n] = t - prev_t;
            (*n)++;
        }
        /* A token without a time breaks the chain rather than spanning two gaps. */
        have_prev = !null_t;
        prev_req = req;
        prev_t = t;
    }
    if (rc != SQLITE_DONE) goto sql_error;
    *out = g;
    g = NULL;
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot read the tokens of run %lld: %s", (long long)run_id,
             sqlite3_errmsg(db));
done:
    if (ret) *n = 0;
    free(g);
    sqlite3_finalize(st);
    return ret;
}

int report_read_gaps(sqlite3 *db, int64_t run_id, report_gap_t **out, size_t *n, char *err,
                     size_t errlen) {
    void *g;
    int rc = scan_gaps(db, run_id, 1, &g, n, err, errlen);
    *out = g;
    return rc;
}

/* The gaps pooled over the run's requests. */
static int load_itl(sqlite3 *db, int64_t run_id, stats_dist_t *out, char *err, size_t errlen) {
    void *x;
    size_t n;
    if (scan_gaps(db, run_id, 0, &x, &n, err, errlen) != 0) return -1;
    stats_sort(x, n);
    stats_describe_sorted(x, n, out);
    free(x);
    return 0;
}

/* NULL bounds are not set; a NULL TPOT (one-token output) meets a TPOT bound. */
static const char SQL_SLO_MET[] =
    "SELECT count(*) FROM requests WHERE run_id = ?1 AND status = 'finished'"
    " AND (?2 IS NULL OR ttft_s <= ?2)"
    " AND (?3 IS NULL OR tpot_s IS NULL OR tpot_s <= ?3)"
    " AND (?4 IS NULL OR e2e_s <= ?4)";

static int load_slo(sqlite3 *db, int64_t run_id, report_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    const double b[3] = {out->slo.ttft_s, out->slo.tpot_s, out->slo.e2e_s};
    if (sqlite3_prepare_v2(db, SQL_SLO_MET, -1, &st, NULL) != SQLITE_OK) goto done;
    sqlite3_bind_int64(st, 1, run_id);
    for (int i = 0; i < 3; i++) {
        if (slo_set(b[i])) sqlite3_bind_double(st, 2 + i, b[i]);
        else sqlite3_bind_null(st, 2 + i);
    }
    if (sqlite3_step(st) != SQLITE_ROW) goto done;
    out->slo_met = sqlite3_column_int64(st, 0);
    ret = 0;
done:
    if (ret != 0)
        snprintf(err, errlen, "cannot count requests meeting the SLOs in run %lld: %s",
                 (long long)run_id, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return ret;
}

typedef struct {
    double v, w;
} tw_sample_t;

static int cmp_sample(const void *a, const void *b) {
    double x = ((const tw_sample_t *)a)->v, y = ((const tw_sample_t *)b)->v;
    return (x > y) - (x < y);
}

/* Smallest value whose cumulative weight reaches share p of the total (s sorted). */
static double tw_quantile(const tw_sample_t *s, size_t n, double total, double p) {
    double cum = 0, need = p * total;
    for (size_t i = 0; i < n; i++) {
        cum += s[i].w;
        /* A relative slack so that rounding in the running sum cannot skip a value. */
        if (cum >= need * (1 - 1e-12)) return s[i].v;
    }
    return s[n - 1].v;
}

static void tw_describe(tw_sample_t *s, size_t n, report_tw_t *out) {
    *out = (report_tw_t){n, NAN, NAN, NAN, NAN};
    if (n == 0) return;
    double total = 0;
    for (size_t i = 0; i < n; i++) total += s[i].w;
    if (!(total > 0)) {   /* no durations recorded: every step counts alike */
        for (size_t i = 0; i < n; i++) s[i].w = 1;
        total = (double)n;
    }
    qsort(s, n, sizeof *s, cmp_sample);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s[i].v * s[i].w;
    out->mean = sum / total;
    out->p50 = tw_quantile(s, n, total, 0.50);
    out->p99 = tw_quantile(s, n, total, 0.99);
    out->max = s[n - 1].v;
}

static const char SQL_STEPS[] =
    "SELECT CASE WHEN dur_s > 0 THEN dur_s ELSE 0 END, num_seqs, kv_used, kv_total "
    "FROM steps WHERE run_id = ?1";

static int load_steps(sqlite3 *db, int64_t run_id, report_t *out, char *err, size_t errlen) {
    sqlite3_stmt *st = NULL;
    tw_sample_t *kv = NULL, *bs = NULL;
    size_t nkv = 0, nbs = 0, cap = 0;
    int ret = -1, rc;
    if (sqlite3_prepare_v2(db, SQL_STEPS, -1, &st, NULL) != SQLITE_OK) goto sql_error;
    sqlite3_bind_int64(st, 1, run_id);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (nbs == cap) {
            size_t ncap = cap ? 2 * cap : 1024;
            tw_sample_t *g1 = realloc(kv, ncap * sizeof *g1);
            if (g1) kv = g1;
            tw_sample_t *g2 = realloc(bs, ncap * sizeof *g2);
            if (g2) bs = g2;
            if (!g1 || !g2) {
                snprintf(err, errlen, "out of memory reading the steps of run %lld",
                         (long long)run_id);
                goto done;
            }
            cap = ncap;
        }
        double w = sqlite3_column_double(st, 0);
        if (sqlite3_column_type(st, 1) != SQLITE_NULL)
            bs[nbs++] = (tw_sample_t){sqlite3_column_double(st, 1), w};
        double total = sqlite3_column_double(st, 3);
        if (sqlite3_column_type(st, 2) != SQLITE_NULL && total > 0)
            kv[nkv++] = (tw_sample_t){sqlite3_column_double(st, 2) / total, w};
    }
    if (rc != SQLITE_DONE) goto sql_error;
    tw_describe(kv, nkv, &out->kv_util);
    tw_describe(bs, nbs, &out->batch);
    ret = 0;
    goto done;
sql_error:
    snprintf(err, errlen, "cannot read the steps of run %lld: %s", (long long)run_id,
             sqlite3_errmsg(db));
done:
    free(kv);
    free(bs);
    sqlite3_finalize(st);
    return ret;
}

/* Every decode entry of a step adds 1 + k to its decode_tokens, and k to its request's
 * spec_proposed: the difference counts the decoding request-steps. total() is 0.0 on no
 * rows, where sum() would be NULL. */
static const char SQL_SPEC[] =
    "SELECT (SELECT total(spec_proposed) FROM requests WHERE run_id = ?1),"
    " (SELECT total(spec_accepted) FROM requests WHERE run_id = ?1),"
    " (SELECT total(decode_tokens) FROM steps WHERE run_id = ?1)";

int report_load_spec(sqlite3 *db, int64_t run_id, report_spec_t *out, char *err,
                     size_t errlen) {
    sqlite3_stmt *st = NULL;
    int ret = -1;
    *out = (report_spec_t){0, 0, 0, NAN, NAN};
    if (sqlite3_prepare_v2(db, SQL_SPEC, -1, &st, NULL) != SQLITE_OK) goto done;
    sqlite3_bind_int64(st, 1, run_id);
    if (sqlite3_step(st) != SQLITE_ROW) goto done;
    out->proposed = sqlite3_column_int64(st, 0);
    out->accepted = sqlite3_column_int64(st, 1);
    out->decode_steps = sqlite3_column_int64(st, 2) - out->proposed;
    if (out->proposed > 0) {
        out->acceptance = (double)out->accepted / (double)out->proposed;
        if (out->decode_steps > 0)
            out->tokens_per_step = 1.0 + (double)out->accepted / (double)out->decode_steps;
    }
    ret = 0;
done:
    if (ret != 0)
        snprintf(err, errlen, "cannot read the speculative counts of run %lld: %s",
                 (long long)run_id, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return ret;
}

int report_load_summary(sqlite3 *db, int64_t run_id, const report_slo_t *slo, report_t *out,
                        char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->itl = (stats_dist_t){0, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    out->kv_util = out->batch = (report_tw_t){0, NAN, NAN, NAN, NAN};
    out->spec = (report_spec_t){0, 0, 0, NAN, NAN};
    out->slo = (report_slo_t){NAN, NAN, NAN};
    out->attainment = out->goodput = NAN;
    if (summary_load(db, run_id, &out->base, err, errlen) != 0) return -1;
    if (slo && (slo_set(slo->ttft_s) || slo_set(slo->tpot_s) || slo_set(slo->e2e_s))) {
        out->has_slo = 1;
        out->slo.ttft_s = slo_set(slo->ttft_s) ? slo->ttft_s : NAN;
        out->slo.tpot_s = slo_set(slo->tpot_s) ? slo->tpot_s : NAN;
        out->slo.e2e_s = slo_set(slo->e2e_s) ? slo->e2e_s : NAN;
        if (load_slo(db, run_id, out, err, errlen) != 0) return -1;
        out->attainment = out->base.requests > 0
            ? (double)out->slo_met / (double)out->base.requests : NAN;
        out->goodput = out->base.makespan_s > 0 ? (double)out->slo_met / out->base.makespan_s
                                                : NAN;
    }
    return 0;
}

int report_load(sqlite3 *db, int64_t run_id, const report_slo_t *slo, report_t *out,
                char *err, size_t errlen) {
    if (report_load_summary(db, run_id, slo, out, err, errlen) != 0) return -1;
    if (load_itl(db, run_id, &out->itl, err, errlen) != 0) return -1;
    if (load_steps(db, run_id, out, err, errlen) != 0) return -1;
    if (report_load_spec(db, run_id, &out->spec, err, errlen) != 0) return -1;
    return report_replicas_load(db, run_id, &out->replicas, err, errlen);
}

/* ---------------------------------------------------------------- printing */

static void print_tw(FILE *f, const char *label, const report_tw_t *t, double scale,
                     const char *unit) {
    if (t->n == 0) {
        fprintf(f, "%-9s -\n", label);
        return;
    }
    fprintf(f, "%-9s mean %.1f%s, p50 %.1f%s, p99 %.1f%s, max %.1f%s (over %zu steps, "
            "time-weighted)\n", label, t->mean * scale, unit, t->p50 * scale, unit,
            t->p99 * scale, unit, t->max * scale, unit, t->n);
}

void report_print(FILE *f, const report_t *r) {
    char m[32];
    summary_print(f, &r->base);
    /* Same layout as summary_print's distribution rows, so ITL lines up under them. */
    if (r->itl.n > 0)
        summary_print_dist(f, "ITL", &r->itl);
    else
        fprintf(f, "  %-6s (no per-token times recorded)\n", "ITL");
    /* A measured run has requests only (analysis/import.h): say so instead of two blanks. */
    if (r->base.steps == 0 && !strcmp(r->base.kind, "measured")) {
        fprintf(f, "steps     none: a measured run records requests, not the server's steps "
                   "(no KV or batch figures)\n");
    } else {
        print_tw(f, "KV used", &r->kv_util, 100, "%");
        print_tw(f, "batch", &r->batch, 1, "");
    }
    const report_spec_t *sp = &r->spec;
    if (sp->proposed > 0)
        fprintf(f, "spec      acceptance %.1f%% (%lld of %lld drafts), %.2f tokens per "
                "request-step (%lld decoding request-steps)\n", 100 * sp->acceptance,
                (long long)sp->accepted, (long long)sp->proposed, sp->tokens_per_step,
                (long long)sp->decode_steps);
    report_replicas_print(f, &r->replicas, r->base.makespan_s);
    if (!r->has_slo) return;
    fprintf(f, "SLO       ");
    const char *sep = "";
    const double b[3] = {r->slo.ttft_s, r->slo.tpot_s, r->slo.e2e_s};
    static const char *const names[] = {"TTFT", "TPOT", "E2E"};
    for (int i = 0; i < 3; i++) {
        if (!slo_set(b[i])) continue;
        fprintf(f, "%s%s <= %s", sep, names[i], summary_fmt_time(m, sizeof m, b[i]));
        sep = ", ";
    }
    char att[32] = "-", good[32] = "-";
    if (!isnan(r->attainment)) snprintf(att, sizeof att, "%.1f%%", 100 * r->attainment);
    if (!isnan(r->goodput)) snprintf(good, sizeof good, "%.3f", r->goodput);
    fprintf(f, ": %lld of %lld requests met all (attainment %s), goodput %s req/s\n",
            (long long)r->slo_met, (long long)r->base.requests, att, good);
}

void report_json_num(FILE *f, double v) {
    if (!isfinite(v)) fputs("null", f);
    else fprintf(f, "%.17g", v);
}

void report_json_str(FILE *f, const char *s) { json_write_str(f, s); }

void report_json_key_num(FILE *f, const char *key, double v, const char *after) {
    fprintf(f, "\"%s\": ", key);
    report_json_num(f, v);
    fputs(after, f);
}

static void json_dist(FILE *f, const char *key, const stats_dist_t *d) {
    fprintf(f, "  \"%s\": {\"n\": %zu, ", key, d->n);
    report_json_key_num(f, "mean", d->mean, ", ");
    report_json_key_num(f, "p50", d->p50, ", ");
    report_json_key_num(f, "p90", d->p90, ", ");
    report_json_key_num(f, "p95", d->p95, ", ");
    report_json_key_num(f, "p99", d->p99, ", ");
    report_json_key_num(f, "min", d->min, ", ");
    report_json_key_num(f, "max", d->max, "},\n");
}

static void json_tw(FILE *f, const char *key, const report_tw_t *t) {
    fprintf(f, "  \"%s\": {\"steps\": %zu, ", key, t->n);
    report_json_key_num(f, "mean", t->mean, ", ");
    report_json_key_num(f, "p50", t->p50, ", ");
    report_json_key_num(f, "p99", t->p99, ", ");
    report_json_key_num(f, "max", t->max, "},\n");
}

void report_json(FILE *f, const report_t *r) {
    const summary_t *s = &r->base;
    fprintf(f, "{\n  \"run\": {\"id\": %lld, \"name\": ", (long long)s->run_id);
    report_json_str(f, s->name);
    const char *keys[] = {"kind", "policy", "status", "error", "trace", "model", "hardware",
                          "started_at", "metrics"};
    const char *vals[] = {s->kind, s->policy, s->status, s->error, s->trace, s->model,
                          s->hardware, s->started_at, s->metrics};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        fprintf(f, ", \"%s\": ", keys[i]);
        if (vals[i][0]) report_json_str(f, vals[i]);
        else fputs("null", f);
    }
    fprintf(f, ", \"oracle_lengths\": %s", s->oracle_lengths < 0 ? "null"
            : s->oracle_lengths ? "true" : "false");
    fputs(", ", f);
    report_json_key_num(f, "wall_s", s->wall_s, "},\n");
    fprintf(f, "  \"requests\": %lld, \"completed\": %lld, \"rejected\": %lld, "
            "\"aborted\": %lld, \"preempted\": %lld, \"preemptions\": %lld, \"steps\": %lld,\n",
            (long long)s->requests, (long long)s->finished, (long long)s->rejected,
            (long long)s->aborted, (long long)s->preempted_requests, (long long)s->preemptions,
            (long long)s->steps);
    fprintf(f, "  \"rejected_by\": {\"context\": %lld, \"kv\": %lld, \"step_budget\": %lld, "
               "\"empty\": %lld, \"router\": %lld, \"other\": %lld}, \"clip_to_context\": %s,\n",
            (long long)s->rejected_by[SUMMARY_REJ_CONTEXT], (long long)s->rejected_by[SUMMARY_REJ_KV],
            (long long)s->rejected_by[SUMMARY_REJ_STEP], (long long)s->rejected_by[SUMMARY_REJ_EMPTY],
            (long long)s->rejected_by[SUMMARY_REJ_ROUTER], (long long)s->rejected_by[SUMMARY_REJ_OTHER],
            s->clip_to_context < 0 ? "null" : s->clip_to_context ? "true" : "false");
    fprintf(f, "  \"prompt_tokens\": %lld, \"output_tokens\": %lld, \"cached_tokens\": %lld, "
               "\"prefix_caching\": %s,\n  ",
            (long long)s->prompt_tokens, (long long)s->output_tokens,
            (long long)s->cached_tokens,
            s->prefix_caching < 0 ? "null" : s->prefix_caching ? "true" : "false");
    report_json_key_num(f, "makespan_s", s->makespan_s, ",\n  \"throughput\": {");
    report_json_key_num(f, "requests_per_s", s->req_per_s, ", ");
    report_json_key_num(f, "output_tokens_per_s", s->out_tok_per_s, ", ");
    report_json_key_num(f, "total_tokens_per_s", s->tok_per_s, "},\n");
    json_dist(f, "ttft_s", &s->ttft);
    json_dist(f, "tpot_s", &s->tpot);
    json_dist(f, "e2e_s", &s->e2e);
    json_dist(f, "queue_s", &s->queue);
    json_dist(f, "itl_s", &r->itl);
    json_tw(f, "kv_utilisation", &r->kv_util);
    json_tw(f, "batch_size", &r->batch);
    report_replicas_json(f, &r->replicas, r->base.makespan_s);
    const report_spec_t *sp = &r->spec;
    if (sp->proposed > 0) {
        fprintf(f, "  \"speculative\": {\"proposed\": %lld, \"accepted\": %lld, "
                "\"decode_steps\": %lld, ", (long long)sp->proposed, (long long)sp->accepted,
                (long long)sp->decode_steps);
        report_json_key_num(f, "acceptance", sp->acceptance, ", ");
        report_json_key_num(f, "tokens_per_step", sp->tokens_per_step, "},\n");
    } else {
        fputs("  \"speculative\": null,\n", f);
    }
    if (!r->has_slo) {
        fputs("  \"slo\": null\n}\n", f);
        return;
    }
    fputs("  \"slo\": {", f);
    report_json_key_num(f, "ttft_s", r->slo.ttft_s, ", ");
    report_json_key_num(f, "tpot_s", r->slo.tpot_s, ", ");
    report_json_key_num(f, "e2e_s", r->slo.e2e_s, ", ");
    fprintf(f, "\"met\": %lld, ", (long long)r->slo_met);
    report_json_key_num(f, "attainment", r->attainment, ", ");
    report_json_key_num(f, "goodput_req_per_s", r->goodput, "}\n}\n");
}

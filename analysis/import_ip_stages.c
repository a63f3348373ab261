/* import_ip_stages: the JSON helpers of the inference-perf folder reader, its per-stage
 * summary files and the cross-checks of the optional files (contract:
 * import_ip_internal.h).
 *
 * A stage file (stage_N_lifecycle_metrics.json) is inference-perf's report of one load
 * stage (inference_perf/reportgen/base.py, summarize_requests, at fc877d3):
 *   load_summary {count, requested_rate, achieved_rate, send_duration, schedule_delay}
 *   successes {count, latency {request_latency, time_to_first_token, time_per_output_token,
 *              normalized_time_per_output_token, inter_token_latency: {mean, min, p0.1,
 *              ..., median, ..., p99.9, max} or null}, throughput {...}}
 *   failures {count, request_latency, prompt_len}
 * Its latencies are the client's, over its SSE messages: TTFT = first message - start;
 * TPOT = (last message - first message) / (messages - 1); ITL = every gap between
 * messages; NTPOT = (end - start) / the client's output token count. vLLM 0.15 sends two
 * messages per token, so its TPOT is about half a per-token figure and its ITL median is
 * microseconds. They are kept as numbers (to double precision) beside our own figures,
 * never mixed with them: validate compares like with like. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analysis/import_ip_internal.h"

/* ------------------------------------------------------------------ helpers */

int ip_fail(ip_t *ip, const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (file && line > 0) snprintf(ip->err, ip->errlen, "%s/%s:%d: %s", ip->dir, file, line, msg);
    else if (file) snprintf(ip->err, ip->errlen, "%s/%s: %s", ip->dir, file, msg);
    else snprintf(ip->err, ip->errlen, "%s: %s", ip->dir, msg);
    return -1;
}

void ip_json_close(ip_json_t *j) {
    free(j->text);
    j->text = NULL;
    j->len = 0;
}

sqlite3_stmt *ip_json_prep(ip_t *ip, const ip_json_t *j, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(ip->db, sql, -1, &st, NULL) != SQLITE_OK) {
        ip_fail(ip, j->name, 0, "cannot read the JSON: %s", sqlite3_errmsg(ip->db));
        return NULL;
    }
    sqlite3_bind_text(st, 1, j->text, (int)j->len, SQLITE_STATIC);
    return st;
}

int ip_json_open(ip_t *ip, const char *name, int required, ip_json_t *j) {
    char path[4096];
    size_t cap = 1 << 16;
    int rc = -1;
    snprintf(j->name, sizeof j->name, "%s", name);
    j->text = NULL;
    j->len = 0;
    snprintf(path, sizeof path, "%s/%s", ip->dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT && !required) return 1;
        if (errno == ENOENT) return ip_fail(ip, NULL, 0, "%s is missing", name);
        return ip_fail(ip, name, 0, "%s", strerror(errno));
    }
    for (;;) {
        char *g = realloc(j->text, cap);
        if (!g) {
            ip_fail(ip, name, 0, "out of memory reading the file");
            goto done;
        }
        j->text = g;
        j->len += fread(j->text + j->len, 1, cap - j->len - 1, f);
        if (j->len < cap - 1) break;
        if (cap > IP_MAX_BYTES) {
            ip_fail(ip, name, 0, "larger than %zu bytes", IP_MAX_BYTES);
            goto done;
        }
        cap *= 2;
    }
    if (ferror(f)) {
        ip_fail(ip, name, 0, "%s", strerror(errno));
        goto done;
    }
    j->text[j->len] = '\0';
    sqlite3_stmt *st = ip_json_prep(ip, j, "SELECT json_valid(?1)");
    if (!st) goto done;
    int valid = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    if (!valid) {
        /* Python's json.dump writes NaN and Infinity, which JSON does not have */
        int py = strstr(j->text, "NaN") || strstr(j->text, "Infinity");
        ip_fail(ip, name, 0, "not valid JSON%s", py ? " (it holds NaN or Infinity, which "
                "Python writes but JSON does not allow)" : "");
        goto done;
    }
    rc = 0;
done:
    fclose(f);
    if (rc != 0) ip_json_close(j);
    return rc;
}

int ip_is_number(const char *t) { return !strcmp(t, "integer") || !strcmp(t, "real"); }

int ip_json_get(ip_t *ip, const ip_json_t *j, const char *path, ip_val_t *v) {
    memset(v, 0, sizeof *v);
    sqlite3_stmt *st = ip_json_prep(ip, j, "SELECT json_type(?1, ?2), json_extract(?1, ?2)");
    if (!st) return -1;
    sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(st, 0);
        const char *s = (const char *)sqlite3_column_text(st, 1);
        snprintf(v->type, sizeof v->type, "%s", t ? t : "");
        snprintf(v->text, sizeof v->text, "%s", s ? s : "");
        v->num = sqlite3_column_double(st, 1);
        v->i = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return ip_fail(ip, j->name, 0, "cannot read %s: %s", path, sqlite3_errmsg(ip->db));
    return 0;
}

static int missing_or(ip_t *ip, const ip_json_t *j, const char *label, const ip_val_t *v,
                      const char *want) {
    if (!v->type[0]) return ip_fail(ip, j->name, 0, "key '%s' is missing", label);
    return ip_fail(ip, j->name, 0, "key '%s': expected %s, got %s", label, want, v->type);
}

int ip_json_num(ip_t *ip, const ip_json_t *j, const char *path, const char *label,
                int positive, double *out) {
    ip_val_t v;
    const char *want = positive ? "a number > 0" : "a number >= 0";
    if (ip_json_get(ip, j, path, &v) != 0) return -1;
    if (!ip_is_number(v.type)) return missing_or(ip, j, label, &v, want);
    if (!isfinite(v.num) || (positive ? !(v.num > 0) : !(v.num >= 0)))
        return ip_fail(ip, j->name, 0, "key '%s': expected %s, got %.9g", label, want, v.num);
    *out = v.num;
    return 0;
}

int ip_json_int(ip_t *ip, const ip_json_t *j, const char *path, const char *label,
                int64_t min, int64_t *out) {
    ip_val_t v;
    char want[64];
    snprintf(want, sizeof want, "a whole number >= %lld", (long long)min);
    if (ip_json_get(ip, j, path, &v) != 0) return -1;
    if (strcmp(v.type, "integer") != 0) return missing_or(ip, j, label, &v, want);
    if (v.i < min)
        return ip_fail(ip, j->name, 0, "key '%s': expected %s, got %lld", label, want,
                       (long long)v.i);
    *out = v.i;
    return 0;
}

/* ------------------------------------------------------------------ stage summaries */

/* inference-perf's latency blocks, and the short names the run's config uses */
static const char *const lat_keys[][2] = {
    {"time_to_first_token", "ttft"}, {"request_latency", "e2e"},
    {"time_per_output_token", "tpot"}, {"inter_token_latency", "itl"},
    {"normalized_time_per_output_token", "ntpot"},
};
static const char *const stat_keys[][2] = {
    {"mean", "mean"}, {"median", "p50"}, {"p75", "p75"}, {"p90", "p90"}, {"p95", "p95"},
    {"p99", "p99"}, {"p99.9", "p99_9"}, {"max", "max"},
};

/* Writes ,"NAME":{"k":v,...} for the object at path: its members keys[i][0], renamed
 * keys[i][1], that are numbers (null or absent ones left out). Nothing when the object is
 * absent or null, or has none of the members. 0 or -1. */
static int write_block(ip_t *ip, const ip_json_t *j, FILE *f, const char *path,
                       const char *label, const char *name, const char *const (*keys)[2],
                       size_t n_keys) {
    ip_val_t v;
    char p[256], l[256], buf[1024];
    size_t len = 0;
    if (ip_json_get(ip, j, path, &v) != 0) return -1;
    if (!v.type[0] || !strcmp(v.type, "null")) return 0;
    if (strcmp(v.type, "object") != 0)
        return ip_fail(ip, j->name, 0, "key '%s': expected an object or null, got %s", label,
                       v.type);
    for (size_t k = 0; k < n_keys; k++) {
        snprintf(p, sizeof p, "%s.\"%s\"", path, keys[k][0]);
        snprintf(l, sizeof l, "%s.%s", label, keys[k][0]);
        if (ip_json_get(ip, j, p, &v) != 0) return -1;
        if (!v.type[0] || !strcmp(v.type, "null")) continue;
        if (!ip_is_number(v.type))
            return ip_fail(ip, j->name, 0, "key '%s': expected a number or null, got %s", l,
                           v.type);
        /* %.17g: the double the file's decimal text parses to, exactly */
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s\"%s\":%.17g",
                                len ? "," : "", keys[k][1], v.num);
        if (len >= sizeof buf) return ip_fail(ip, j->name, 0, "key '%s': too long", label);
    }
    if (len) fprintf(f, ",\"%s\":{%s}", name, buf);
    return 0;
}

/* The stage's "summary" object: the counts, the latency blocks, the throughput. */
static int write_summary(ip_t *ip, const ip_json_t *j, FILE *f, const ip_stage_t *s) {
    static const char *const thr[][2] = {
        {"output_tokens_per_sec", "output_tokens_per_sec"},
        {"requests_per_sec", "requests_per_sec"},
        {"input_tokens_per_sec", "input_tokens_per_sec"},
        {"total_tokens_per_sec", "total_tokens_per_sec"},
    };
    char path[160], label[160];
    ip_val_t v;
    if (ip_json_get(ip, j, "$.successes.latency", &v) != 0) return -1;
    if (v.type[0] && strcmp(v.type, "null") && strcmp(v.type, "object"))
        return ip_fail(ip, j->name, 0, "key 'successes.latency': expected an object or null, "
                       "got %s", v.type);
    fprintf(f, ",\"summary\":{\"successes\":%lld,\"failures\":%lld", (long long)s->successes,
            (long long)s->failures);
    for (size_t b = 0; b < sizeof lat_keys / sizeof *lat_keys; b++) {
        snprintf(path, sizeof path, "$.successes.latency.%s", lat_keys[b][0]);
        snprintf(label, sizeof label, "successes.latency.%s", lat_keys[b][0]);
        if (write_block(ip, j, f, path, label, lat_keys[b][1], stat_keys,
                        sizeof stat_keys / sizeof *stat_keys) != 0)
            return -1;
    }
    if (write_block(ip, j, f, "$.successes.throughput", "successes.throughput", "throughput",
                    thr, sizeof thr / sizeof *thr) != 0)
        return -1;
    fputc('}', f);
    return 0;
}

/* Pass one over a stage file: its object shape, request counts and rate. */
static int stage_counts(ip_t *ip, const ip_json_t *j, size_t k, ip_stage_t *s) {
    ip_val_t v;
    double rate;
    if (ip_json_get(ip, j, "$", &v) != 0) return -1;
    if (strcmp(v.type, "object") != 0)
        return ip_fail(ip, j->name, 0, "expected an object (inference-perf's stage report), "
                       "got %s", v.type);
    if (ip_json_int(ip, j, "$.load_summary.count", "load_summary.count", 0, &s->count) != 0 ||
        ip_json_num(ip, j, "$.load_summary.requested_rate", "load_summary.requested_rate", 1,
                    &rate) != 0 ||
        ip_json_int(ip, j, "$.successes.count", "successes.count", 0, &s->successes) != 0 ||
        ip_json_int(ip, j, "$.failures.count", "failures.count", 0, &s->failures) != 0)
        return -1;
    if (fabs(rate - s->rate) > 1e-9 * fmax(1, fabs(s->rate)))
        return ip_fail(ip, j->name, 0, "load_summary.requested_rate %.17g disagrees with "
                       "config.yaml's load.stages[%zu].rate %.17g (line %d)", rate, k, s->rate,
                       s->line);
    if (s->successes + s->failures != s->count)
        return ip_fail(ip, j->name, 0, "successes.count %lld + failures.count %lld is not "
                       "load_summary.count %lld", (long long)s->successes,
                       (long long)s->failures, (long long)s->count);
    return 0;
}

int ip_read_stages(ip_t *ip, ip_stage_t *st, size_t n, const unsigned char *failed,
                   size_t n_req, FILE *f) {
    ip_json_t *js = calloc(n ? n : 1, sizeof *js);
    char name[64], path[4096], sums[512];
    int64_t total = 0;
    size_t len = 0;
    int rc = -1;
    if (!js) return ip_fail(ip, NULL, 0, "out of memory");
    for (size_t k = 0; k < n; k++) {
        snprintf(name, sizeof name, "stage_%zu_lifecycle_metrics.json", k);
        if (ip_json_open(ip, name, 1, &js[k]) != 0) goto done;
        if (stage_counts(ip, &js[k], k, &st[k]) != 0) goto done;
        st[k].first = total;
        total += st[k].count;
        if (len < sizeof sums)
            len += (size_t)snprintf(sums + len, sizeof sums - len, "%s%lld", k ? " + " : "",
                                    (long long)st[k].count);
    }
    snprintf(name, sizeof name, "stage_%zu_lifecycle_metrics.json", n);
    snprintf(path, sizeof path, "%s/%s", ip->dir, name);
    if (access(path, F_OK) == 0) {
        ip_fail(ip, NULL, 0, "%s is there, but config.yaml's load.stages lists %zu stage%s",
                name, n, n == 1 ? "" : "s");
        goto done;
    }
    if (total != (int64_t)n_req) {
        ip_fail(ip, NULL, 0, "the stage files count %lld requests (%s), but replay.json has "
                "%zu", (long long)total, sums, n_req);
        goto done;
    }
    fputs(",\"stages\":[", f);
    for (size_t k = 0; k < n; k++) {
        int64_t bad = 0;
        for (int64_t i = st[k].first; i < st[k].first + st[k].count; i++) bad += failed[i];
        if (bad != st[k].failures) {
            ip_fail(ip, js[k].name, 0, "failures.count %lld, but ground_truth.json marks %lld "
                    "of the stage's requests (%lld-%lld) failed", (long long)st[k].failures,
                    (long long)bad, (long long)st[k].first,
                    (long long)(st[k].first + st[k].count - 1));
            goto done;
        }
        fprintf(f, "%s{\"stage\":%zu,\"rate\":%.17g,\"duration_s\":%.17g,\"first\":%lld,"
                "\"count\":%lld", k ? "," : "", k, st[k].rate, st[k].duration,
                (long long)st[k].first, (long long)st[k].count);
        if (write_summary(ip, &js[k], f, &st[k]) != 0) goto done;
        fputc('}', f);
    }
    fputc(']', f);
    rc = 0;
done:
    for (size_t k = 0; k < n; k++) ip_json_close(&js[k]);
    free(js);
    return rc;
}

/* ------------------------------------------------------------------ cross-checks */

static int stage_differs(ip_t *ip, const char *file, int line, size_t k, const char *what,
                         double got, double want) {
    return ip_fail(ip, file, line, "key 'load.stages[%zu].%s' is %.17g, but config.yaml's is "
                   "%.17g (the folder mixes two experiments?)", k, what, got, want);
}

static const char *const profile_file = "profile.yaml";

/* profile.yaml in JSON (as these folders have it). */
static int profile_json(ip_t *ip, const ip_stage_t *st, size_t n) {
    static const char *const what[2] = {"rate", "duration"};
    ip_json_t j;
    ip_val_t v;
    char p[64], l[64];
    sqlite3_stmt *q = NULL;
    int rc = -1;
    if (ip_json_open(ip, profile_file, 1, &j) != 0) return -1;
    if (ip_json_get(ip, &j, "$.load.stages", &v) != 0) goto done;
    if (strcmp(v.type, "array") != 0) {
        rc = 0;   /* a profile without stages (a sweep) says nothing to check */
        goto done;
    }
    if (!(q = ip_json_prep(ip, &j, "SELECT json_array_length(?1, '$.load.stages')"))) goto done;
    size_t len = sqlite3_step(q) == SQLITE_ROW ? (size_t)sqlite3_column_int64(q, 0) : 0;
    if (len != n) {
        ip_fail(ip, profile_file, 0, "key 'load.stages' lists %zu stage%s, but config.yaml's "
                "lists %zu", len, len == 1 ? "" : "s", n);
        goto done;
    }
    for (size_t k = 0; k < n; k++)
        for (int w = 0; w < 2; w++) {
            double x, want = w ? st[k].duration : st[k].rate;
            snprintf(p, sizeof p, "$.load.stages[%zu].%s", k, what[w]);
            snprintf(l, sizeof l, "load.stages[%zu].%s", k, what[w]);
            if (ip_json_num(ip, &j, p, l, 1, &x) != 0) goto done;
            if (x != want) {
                stage_differs(ip, profile_file, 0, k, what[w], x, want);
                goto done;
            }
        }
    rc = 0;
done:
    sqlite3_finalize(q);
    ip_json_close(&j);
    return rc;
}

/* profile.yaml in block YAML. */
static int profile_yaml(ip_t *ip, const char *path, const ip_stage_t *st, size_t n) {
    static const char *const what[2] = {"rate", "duration"};
    yaml_doc_t *doc = NULL;
    int rc = -1;
    if (yaml_load(path, &doc, ip->err, ip->errlen) != 0) return -1;
    const yaml_node_t *stages = yaml_get(yaml_get(yaml_root(doc), "load"), "stages");
    if (!stages || yaml_type(stages) != YAML_SEQ) {
        rc = 0;
        goto done;
    }
    if (yaml_len(stages) != n) {
        ip_fail(ip, profile_file, yaml_line(stages), "key 'load.stages' lists %zu stage%s, "
                "but config.yaml's lists %zu", yaml_len(stages), yaml_len(stages) == 1 ? "" : "s",
                n);
        goto done;
    }
    for (size_t k = 0; k < n; k++)
        for (int w = 0; w < 2; w++) {
            const yaml_node_t *item = yaml_at(stages, k, NULL), *x = yaml_get(item, what[w]);
            double want = w ? st[k].duration : st[k].rate;
            if (yaml_num(x) != want) {   /* NAN (absent, not a number) differs too */
                stage_differs(ip, profile_file, yaml_line(x ? x : item), k, what[w],
                              yaml_num(x), want);
                goto done;
            }
        }
    rc = 0;
done:
    yaml_free(doc);
    return rc;
}

/* profile.yaml is what inference-perf was given: one line of JSON in these folders, though
 * a block-YAML profile is read as well. Its load.stages, when it has them, must be the
 * resolved config's: a cheap guard against a folder that mixes two experiments' files. */
static int check_profile(ip_t *ip, const ip_stage_t *st, size_t n) {
    char path[4096];
    int c;
    snprintf(path, sizeof path, "%s/%s", ip->dir, profile_file);
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? 0 : ip_fail(ip, profile_file, 0, "%s", strerror(errno));
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {}
    fclose(f);
    return c == '{' ? profile_json(ip, st, n) : profile_yaml(ip, path, st, n);
}

int ip_cross_check(ip_t *ip, const ip_stage_t *st, size_t n, size_t n_req) {
    ip_json_t j;
    int64_t count;
    if (check_profile(ip, st, n) != 0) return -1;
    int r = ip_json_open(ip, "summary_lifecycle_metrics.json", 0, &j);
    if (r != 0) return r < 0 ? -1 : 0;
    r = ip_json_int(ip, &j, "$.load_summary.count", "load_summary.count", 0, &count);
    if (r == 0 && count != (int64_t)n_req)
        r = ip_fail(ip, j.name, 0, "load_summary.count %lld is not the %zu requests of "
                    "replay.json", (long long)count, n_req);
    ip_json_close(&j);
    return r;
}

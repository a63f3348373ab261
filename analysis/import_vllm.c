/* import_vllm: the result JSON of vLLM's serving benchmark (contract: import.h). The file
 * is read whole and parsed by SQLite's JSON functions in a private in-memory database, the
 * parser every build already links, so there is no second JSON reader to keep correct.
 * Each query below parses the text again; SQLite does that at a few hundred MB/s, against
 * the minutes a benchmark producing such a file takes.
 *
 * The per-request lists are parallel: entry i of input_lens, output_lens, ttfts (seconds),
 * itls (a list of seconds between streamed chunks), errors ("" when it succeeded) and the
 * optional latencies and start_times all describe request i. */
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/import_internal.h"

/* Longer than any benchmark result; guards the int length SQLite's bind takes. */
#define VLLM_MAX_BYTES ((size_t)1 << 30)

static const char *const required_keys[] = {
    "duration", "completed", "request_rate", "input_lens", "output_lens", "ttfts", "itls",
    "errors",
};

typedef struct {
    const char *path;
    sqlite3 *db;
    char *text;                /* the file, NUL-terminated, owned */
    size_t len;
    size_t n;                  /* requests: the length of every per-request list */
    char *err;
    size_t errlen;
    int64_t nonfinite;         /* NaN / Infinity tokens read as null (python's json.dump) */
} vj_t;

static int vfail(vj_t *v, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(v->err, v->errlen, "%s: %s", v->path, msg);
    return -1;
}

static int read_file(vj_t *v) {
    FILE *f = fopen(v->path, "rb");
    size_t cap = 1 << 16;
    int rc = -1;
    if (!f) return vfail(v, "%s", strerror(errno));
    if (!(v->text = malloc(cap))) goto oom;
    for (;;) {
        v->len += fread(v->text + v->len, 1, cap - v->len - 1, f);
        if (v->len < cap - 1) break;
        if (cap > VLLM_MAX_BYTES) {
            vfail(v, "larger than %zu bytes: not a benchmark result", VLLM_MAX_BYTES);
            goto done;
        }
        char *g = realloc(v->text, cap * 2);
        if (!g) goto oom;
        v->text = g;
        cap *= 2;
    }
    if (ferror(f)) {
        vfail(v, "%s", strerror(errno));
        goto done;
    }
    v->text[v->len] = '\0';
    rc = 0;
    goto done;
oom:
    vfail(v, "out of memory reading the file");
done:
    fclose(f);
    return rc;
}

/* A statement over the document: ?1 is the text, ?2 the optional JSON path. */
static sqlite3_stmt *prep(vj_t *v, const char *sql, const char *path) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(v->db, sql, -1, &st, NULL) != SQLITE_OK) {
        vfail(v, "cannot read the JSON: %s", sqlite3_errmsg(v->db));
        return NULL;
    }
    sqlite3_bind_text(st, 1, v->text, (int)v->len, SQLITE_STATIC);
    if (path) sqlite3_bind_text(st, 2, path, -1, SQLITE_TRANSIENT);
    return st;
}

/* '$."key"': keys are quoted so that any spelling is a member name, never path syntax. */
static void key_path(const char *key, char *buf, size_t len) {
    snprintf(buf, len, "$.\"%s\"", key);
}

/* The JSON type of a top-level member ("integer", "real", "text", "array", "null", ...),
 * or "" when the key is absent. */
static int member_type(vj_t *v, const char *key, char *type, size_t len) {
    char path[128];
    key_path(key, path, sizeof path);
    sqlite3_stmt *st = prep(v, "SELECT json_type(?1, ?2)", path);
    if (!st) return -1;
    int rc = sqlite3_step(st);
    const char *t = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
    snprintf(type, len, "%s", t ? t : "");
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW) return vfail(v, "cannot read key '%s': %s", key, sqlite3_errmsg(v->db));
    return 0;
}

static int member_double(vj_t *v, const char *key, double *out) {
    char path[128];
    key_path(key, path, sizeof path);
    sqlite3_stmt *st = prep(v, "SELECT json_extract(?1, ?2)", path);
    if (!st) return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) *out = sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 0 : vfail(v, "cannot read key '%s'", key);
}

static int is_number(const char *type) { return !strcmp(type, "integer") || !strcmp(type, "real"); }

/* Python's json.dump writes NaN, Infinity and -Infinity, which JSON does not have; vLLM's
 * benchmark does so for statistics of empty sets (a std of one request). They become null
 * outside strings, so that a file is refused only for a non-finite value in a field the
 * import reads (which then says so, naming the key). */
static int nan_to_null(vj_t *v) {
    static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
    size_t cap = v->len + v->len / 3 + 16, o = 0;
    char *out = malloc(cap);
    if (!out) return vfail(v, "out of memory");
    int in_str = 0;
    for (size_t i = 0; i < v->len; i++) {
        char c = v->text[i];
        if (in_str) {
            out[o++] = c;
            if (c == '\\' && i + 1 < v->len) out[o++] = v->text[++i];
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') in_str = 1;
        size_t w = 0;
        for (int k = 0; k < 3 && !w; k++) {
            size_t n = strlen(words[k]);
            if (!strncmp(v->text + i, words[k], n)) w = n;
        }
        if (w) {
            memcpy(out + o, "null", 4);
            o += 4;
            i += w - 1;
            v->nonfinite++;
        } else {
            out[o++] = c;
        }
    }
    out[o] = '\0';
    free(v->text);
    v->text = out;
    v->len = o;
    return 0;
}

/* The document must be one object holding every required key. */
static int check_shape(vj_t *v) {
    char type[32];
    sqlite3_stmt *st = prep(v, "SELECT json_valid(?1), json_type(?1)", NULL);
    if (!st) return -1;
    int valid = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
    const char *t = valid ? (const char *)sqlite3_column_text(st, 1) : NULL;
    snprintf(type, sizeof type, "%s", t ? t : "");
    sqlite3_finalize(st);
    if (!valid) {
        return vfail(v, "not valid JSON");
    }
    if (strcmp(type, "object") != 0)
        return vfail(v, "not a vLLM benchmark result: the document is a JSON %s, not an "
                     "object", type);
    for (size_t i = 0; i < sizeof required_keys / sizeof *required_keys; i++) {
        if (member_type(v, required_keys[i], type, sizeof type) != 0) return -1;
        if (!type[0])
            return vfail(v, "not a vLLM serving benchmark result saved with --save-result "
                         "--save-detailed: key '%s' is missing", required_keys[i]);
    }
    return 0;
}

/* A per-request list: an array of exactly v->n entries (the first one read sets n). */
static int check_list(vj_t *v, const char *key) {
    char type[32], path[128];
    if (member_type(v, key, type, sizeof type) != 0) return -1;
    if (strcmp(type, "array") != 0)
        return vfail(v, "key '%s': expected a list with one entry per request, got %s", key,
                     type);
    key_path(key, path, sizeof path);
    sqlite3_stmt *st = prep(v, "SELECT json_array_length(?1, ?2)", path);
    if (!st) return -1;
    size_t n = sqlite3_step(st) == SQLITE_ROW ? (size_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (v->n == 0) {
        if (n == 0) return vfail(v, "key '%s' is empty: the result has no requests", key);
        v->n = n;
    } else if (n != v->n) {
        return vfail(v, "key '%s' has %zu entries, but 'input_lens' has %zu", key, n, v->n);
    }
    return 0;
}

/* Calls fn for every entry of the per-request list key, with its index, its JSON type and
 * the statement whose column 2 holds its value; stops at fn's first non-zero. 0, or -1. */
typedef int (*entry_fn)(vj_t *v, void *ctx, const char *key, int64_t i, const char *type,
                        sqlite3_stmt *st);

static int each_entry(vj_t *v, const char *key, entry_fn fn, void *ctx) {
    char path[128];
    int rc = -1, r;
    key_path(key, path, sizeof path);
    sqlite3_stmt *st = prep(v, "SELECT key, type, value FROM json_each(?1, ?2)", path);
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0);
        if (i < 0 || (size_t)i >= v->n) continue;
        if (fn(v, ctx, key, i, (const char *)sqlite3_column_text(st, 1), st) != 0) goto done;
    }
    if (r != SQLITE_DONE) {
        vfail(v, "cannot read key '%s': %s", key, sqlite3_errmsg(v->db));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

typedef enum { L_COUNT, L_TIME } list_kind_t;

typedef struct {
    list_kind_t kind;
    double *out;
} list_ctx_t;

static int list_entry(vj_t *v, void *ctx, const char *key, int64_t i, const char *type,
                      sqlite3_stmt *st) {
    const list_ctx_t *c = ctx;
    double x = sqlite3_column_double(st, 2);
    if (c->kind == L_TIME && !strcmp(type, "null")) x = NAN;
    else if (c->kind == L_COUNT ? strcmp(type, "integer") != 0 : !is_number(type))
        return vfail(v, "key '%s' [%lld]: expected %s, got %s", key, (long long)i,
                     c->kind == L_COUNT ? "a whole number of tokens" : "seconds",
                     !strcmp(type, "null") && v->nonfinite ? "NaN or null" : type);
    else if (x < 0)
        return vfail(v, "key '%s' [%lld]: %.9g is negative", key, (long long)i, x);
    c->out[i] = x;
    return 0;
}

/* Reads a list of numbers into out[n]: L_COUNT whole numbers >= 0, L_TIME seconds >= 0
 * (null read as NAN: vLLM leaves some for failed requests). */
static int read_list(vj_t *v, const char *key, list_kind_t kind, double *out) {
    list_ctx_t c = {kind, out};
    return each_entry(v, key, list_entry, &c);
}

/* errors: a non-empty text marks request i failed, with that text as its reason. */
static int error_entry(vj_t *v, void *ctx, const char *key, int64_t i, const char *type,
                       sqlite3_stmt *st) {
    import_data_t *d = ctx;
    if (!strcmp(type, "null")) return 0;
    if (strcmp(type, "text") != 0)
        return vfail(v, "key '%s' [%lld]: expected a message (\"\" when it succeeded), got %s",
                     key, (long long)i, type);
    const char *msg = (const char *)sqlite3_column_text(st, 2);
    if (msg && *msg && import_req_fail(&d->req[i], msg) != 0) return vfail(v, "out of memory");
    return 0;
}

/* itls: per finished request, the chunk times ttft, ttft + itl[0], ... (from its arrival). */
static int read_itls(vj_t *v, import_data_t *d) {
    int rc = -1, r;
    sqlite3_stmt *st = prep(v, "SELECT key, type, json_array_length(value) FROM "
                            "json_each(?1, '$.\"itls\"')", NULL);
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1);
        if (strcmp(type, "array") != 0) {
            vfail(v, "key 'itls' [%lld]: expected a list of seconds, got %s", (long long)i, type);
            goto done;
        }
        import_req_t *q = &d->req[i];
        if (q->error) continue;
        q->tok = malloc((size_t)(sqlite3_column_int64(st, 2) + 1) * sizeof *q->tok);
        if (!q->tok) {
            vfail(v, "out of memory");
            goto done;
        }
        q->tok[0] = q->ttft;
        q->n_tok = 1;
    }
    if (r != SQLITE_DONE) goto sql_error;
    sqlite3_finalize(st);
    st = prep(v, "SELECT o.key, i.key, i.type, i.value FROM json_each(?1, '$.\"itls\"') o, "
              "json_each(o.value) i ORDER BY o.key, i.key", NULL);
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0), k = sqlite3_column_int64(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        double gap = sqlite3_column_double(st, 3);
        if (!is_number(type) || gap < 0) {
            if (is_number(type)) vfail(v, "key 'itls' [%lld][%lld]: %.9g is negative",
                                       (long long)i, (long long)k, gap);
            else vfail(v, "key 'itls' [%lld][%lld]: expected seconds, got %s", (long long)i,
                       (long long)k, type);
            goto done;
        }
        import_req_t *q = &d->req[i];
        if (!q->error) {
            q->tok[q->n_tok] = q->tok[q->n_tok - 1] + gap;
            q->n_tok++;
        }
    }
    if (r != SQLITE_DONE) goto sql_error;
    rc = 0;
    goto done;
sql_error:
    vfail(v, "cannot read key 'itls': %s", sqlite3_errmsg(v->db));
done:
    sqlite3_finalize(st);
    return rc;
}

/* Every scalar member, as one JSON object, for the run's config. */
static int read_meta(vj_t *v, import_data_t *d) {
    sqlite3_stmt *st = prep(v, "SELECT json_group_object(key, CASE type WHEN 'true' THEN "
                            "json('true') WHEN 'false' THEN json('false') ELSE value END) "
                            "FROM json_each(?1) WHERE type NOT IN ('array', 'object')", NULL);
    if (!st) return -1;
    const char *t = sqlite3_step(st) == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0)
                                                  : NULL;
    d->meta_json = strdup(t ? t : "{}");
    sqlite3_finalize(st);
    return d->meta_json ? 0 : vfail(v, "out of memory");
}

/* duration > 0; request_rate > 0 or "inf"; burstiness > 0 when given. */
static int check_traffic(vj_t *v, import_data_t *d) {
    char type[32];
    double x = 0;
    if (member_type(v, "duration", type, sizeof type) || member_double(v, "duration", &x))
        return -1;
    if (!is_number(type) || !(x > 0))
        return vfail(v, "key 'duration': expected the benchmark's duration, a positive number "
                     "of seconds");
    d->duration_s = x;
    if (member_type(v, "request_rate", type, sizeof type) != 0) return -1;
    if (!strcmp(type, "text")) {
        sqlite3_stmt *st = prep(v, "SELECT json_extract(?1, '$.\"request_rate\"') = 'inf'", NULL);
        int inf = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0);
        sqlite3_finalize(st);
        if (!inf) return vfail(v, "key 'request_rate': expected requests per second or \"inf\"");
    } else if (!is_number(type) || member_double(v, "request_rate", &x) || !(x > 0)) {
        return vfail(v, "key 'request_rate': expected a positive number of requests per second "
                     "or \"inf\"");
    }
    if (member_type(v, "burstiness", type, sizeof type) != 0) return -1;
    if (type[0] && strcmp(type, "null") &&
        (!is_number(type) || member_double(v, "burstiness", &x) || !(x > 0)))
        return vfail(v, "key 'burstiness': expected a positive number (1 for Poisson arrivals)");
    return 0;
}

/* An optional per-request list (latencies, start_times): NULL in *out when absent. */
static int optional_list(vj_t *v, const char *key, double **out) {
    char type[32];
    *out = NULL;
    if (member_type(v, key, type, sizeof type) != 0) return -1;
    if (!type[0] || !strcmp(type, "null")) return 0;
    if (check_list(v, key) != 0) return -1;
    if (!(*out = malloc(v->n * sizeof **out))) return vfail(v, "out of memory");
    return read_list(v, key, L_TIME, *out);
}

/* With every list read: the requests' own values, and the checks that need several lists. */
static int build_requests(vj_t *v, import_data_t *d, const double *in, const double *outl,
                          const double *ttft, const double *lat, const double *start) {
    d->arrivals_known = start != NULL;
    for (size_t i = 0; i < v->n; i++) {
        import_req_t *q = import_data_add(d);
        if (!q) return vfail(v, "out of memory");
        q->prompt = (int32_t)fmin(in[i], INT32_MAX);
        q->output = (int32_t)fmin(outl[i], INT32_MAX);
        if (start) {
            if (!isfinite(start[i]))
                return vfail(v, "key 'start_times' [%zu]: null, but every request was sent", i);
            q->arrival = start[i];
        }
    }
    if (each_entry(v, "errors", error_entry, d) != 0) return -1;
    for (size_t i = 0; i < v->n; i++) {
        import_req_t *q = &d->req[i];
        if (q->error) continue;
        if (q->output == 0) {
            if (import_req_fail(q, "empty output: no tokens counted") != 0)
                return vfail(v, "out of memory");
            continue;
        }
        if (!isfinite(ttft[i]))
            return vfail(v, "key 'ttfts' [%zu]: null for a request without an error", i);
        q->ttft = ttft[i];
    }
    if (read_itls(v, d) != 0) return -1;
    for (size_t i = 0; i < v->n; i++) {
        import_req_t *q = &d->req[i];
        if (q->error) continue;
        q->e2e = q->tok[q->n_tok - 1];
        if (lat) {
            if (!isfinite(lat[i]) || lat[i] < q->ttft)
                return vfail(v, "key 'latencies' [%zu]: %.9g is less than its ttft %.9g", i,
                             lat[i], q->ttft);
            q->e2e = lat[i];
        }
    }
    return 0;
}

int import_read_vllm(const char *path, import_data_t *d, char *err, size_t errlen) {
    vj_t v = {.path = path, .err = err, .errlen = errlen};
    double *in = NULL, *outl = NULL, *ttft = NULL, *lat = NULL, *start = NULL;
    int rc = -1;
    d->duration_s = NAN;
    if (read_file(&v) != 0 || nan_to_null(&v) != 0) goto done;
    if (sqlite3_open(":memory:", &v.db) != SQLITE_OK) {
        vfail(&v, "cannot open an in-memory database to parse the JSON");
        goto done;
    }
    if (check_shape(&v) != 0 || check_traffic(&v, d) != 0) goto done;
    static const char *const lists[] = {"input_lens", "output_lens", "ttfts", "itls", "errors"};
    for (size_t i = 0; i < sizeof lists / sizeof *lists; i++)
        if (check_list(&v, lists[i]) != 0) goto done;
    if (!(in = malloc(v.n * sizeof *in)) || !(outl = malloc(v.n * sizeof *outl)) ||
        !(ttft = malloc(v.n * sizeof *ttft))) {
        vfail(&v, "out of memory");
        goto done;
    }
    if (read_list(&v, "input_lens", L_COUNT, in) != 0 ||
        read_list(&v, "output_lens", L_COUNT, outl) != 0 ||
        read_list(&v, "ttfts", L_TIME, ttft) != 0 || optional_list(&v, "latencies", &lat) != 0 ||
        optional_list(&v, "start_times", &start) != 0)
        goto done;
    if (build_requests(&v, d, in, outl, ttft, lat, start) != 0 || read_meta(&v, d) != 0)
        goto done;
    rc = 0;
done:
    free(in);
    free(outl);
    free(ttft);
    free(lat);
    free(start);
    free(v.text);
    sqlite3_close(v.db);
    return rc;
}

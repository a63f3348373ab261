/* import: measured runs from a per-request CSV, vLLM's benchmark JSON or an inference-perf
 * experiment folder (contract: import.h). This file holds the CSV reader and the
 * recording; import_vllm.c the JSON, import_ip.c and import_ip_stages.c the folder. */
#include "analysis/import.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "analysis/import_internal.h"
#include "traces/json.h"
#include "traces/recorder.h"

/* Slack when comparing a token time with the first and last token times written beside it:
 * the same clock and usually the same digits, so only printing noise is forgiven. */
#define IMPORT_TIME_SLACK 1e-9

const char *import_format_name(import_format_t f) {
    return f == IMPORT_VLLM ? "vllm" : f == IMPORT_IP ? "inference-perf" : "csv";
}

/* ------------------------------------------------------------------ the data */

void import_data_free(import_data_t *d) {
    for (size_t i = 0; i < d->n; i++) {
        free(d->req[i].tok);
        free(d->req[i].error);
    }
    free(d->req);
    free(d->meta_json);
    free(d->model);
    free(d->members);
    free(d->summary);
    free(d->stem);
    memset(d, 0, sizeof *d);
}

import_req_t *import_data_add(import_data_t *d) {
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 256;
        import_req_t *grown = realloc(d->req, cap * sizeof *grown);
        if (!grown) return NULL;
        d->req = grown;
        d->cap = cap;
    }
    import_req_t *q = &d->req[d->n];
    memset(q, 0, sizeof *q);
    q->id = (int32_t)d->n++;
    return q;
}

int import_req_fail(import_req_t *req, const char *text) {
    free(req->error);
    req->error = strdup(text);
    return req->error ? 0 : -1;
}

/* ------------------------------------------------------------------ the CSV reader */

#define CSV_MAX_COLS 64

enum { C_ID, C_ARRIVAL, C_PROMPT, C_OUTPUT, C_TTFT, C_FIRST, C_E2E, C_FINISH, C_TOKENS,
       C_ERROR, C_N };
static const char *const col_names[C_N] = {
    "id", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "first_token_s", "e2e_s",
    "finish_s", "token_times", "error",
};

typedef struct {
    const char *path;
    int64_t line;                 /* 1-based number of the line being read */
    char *err;
    size_t errlen;
    int col[C_N];                 /* field index of each known column, -1 when absent */
    int ncols;                    /* fields in the header */
    const char *name_of[CSV_MAX_COLS]; /* header name of each field, for messages */
    char *fields[CSV_MAX_COLS];
} csv_t;

/* "PATH:LINE:COL: column 'NAME': message" for a field (0-based index), "PATH:LINE: message"
 * for a line (field < 0), "PATH: message" for the file (line 0). Returns -1. */
static int csv_fail(csv_t *c, int field, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->line <= 0) snprintf(c->err, c->errlen, "%s: %s", c->path, msg);
    else if (field < 0) snprintf(c->err, c->errlen, "%s:%lld: %s", c->path, (long long)c->line, msg);
    else if (field < c->ncols && c->name_of[field])
        snprintf(c->err, c->errlen, "%s:%lld:%d: column '%s': %s", c->path, (long long)c->line,
                 field + 1, c->name_of[field], msg);
    else snprintf(c->err, c->errlen, "%s:%lld:%d: %s", c->path, (long long)c->line, field + 1, msg);
    return -1;
}

/* s, cut to fit and with unprintable bytes as '?', for quoting in a message. */
static const char *snip(const char *s, char *buf, size_t len) {
    size_t n = 0;
    for (; s[n] && n + 4 < len; n++) buf[n] = isprint((unsigned char)s[n]) ? s[n] : '?';
    if (s[n]) memcpy(buf + n, "...", 4);
    else buf[n] = '\0';
    return buf;
}

/* Splits line in place into c->fields, trimming blanks; a field may be quoted ("a, b" with
 * "" for a quote), as spreadsheets export an error text holding a comma. */
static int split(csv_t *c, char *p) {
    int n = 0;
    for (;;) {
        char *start, *w;
        while (*p == ' ' || *p == '\t') p++;
        if (n == CSV_MAX_COLS) return csv_fail(c, -1, "more than %d fields", CSV_MAX_COLS);
        if (*p == '"') {
            start = w = ++p;
            for (;; p++) {
                if (!*p) return csv_fail(c, n, "unterminated quoted field");
                if (*p == '"' && p[1] != '"') break;
                if (*p == '"') p++;
                *w++ = *p;
            }
            for (p++; *p == ' ' || *p == '\t'; p++) {}
            if (*p && *p != ',') return csv_fail(c, n, "text after a closing quote");
        } else {
            start = p;
            while (*p && *p != ',') p++;
            for (w = p; w > start && (w[-1] == ' ' || w[-1] == '\t'); w--) {}
        }
        c->fields[n++] = start;
        int last = *p == '\0';
        *w = '\0';
        if (last) return n;
        p++;
    }
}

static int header(csv_t *c, char *line) {
    if ((unsigned char)line[0] == 0xEF && (unsigned char)line[1] == 0xBB &&
        (unsigned char)line[2] == 0xBF)
        line += 3;   /* a spreadsheet's UTF-8 byte-order mark */
    int nf = split(c, line);
    if (nf < 0) return -1;
    c->ncols = nf;
    for (int k = 0; k < C_N; k++) c->col[k] = -1;
    for (int i = 0; i < nf; i++) {
        c->name_of[i] = NULL;
        for (int k = 0; k < C_N; k++) {
            if (strcasecmp(c->fields[i], col_names[k]) != 0) continue;
            if (c->col[k] >= 0)
                return csv_fail(c, i, "column '%s' appears twice in the header", col_names[k]);
            c->col[k] = i;
            c->name_of[i] = col_names[k];
        }
    }
    static const int required[] = {C_ARRIVAL, C_PROMPT, C_OUTPUT};
    for (size_t k = 0; k < sizeof required / sizeof *required; k++)
        if (c->col[required[k]] < 0)
            return csv_fail(c, -1, "the header lacks column '%s' (needed: arrival_s, "
                            "prompt_tokens, output_tokens, ttft_s or first_token_s, e2e_s or "
                            "finish_s)", col_names[required[k]]);
    const int pairs[2][2] = {{C_TTFT, C_FIRST}, {C_E2E, C_FINISH}};
    for (int k = 0; k < 2; k++) {
        int a = c->col[pairs[k][0]], b = c->col[pairs[k][1]];
        if (a < 0 && b < 0)
            return csv_fail(c, -1, "the header lacks column '%s' or '%s'",
                            col_names[pairs[k][0]], col_names[pairs[k][1]]);
        if (a >= 0 && b >= 0)
            return csv_fail(c, b, "give '%s' or '%s', not both", col_names[pairs[k][0]],
                            col_names[pairs[k][1]]);
    }
    if ((c->col[C_TTFT] >= 0) != (c->col[C_E2E] >= 0))
        return csv_fail(c, c->col[C_TTFT] >= 0 ? c->col[C_FINISH] : c->col[C_E2E],
                        "mixes clocks: use ttft_s with e2e_s (from each arrival) or "
                        "first_token_s with finish_s (on the arrival_s clock)");
    return 0;
}

/* A time or number: finite and >= 0. 0, or -1 with the reason in why. */
static int num_cell(const char *s, double *out, char *why, size_t len) {
    char buf[48], *end;
    if (!*s) {
        snprintf(why, len, "empty cell");
        return -1;
    }
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) snprintf(why, len, "'%s' is not a number", snip(s, buf, sizeof buf));
    else if (!isfinite(v) || errno == ERANGE)
        snprintf(why, len, "'%s' is not a finite number", snip(s, buf, sizeof buf));
    else if (v < 0) snprintf(why, len, "%s is negative", snip(s, buf, sizeof buf));
    else {
        *out = v;
        return 0;
    }
    return -1;
}

static int parse_num(csv_t *c, int field, const char *s, double *out) {
    char why[128];
    return num_cell(s, out, why, sizeof why) == 0 ? 0 : csv_fail(c, field, "%s", why);
}

/* A count: a whole number in [0, INT32_MAX]. */
static int parse_count(csv_t *c, int field, const char *s, int32_t *out) {
    char buf[48], *end;
    if (!*s) return csv_fail(c, field, "empty cell");
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return csv_fail(c, field, "'%s' is not a whole number",
                                          snip(s, buf, sizeof buf));
    if (v < 0) return csv_fail(c, field, "%s is negative", snip(s, buf, sizeof buf));
    if (errno == ERANGE || v > INT32_MAX)
        return csv_fail(c, field, "%s is too large", snip(s, buf, sizeof buf));
    *out = (int32_t)v;
    return 0;
}

/* token_times: ';'-separated times on the first-token column's clock (first and last are
 * that clock's first-token and last-token times), non-decreasing, at most one per output
 * token. Stored as offsets from the arrival. */
static int parse_tokens(csv_t *c, char *s, double first, double last, double arrival,
                        import_req_t *q) {
    int field = c->col[C_TOKENS];
    size_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ';';
    if (n > (size_t)q->output)
        return csv_fail(c, field, "%zu token times for %d output tokens", n, q->output);
    if (!(q->tok = malloc(n * sizeof *q->tok))) return csv_fail(c, field, "out of memory");
    double prev = first;
    for (char *item = s, *next; item; item = next) {
        next = strchr(item, ';');
        if (next) *next++ = '\0';
        while (*item == ' ' || *item == '\t') item++;
        for (char *e = item + strlen(item); e > item && (e[-1] == ' ' || e[-1] == '\t'); e--)
            e[-1] = '\0';
        double t;
        char why[128];
        int k = q->n_tok + 1;
        if (num_cell(item, &t, why, sizeof why) != 0)
            return csv_fail(c, field, "item %d: %s", k, why);
        if (t < prev - IMPORT_TIME_SLACK) {
            if (k == 1)
                return csv_fail(c, field, "item 1: %.9g is before the first token at %.9g", t,
                                first);
            return csv_fail(c, field, "item %d: %.9g is before item %d at %.9g", k, t, k - 1,
                            prev);
        }
        if (t > last + IMPORT_TIME_SLACK)
            return csv_fail(c, field, "item %d: %.9g is after the last token at %.9g", k, t, last);
        q->tok[q->n_tok++] = t - arrival;
        prev = t;
    }
    return 0;
}

static int read_row(csv_t *c, int nf, import_data_t *d) {
    char **f = c->fields;
    if (nf < c->ncols)
        return csv_fail(c, nf, "missing: the header has %d columns, this row %d", c->ncols, nf);
    if (nf > c->ncols)
        return csv_fail(c, c->ncols, "extra field: the header has %d columns", c->ncols);
    import_req_t *q = import_data_add(d);
    if (!q) return csv_fail(c, -1, "out of memory");
    if (c->col[C_ID] >= 0 && parse_count(c, c->col[C_ID], f[c->col[C_ID]], &q->id) != 0)
        return -1;
    if (c->col[C_ERROR] >= 0 && f[c->col[C_ERROR]][0] &&
        import_req_fail(q, f[c->col[C_ERROR]]) != 0)
        return csv_fail(c, -1, "out of memory");
    if (parse_num(c, c->col[C_ARRIVAL], f[c->col[C_ARRIVAL]], &q->arrival) != 0 ||
        parse_count(c, c->col[C_PROMPT], f[c->col[C_PROMPT]], &q->prompt) != 0 ||
        parse_count(c, c->col[C_OUTPUT], f[c->col[C_OUTPUT]], &q->output) != 0)
        return -1;
    if (q->error) return 0;   /* a failed request's times are not read */
    if (q->output < 1)
        return csv_fail(c, c->col[C_OUTPUT], "a request without an error has at least one "
                        "output token (0; mark a failure in an 'error' column)");
    int relative = c->col[C_TTFT] >= 0;
    int cf = relative ? c->col[C_TTFT] : c->col[C_FIRST];
    int cl = relative ? c->col[C_E2E] : c->col[C_FINISH];
    double first, last;
    if (parse_num(c, cf, f[cf], &first) != 0 || parse_num(c, cl, f[cl], &last) != 0) return -1;
    if (!relative && first < q->arrival)
        return csv_fail(c, cf, "the first token at %.9g is before the arrival at %.9g", first,
                        q->arrival);
    if (last < first)
        return csv_fail(c, cl, "the last token at %.9g is before the first token at %.9g",
                        last, first);
    double origin = relative ? 0 : q->arrival;   /* the first-token column's clock */
    q->ttft = first - origin;
    q->e2e = last - origin;
    if (c->col[C_TOKENS] >= 0 && f[c->col[C_TOKENS]][0])
        return parse_tokens(c, f[c->col[C_TOKENS]], first, last, origin, q);
    return 0;
}

typedef struct {
    int32_t id;
    int64_t line;
} id_line_t;

static int cmp_id_line(const void *a, const void *b) {
    const id_line_t *x = a, *y = b;
    if (x->id != y->id) return (x->id > y->id) - (x->id < y->id);
    return (x->line > y->line) - (x->line < y->line);
}

/* Request ids must be unique: they are the primary key of the records. */
static int check_ids(csv_t *c, id_line_t *ids, size_t n) {
    qsort(ids, n, sizeof *ids, cmp_id_line);
    for (size_t i = 1; i < n; i++)
        if (ids[i].id == ids[i - 1].id) {
            c->line = ids[i].line;
            return csv_fail(c, c->col[C_ID], "id %d repeats line %lld", ids[i].id,
                            (long long)ids[i - 1].line);
        }
    return 0;
}

static int read_csv(const char *path, import_data_t *d, char *err, size_t errlen) {
    csv_t c = {.path = path, .err = err, .errlen = errlen};
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    id_line_t *ids = NULL;
    size_t ids_cap = 0;
    int have_header = 0, rc = -1;
    ssize_t len;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    d->duration_s = NAN;
    d->arrivals_known = 1;
    while ((len = getline(&line, &cap, f)) >= 0) {
        c.line++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if ((size_t)len != strlen(line)) {
            csv_fail(&c, -1, "a NUL byte inside the line (not a text CSV file?)");
            goto done;
        }
        const char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (!*p || *p == '#') continue;
        if (!have_header) {
            if (header(&c, line) != 0) goto done;
            have_header = 1;
            continue;
        }
        int nf = split(&c, line);
        if (nf < 0 || read_row(&c, nf, d) != 0) goto done;
        if (d->n > ids_cap) {
            size_t ncap = ids_cap ? 2 * ids_cap : 256;
            id_line_t *g = realloc(ids, ncap * sizeof *g);
            if (!g) {
                csv_fail(&c, -1, "out of memory");
                goto done;
            }
            ids = g;
            ids_cap = ncap;
        }
        ids[d->n - 1] = (id_line_t){d->req[d->n - 1].id, c.line};
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    c.line = 0;
    if (!have_header) {
        csv_fail(&c, -1, "empty: no header line (arrival_s,prompt_tokens,output_tokens,"
                 "ttft_s,e2e_s,...)");
        goto done;
    }
    if (d->n == 0) {
        csv_fail(&c, -1, "no requests after the header");
        goto done;
    }
    if (c.col[C_ID] >= 0 && check_ids(&c, ids, d->n) != 0) goto done;
    rc = 0;
done:
    free(ids);
    free(line);
    fclose(f);
    return rc;
}

/* ------------------------------------------------------------------ recording */

/* The run's config (import.h); a malloc'd string, or NULL when out of memory. */
static char *build_config(const import_opts_t *o, const import_data_t *d, const char *source,
                          double origin) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fputs("{\"kind\":\"measured\",\"source\":{\"path\":", f);
    json_write_str(f, source);
    fprintf(f, ",\"format\":\"%s\"},\"arrivals\":\"%s\"", import_format_name(o->format),
            d->arrivals_known ? "recorded" : "unknown");
    if (d->arrivals_known) fprintf(f, ",\"time_origin_s\":%.17g", origin);
    if (isfinite(d->duration_s)) fprintf(f, ",\"duration_s\":%.17g", d->duration_s);
    const char *keys[] = {"model", "hw", "note"};
    const char *vals[] = {d->model ? d->model : o->model, o->hw, o->note};
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        fprintf(f, ",\"%s\":", keys[i]);
        json_write_str(f, vals[i]);
    }
    int32_t tp = d->tp > 0 ? d->tp : o->tp;
    if (tp > 0) fprintf(f, ",\"tp\":%d", tp);
    if (d->meta_json) fprintf(f, ",\"vllm\":%s", d->meta_json);
    if (d->members) fprintf(f, ",%s", d->members);
    fputc('}', f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* "measured-<stem>" (the file's stem unless the reader named one), then -2, -3, ... until
 * the name is free in the database. */
static void default_name(rec_t *r, const char *path, const char *given, char *out,
                         size_t len) {
    char stem[200];
    sqlite3_stmt *st = NULL;
    if (given) snprintf(stem, sizeof stem, "%s", given);
    else rec_policy_stem(path, stem, sizeof stem);
    snprintf(out, len, "measured-%s", stem);
    if (sqlite3_prepare_v2(rec_db(r), "SELECT count(*) FROM runs WHERE name = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return;   /* the recorder reports what is wrong with the database */
    for (int k = 2; k < 100000; k++) {
        sqlite3_reset(st);
        sqlite3_bind_text(st, 1, out, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int(st, 0) == 0) break;
        snprintf(out, len, "measured-%s-%d", stem, k);
    }
    sqlite3_finalize(st);
}

static int write_rows(rec_t *r, int64_t id, const import_data_t *d, double origin,
                      import_result_t *res) {
    for (size_t i = 0; i < d->n; i++) {
        const import_req_t *q = &d->req[i];
        double arrival = d->arrivals_known ? q->arrival - origin : 0;
        rec_request_t row = {
            .req_id = q->id, .arrival_s = arrival, .prompt_tokens = q->prompt,
            .output_tokens = q->output, .generated_tokens = q->error ? 0 : q->output,
            .first_scheduled_s = -1, .first_token_s = q->error ? -1 : arrival + q->ttft,
            .finish_s = q->error ? -1 : arrival + q->e2e,
            .status = q->error ? "rejected" : "finished", .reason = q->error,
        };
        if (rec_request(r, id, &row) != 0) return -1;
        if (q->error) res->rejected++;
        else res->finished++;
        for (int32_t k = 0; k < q->n_tok; k++) {
            rec_token_t t = {q->id, k, -1, arrival + q->tok[k]};
            if (rec_token(r, id, &t) != 0) return -1;
            res->tokens++;
        }
    }
    res->requests = (int64_t)d->n;
    return 0;
}

static int record(const import_opts_t *o, const import_data_t *d, import_result_t *res,
                  char *err, size_t errlen) {
    char source[PATH_MAX], name[256];
    char *config = NULL;
    int rc = -1;
    int64_t id = -1;
    if (!realpath(o->path, source)) snprintf(source, sizeof source, "%s", o->path);
    /* the time origin and the span the measurement covers */
    double origin = INFINITY, end = -INFINITY;
    for (size_t i = 0; i < d->n; i++) {
        const import_req_t *q = &d->req[i];
        double a = d->arrivals_known ? q->arrival : 0;
        if (a < origin) origin = a;
        if (!q->error && a + q->e2e > end) end = a + q->e2e;
    }
    double span = isfinite(d->duration_s) ? d->duration_s : end > origin ? end - origin : 0;
    rec_t *r = rec_open(o->db_path);
    if (!r || rec_errmsg(r)) {
        snprintf(err, errlen, "%s", rec_errmsg(r));
        goto done;
    }
    if (o->name) snprintf(name, sizeof name, "%s", o->name);
    else default_name(r, o->path, d->stem, name, sizeof name);
    if (!(config = build_config(o, d, source, origin))) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    rec_run_info_t info = {
        .name = name, .kind = "measured", .trace = source,
        .model = d->model ? d->model : o->model,
        .hardware = o->hw, .version = o->version, .config = config,
    };
    if (rec_run_begin(r, &info, &id) != 0) {
        snprintf(err, errlen, "%s", rec_errmsg(r));
        goto done;
    }
    res->run_id = id;
    snprintf(res->name, sizeof res->name, "%s", name);
    res->arrivals_known = d->arrivals_known;
    res->duration_s = span;
    int ok = write_rows(r, id, d, origin, res) == 0;
    if (!ok) snprintf(err, errlen, "%s", rec_errmsg(r));
    if (rec_run_end(r, id, ok, ok ? NULL : err, span) != 0 && ok)
        snprintf(err, errlen, "%s", rec_errmsg(r));
    else if (ok) rc = 0;
done:
    rec_close(r);
    free(config);
    return rc;
}

int import_run(const import_opts_t *o, import_result_t *res, char *err, size_t errlen) {
    import_data_t d = {0};
    int rc = -1;
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    if (!o->path || !o->db_path) {
        snprintf(err, errlen, "import needs a file and a database");
        return -1;
    }
    if (o->name && !*o->name) {
        snprintf(err, errlen, "the run name must not be empty");
        return -1;
    }
    int bad = o->format == IMPORT_VLLM ? import_read_vllm(o->path, &d, err, errlen)
            : o->format == IMPORT_IP   ? import_read_ip(o, &d, err, errlen)
                                       : read_csv(o->path, &d, err, errlen);
    if (bad) goto done;
    rc = record(o, &d, res, err, errlen);
    if (d.summary) snprintf(res->detail, sizeof res->detail, "%s", d.summary);
done:
    import_data_free(&d);
    return rc;
}

/* trace: opening a trace, detecting its format, reading lines and applying the replay
 * options. The per-format row parsers live in trace_csv.c and trace_jsonl.c. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "traces/trace_internal.h"

int trace_fail(trace_t *t, int64_t line, const char *fmt, ...)
{
    char msg[768];
    va_list ap;

    /* The first error is the cause; anything after it is a consequence. */
    if (t->failed) return -1;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        snprintf(t->errbuf, sizeof t->errbuf, "%s:%lld: %s", t->name, (long long)line, msg);
    else
        snprintf(t->errbuf, sizeof t->errbuf, "%s: %s", t->name, msg);
    t->failed = 1;
    return -1;
}

void trace_snip(char *dst, size_t cap, const char *s, size_t n)
{
    size_t keep = n, i;

    if (cap == 0) return;
    if (keep > cap - 1) keep = cap > 4 ? cap - 4 : cap - 1;
    for (i = 0; i < keep; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (keep < n && cap > 4) {
        memcpy(dst + keep, "...", 3);
        keep += 3;
    }
    dst[keep] = '\0';
}

int trace_parse_count(trace_t *t, const char *what, const char *s, size_t n, int32_t *out)
{
    char shown[TRACE_SNIP];
    int64_t v = 0;
    size_t i;

    trace_snip(shown, sizeof shown, s, n);
    if (n == 0)
        return trace_fail(t, t->lineno, "%s: empty value, expected a non-negative integer",
                          what);
    if (s[0] == '-') {
        for (i = 1; i < n && isdigit((unsigned char)s[i]); i++) {}
        if (i == n && n > 1)
            return trace_fail(t, t->lineno, "%s: '%s' is negative", what, shown);
    }
    for (i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return trace_fail(t, t->lineno, "%s: '%s' is not a non-negative integer", what,
                              shown);
        v = v * 10 + (s[i] - '0');
        if (v > INT32_MAX)
            return trace_fail(t, t->lineno, "%s: '%s' is out of range (max %d)", what, shown,
                              INT32_MAX);
    }
    *out = (int32_t)v;
    return 0;
}

/* Digits with an optional fraction and exponent: what strtod should see. strtod alone would
 * also take "inf", "nan", hex and leading blanks. */
static int is_decimal(const char *s, size_t n)
{
    size_t i = 0, digits = 0;

    for (; i < n && isdigit((unsigned char)s[i]); i++) digits++;
    if (i < n && s[i] == '.')
        for (i++; i < n && isdigit((unsigned char)s[i]); i++) digits++;
    if (digits > 0 && i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t e = ++i;
        if (i < n && (s[i] == '+' || s[i] == '-')) e = ++i;
        for (; i < n && isdigit((unsigned char)s[i]); i++) {}
        if (i == e) return 0;
    }
    return digits > 0 && i == n;
}

int trace_parse_seconds(trace_t *t, const char *what, const char *s, size_t n, double unit,
                        double *out)
{
    char shown[TRACE_SNIP], num[64];
    double v;

    trace_snip(shown, sizeof shown, s, n);
    if (n == 0) return trace_fail(t, t->lineno, "%s: empty value, expected a number", what);
    if (n > 1 && s[0] == '-' && is_decimal(s + 1, n - 1))
        return trace_fail(t, t->lineno, "%s: '%s' is negative", what, shown);
    if (!is_decimal(s, n))
        return trace_fail(t, t->lineno, "%s: '%s' is not a non-negative number", what, shown);
    if (n >= sizeof num)
        return trace_fail(t, t->lineno, "%s: '%s' is too long for a number", what, shown);
    memcpy(num, s, n);
    num[n] = '\0';
    v = strtod(num, NULL) * unit;
    /* 1e15 s is beyond any trace; the bound keeps later arithmetic exact enough. */
    if (!isfinite(v) || v > 1e15)
        return trace_fail(t, t->lineno, "%s: '%s' is out of range", what, shown);
    *out = v;
    return 0;
}

/* Reads the next non-blank line into t->line. 1: got one; 0: end of file; -1: error. */
static int read_line(trace_t *t)
{
    for (;;) {
        char *s;
        ssize_t n;
        size_t len, i;

        errno = 0;
        n = getline(&t->line, &t->line_cap, t->f);
        if (n < 0) {
            if (ferror(t->f))
                return trace_fail(t, t->lineno + 1, "read error: %s",
                                  errno ? strerror(errno) : "unknown");
            return 0;
        }
        t->lineno++;
        s = t->line;
        len = (size_t)n;
        if (len > 0 && s[len - 1] == '\n') len--;
        if (len > 0 && s[len - 1] == '\r') len--;
        s[len] = '\0';
        if (memchr(s, '\0', len))
            return trace_fail(t, t->lineno, "NUL byte in the line (binary file?)");
        /* A UTF-8 byte order mark, as some spreadsheet exports write. */
        if (t->lineno == 1 && len >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            memmove(s, s + 3, len - 2);
            len -= 3;
        }
        for (i = 0; i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'); i++) {}
        if (i == len) continue;
        t->line_len = len;
        return 1;
    }
}

static int detect_format(trace_t *t)
{
    const char *s;
    int rc = read_line(t);

    if (rc < 0) return -1;
    if (rc == 0) return trace_fail(t, 0, "empty file (no header)");
    for (s = t->line; *s == ' ' || *s == '\t'; s++) {}
    /* JSONL has no header: the first line is already a request, parsed by trace_next. A
     * forced mooncake format on a CSV file fails there, naming the line. */
    if ((t->fmt == TRACE_FMT_AUTO && *s == '{') || t->fmt == TRACE_FMT_MOONCAKE) {
        t->fmt = TRACE_FMT_MOONCAKE;
        t->pending = 1;
        return 0;
    }
    return trace_csv_header(t);
}

static int check_opts(trace_t *t, const trace_opts_t *opts)
{
    if (opts) t->opts = *opts;
    if (isnan(t->opts.rate_scale) || t->opts.rate_scale < 0 || isinf(t->opts.rate_scale))
        return trace_fail(t, 0, "rate scale %g must be a positive number (0 means 1)",
                          t->opts.rate_scale);
    if (t->opts.rate_scale == 0) t->opts.rate_scale = 1;
    if (!isfinite(t->opts.start_s) || t->opts.start_s < 0)
        return trace_fail(t, 0, "start %g s must be a non-negative number", t->opts.start_s);
    if (isnan(t->opts.duration_s))
        return trace_fail(t, 0, "duration must be a number (<= 0: no limit)");
    if ((int)t->opts.format < TRACE_FMT_AUTO || (int)t->opts.format > TRACE_FMT_PLAIN)
        return trace_fail(t, 0, "unknown format code %d", (int)t->opts.format);
    t->fmt = t->opts.format;
    return 0;
}

static trace_t *trace_alloc(const char *path, const char *name)
{
    trace_t *t = calloc(1, sizeof *t);

    if (!t) return NULL;
    t->path = strdup(path ? path : "");
    t->name = strdup(name ? name : "");
    if (!t->path || !t->name) {
        free(t->path);
        free(t->name);
        free(t);
        return NULL;
    }
    return t;
}

trace_t *trace_open(const char *path, const trace_opts_t *opts)
{
    int is_stdin = path && strcmp(path, "-") == 0;
    trace_t *t = trace_alloc(path, is_stdin ? "<stdin>" : path);

    if (!t) return NULL;
    if (check_opts(t, opts) < 0) goto out;
    if (!path || !*path) {
        trace_fail(t, 0, "no trace file given");
        goto out;
    }
    if (is_stdin) {
        t->f = stdin;
    } else {
        t->f = fopen(path, "r");
        if (!t->f) {
            trace_fail(t, 0, "%s", strerror(errno));
            goto out;
        }
        t->own_f = 1;
    }
    detect_format(t);
out:
    return t;
}

trace_t *trace_open_file(FILE *f, const char *name, const trace_opts_t *opts)
{
    trace_t *t = trace_alloc(name, name ? name : "<stream>");

    if (!t) return NULL;
    if (check_opts(t, opts) < 0) goto out;
    if (!f) {
        trace_fail(t, 0, "no stream given");
        goto out;
    }
    t->f = f;
    detect_format(t);
out:
    return t;
}

int trace_next(trace_t *t, trace_req_t *out)
{
    const trace_opts_t *o = &t->opts;

    if (t->failed) return -1;
    if (t->done) return 0;
    if (o->limit > 0 && t->emitted >= o->limit) {
        t->done = 1;
        return 0;
    }
    for (;;) {
        trace_row_t row;
        double rel;
        int rc;

        if (t->pending) {
            t->pending = 0;
        } else {
            rc = read_line(t);
            if (rc <= 0) {
                t->done = rc == 0;
                return rc;
            }
        }
        memset(&row, 0, sizeof row);
        row.deadline_s = -1; /* none unless a deadline_s column gives one */
        t->n_hash = 0;
        rc = t->fmt == TRACE_FMT_MOONCAKE ? trace_jsonl_row(t, &row) : trace_csv_row(t, &row);
        if (rc < 0) return -1;
        if (t->have_first && row.t < t->t_prev)
            return trace_fail(t, t->lineno,
                              "timestamp %s is earlier than the previous row's %s",
                              row.ts_text, t->prev_ts);
        if (!t->have_first) {
            t->have_first = 1;
            t->t_first = row.t;
        }
        t->t_prev = row.t;
        memcpy(t->prev_ts, row.ts_text, sizeof t->prev_ts);

        rel = row.t - t->t_first;
        if (rel < o->start_s) continue;
        /* Rows are sorted, so nothing later can fall inside the window: stop reading. */
        if (o->duration_s > 0 && rel >= o->start_s + o->duration_s) {
            t->done = 1;
            return 0;
        }
        if (row.failed) {
            t->skipped++;
            continue;
        }
        out->id = (int32_t)t->emitted;
        out->arrival_s = (rel - o->start_s) / o->rate_scale;
        out->prompt_tokens = row.prompt;
        out->output_tokens = row.output;
        out->max_output_tokens = row.max_output;
        out->predicted_output_tokens = row.predicted;
        out->priority = row.priority;
        out->deadline_s = row.deadline_s;
        memcpy(out->tenant, row.tenant, sizeof out->tenant);
        out->n_hash = t->n_hash;
        out->hash_block = t->n_hash > 0 ? TRACE_MOONCAKE_HASH_BLOCK : 0;
        if (row.prefix_tokens > 0) { /* a plain trace's group: one id over the shared part */
            t->group = row.prefix_group;
            out->n_hash = 1;
            out->hash_block = row.prefix_tokens;
        }
        if (o->max_prompt > 0 && out->prompt_tokens > o->max_prompt) {
            out->prompt_tokens = o->max_prompt;
            int32_t blocks = (o->max_prompt + TRACE_MOONCAKE_HASH_BLOCK - 1) /
                             TRACE_MOONCAKE_HASH_BLOCK;
            if (out->n_hash > blocks) out->n_hash = blocks;
        }
        if (o->max_output > 0 && out->output_tokens > o->max_output)
            out->output_tokens = o->max_output;
        out->hash_ids = out->n_hash == 0 ? NULL : row.prefix_tokens > 0 ? &t->group : t->hash;
        out->line = t->lineno;
        t->emitted++;
        /* Ids are int32 in trace_req_t: a longer replay must be cut with --limit. */
        if (t->emitted > INT32_MAX) t->done = 1;
        return 1;
    }
}

const char *trace_errmsg(const trace_t *t) { return t && t->failed ? t->errbuf : NULL; }
trace_format_t trace_format(const trace_t *t) { return t->fmt; }
int64_t trace_skipped(const trace_t *t) { return t->skipped; }
const char *trace_path(const trace_t *t) { return t->path; }

void trace_close(trace_t *t)
{
    if (!t) return;
    if (t->own_f && t->f) fclose(t->f);
    free(t->line);
    free(t->hash);
    free(t->path);
    free(t->name);
    free(t);
}

static const char *const format_names[] = {"auto", "azure", "burstgpt", "mooncake", "plain"};

const char *trace_format_name(trace_format_t f)
{
    if ((int)f < 0 || (size_t)f >= sizeof format_names / sizeof format_names[0]) return "?";
    return format_names[f];
}

int trace_format_parse(const char *name, trace_format_t *out)
{
    size_t i;

    if (!name) return -1;
    for (i = 0; i < sizeof format_names / sizeof format_names[0]; i++)
        if (strcasecmp(name, format_names[i]) == 0) {
            *out = (trace_format_t)i;
            return 0;
        }
    return -1;
}

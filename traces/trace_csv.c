/* trace_csv: the CSV trace formats. Azure LLM inference (TIMESTAMP as a calendar date),
 * BurstGPT (Timestamp in seconds, failed requests have 0 response tokens) and our plain CSV
 * (arrival_s). Columns are located by name in the header, so extra columns may sit anywhere. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "traces/trace_internal.h"

typedef struct {
    trace_format_t fmt;
    const char *cols[3]; /* timestamp, prompt tokens, output tokens */
} csv_layout_t;

static const csv_layout_t layouts[] = {
    {TRACE_FMT_AZURE, {"TIMESTAMP", "ContextTokens", "GeneratedTokens"}},
    {TRACE_FMT_BURSTGPT, {"Timestamp", "Request tokens", "Response tokens"}},
    {TRACE_FMT_PLAIN, {"arrival_s", "prompt_tokens", "output_tokens"}},
};
#define N_LAYOUTS (sizeof layouts / sizeof layouts[0])

static const csv_layout_t *layout_of(trace_format_t fmt)
{
    size_t i;

    for (i = 0; i < N_LAYOUTS; i++)
        if (layouts[i].fmt == fmt) return &layouts[i];
    return NULL;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Splits t->line in place into t->fields, trimming blanks around each field. A field may be
 * quoted ("a, b" with "" for a quote), as spreadsheet exports do; quoted newlines are not
 * supported because a trace row is one line. Returns the number of fields, or -1. */
static int split_fields(trace_t *t)
{
    char *p = t->line;
    int n = 0;

    for (;;) {
        char *start, *w;

        while (is_blank(*p)) p++;
        if (n == TRACE_MAX_COLS)
            return trace_fail(t, t->lineno, "more than %d fields", TRACE_MAX_COLS);
        if (*p == '"') {
            start = w = ++p;
            for (;;) {
                if (*p == '\0')
                    return trace_fail(t, t->lineno, "field %d: unterminated quoted field",
                                      n + 1);
                if (*p == '"') {
                    if (p[1] != '"') break;
                    p++;
                }
                *w++ = *p++;
            }
            p++;
            while (is_blank(*p)) p++;
            if (*p != ',' && *p != '\0')
                return trace_fail(t, t->lineno, "field %d: unexpected '%c' after a closing quote",
                                  n + 1, isprint((unsigned char)*p) ? *p : '?');
        } else {
            start = p;
            while (*p != ',' && *p != '\0') p++;
            w = p;
            while (w > start && is_blank(w[-1])) w--;
        }
        t->fields[n++] = start;
        if (*p == '\0') {
            *w = '\0';
            return n;
        }
        *w = '\0';
        p++;
    }
}

static int find_col(trace_t *t, int nf, const char *name)
{
    int i;

    for (i = 0; i < nf; i++)
        if (strcasecmp(t->fields[i], name) == 0) return i;
    return -1;
}

/* Sets the column layout if all of L's columns are present. 1: matched; 0: not. */
static int match_layout(trace_t *t, int nf, const csv_layout_t *l)
{
    int ts = find_col(t, nf, l->cols[0]), pr = find_col(t, nf, l->cols[1]),
        out = find_col(t, nf, l->cols[2]);

    if (ts < 0 || pr < 0 || out < 0) return 0;
    t->ncols = nf;
    t->col_ts = ts;
    t->col_prompt = pr;
    t->col_output = out;
    t->col_max_output = find_col(t, nf, "max_output_tokens");
    t->col_predicted = find_col(t, nf, "predicted_output_tokens");
    t->col_priority = find_col(t, nf, "priority");
    t->col_tenant = find_col(t, nf, "tenant");
    t->col_deadline = find_col(t, nf, "deadline_s");
    t->fmt = l->fmt;
    return 1;
}

/* The plain format's optional shared prefix: both columns or neither. 0 or -1. */
static int prefix_columns(trace_t *t, int nf)
{
    t->col_prefix_group = t->col_prefix_tokens = -1;
    if (t->fmt != TRACE_FMT_PLAIN) return 0;
    t->col_prefix_group = find_col(t, nf, "prefix_group");
    t->col_prefix_tokens = find_col(t, nf, "prefix_tokens");
    if ((t->col_prefix_group < 0) != (t->col_prefix_tokens < 0))
        return trace_fail(t, t->lineno, "header has a '%s' column but no '%s' (a shared prefix "
                          "needs both its group and its length)",
                          t->col_prefix_group < 0 ? "prefix_tokens" : "prefix_group",
                          t->col_prefix_group < 0 ? "prefix_group" : "prefix_tokens");
    return 0;
}

int trace_csv_header(trace_t *t)
{
    char shown[96];
    const csv_layout_t *l;
    int nf, i;
    size_t k;

    trace_snip(shown, sizeof shown, t->line, t->line_len);
    nf = split_fields(t);
    if (nf < 0) return -1;
    if (t->fmt != TRACE_FMT_AUTO) {
        l = layout_of(t->fmt);
        if (!l) return trace_fail(t, t->lineno, "format %s is not a CSV format",
                                  trace_format_name(t->fmt));
        for (i = 0; i < 3; i++)
            if (find_col(t, nf, l->cols[i]) < 0)
                return trace_fail(t, t->lineno,
                                  "header '%s' has no column '%s', which the %s format needs",
                                  shown, l->cols[i], trace_format_name(t->fmt));
        match_layout(t, nf, l);
        return prefix_columns(t, nf);
    }
    for (k = 0; k < N_LAYOUTS; k++)
        if (match_layout(t, nf, &layouts[k])) return prefix_columns(t, nf);
    return trace_fail(t, t->lineno,
                      "unrecognised header '%s'; expected one of: "
                      "azure (TIMESTAMP,ContextTokens,GeneratedTokens), "
                      "burstgpt (Timestamp,Request tokens,Response tokens, among others), "
                      "mooncake (JSON lines with timestamp,input_length,output_length,hash_ids), "
                      "plain (arrival_s,prompt_tokens,output_tokens)",
                      shown);
}

/* Howard Hinnant's days_from_civil: days since 1970-01-01 in the proleptic Gregorian
 * calendar, with no time zone or mktime involved. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
    static const int dm[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

    return m == 2 ? 28 + leap : dm[m - 1];
}

/* Reads exactly N digits at s[*i]; -1 when they are not there. */
static int digits(const char *s, size_t n, size_t *i, int count)
{
    int v = 0;

    for (; count > 0; count--, (*i)++) {
        if (*i >= n || !isdigit((unsigned char)s[*i])) return -1;
        v = v * 10 + (s[*i] - '0');
    }
    return v;
}

/* "YYYY-MM-DD HH:MM:SS[.fffffffff]" (a 'T' may replace the space) into seconds since the
 * epoch plus nanoseconds. Azure writes 7 fractional digits. */
static int parse_azure_time(trace_t *t, const char *s, size_t n, int64_t *sec, int32_t *nsec)
{
    char shown[TRACE_SNIP];
    size_t i = 0;
    int y, mo, d, h, mi, se, frac = 0, fd = 0;

    trace_snip(shown, sizeof shown, s, n);
    y = digits(s, n, &i, 4);
    if (y < 0 || i >= n || s[i++] != '-') goto bad;
    mo = digits(s, n, &i, 2);
    if (mo < 0 || i >= n || s[i++] != '-') goto bad;
    d = digits(s, n, &i, 2);
    if (d < 0 || i >= n || (s[i] != ' ' && s[i] != 'T')) goto bad;
    i++;
    h = digits(s, n, &i, 2);
    if (h < 0 || i >= n || s[i++] != ':') goto bad;
    mi = digits(s, n, &i, 2);
    if (mi < 0 || i >= n || s[i++] != ':') goto bad;
    se = digits(s, n, &i, 2);
    if (se < 0) goto bad;
    if (i < n && s[i] == '.') {
        for (i++; i < n && isdigit((unsigned char)s[i]) && fd < 9; i++, fd++)
            frac = frac * 10 + (s[i] - '0');
        if (fd == 0) goto bad;
        for (; fd < 9; fd++) frac *= 10;
    }
    if (i != n) goto bad;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59)
        return trace_fail(t, t->lineno, "column 'TIMESTAMP': '%s' is not a valid date and time",
                          shown);
    *sec = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
    *nsec = frac;
    return 0;
bad:
    return trace_fail(t, t->lineno,
                      "column 'TIMESTAMP': '%s' is not a timestamp like "
                      "2023-11-16 18:17:03.9799600", shown);
}

/* A row's shared prefix: prefix_group names the shared text (any non-empty text; equal
 * names are one group, through a 64-bit FNV-1a hash of the name), prefix_tokens is how many
 * of its tokens open this prompt. Both empty: no shared prefix. 0 or -1. */
static int prefix_cells(trace_t *t, trace_row_t *row)
{
    const char *g = t->fields[t->col_prefix_group], *n = t->fields[t->col_prefix_tokens];
    uint64_t h = 14695981039346656037ull;

    if (!*g && !*n) return 0;
    if (!*g || !*n)
        return trace_fail(t, t->lineno, "column '%s' is empty but '%s' is not (give both or "
                          "neither)", *g ? "prefix_tokens" : "prefix_group",
                          *g ? "prefix_group" : "prefix_tokens");
    if (trace_parse_count(t, "column 'prefix_tokens'", n, strlen(n), &row->prefix_tokens) < 0)
        return -1;
    if (row->prefix_tokens > row->prompt)
        return trace_fail(t, t->lineno, "column 'prefix_tokens': %d is more than the prompt's "
                          "%d tokens", row->prefix_tokens, row->prompt);
    for (; *g; g++) h = (h ^ (unsigned char)*g) * 1099511628211ull;
    row->prefix_group = (int64_t)h;
    return 0;
}

/* The optional metadata cells (trace.h); an empty cell means the default for that row. */
static int metadata_cells(trace_t *t, trace_row_t *row)
{
    if (t->col_priority >= 0 && *t->fields[t->col_priority]) {
        const char *f = t->fields[t->col_priority];
        char *end;
        long long v;
        errno = 0;
        v = strtoll(f, &end, 10);
        if (*end || errno || v < INT32_MIN || v > INT32_MAX) {
            char shown[TRACE_SNIP];
            trace_snip(shown, sizeof shown, f, strlen(f));
            return trace_fail(t, t->lineno, "column 'priority': '%s' is not a 32-bit integer "
                              "(lower is more urgent)", shown);
        }
        row->priority = (int32_t)v;
    }
    if (t->col_tenant >= 0) {
        const char *f = t->fields[t->col_tenant];
        size_t n = strlen(f);
        if (n >= TRACE_TENANT_MAX) {
            char shown[TRACE_SNIP];
            trace_snip(shown, sizeof shown, f, n);
            return trace_fail(t, t->lineno, "column 'tenant': '%s' is longer than %d bytes",
                              shown, TRACE_TENANT_MAX - 1);
        }
        memcpy(row->tenant, f, n + 1);
    }
    if (t->col_deadline >= 0 && *t->fields[t->col_deadline]) {
        const char *f = t->fields[t->col_deadline];
        if (trace_parse_seconds(t, "column 'deadline_s'", f, strlen(f), 1.0, &row->deadline_s) < 0)
            return -1;
        /* A deadline at the arrival instant no request can meet: surely a unit mix-up. */
        if (row->deadline_s <= 0)
            return trace_fail(t, t->lineno, "column 'deadline_s': must be more than 0 seconds "
                              "after the arrival");
    }
    return 0;
}

int trace_csv_row(trace_t *t, trace_row_t *row)
{
    const csv_layout_t *l = layout_of(t->fmt);
    const char *ts;
    int nf = split_fields(t);

    if (nf < 0) return -1;
    if (nf != t->ncols)
        return trace_fail(t, t->lineno, "expected %d fields as in the header, found %d",
                          t->ncols, nf);
    ts = t->fields[t->col_ts];
    trace_snip(row->ts_text, sizeof row->ts_text, ts, strlen(ts));
    if (t->fmt == TRACE_FMT_AZURE) {
        int64_t sec = 0;
        int32_t nsec = 0;
        if (parse_azure_time(t, ts, strlen(ts), &sec, &nsec) < 0) return -1;
        if (!t->az_base_set) {
            t->az_base_set = 1;
            t->az_base_sec = sec;
            t->az_base_nsec = nsec;
        }
        row->t = (double)(sec - t->az_base_sec) + (double)(nsec - t->az_base_nsec) * 1e-9;
    } else {
        char what[64];
        snprintf(what, sizeof what, "column '%s'", l->cols[0]);
        if (trace_parse_seconds(t, what, ts, strlen(ts), 1.0, &row->t) < 0) return -1;
    }
    {
        char what[64];
        const char *f = t->fields[t->col_prompt];
        snprintf(what, sizeof what, "column '%s'", l->cols[1]);
        if (trace_parse_count(t, what, f, strlen(f), &row->prompt) < 0) return -1;
        f = t->fields[t->col_output];
        snprintf(what, sizeof what, "column '%s'", l->cols[2]);
        if (trace_parse_count(t, what, f, strlen(f), &row->output) < 0) return -1;
    }
    /* Optional per-request lengths; an empty cell means none for that request. */
    if (t->col_max_output >= 0 && *t->fields[t->col_max_output] &&
        trace_parse_count(t, "column 'max_output_tokens'", t->fields[t->col_max_output],
                          strlen(t->fields[t->col_max_output]), &row->max_output) < 0)
        return -1;
    if (t->col_predicted >= 0 && *t->fields[t->col_predicted] &&
        trace_parse_count(t, "column 'predicted_output_tokens'", t->fields[t->col_predicted],
                          strlen(t->fields[t->col_predicted]), &row->predicted) < 0)
        return -1;
    if (t->col_prefix_group >= 0 && prefix_cells(t, row) < 0) return -1;
    if (metadata_cells(t, row) < 0) return -1;
    if (row->output < 1) {
        /* BurstGPT logs failed requests with 0 response tokens: not a request to replay. */
        if (t->fmt == TRACE_FMT_BURSTGPT) {
            row->failed = 1;
            return 0;
        }
        return trace_fail(t, t->lineno, "column '%s': output tokens must be at least 1, found 0",
                          l->cols[2]);
    }
    return 0;
}

/* trace_internal: state shared by the trace reader's own files (trace.c: opening, line
 * reading, replay filtering; trace_csv.c: Azure, BurstGPT and plain CSV; trace_jsonl.c:
 * Mooncake JSONL). Nothing outside traces/trace*.c includes this header.
 *
 * Invariants:
 *  - t->line holds exactly one line (no '\n', no trailing '\r', no NUL byte inside); the
 *    format parsers may split it in place, since the next line overwrites it anyway.
 *  - A parser either fills a whole trace_row_t or fails through trace_fail(), which records
 *    "NAME:LINE: message" once; after that the reader only returns -1.
 *  - t->hash is owned by the trace and reused for every row (the borrowed hash_ids pointer). */
#ifndef TWIN_TRACE_INTERNAL_H
#define TWIN_TRACE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "traces/trace.h"

#define TRACE_MAX_COLS 64 /* more columns than any known trace format, by far */
#define TRACE_SNIP 48     /* longest value quoted in a message, including the NUL */

/* One data row as parsed, before replay filtering. */
typedef struct {
    double t;                 /* seconds in the source's time base (Azure: from its first row) */
    int32_t prompt, output;
    int32_t max_output, predicted; /* optional CSV columns; 0: absent or empty */
    int64_t prefix_group;     /* plain CSV's shared prefix: its group's hash ... */
    int32_t prefix_tokens;    /* ... and length; 0: none */
    int32_t priority;         /* optional metadata (trace.h); 0, -1 and "" when absent */
    double deadline_s;
    char tenant[TRACE_TENANT_MAX];
    int failed;               /* BurstGPT failed request (0 response tokens): skipped and counted */
    char ts_text[TRACE_SNIP]; /* the timestamp as written, for out-of-order messages */
} trace_row_t;

struct trace {
    char *path;               /* as given to trace_open, owned */
    char *name;               /* for messages: the path, or "<stdin>"; owned */
    FILE *f;
    int own_f;                /* 0 for stdin and trace_open_file streams: not ours to close */
    trace_opts_t opts;        /* normalised: rate_scale > 0, start_s >= 0 */
    trace_format_t fmt;

    char *line;               /* getline buffer, reused; see invariants */
    size_t line_cap;
    size_t line_len;
    int pending;              /* t->line holds a data line read while detecting the format */
    int64_t lineno;           /* 1-based number of the line in t->line */

    char errbuf[1024];
    int failed;
    int done;
    int64_t skipped, emitted;

    /* CSV layout, from the header */
    int ncols, col_ts, col_prompt, col_output;
    int col_max_output, col_predicted; /* optional columns; -1 when absent */
    int col_prefix_group, col_prefix_tokens; /* plain's optional shared prefix; -1: absent */
    int col_priority, col_tenant, col_deadline; /* optional metadata; -1 when absent */
    char *fields[TRACE_MAX_COLS];

    /* Azure timestamps are absolute dates: rows are taken relative to the first one in
     * integer seconds + nanoseconds, so that doubles keep sub-microsecond precision. */
    int az_base_set;
    int64_t az_base_sec;
    int32_t az_base_nsec;

    int have_first;
    double t_first, t_prev;
    char prev_ts[TRACE_SNIP];

    int64_t group;            /* the current row's prefix group (hash_ids points here) */
    int64_t *hash;            /* Mooncake hash_ids of the current row, grown as needed */
    int32_t n_hash;
    size_t hash_cap;
};

/* Records "NAME:LINE: message" (just "NAME: message" when line <= 0) unless an error is
 * already recorded, and returns -1. */
int trace_fail(trace_t *t, int64_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copies s[0..n) into dst for quoting in a message: cut to fit with "...", and bytes that
 * are not printable ASCII shown as '?', so a binary line cannot garble the terminal. */
void trace_snip(char *dst, size_t cap, const char *s, size_t n);

/* Token count: a plain decimal integer in [0, INT32_MAX]. WHAT names the field in messages
 * ("column 'ContextTokens'", "key 'input_length'"). 0 or -1 (error recorded). */
int trace_parse_count(trace_t *t, const char *what, const char *s, size_t n, int32_t *out);

/* Non-negative finite decimal number (digits, optional fraction and exponent) times UNIT
 * (1 for seconds, 1e-3 for milliseconds). 0 or -1 (error recorded). */
int trace_parse_seconds(trace_t *t, const char *what, const char *s, size_t n, double unit,
                        double *out);

/* trace_csv.c: reads the header in t->line. With t->fmt AUTO it picks azure, burstgpt or
 * plain from the column names; with a CSV format forced it checks the columns it needs.
 * Sets t->fmt and the column layout. 0 or -1. */
int trace_csv_header(trace_t *t);
/* trace_csv.c: parses the data row in t->line (split in place). 0 or -1. */
int trace_csv_row(trace_t *t, trace_row_t *row);

/* trace_jsonl.c: parses the Mooncake JSON object in t->line; fills t->hash. 0 or -1. */
int trace_jsonl_row(trace_t *t, trace_row_t *row);

#endif

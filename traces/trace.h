/* trace: streaming readers for request traces.
 *
 * Formats: Azure LLM inference CSV (TIMESTAMP,ContextTokens,GeneratedTokens), BurstGPT CSV
 * (Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type, possibly more
 * columns in any position), Mooncake JSONL (timestamp ms, input_length, output_length,
 * hash_ids) and our plain CSV (arrival_s,prompt_tokens,output_tokens, and optionally
 * prefix_group,prefix_tokens: the prompt starts with the first prefix_tokens tokens of a
 * text shared by every row of the same group, as a system prompt). The CSV formats also
 * take optional per-request metadata columns: priority, tenant, deadline_s (see
 * trace_req_t). The format is detected from the header line (or the first JSON line)
 * unless forced.
 *
 * Invariants:
 *  - Memory stays bounded whatever the trace length: one line is held at a time.
 *  - Requests come out in file order with ids 0, 1, 2, ... counted after filtering
 *    (--start/--duration/--limit, skipped failures), and arrival_s is non-decreasing
 *    (an out-of-order row is an error naming file and line).
 *  - arrival_s is seconds from the replay start: (t - t_first - start_s) / rate_scale, where
 *    t_first is the first data row's timestamp.
 *  - Lengths come out clipped to max_prompt / max_output when those are set (the engine's
 *    small models; the simulator replaying an engine run does the same), and the prefix
 *    hash ids to the blocks of the clipped prompt.
 *  - A malformed row stops the reader: trace_next returns -1 and trace_errmsg says
 *    "FILE:LINE: what is wrong". Rows that the format defines as failed requests (BurstGPT
 *    rows with 0 response tokens) are skipped and counted, not errors.
 *
 * Ownership: trace_open returns an object even on failure (NULL only when out of memory);
 * check trace_errmsg and always trace_close it. The hash_ids pointer in a trace_req_t is
 * borrowed and valid until the next trace_next call. */
#ifndef TWIN_TRACE_H
#define TWIN_TRACE_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    TRACE_FMT_AUTO = 0,
    TRACE_FMT_AZURE,
    TRACE_FMT_BURSTGPT,
    TRACE_FMT_MOONCAKE,
    TRACE_FMT_PLAIN
} trace_format_t;

typedef struct {
    trace_format_t format; /* TRACE_FMT_AUTO: detect from the header */
    double rate_scale;     /* request rate times X (arrival gaps divided by X); 0 means 1 */
    double start_s;        /* skip requests earlier than t_first + start_s */
    double duration_s;     /* stop after t_first + start_s + duration_s; <= 0: no limit */
    int64_t limit;         /* at most this many requests; <= 0: no limit */
    int32_t max_prompt;    /* clip prompts to this many tokens (small models); <= 0: no */
    int32_t max_output;    /* clip outputs likewise */
} trace_opts_t;

/* Bytes of a tenant name, its NUL included: names are short labels ("team-a", "free"),
 * and a fixed array lets a request and its record row carry one without an allocation. */
#define TRACE_TENANT_MAX 32

/* Tokens covered by one Mooncake hash id (the FAST'25 release's block size). */
#define TRACE_MOONCAKE_HASH_BLOCK 512

typedef struct {
    int32_t id;            /* 0-based, in replay order */
    double arrival_s;      /* seconds from the replay start, see above */
    int32_t prompt_tokens; /* >= 0 as read; the scheduler decides what it accepts */
    int32_t output_tokens; /* >= 1 */
    /* Optional columns of the CSV formats (0 when absent): max_output_tokens, the request's
     * own limit (an API's max_tokens), and predicted_output_tokens, a length predictor's
     * guess that policies may read (docs/policies.md). */
    int32_t max_output_tokens;
    int32_t predicted_output_tokens;
    /* Optional metadata columns of the CSV formats, for policies and per-group reports:
     * priority (an integer, lower = more urgent, as Unix nice and vLLM's priority
     * scheduling; 0 when absent), tenant (any text of at most TRACE_TENANT_MAX - 1 bytes;
     * "" when absent) and deadline_s (seconds after the request's arrival by which it
     * should finish, an end-to-end SLO; not scaled by rate_scale; -1 when absent). */
    int32_t priority;
    double deadline_s;
    char tenant[TRACE_TENANT_MAX];
    int32_t n_hash;        /* prefix hash ids: Mooncake's, or a plain trace's one group */
    const int64_t *hash_ids;
    int32_t hash_block;    /* prompt tokens each hash id covers: 512 for Mooncake; a plain
                            * trace's prefix_tokens (its one id names the group); 0: none */
    int64_t line;          /* source line number, for messages */
} trace_req_t;

typedef struct trace trace_t;

/* Opens PATH ("-" is stdin). Returns NULL only when out of memory. opts may be NULL (all
 * defaults). A request is kept when start_s <= t - t_first < start_s + duration_s. */
trace_t *trace_open(const char *path, const trace_opts_t *opts);
/* Reads an already open stream F, which trace_close leaves open; NAME (copied) stands for
 * the file in messages. For pipes and in-memory tests (fmemopen). */
trace_t *trace_open_file(FILE *f, const char *name, const trace_opts_t *opts);
/* 1: *out filled; 0: end of trace; -1: error (trace_errmsg). */
int trace_next(trace_t *t, trace_req_t *out);
/* NULL when no error happened. */
const char *trace_errmsg(const trace_t *t);
trace_format_t trace_format(const trace_t *t);
int64_t trace_skipped(const trace_t *t);    /* failed-request rows skipped (BurstGPT) */
const char *trace_path(const trace_t *t);
void trace_close(trace_t *t);

const char *trace_format_name(trace_format_t f);
/* "azure", "burstgpt", "mooncake", "plain", "auto": returns 0 and sets *out, or -1. */
int trace_format_parse(const char *name, trace_format_t *out);

#endif

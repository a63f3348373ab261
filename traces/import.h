/* import: measurements taken elsewhere become a run of kind 'measured' in a twinserve
 * database, so report, compare, plot and validate read them like any run
 * (docs/analysis.md, "## import", has both formats with examples).
 *
 * Formats:
 *  - IMPORT_CSV: a per-request CSV with a header. Columns (by name, any order, case
 *    insensitive; other columns are ignored; '#' lines and blank lines are skipped):
 *      arrival_s, prompt_tokens, output_tokens      required
 *      ttft_s | first_token_s                       one of them: the first token, counted
 *                                                   from the request's arrival | on the
 *                                                   arrival_s clock
 *      e2e_s | finish_s                             one of them: the last token, likewise
 *      token_times                                  optional: ';'-separated times of the
 *                                                   output tokens (or streamed chunks), on
 *                                                   the same clock as the first-token column
 *      id                                           optional: the request id (else the row
 *                                                   number, 0-based)
 *      error                                        optional: non-empty = the request failed;
 *                                                   its time cells may be empty
 *  - IMPORT_VLLM: the result JSON of vLLM's serving benchmark (benchmark_serving.py or
 *    `vllm bench serve` with --save-result --save-detailed). Required keys: duration,
 *    completed, request_rate, input_lens, output_lens, ttfts, itls, errors; optional:
 *    burstiness (1, Poisson, when absent), latencies (else E2E = ttft + sum(itls)),
 *    start_times (the send times of newer versions: then the arrivals are known). Every
 *    scalar member (date, backend, model_id, max_concurrency, ...) is kept in the config.
 *
 * Conventions (what the records hold):
 *  - Times are seconds from the run's start. CSV: the earliest arrival is time 0 (the
 *    source clock's value there is config "time_origin_s"). vLLM with start_times: the
 *    earliest send is time 0.
 *  - Arrivals unknown (vLLM without start_times): every request's arrival_s is 0 and its
 *    times count from its own arrival, so TTFT, TPOT, E2E and ITL are right; config
 *    "arrivals" is "unknown" and "duration_s" holds the benchmark's duration, which
 *    summary.h takes as the makespan. Otherwise "arrivals" is "recorded".
 *  - A failed request (a non-empty error; vLLM: also an empty output) is recorded as
 *    'rejected' with the error text as its reason. first_scheduled_s, preemptions and
 *    cached tokens are not measured: NULL / 0. No steps rows are written.
 *  - tokens rows: one per CSV token time or vLLM streamed chunk (the first at the first
 *    token, then ttft + the cumulative itls), token_id -1.
 *  - The run: kind 'measured', trace = the source's absolute path, policy NULL, model and
 *    hardware as given, wall_s = the measurement's span; config {"kind":"measured",
 *    "source":{"path","format"}, "arrivals", "time_origin_s" (CSV), "duration_s" (vLLM),
 *    "model", "hw", "tp", "note" when given, "vllm":{the benchmark's scalar members}}.
 *
 * Invariants:
 *  - All or nothing: the whole file is read and checked before the database is opened, so
 *    bad input records nothing. A failure while writing marks the run failed.
 *  - Messages: CSV "FILE:LINE:COLUMN: column 'NAME': what is wrong" (1-based line and field
 *    number); vLLM "FILE: key 'K' ..." naming the missing or malformed key and entry.
 *
 * Ownership: options are borrowed for the call; the result is a plain value. */
#ifndef TWIN_IMPORT_H
#define TWIN_IMPORT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { IMPORT_CSV = 0, IMPORT_VLLM } import_format_t;

typedef struct {
    const char *db_path;
    const char *path;          /* the measurements */
    import_format_t format;
    const char *name;          /* the run's name; NULL: measured-<file stem>[-K] */
    const char *model;         /* recorded as runs.model (a preset lets validate default it) */
    const char *hw;            /* recorded as runs.hardware, likewise */
    int32_t tp;                /* tensor-parallel degree of the measured server; 0: unknown */
    const char *note;          /* free text kept in the config; may be NULL */
    const char *version;       /* twinserve version string */
} import_opts_t;

typedef struct {
    int64_t run_id;            /* -1 when no run was recorded */
    char name[256];
    int64_t requests, finished, rejected, tokens;
    int arrivals_known;
    double duration_s;         /* the span recorded as wall_s */
} import_result_t;

/* 0, or -1 with a message in err (nothing recorded, or the run marked failed). */
int import_run(const import_opts_t *o, import_result_t *res, char *err, size_t errlen);

/* "csv" | "vllm" */
const char *import_format_name(import_format_t f);

#endif

/* import: measurements taken elsewhere become a run of kind 'measured' in a twinserve
 * database, so report, compare, plot and validate read them like any run
 * (docs/analysis.md, "## import", has every format with examples).
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
 *  - IMPORT_IP: one experiment folder of inference-perf (kubernetes-sigs) against a vLLM
 *    server, as the inference-sim training data lays it out: replay.json (per request:
 *    index, arrival_time_us, input_tokens, output_tokens, has_error; the server's config
 *    and the model's shape), ground_truth.json (per request: index, has_error, ttft_s,
 *    e2e_s), config.yaml (the config inference-perf resolved and ran: workload, load
 *    stages, server), exp-config.yaml (the vLLM server's flags), stage_N_lifecycle_metrics
 *    .json (inference-perf's report of stage N); profile.yaml (the config it was given) and
 *    summary_lifecycle_metrics.json are cross-checked when present. Conventions, all
 *    recorded in the config (docs/analysis.md, "inference-perf experiment folders"):
 *      request id = index; arrival = arrival_time_us / 1e6; prompt = input_tokens;
 *      output = data.shared_prefix.output_len when server.ignore_eos (the client's
 *      per-request count is a re-tokenisation and unreliable), else that count;
 *      a failed request (has_error) is 'rejected', "client timeout after 300.6 s
 *      (inference-perf has_error)", its unrecorded prompt imputed from the same prompt's
 *      other requests (request i sends prompt i mod N, N = num_groups x
 *      num_prompts_per_group); the model is the preset the Hugging Face id names when its
 *      shape matches replay.json's model_config (a mismatch is an error), else the id;
 *      the load stages are request ranges in index order, with the stage files' own
 *      summaries kept verbatim.
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
 *    An inference-perf folder adds "metrics":"client", "experiment", "server", "client",
 *    "workload" (with "prompt_cycle" and "cycle_check"), "stages" ([{"stage", "rate",
 *    "duration_s", "first", "count", "summary"}]) and "imputed_prompts" when any.
 *
 * Invariants:
 *  - All or nothing: the whole file is read and checked before the database is opened, so
 *    bad input records nothing. A failure while writing marks the run failed.
 *  - Messages: CSV "FILE:LINE:COLUMN: column 'NAME': what is wrong" (1-based line and field
 *    number); vLLM "FILE: key 'K' ..." naming the missing or malformed key and entry;
 *    inference-perf "DIR: FILE is missing", "DIR/FILE: requests[12]: key 'K' ...",
 *    "DIR/FILE:LINE: ..." for the YAML files.
 *
 * Ownership: options are borrowed for the call; the result is a plain value. */
#ifndef TWIN_IMPORT_H
#define TWIN_IMPORT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { IMPORT_CSV = 0, IMPORT_VLLM, IMPORT_IP } import_format_t;

typedef struct {
    const char *db_path;
    const char *path;          /* the measurements (IMPORT_IP: the experiment folder) */
    import_format_t format;
    const char *name;          /* the run's name; NULL: measured-<file stem>[-K] (the
                                  folder's name for IMPORT_IP) */
    const char *model;         /* recorded as runs.model (a preset lets validate default it);
                                  IMPORT_IP: overrides the preset found, its shape checked */
    const char *hw;            /* recorded as runs.hardware, likewise */
    int32_t tp;                /* tensor-parallel degree of the measured server; 0: unknown
                                  (IMPORT_IP: the folder's; a different one is an error) */
    const char *note;          /* free text kept in the config; may be NULL */
    const char *version;       /* twinserve version string */
} import_opts_t;

typedef struct {
    int64_t run_id;            /* -1 when no run was recorded */
    char name[256];
    int64_t requests, finished, rejected, tokens;
    int arrivals_known;
    double duration_s;         /* the span recorded as wall_s */
    char detail[1024];         /* IMPORT_IP: "; "-separated clauses for a summary line
                                  (stages, prompt cycle, model, hardware); "" otherwise */
} import_result_t;

/* 0, or -1 with a message in err (nothing recorded, or the run marked failed). */
int import_run(const import_opts_t *o, import_result_t *res, char *err, size_t errlen);

/* "csv" | "vllm" | "inference-perf" */
const char *import_format_name(import_format_t f);

#endif

/* import_ip: one experiment folder of inference-perf measurements against a vLLM server
 * (contract: import.h). This file reads the requests (replay.json, ground_truth.json),
 * imputes the failed ones' prompts, measures the prompt cycle and builds the run's config;
 * import_ip_config.c reads the YAML files and picks the model, import_ip_stages.c the stage
 * files (and holds the JSON helpers).
 *
 * What is read from where, and why:
 *  - exp-config.yaml (flat YAML): the vLLM server's flags (model, tensor_parallelism,
 *    max_model_len, max_num_batched_tokens, max_num_seqs) and app, which must be
 *    inference-perf.
 *  - config.yaml (YAML): the config inference-perf RESOLVED and ran. Its
 *    data.shared_prefix is the workload that ran; profile.yaml (what it was given) names
 *    num_unique_system_prompts 9 x num_users_per_system_prompt 5 in these folders, which the
 *    resolved config did not take (num_groups 10 x num_prompts_per_group 10): the data
 *    repeats at period 100, not 45 (below).
 *  - replay.json: per request index, arrival_time_us (from the first request),
 *    input_tokens (the server's tokenizer), output_tokens (the client's re-tokenised count
 *    of the returned text), has_error; the server's config (KV blocks, block size) and the
 *    model's shape (model_config).
 *  - ground_truth.json: per request index, has_error, e2e_s and, when it succeeded, ttft_s.
 *    Both are the client's: TTFT = its first SSE message - the request's start.
 *
 * Conventions (the run's config records each):
 *  - Outputs: with server.ignore_eos every request generated exactly
 *    data.shared_prefix.output_len tokens (the stage files' TPOT means equal (e2e - ttft) /
 *    (2 x output_len + 1) to about 0.1%: vLLM 0.15 streams two messages per token), while the
 *    client's per-request count is a third under 200 and sometimes 0. So output =
 *    output_len when ignore_eos, else the client's count.
 *  - Failures: a failed request's e2e_s is about 300 s, aiohttp's default total timeout
 *    (inference-perf's load.request_timeout is null, so the client sets none of its own),
 *    and replay.json records 0 input and 0 output tokens for it. It is recorded 'rejected'
 *    ("client timeout after 300.6 s (inference-perf has_error)"), with output = output_len
 *    (what it asked for) and its prompt imputed: inference-perf's shared_prefix generator
 *    (inference_perf/datagen/shared_prefix_datagen.py) makes num_groups x
 *    num_prompts_per_group prompts, shuffles them once, and request i sends prompt i mod N,
 *    so the same prompt's other requests know its length: the nearest j = i (mod N) with a
 *    recorded prompt (the earlier on a tie), else the mean of the recorded prompts.
 *  - The prompt cycle: N is recorded with its check, the fraction of pairs (i, i + N) that
 *    both recorded a prompt and have equal input_tokens (98-99% in every folder; at period
 *    45, profile.yaml's 9 x 5, 3-9%), so that the simulator can give request i the prefix identity
 *    "prompt i mod N" that vLLM's prefix cache sees.
 *  - The model: the Hugging Face id names a preset when its lowercased name, or that name
 *    with trailing "-part"s cut (Llama-2-7b-hf -> llama-2-7b, Mixtral-8x7B-v0.1 ->
 *    mixtral-8x7b), is a built-in one; its shape must then be model_config's. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/import_internal.h"
#include "analysis/import_ip_internal.h"
#include "traces/json.h"

/* A failure whose e2e_s is at least this share of the client's timeout is that timeout. */
#define IP_TIMEOUT_SHARE 0.99

/* ------------------------------------------------------------------ replay.json */

static int read_replay_head(ip_t *ip, const ip_json_t *j, ip_exp_t *e) {
    ip_val_t v;
    int64_t tp, seqs, batched;
    char path[64], label[64];
    if (ip_json_get(ip, j, "$", &v) != 0) return -1;
    if (strcmp(v.type, "object") != 0)
        return ip_fail(ip, j->name, 0, "expected an object (experiment, config, model_config, "
                       "requests), got %s", v.type);
    if (ip_json_get(ip, j, "$.model_id", &v) != 0) return -1;
    if (!v.type[0]) return ip_fail(ip, j->name, 0, "key 'model_id' is missing");
    if (strcmp(v.type, "text") != 0)
        return ip_fail(ip, j->name, 0, "key 'model_id': expected a string, got %s", v.type);
    if (strcmp(v.text, e->model_id) != 0)
        return ip_fail(ip, j->name, 0, "model_id '%s' is not exp-config.yaml's model '%s'",
                       v.text, e->model_id);
    if (ip_json_int(ip, j, "$.config.tensor_parallelism", "config.tensor_parallelism", 1,
                    &tp) != 0 ||
        ip_json_int(ip, j, "$.config.max_num_seqs", "config.max_num_seqs", 1, &seqs) != 0 ||
        ip_json_int(ip, j, "$.config.max_num_batched_tokens", "config.max_num_batched_tokens",
                    1, &batched) != 0 ||
        ip_json_int(ip, j, "$.config.kv_blocks_total_gpu", "config.kv_blocks_total_gpu", 1,
                    &e->kv_blocks) != 0 ||
        ip_json_int(ip, j, "$.config.block_size", "config.block_size", 1, &e->block_size) != 0)
        return -1;
    const struct { const char *key; int64_t got, want; } same[] = {
        {"tensor_parallelism", tp, e->tp}, {"max_num_seqs", seqs, e->max_seqs},
        {"max_num_batched_tokens", batched, e->max_batched},
    };
    for (size_t k = 0; k < sizeof same / sizeof *same; k++)
        if (same[k].got != same[k].want)
            return ip_fail(ip, j->name, 0, "config.%s %lld is not exp-config.yaml's %lld",
                           same[k].key, (long long)same[k].got, (long long)same[k].want);
    for (int k = 0; k < MC_N; k++) {
        snprintf(path, sizeof path, "$.model_config.%s", ip_model_keys[k]);
        snprintf(label, sizeof label, "model_config.%s", ip_model_keys[k]);
        if (ip_json_int(ip, j, path, label, k == MC_EXPERTS || k == MC_TOPK ? 0 : 1,
                        &e->shape[k]) != 0)
            return -1;
    }
    if (ip_json_get(ip, j, "$.requests", &v) != 0) return -1;
    if (!v.type[0]) return ip_fail(ip, j->name, 0, "key 'requests' is missing");
    if (strcmp(v.type, "array") != 0)
        return ip_fail(ip, j->name, 0, "key 'requests': expected a list, got %s", v.type);
    return 0;
}

/* The SQL columns (type, value) of one member of a request row. */
#define IP_MEMBER(k) "CASE WHEN type = 'object' THEN json_type(value, '$." k "') END, " \
                     "CASE WHEN type = 'object' THEN json_extract(value, '$." k "') END"

static int req_fail(ip_t *ip, const char *file, int64_t i, const char *key, const char *type,
                    const char *want) {
    if (!type) return ip_fail(ip, file, 0, "requests[%lld]: key '%s' is missing", (long long)i,
                              key);
    return ip_fail(ip, file, 0, "requests[%lld]: key '%s': expected %s, got %s", (long long)i,
                   key, want, type);
}

static int read_requests(ip_t *ip, const ip_json_t *j, ip_exp_t *e) {
    sqlite3_stmt *st = ip_json_prep(ip, j, "SELECT count(*) FROM json_each(?1, '$.requests')");
    int rc = -1, r;
    if (!st) return -1;
    e->n = sqlite3_step(st) == SQLITE_ROW ? (size_t)sqlite3_column_int64(st, 0) : 0;
    sqlite3_finalize(st);
    if (e->n == 0) return ip_fail(ip, j->name, 0, "key 'requests' is empty: no requests");
    if (!(e->arrival_us = malloc(e->n * sizeof *e->arrival_us)) ||
        !(e->ttft = malloc(e->n * sizeof *e->ttft)) || !(e->e2e = malloc(e->n * sizeof *e->e2e)) ||
        !(e->input = malloc(e->n * sizeof *e->input)) ||
        !(e->output = malloc(e->n * sizeof *e->output)) || !(e->failed = calloc(e->n, 1)))
        return ip_fail(ip, NULL, 0, "out of memory");
    st = ip_json_prep(ip, j, "SELECT key, type, " IP_MEMBER("index") ", "
                      IP_MEMBER("arrival_time_us") ", " IP_MEMBER("input_tokens") ", "
                      IP_MEMBER("output_tokens") ", " IP_MEMBER("has_error")
                      " FROM json_each(?1, '$.requests')");
    if (!st) return -1;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1);
        const char *t[5];
        for (int k = 0; k < 5; k++) t[k] = (const char *)sqlite3_column_text(st, 2 + 2 * k);
        if (strcmp(type, "object") != 0) {
            ip_fail(ip, j->name, 0, "requests[%lld]: expected an object, got %s", (long long)i,
                    type);
            goto done;
        }
        if (!t[0] || strcmp(t[0], "integer")) {
            req_fail(ip, j->name, i, "index", t[0], "a whole number");
            goto done;
        }
        int64_t index = sqlite3_column_int64(st, 3);
        if (index != i) {
            ip_fail(ip, j->name, 0, "requests[%lld]: index %lld, expected %lld (the requests "
                    "in index order, from 0)", (long long)i, (long long)index, (long long)i);
            goto done;
        }
        double us = sqlite3_column_double(st, 5);
        if (!t[1] || !ip_is_number(t[1]) || us < 0) {
            req_fail(ip, j->name, i, "arrival_time_us", t[1] && us < 0 ? "a negative number" : t[1],
                     "microseconds, a number >= 0");
            goto done;
        }
        static const char *const len_keys[2] = {"input_tokens", "output_tokens"};
        int64_t len[2];
        for (int k = 0; k < 2; k++) {
            len[k] = sqlite3_column_int64(st, 7 + 2 * k);
            if (!t[2 + k] || strcmp(t[2 + k], "integer") || len[k] < 0 || len[k] > INT32_MAX) {
                req_fail(ip, j->name, i, len_keys[k], t[2 + k] && !strcmp(t[2 + k], "integer")
                         ? "a number out of range" : t[2 + k], "a whole number of tokens >= 0");
                goto done;
            }
        }
        if (!t[4] || (strcmp(t[4], "true") && strcmp(t[4], "false"))) {
            req_fail(ip, j->name, i, "has_error", t[4], "true or false");
            goto done;
        }
        e->arrival_us[i] = us;
        e->input[i] = (int32_t)len[0];
        e->output[i] = (int32_t)len[1];
        e->failed[i] = !strcmp(t[4], "true");
        if (!e->failed[i] && len[0] == 0) {
            ip_fail(ip, j->name, 0, "requests[%lld]: input_tokens 0 for a request without an "
                    "error", (long long)i);
            goto done;
        }
        if (!e->failed[i] && !e->ignore_eos && len[1] == 0) {
            ip_fail(ip, j->name, 0, "requests[%lld]: output_tokens 0 for a request without an "
                    "error (server.ignore_eos is false, so this count is its output length)",
                    (long long)i);
            goto done;
        }
    }
    if (r != SQLITE_DONE) {
        ip_fail(ip, j->name, 0, "cannot read key 'requests': %s", sqlite3_errmsg(ip->db));
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    return rc;
}

/* ------------------------------------------------------------------ ground_truth.json */

static int read_ground_truth(ip_t *ip, ip_exp_t *e) {
    ip_json_t j;
    ip_val_t v;
    sqlite3_stmt *st = NULL;
    int rc = -1, r;
    size_t rows = 0;
    if (ip_json_open(ip, "ground_truth.json", 1, &j) != 0) return -1;
    if (ip_json_get(ip, &j, "$", &v) != 0) goto done;
    if (strcmp(v.type, "array") != 0) {
        ip_fail(ip, j.name, 0, "expected a list of {index, has_error, e2e_s, ttft_s}, got %s",
                v.type);
        goto done;
    }
    st = ip_json_prep(ip, &j, "SELECT key, type, " IP_MEMBER("index") ", " IP_MEMBER("has_error")
                      ", " IP_MEMBER("e2e_s") ", " IP_MEMBER("ttft_s") " FROM json_each(?1)");
    if (!st) goto done;
    while ((r = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(st, 0);
        const char *type = (const char *)sqlite3_column_text(st, 1), *t[4];
        for (int k = 0; k < 4; k++) t[k] = (const char *)sqlite3_column_text(st, 2 + 2 * k);
        rows++;
        if ((size_t)i >= e->n) continue;   /* the length is checked below, once */
        if (strcmp(type, "object") != 0) {
            ip_fail(ip, j.name, 0, "[%lld]: expected an object, got %s", (long long)i, type);
            goto done;
        }
        if (!t[0] || strcmp(t[0], "integer") || sqlite3_column_int64(st, 3) != i) {
            if (t[0] && !strcmp(t[0], "integer"))
                ip_fail(ip, j.name, 0, "[%lld]: index %lld, but replay.json's requests[%lld] "
                        "has index %lld", (long long)i, (long long)sqlite3_column_int64(st, 3),
                        (long long)i, (long long)i);
            else if (t[0]) ip_fail(ip, j.name, 0, "[%lld]: key 'index': expected a whole number, "
                                   "got %s", (long long)i, t[0]);
            else ip_fail(ip, j.name, 0, "[%lld]: key 'index' is missing", (long long)i);
            goto done;
        }
        if (!t[1] || (strcmp(t[1], "true") && strcmp(t[1], "false"))) {
            if (t[1]) ip_fail(ip, j.name, 0, "[%lld]: key 'has_error': expected true or false, "
                              "got %s", (long long)i, t[1]);
            else ip_fail(ip, j.name, 0, "[%lld]: key 'has_error' is missing", (long long)i);
            goto done;
        }
        int failed = !strcmp(t[1], "true");
        if (failed != e->failed[i]) {
            ip_fail(ip, j.name, 0, "[%lld]: has_error %s, but replay.json's requests[%lld] has "
                    "%s", (long long)i, t[1], (long long)i, failed ? "false" : "true");
            goto done;
        }
        static const char *const keys[2] = {"e2e_s", "ttft_s"};
        double x[2] = {0, 0};
        for (int k = 0; k < 2 - failed; k++) {
            x[k] = sqlite3_column_double(st, 7 + 2 * k);
            if (!t[2 + k] || !ip_is_number(t[2 + k]) || x[k] < 0) {
                if (!t[2 + k]) ip_fail(ip, j.name, 0, "[%lld]: key '%s' is missing%s",
                                       (long long)i, keys[k], failed ? "" : " (the request "
                                       "succeeded)");
                else ip_fail(ip, j.name, 0, "[%lld]: key '%s': expected seconds >= 0, got %s",
                             (long long)i, keys[k], ip_is_number(t[2 + k]) ? "a negative "
                             "number" : t[2 + k]);
                goto done;
            }
        }
        if (!failed && x[1] > x[0]) {
            ip_fail(ip, j.name, 0, "[%lld]: ttft_s %.9g is after e2e_s %.9g", (long long)i, x[1],
                    x[0]);
            goto done;
        }
        e->e2e[i] = x[0];
        e->ttft[i] = x[1];
    }
    if (r != SQLITE_DONE) {
        ip_fail(ip, j.name, 0, "cannot read the rows: %s", sqlite3_errmsg(ip->db));
        goto done;
    }
    if (rows != e->n) {
        ip_fail(ip, j.name, 0, "%zu rows, but replay.json has %zu requests", rows, e->n);
        goto done;
    }
    rc = 0;
done:
    sqlite3_finalize(st);
    ip_json_close(&j);
    return rc;
}

/* ------------------------------------------------------------------ the prompt cycle */

/* Imputes the failed requests' prompts and measures the cycle (see the top). */
static void prompt_cycle(ip_exp_t *e, int32_t *prompt) {
    size_t N = (size_t)(e->groups * e->per_group), same = 0;
    double sum = 0;
    size_t recorded = 0;
    for (size_t i = 0; i < e->n; i++) {
        prompt[i] = e->input[i];
        if (e->input[i] > 0) {
            sum += e->input[i];
            recorded++;
        }
        if (i + N < e->n && e->input[i] > 0 && e->input[i + N] > 0) {
            e->pairs++;
            same += e->input[i] == e->input[i + N];
        }
    }
    e->cycle_check = e->pairs ? (double)same / (double)e->pairs : NAN;
    /* with no recorded prompt at all, the generator's nominal length */
    int32_t mean = recorded ? (int32_t)lround(sum / (double)recorded)
                            : (int32_t)(e->sys_len + e->q_len);
    for (size_t i = 0; i < e->n; i++) {
        if (e->input[i] > 0) continue;
        int32_t got = 0;
        for (size_t k = 1; !got && (k * N <= i || i + k * N < e->n); k++) {
            if (k * N <= i && e->input[i - k * N] > 0) got = e->input[i - k * N];
            else if (i + k * N < e->n && e->input[i + k * N] > 0) got = e->input[i + k * N];
        }
        if (got) e->imputed_near++;
        else e->imputed_mean++;
        prompt[i] = got ? got : mean;
    }
}

/* ------------------------------------------------------------------ the run's config */

static void write_members(const ip_exp_t *e, FILE *f) {
    size_t N = (size_t)(e->groups * e->per_group);
    fputs("\"metrics\":\"client\",\"experiment\":", f);
    json_write_str(f, e->experiment);
    fputs(",\"server\":{\"engine\":", f);
    json_write_str(f, e->engine);
    fputs(",\"model_id\":", f);
    json_write_str(f, e->model_id);
    fprintf(f, ",\"tp\":%lld,\"max_model_len\":%lld,\"max_num_batched_tokens\":%lld,"
            "\"max_num_seqs\":%lld,\"block_size\":%lld,\"kv_blocks\":%lld}",
            (long long)e->tp, (long long)e->max_model_len, (long long)e->max_batched,
            (long long)e->max_seqs, (long long)e->block_size, (long long)e->kv_blocks);
    fputs(",\"client\":{\"tool\":\"inference-perf\",\"api\":", f);
    json_write_str(f, e->api);
    fprintf(f, ",\"streaming\":%s,\"ignore_eos\":%s,\"timeout_s\":%.17g,\"timeout_source\":%s}",
            e->streaming ? "true" : "false", e->ignore_eos ? "true" : "false", e->timeout_s,
            e->timeout_given ? "\"load.request_timeout\""
                             : "\"aiohttp ClientTimeout default total (request_timeout null)\"");
    fprintf(f, ",\"workload\":{\"type\":\"shared_prefix\",\"num_groups\":%lld,"
            "\"num_prompts_per_group\":%lld,\"system_prompt_len\":%lld,\"question_len\":%lld,"
            "\"output_len\":%lld,\"output_tokens\":%s,\"prompt_cycle\":%zu,\"cycle_check\":",
            (long long)e->groups, (long long)e->per_group, (long long)e->sys_len,
            (long long)e->q_len, (long long)e->out_len,
            e->ignore_eos ? "\"output_len for every request (server.ignore_eos); replay.json's "
                            "output_tokens, the client's re-tokenised count, left unused\""
                          : "\"replay.json's output_tokens (the client's count): "
                            "server.ignore_eos is false\"", N);
    if (isfinite(e->cycle_check)) fprintf(f, "%.6g", e->cycle_check);
    else fputs("null", f);
    fprintf(f, ",\"cycle_pairs\":%lld}", (long long)e->pairs);
}

static void write_imputed(const ip_exp_t *e, FILE *f) {
    size_t N = (size_t)(e->groups * e->per_group);
    if (!e->imputed_near && !e->imputed_mean) return;
    fprintf(f, ",\"imputed_prompts\":{\"count\":%zu,\"same_prompt\":%zu,\"mean\":%zu,"
            "\"how\":\"a request without a recorded prompt (replay.json's input_tokens 0: "
            "the failed ones) gets the input_tokens of the nearest request with the same "
            "prompt (index = i mod %zu) that recorded one, the earlier on a tie, else the "
            "mean of the recorded prompts\"}", e->imputed_near + e->imputed_mean,
            e->imputed_near, e->imputed_mean, N);
}

static char *summary_line(const import_opts_t *o, const ip_exp_t *e) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "%zu stage%s:", e->n_stages, e->n_stages == 1 ? "" : "s");
    for (size_t k = 0; k < e->n_stages; k++)
        fprintf(f, "%s %g req/s x %g s", k ? "," : "", e->stages[k].rate,
                e->stages[k].duration);
    fprintf(f, "; prompt cycle %lld", (long long)(e->groups * e->per_group));
    if (isfinite(e->cycle_check))
        fprintf(f, " (check %.3f over %lld pairs)", e->cycle_check, (long long)e->pairs);
    else fputs(" (unchecked: no pair of recorded prompts)", f);
    if (isfinite(e->cycle_check) && e->cycle_check < 0.9)
        fputs(" WARNING: the prompts do not repeat at that period", f);
    if (e->n_failed)
        fprintf(f, "; %zu failed (%zu prompts imputed)", e->n_failed,
                e->imputed_near + e->imputed_mean);
    if (e->ignore_eos) fprintf(f, "; outputs %lld tokens (ignore_eos)", (long long)e->out_len);
    fprintf(f, "; %s", e->model_note);
    if (!o->hw) fputs("; hardware not recorded (the folder does not name it): validate will "
                      "need --hw", f);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The import_data_t the recording step takes. */
static int build(ip_t *ip, const import_opts_t *o, ip_exp_t *e, const char *stages_json,
                 import_data_t *d) {
    int32_t *prompt = malloc(e->n * sizeof *prompt);
    char reason[160];
    int rc = -1;
    if (!prompt) return ip_fail(ip, NULL, 0, "out of memory");
    prompt_cycle(e, prompt);
    d->arrivals_known = 1;
    d->duration_s = NAN;
    for (size_t i = 0; i < e->n; i++) {
        import_req_t *q = import_data_add(d);
        if (!q) goto oom;
        q->arrival = e->arrival_us[i] / 1e6;
        q->prompt = prompt[i];
        q->output = e->ignore_eos || e->failed[i] ? (int32_t)e->out_len : e->output[i];
        q->ttft = e->ttft[i];
        q->e2e = e->e2e[i];
        if (!e->failed[i]) continue;
        e->n_failed++;
        if (e->e2e[i] >= IP_TIMEOUT_SHARE * e->timeout_s)
            snprintf(reason, sizeof reason, "client timeout after %.1f s (inference-perf "
                     "has_error)", e->e2e[i]);
        else snprintf(reason, sizeof reason, "failed after %.1f s (inference-perf has_error)",
                      e->e2e[i]);
        if (import_req_fail(q, reason) != 0) goto oom;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) goto oom;
    write_members(e, f);
    fputs(stages_json, f);
    write_imputed(e, f);
    if (fclose(f) != 0) goto oom;
    d->members = buf;
    d->tp = (int32_t)e->tp;
    if (!(d->model = strdup(e->model)) || !(d->stem = strdup(e->experiment)) ||
        !(d->summary = summary_line(o, e)))
        goto oom;
    rc = 0;
    goto done;
oom:
    ip_fail(ip, NULL, 0, "out of memory");
done:
    free(prompt);
    return rc;
}

/* ------------------------------------------------------------------ the folder */

static void exp_free(ip_exp_t *e) {
    free(e->stages);
    free(e->arrival_us);
    free(e->ttft);
    free(e->e2e);
    free(e->input);
    free(e->output);
    free(e->failed);
}

int import_read_ip(const import_opts_t *o, import_data_t *d, char *err, size_t errlen) {
    ip_t ip = {.err = err, .errlen = errlen};
    ip_exp_t e = {0};
    ip_json_t replay = {.text = NULL};
    char *stages = NULL, real[PATH_MAX];
    size_t stages_len = 0;
    FILE *sf = NULL;
    struct stat sb;
    int rc = -1;
    if (!(ip.dir = strdup(o->path))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t n = strlen(ip.dir); n > 1 && ip.dir[n - 1] == '/'; n--) ip.dir[n - 1] = '\0';
    if (stat(ip.dir, &sb) != 0) {
        ip_fail(&ip, NULL, 0, "%s", strerror(errno));
        goto done;
    }
    if (!S_ISDIR(sb.st_mode)) {
        ip_fail(&ip, NULL, 0, "not a folder (give the experiment folder, which holds "
                "replay.json, ground_truth.json, config.yaml, exp-config.yaml and the "
                "stage_N_lifecycle_metrics.json files)");
        goto done;
    }
    const char *base = realpath(ip.dir, real) ? strrchr(real, '/') : NULL;
    snprintf(e.experiment, sizeof e.experiment, "%s", base && base[1] ? base + 1 : "experiment");
    if (sqlite3_open(":memory:", &ip.db) != SQLITE_OK) {
        ip_fail(&ip, NULL, 0, "cannot open an in-memory database to parse the JSON");
        goto done;
    }
    /* the small files first, so that a folder missing one says so before the big reads */
    if (ip_read_yaml(&ip, &e) != 0) goto done;
    if (o->tp > 0 && o->tp != e.tp) {
        ip_fail(&ip, NULL, 0, "--tp %d, but exp-config.yaml says tensor_parallelism %lld",
                o->tp, (long long)e.tp);
        goto done;
    }
    if (strcmp(e.server_model, e.model_id) != 0) {
        ip_fail(&ip, "config.yaml", 0, "server.model_name '%s' is not exp-config.yaml's model "
                "'%s'", e.server_model, e.model_id);
        goto done;
    }
    if (ip_json_open(&ip, "replay.json", 1, &replay) != 0) goto done;
    if (read_replay_head(&ip, &replay, &e) != 0 || ip_resolve_model(&ip, o, &e) != 0 ||
        read_requests(&ip, &replay, &e) != 0)
        goto done;
    ip_json_close(&replay);
    if (read_ground_truth(&ip, &e) != 0) goto done;
    if (!(sf = open_memstream(&stages, &stages_len))) {
        ip_fail(&ip, NULL, 0, "out of memory");
        goto done;
    }
    int bad = ip_read_stages(&ip, e.stages, e.n_stages, e.failed, e.n, sf);
    if (fclose(sf) != 0 && !bad) bad = ip_fail(&ip, NULL, 0, "out of memory");
    sf = NULL;
    if (bad || ip_cross_check(&ip, e.stages, e.n_stages, e.n) != 0) goto done;
    rc = build(&ip, o, &e, stages ? stages : "", d);
done:
    if (sf) fclose(sf);
    free(stages);
    ip_json_close(&replay);
    exp_free(&e);
    sqlite3_close(ip.db);
    free(ip.dir);
    return rc;
}

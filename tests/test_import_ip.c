/* test_import_ip: `twinserve import --inference-perf DIR` (analysis/import_ip*.c) and
 * `report --by stage` (analysis/report_by_stage.c), on small synthetic experiment folders
 * written to a temp dir, so the suite needs no data (tests/e2e_import_ip.sh imports the
 * real ones).
 *
 * The folder: 12 requests over 2 stages (5 at 2 req/s, 7 at 4 req/s), a workload of
 * 2 x 2 prompts (so request i sends prompt i mod 4: prompt lengths 130, 125, 140, 135,
 * except request 10 at 141), outputs of 16 tokens with ignore_eos (the client counts 16,
 * 3 or 0), requests 1, 9 and 11 failed (two client timeouts near 300 s, one error at
 * 120 s). Checked: every recorded row and config member (the stage ranges and summaries,
 * the imputed prompts 125, 125, 135, the cycle check 4/5), the model presets and their
 * shape checks, the options, every bad-input message with nothing recorded, and the
 * per-stage report. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/report_by.h"
#include "traces/summary.h"
#include "tests/testutil.h"
#include "analysis/import.h"

#define N_REQ 12

typedef struct {
    const char *model_id;
    int shape[8];              /* replay.json's model_config, in its key order */
    int tp;
} spec_t;

static const spec_t llama = {"meta-llama/Llama-2-7b-hf", {32, 4096, 32, 32, 11008, 0, 0, 32000}, 1};
static const spec_t mixtral = {"mistralai/Mixtral-8x7B-v0.1",
                               {32, 4096, 32, 8, 14336, 8, 2, 32000}, 2};

static const int failed_req[N_REQ] = {0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};

static int input_of(int i) {
    static const int cycle[4] = {130, 125, 140, 135};
    return failed_req[i] ? 0 : i == 10 ? 141 : cycle[i % 4];
}
static int client_out(int i) { return failed_req[i] ? 0 : i % 3 == 0 ? 16 : i % 3 == 1 ? 3 : 0; }
static long arrival_us(int i) { return i * 250000L + (i >= 5 ? 500000L : 0); }
static double ttft_of(int i) { return 0.05 + 0.001 * i; }
static double e2e_of(int i) {
    return i == 1 ? 300.6 : i == 9 ? 300.4 : i == 11 ? 120.0 : 1.0 + 0.01 * i;
}

/* ------------------------------------------------------------------ the folder */

static void put(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *get(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *t = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(fread(t, 1, (size_t)n, f), (size_t)n);
    t[n] = '\0';
    fclose(f);
    return t;
}

/* Replaces the one occurrence of from in DIR/name by to. */
static void edit(const char *dir, const char *name, const char *from, const char *to) {
    char *t = get(dir, name), *at = strstr(t, from);
    ck_assert_msg(at != NULL, "'%s' not in %s", from, name);
    ck_assert_msg(strstr(at + 1, from) == NULL, "'%s' twice in %s", from, name);
    size_t a = (size_t)(at - t), nf = strlen(from), nt = strlen(to), n = strlen(t);
    char *u = malloc(n - nf + nt + 1);
    ck_assert_ptr_nonnull(u);
    memcpy(u, t, a);
    memcpy(u + a, to, nt);
    memcpy(u + a + nt, t + a + nf, n - a - nf + 1);
    put(dir, name, u);
    free(u);
    free(t);
}

static const char config_yaml[] =
    "api:\n"                                   /* 1 */
    "  type: completion\n"
    "  streaming: true\n"
    "  headers: null\n"
    "data:\n"                                  /* 5 */
    "  type: shared_prefix\n"
    "  path: null\n"
    "  shared_prefix:\n"
    "    num_groups: 2\n"
    "    num_prompts_per_group: 2\n"           /* 10 */
    "    system_prompt_len: 100\n"
    "    question_len: 30\n"
    "    output_len: 16\n"
    "load:\n"
    "  type: constant\n"                       /* 15 */
    "  stages:\n"
    "  - rate: 2.0\n"
    "    duration: 3\n"
    "  - rate: 4.0\n"
    "    duration: 2\n"                        /* 20 */
    "  circuit_breakers: []\n"
    "  request_timeout: null\n"
    "server:\n"
    "  type: vllm\n"
    "  model_name: MODEL\n"                    /* 25 */
    "  ignore_eos: true\n"
    "  api_key: null\n";

/* A stage file: its counts, rate, and latency blocks with a few gaps. */
static void stage_file(const char *dir, int k) {
    char name[64], text[4096];
    int count = k ? 7 : 5, fail = k ? 2 : 1;
    const char *itl = k ? "null" :
        "{\"mean\": 0.004, \"min\": 1e-06, \"median\": 3.1e-05, \"p75\": 0.0081, "
        "\"p90\": 0.0087, \"p95\": 0.009, \"p99\": 0.0098, \"p99.9\": 0.0128, \"max\": 0.047}";
    snprintf(text, sizeof text,
             "{\"load_summary\": {\"count\": %d, \"schedule_delay\": {\"mean\": 0.0004}, "
             "\"send_duration\": 2.5, \"requested_rate\": %s, \"achieved_rate\": 2.01},\n"
             " \"successes\": {\"count\": %d, \"latency\": {\n"
             "  \"request_latency\": {\"mean\": 1.0%d, \"min\": 1.0, \"p0.1\": 1.0, "
             "\"median\": 1.02, \"p75\": 1.03, \"p90\": 1.04, \"p95\": 1.05, \"p99\": 1.06, "
             "\"p99.9\": 1.07, \"max\": 1.08},\n"
             "  \"normalized_time_per_output_token\": {\"mean\": 0.0289, \"p99.9\": null, "
             "\"max\": 1.13},\n"
             "  \"time_per_output_token\": {\"mean\": 0.004081660576212077, \"median\": 0.00406},\n"
             "  \"time_to_first_token\": {\"mean\": 0.027109092157625126, \"min\": 0.019, "
             "\"median\": 0.0268, \"p75\": 0.029, \"p90\": 0.031, \"p95\": 0.0326, \"p99\": "
             "0.0366, \"p99.9\": 0.0515, \"max\": 0.0744},\n"
             "  \"inter_token_latency\": %s},\n"
             "  \"throughput\": {\"input_tokens_per_sec\": 100.5, \"output_tokens_per_sec\": "
             "20.25%s, \"requests_per_sec\": 1.5}, \"prompt_len\": null},\n"
             " \"failures\": {\"count\": %d, \"request_latency\": null, \"prompt_len\": null}}\n",
             count, k ? "4.0" : "2.0", count - fail, k, itl,
             k ? "" : ", \"total_tokens_per_sec\": 120.75", fail);
    snprintf(name, sizeof name, "stage_%d_lifecycle_metrics.json", k);
    put(dir, name, text);
}

/* A fresh folder of the spec, its path in dir (a directory under /tmp). */
static void make_folder(char *dir, size_t len, const spec_t *sp) {
    char text[8192];
    size_t n = 0;
    snprintf(dir, len, "/tmp/twintest-ipXXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(text, sizeof text, "model: %s\ntensor_parallelism: %d\nmax_model_len: 4096\n"
             "max_num_batched_tokens: 2048\nmax_num_seqs: 128\napp: inference-perf\n",
             sp->model_id, sp->tp);
    put(dir, "exp-config.yaml", text);
    put(dir, "config.yaml", config_yaml);
    edit(dir, "config.yaml", "MODEL", sp->model_id);
    put(dir, "profile.yaml", "{\"data\":{\"shared_prefix\":{\"num_unique_system_prompts\":9,"
        "\"num_users_per_system_prompt\":5}},\"load\":{\"stages\":[{\"duration\":3,\"rate\":2},"
        "{\"duration\":2,\"rate\":4}],\"type\":\"constant\"}}");
    n += (size_t)snprintf(text + n, sizeof text - n,
        "{\"experiment\":\"x\",\"model_id\":\"%s\",\"model_short\":\"m\",\"config\":"
        "{\"tensor_parallelism\":%d,\"max_num_seqs\":128,\"max_num_batched_tokens\":2048,"
        "\"kv_blocks_total_gpu\":7462,\"block_size\":16},\"model_config\":{\"num_layers\":%d,"
        "\"hidden_dim\":%d,\"num_heads\":%d,\"num_kv_heads\":%d,\"intermediate_dim\":%d,"
        "\"num_local_experts\":%d,\"num_experts_per_tok\":%d,\"vocab_size\":%d},\"requests\":[",
        sp->model_id, sp->tp, sp->shape[0], sp->shape[1], sp->shape[2], sp->shape[3],
        sp->shape[4], sp->shape[5], sp->shape[6], sp->shape[7]);
    for (int i = 0; i < N_REQ; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%s{\"index\":%d,\"arrival_time_us\":"
                              "%ld,\"input_tokens\":%d,\"output_tokens\":%d,\"prefix_group\":"
                              "\"\",\"has_error\":%s}", i ? "," : "", i, arrival_us(i),
                              input_of(i), client_out(i), failed_req[i] ? "true" : "false");
    snprintf(text + n, sizeof text - n, "]}");
    put(dir, "replay.json", text);
    n = (size_t)snprintf(text, sizeof text, "[");
    for (int i = 0; i < N_REQ; i++) {
        n += (size_t)snprintf(text + n, sizeof text - n, "%s{\"index\":%d,\"has_error\":%s,"
                              "\"e2e_s\":%.17g", i ? "," : "", i,
                              failed_req[i] ? "true" : "false", e2e_of(i));
        if (!failed_req[i])
            n += (size_t)snprintf(text + n, sizeof text - n, ",\"ttft_s\":%.17g", ttft_of(i));
        n += (size_t)snprintf(text + n, sizeof text - n, "}");
    }
    snprintf(text + n, sizeof text - n, "]");
    put(dir, "ground_truth.json", text);
    stage_file(dir, 0);
    stage_file(dir, 1);
    put(dir, "summary_lifecycle_metrics.json", "{\"load_summary\": {\"count\": 12}}");
}

static void rm_folder(const char *dir) {
    static const char *const files[] = {
        "exp-config.yaml", "config.yaml", "profile.yaml", "replay.json", "ground_truth.json",
        "stage_0_lifecycle_metrics.json", "stage_1_lifecycle_metrics.json",
        "stage_2_lifecycle_metrics.json", "summary_lifecycle_metrics.json",
    };
    char path[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

static void db_path(char *buf, size_t len) {
    ck_assert_ptr_nonnull(testutil_tmpfile(buf, len, ".db"));
    unlink(buf);
}

static double q(const char *db, const char *sql, char *out, size_t len) {
    if (out) testutil_sql_text(db, out, len, "%s", sql);
    return testutil_sql_num(db, "%s", sql);
}

static int import_dir(const char *db, const char *dir, const char *model, int tp,
                      import_result_t *res, char *err, size_t errlen) {
    import_opts_t o = {.db_path = db, .path = dir, .format = IMPORT_IP, .model = model,
                       .tp = tp, .version = "test"};
    return import_run(&o, res, err, errlen);
}

/* ------------------------------------------------------------------ good folders */

START_TEST(test_round_trip) {
    char dir[256], db[256], err[2048], s[4096], sql[512], want[512];
    import_result_t res;
    make_folder(dir, sizeof dir, &llama);
    db_path(db, sizeof db);
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    const char *base = strrchr(dir, '/') + 1;
    snprintf(want, sizeof want, "measured-%s", base);
    ck_assert_str_eq(res.name, want);
    ck_assert_int_eq(res.requests, 12);
    ck_assert_int_eq(res.finished, 9);
    ck_assert_int_eq(res.rejected, 3);
    ck_assert_int_eq(res.tokens, 0);
    ck_assert_int_eq(res.arrivals_known, 1);
    ck_assert_str_eq(res.detail, "2 stages: 2 req/s x 3 s, 4 req/s x 2 s; prompt cycle 4 "
                     "(check 0.800 over 5 pairs) WARNING: the prompts do not repeat at that "
                     "period; 3 failed (3 prompts imputed); outputs 16 tokens (ignore_eos); "
                     "model llama-2-7b (meta-llama/Llama-2-7b-hf, shape checked); hardware "
                     "not recorded (the folder does not name it): validate will need --hw");

    q(db, "SELECT kind || ' ' || status || ' ' || model || ' ' || coalesce(hardware, '-') || "
          "' ' || trace FROM runs", s, sizeof s);
    snprintf(want, sizeof want, "measured done llama-2-7b - %s", dir);
    ck_assert_str_eq(s, want);
    /* the config, member by member */
    static const struct { const char *path, *want; } members[] = {
        {"$.kind", "measured"}, {"$.source.format", "inference-perf"},
        {"$.arrivals", "recorded"}, {"$.time_origin_s", "0"}, {"$.model", "llama-2-7b"},
        {"$.tp", "1"}, {"$.metrics", "client"}, {"$.server.engine", "vllm"},
        {"$.server.model_id", "meta-llama/Llama-2-7b-hf"}, {"$.server.tp", "1"},
        {"$.server.max_model_len", "4096"}, {"$.server.max_num_batched_tokens", "2048"},
        {"$.server.max_num_seqs", "128"}, {"$.server.block_size", "16"},
        {"$.server.kv_blocks", "7462"}, {"$.client.tool", "inference-perf"},
        {"$.client.api", "completion"}, {"$.client.streaming", "1"},
        {"$.client.ignore_eos", "1"}, {"$.client.timeout_s", "300"},
        {"$.client.timeout_source", "aiohttp ClientTimeout default total (request_timeout null)"},
        {"$.workload.type", "shared_prefix"}, {"$.workload.num_groups", "2"},
        {"$.workload.num_prompts_per_group", "2"}, {"$.workload.system_prompt_len", "100"},
        {"$.workload.question_len", "30"}, {"$.workload.output_len", "16"},
        {"$.workload.prompt_cycle", "4"}, {"$.workload.cycle_check", "0.8"},
        {"$.workload.cycle_pairs", "5"}, {"$.imputed_prompts.count", "3"},
        {"$.imputed_prompts.same_prompt", "3"}, {"$.imputed_prompts.mean", "0"},
        {"json_array_length(config, '$.stages')", "2"},
        {"$.stages[0].stage", "0"}, {"$.stages[0].rate", "2"},
        {"$.stages[0].duration_s", "3"}, {"$.stages[0].first", "0"},
        {"$.stages[0].count", "5"}, {"$.stages[1].first", "5"}, {"$.stages[1].count", "7"},
        {"$.stages[1].rate", "4"}, {"$.stages[0].summary.successes", "4"},
        {"$.stages[1].summary.failures", "2"},
        {"$.stages[0].summary.ttft.p50", "0.0268"}, {"$.stages[0].summary.ttft.p99_9", "0.0515"},
        {"$.stages[1].summary.e2e.mean", "1.01"}, {"$.stages[0].summary.itl.p75", "0.0081"},
        {"$.stages[0].summary.throughput.total_tokens_per_sec", "120.75"},
        {"$.stages[1].summary.throughput.requests_per_sec", "1.5"},
        /* verbatim to the double */
        {"json_extract(config, '$.stages[0].summary.ttft.mean') = 0.027109092157625126", "1"},
        {"json_extract(config, '$.stages[0].summary.tpot.mean') = 0.004081660576212077", "1"},
        /* null and absent members left out, as are blocks with nothing */
        {"json_type(config, '$.stages[1].summary.itl')", ""},
        {"json_type(config, '$.stages[0].summary.ntpot.p99_9')", ""},
        {"json_type(config, '$.stages[0].summary.ttft.min')", ""},
        {"json_type(config, '$.stages[0].summary.tpot.p75')", ""},
        {"json_type(config, '$.stages[1].summary.throughput.total_tokens_per_sec')", ""},
        {"json_type(config, '$.hw')", ""}, {"json_type(config, '$.note')", ""},
    };
    for (size_t i = 0; i < sizeof members / sizeof *members; i++) {
        if (members[i].path[0] == '$')
            snprintf(sql, sizeof sql, "SELECT json_extract(config, '%s') FROM runs",
                     members[i].path);
        else snprintf(sql, sizeof sql, "SELECT %s FROM runs", members[i].path);
        q(db, sql, s, sizeof s);
        ck_assert_msg(!strcmp(s, members[i].want), "%s: '%s', expected '%s'", members[i].path,
                      s, members[i].want);
    }
    q(db, "SELECT json_extract(config, '$.experiment') || ' ' || json_extract(config, "
          "'$.source.path') FROM runs", s, sizeof s);
    snprintf(want, sizeof want, "%s %s", base, dir);
    ck_assert_str_eq(s, want);
    q(db, "SELECT json_extract(config, '$.imputed_prompts.how') FROM runs", s, sizeof s);
    ck_assert_msg(strstr(s, "nearest request with the same prompt (index = i mod 4)"), "%s", s);
    /* the requests: arrival, prompt (the failed ones imputed), output = output_len */
    q(db, "SELECT group_concat(printf('%d %.2f %d %d %d %s', req_id, arrival_s, prompt_tokens, "
          "output_tokens, generated_tokens, status), '; ') FROM requests", s, sizeof s);
    ck_assert_str_eq(s, "0 0.00 130 16 16 finished; 1 0.25 125 16 0 rejected; "
                     "2 0.50 140 16 16 finished; 3 0.75 135 16 16 finished; "
                     "4 1.00 130 16 16 finished; 5 1.75 125 16 16 finished; "
                     "6 2.00 140 16 16 finished; 7 2.25 135 16 16 finished; "
                     "8 2.50 130 16 16 finished; 9 2.75 125 16 0 rejected; "
                     "10 3.00 141 16 16 finished; 11 3.25 135 16 0 rejected");
    q(db, "SELECT group_concat(reason, '; ') FROM requests WHERE status = 'rejected'", s,
      sizeof s);
    ck_assert_str_eq(s, "client timeout after 300.6 s (inference-perf has_error); client "
                     "timeout after 300.4 s (inference-perf has_error); failed after 120.0 s "
                     "(inference-perf has_error)");
    for (int i = 0; i < N_REQ; i++) {
        if (failed_req[i]) continue;
        snprintf(sql, sizeof sql, "SELECT abs(ttft_s - %.17g) < 1e-12 AND abs(e2e_s - %.17g) < "
                 "1e-12 AND abs(tpot_s - %.17g) < 1e-12 FROM requests WHERE req_id = %d",
                 ttft_of(i), e2e_of(i), (e2e_of(i) - ttft_of(i)) / 15, i);
        ck_assert_msg(q(db, sql, NULL, 0) == 1, "request %d", i);
    }
    ck_assert(q(db, "SELECT count(*) FROM steps", NULL, 0) == 0);
    ck_assert(fabs(q(db, "SELECT wall_s FROM runs", NULL, 0) - (3.0 + 1.10)) < 1e-9);
    /* the same folder again: the next default name */
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    snprintf(want, sizeof want, "measured-%s-2", base);
    ck_assert_str_eq(res.name, want);
    testutil_unlink_db(db);
    rm_folder(dir);
}
END_TEST

/* Mixtral's id names the mixtral-8x7b preset; an id no preset has is recorded as itself;
 * --model overrides (a preset's shape is checked), --tp must be the folder's, --hw, --note
 * and --name are recorded; a trailing '/' on the folder is fine. */
START_TEST(test_models_and_options) {
    char dir[256], slash[300], db[256], err[2048], s[1024];
    import_result_t res;
    make_folder(dir, sizeof dir, &mixtral);
    db_path(db, sizeof db);
    snprintf(slash, sizeof slash, "%s/", dir);
    ck_assert_msg(import_dir(db, slash, NULL, 2, &res, err, sizeof err) == 0, "%s", err);
    q(db, "SELECT model || ' ' || json_extract(config, '$.tp') || ' ' || "
          "json_extract(config, '$.server.kv_blocks') FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "mixtral-8x7b 2 7462");
    ck_assert_msg(strstr(res.detail, "model mixtral-8x7b (mistralai/Mixtral-8x7B-v0.1, shape "
                         "checked)"), "%s", res.detail);
    /* --tp other than the folder's */
    ck_assert_int_eq(import_dir(db, dir, NULL, 1, &res, err, sizeof err), -1);
    char want[600];
    snprintf(want, sizeof want, "%s: --tp 1, but exp-config.yaml says tensor_parallelism 2", dir);
    ck_assert_str_eq(err, want);
    /* --model of another shape */
    ck_assert_int_eq(import_dir(db, dir, "llama-2-7b", 0, &res, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s/replay.json: model_config.num_kv_heads 8 does not match "
             "n_kv_heads 32 of --model llama-2-7b: give --model with the measured shape", dir);
    ck_assert_str_eq(err, want);
    /* --model that is no preset: recorded, unchecked; --hw, --note, --name recorded */
    import_opts_t o = {.db_path = db, .path = dir, .format = IMPORT_IP, .model = "my/moe",
                       .hw = "h100", .note = "n", .name = "mine", .version = "test"};
    ck_assert_msg(import_run(&o, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(res.name, "mine");
    ck_assert_msg(strstr(res.detail, "model my/moe (--model; not a preset, its shape not "
                         "checked)") && !strstr(res.detail, "--hw"), "%s", res.detail);
    q(db, "SELECT model || ' ' || hardware || ' ' || json_extract(config, '$.hw') || ' ' || "
          "json_extract(config, '$.note') FROM runs WHERE name = 'mine'", s, sizeof s);
    ck_assert_str_eq(s, "my/moe h100 h100 n");
    testutil_unlink_db(db);
    rm_folder(dir);

    /* an id no preset has */
    spec_t other = llama;
    other.model_id = "acme/Widget-7b";
    make_folder(dir, sizeof dir, &other);
    db_path(db, sizeof db);
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(strstr(res.detail, "model acme/Widget-7b (no preset of that name: validate "
                         "will need --model PRESET)"), "%s", res.detail);
    q(db, "SELECT model FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "acme/Widget-7b");
    testutil_unlink_db(db);
    rm_folder(dir);
}
END_TEST

/* Without ignore_eos the client's counts are the outputs; a request_timeout is the
 * timeout; a block-YAML profile is cross-checked as the JSON one is; the profile and the
 * summary file may be absent; a failure without a recorded prompt anywhere in its cycle
 * takes the mean. */
START_TEST(test_variants) {
    char dir[256], db[256], err[2048], s[1024];
    import_result_t res;
    make_folder(dir, sizeof dir, &llama);
    edit(dir, "config.yaml", "  ignore_eos: true\n", "");
    edit(dir, "config.yaml", "request_timeout: null", "request_timeout: 120");
    put(dir, "profile.yaml", "load:\n  stages:\n  - rate: 2\n    duration: 3\n  - rate: 4\n"
        "    duration: 2\n");
    db_path(db, sizeof db);
    /* request 2 succeeded with the client counting 0 tokens: without ignore_eos that is
     * its output, which a finished request cannot have */
    ck_assert_int_eq(import_dir(db, dir, NULL, 0, &res, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/replay.json: requests[2]: output_tokens 0 for a request without "
                         "an error (server.ignore_eos is false, so this count is its output "
                         "length)"), "%s", err);
    for (int i = 0; i < N_REQ; i++) {
        char from[96], to[96];
        if (client_out(i) != 0 || failed_req[i]) continue;
        snprintf(from, sizeof from, "\"index\":%d,\"arrival_time_us\":%ld,\"input_tokens\":%d,"
                 "\"output_tokens\":0", i, arrival_us(i), input_of(i));
        snprintf(to, sizeof to, "\"index\":%d,\"arrival_time_us\":%ld,\"input_tokens\":%d,"
                 "\"output_tokens\":2", i, arrival_us(i), input_of(i));
        edit(dir, "replay.json", from, to);
    }
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    q(db, "SELECT group_concat(output_tokens, ' ') FROM requests", s, sizeof s);
    ck_assert_str_eq(s, "16 16 2 16 3 2 16 3 2 16 3 16");
    q(db, "SELECT json_extract(config, '$.client.ignore_eos') || ' ' || json_extract(config, "
          "'$.client.timeout_s') || ' ' || json_extract(config, '$.client.timeout_source') || "
          "' ' || (SELECT group_concat(reason, '; ') FROM requests WHERE status = 'rejected') "
          "FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "0 120 load.request_timeout client timeout after 300.6 s "
                     "(inference-perf has_error); client timeout after 300.4 s (inference-perf "
                     "has_error); client timeout after 120.0 s (inference-perf has_error)");
    ck_assert_msg(!strstr(res.detail, "ignore_eos"), "%s", res.detail);
    testutil_unlink_db(db);

    /* the optional files gone; prompt 1's only other recorded request made a failure too */
    char path[512];
    snprintf(path, sizeof path, "%s/profile.yaml", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/summary_lifecycle_metrics.json", dir);
    unlink(path);
    edit(dir, "replay.json", "\"index\":5,\"arrival_time_us\":1750000,\"input_tokens\":125,"
         "\"output_tokens\":2,\"prefix_group\":\"\",\"has_error\":false",
         "\"index\":5,\"arrival_time_us\":1750000,\"input_tokens\":0,"
         "\"output_tokens\":0,\"prefix_group\":\"\",\"has_error\":true");
    edit(dir, "ground_truth.json", "{\"index\":5,\"has_error\":false",
         "{\"index\":5,\"has_error\":true");
    edit(dir, "stage_1_lifecycle_metrics.json", "\"failures\": {\"count\": 2",
         "\"failures\": {\"count\": 3");
    edit(dir, "stage_1_lifecycle_metrics.json", "\"successes\": {\"count\": 5",
         "\"successes\": {\"count\": 4");
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    /* prompts 1, 5, 9 have no recorded length: the mean of the 8 recorded, 1081 / 8 */
    q(db, "SELECT group_concat(prompt_tokens, ' ') FROM requests WHERE req_id % 4 = 1", s,
      sizeof s);
    ck_assert_str_eq(s, "135 135 135");
    q(db, "SELECT json_extract(config, '$.imputed_prompts.count') || ' ' || json_extract("
          "config, '$.imputed_prompts.same_prompt') || ' ' || json_extract(config, "
          "'$.imputed_prompts.mean') || ' ' || json_extract(config, '$.workload.cycle_pairs') "
          "FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "4 1 3 5");
    testutil_unlink_db(db);
    rm_folder(dir);
}
END_TEST

/* ------------------------------------------------------------------ bad input */

typedef struct {
    const char *file;          /* the file to change */
    const char *from, *to;     /* to NULL: delete the file; from NULL: write to as the file */
    const char *want;          /* the message after DIR */
} bad_t;

static const bad_t bad_cases[] = {
    {"ground_truth.json", "", NULL, ": ground_truth.json is missing"},
    {"replay.json", "", NULL, ": replay.json is missing"},
    {"config.yaml", "", NULL, ": config.yaml is missing"},
    {"exp-config.yaml", "", NULL, ": exp-config.yaml is missing"},
    {"stage_1_lifecycle_metrics.json", "", NULL, ": stage_1_lifecycle_metrics.json is missing"},
    {"replay.json", "\"index\":3,\"arrival_time_us\":750000,", "\"index\":3,",
     "/replay.json: requests[3]: key 'arrival_time_us' is missing"},
    {"replay.json", "\"index\":3,", "", "/replay.json: requests[3]: key 'index' is missing"},
    {"replay.json", "\"input_tokens\":140,\"output_tokens\":0,\"prefix_group\":\"\","
     "\"has_error\":false}", "\"input_tokens\":\"140\",\"output_tokens\":0,\"prefix_group\":"
     "\"\",\"has_error\":false}",
     "/replay.json: requests[2]: key 'input_tokens': expected a whole number of tokens >= 0, "
     "got text"},
    {"replay.json", "\"arrival_time_us\":750000", "\"arrival_time_us\":-750000",
     "/replay.json: requests[3]: key 'arrival_time_us': expected microseconds, a number >= 0, "
     "got a negative number"},
    {"replay.json", "\"input_tokens\":135,\"output_tokens\":16", "\"input_tokens\":13.5,"
     "\"output_tokens\":16", "/replay.json: requests[3]: key 'input_tokens': expected a whole "
     "number of tokens >= 0, got real"},
    {"replay.json", "\"index\":4,", "\"index\":7,",
     "/replay.json: requests[4]: index 7, expected 4 (the requests in index order, from 0)"},
    {"replay.json", "\"input_tokens\":130,\"output_tokens\":16", "\"input_tokens\":0,"
     "\"output_tokens\":16", "/replay.json: requests[0]: input_tokens 0 for a request without "
     "an error"},
    {"replay.json", "\"has_error\":false},{\"index\":11", "\"has_error\":0},{\"index\":11",
     "/replay.json: requests[10]: key 'has_error': expected true or false, got integer"},
    {"replay.json", "]}", ",7]}", "/replay.json: requests[12]: expected an object, got integer"},
    {"replay.json", "\"requests\":[", "\"requests\":[],\"x\":[",
     "/replay.json: key 'requests' is empty: no requests"},
    {"replay.json", "]}", "]", "/replay.json: not valid JSON"},
    {"ground_truth.json", ",{\"index\":11,", "]", "/ground_truth.json: not valid JSON"},
    {"ground_truth.json", "{\"index\":0,\"has_error\":false,\"e2e_s\":1,\"ttft_s\":"
     "0.050000000000000003},", "",
     "/ground_truth.json: [0]: index 1, but replay.json's requests[0] has index 0"},
    {"ground_truth.json", ",{\"index\":11,\"has_error\":true,\"e2e_s\":120}", "",
     "/ground_truth.json: 11 rows, but replay.json has 12 requests"},
    {"ground_truth.json", "{\"index\":4,", "{\"index\":5,",
     "/ground_truth.json: [4]: index 5, but replay.json's requests[4] has index 4"},
    {"ground_truth.json", "{\"index\":4,\"has_error\":false", "{\"index\":4,\"has_error\":true",
     "/ground_truth.json: [4]: has_error true, but replay.json's requests[4] has false"},
    {"ground_truth.json", ",\"ttft_s\":0.052000000000000005", "",
     "/ground_truth.json: [2]: key 'ttft_s' is missing (the request succeeded)"},
    {"ground_truth.json", ",\"ttft_s\":0.052000000000000005", ",\"ttft_s\":5",
     "/ground_truth.json: [2]: ttft_s 5 is after e2e_s 1.02"},
    {"ground_truth.json", "\"e2e_s\":300.60000000000002", "\"e2e_s\":\"long\"",
     "/ground_truth.json: [1]: key 'e2e_s': expected seconds >= 0, got text"},
    {"stage_2_lifecycle_metrics.json", NULL, "{}",
     ": stage_2_lifecycle_metrics.json is there, but config.yaml's load.stages lists 2 stages"},
    {"stage_1_lifecycle_metrics.json", "{\"count\": 7,", "{\"count\": 6,",
     "/stage_1_lifecycle_metrics.json: successes.count 5 + failures.count 2 is not "
     "load_summary.count 6"},
    {"stage_1_lifecycle_metrics.json", "\"successes\": {\"count\": 5",
     "\"successes\": {\"count\": 6",
     "/stage_1_lifecycle_metrics.json: successes.count 6 + failures.count 2 is not "
     "load_summary.count 7"},
    {"stage_0_lifecycle_metrics.json", "{\"count\": 5,", "{\"count\": 4,",
     "/stage_0_lifecycle_metrics.json: successes.count 4 + failures.count 1 is not "
     "load_summary.count 4"},
    {"stage_1_lifecycle_metrics.json", "\"requested_rate\": 4.0", "\"requested_rate\": 3.0",
     "/stage_1_lifecycle_metrics.json: load_summary.requested_rate 3 disagrees with "
     "config.yaml's load.stages[1].rate 4 (line 19)"},
    {"stage_0_lifecycle_metrics.json", "\"requested_rate\": 2.0, ", "",
     "/stage_0_lifecycle_metrics.json: key 'load_summary.requested_rate' is missing"},
    {"stage_0_lifecycle_metrics.json", "\"p75\": 0.029", "\"p75\": \"x\"",
     "/stage_0_lifecycle_metrics.json: key 'successes.latency.time_to_first_token.p75': "
     "expected a number or null, got text"},
    {"stage_0_lifecycle_metrics.json", "\"inter_token_latency\": {", "\"inter_token_latency\": "
     "[{", "/stage_0_lifecycle_metrics.json: not valid JSON"},
    {"config.yaml", "  type: constant\n", "  type: &c constant\n",
     "/config.yaml:15: anchors, aliases and tags (&, *, !) are not supported"},
    {"config.yaml", "    output_len: 16\n", "    output_len: abc\n",
     "/config.yaml:13: key 'data.shared_prefix.output_len': expected a whole number >= 1, got "
     "string 'abc'"},
    {"config.yaml", "    num_groups: 2\n", "",
     "/config.yaml:8: key 'data.shared_prefix.num_groups' is missing"},
    {"config.yaml", "  - rate: 2.0\n", "  - rate: 0\n",
     "/config.yaml:17: key 'load.stages[0].rate': expected a number > 0, got integer 0"},
    {"config.yaml", "    duration: 2\n", "",
     "/config.yaml:19: key 'load.stages[1].duration' is missing"},
    {"config.yaml", "  type: shared_prefix\n", "  type: random\n",
     "/config.yaml: data.type is 'random': only the shared_prefix workload is read (its prompt "
     "cycle is part of what is recorded)"},
    {"config.yaml", "  streaming: true\n", "  streaming: yes\n",
     "/config.yaml:3: key 'api.streaming': expected true or false, got string 'yes'"},
    {"config.yaml", "    question_len: 30\n", "    question_len: 30\n    enable_multi_turn_chat: "
     "true\n", "/config.yaml: data.shared_prefix.enable_multi_turn_chat is true: each user's "
     "prompts grow round by round, so request i does not resend prompt i mod N (not "
     "supported)"},
    {"config.yaml", "  model_name: meta-llama/Llama-2-7b-hf\n", "  model_name: other/model\n",
     "/config.yaml: server.model_name 'other/model' is not exp-config.yaml's model "
     "'meta-llama/Llama-2-7b-hf'"},
    {"exp-config.yaml", "app: inference-perf", "app: guidellm",
     "/exp-config.yaml:6: app is 'guidellm': not an inference-perf experiment"},
    {"exp-config.yaml", "max_num_seqs: 128", "max_num_seqs: 256",
     "/replay.json: config.max_num_seqs 128 is not exp-config.yaml's 256"},
    {"exp-config.yaml", "tensor_parallelism: 1\n", "tensor_parallelism: 1\n  extra: 2\n",
     "/exp-config.yaml:3: more indented than the line before, which has its value (multi-line "
     "values are not supported)"},
    {"replay.json", "\"num_kv_heads\":32", "\"num_kv_heads\":8",
     "/replay.json: model_config.num_kv_heads 8 does not match n_kv_heads 32 of preset "
     "llama-2-7b (named by meta-llama/Llama-2-7b-hf): give --model with the measured shape"},
    {"replay.json", "\"intermediate_dim\":11008", "\"intermediate_dim\":11000",
     "/replay.json: model_config.intermediate_dim 11000 does not match d_ff 11008 of preset "
     "llama-2-7b (named by meta-llama/Llama-2-7b-hf): give --model with the measured shape"},
    {"replay.json", "\"vocab_size\":32000", "\"vocab\":32000",
     "/replay.json: key 'model_config.vocab_size' is missing"},
    {"replay.json", "\"model_id\":\"meta-llama/Llama-2-7b-hf\"", "\"model_id\":\"x/y\"",
     "/replay.json: model_id 'x/y' is not exp-config.yaml's model 'meta-llama/Llama-2-7b-hf'"},
    {"profile.yaml", "{\"duration\":2,\"rate\":4}", "{\"duration\":2,\"rate\":5}",
     "/profile.yaml: key 'load.stages[1].rate' is 5, but config.yaml's is 4 (the folder mixes "
     "two experiments?)"},
    {"profile.yaml", NULL, "load:\n  stages:\n  - rate: 2\n    duration: 4\n",
     "/profile.yaml:2: key 'load.stages' lists 1 stage, but config.yaml's lists 2"},
    {"summary_lifecycle_metrics.json", "12", "13",
     "/summary_lifecycle_metrics.json: load_summary.count 13 is not the 12 requests of "
     "replay.json"},
};

/* The folder with one file changed must be refused with want, leaving no database. */
static void refused(const bad_t *c, size_t k) {
    char dir[256], db[256], err[2048], full[2400];
    import_result_t res;
    make_folder(dir, sizeof dir, &llama);
    if (!c->to) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, c->file);
        ck_assert_int_eq(unlink(path), 0);
    } else if (!c->from) {
        put(dir, c->file, c->to);
    } else {
        edit(dir, c->file, c->from, c->to);
    }
    db_path(db, sizeof db);
    ck_assert_int_eq(import_dir(db, dir, NULL, 0, &res, err, sizeof err), -1);
    snprintf(full, sizeof full, "%s%s", dir, c->want);
    ck_assert_msg(!strcmp(err, full), "case %zu:\n got  %s\n want %s", k, err, full);
    ck_assert_int_eq(res.run_id, -1);
    ck_assert_int_eq(access(db, F_OK), -1);
    rm_folder(dir);
}

START_TEST(test_bad_input) {
    for (size_t k = 0; k < sizeof bad_cases / sizeof *bad_cases; k++) refused(&bad_cases[k], k);
}
END_TEST

/* Not a folder; and bad input leaves an existing database as it was. */
START_TEST(test_not_a_folder) {
    char file[256], db[256], dir[256], err[2048], want[600];
    import_result_t res;
    ck_assert_ptr_nonnull(testutil_write_tmp(file, sizeof file, ".json", "{}"));
    db_path(db, sizeof db);
    ck_assert_int_eq(import_dir(db, file, NULL, 0, &res, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: not a folder (give the experiment folder, which holds "
             "replay.json, ground_truth.json, config.yaml, exp-config.yaml and the "
             "stage_N_lifecycle_metrics.json files)", file);
    ck_assert_str_eq(err, want);
    unlink(file);
    ck_assert_int_eq(import_dir(db, file, NULL, 0, &res, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: No such file or directory", file);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(access(db, F_OK), -1);

    make_folder(dir, sizeof dir, &llama);
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    edit(dir, "ground_truth.json", "{\"index\":4,", "{\"index\":5,");
    ck_assert_int_eq(import_dir(db, dir, NULL, 0, &res, err, sizeof err), -1);
    ck_assert(q(db, "SELECT count(*) FROM runs", NULL, 0) == 1);
    ck_assert(q(db, "SELECT count(*) FROM requests", NULL, 0) == 12);
    testutil_unlink_db(db);
    rm_folder(dir);
}
END_TEST

/* ------------------------------------------------------------------ report --by stage */

static char *by_stage(const char *db, int64_t id, int want_rc, char *err, size_t errlen) {
    sqlite3 *h;
    char *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(summary_open(db, &h, err, errlen), 0);
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(report_by_ready(h, id, "stage", err, errlen), want_rc);
    ck_assert_int_eq(report_by_print(f, h, id, "stage", NULL, err, errlen), want_rc);
    fclose(f);
    sqlite3_close(h);
    return buf;
}

START_TEST(test_report_by_stage) {
    char dir[256], db[256], err[2048], csv[256];
    import_result_t res;
    make_folder(dir, sizeof dir, &llama);
    db_path(db, sizeof db);
    ck_assert_msg(import_dir(db, dir, NULL, 0, &res, err, sizeof err) == 0, "%s", err);
    char *out = by_stage(db, res.run_id, 0, err, sizeof err);
    /* stage 0: requests 0, 2, 3, 4 finished (TTFT 50, 52, 53, 54 ms: mean 52.25, p50
     * 52.50, p90 53.70; E2E 1000, 1020, 1030, 1040 ms; TPOT = (e2e - ttft) / 15, p50
     * (968 + 977) / 2 / 15 = 64.83); inference-perf's TPOT mean 4.08 ms and ITL p75 8.10 ms
     * from the stage file; stage 1 (requests 5-8 and 10) has no ITL block */
    ck_assert_msg(strstr(out, "stage   rate  dur_s requests finished  failed ttft_mean  ttft_p50"
                         "  ttft_p90  ttft_p99   e2e_mean    e2e_p50    e2e_p90    e2e_p99 "
                         "tpot_p50 ip_tpot_mean ip_itl_p75 ip_itl_p90 ip_itl_p99\n"), "%s", out);
    ck_assert_msg(strstr(out, "\n0          2      3        5        4       1     52.25     "
                         "52.50     53.70     53.97    1022.50    1025.00    1037.00    1039.70"
                         "    64.83         4.08       8.10       8.70       9.80\n"), "%s", out);
    ck_assert_msg(strstr(out, "\n1          4      2        7        5       2     57.20     "
                         "57.00     59.20     59.92    1072.00    1070.00    1092.00    1099.20"
                         "    67.53         4.08          -          -          -\n"), "%s", out);
    ck_assert_msg(strstr(out, "(ip_* = inference-perf's own figures"), "%s", out);
    free(out);
    /* a run without stages */
    snprintf(csv, sizeof csv, "tests/data/measured.csv");
    import_opts_t o = {.db_path = db, .path = csv, .format = IMPORT_CSV, .name = "plain",
                       .version = "test"};
    ck_assert_msg(import_run(&o, &res, err, sizeof err) == 0, "%s", err);
    free(by_stage(db, res.run_id, -1, err, sizeof err));
    ck_assert_str_eq(err, "run 'plain' records no load stages: they come with `import "
                     "--inference-perf` and with validate's replays of such a run");
    testutil_unlink_db(db);
    rm_folder(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("import_ip");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_models_and_options);
    tcase_add_test(tc, test_variants);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_not_a_folder);
    tcase_add_test(tc, test_report_by_stage);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

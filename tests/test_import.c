/* test_import: `twinserve import` (analysis/import.c, import_vllm.c) and what reads a measured
 * run: report's metrics (traces/summary.c, report.c) and validate's replay of it
 * (analysis/validate_measured.c).
 *
 * The fixtures are hand-made (tests/data/measured.csv, measured_abs.csv, vllm_result.json),
 * so every expected figure below is worked out from their numbers: a CSV's times round trip
 * with the earliest arrival as time 0; a vLLM result's TTFT, E2E (ttft + sum of itls), TPOT,
 * chunk times and the benchmark's own throughput (completed / duration) come back; bad
 * input is refused with FILE:LINE:COLUMN or the missing key, and records nothing. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "analysis/report.h"
#include "analysis/validate.h"
#include "tests/testutil.h"
#include "analysis/import.h"

#define CSV_FIXTURE "tests/data/measured.csv"
#define CSV_ABS_FIXTURE "tests/data/measured_abs.csv"
#define VLLM_FIXTURE "tests/data/vllm_result.json"

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) < 1e-9, "%s = %.12g, expected %.12g", #a, \
                                 (double)(a), (double)(b))

/* ------------------------------------------------------------------ helpers */

/* One value of sql (testutil.h's helpers; the SQL may hold '%'): a number (NAN when NULL
 * or no row), and its text into out when out is given. */
static double q(const char *db, const char *sql, char *out, size_t len) {
    if (out) testutil_sql_text(db, out, len, "%s", sql);
    return testutil_sql_num(db, "%s", sql);
}

static void db_path(char *buf, size_t len) {
    ck_assert_ptr_nonnull(testutil_tmpfile(buf, len, ".db"));
    unlink(buf);   /* the importer creates it, or, on bad input, does not */
}

static int64_t import_ok(const char *db, const char *path, import_format_t fmt,
                         import_result_t *res) {
    import_opts_t o = {.db_path = db, .path = path, .format = fmt, .version = "test"};
    char err[2048];
    ck_assert_msg(import_run(&o, res, err, sizeof err) == 0, "%s", err);
    return res->run_id;
}

/* Imports text as a file of the format: must fail with a message ending in want (after
 * "PATH"), and leave no database behind. */
static void import_refused(const char *text, import_format_t fmt, const char *want) {
    char path[256], db[256], err[2048], full[2400];
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path,
                                             fmt == IMPORT_CSV ? ".csv" : ".json", text));
    db_path(db, sizeof db);
    import_opts_t o = {.db_path = db, .path = path, .format = fmt};
    import_result_t res;
    ck_assert_int_eq(import_run(&o, &res, err, sizeof err), -1);
    snprintf(full, sizeof full, "%s%s", path, want);
    ck_assert_str_eq(err, full);
    ck_assert_int_eq(res.run_id, -1);
    ck_assert_int_eq(access(db, F_OK), -1);
    unlink(path);
}

/* The vLLM fixture with one JSON edit applied by SQLite (e.g. "json_remove(?1, '$.ttfts')"),
 * written to a fresh file. */
static void vllm_variant(const char *expr, char *path, size_t len) {
    sqlite3 *h;
    sqlite3_stmt *st;
    char sql[512];
    FILE *f = fopen(VLLM_FIXTURE, "r");
    ck_assert_ptr_nonnull(f);
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    ck_assert_int_eq(sqlite3_open(":memory:", &h), SQLITE_OK);
    snprintf(sql, sizeof sql, "SELECT %s", expr);
    ck_assert_msg(sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(h));
    sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_ptr_nonnull(testutil_write_tmp(path, len, ".json",
                                             (const char *)sqlite3_column_text(st, 0)));
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* ------------------------------------------------------------------ CSV */

START_TEST(test_csv_round_trip) {
    char db[256], s[1024], sql[256];
    import_result_t res;
    db_path(db, sizeof db);
    import_opts_t o = {.db_path = db, .path = CSV_FIXTURE, .format = IMPORT_CSV,
                       .model = "llama-3-8b", .hw = "h100", .tp = 2, .note = "a \"test\"",
                       .version = "test"};
    char err[1024];
    ck_assert_msg(import_run(&o, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(res.name, "measured-measured");
    ck_assert_int_eq(res.requests, 5);
    ck_assert_int_eq(res.finished, 4);
    ck_assert_int_eq(res.rejected, 1);
    ck_assert_int_eq(res.tokens, 8);
    ck_assert_int_eq(res.arrivals_known, 1);
    NEAR(res.duration_s, 2.3);

    q(db, "SELECT kind || ' ' || status || ' ' || model || ' ' || hardware FROM runs", s,
      sizeof s);
    ck_assert_str_eq(s, "measured done llama-3-8b h100");
    q(db, "SELECT trace FROM runs", s, sizeof s);
    ck_assert_msg(s[0] == '/' && strstr(s, "/tests/data/measured.csv"), "%s", s);
    q(db, "SELECT json_extract(config, '$.kind') || json_extract(config, '$.source.format') || "
          "json_extract(config, '$.arrivals') || json_extract(config, '$.tp') || "
          "json_extract(config, '$.note') || json_extract(config, '$.hw') FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "measuredcsvrecorded2a \"test\"h100");
    NEAR(q(db, "SELECT json_extract(config, '$.time_origin_s') FROM runs", NULL, 0), 100);
    ck_assert(isnan(q(db, "SELECT json_extract(config, '$.duration_s') FROM runs", NULL, 0)));
    NEAR(q(db, "SELECT wall_s FROM runs", NULL, 0), 2.3);
    NEAR(q(db, "SELECT count(*) FROM steps", NULL, 0), 0);
    NEAR(q(db, "SELECT policy IS NULL AND params IS NULL FROM runs", NULL, 0), 1);

    /* per request: arrival (from the first), ttft, e2e, tpot (NULL for one token) */
    const double want[5][4] = {{0, 0.05, 0.20, 0.05}, {0.5, 0.08, 0.18, 0.05},
                               {1.0, 0.04, 0.04, NAN}, {1.2, NAN, NAN, NAN},
                               {2.0, 0.06, 0.30, 0.06}};
    static const char *const cols[4] = {"arrival_s", "ttft_s", "e2e_s", "tpot_s"};
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 4; c++) {
            snprintf(sql, sizeof sql, "SELECT %s FROM requests WHERE req_id = %d", cols[c], i);
            double v = q(db, sql, NULL, 0);
            if (isnan(want[i][c])) ck_assert_msg(isnan(v), "%s: %g", sql, v);
            else ck_assert_msg(fabs(v - want[i][c]) < 1e-9, "%s: %.12g", sql, v);
        }
    q(db, "SELECT status || ': ' || reason FROM requests WHERE req_id = 3", s, sizeof s);
    ck_assert_str_eq(s, "rejected: HTTP 503: server overloaded, retry later");
    NEAR(q(db, "SELECT count(*) FROM requests WHERE first_scheduled_s IS NULL AND queue_s IS "
               "NULL AND preemptions = 0", NULL, 0), 5);
    NEAR(q(db, "SELECT generated_tokens FROM requests WHERE req_id = 4", NULL, 0), 5);
    /* tokens on the run's clock: request 1 arrived at 0.5 */
    q(db, "SELECT group_concat(round(t_s, 6), ' ') FROM (SELECT t_s FROM tokens WHERE "
          "req_id = 1 ORDER BY idx)", s, sizeof s);
    ck_assert_str_eq(s, "0.58 0.63 0.68");
    NEAR(q(db, "SELECT count(*) FROM tokens WHERE token_id = -1", NULL, 0), 8);

    /* the same file again: the next default name */
    import_ok(db, CSV_FIXTURE, IMPORT_CSV, &res);
    ck_assert_str_eq(res.name, "measured-measured-2");
    testutil_unlink_db(db);
}
END_TEST

/* first_token_s / finish_s / absolute token times give the records of ttft_s / e2e_s. */
START_TEST(test_csv_absolute_clock) {
    char db[256], a[512], b[512];
    import_result_t res;
    db_path(db, sizeof db);
    int64_t rel = import_ok(db, CSV_FIXTURE, IMPORT_CSV, &res);
    int64_t abs = import_ok(db, CSV_ABS_FIXTURE, IMPORT_CSV, &res);
    ck_assert_int_eq(res.tokens, 8);
    const char *fmt = "SELECT group_concat(printf('%%d %%.6f %%.6f %%.6f %%.6f', req_id, "
                      "arrival_s, first_token_s, finish_s, coalesce(tpot_s, -1)), ';') FROM "
                      "requests WHERE run_id = %lld AND req_id < 3";
    char sql[512];
    snprintf(sql, sizeof sql, fmt, (long long)rel);
    q(db, sql, a, sizeof a);
    snprintf(sql, sizeof sql, fmt, (long long)abs);
    q(db, sql, b, sizeof b);
    ck_assert_str_eq(a, b);
    const char *tfmt = "SELECT group_concat(printf('%%.6f', t_s), ' ') FROM tokens WHERE "
                       "run_id = %lld";
    snprintf(sql, sizeof sql, tfmt, (long long)rel);
    q(db, sql, a, sizeof a);
    snprintf(sql, sizeof sql, tfmt, (long long)abs);
    q(db, sql, b, sizeof b);
    ck_assert_str_eq(a, b);
    testutil_unlink_db(db);
}
END_TEST

#define HDR "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n"
#define HDR_T "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,token_times\n"

START_TEST(test_csv_bad_cells) {
    static const struct { const char *text, *want; } cases[] = {
        {"", ": empty: no header line (arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,...)"},
        {"# only a comment\n" HDR, ": no requests after the header"},
        {"arrival_s,prompt_tokens,ttft_s,e2e_s\n0,1,0.1,0.2\n",
         ":1: the header lacks column 'output_tokens' (needed: arrival_s, prompt_tokens, "
         "output_tokens, ttft_s or first_token_s, e2e_s or finish_s)"},
        {"arrival_s,prompt_tokens,output_tokens,e2e_s\n",
         ":1: the header lacks column 'ttft_s' or 'first_token_s'"},
        {"arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,first_token_s\n",
         ":1:6: column 'first_token_s': give 'ttft_s' or 'first_token_s', not both"},
        {"arrival_s,prompt_tokens,output_tokens,ttft_s,finish_s\n",
         ":1:5: column 'finish_s': mixes clocks: use ttft_s with e2e_s (from each arrival) or "
         "first_token_s with finish_s (on the arrival_s clock)"},
        {"arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,Arrival_S\n",
         ":1:6: column 'arrival_s' appears twice in the header"},
        {HDR "0,10,2,0.1,0.2\n0,10,2,0.1x,0.2\n", ":3:4: column 'ttft_s': '0.1x' is not a number"},
        {HDR "-1,10,2,0.1,0.2\n", ":2:1: column 'arrival_s': -1 is negative"},
        {HDR "0,,2,0.1,0.2\n", ":2:2: column 'prompt_tokens': empty cell"},
        {HDR "0,3.5,2,0.1,0.2\n", ":2:2: column 'prompt_tokens': '3.5' is not a whole number"},
        {HDR "0,10,2,inf,0.2\n", ":2:4: column 'ttft_s': 'inf' is not a finite number"},
        {HDR "0,10,0,0.1,0.2\n", ":2:3: column 'output_tokens': a request without an error has "
         "at least one output token (0; mark a failure in an 'error' column)"},
        {HDR "0,10,2,0.3,0.2\n",
         ":2:5: column 'e2e_s': the last token at 0.2 is before the first token at 0.3"},
        {"arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s\n5,10,2,4.5,6\n",
         ":2:4: column 'first_token_s': the first token at 4.5 is before the arrival at 5"},
        {"arrival_s,prompt_tokens,output_tokens,first_token_s,finish_s\n5,10,2,5.5,5.4\n",
         ":2:5: column 'finish_s': the last token at 5.4 is before the first token at 5.5"},
        {HDR "0,10,2,0.1\n", ":2:5: column 'e2e_s': missing: the header has 5 columns, this row 4"},
        {HDR "0,10,2,0.1,0.2,7\n", ":2:6: extra field: the header has 5 columns"},
        {HDR_T "0,10,3,0.1,0.3,0.1;abc;0.3\n",
         ":2:6: column 'token_times': item 2: 'abc' is not a number"},
        {HDR_T "0,10,3,0.1,0.3,0.1;0.25;0.2\n",
         ":2:6: column 'token_times': item 3: 0.2 is before item 2 at 0.25"},
        {HDR_T "0,10,3,0.1,0.3,0.05;0.2;0.3\n",
         ":2:6: column 'token_times': item 1: 0.05 is before the first token at 0.1"},
        {HDR_T "0,10,3,0.1,0.3,0.1;0.2;0.35\n",
         ":2:6: column 'token_times': item 3: 0.35 is after the last token at 0.3"},
        {HDR_T "0,10,2,0.1,0.3,0.1;0.2;0.3\n",
         ":2:6: column 'token_times': 3 token times for 2 output tokens"},
        {HDR_T "0,10,2,0.1,0.3,0.1;\n", ":2:6: column 'token_times': item 2: empty cell"},
        {"id," HDR "7,0,10,2,0.1,0.2\n3,1,10,2,0.1,0.2\n7,2,10,2,0.1,0.2\n",
         ":4:1: column 'id': id 7 repeats line 2"},
        {HDR_T "0,10,2,0.1,0.2,\"0.1;0.2\n",
         ":2:6: column 'token_times': unterminated quoted field"},
        {"arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,error\n0,10,2,0.1,0.2,\"a\" b\n",
         ":2:6: column 'error': text after a closing quote"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        import_refused(cases[i].text, IMPORT_CSV, cases[i].want);
}
END_TEST

/* A failed request's empty time cells are not read; a BOM and CRLF lines are accepted. */
START_TEST(test_csv_failures_and_dialects) {
    char path[256], db[256], s[256];
    import_result_t res;
    ck_assert_ptr_nonnull(testutil_write_tmp(path, sizeof path, ".csv",
        "\xEF\xBB\xBF" "ARRIVAL_S, prompt_tokens ,output_tokens,ttft_s,e2e_s,error,extra\r\n"
        "\r\n"
        "3.0,10,2,0.1,0.2,,x\r\n"
        "3.5,10,0,,,timeout,y\r\n"));
    db_path(db, sizeof db);
    import_ok(db, path, IMPORT_CSV, &res);
    ck_assert_int_eq(res.finished, 1);
    ck_assert_int_eq(res.rejected, 1);
    q(db, "SELECT group_concat(req_id || ' ' || arrival_s || ' ' || status || ' ' || "
          "coalesce(reason, '-'), '; ') FROM requests", s, sizeof s);
    ck_assert_str_eq(s, "0 0.0 finished -; 1 0.5 rejected timeout");
    testutil_unlink_db(db);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ vLLM */

START_TEST(test_vllm_round_trip) {
    char db[256], s[1024], err[512];
    import_result_t res;
    db_path(db, sizeof db);
    int64_t id = import_ok(db, VLLM_FIXTURE, IMPORT_VLLM, &res);
    ck_assert_int_eq(res.requests, 5);
    ck_assert_int_eq(res.finished, 4);
    ck_assert_int_eq(res.rejected, 1);
    ck_assert_int_eq(res.tokens, 14);   /* 4 + 3 + 1 + 6 chunks */
    ck_assert_int_eq(res.arrivals_known, 0);
    q(db, "SELECT json_extract(config, '$.source.format') || ' ' || "
          "json_extract(config, '$.arrivals') || ' ' || json_extract(config, '$.duration_s') || "
          "' ' || json_extract(config, '$.vllm.model_id') || ' ' || "
          "json_type(config, '$.vllm.max_concurrency') || ' ' || "
          "json_extract(config, '$.vllm.request_rate') FROM runs", s, sizeof s);
    ck_assert_str_eq(s, "vllm unknown 2.5 synthetic/model-1b null 4.0");
    NEAR(q(db, "SELECT json_type(config, '$.vllm.ttfts') IS NULL FROM runs", NULL, 0), 1);
    /* E2E = ttft + sum(itls); every arrival at 0 */
    const double ttft[4] = {0.05, 0.1, 0.02, 0.2}, e2e[4] = {0.15, 0.2, 0.02, 0.3};
    for (int i = 0; i < 4; i++) {
        char sql[200];
        snprintf(sql, sizeof sql, "SELECT ttft_s FROM requests WHERE req_id = %d", i);
        NEAR(q(db, sql, NULL, 0), ttft[i]);
        snprintf(sql, sizeof sql, "SELECT e2e_s FROM requests WHERE req_id = %d", i);
        NEAR(q(db, sql, NULL, 0), e2e[i]);
    }
    NEAR(q(db, "SELECT max(arrival_s) FROM requests", NULL, 0), 0);
    q(db, "SELECT status || ' ' || output_tokens || ': ' || reason FROM requests WHERE req_id = 4",
      s, sizeof s);
    ck_assert_str_eq(s, "rejected 0: Bad Request: prompt too long");
    q(db, "SELECT group_concat(printf('%.2f', t_s), ' ') FROM (SELECT t_s FROM tokens WHERE "
          "req_id = 3 ORDER BY idx)", s, sizeof s);
    ck_assert_str_eq(s, "0.20 0.22 0.24 0.26 0.28 0.30");

    /* report's figures are the benchmark's own: throughput over its duration */
    sqlite3 *h;
    report_t r;
    ck_assert_int_eq(summary_open(db, &h, err, sizeof err), 0);
    ck_assert_msg(report_load(h, id, NULL, &r, err, sizeof err) == 0, "%s", err);
    sqlite3_close(h);
    ck_assert_int_eq(r.base.makespan_is_duration, 1);
    NEAR(r.base.makespan_s, 2.5);
    NEAR(r.base.req_per_s, 1.6);          /* "request_throughput" */
    NEAR(r.base.out_tok_per_s, 5.6);      /* "output_throughput" */
    NEAR(r.base.tok_per_s, 45.6);         /* "total_token_throughput" */
    NEAR(r.base.ttft.mean, 0.0925);       /* "mean_ttft_ms" / 1000 */
    NEAR(r.base.tpot.p50, 1.0 / 30);      /* (0.15 - 0.05) / 3 */
    ck_assert_int_eq(r.itl.n, 10);
    NEAR(r.itl.mean, 0.03);
    ck_assert_int_eq(r.base.steps, 0);
    ck_assert_int_eq(r.kv_util.n, 0);
    ck_assert_int_eq(r.base.queue.n, 0);
    NEAR(q(db, "SELECT makespan_s FROM run_summary", NULL, 0), 2.5);
    testutil_unlink_db(db);
}
END_TEST

/* Newer results list start_times (then the arrivals are known) and latencies (the E2E);
 * request_rate "inf" is how an unpaced benchmark writes its rate. */
START_TEST(test_vllm_start_times) {
    char path[256], db[256];
    import_result_t res;
    vllm_variant("json_set(?1, '$.start_times', json('[10.0, 10.25, 10.5, 10.75, 11.0]'), "
                 "'$.latencies', json('[0.16, 0.2, 0.02, 0.3, 0.0]'), '$.request_rate', 'inf')",
                 path, sizeof path);
    db_path(db, sizeof db);
    import_ok(db, path, IMPORT_VLLM, &res);
    ck_assert_int_eq(res.arrivals_known, 1);
    NEAR(q(db, "SELECT arrival_s FROM requests WHERE req_id = 3", NULL, 0), 0.75);
    NEAR(q(db, "SELECT e2e_s FROM requests WHERE req_id = 0", NULL, 0), 0.16);
    NEAR(q(db, "SELECT finish_s FROM requests WHERE req_id = 1", NULL, 0), 0.45);
    NEAR(q(db, "SELECT json_extract(config, '$.time_origin_s') FROM runs", NULL, 0), 10);
    testutil_unlink_db(db);
    unlink(path);
}
END_TEST

START_TEST(test_vllm_missing_keys) {
    static const char *const keys[] = {"duration", "completed", "request_rate", "input_lens",
                                       "output_lens", "ttfts", "itls", "errors"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char expr[128], path[256], db[256], err[1024], want[512];
        snprintf(expr, sizeof expr, "json_remove(?1, '$.%s')", keys[i]);
        vllm_variant(expr, path, sizeof path);
        db_path(db, sizeof db);
        import_opts_t o = {.db_path = db, .path = path, .format = IMPORT_VLLM};
        import_result_t res;
        ck_assert_int_eq(import_run(&o, &res, err, sizeof err), -1);
        snprintf(want, sizeof want, "%s: not a vLLM serving benchmark result saved with "
                 "--save-result --save-detailed: key '%s' is missing", path, keys[i]);
        ck_assert_str_eq(err, want);
        ck_assert_int_eq(access(db, F_OK), -1);
        unlink(path);
    }
}
END_TEST

START_TEST(test_vllm_bad_values) {
    static const struct { const char *expr, *want; } cases[] = {
        {"'{\"duration\": 1,'", ": not valid JSON"},
        {"replace(json_set(?1, '$.duration', 12345.678), '12345.678', 'NaN')",
         ": key 'duration': expected the benchmark's duration, a positive number of seconds"},
        {"replace(json_set(?1, '$.input_lens[1]', 12345), '12345', 'Infinity')",
         ": key 'input_lens' [1]: expected a whole number of tokens, got NaN or null"},
        {"'[1, 2]'", ": not a vLLM benchmark result: the document is a JSON array, not an object"},
        {"json_set(?1, '$.duration', 0)",
         ": key 'duration': expected the benchmark's duration, a positive number of seconds"},
        {"json_set(?1, '$.request_rate', 'fast')",
         ": key 'request_rate': expected requests per second or \"inf\""},
        {"json_set(?1, '$.burstiness', -1)",
         ": key 'burstiness': expected a positive number (1 for Poisson arrivals)"},
        {"json_set(?1, '$.ttfts', json('[0.05, 0.1]'))",
         ": key 'ttfts' has 2 entries, but 'input_lens' has 5"},
        {"json_set(?1, '$.input_lens', json('[]'))",
         ": key 'input_lens' is empty: the result has no requests"},
        {"json_set(?1, '$.itls', 3)",
         ": key 'itls': expected a list with one entry per request, got integer"},
        {"json_set(?1, '$.output_lens[1]', 2.5)",
         ": key 'output_lens' [1]: expected a whole number of tokens, got real"},
        {"json_set(?1, '$.ttfts[2]', -0.5)", ": key 'ttfts' [2]: -0.5 is negative"},
        {"json_set(?1, '$.ttfts[0]', json('null'))",
         ": key 'ttfts' [0]: null for a request without an error"},
        {"json_set(?1, '$.itls[3]', 0.1)",
         ": key 'itls' [3]: expected a list of seconds, got real"},
        {"json_set(?1, '$.itls[0][1]', 'x')", ": key 'itls' [0][1]: expected seconds, got text"},
        {"json_set(?1, '$.itls[1][0]', -0.01)", ": key 'itls' [1][0]: -0.01 is negative"},
        {"json_set(?1, '$.errors[2]', 5)",
         ": key 'errors' [2]: expected a message (\"\" when it succeeded), got integer"},
        {"json_set(?1, '$.latencies', json('[0.16, 0.01, 0.02, 0.3, 0.0]'))",
         ": key 'latencies' [1]: 0.01 is less than its ttft 0.1"},
        {"json_set(?1, '$.start_times', json('[1, 2, null, 4, 5]'))",
         ": key 'start_times' [2]: null, but every request was sent"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256], text[8192];
        vllm_variant(cases[i].expr, path, sizeof path);
        FILE *f = fopen(path, "r");
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        unlink(path);
        import_refused(text, IMPORT_VLLM, cases[i].want);
    }
}
END_TEST

/* A request that reported no error but counted no tokens is a failure too. */
START_TEST(test_vllm_empty_output) {
    char path[256], db[256], s[256];
    import_result_t res;
    vllm_variant("json_set(?1, '$.output_lens[2]', 0)", path, sizeof path);
    db_path(db, sizeof db);
    import_ok(db, path, IMPORT_VLLM, &res);
    ck_assert_int_eq(res.rejected, 2);
    q(db, "SELECT reason FROM requests WHERE req_id = 2", s, sizeof s);
    ck_assert_str_eq(s, "empty output: no tokens counted");
    testutil_unlink_db(db);
    unlink(path);
}
END_TEST

/* Python's NaN and Infinity in statistics the import does not read (vLLM writes them for a
 * std of one request) are no reason to refuse the file; in a string they stay text. */
START_TEST(test_vllm_nan_in_unused_fields) {
    char path[256], db[256];
    import_result_t res;
    vllm_variant("replace(replace(json_set(?1, '$.std_ttft_ms', 12345.678, '$.max_itl_ms', "
                 "-987.5, '$.note', 'NaN stays text'), '12345.678', 'NaN'), '-987.5', "
                 "'-Infinity')", path, sizeof path);
    db_path(db, sizeof db);
    import_ok(db, path, IMPORT_VLLM, &res);
    ck_assert_int_eq(res.requests, 5);
    testutil_unlink_db(db);
    unlink(path);
}
END_TEST

/* ------------------------------------------------------------------ validate */

static int validate_measured_run(const char *db, const char *run, const sim_opts_t *so,
                                 int repeat, validate_result_t *r, char *err, size_t errlen) {
    validate_opts_t o = {.db_path = db, .run = run, .hw = "h100", .sim = so, .repeat = repeat,
                         .version = "test"};
    return validate_run(&o, r, err, errlen);
}

static int has_metric(const validate_result_t *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->m[i].name, name)) return 1;
    return 0;
}

START_TEST(test_validate_csv_replays_exactly) {
    char db[256], err[4096], a[512], b[512], sql[512];
    import_result_t res;
    validate_result_t r;
    db_path(db, sizeof db);
    import_opts_t io = {.db_path = db, .path = CSV_FIXTURE, .format = IMPORT_CSV,
                        .model = "llama-3-8b", .version = "test"};
    ck_assert_msg(import_run(&io, &res, err, sizeof err) == 0, "%s", err);
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.policy_path = "policies/continuous.lua";
    so.tp = 0;
    ck_assert_msg(validate_measured_run(db, NULL, &so, 0, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.measured, 1);
    ck_assert_int_eq(r.engine_id, res.run_id);
    ck_assert_str_eq(r.engine_name, "measured-measured");
    ck_assert_str_eq(r.sim_name, "validate-measured-measured");
    ck_assert_msg(strstr(r.note, "the measured requests exactly") &&
                  strstr(r.note, "1 failed request left out"), "%s", r.note);
    ck_assert(has_metric(&r, "TTFT p99") && has_metric(&r, "ITL p50") &&
              has_metric(&r, "makespan"));
    ck_assert(!has_metric(&r, "queue p50") && !has_metric(&r, "steps") &&
              !has_metric(&r, "preemptions"));
    ck_assert_int_eq(r.pass.n, 0);
    /* the replay's requests are the finished measured ones, at their arrivals */
    const char *fmt = "SELECT group_concat(printf('%%.6f %%d %%d', arrival_s, prompt_tokens, "
                      "output_tokens), '; ') FROM (SELECT * FROM requests WHERE run_id = %lld "
                      "%s ORDER BY arrival_s)";
    snprintf(sql, sizeof sql, fmt, (long long)res.run_id, "AND status = 'finished'");
    q(db, sql, a, sizeof a);
    snprintf(sql, sizeof sql, fmt, (long long)r.sim_id, "");
    q(db, sql, b, sizeof b);
    ck_assert_str_eq(a, b);
    snprintf(sql, sizeof sql, "SELECT json_extract(config, '$.validate.arrivals') || "
             "json_extract(config, '$.tp') || (SELECT count(*) > 0 FROM tokens WHERE run_id = "
             "%lld) FROM runs WHERE id = %lld", (long long)r.sim_id, (long long)r.sim_id);
    q(db, sql, a, sizeof a);
    ck_assert_str_eq(a, "recorded11");

    /* refused: a repeat, no policy, no model to simulate */
    ck_assert_int_eq(validate_measured_run(db, "measured-measured", &so, 1, &r, err,
                                           sizeof err), -1);
    ck_assert_msg(strstr(err, "is a measured run (imported from ") &&
                  strstr(err, "a measurement taken elsewhere cannot be rerun"), "%s", err);
    ck_assert_int_eq(validate_measured_run(db, "measured-measured", NULL, 0, &r, err,
                                           sizeof err), -1);
    ck_assert_msg(strstr(err, "give the policy to replay its requests with, --policy FILE"),
                  "%s", err);
    io.model = "some/hf-model";
    io.name = "hf";
    ck_assert_msg(import_run(&io, &res, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(validate_measured_run(db, "hf", &so, 0, &r, err, sizeof err), -1);
    ck_assert_str_eq(err, "run 'hf' names the model 'some/hf-model', not a preset: give the "
                     "model to simulate, --model PRESET|FILE, or a cost file (--cost FILE), "
                     "which carries one");
    testutil_unlink_db(db);
}
END_TEST

START_TEST(test_validate_vllm_regenerates_arrivals) {
    char db[256], err[4096], s[256], sql[256];
    import_result_t res;
    validate_result_t r, r2;
    db_path(db, sizeof db);
    import_opts_t io = {.db_path = db, .path = VLLM_FIXTURE, .format = IMPORT_VLLM,
                        .model = "llama-3-8b", .version = "test"};
    ck_assert_msg(import_run(&io, &res, err, sizeof err) == 0, "%s", err);
    sim_opts_t so;
    sim_opts_defaults(&so);
    so.policy_path = "policies/continuous.lua";
    so.seed = 7;
    ck_assert_msg(validate_measured_run(db, NULL, &so, 0, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(strstr(r.note, "compares distributions (arrivals regenerated): 5 requests at "
                         "4 req/s, burstiness 1, seed 7"), "%s", r.note);
    /* 4 finished requests replayed, the first at 0, with the measured lengths in order */
    snprintf(sql, sizeof sql, "SELECT group_concat(prompt_tokens || '/' || output_tokens, ' ') "
             "FROM requests WHERE run_id = %lld", (long long)r.sim_id);
    q(db, sql, s, sizeof s);
    ck_assert_str_eq(s, "10/4 20/3 30/1 40/6");
    snprintf(sql, sizeof sql, "SELECT min(arrival_s) = 0 AND max(arrival_s) > 0 FROM requests "
             "WHERE run_id = %lld", (long long)r.sim_id);
    NEAR(q(db, sql, NULL, 0), 1);
    /* the same seed draws the same arrivals */
    ck_assert_msg(validate_measured_run(db, NULL, &so, 0, &r2, err, sizeof err) == 0, "%s", err);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM requests a JOIN requests b ON a.req_id = "
             "b.req_id WHERE a.run_id = %lld AND b.run_id = %lld AND a.arrival_s = b.arrival_s",
             (long long)r.sim_id, (long long)r2.sim_id);
    NEAR(q(db, sql, NULL, 0), 4);
    testutil_unlink_db(db);
}
END_TEST

int main(void) {
    Suite *s = suite_create("import");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_csv_round_trip);
    tcase_add_test(tc, test_csv_absolute_clock);
    tcase_add_test(tc, test_csv_bad_cells);
    tcase_add_test(tc, test_csv_failures_and_dialects);
    tcase_add_test(tc, test_vllm_round_trip);
    tcase_add_test(tc, test_vllm_start_times);
    tcase_add_test(tc, test_vllm_missing_keys);
    tcase_add_test(tc, test_vllm_bad_values);
    tcase_add_test(tc, test_vllm_empty_output);
    tcase_add_test(tc, test_vllm_nan_in_unused_fields);
    tcase_add_test(tc, test_validate_csv_replays_exactly);
    tcase_add_test(tc, test_validate_vllm_regenerates_arrivals);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

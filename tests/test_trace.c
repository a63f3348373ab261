/* test_trace: the trace readers on the real public traces (counts, specific rows, replay
 * options), on hand-written rows for every format and error message, and a seeded fuzz run
 * of byte mutations that must end in requests or a "FILE:LINE:" error, never a crash. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/rng.h"
#include "traces/trace.h"
#include "traces/trace_reuse.h"
#include "tests/testutil.h"

#define MAXR 64

typedef struct {
    int rc;                  /* last trace_next result */
    int n;                   /* requests returned */
    trace_req_t r[MAXR];     /* the first MAXR of them (hash_ids not kept) */
    int64_t hash[MAXR][4];   /* their first hash ids */
    int64_t skipped, hash_total;
    trace_format_t fmt;
    char err[1200];
} result_t;

/* Reads an open trace to its end, checking the invariants every reader must keep. */
static void drain(trace_t *t, result_t *res)
{
    trace_req_t q;
    double prev = 0;

    memset(res, 0, sizeof *res);
    ck_assert_ptr_nonnull(t);
    res->fmt = trace_format(t);
    while ((res->rc = trace_next(t, &q)) == 1) {
        ck_assert_int_eq(q.id, res->n);
        ck_assert(q.arrival_s >= prev);
        ck_assert(q.prompt_tokens >= 0 && q.output_tokens >= 1 && q.n_hash >= 0);
        ck_assert(q.n_hash == 0 || q.hash_ids != NULL);
        prev = q.arrival_s;
        if (res->n < MAXR) {
            res->r[res->n] = q;
            for (int i = 0; i < q.n_hash && i < 4; i++) res->hash[res->n][i] = q.hash_ids[i];
        }
        res->hash_total += q.n_hash;
        res->n++;
    }
    /* The end is sticky: an error or the end of the trace is reported again. */
    ck_assert_int_eq(trace_next(t, &q), res->rc);
    res->skipped = trace_skipped(t);
    if (trace_errmsg(t)) snprintf(res->err, sizeof res->err, "%s", trace_errmsg(t));
    ck_assert((res->rc < 0) == (trace_errmsg(t) != NULL));
}

/* Reads TEXT as if it were the file "t.csv". */
static void run_text(const char *text, const trace_opts_t *o, result_t *res)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    ck_assert_ptr_nonnull(f);
    trace_t *t = trace_open_file(f, "t.csv", o);
    drain(t, res);
    trace_close(t);
    fclose(f);
}

static void run_path(const char *path, const trace_opts_t *o, result_t *res)
{
    trace_t *t = trace_open(path, o);
    drain(t, res);
    trace_close(t);
}

#define ck_err(res, want)                                                                  \
    ck_assert_msg((res).rc == -1 && strcmp((res).err, (want)) == 0, "error '%s', want '%s'", \
                  (res).err, (want))

/* --- real traces ------------------------------------------------------------------------ */

START_TEST(test_azure_real) {
    char p[512];
    result_t a;
    if (!testutil_data_path("traces/AzureLLMInferenceTrace_conv.csv", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_int_eq(a.fmt, TRACE_FMT_AZURE);
    ck_assert_int_eq(a.n, 19366);
    ck_assert_int_eq(a.skipped, 0);
    ck_assert(a.r[0].arrival_s == 0 && a.r[0].prompt_tokens == 374 && a.r[0].output_tokens == 44);
    ck_assert_int_eq(a.r[0].line, 2);
    /* 18:15:50.9951690 - 18:15:46.6805900, exact to well below a microsecond */
    ck_assert_double_eq_tol(a.r[1].arrival_s, 4.314579, 1e-9);
    ck_assert(a.r[1].prompt_tokens == 396 && a.r[1].output_tokens == 109);

    trace_t *t = trace_open(p, NULL);
    trace_req_t q, last = {0};
    while (trace_next(t, &q) == 1) last = q;
    trace_close(t);
    /* 19:14:08.4025270 - 18:15:46.6805900 */
    ck_assert_double_eq_tol(last.arrival_s, 3501.721937, 1e-9);
    ck_assert(last.prompt_tokens == 197 && last.output_tokens == 183);
    ck_assert_int_eq(last.line, 19367);

    trace_opts_t o = {.rate_scale = 2};
    t = trace_open(p, &o);
    while (trace_next(t, &q) == 1) last = q;
    trace_close(t);
    ck_assert_double_eq_tol(last.arrival_s, 3501.721937 / 2, 1e-9);

    if (!testutil_data_path("traces/AzureLLMInferenceTrace_code.csv", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert(a.rc == 0 && a.fmt == TRACE_FMT_AZURE && a.n == 8819);
    ck_assert(a.r[0].prompt_tokens == 4808 && a.r[0].output_tokens == 10);
    ck_assert_double_eq_tol(a.r[1].arrival_s, 0.052, 1e-9);
}
END_TEST

START_TEST(test_mooncake_real) {
    char p[512];
    result_t a;
    if (!testutil_data_path("traces/mooncake_conversation_trace.jsonl", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert(a.rc == 0 && a.fmt == TRACE_FMT_MOONCAKE);
    ck_assert_int_eq(a.n, 12031);
    ck_assert_int_eq(a.hash_total, 288500);
    ck_assert(a.r[0].prompt_tokens == 6758 && a.r[0].output_tokens == 500 && a.r[0].n_hash == 14);
    ck_assert(a.hash[1][0] == 0 && a.hash[1][1] == 14 && a.hash[1][3] == 16);
    ck_assert_int_eq(a.r[0].line, 1);

    if (!testutil_data_path("traces/mooncake_synthetic_trace.jsonl", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert(a.rc == 0 && a.n == 3993 && a.hash_total == 121877);
    ck_assert(a.r[0].prompt_tokens == 40160 && a.r[0].output_tokens == 6 && a.r[0].n_hash == 79);
    ck_assert_double_eq_tol(a.r[2].arrival_s, 0.040, 1e-12);
    ck_assert(a.hash[1][0] == 79);

    trace_t *t = trace_open(p, NULL);
    trace_req_t q, last = {0};
    while (trace_next(t, &q) == 1) last = q;
    trace_close(t);
    ck_assert_double_eq_tol(last.arrival_s, 1022.025, 1e-9);
}
END_TEST

START_TEST(test_burstgpt_real) {
    char p[512];
    result_t a;
    if (!testutil_data_path("traces/BurstGPT_1_first400.csv", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert(a.rc == 0 && a.fmt == TRACE_FMT_BURSTGPT);
    ck_assert_int_eq(a.n, 383);
    ck_assert_int_eq(a.skipped, 17);
    ck_assert(a.r[0].arrival_s == 0 && a.r[0].prompt_tokens == 472 && a.r[0].output_tokens == 18);
    ck_assert(a.r[1].arrival_s == 40 && a.r[1].prompt_tokens == 1087);
    /* line 22 is the first failure (1106,ChatGPT,0,0,0): the ids run on without a gap */
    ck_assert_int_eq(a.r[20].line, 23);

    if (!testutil_data_path("traces/BurstGPT_3_first400.csv", p, sizeof p)) return;
    run_path(p, NULL, &a);
    ck_assert(a.rc == 0 && a.n == 399 && a.skipped == 1);
    ck_assert(a.r[0].prompt_tokens == 906 && a.r[0].output_tokens == 446);
    ck_assert(a.r[1].arrival_s == 51 && a.r[1].prompt_tokens == 36);
}
END_TEST

START_TEST(test_replay_window_real) {
    char p[512];
    if (!testutil_data_path("traces/AzureLLMInferenceTrace_conv.csv", p, sizeof p)) return;
    /* Reference: the rows whose offset from the first row is in [600, 660). */
    int want = 0;
    double first_rel = -1;
    trace_t *t = trace_open(p, NULL);
    trace_req_t q;
    while (trace_next(t, &q) == 1)
        if (q.arrival_s >= 600 && q.arrival_s < 660) {
            if (first_rel < 0) first_rel = q.arrival_s;
            want++;
        }
    trace_close(t);
    ck_assert(want > 100);

    trace_opts_t o = {.start_s = 600, .duration_s = 60, .rate_scale = 4};
    result_t a;
    run_path(p, &o, &a);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_int_eq(a.n, want);
    ck_assert_double_eq_tol(a.r[0].arrival_s, (first_rel - 600) / 4, 1e-9);

    trace_opts_t l = {.limit = 100};
    run_path(p, &l, &a);
    ck_assert(a.rc == 0 && a.n == 100);
}
END_TEST

/* --- hand-written rows ------------------------------------------------------------------ */

START_TEST(test_plain_basic) {
    result_t a;
    /* CRLF, a BOM, blank lines and no final newline */
    run_text("\xEF\xBB\xBF" "arrival_s,prompt_tokens,output_tokens\r\n"
             "10.5,100,20\r\n\r\n  \n10.5,0,1\n12.25,7,3", NULL, &a);
    ck_assert_int_eq(a.rc, 0);
    ck_assert_int_eq(a.fmt, TRACE_FMT_PLAIN);
    ck_assert_int_eq(a.n, 3);
    ck_assert(a.r[0].arrival_s == 0 && a.r[0].prompt_tokens == 100 && a.r[0].output_tokens == 20);
    ck_assert(a.r[1].arrival_s == 0 && a.r[1].prompt_tokens == 0 && a.r[1].line == 5);
    ck_assert(a.r[2].arrival_s == 1.75 && a.r[2].line == 6);

    run_text("arrival_s,prompt_tokens,output_tokens\n", NULL, &a);
    ck_assert(a.rc == 0 && a.n == 0 && a.err[0] == '\0');
    /* columns found by name, in any order, spaces around fields and quotes accepted */
    run_text("output_tokens, \"prompt_tokens\" ,arrival_s,note\n5, 6 ,1e1,\"a, \"\"b\"\"\"\n", NULL,
             &a);
    ck_assert(a.rc == 0 && a.n == 1 && a.r[0].output_tokens == 5 && a.r[0].prompt_tokens == 6);
}
END_TEST

START_TEST(test_replay_options) {
    const char *text = "arrival_s,prompt_tokens,output_tokens\n"
                       "100,1,1\n101,2,1\n102,3,1\n104,4,1\n108,5,1\n";
    result_t a;
    trace_opts_t o = {.start_s = 1, .duration_s = 3};
    run_text(text, &o, &a);
    /* kept: 1 <= t - 100 < 4 */
    ck_assert(a.rc == 0 && a.n == 2);
    ck_assert(a.r[0].id == 0 && a.r[0].prompt_tokens == 2 && a.r[0].arrival_s == 0);
    ck_assert(a.r[1].prompt_tokens == 3 && a.r[1].arrival_s == 1);

    trace_opts_t s = {.start_s = 2, .rate_scale = 2, .limit = 2};
    run_text(text, &s, &a);
    ck_assert(a.rc == 0 && a.n == 2 && a.r[0].prompt_tokens == 3 && a.r[1].arrival_s == 1);

    trace_opts_t bad = {.rate_scale = -1};
    run_text(text, &bad, &a);
    ck_assert(a.rc == -1 && strstr(a.err, "t.csv: rate scale -1") == a.err);
    trace_opts_t bad2 = {.start_s = -3};
    run_text(text, &bad2, &a);
    ck_assert(a.rc == -1 && strstr(a.err, "start"));
}
END_TEST

START_TEST(test_azure_timestamps) {
    result_t a;
    run_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
             "2023-12-31 23:59:59.9999999,1,1\n"
             "2024-01-01 00:00:00.0000001,2,2\n"
             "2024-02-28 23:59:59.9999999,3,3\n"
             "2024-03-01T00:00:00,4,4\n"
             "2024-03-01 00:00:00.5,5,5\n", NULL, &a);
    ck_assert_msg(a.rc == 0, "%s", a.err);
    ck_assert_int_eq(a.n, 5);
    ck_assert_double_eq_tol(a.r[1].arrival_s, 2e-7, 1e-12);
    /* 2024 is a leap year: Feb 29 lies between */
    ck_assert_double_eq_tol(a.r[2].arrival_s, 59 * 86400.0, 1e-6);
    ck_assert_double_eq_tol(a.r[3].arrival_s - a.r[2].arrival_s, 86400.0 + 1e-7, 1e-6);
    ck_assert_double_eq_tol(a.r[4].arrival_s - a.r[3].arrival_s, 0.5, 1e-9);

    run_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 00:00:00,1,1\n", NULL, &a);
    ck_err(a, "t.csv:2: column 'TIMESTAMP': '2023-02-29 00:00:00' is not a valid date and time");
    run_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,1,1\n", NULL, &a);
    ck_assert(a.rc == -1 && strstr(a.err, "t.csv:2: column 'TIMESTAMP': '1700000000' is not a "
                                          "timestamp like"));
    run_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04.03,1,1\n"
             "2023-11-16 18:17:04.02,1,1\n", NULL, &a);
    ck_err(a, "t.csv:3: timestamp 2023-11-16 18:17:04.02 is earlier than the previous row's "
              "2023-11-16 18:17:04.03");
}
END_TEST

START_TEST(test_csv_errors) {
    static const struct { const char *text, *err; } cases[] = {
        {"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,1,1\n"
         "2023-11-16 18:17:04.9799600,abc,5\n",
         "t.csv:3: column 'ContextTokens': 'abc' is not a non-negative integer"},
        {"arrival_s,prompt_tokens,output_tokens\n1,-5,3\n",
         "t.csv:2: column 'prompt_tokens': '-5' is negative"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2147483648,3\n",
         "t.csv:2: column 'prompt_tokens': '2147483648' is out of range (max 2147483647)"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2147483647,3\n1,2,\n",
         "t.csv:3: column 'output_tokens': empty value, expected a non-negative integer"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2,3\n2,3\n",
         "t.csv:3: expected 3 fields as in the header, found 2"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2,3,4\n",
         "t.csv:2: expected 3 fields as in the header, found 4"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2,0\n",
         "t.csv:2: column 'output_tokens': output tokens must be at least 1, found 0"},
        {"arrival_s,prompt_tokens,output_tokens\n13.0,1,1\n12.5,1,1\n",
         "t.csv:3: timestamp 12.5 is earlier than the previous row's 13.0"},
        {"arrival_s,prompt_tokens,output_tokens\n-1,1,1\n",
         "t.csv:2: column 'arrival_s': '-1' is negative"},
        {"arrival_s,prompt_tokens,output_tokens\ninf,1,1\n",
         "t.csv:2: column 'arrival_s': 'inf' is not a non-negative number"},
        {"arrival_s,prompt_tokens,output_tokens\n1e999,1,1\n",
         "t.csv:2: column 'arrival_s': '1e999' is out of range"},
        {"arrival_s,prompt_tokens,output_tokens\n0x10,1,1\n",
         "t.csv:2: column 'arrival_s': '0x10' is not a non-negative number"},
        {"arrival_s,prompt_tokens,output_tokens\n1,\"2,3\n",
         "t.csv:2: field 2: unterminated quoted field"},
        {"arrival_s,prompt_tokens,output_tokens\n1,2,3\n\n\n4,5,6\n7,8,",
         "t.csv:6: column 'output_tokens': empty value, expected a non-negative integer"},
        {"", "t.csv: empty file (no header)"},
        {"\n \r\n", "t.csv: empty file (no header)"},
    };
    result_t a;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_text(cases[i].text, NULL, &a);
        ck_err(a, cases[i].err);
    }
    static const char nul[] = "arrival_s,prompt_tokens,output_tokens\n1,2,3\n1,\0,3\n";
    FILE *f = fmemopen((void *)nul, sizeof nul - 1, "r");
    trace_t *t = trace_open_file(f, "t.csv", NULL);
    drain(t, &a);
    trace_close(t);
    fclose(f);
    ck_err(a, "t.csv:3: NUL byte in the line (binary file?)");
    run_text("time,prompt,output\n1,2,3\n", NULL, &a);
    ck_assert(a.rc == -1);
    const char *head = "t.csv:1: unrecognised header 'time,prompt,output'; expected one of: "
                       "azure (TIMESTAMP,ContextTokens,GeneratedTokens), ";
    ck_assert_msg(strncmp(a.err, head, strlen(head)) == 0, "%s", a.err);
    ck_assert(strstr(a.err, "burstgpt") && strstr(a.err, "mooncake") && strstr(a.err, "plain"));
}
END_TEST

START_TEST(test_burstgpt_rows) {
    result_t a;
    /* Extra columns anywhere, an empty Session ID, float timestamps, failures skipped */
    run_text("Log Type,Response tokens,Session ID,Timestamp,Model,Request tokens\n"
             "Conversation log,18,abc,19440110.0,ChatGPT,472\n"
             "API log,0,,19440111.5,GPT-4,0\n"
             "API log,7,,19440112.25,GPT-4,0\n", NULL, &a);
    ck_assert_msg(a.rc == 0, "%s", a.err);
    ck_assert(a.fmt == TRACE_FMT_BURSTGPT && a.n == 2 && a.skipped == 1);
    ck_assert(a.r[0].output_tokens == 18 && a.r[0].prompt_tokens == 472);
    ck_assert(a.r[1].id == 1 && a.r[1].arrival_s == 2.25 && a.r[1].line == 4);
    /* a failure still has to be in order and well formed */
    run_text("Timestamp,Request tokens,Response tokens\n5,1,1\n4,0,0\n", NULL, &a);
    ck_assert(a.rc == -1 && strstr(a.err, "t.csv:3: timestamp 4 is earlier"));
}
END_TEST

START_TEST(test_format_forced) {
    result_t a;
    trace_opts_t az = {.format = TRACE_FMT_AZURE};
    run_text("arrival_s,prompt_tokens,output_tokens\n1,2,3\n", &az, &a);
    ck_err(a, "t.csv:1: header 'arrival_s,prompt_tokens,output_tokens' has no column "
              "'TIMESTAMP', which the azure format needs");
    trace_opts_t mc = {.format = TRACE_FMT_MOONCAKE};
    run_text("arrival_s,prompt_tokens,output_tokens\n1,2,3\n", &mc, &a);
    ck_assert(a.rc == -1 && strstr(a.err, "t.csv:1: col 1: expected '{'"));
    run_text("{\"timestamp\":1,\"input_length\":2,\"output_length\":3}\n", &mc, &a);
    ck_assert(a.rc == 0 && a.n == 1);

    trace_format_t f;
    for (int i = TRACE_FMT_AUTO; i <= TRACE_FMT_PLAIN; i++) {
        ck_assert_int_eq(trace_format_parse(trace_format_name((trace_format_t)i), &f), 0);
        ck_assert_int_eq(f, i);
    }
    ck_assert_int_eq(trace_format_parse("Azure", &f), 0);
    ck_assert_int_eq(trace_format_parse("csv", &f), -1);
}
END_TEST

START_TEST(test_files) {
    char p[64];
    result_t a;
    run_path("/nonexistent/x.csv", NULL, &a);
    ck_err(a, "/nonexistent/x.csv: No such file or directory");
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", ""));
    run_path(p, NULL, &a);
    char want[128];
    snprintf(want, sizeof want, "%s: empty file (no header)", p);
    ck_err(a, want);
    unlink(p);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv",
                                             "arrival_s,prompt_tokens,output_tokens\n0,1,1\n"));
    trace_t *t = trace_open(p, NULL);
    ck_assert_str_eq(trace_path(t), p);
    drain(t, &a);
    ck_assert(a.rc == 0 && a.n == 1);
    trace_close(t);
    unlink(p);
}
END_TEST

START_TEST(test_mooncake_rows) {
    result_t a;
    /* unknown keys of every JSON type are skipped, key order does not matter */
    run_text("{\"note\": \"a \\\"q\\\" \\\\ \\u00e9 \\n\", \"n\": -1.5e3, \"arr\": [1, [2, {}], "
             "\"x\"], \"obj\": {\"k\": [true, false, null]}, \"t\": true, \"f\": false, "
             "\"z\": null, \"output_length\": 3, \"hash_ids\": [5, 6, 9223372036854775807], "
             "\"input_length\": 1000, \"timestamp\": 1500}\n"
             "  {\"timestamp\": 2000.5, \"input_length\": 0, \"output_length\": 1, "
             "\"hash_ids\": []}  \r\n"
             "{\"time\\u0073tamp\":3000,\"input_length\":7,\"output_length\":2}", NULL, &a);
    ck_assert_msg(a.rc == 0, "%s", a.err);
    ck_assert_int_eq(a.n, 3);
    ck_assert(a.r[0].prompt_tokens == 1000 && a.r[0].output_tokens == 3 && a.r[0].n_hash == 3);
    ck_assert(a.hash[0][0] == 5 && a.hash[0][2] == INT64_MAX);
    ck_assert_double_eq_tol(a.r[1].arrival_s, 0.5005, 1e-12);
    ck_assert(a.r[1].n_hash == 0 && a.r[2].n_hash == 0 && a.r[2].arrival_s == 1.5);

    static const struct { const char *text, *err; } cases[] = {
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n"
         "{\"timestamp\": 0, \"input_len",
         "t.csv:2: col 18: unterminated string (truncated line?)"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1",
         "t.csv:1: col 55: expected ',' or '}', found the end of the line (truncated?)"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1} x",
         "t.csv:1: col 57: unexpected 'x' after the closing '}'"},
        {"{\"timestamp\": 0, \"input_length\": 5}",
         "t.csv:1: missing key 'output_length'"},
        {"{\"timestamp\": 0, \"timestamp\": 1}",
         "t.csv:1: col 31: duplicate key 'timestamp'"},
        {"{\"timestamp\": 0, \"input_length\": 5.5, \"output_length\": 1}",
         "t.csv:1: key 'input_length': '5.5' is not a non-negative integer"},
        {"{\"timestamp\": \"0\", \"input_length\": 5, \"output_length\": 1}",
         "t.csv:1: col 15: key 'timestamp': expected a number, found '\"'"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 0}",
         "t.csv:1: key 'output_length': must be at least 1, found 0"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1, x]}",
         "t.csv:1: col 73: key 'hash_ids': expected a number, found 'x'"},
        {"{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": [1.5]}",
         "t.csv:1: col 70: key 'hash_ids': element 1: '1.5' is not a 64-bit integer"},
        {"{\"timestamp\": 0, \"x\": tru, \"input_length\": 5, \"output_length\": 1}",
         "t.csv:1: col 23: expected a JSON value"},
        {"{\"timestamp\": 0, \"x\": \"a\\qb\"}", "t.csv:1: col 26: bad escape '\\q' in a string"},
        {"{\"timestamp\": 0, \"x\": [1 2]}", "t.csv:1: col 26: expected ',' or ']', found '2'"},
        {"{\"timestamp\": 0, \"input_length\": 05, \"output_length\": 1}",
         "t.csv:1: col 35: expected ',' or '}', found '5'"},
        {"{\"timestamp\": 2, \"input_length\": 5, \"output_length\": 1}\n"
         "{\"timestamp\": 1, \"input_length\": 5, \"output_length\": 1}\n",
         "t.csv:2: timestamp 1 is earlier than the previous row's 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_text(cases[i].text, NULL, &a);
        ck_err(a, cases[i].err);
    }
}
END_TEST

START_TEST(test_mooncake_deep_and_long) {
    /* Nesting is bounded (no stack overflow); a long hash_ids list grows the buffer. */
    size_t n = 200000;
    char *s = malloc(n + 256), *p = s;
    p += sprintf(p, "{\"timestamp\": 0, \"x\": ");
    for (int i = 0; i < 1000; i++) *p++ = '[';
    strcpy(p, "}\n");
    result_t a;
    run_text(s, NULL, &a);
    ck_assert_msg(a.rc == -1 && strstr(a.err, "nested more than"), "%s", a.err);

    p = s + sprintf(s, "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, "
                       "\"hash_ids\": [");
    for (int i = 0; i < 20000; i++) p += sprintf(p, "%s%d", i ? "," : "", i);
    strcpy(p, "]}\n");
    FILE *f = fmemopen(s, strlen(s), "r");
    trace_t *t = trace_open_file(f, "long", NULL);
    trace_req_t q;
    ck_assert_int_eq(trace_next(t, &q), 1);
    ck_assert(q.n_hash == 20000 && q.hash_ids[19999] == 19999);
    trace_close(t);
    fclose(f);
    free(s);
}
END_TEST

/* --- fuzz ------------------------------------------------------------------------------- */

static const char *const seeds[] = {
    "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:17:03.9799600,4808,10\r\n"
    "2023-11-16 18:17:04.0319600,3180,8\r\n2023-11-16 18:17:04.0781490,110,27",
    "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
    "Log Type\n19440110.0,1722ac82,43,GPT-4,906,446,1352,Conversation log\n"
    "19454781.0,,21,GPT-4,0,0,0,API log\n19454805.0,,38,\"GPT,4\",265,245,510,API log\n",
    "{\"timestamp\": 0, \"input_length\": 6758, \"output_length\": 500, \"hash_ids\": [0, 1, 2]}\n"
    "{\"timestamp\": 40, \"input_length\": 7322, \"output_length\": 490, \"x\": {\"a\": [null, "
    "\"s\\u0041\"]}, \"hash_ids\": [0, 14]}\n",
    "arrival_s,prompt_tokens,output_tokens\n0.000000,323,172\n0.281350,463,642\n"
    "0.370349,5828,50\n",
};

static int has_line_ref(const char *err)
{
    /* ":<digits>:" somewhere after the file name */
    for (const char *p = strchr(err, ':'); p; p = strchr(p + 1, ':')) {
        const char *q = p + 1;
        while (*q >= '0' && *q <= '9') q++;
        if (q > p + 1 && *q == ':') return 1;
    }
    return 0;
}

START_TEST(test_fuzz) {
    static const char bytes[] = "0123456789,.-e\"{}[]:\n\r \\ux";
    char buf[1024];
    rng_t r;
    rng_seed(&r, 20240229);
    int errors = 0, clean = 0;
    for (int it = 0; it < 4000; it++) {
        const char *base = seeds[it % 4];
        size_t n = strlen(base);
        memcpy(buf, base, n);
        int muts = 1 + (int)(rng_u64(&r) % 4);
        for (int m = 0; m < muts && n > 0; m++) {
            size_t at = rng_u64(&r) % n;
            char c = rng_u64(&r) % 4 == 0 ? (char)(rng_u64(&r) & 0xff)
                                          : bytes[rng_u64(&r) % (sizeof bytes - 1)];
            switch (rng_u64(&r) % 4) {
            case 0: buf[at] = c; break;
            case 1: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
            case 2:
                if (n + 1 < sizeof buf) {
                    memmove(buf + at + 1, buf + at, n - at);
                    buf[at] = c;
                    n++;
                }
                break;
            default: n = at; break;
            }
        }
        FILE *f = fmemopen(buf, n, "r");
        ck_assert_ptr_nonnull(f);
        trace_t *t = trace_open_file(f, "fz", NULL);
        result_t a;
        drain(t, &a);
        trace_close(t);
        fclose(f);
        if (a.rc < 0) {
            errors++;
            ck_assert_msg(has_line_ref(a.err) || strcmp(a.err, "fz: empty file (no header)") == 0,
                          "iteration %d: message without a line: '%s'", it, a.err);
        } else {
            clean++;
        }
    }
    /* Both outcomes must occur, or the mutations are not exercising the parsers. */
    ck_assert(errors > 1000 && clean > 100);
}
END_TEST

/* Prefix reuse: a request reuses its leading ids an earlier one held, up to its first new
 * one; tokens are capped by the prompt; requests without ids count no block. */
START_TEST(test_reuse_rows) {
    trace_reuse_t *u = trace_reuse_new();
    ck_assert_ptr_nonnull(u);
    static const int64_t a[] = { 1, 2, 3 }, b[] = { 1, 2, 7, 3 }, c[] = { 9, 1 },
                         d[] = { INT64_MIN, 1 }, e[] = { INT64_MIN };
    trace_req_t r = { .prompt_tokens = 1500, .hash_block = 512, .n_hash = 3, .hash_ids = a };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* nothing before it */
    r = (trace_req_t){ .prompt_tokens = 1800, .hash_block = 512, .n_hash = 4, .hash_ids = b };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* 1, 2 reused; 7 new stops it */
    r = (trace_req_t){ .prompt_tokens = 700, .hash_block = 512, .n_hash = 2, .hash_ids = c };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* 9 new: 1 after it does not count */
    r = (trace_req_t){ .prompt_tokens = 300, .hash_block = 512, .n_hash = 1, .hash_ids = a };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* 1 reused, 300 tokens (the prompt) */
    r = (trace_req_t){ .prompt_tokens = 50 };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* no ids */
    r = (trace_req_t){ .prompt_tokens = 600, .hash_block = 512, .n_hash = 2, .hash_ids = d };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);      /* INT64_MIN is an id like another */
    r = (trace_req_t){ .prompt_tokens = 600, .hash_block = 512, .n_hash = 1, .hash_ids = e };
    ck_assert_int_eq(trace_reuse_add(u, &r), 0);
    trace_reuse_stats_t st;
    trace_reuse_stats(u, &st);
    ck_assert_int_eq(st.requests, 7);
    ck_assert_int_eq(st.hashed_requests, 6);
    ck_assert_int_eq(st.blocks, 3 + 4 + 2 + 1 + 2 + 1);
    ck_assert_int_eq(st.reused_blocks, 0 + 2 + 0 + 1 + 0 + 1);
    ck_assert_int_eq(st.prompt_tokens, 1500 + 1800 + 700 + 300 + 50 + 600 + 600);
    ck_assert_int_eq(st.reused_tokens, 1024 + 300 + 512);
    trace_reuse_free(u);

    /* many distinct ids: the set grows, every one is found again */
    u = trace_reuse_new();
    int64_t ids[1];
    for (int64_t i = 0; i < 100000; i++) {
        ids[0] = i * 7919;
        r = (trace_req_t){ .prompt_tokens = 16, .hash_block = 16, .n_hash = 1, .hash_ids = ids };
        ck_assert_int_eq(trace_reuse_add(u, &r), 0);
    }
    for (int64_t i = 0; i < 100000; i++) {
        ids[0] = i * 7919;
        r = (trace_req_t){ .prompt_tokens = 16, .hash_block = 16, .n_hash = 1, .hash_ids = ids };
        ck_assert_int_eq(trace_reuse_add(u, &r), 0);
    }
    trace_reuse_stats(u, &st);
    ck_assert_int_eq(st.reused_blocks, 100000);
    trace_reuse_free(u);
}
END_TEST

/* The Mooncake conversation trace reuses about 37% of its prompt blocks (issue #28). */
START_TEST(test_reuse_mooncake_real) {
    char p[512];
    if (!testutil_data_path("traces/mooncake_conversation_trace.jsonl", p, sizeof p)) return;
    trace_t *t = trace_open(p, NULL);
    trace_reuse_t *u = trace_reuse_new();
    trace_req_t q;
    while (trace_next(t, &q) == 1) ck_assert_int_eq(trace_reuse_add(u, &q), 0);
    ck_assert_ptr_null(trace_errmsg(t));
    trace_close(t);
    trace_reuse_stats_t st;
    trace_reuse_stats(u, &st);
    ck_assert_int_eq(st.blocks, 288500);
    ck_assert_double_eq_tol((double)st.reused_blocks / (double)st.blocks, 0.366, 0.001);
    ck_assert_double_eq_tol((double)st.reused_tokens / (double)st.prompt_tokens, 0.374, 0.001);
    trace_reuse_free(u);
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *real = tcase_create("real");
    tcase_set_timeout(real, 30);
    tcase_add_test(real, test_azure_real);
    tcase_add_test(real, test_mooncake_real);
    tcase_add_test(real, test_burstgpt_real);
    tcase_add_test(real, test_replay_window_real);
    tcase_add_test(real, test_reuse_mooncake_real);
    suite_add_tcase(s, real);
    TCase *tc = tcase_create("rows");
    tcase_add_test(tc, test_plain_basic);
    tcase_add_test(tc, test_replay_options);
    tcase_add_test(tc, test_azure_timestamps);
    tcase_add_test(tc, test_csv_errors);
    tcase_add_test(tc, test_burstgpt_rows);
    tcase_add_test(tc, test_format_forced);
    tcase_add_test(tc, test_files);
    tcase_add_test(tc, test_mooncake_rows);
    tcase_add_test(tc, test_mooncake_deep_and_long);
    tcase_add_test(tc, test_reuse_rows);
    suite_add_tcase(s, tc);
    TCase *fz = tcase_create("fuzz");
    tcase_set_timeout(fz, 60);
    tcase_add_test(fz, test_fuzz);
    suite_add_tcase(s, fz);
    return s;
}

int main(void)
{
    return testutil_run(trace_suite());
}

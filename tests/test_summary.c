/* test_summary: a small hand-built run whose summary is worked out by hand, run lookup by
 * name / id / latest, the messages for missing and foreign databases, and the printers. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/summary.h"
#include "tests/testutil.h"
#include "traces/recorder.h"

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-9)


static void add(rec_t *r, int64_t run, int id, double arr, double sched, double first,
                double fin, int prompt, int gen, int preempt, const char *status) {
    rec_request_t q = {.req_id = id, .arrival_s = arr, .prompt_tokens = prompt,
                       .output_tokens = gen, .generated_tokens = gen, .first_scheduled_s = sched,
                       .first_token_s = first, .finish_s = fin, .preemptions = preempt,
                       .status = status};
    ck_assert_msg(rec_request(r, run, &q) == 0, "%s", rec_errmsg(r));
}

static int64_t begin(rec_t *r, const char *name, const char *policy) {
    rec_run_info_t in = {.name = name, .kind = "sim", .policy = policy, .trace = "t.csv",
                         .model = "llama-2-7b", .hardware = "a100", .version = "test"};
    int64_t id;
    ck_assert_msg(rec_run_begin(r, &in, &id) == 0, "%s", rec_errmsg(r));
    return id;
}

/* Run "a" (id 1), the hand-computed one:
 *   req  arrival sched first finish prompt gen preempt status   ttft tpot  e2e  queue
 *   0    0.0     0.0   0.1   1.1    100    11  0       finished 0.1  0.1   1.1  0.0
 *   1    0.5     0.6   0.8   2.8    50     5   2       finished 0.3  0.5   2.3  0.1
 *   2    1.0     1.5   2.0   2.0    20     1   0       finished 1.0  -     1.0  0.5
 *   3    1.5     -     -     -      5000   0   0       rejected -    -     -    -
 *   4    2.0     2.5   3.5   -      10     3   1       aborted  1.5  -     -    0.5
 * Runs "b" (id 2, no finished request) and "1" (id 3, a name that looks like an id). */
static void build(const char *path) {
    rec_t *r = rec_open(path);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    int64_t a = begin(r, "a", "policies/continuous.lua");
    add(r, a, 0, 0.0, 0.0, 0.1, 1.1, 100, 11, 0, "finished");
    add(r, a, 1, 0.5, 0.6, 0.8, 2.8, 50, 5, 2, "finished");
    add(r, a, 2, 1.0, 1.5, 2.0, 2.0, 20, 1, 0, "finished");
    add(r, a, 3, 1.5, -1, -1, -1, 5000, 0, 0, "rejected");
    add(r, a, 4, 2.0, 2.5, 3.5, -1, 10, 3, 1, "aborted");
    for (int i = 0; i < 7; i++) {
        rec_step_t st = {.step = i, .start_s = 0.4 * i, .dur_s = 0.4};
        ck_assert(rec_step(r, a, &st) == 0);
    }
    ck_assert(rec_run_end(r, a, 1, NULL, 0.25) == 0);
    int64_t b = begin(r, "b", "static.lua");
    add(r, b, 0, 0.0, -1, -1, -1, 10, 0, 0, "rejected");
    ck_assert(rec_run_end(r, b, 0, "policy error: boom", 0.5) == 0);
    begin(r, "1", NULL);
    rec_close(r);
}

START_TEST(test_load_hand_computed) {
    char path[256], err[512];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    sqlite3 *db;
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    summary_t s;
    ck_assert_msg(summary_load(db, 1, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.name, "a");
    ck_assert_str_eq(s.kind, "sim");
    ck_assert_str_eq(s.policy, "policies/continuous.lua");
    ck_assert_str_eq(s.status, "done");
    ck_assert_str_eq(s.error, "");
    ck_assert_str_eq(s.model, "llama-2-7b");
    EQ(s.wall_s, 0.25);
    ck_assert_int_eq(s.requests, 5);
    ck_assert_int_eq(s.finished, 3);
    ck_assert_int_eq(s.rejected, 1);
    ck_assert_int_eq(s.aborted, 1);
    ck_assert_int_eq(s.preempted_requests, 2);
    ck_assert_int_eq(s.preemptions, 3);
    ck_assert_int_eq(s.steps, 7);
    ck_assert_int_eq(s.prompt_tokens, 170);
    ck_assert_int_eq(s.output_tokens, 17);
    /* makespan: last finish of a finished request (2.8) - first arrival (0.0) */
    EQ(s.makespan_s, 2.8);
    EQ(s.req_per_s, 3 / 2.8);
    EQ(s.out_tok_per_s, 17 / 2.8);
    EQ(s.tok_per_s, 187 / 2.8);

    /* TTFT 0.1 0.3 1.0 1.5: ranks 1.5, 2.7, 2.85, 2.97 */
    ck_assert_uint_eq(s.ttft.n, 4);
    EQ(s.ttft.mean, 0.725);
    EQ(s.ttft.p50, 0.65);
    EQ(s.ttft.p90, 1.35);
    EQ(s.ttft.p95, 1.425);
    EQ(s.ttft.p99, 1.485);
    /* TPOT 0.1 0.5: ranks 0.5, 0.9, 0.95, 0.99 */
    ck_assert_uint_eq(s.tpot.n, 2);
    EQ(s.tpot.mean, 0.3);
    EQ(s.tpot.p50, 0.3);
    EQ(s.tpot.p90, 0.46);
    EQ(s.tpot.p95, 0.48);
    EQ(s.tpot.p99, 0.496);
    /* E2E 1.0 1.1 2.3: ranks 1.0, 1.8, 1.9, 1.98 */
    ck_assert_uint_eq(s.e2e.n, 3);
    EQ(s.e2e.mean, 4.4 / 3);
    EQ(s.e2e.p50, 1.1);
    EQ(s.e2e.p90, 2.06);
    EQ(s.e2e.p95, 2.18);
    EQ(s.e2e.p99, 2.276);
    /* queue 0.0 0.1 0.5 0.5 */
    ck_assert_uint_eq(s.queue.n, 4);
    EQ(s.queue.mean, 0.275);
    EQ(s.queue.p50, 0.3);
    EQ(s.queue.p90, 0.5);
    EQ(s.queue.min, 0.0);

    /* Run b: nothing finished, so no makespan, throughput or latencies. */
    ck_assert_msg(summary_load(db, 2, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.status, "failed");
    ck_assert_str_eq(s.error, "policy error: boom");
    ck_assert_int_eq(s.requests, 1);
    ck_assert_int_eq(s.finished, 0);
    ck_assert(isnan(s.makespan_s) && isnan(s.req_per_s) && isnan(s.tok_per_s));
    ck_assert_uint_eq(s.ttft.n, 0);
    ck_assert(isnan(s.ttft.p50));

    /* Run "1": still running, no requests at all. */
    ck_assert_msg(summary_load(db, 3, &s, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.status, "running");
    ck_assert(isnan(s.wall_s));
    ck_assert_int_eq(s.requests, 0);

    ck_assert_int_eq(summary_load(db, 42, &s, err, sizeof err), -1);
    char want[600];
    snprintf(want, sizeof want, "no run with id 42 in %s", path); /* the database's path */
    ck_assert_str_eq(err, want);
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

/* The loader summary_load and plot share: sorted non-NULL values, an empty run, a bad column. */
START_TEST(test_load_column) {
    char path[256], err[512];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    sqlite3 *db;
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    double *v = (double *)1;
    size_t n = 99;
    /* run a's TTFTs, ascending, the rejected request's NULL left out */
    ck_assert_msg(summary_load_column(db, 1, "ttft_s", &v, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(n, 4);
    EQ(v[0], 0.1);
    EQ(v[1], 0.3);
    EQ(v[2], 1.0);
    EQ(v[3], 1.5);
    free(v);
    /* run b: no values, no array */
    v = (double *)1;
    ck_assert_msg(summary_load_column(db, 2, "ttft_s", &v, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_null(v);
    /* a column that does not exist: an error, nothing handed back */
    v = (double *)1;
    n = 99;
    ck_assert_int_eq(summary_load_column(db, 1, "nope_s", &v, &n, err, sizeof err), -1);
    ck_assert_ptr_null(v);
    ck_assert_uint_eq(n, 0);
    ck_assert_str_eq(err, "cannot read requests.nope_s: no such column: nope_s");
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_find_run) {
    char path[256], err[512];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    sqlite3 *db;
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    int64_t id = 0;
    ck_assert(summary_find_run(db, "a", &id, err, sizeof err) == 0 && id == 1);
    ck_assert(summary_find_run(db, "b", &id, err, sizeof err) == 0 && id == 2);
    ck_assert(summary_find_run(db, "2", &id, err, sizeof err) == 0 && id == 2);
    /* A name that looks like an id refers to that run, not to id 1. */
    ck_assert(summary_find_run(db, "1", &id, err, sizeof err) == 0 && id == 3);
    ck_assert(summary_find_run(db, NULL, &id, err, sizeof err) == 0 && id == 3);
    id = 0;
    ck_assert(summary_find_run(db, "", &id, err, sizeof err) == 0 && id == 3);
    id = 77;
    /* the message names the database by its path (as SQLite resolved it) */
    char want[600], name[512];
    ck_assert_str_eq(summary_db_name(db, name, sizeof name), path);
    ck_assert_int_eq(summary_find_run(db, "zzz", &id, err, sizeof err), -1);
    snprintf(want, sizeof want, "no run named 'zzz' in %s; runs: a, b, 1", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(id, 77);
    ck_assert_int_eq(summary_find_run(db, "9", &id, err, sizeof err), -1);
    snprintf(want, sizeof want, "no run named '9' in %s; runs: a, b, 1", path);
    ck_assert_str_eq(err, want);
    /* A small buffer cuts the list, never the C string. */
    char small[600];
    size_t fit = strlen("no run named 'zzz' in ") + strlen(path) + 16; /* "; runs: a, ..." fits */
    ck_assert_int_eq(summary_find_run(db, "zzz", &id, small, fit), -1);
    snprintf(want, sizeof want, "no run named 'zzz' in %s; runs: a, ...", path);
    ck_assert_str_eq(small, want);

    int64_t *ids;
    size_t n;
    ck_assert(summary_list(db, &ids, &n, err, sizeof err) == 0);
    ck_assert_uint_eq(n, 3);
    ck_assert(ids[0] == 1 && ids[1] == 2 && ids[2] == 3);
    free(ids);
    sqlite3_close(db);
    testutil_unlink_db(path);

    /* An empty twinserve database. */
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    rec_close(rec_open(path));
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(summary_find_run(db, NULL, &id, err, sizeof err), -1);
    snprintf(want, sizeof want, "no runs in %s", path);
    ck_assert_str_eq(err, want);
    ck_assert_int_eq(summary_find_run(db, "x", &id, err, sizeof err), -1);
    snprintf(want, sizeof want, "no run named 'x' in %s; it has no runs", path);
    ck_assert_str_eq(err, want);
    ck_assert(summary_list(db, &ids, &n, err, sizeof err) == 0);
    ck_assert(n == 0 && ids == NULL);
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_open_errors) {
    char path[256], err[512], want[600];
    sqlite3 *db = (sqlite3 *)1;
    ck_assert_int_eq(summary_open("/tmp/twintest-does-not-exist.db", &db, err, sizeof err), -1);
    ck_assert_str_eq(err, "/tmp/twintest-does-not-exist.db: no such database");
    ck_assert_ptr_null(db);
    ck_assert_int_eq(access("/tmp/twintest-does-not-exist.db", F_OK), -1);   /* not created */

    /* Empty file, and an SQLite database of another program. */
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    snprintf(want, sizeof want, "%s: not a twinserve database (no runs table)", path);
    ck_assert_int_eq(summary_open(path, &db, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    sqlite3 *w;
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);"
                                     "INSERT INTO meta VALUES ('schema_version', '1')",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(w);
    ck_assert_int_eq(summary_open(path, &db, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    testutil_unlink_db(path);
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "CREATE TABLE photos(id INTEGER PRIMARY KEY, file TEXT)",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(w);
    snprintf(want, sizeof want, "%s: not a twinserve database (no runs table)", path);
    ck_assert_int_eq(summary_open(path, &db, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    testutil_unlink_db(path);

    /* A twinserve database from a newer version. */
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    rec_close(rec_open(path));
    ck_assert_int_eq(sqlite3_open(path, &w), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(w, "UPDATE meta SET value = '8'", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(w);
    snprintf(want, sizeof want, "%s: schema_version 8 is newer than this twinserve (7)", path);
    ck_assert_int_eq(summary_open(path, &db, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    testutil_unlink_db(path);

    ck_assert(testutil_write_tmp(path, sizeof path, ".db", "hello, not sqlite\n") != NULL);
    snprintf(want, sizeof want, "%s: file is not a database", path);
    ck_assert_int_eq(summary_open(path, &db, err, sizeof err), -1);
    ck_assert_str_eq(err, want);
    testutil_unlink_db(path);

    ck_assert_int_eq(summary_open("/tmp", &db, err, sizeof err), -1);
    ck_assert_str_eq(err, "/tmp: is a directory, not a database");
}
END_TEST

/* The printers, into memory. */
static char *print_to_string(const summary_t *s, int table) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (table) {
        summary_table_header(f);
        summary_table_row(f, s);
    } else {
        summary_print(f, s);
    }
    fclose(f);
    return buf;
}

START_TEST(test_print) {
    char path[256], err[512];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    sqlite3 *db;
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    summary_t s;
    ck_assert(summary_load(db, 1, &s, err, sizeof err) == 0);
    char *out = print_to_string(&s, 0);
    const char *want[] = {
        "run       a (id 1): sim, done, wall 250.00 ms, started ",
        "policy    policies/continuous.lua\n",
        "model     llama-2-7b on a100\n",
        "requests  5: 3 finished, 1 rejected, 1 aborted; 2 preempted (3 preemptions); 7 steps\n",
        /* dropped requests by reason, with their share; over 5% a warning of its own */
        "rejected  1 (20.0%) other reasons\n"
        "WARNING   20.0% of the trace was rejected (other reasons): the requests table's "
        "reason column says why\n"
        "aborted   1 (20.0%) unfinished when the run failed (the error above)\n"
        "WARNING   20.0% of the requests read never finished: this run's numbers describe "
        "part of its trace only\n",
        "makespan  2800.00 ms: 1.07 req/s, 6.1 output tok/s, 66.8 total tok/s\n",
        "  TTFT          4   725.00 ms   650.00 ms  1350.00 ms  1425.00 ms  1485.00 ms\n",
        "  TPOT          2   300.00 ms   300.00 ms   460.00 ms   480.00 ms   496.00 ms\n",
        "  queue         4   275.00 ms   300.00 ms   500.00 ms   500.00 ms   500.00 ms\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(out, want[i]) != NULL, "missing '%s' in:\n%s", want[i], out);
    free(out);

    out = print_to_string(&s, 1);
    ck_assert_msg(strstr(out, "TTFT p50/p99") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "a                        continuous       done              3/1"
                              "       2.80     1.07        6.1     650ms/1485ms"
                              "      300ms/496ms\n") != NULL, "%s", out);
    /* Header and row columns line up. */
    size_t header = strcspn(out, "\n");
    ck_assert_uint_eq(header, strlen(out) - header - 2);
    free(out);
    /* Tenths of a millisecond only where they matter; seconds past 10 s (overload). */
    s.tpot.p50 = 0.05262;
    s.tpot.p99 = 0.1004;
    s.ttft.p50 = 12.34;
    s.ttft.p99 = 5848.1;
    out = print_to_string(&s, 1);
    ck_assert_msg(strstr(out, " 12.3s/5848s     52.6ms/100ms\n") != NULL, "%s", out);
    free(out);

    /* Unknown values print as "-", long times in seconds. */
    ck_assert(summary_load(db, 2, &s, err, sizeof err) == 0);
    s.wall_s = 12.5;
    out = print_to_string(&s, 0);
    ck_assert_msg(strstr(out, "wall 12.50 s") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "error     policy error: boom\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "makespan  -: - req/s, - output tok/s, - total tok/s\n") != NULL,
                  "%s", out);
    free(out);
    out = print_to_string(&s, 1);
    ck_assert_msg(strstr(out, "b                        static           failed            0/1"
                              "          -        -          -              -/-"
                              "              -/-  policy error: boom\n") != NULL, "%s", out);
    free(out);
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

/* The helpers report and compare share: time formatting, a distribution row (report's ITL
 * row lines up under summary_print's), and a NULL column read as NAN. */
START_TEST(test_shared_helpers) {
    char buf[32];
    ck_assert_str_eq(summary_fmt_time(buf, sizeof buf, NAN), "-");
    ck_assert_str_eq(summary_fmt_time(buf, sizeof buf, 0.0123), "12.30 ms");
    ck_assert_str_eq(summary_fmt_time(buf, sizeof buf, 9.999), "9999.00 ms");
    ck_assert_str_eq(summary_fmt_time(buf, sizeof buf, 12.5), "12.50 s");
    ck_assert_ptr_eq(summary_fmt_time(buf, sizeof buf, 1), buf);

    stats_dist_t d = {4, 0.725, 0.5, 1.5, 0.65, 1.35, 1.425, 1.485};
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    summary_print_dist(f, "TTFT", &d);
    fclose(f);
    ck_assert_str_eq(out, "  TTFT          4   725.00 ms   650.00 ms  1350.00 ms  1425.00 ms"
                          "  1485.00 ms\n");
    free(out);

    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT NULL, 2.5, 3", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert(isnan(summary_column_or_nan(st, 0)));
    ck_assert(summary_column_or_nan(st, 1) == 2.5);
    ck_assert(summary_column_or_nan(st, 2) == 3);
    sqlite3_finalize(st);
    sqlite3_close(db);
}
END_TEST

/* A run that is not done says so first (report), and `runs` shows its error. */
START_TEST(test_not_done_is_flagged) {
    char path[256], err[512];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    sqlite3 *db;
    ck_assert_msg(summary_open(path, &db, err, sizeof err) == 0, "%s", err);
    summary_t s;
    ck_assert(summary_load(db, 2, &s, err, sizeof err) == 0);
    char *out = print_to_string(&s, 0);
    ck_assert_msg(strncmp(out, "WARNING   run 'b' is failed, not done: policy error: boom: its "
                               "numbers cover only the requests it got to\n", 105) == 0,
                  "%s", out);
    free(out);
    out = print_to_string(&s, 1);
    ck_assert_msg(strstr(out, "  policy error: boom\n") != NULL, "%s", out);
    free(out);
    /* a long error is cut to fit the row */
    memset(s.error, 'x', sizeof s.error - 1);
    s.error[sizeof s.error - 1] = '\0';
    out = print_to_string(&s, 1);
    ck_assert_msg(strstr(out, "  xxxxxxxxxx") && strstr(out, "x...\n") &&
                  !strstr(out, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"),
                  "%s", out);
    free(out);
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

static Suite *summary_suite(void) {
    Suite *s = suite_create("summary");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_load_hand_computed);
    tcase_add_test(tc, test_load_column);
    tcase_add_test(tc, test_find_run);
    tcase_add_test(tc, test_open_errors);
    tcase_add_test(tc, test_print);
    tcase_add_test(tc, test_not_done_is_flagged);
    tcase_add_test(tc, test_shared_helpers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(summary_suite());
}

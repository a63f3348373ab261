/* recorder_fixture: the helpers of test_recorder.c (its only includer), kept apart so that
 * the suite's file holds the tests: temporary databases, a second read-only connection
 * that sees only what the recorder committed, one-value queries on it, and runs and
 * requests with known fields. Static functions: one translation unit uses them. */
#ifndef TWIN_TESTS_RECORDER_FIXTURE_H
#define TWIN_TESTS_RECORDER_FIXTURE_H

#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>

#include "tests/testutil.h"
#include "traces/recorder.h"

static const char *tmpdb(char *buf, size_t len) {
    ck_assert(testutil_tmpfile(buf, len, ".db") != NULL);
    return buf;
}

/* A second, independent connection: sees only what the recorder committed. */
static sqlite3 *peek(const char *path) {
    sqlite3 *db = NULL;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    return db;
}

static sqlite3_stmt *query(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(db));
    ck_assert_msg(sqlite3_step(st) == SQLITE_ROW, "%s: no row", sql);
    return st;
}

static long long qint(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = query(db, sql);
    long long v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* NAN for NULL. */
static double qdbl(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = query(db, sql);
    double v = sqlite3_column_type(st, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 0);
    sqlite3_finalize(st);
    return v;
}

static const char *qstr(sqlite3 *db, const char *sql, char *buf, size_t len) {
    sqlite3_stmt *st = query(db, sql);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(buf, len, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    return buf;
}

static rec_t *open_ok(const char *path) {
    rec_t *r = rec_open(path);
    ck_assert(r != NULL);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    return r;
}

static rec_run_info_t info_named(const char *name) {
    rec_run_info_t in = {.name = name, .kind = "sim", .policy = "policies/continuous.lua",
                         .params = "{\"max_batch\": 8}", .trace = "traces/x.csv",
                         .model = "llama-2-7b", .hardware = "a100", .seed = 42,
                         .version = "0.1.0", .config = "{\"blocks\": 100}"};
    return in;
}

static int64_t begin_ok(rec_t *r, const rec_run_info_t *in) {
    int64_t id = -1;
    ck_assert_msg(rec_run_begin(r, in, &id) == 0, "%s", rec_errmsg(r));
    ck_assert_int_gt(id, 0);
    return id;
}

static rec_request_t req(int id, double arr, double sched, double first, double fin, int gen,
                         const char *status) {
    rec_request_t q = {.req_id = id, .arrival_s = arr, .prompt_tokens = 10, .output_tokens = gen,
                       .generated_tokens = gen, .first_scheduled_s = sched,
                       .first_token_s = first, .finish_s = fin, .status = status};
    return q;
}

#define ASSERT_NEAR(a, b) ck_assert_double_eq_tol((a), (b), 1e-12)

#endif

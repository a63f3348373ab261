/* testutil: helpers shared by the Check suites.
 *
 * Real data (traces, models) lives in ../shared/data relative to the repository, or where
 * TWIN_DATA points. Tests that need it call testutil_data_path(); when the folder is absent
 * they print a visible SKIP line and return without asserting, so `make test` passes anywhere. */
#ifndef TWIN_TESTUTIL_H
#define TWIN_TESTUTIL_H

#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/backend.h"

#include "traces/recorder.h"
#include "traces/trace_gen.h"

/* Writes DATA_DIR/rel into buf and returns buf, or NULL (with a SKIP line) when missing. */
static inline const char *testutil_data_path(const char *rel, char *buf, size_t len) {
    const char *dir = getenv("TWIN_DATA");
    if (!dir || !*dir) dir = "../shared/data";
    snprintf(buf, len, "%s/%s", dir, rel);
    struct stat st;
    if (stat(buf, &st) != 0) {
        fprintf(stderr, "SKIP: %s not found (set TWIN_DATA to the shared data folder)\n", buf);
        return NULL;
    }
    return buf;
}

/* A fresh temporary file path (the file is created empty); caller unlinks. */
static inline const char *testutil_tmpfile(char *buf, size_t len, const char *suffix) {
    snprintf(buf, len, "/tmp/twintest-XXXXXX%s", suffix ? suffix : "");
    int fd = mkstemps(buf, suffix ? (int)strlen(suffix) : 0);
    if (fd < 0) return NULL;
    close(fd);
    return buf;
}

/* Writes text to a fresh temporary file and returns its path in buf. */
static inline const char *testutil_write_tmp(char *buf, size_t len, const char *suffix,
                                             const char *text) {
    if (!testutil_tmpfile(buf, len, suffix)) return NULL;
    FILE *f = fopen(buf, "w");
    if (!f) return NULL;
    fputs(text, f);
    fclose(f);
    return buf;
}

/* Removes an SQLite database and its WAL side files. */
static inline void testutil_unlink_db(const char *path) { rec_remove(path); }

/* The first column of a query's first row on the database at path (printf-style SQL),
 * read-only: a number (NAN for no row or NULL) or, with out, text ("" for none). An SQL
 * error fails the test with the query. */
static inline double testutil_sql_v(const char *path, char *out, size_t len, const char *fmt,
                                    va_list ap) {
    char sql[2048];
    vsnprintf(sql, sizeof sql, fmt, ap);
    sqlite3 *h;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK, "%s: %s", sql,
                  sqlite3_errmsg(h));
    double v = NAN;
    if (out) out[0] = '\0';
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL) {
        v = sqlite3_column_double(st, 0);
        if (out) snprintf(out, len, "%s", (const char *)sqlite3_column_text(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return v;
}
static inline double testutil_sql_num(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline double testutil_sql_num(const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    double v = testutil_sql_v(path, NULL, 0, fmt, ap);
    va_end(ap);
    return v;
}
static inline void testutil_sql_text(const char *path, char *out, size_t len, const char *fmt,
                                     ...) __attribute__((format(printf, 4, 5)));
static inline void testutil_sql_text(const char *path, char *out, size_t len, const char *fmt,
                                     ...) {
    va_list ap;
    va_start(ap, fmt);
    testutil_sql_v(path, out, len, fmt, ap);
    va_end(ap);
}

/* Writes a synthetic trace (`twinserve trace gen`: Poisson arrivals at rate req/s, lengths
 * from the distribution specs, e.g. "lognormal:500:0.8") to a fresh temporary file. */
static inline void testutil_gen_trace(char *buf, size_t len, int n, double rate,
                                      uint64_t seed, const char *prompt, const char *output) {
    char err[256];
    tgen_opts_t o;
    tgen_opts_default(&o);
    o.n = n;
    o.rate = rate;
    o.seed = seed;
    ck_assert_msg(tgen_dist_parse(prompt, &o.prompt, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(tgen_dist_parse(output, &o.output, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(testutil_tmpfile(buf, len, ".csv"));
    tgen_t *g = tgen_open(&o);
    FILE *f = fopen(buf, "w");
    ck_assert(g && !tgen_errmsg(g) && f);
    ck_assert_int_eq(tgen_write_csv(g, f), 0);
    fclose(f);
    tgen_close(g);
}

/* Runs a suite (forking per test, so a crash is a failure, not the end of the suite);
 * returns the process exit status. */
/* 1 when backend `name` can run here, asked in a child process: a CUDA context does not
 * survive fork, and Check forks every test (CK_FORK), so a suite's parent must never touch
 * the device. Without it, the parent asks again for the reason (there is no context then
 * to keep out of it). */
static inline int testutil_backend_available(const char *name, char *why, size_t len) {
    int st = 0;
    pid_t pid = fork();
    if (pid == 0) _exit(backend_available(name, why, len) == 1 ? 7 : 0);
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 7)
        return 1;
    if (backend_available(name, why, len) == 1) snprintf(why, len, "the %s probe failed", name);
    return 0;
}

static inline int testutil_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif

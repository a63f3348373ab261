/* test_recorder: runs/requests/steps/tokens round trips with hand-computed metrics, run names,
 * status transitions seen from a second connection, failed runs, batching, and the messages
 * for unusable databases. */
#include <check.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/recorder_fixture.h"
#include "tests/testutil.h"
#include "traces/recorder.h"

/* ---------------------------------------------------------------- tests */

START_TEST(test_round_trip) {
    char path[256], sql[256], s[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named("r1");
    int64_t id = begin_ok(r, &in);

    /* ttft 1.25-0.5 = 0.75; e2e 3.25-0.5 = 2.75; tpot (2.75-0.75)/(5-1) = 0.5; queue 0.25 */
    rec_request_t q0 = req(0, 0.5, 0.75, 1.25, 3.25, 5, "finished");
    q0.preemptions = 2;
    q0.spec_proposed = 12;
    q0.spec_accepted = 7;
    q0.prompt_tokens = 123;
    /* One output token: ttft 1, e2e 1, no tpot. */
    rec_request_t q1 = req(1, 1.0, 1.5, 2.0, 2.0, 1, "finished");
    /* Rejected: every time NULL. */
    rec_request_t q2 = req(2, 2.0, -1, -1, -1, 0, "rejected");
    q2.output_tokens = 300;
    q2.reason = "prompt longer than the KV cache";
    /* Aborted after two tokens: ttft and queue exist, e2e and tpot do not. */
    rec_request_t q3 = req(3, 3.0, 3.5, 4.0, 6.0, 2, "aborted");
    q3.output_tokens = 50;
    rec_request_t qs[] = {q0, q1, q2, q3};
    for (int i = 0; i < 4; i++) ck_assert_msg(rec_request(r, id, &qs[i]) == 0, "%s", rec_errmsg(r));
    for (int i = 0; i < 3; i++) {
        rec_step_t st = {.step = i, .start_s = 0.1 * i, .dur_s = 0.05, .prefill_tokens = 100 * i,
                         .decode_tokens = i, .pad_tokens = 0, .num_seqs = i + 1, .kv_used = 7 * i,
                         .kv_total = 64, .num_waiting = 3 - i, .num_preempted = i == 2,
                         .sched_s = 1e-6, .tokens = 101 * i, .pass_seqs = i + 1,
                         .sampled = i, .kv_tokens = 3000000000LL + i,
                         .attn_pairs = 5000000000LL * i, .host_s = 2e-5};
        ck_assert_msg(rec_step(r, id, &st) == 0, "%s", rec_errmsg(r));
    }
    rec_token_t t0 = {.req_id = 0, .idx = 0, .token_id = 17, .t_s = 1.25};
    rec_token_t t1 = {.req_id = 0, .idx = 1, .token_id = -1, .t_s = 1.75};
    ck_assert(rec_token(r, id, &t0) == 0 && rec_token(r, id, &t1) == 0);
    ck_assert_msg(rec_run_end(r, id, 1, "ignored when ok", 0.125) == 0, "%s", rec_errmsg(r));
    ck_assert_ptr_null(rec_errmsg(r));

    sqlite3 *db = peek(path);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", s, sizeof s), "done");
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs", s, sizeof s), "r1");
    ck_assert_str_eq(qstr(db, "SELECT kind FROM runs", s, sizeof s), "sim");
    ck_assert_str_eq(qstr(db, "SELECT policy FROM runs", s, sizeof s), "policies/continuous.lua");
    ck_assert_str_eq(qstr(db, "SELECT params ->> '$.max_batch' FROM runs", s, sizeof s), "8");
    ck_assert_str_eq(qstr(db, "SELECT config ->> '$.blocks' FROM runs", s, sizeof s), "100");
    ck_assert_str_eq(qstr(db, "SELECT error FROM runs", s, sizeof s), "(null)");
    ck_assert_int_eq(qint(db, "SELECT seed FROM runs"), 42);
    ASSERT_NEAR(qdbl(db, "SELECT wall_s FROM runs"), 0.125);
    /* started_at: UTC ISO-8601, e.g. 2025-01-31T12:34:56Z */
    qstr(db, "SELECT started_at FROM runs", s, sizeof s);
    ck_assert_int_eq(strlen(s), 20);
    ck_assert(s[4] == '-' && s[10] == 'T' && s[19] == 'Z');

    snprintf(sql, sizeof sql, "SELECT count(*) FROM requests WHERE run_id = %lld", (long long)id);
    ck_assert_int_eq(qint(db, sql), 4);
    ASSERT_NEAR(qdbl(db, "SELECT ttft_s FROM requests WHERE req_id = 0"), 0.75);
    ASSERT_NEAR(qdbl(db, "SELECT e2e_s FROM requests WHERE req_id = 0"), 2.75);
    ASSERT_NEAR(qdbl(db, "SELECT tpot_s FROM requests WHERE req_id = 0"), 0.5);
    ASSERT_NEAR(qdbl(db, "SELECT queue_s FROM requests WHERE req_id = 0"), 0.25);
    ck_assert_int_eq(qint(db, "SELECT preemptions FROM requests WHERE req_id = 0"), 2);
    ck_assert_int_eq(qint(db, "SELECT spec_proposed FROM requests WHERE req_id = 0"), 12);
    ck_assert_int_eq(qint(db, "SELECT spec_accepted FROM requests WHERE req_id = 0"), 7);
    ck_assert_int_eq(qint(db, "SELECT prompt_tokens FROM requests WHERE req_id = 0"), 123);

    ASSERT_NEAR(qdbl(db, "SELECT ttft_s FROM requests WHERE req_id = 1"), 1.0);
    ASSERT_NEAR(qdbl(db, "SELECT e2e_s FROM requests WHERE req_id = 1"), 1.0);
    ck_assert(isnan(qdbl(db, "SELECT tpot_s FROM requests WHERE req_id = 1")));

    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests WHERE req_id = 2 AND "
                              "first_scheduled_s IS NULL AND first_token_s IS NULL AND "
                              "finish_s IS NULL AND ttft_s IS NULL AND tpot_s IS NULL AND "
                              "e2e_s IS NULL AND queue_s IS NULL"), 1);
    ASSERT_NEAR(qdbl(db, "SELECT arrival_s FROM requests WHERE req_id = 2"), 2.0);
    ck_assert_str_eq(qstr(db, "SELECT status FROM requests WHERE req_id = 2", s, sizeof s),
                     "rejected");
    ck_assert_str_eq(qstr(db, "SELECT reason FROM requests WHERE req_id = 2", s, sizeof s),
                     "prompt longer than the KV cache");
    ck_assert_int_eq(qint(db, "SELECT output_tokens FROM requests WHERE req_id = 2"), 300);

    ASSERT_NEAR(qdbl(db, "SELECT ttft_s FROM requests WHERE req_id = 3"), 1.0);
    ASSERT_NEAR(qdbl(db, "SELECT queue_s FROM requests WHERE req_id = 3"), 0.5);
    ck_assert(isnan(qdbl(db, "SELECT e2e_s FROM requests WHERE req_id = 3")));
    ck_assert(isnan(qdbl(db, "SELECT tpot_s FROM requests WHERE req_id = 3")));
    ck_assert_int_eq(qint(db, "SELECT generated_tokens FROM requests WHERE req_id = 3"), 2);

    ck_assert_int_eq(qint(db, "SELECT count(*) FROM steps"), 3);
    ck_assert_int_eq(qint(db, "SELECT prefill_tokens FROM steps WHERE step = 2"), 200);
    ck_assert_int_eq(qint(db, "SELECT kv_used FROM steps WHERE step = 2"), 14);
    ck_assert_int_eq(qint(db, "SELECT num_preempted FROM steps WHERE step = 2"), 1);
    ck_assert_int_eq(qint(db, "SELECT num_waiting FROM steps WHERE step = 0"), 3);
    ASSERT_NEAR(qdbl(db, "SELECT start_s FROM steps WHERE step = 1"), 0.1);
    ASSERT_NEAR(qdbl(db, "SELECT sched_s FROM steps WHERE step = 1"), 1e-6);
    /* the forward-pass features, 64-bit where they need it */
    ck_assert_int_eq(qint(db, "SELECT tokens FROM steps WHERE step = 2"), 202);
    ck_assert_int_eq(qint(db, "SELECT pass_seqs FROM steps WHERE step = 2"), 3);
    ck_assert_int_eq(qint(db, "SELECT sampled FROM steps WHERE step = 2"), 2);
    ck_assert_int_eq(qint(db, "SELECT kv_tokens = 3000000002 FROM steps WHERE step = 2"), 1);
    ck_assert_int_eq(qint(db, "SELECT attn_pairs = 10000000000 FROM steps WHERE step = 2"), 1);
    ASSERT_NEAR(qdbl(db, "SELECT host_s FROM steps WHERE step = 1"), 2e-5);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM tokens"), 2);
    ck_assert_int_eq(qint(db, "SELECT token_id FROM tokens WHERE idx = 1"), -1);
    ck_assert_str_eq(qstr(db, "SELECT value FROM meta WHERE key = 'schema_version'", s, sizeof s),
                     "7");
    ck_assert_str_eq(qstr(db, "PRAGMA journal_mode", s, sizeof s), "wal");
    sqlite3_close(db);
    rec_close(r);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_names) {
    char path[256], s[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named(NULL);
    ck_assert_int_eq(begin_ok(r, &in), 1);
    in.kind = "engine";
    in.policy = NULL;
    ck_assert_int_eq(begin_ok(r, &in), 2);
    /* A hand-chosen name equal to the next default one: the default gets a suffix. */
    in = info_named("sim-x-4");
    ck_assert_int_eq(begin_ok(r, &in), 3);
    in = info_named(NULL);
    in.policy = "/abs/path/x.lua";
    ck_assert_int_eq(begin_ok(r, &in), 4);
    in.policy = "chunked_prefill";   /* no directory, no extension */
    ck_assert_int_eq(begin_ok(r, &in), 5);

    /* Duplicate: refused with the documented message; the recorder stays usable. */
    in = info_named("sim-continuous-1");
    int64_t id = 99;
    ck_assert_int_eq(rec_run_begin(r, &in, &id), -1);
    char want[512];
    snprintf(want, sizeof want,
             "run name 'sim-continuous-1' already exists in %s (choose another --name)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    ck_assert_int_eq(id, 99);
    in = info_named("fresh");
    ck_assert_int_eq(begin_ok(r, &in), 6);

    /* Bad kind, empty name and invalid JSON are refused before anything is written. */
    in.name = "k";
    in.kind = "replay";
    ck_assert_int_eq(rec_run_begin(r, &in, &id), -1);
    ck_assert_str_eq(rec_errmsg(r), "run kind must be 'sim', 'engine', 'serve' or 'measured' (got 'replay')");
    in = info_named("");
    ck_assert_int_eq(rec_run_begin(r, &in, &id), -1);
    in = info_named("badjson");
    in.params = "{not json";
    ck_assert_int_eq(rec_run_begin(r, &in, &id), -1);
    ck_assert_msg(strstr(rec_errmsg(r), "cannot record run 'badjson'") != NULL, "%s",
                  rec_errmsg(r));
    rec_close(r);

    sqlite3 *db = peek(path);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM runs"), 6);
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs WHERE id = 1", s, sizeof s),
                     "sim-continuous-1");
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs WHERE id = 2", s, sizeof s), "engine-run-2");
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs WHERE id = 4", s, sizeof s), "sim-x-4-2");
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs WHERE id = 5", s, sizeof s),
                     "sim-chunked_prefill-5");
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_running_visible) {
    char path[256], s[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named("live");
    int64_t id = begin_ok(r, &in);
    for (int i = 0; i < 10; i++) {
        rec_request_t q = req(i, i, i, i + 1, i + 2, 3, "finished");
        ck_assert(rec_request(r, id, &q) == 0);
    }
    sqlite3 *db = peek(path);
    /* The run row is committed at begin; the batched rows are not yet. */
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", s, sizeof s), "running");
    ck_assert(isnan(qdbl(db, "SELECT wall_s FROM runs")));
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests"), 0);
    ck_assert_int_eq(rec_flush(r), 0);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests"), 10);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", s, sizeof s), "running");
    ck_assert_int_eq(rec_run_end(r, id, 1, NULL, 2.5), 0);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", s, sizeof s), "done");
    ASSERT_NEAR(qdbl(db, "SELECT wall_s FROM runs"), 2.5);

    /* Ending an unknown run is an error, and does not lose pending rows. */
    int64_t id2 = begin_ok(r, &(rec_run_info_t){.name = "other", .kind = "engine"});
    rec_request_t q = req(0, 0, 0, 1, 2, 2, "finished");
    ck_assert(rec_request(r, id2, &q) == 0);
    ck_assert_int_eq(rec_run_end(r, 777, 1, NULL, 1), -1);
    char want[512];
    snprintf(want, sizeof want, "no run with id 777 in %s", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests WHERE run_id = 2"), 1);

    /* rec_close without rec_run_end: rows committed, run left 'running' as a crash would. */
    rec_request_t q1 = req(1, 0, 0, 1, 2, 2, "finished");
    ck_assert(rec_request(r, id2, &q1) == 0);
    rec_close(r);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests WHERE run_id = 2"), 2);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs WHERE id = 2", s, sizeof s), "running");
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_failed_run_keeps_rows) {
    char path[256], s[600];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named("boom");
    int64_t id = begin_ok(r, &in);
    for (int i = 0; i < 3; i++) {
        rec_request_t q = req(i, 0, 0, 1, 2, 2, "finished");
        ck_assert(rec_request(r, id, &q) == 0);
    }
    rec_step_t st = {.step = 0};
    ck_assert(rec_step(r, id, &st) == 0);
    rec_request_t dup = req(1, 0, 0, 1, 2, 2, "finished");
    ck_assert_int_eq(rec_request(r, id, &dup), -1);
    ck_assert_str_eq(rec_errmsg(r), "run 1: duplicate request 1");
    ck_assert_int_eq(rec_step(r, id, &st), -1);
    ck_assert_str_eq(rec_errmsg(r), "run 1: duplicate step 0");
    rec_request_t bad = req(9, 0, 0, 1, 2, 2, "lost");
    ck_assert_int_eq(rec_request(r, id, &bad), -1);
    ck_assert_str_eq(rec_errmsg(r),
                     "run 1: request 9: status 'lost' is not finished, rejected or aborted");
    /* The caller passes the recorder's own message as the run's error. */
    ck_assert_int_eq(rec_run_end(r, id, 0, rec_errmsg(r), 0.5), 0);
    rec_close(r);

    sqlite3 *db = peek(path);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", s, sizeof s), "failed");
    ck_assert_str_eq(qstr(db, "SELECT error FROM runs", s, sizeof s),
                     "run 1: request 9: status 'lost' is not finished, rejected or aborted");
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests"), 3);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM steps"), 1);
    sqlite3_close(db);

    /* A failed run without a message still says it failed. */
    r = open_ok(path);
    in = info_named("boom2");
    id = begin_ok(r, &in);
    ck_assert_int_eq(rec_run_end(r, id, 0, NULL, -1), 0);
    rec_close(r);
    db = peek(path);
    ck_assert_str_eq(qstr(db, "SELECT error FROM runs WHERE id = 2", s, sizeof s),
                     "failed without a message");
    ck_assert(isnan(qdbl(db, "SELECT wall_s FROM runs WHERE id = 2")));
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_batching) {
    char path[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named("big");
    int64_t id = begin_ok(r, &in);
    sqlite3 *db = peek(path);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 50000; i++) {
        rec_step_t st = {.step = i, .start_s = i * 1e-3, .dur_s = 1e-3, .decode_tokens = i % 64,
                         .num_seqs = i % 64, .kv_total = 1000};
        ck_assert(rec_step(r, id, &st) == 0);
    }
    long long steps_seen = qint(db, "SELECT count(*) FROM steps");
    for (int i = 0; i < 10000; i++) {
        rec_token_t t = {.req_id = i / 100, .idx = i % 100, .token_id = i, .t_s = i * 1e-3};
        ck_assert(rec_token(r, id, &t) == 0);
    }
    long long steps_seen2 = qint(db, "SELECT count(*) FROM steps");
    long long tokens_seen = qint(db, "SELECT count(*) FROM tokens");
    clock_gettime(CLOCK_MONOTONIC, &t1);
    /* Full batches of 20,000 rows commit as they fill; the remainder stays pending. Exact
     * only when the half-second limit cannot have committed earlier (not under valgrind). */
    ck_assert_int_ge(steps_seen, 40000);
    if ((t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec) < 0.45) {
        ck_assert_int_eq(steps_seen, 40000);
        /* 10,000 pending steps + 10,000 tokens completed the third batch. */
        ck_assert_int_eq(steps_seen2, 50000);
        ck_assert_int_eq(tokens_seen, 10000);
    }
    for (int i = 10000; i < 25000; i++) {
        rec_token_t t = {.req_id = i / 100, .idx = i % 100, .token_id = i, .t_s = i * 1e-3};
        ck_assert(rec_token(r, id, &t) == 0);
    }
    ck_assert_int_eq(rec_run_end(r, id, 1, NULL, 1), 0);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM steps"), 50000);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM tokens"), 25000);
    ck_assert_int_eq(qint(db, "SELECT sum(decode_tokens) FROM steps"), 781 * 2016 + 16 * 15 / 2);
    sqlite3_close(db);
    rec_close(r);
    testutil_unlink_db(path);
}
END_TEST

/* A slow producer still commits about every half second, releasing the write lock. */
START_TEST(test_batch_time_limit) {
    char path[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named("slow");
    int64_t id = begin_ok(r, &in);
    sqlite3 *db = peek(path);
    for (int i = 0; i < 5; i++) {
        rec_step_t st = {.step = i};
        ck_assert(rec_step(r, id, &st) == 0);
        if (i == 3) usleep(600 * 1000);
    }
    /* The fifth row came after the limit and committed the batch. */
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM steps"), 5);
    sqlite3_close(db);
    rec_close(r);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_unwritable_path) {
    rec_t *r = rec_open("/nonexistent/dir/x.db");
    ck_assert(r != NULL);
    ck_assert_str_eq(rec_errmsg(r),
                     "cannot open database '/nonexistent/dir/x.db': unable to open database file");
    /* Every later call fails with the same message instead of crashing. */
    rec_run_info_t in = info_named("x");
    int64_t id;
    ck_assert_int_eq(rec_run_begin(r, &in, &id), -1);
    rec_request_t q = req(0, 0, 0, 1, 2, 2, "finished");
    ck_assert_int_eq(rec_request(r, 1, &q), -1);
    ck_assert_int_eq(rec_run_end(r, 1, 1, NULL, 0), -1);
    ck_assert_int_eq(rec_flush(r), -1);
    ck_assert_ptr_null(rec_db(r));
    ck_assert_str_eq(rec_errmsg(r),
                     "cannot open database '/nonexistent/dir/x.db': unable to open database file");
    rec_close(r);

    /* A directory component that is a regular file. */
    char file[256], path[300], want[400];
    ck_assert(testutil_write_tmp(file, sizeof file, ".txt", "x") != NULL);
    snprintf(path, sizeof path, "%s/x.db", file);
    r = rec_open(path);
    snprintf(want, sizeof want, "cannot open database '%s': unable to open database file", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    unlink(file);

    /* A read-only directory (root ignores permissions, so only as a normal user). */
    if (geteuid() != 0) {
        char dir[] = "/tmp/twintest-roXXXXXX";
        ck_assert(mkdtemp(dir) != NULL);
        chmod(dir, 0555);
        snprintf(path, sizeof path, "%s/x.db", dir);
        r = rec_open(path);
        snprintf(want, sizeof want, "cannot open database '%s': ", path);
        ck_assert_msg(rec_errmsg(r) && strncmp(rec_errmsg(r), want, strlen(want)) == 0, "%s",
                      rec_errmsg(r));
        rec_close(r);
        chmod(dir, 0755);
        rmdir(dir);
    }
    ck_assert_str_eq(rec_errmsg(NULL), "out of memory");
    rec_close(NULL);
}
END_TEST

START_TEST(test_not_sqlite) {
    char path[256], want[400];
    const char *text = "arrival_s,prompt_tokens,output_tokens\n0.0,10,20\n";
    ck_assert(testutil_write_tmp(path, sizeof path, ".db", text) != NULL);
    rec_t *r = rec_open(path);
    snprintf(want, sizeof want, "cannot open database '%s': file is not a database", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    /* The file is left as it was. */
    FILE *f = fopen(path, "r");
    char buf[256] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    ck_assert_int_eq(n, strlen(text));
    ck_assert_str_eq(buf, text);
    testutil_unlink_db(path);
}
END_TEST

static void make_foreign(const char *path, const char *sql) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
}

START_TEST(test_incompatible_dbs) {
    char path[256], want[512];
    /* A newer schema version. */
    tmpdb(path, sizeof path);
    rec_close(open_ok(path));
    make_foreign(path, "UPDATE meta SET value = '8' WHERE key = 'schema_version'");
    rec_t *r = rec_open(path);
    snprintf(want, sizeof want,
             "cannot open database '%s': schema_version 8 is newer than this twinserve (7)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    make_foreign(path, "UPDATE meta SET value = 'banana' WHERE key = 'schema_version'");
    r = rec_open(path);
    ck_assert_msg(strstr(rec_errmsg(r), "unknown schema_version 'banana'") != NULL, "%s",
                  rec_errmsg(r));
    rec_close(r);
    testutil_unlink_db(path);

    /* A version-1 database (before requests.cached_tokens): refused as older, by its
     * version, not as a foreign database lacking a column; the file is left as it was. */
    tmpdb(path, sizeof path);
    rec_close(open_ok(path));
    make_foreign(path, "DROP VIEW request_metrics; ALTER TABLE requests DROP COLUMN cached_tokens;"
                       "UPDATE meta SET value = '1' WHERE key = 'schema_version'");
    r = rec_open(path);
    snprintf(want, sizeof want,
             "cannot open database '%s': schema_version 1 is older than this twinserve (7)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    sqlite3 *old = peek(path);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM pragma_table_info('requests') "
                               "WHERE name = 'cached_tokens'"), 0);
    sqlite3_close(old);
    testutil_unlink_db(path);

    /* A version-2 database (before the steps' forward-pass features): refused as older,
     * and left as it was. */
    tmpdb(path, sizeof path);
    rec_close(open_ok(path));
    make_foreign(path, "ALTER TABLE steps DROP COLUMN host_s; ALTER TABLE steps DROP COLUMN "
                       "attn_pairs; ALTER TABLE steps DROP COLUMN kv_tokens; ALTER TABLE steps "
                       "DROP COLUMN sampled; ALTER TABLE steps DROP COLUMN pass_seqs; ALTER "
                       "TABLE steps DROP COLUMN tokens; "
                       "UPDATE meta SET value = '2' WHERE key = 'schema_version'");
    r = rec_open(path);
    snprintf(want, sizeof want,
             "cannot open database '%s': schema_version 2 is older than this twinserve (7)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    old = peek(path);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM pragma_table_info('steps') "
                               "WHERE name = 'kv_tokens'"), 0);
    sqlite3_close(old);
    testutil_unlink_db(path);

    /* A version-3 database (its runs.kind CHECK knows no 'measured' run): the same columns,
     * so only the version tells it apart; refused as older, and left as it was. */
    tmpdb(path, sizeof path);
    rec_close(open_ok(path));
    make_foreign(path, "UPDATE meta SET value = '3' WHERE key = 'schema_version'");
    r = rec_open(path);
    snprintf(want, sizeof want,
             "cannot open database '%s': schema_version 3 is older than this twinserve (7)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    old = peek(path);
    ck_assert_int_eq(qint(old, "SELECT value FROM meta WHERE key = 'schema_version'"), 3);
    sqlite3_close(old);
    testutil_unlink_db(path);

    /* A version-4 database (before the requests' trace metadata): refused as older, and
     * left as it was. */
    tmpdb(path, sizeof path);
    rec_close(open_ok(path));
    make_foreign(path, "DROP VIEW request_metrics; ALTER TABLE requests DROP COLUMN priority; "
                       "ALTER TABLE requests DROP COLUMN tenant; ALTER TABLE requests DROP "
                       "COLUMN deadline_s; "
                       "UPDATE meta SET value = '4' WHERE key = 'schema_version'");
    r = rec_open(path);
    snprintf(want, sizeof want,
             "cannot open database '%s': schema_version 4 is older than this twinserve (7)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    old = peek(path);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM pragma_table_info('requests') "
                               "WHERE name = 'tenant'"), 0);
    sqlite3_close(old);
    testutil_unlink_db(path);

    /* A version-5 database (before the cluster's columns and table): a reader refuses it
     * with the hint; the recorder upgrades it in place (rec_upgrade_db), its rows becoming
     * replica 0's, and the replicas table is created. */
    tmpdb(path, sizeof path);
    r = open_ok(path);
    int64_t id5;
    ck_assert_int_eq(rec_run_begin(r, &(rec_run_info_t){ .kind = "sim", .policy = "p.lua" },
                                   &id5), 0);
    ck_assert_int_eq(rec_request(r, id5, &(rec_request_t){ .req_id = 0, .arrival_s = 0,
                     .prompt_tokens = 4, .output_tokens = 2, .first_scheduled_s = -1,
                     .first_token_s = -1, .finish_s = -1, .status = "rejected",
                     .reason = "x" }), 0);
    ck_assert_int_eq(rec_run_end(r, id5, 1, NULL, 0.1), 0);
    rec_close(r);
    make_foreign(path, "DROP VIEW request_metrics; ALTER TABLE requests DROP COLUMN replica; "
                       "ALTER TABLE requests DROP COLUMN prefill_replica; ALTER TABLE requests "
                       "DROP COLUMN kv_transfer_s; ALTER TABLE steps DROP COLUMN replica; "
                       "DROP TABLE replicas; "
                       "UPDATE meta SET value = '5' WHERE key = 'schema_version'");
    old = peek(path);
    char why[512];
    ck_assert_int_eq(rec_check_db(old, why, sizeof why), -1);
    ck_assert_str_eq(why, "schema_version 5 is older than this twinserve (7): `twinserve "
                          "upgrade DB` brings it up to date in place, keeping every row");
    sqlite3_close(old);
    r = rec_open(path);
    ck_assert_ptr_null(rec_errmsg(r));
    ck_assert_int_eq(rec_upgraded_from(r), 5);
    rec_close(r);
    old = peek(path);
    ck_assert_int_eq(qint(old, "SELECT value FROM meta WHERE key = 'schema_version'"), 7);
    /* 6 -> 7 rebuilt runs with 'serve' admitted, keeping its rows and no leftover table */
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM runs"), 1);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                               "sql LIKE '%kind IN (''sim'', ''engine'', ''serve''%'"), 1);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM sqlite_master WHERE name LIKE 'runs_%'"), 0);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM requests WHERE replica = 0 AND "
                               "prefill_replica IS NULL AND reason = 'x'"), 1);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM pragma_table_info('replicas')"), 10);
    ck_assert_int_eq(qint(old, "SELECT count(*) FROM request_metrics"), 1);
    sqlite3_close(old);
    r = rec_open(path); /* current now: nothing to do */
    ck_assert_int_eq(rec_upgraded_from(r), 0);
    rec_close(r);
    testutil_unlink_db(path);

    /* Someone else's runs table. */
    tmpdb(path, sizeof path);
    make_foreign(path, "CREATE TABLE runs(id INTEGER PRIMARY KEY, label TEXT)");
    r = rec_open(path);
    snprintf(want, sizeof want, "cannot open database '%s': table 'runs' lacks column 'name' "
             "(not a twinserve database?)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    testutil_unlink_db(path);

    /* Someone else's database: left alone. */
    tmpdb(path, sizeof path);
    make_foreign(path, "CREATE TABLE photos(id INTEGER PRIMARY KEY, file TEXT)");
    r = rec_open(path);
    snprintf(want, sizeof want, "cannot open database '%s': not a twinserve database (it has "
             "tables but no schema_version)", path);
    ck_assert_str_eq(rec_errmsg(r), want);
    rec_close(r);
    sqlite3 *db = peek(path);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM sqlite_master"), 1);
    sqlite3_close(db);
    testutil_unlink_db(path);

    /* A meta table of another shape. */
    tmpdb(path, sizeof path);
    make_foreign(path, "CREATE TABLE meta(k, v)");
    r = rec_open(path);
    ck_assert_msg(strstr(rec_errmsg(r), "unreadable meta table: no such column: value") != NULL,
                  "%s", rec_errmsg(r));
    rec_close(r);
    testutil_unlink_db(path);

    /* rec_check_db on an empty database. */
    char err[256];
    ck_assert_int_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
    ck_assert_int_eq(rec_check_db(db, err, sizeof err), 0);
    sqlite3_close(db);
}
END_TEST

/* Schema 6: the cluster's columns and the replicas table, through the asynchronous writer. */
START_TEST(test_cluster_records) {
    char path[256], s[256];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    ck_assert_int_eq(rec_set_async(r, 1), 0);
    rec_run_info_t in = info_named("cl");
    int64_t id = begin_ok(r, &in);
    rec_request_t q0 = req(0, 0.5, 0.75, 1.25, 3.25, 5, "finished");
    q0.replica = 2;
    rec_request_t q1 = req(1, 1.0, -1, -1, -1, 0, "rejected");
    q1.replica = -1; /* a router rejected it: no replica */
    q1.reason = "router: full";
    rec_request_t q2 = req(2, 1.0, 1.5, 2.0, 2.5, 2, "finished");
    q2.replica = 3;
    q2.has_pd = 1;
    q2.prefill_replica = 0;
    q2.kv_transfer_s = 0.125;
    ck_assert(rec_request(r, id, &q0) == 0 && rec_request(r, id, &q1) == 0 &&
              rec_request(r, id, &q2) == 0);
    rec_step_t st = {.step = 0, .start_s = 0.1, .dur_s = 0.05, .replica = 3};
    ck_assert_msg(rec_step(r, id, &st) == 0, "%s", rec_errmsg(r));
    rec_replica_t x = {.replica = 1, .group = "pre", .role = "prefill", .model = "m",
                       .hardware = "h100 x2", .policy = "p.lua", .params = "{}", .tp = 2,
                       .kv_blocks = 99};
    ck_assert_msg(rec_replica(r, id, &x) == 0, "%s", rec_errmsg(r));
    x.role = "banana";
    x.replica = 2;
    ck_assert_int_eq(rec_replica(r, id, &x), -1);
    ck_assert_ptr_nonnull(strstr(rec_errmsg(r), "replica 2"));
    rec_close(r);
    sqlite3 *db = peek(path);
    ck_assert_str_eq(qstr(db, "SELECT group_concat(ifnull(replica, 'N') || ':' || "
                              "ifnull(prefill_replica, 'N') || ':' || ifnull(kv_transfer_s, 'N'), "
                              "' ') FROM (SELECT * FROM requests ORDER BY req_id)", s, sizeof s),
                     "2:N:N N:N:N 3:0:0.125");
    ck_assert_int_eq(qint(db, "SELECT replica FROM steps"), 3);
    ck_assert_str_eq(qstr(db, "SELECT replica || group_name || role || model || hardware || tp "
                              "|| policy || kv_blocks || params FROM replicas", s, sizeof s),
                     "1preprefillmh100 x22p.lua99{}");
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_reopen_many) {
    char path[256], sql[128];
    tmpdb(path, sizeof path);
    for (int k = 0; k < 25; k++) {
        rec_t *r = open_ok(path);
        rec_run_info_t in = info_named(NULL);
        in.kind = k % 2 ? "engine" : "sim";
        int64_t id = begin_ok(r, &in);
        ck_assert_int_eq(id, k + 1);
        for (int i = 0; i <= k; i++) {
            rec_request_t q = req(i, i, i, i + 0.5, i + 1.5, 3, "finished");
            ck_assert(rec_request(r, id, &q) == 0);
        }
        ck_assert(rec_run_end(r, id, 1, NULL, 0.01 * k) == 0);
        rec_close(r);
    }
    sqlite3 *db = peek(path);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM runs"), 25);
    ck_assert_int_eq(qint(db, "SELECT count(DISTINCT name) FROM runs"), 25);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM runs WHERE status = 'done'"), 25);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM requests"), 25 * 26 / 2);
    ck_assert_int_eq(qint(db, "SELECT count(*) FROM meta"), 1);
    for (int k = 1; k <= 25; k += 8) {
        snprintf(sql, sizeof sql, "SELECT count(*) FROM requests WHERE run_id = %d", k);
        ck_assert_int_eq(qint(db, sql), k);
    }
    char s[64];
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs WHERE id = 12", s, sizeof s),
                     "engine-continuous-12");
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

/* 1 when PATH-suffix exists. */
static int side_exists(const char *path, const char *suffix) {
    char side[300];
    snprintf(side, sizeof side, "%s%s", path, suffix);
    return access(side, F_OK) == 0;
}

/* A closed database is one plain rollback-journal file (readers in a read-only directory
 * need that); while another connection holds it, the recorder's close leaves WAL alone and
 * the last writer to close switches. */
START_TEST(test_closed_db_is_plain) {
    char path[256], s[64];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    rec_run_info_t in = info_named(NULL);
    int64_t id = begin_ok(r, &in);
    ck_assert(rec_run_end(r, id, 1, NULL, 0.1) == 0);
    sqlite3 *reader = peek(path);
    ck_assert_int_eq(qint(reader, "SELECT count(*) FROM runs"), 1);
    rec_close(r);   /* the reader is still open: BUSY, so WAL stays */
    ck_assert(side_exists(path, "-wal"));
    ck_assert_str_eq(qstr(reader, "PRAGMA journal_mode", s, sizeof s), "wal");
    sqlite3_close(reader);
    rec_close(open_ok(path));   /* the last one to close */
    ck_assert(!side_exists(path, "-wal"));
    ck_assert(!side_exists(path, "-shm"));
    reader = peek(path);
    ck_assert_str_eq(qstr(reader, "PRAGMA journal_mode", s, sizeof s), "delete");
    ck_assert_int_eq(qint(reader, "SELECT count(*) FROM runs WHERE status = 'done'"), 1);
    sqlite3_close(reader);
    ck_assert(!side_exists(path, "-wal"));
    ck_assert(!side_exists(path, "-shm"));
    testutil_unlink_db(path);
}
END_TEST

START_TEST(test_memory_db) {
    rec_t *r = open_ok(":memory:");
    rec_run_info_t in = info_named(NULL);
    int64_t id = begin_ok(r, &in);
    rec_request_t q = req(0, 0, 0.1, 0.2, 1.2, 11, "finished");
    ck_assert(rec_request(r, id, &q) == 0);
    ck_assert(rec_run_end(r, id, 1, NULL, 0.1) == 0);
    sqlite3 *db = rec_db(r);
    ck_assert_ptr_nonnull(db);
    ASSERT_NEAR(qdbl(db, "SELECT tpot_s FROM requests"), 0.1);
    char s[64];
    ck_assert_str_eq(qstr(db, "SELECT name FROM runs", s, sizeof s), "sim-continuous-1");
    rec_close(r);
}
END_TEST


/* The background writer: the same rows arrive, in order, with reasons copied; a write
 * error surfaces at the next drain and the run is marked failed with it. */
START_TEST(test_async_writer) {
    char path[256], buf[512];
    tmpdb(path, sizeof path);
    rec_t *r = open_ok(path);
    ck_assert_int_eq(rec_set_async(r, 1), 0);
    rec_run_info_t in = info_named("async1");
    int64_t id = begin_ok(r, &in);
    char reason[64];
    for (int i = 0; i < 30000; i++) {
        rec_request_t q = req(i, 0.5, 0.75, 1.25, 3.25, 5, i % 3 ? "finished" : "rejected");
        snprintf(reason, sizeof reason, "reason %d", i);
        q.reason = i % 3 ? NULL : reason; /* the buffer is reused: the queue must copy */
        ck_assert_int_eq(rec_request(r, id, &q), 0);
        rec_step_t st = {.step = i, .start_s = i, .dur_s = 0.5, .num_seqs = 1};
        ck_assert_int_eq(rec_step(r, id, &st), 0);
    }
    rec_request_t bad = req(1, 0.5, 0.75, 1.25, 3.25, 5, "sleeping");
    ck_assert_int_eq(rec_request(r, id, &bad), -1); /* status checked at once */
    ck_assert_int_eq(rec_run_end(r, id, 1, NULL, 1.0), 0);
    sqlite3 *db = peek(path);
    ck_assert_int_eq(qint(db, "SELECT COUNT(*) FROM requests"), 30000);
    ck_assert_int_eq(qint(db, "SELECT COUNT(*) FROM steps"), 30000);
    ck_assert_str_eq(qstr(db, "SELECT reason FROM requests WHERE req_id = 2997", buf, sizeof buf),
                     "reason 2997");
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs", buf, sizeof buf), "done");
    sqlite3_close(db);

    in = info_named("async2");
    id = begin_ok(r, &in);
    rec_step_t st = {.step = 7, .dur_s = 1};
    ck_assert_int_eq(rec_step(r, id, &st), 0);
    ck_assert_int_eq(rec_step(r, id, &st), 0); /* duplicate: fails in the writer */
    ck_assert_int_eq(rec_flush(r), -1);
    ck_assert_ptr_nonnull(strstr(rec_errmsg(r), "duplicate step 7"));
    ck_assert_int_eq(rec_step(r, id, &st), 0);
    ck_assert_int_eq(rec_run_end(r, id, 1, NULL, 1.0), -1);
    db = peek(path);
    ck_assert_str_eq(qstr(db, "SELECT status FROM runs WHERE name = 'async2'", buf, sizeof buf),
                     "failed");
    ck_assert_ptr_nonnull(strstr(qstr(db, "SELECT error FROM runs WHERE name = 'async2'", buf,
                                      sizeof buf), "duplicate step 7"));
    ck_assert_int_eq(qint(db, "SELECT COUNT(*) FROM steps WHERE run_id = 2"), 1);
    sqlite3_close(db);
    rec_close(r);
    testutil_unlink_db(path);
}
END_TEST

static Suite *recorder_suite(void) {
    Suite *s = suite_create("recorder");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_running_visible);
    tcase_add_test(tc, test_failed_run_keeps_rows);
    tcase_add_test(tc, test_batching);
    tcase_add_test(tc, test_batch_time_limit);
    tcase_add_test(tc, test_unwritable_path);
    tcase_add_test(tc, test_not_sqlite);
    tcase_add_test(tc, test_incompatible_dbs);
    tcase_add_test(tc, test_cluster_records);
    tcase_add_test(tc, test_reopen_many);
    tcase_add_test(tc, test_closed_db_is_plain);
    tcase_add_test(tc, test_memory_db);
    tcase_add_test(tc, test_async_writer);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(recorder_suite());
}

/* test_merge: traces/merge.h, databases merged into one: every table that refers to runs
 * (found in the database), ids renumbered, a clashing run, experiment or sweep renamed as a
 * group with its config tags, refused inputs (schema version, not a database, missing, the
 * output itself) and a failed input leaving the output as it was. */
#include "traces/merge.h"
#include "testutil.h"

static char out_path[256], in1[256], in2[256];

static void setup(void) {
    ck_assert_ptr_nonnull(testutil_tmpfile(out_path, sizeof out_path, ".db"));
    ck_assert_ptr_nonnull(testutil_tmpfile(in1, sizeof in1, ".db"));
    ck_assert_ptr_nonnull(testutil_tmpfile(in2, sizeof in2, ".db"));
    unlink(out_path);
    unlink(in1);
    unlink(in2);
}

static void teardown(void) {
    testutil_unlink_db(out_path);
    testutil_unlink_db(in1);
    testutil_unlink_db(in2);
}

/* One run named name with config (JSON) into path: nreq requests, as many steps, one token
 * per request; ok = 0 leaves it 'running'. */
static void add_run(const char *path, const char *name, const char *config, int nreq, int ok) {
    rec_t *r = rec_open(path);
    ck_assert_msg(r && !rec_errmsg(r), "%s", r ? rec_errmsg(r) : "oom");
    rec_run_info_t in = { .name = name, .kind = "sim", .policy = "p.lua", .params = "{}",
                          .trace = "t.csv", .model = "m", .hardware = "h", .seed = 7,
                          .version = "test", .config = config };
    int64_t id;
    ck_assert_msg(rec_run_begin(r, &in, &id) == 0, "%s", rec_errmsg(r));
    for (int i = 0; i < nreq; i++) {
        rec_request_t q = { .req_id = i, .arrival_s = 0.1 * i, .prompt_tokens = 10 + i,
                            .output_tokens = 2, .generated_tokens = 2,
                            .first_scheduled_s = 0.1 * i, .first_token_s = 0.1 * i + 0.01,
                            .finish_s = 0.1 * i + 0.02, .status = "finished" };
        rec_step_t s = { .step = i, .start_s = 0.1 * i, .dur_s = 0.01, .num_seqs = 1 };
        rec_token_t t = { .req_id = i, .idx = 0, .token_id = -1, .t_s = 0.1 * i + 0.01 };
        ck_assert(rec_request(r, id, &q) == 0 && rec_step(r, id, &s) == 0 &&
                  rec_token(r, id, &t) == 0);
    }
    if (ok) ck_assert_msg(rec_run_end(r, id, 1, NULL, 0.5) == 0, "%s", rec_errmsg(r));
    else ck_assert(rec_flush(r) == 0);
    rec_close(r);
}

static void exec_sql(const char *path, const char *sql) {
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
}

static int64_t q_i64(const char *path, const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* The one text value of sql in path into buf ("" for NULL). */
static const char *q_text(const char *path, const char *sql, char *buf, size_t len) {
    sqlite3 *db;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(db));
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    const char *t = (const char *)sqlite3_column_text(st, 0);
    snprintf(buf, len, "%s", t ? t : "");
    sqlite3_finalize(st);
    sqlite3_close(db);
    return buf;
}

static char notes[4096];
static void collect(void *ud, const char *msg) {
    (void)ud;
    size_t n = strlen(notes);
    snprintf(notes + n, sizeof notes - n, "%s\n", msg);
}

static merge_t *open_out(void) {
    merge_t *m = merge_open(out_path);
    ck_assert_ptr_nonnull(m);
    ck_assert_msg(merge_errmsg(m) == NULL, "%s", merge_errmsg(m));
    notes[0] = 0;
    merge_set_notes(m, collect, NULL);
    return m;
}

START_TEST(copies_every_table_renumbered) {
    add_run(in1, "a", NULL, 3, 1);
    add_run(in1, "b", NULL, 2, 1);
    add_run(in2, "c", NULL, 4, 1);
    /* A table this file does not list, referring to runs: found in the database. */
    const char *extra = "CREATE TABLE extra(run_id INTEGER NOT NULL REFERENCES runs(id), v TEXT)";
    exec_sql(in2, extra);
    exec_sql(in2, "INSERT INTO extra VALUES (1, 'x'), (1, 'y')");
    merge_t *m = open_out();
    exec_sql(out_path, extra);
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    ck_assert_int_eq(merge_n_runs(m), 2);
    ck_assert_int_eq(merge_run_id(m, 0), 1);
    ck_assert_int_eq(merge_run_id(m, 1), 2);
    ck_assert_msg(merge_add(m, in2) == 0, "%s", merge_errmsg(m));
    ck_assert_int_eq(merge_n_runs(m), 1);
    ck_assert_int_eq(merge_run_old_id(m, 0), 1);
    ck_assert_int_eq(merge_run_id(m, 0), 3);
    ck_assert_str_eq(merge_run_name(m, 0), "c");
    merge_close(m);
    ck_assert_int_eq(q_i64(out_path, "SELECT id FROM runs WHERE name = 'c'"), 3);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM requests WHERE run_id = 3"), 4);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM steps WHERE run_id = 3"), 4);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM tokens WHERE run_id = 3"), 4);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM requests WHERE run_id = 2"), 2);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM extra WHERE run_id = 3"), 2);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM extra"), 2);
    /* The derived metrics come over as recorded. */
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM requests AS o JOIN (SELECT 1) "
                           "WHERE o.run_id = 3 AND abs(o.ttft_s - 0.01) < 1e-12"), 4);
    ck_assert_str_eq(notes, "");
}
END_TEST

START_TEST(clashes_renamed_as_groups) {
    char buf[512];
    /* in1: a plain run, an experiment of two, a repeated sweep's points. */
    const char *e0 = "{\"experiment\":{\"name\":\"E\",\"index\":0,\"of\":2,\"seed\":0}}";
    const char *e1 = "{\"experiment\":{\"name\":\"E\",\"index\":1,\"of\":2,\"seed\":1}}";
    const char *s0 = "{\"sweep\":{\"name\":\"S\",\"rate_rps\":1,\"scale\":0.5},"
                     "\"experiment\":{\"name\":\"S@1rps\",\"index\":0,\"of\":1,\"seed\":0}}";
    add_run(in1, "plain", NULL, 1, 1);
    add_run(in1, "E-r0", e0, 1, 1);
    add_run(in1, "E-r1", e1, 1, 1);
    add_run(in1, "S@1rps-r0", s0, 1, 1);
    merge_t *m = open_out();
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    ck_assert_str_eq(notes, "");
    /* The same database again: every group clashes. */
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    ck_assert_int_eq(merge_n_runs(m), 4);
    ck_assert_str_eq(merge_run_name(m, 0), "plain-2");
    ck_assert_str_eq(merge_run_name(m, 1), "E-2-r0");
    ck_assert_str_eq(merge_run_name(m, 2), "E-2-r1");
    ck_assert_str_eq(merge_run_name(m, 3), "S-2@1rps-r0");
    ck_assert_ptr_nonnull(strstr(notes, "run 'plain' renamed 'plain-2'"));
    ck_assert_ptr_nonnull(strstr(notes, "experiment 'E' renamed 'E-2' (2 runs"));
    ck_assert_ptr_nonnull(strstr(notes, "sweep 'S' renamed 'S-2'"));
    /* A third time: -2 is taken too (as a name, and as an experiment and a sweep). */
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    ck_assert_str_eq(merge_run_name(m, 1), "E-3-r0");
    ck_assert_str_eq(merge_run_name(m, 3), "S-3@1rps-r0");
    merge_close(m);
    ck_assert_str_eq(q_text(out_path, "SELECT json_extract(config, '$.experiment.name') FROM "
                            "runs WHERE name = 'E-2-r1'", buf, sizeof buf), "E-2");
    ck_assert_int_eq(q_i64(out_path, "SELECT json_extract(config, '$.experiment.index') FROM "
                           "runs WHERE name = 'E-2-r1'"), 1);
    ck_assert_str_eq(q_text(out_path, "SELECT json_extract(config, '$.sweep.name') FROM runs "
                            "WHERE name = 'S-2@1rps-r0'", buf, sizeof buf), "S-2");
    ck_assert_str_eq(q_text(out_path, "SELECT json_extract(config, '$.experiment.name') FROM "
                            "runs WHERE name = 'S-2@1rps-r0'", buf, sizeof buf), "S-2@1rps");
    /* Unrenamed runs keep their config untouched. */
    ck_assert_str_eq(q_text(out_path, "SELECT config FROM runs WHERE name = 'E-r1'", buf,
                            sizeof buf), e1);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs"), 12);
}
END_TEST

START_TEST(sweep_points_rejoin) {
    /* One sweep's points from separate databases (emitted jobs): no clash, one sweep. */
    merge_t *m;
    add_run(in1, "S@1rps", "{\"sweep\":{\"name\":\"S\",\"rate_rps\":1,\"scale\":0.5}}", 2, 1);
    add_run(in2, "S@2rps", "{\"sweep\":{\"name\":\"S\",\"rate_rps\":2,\"scale\":1}}", 2, 1);
    m = open_out();
    ck_assert(merge_add(m, in1) == 0 && merge_add(m, in2) == 0);
    merge_close(m);
    ck_assert_str_eq(notes, "");
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs WHERE "
                           "json_extract(config, '$.sweep.name') = 'S'"), 2);
    /* Both again in one merge: renamed, and rejoined as the one sweep S-2 (not S-2, S-3). */
    m = open_out();
    ck_assert(merge_add(m, in1) == 0);
    ck_assert_str_eq(merge_run_name(m, 0), "S-2@1rps");
    ck_assert(merge_add(m, in2) == 0);
    ck_assert_str_eq(merge_run_name(m, 0), "S-2@2rps");
    merge_close(m);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs WHERE "
                           "json_extract(config, '$.sweep.name') = 'S-2'"), 2);
}
END_TEST

START_TEST(refuses_other_schema_version) {
    add_run(in1, "a", NULL, 1, 1);
    add_run(in2, "b", NULL, 1, 1);
    exec_sql(in2, "UPDATE meta SET value = '4' WHERE key = 'schema_version'");
    merge_t *m = open_out();
    ck_assert_int_eq(merge_add(m, in2), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), in2));
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "schema_version 4 is older"));
    ck_assert_int_eq(merge_n_runs(m), 0);
    /* The object stays usable: the next input merges. */
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    ck_assert_ptr_null(merge_errmsg(m));
    merge_close(m);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs"), 1);
}
END_TEST

START_TEST(refuses_bad_inputs) {
    char junk[256];
    ck_assert_ptr_nonnull(testutil_write_tmp(junk, sizeof junk, ".db", "not sqlite at all, "
                                             "just text that is long enough to be a header\n"));
    exec_sql(in2, "CREATE TABLE other(x)");
    merge_t *m = open_out();
    ck_assert_int_eq(merge_add(m, "/nonexistent/x.db"), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "/nonexistent/x.db: no such database file"));
    ck_assert_int_eq(merge_add(m, junk), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "not a database"));
    ck_assert_int_eq(merge_add(m, in2), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "not a twinserve database"));
    ck_assert_int_eq(merge_add(m, out_path), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "the output database itself"));
    merge_close(m);
    unlink(junk);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs"), 0);
    /* An output that is not ours is refused at open. */
    m = merge_open(in2);
    ck_assert_ptr_nonnull(m);
    ck_assert_ptr_nonnull(merge_errmsg(m));
    ck_assert_int_eq(merge_add(m, in1), -1);
    merge_close(m);
}
END_TEST

START_TEST(failed_input_leaves_output_unchanged) {
    add_run(in1, "a", NULL, 2, 1);
    add_run(in2, "b", NULL, 2, 1);
    merge_t *m = open_out();
    ck_assert(merge_add(m, in1) == 0);
    /* Fail after the runs and requests of in2 are copied: the steps insert aborts. */
    exec_sql(out_path, "CREATE TRIGGER boom BEFORE INSERT ON steps BEGIN "
                       "SELECT RAISE(ABORT, 'boom'); END");
    ck_assert_int_eq(merge_add(m, in2), -1);
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), "boom"));
    ck_assert_ptr_nonnull(strstr(merge_errmsg(m), in2));
    merge_close(m);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs"), 1);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM requests"), 2);
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM steps"), 2);
}
END_TEST

START_TEST(running_run_merged_with_note) {
    add_run(in1, "unfinished", NULL, 1, 0);
    merge_t *m = open_out();
    ck_assert_msg(merge_add(m, in1) == 0, "%s", merge_errmsg(m));
    merge_close(m);
    ck_assert_ptr_nonnull(strstr(notes, "run 'unfinished' is still 'running'"));
    ck_assert_int_eq(q_i64(out_path, "SELECT count(*) FROM runs WHERE status = 'running'"), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("merge");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, copies_every_table_renumbered);
    tcase_add_test(tc, clashes_renamed_as_groups);
    tcase_add_test(tc, sweep_points_rejoin);
    tcase_add_test(tc, refuses_other_schema_version);
    tcase_add_test(tc, refuses_bad_inputs);
    tcase_add_test(tc, failed_input_leaves_output_unchanged);
    tcase_add_test(tc, running_run_merged_with_note);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_report_replicas: the per-replica breakdown of a cluster run (analysis/report_replicas.h)
 * on hand-made records: requests served, busy time, time-weighted KV use, cache hit rate and
 * mean TTFT per replica; a router's rejection counts for none; one replica prints nothing. */
#include "analysis/report.h"
#include "tests/testutil.h"

static int64_t begin(rec_t *r, const char *name) {
    rec_run_info_t in = {.name = name, .kind = "sim", .policy = "p.lua", .params = "{}",
                         .trace = "t.csv", .model = "m", .hardware = "h", .version = "t"};
    int64_t id = -1;
    ck_assert_msg(rec_run_begin(r, &in, &id) == 0, "%s", rec_errmsg(r));
    return id;
}

static void request(rec_t *r, int64_t run, int id, int replica, double arr, double first,
                    int prompt, int cached, const char *status) {
    rec_request_t q = {.req_id = id, .arrival_s = arr, .prompt_tokens = prompt,
                       .output_tokens = 4, .generated_tokens = first >= 0 ? 4 : 0,
                       .first_scheduled_s = first >= 0 ? arr : -1, .first_token_s = first,
                       .finish_s = first >= 0 ? first + 1 : -1, .cached_tokens = cached,
                       .status = status, .replica = replica};
    ck_assert_msg(rec_request(r, run, &q) == 0, "%s", rec_errmsg(r));
}

static void step(rec_t *r, int64_t run, int n, int replica, double start, double dur, int used) {
    rec_step_t s = {.step = n, .start_s = start, .dur_s = dur, .kv_used = used, .kv_total = 100,
                    .replica = replica};
    ck_assert_msg(rec_step(r, run, &s) == 0, "%s", rec_errmsg(r));
}

START_TEST(breakdown) {
    char path[256], err[256];
    ck_assert_ptr_nonnull(testutil_tmpfile(path, sizeof path, ".db"));
    rec_t *r = rec_open(path);
    ck_assert_ptr_null(rec_errmsg(r));
    int64_t run = begin(r, "cluster");
    const char *roles[] = { "prefill", "decode", "decode" };
    for (int i = 0; i < 3; i++) {
        rec_replica_t x = {.replica = i, .role = roles[i], .model = "m", .tp = 1, .kv_blocks = 100};
        ck_assert_msg(rec_replica(r, run, &x) == 0, "%s", rec_errmsg(r));
    }
    /* replica 1: two requests, 300 of 1000 prompt tokens cached, TTFT 0.5 and 1.5 */
    request(r, run, 0, 1, 0.0, 0.5, 400, 100, "finished");
    request(r, run, 1, 1, 1.0, 2.5, 600, 200, "finished");
    request(r, run, 2, -1, 1.0, -1, 50, 0, "rejected"); /* the router's: no replica */
    /* replica 1's KV: 10% for 1 s, 40% for 3 s -> 32.5% time-weighted; busy 4 s */
    step(r, run, 0, 1, 0.0, 1.0, 10);
    step(r, run, 1, 1, 1.0, 3.0, 40);
    step(r, run, 2, 0, 0.0, 2.0, 50);
    int64_t one = begin(r, "single");
    request(r, one, 0, 0, 0.0, 0.5, 10, 0, "finished");
    step(r, one, 0, 0, 0.0, 1.0, 10);
    rec_close(r);

    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    report_replicas_t rr;
    ck_assert_int_eq(report_replicas_load(db, run, &rr, err, sizeof err), 0);
    ck_assert_int_eq(rr.n, 3);
    ck_assert_int_eq(rr.shown, 3);
    ck_assert_str_eq(rr.rows[0].role, "prefill");
    ck_assert_str_eq(rr.rows[2].role, "decode");
    ck_assert_int_eq(rr.rows[1].requests, 2);
    ck_assert_int_eq(rr.rows[1].finished, 2);
    ck_assert_int_eq(rr.rows[1].steps, 2);
    ck_assert_double_eq_tol(rr.rows[1].busy_s, 4.0, 1e-12);
    ck_assert_double_eq_tol(rr.rows[1].kv_use, 0.325, 1e-12);
    ck_assert_double_eq_tol(rr.rows[1].hit_rate, 0.3, 1e-12);
    ck_assert_double_eq_tol(rr.rows[1].ttft_mean_s, 1.0, 1e-12);
    ck_assert_int_eq(rr.rows[0].requests, 0);
    ck_assert(isnan(rr.rows[0].hit_rate));
    ck_assert_double_eq_tol(rr.rows[0].kv_use, 0.5, 1e-12);
    ck_assert_int_eq(rr.rows[2].steps, 0);
    ck_assert(isnan(rr.rows[2].kv_use));

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    report_replicas_print(f, &rr, 8.0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "replicas  3"));
    ck_assert_msg(strstr(buf, "1 decode          2         2        2   50.0%    32.5%     30.0%"),
                  "%s", buf);
    free(buf);
    f = open_memstream(&buf, &len);
    report_replicas_json(f, &rr, 8.0);
    fclose(f);
    ck_assert_msg(strstr(buf, "\"replica\": 1, \"role\": \"decode\", \"requests\": 2"), "%s", buf);
    free(buf);

    ck_assert_int_eq(report_replicas_load(db, one, &rr, err, sizeof err), 0);
    ck_assert_int_eq(rr.n, 1);
    f = open_memstream(&buf, &len);
    report_replicas_print(f, &rr, 1.0);
    report_replicas_json(f, &rr, 1.0);
    fclose(f);
    ck_assert_uint_eq(len, 0);
    free(buf);
    sqlite3_close(db);
    testutil_unlink_db(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report_replicas");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, breakdown);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_plot: plot_runs renders every figure it writes, however many runs it is given (the
 * figure list once stopped at 64 entries, so runs past the 58th got a timeline script but no
 * image). gnuplot is replaced by a small stand-in script, so the test runs without it. */
#include <check.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/plot.h"
#include "tests/testutil.h"
#include "traces/recorder.h"

#define NRUNS 70

/* NRUNS runs, each with two finished requests (TTFT and TPOT values) and one step. */
static void build(const char *path) {
    rec_t *r = rec_open(path);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    for (int k = 0; k < NRUNS; k++) {
        char name[32];
        snprintf(name, sizeof name, "run%d", k + 1);
        rec_run_info_t in = {.name = name, .kind = "sim", .policy = "p.lua", .version = "test"};
        int64_t id;
        ck_assert_msg(rec_run_begin(r, &in, &id) == 0, "%s", rec_errmsg(r));
        for (int i = 0; i < 2; i++) {
            rec_request_t q = {.req_id = i, .arrival_s = 0.1 * i, .prompt_tokens = 10,
                               .output_tokens = 3, .generated_tokens = 3,
                               .first_scheduled_s = 0.1 * i, .first_token_s = 0.1 * i + 0.05,
                               .finish_s = 0.1 * i + 0.25, .status = "finished"};
            ck_assert_msg(rec_request(r, id, &q) == 0, "%s", rec_errmsg(r));
        }
        rec_step_t st = {.step = 0, .start_s = 0, .dur_s = 0.05, .prefill_tokens = 20,
                         .num_seqs = 2, .kv_used = 4, .kv_total = 100};
        ck_assert(rec_step(r, id, &st) == 0);
        ck_assert(rec_run_end(r, id, 1, NULL, 0.1) == 0);
    }
    rec_close(r);
}

START_TEST(test_every_figure_rendered) {
    char path[256], dir[] = "/tmp/twintest-plotXXXXXX", out[300], fake[300], err[4096];
    ck_assert(testutil_tmpfile(path, sizeof path, ".db") != NULL);
    build(path);
    ck_assert(mkdtemp(dir) != NULL);
    /* The stand-in: called as `PROG -e "fmt='png'" FIG.gp` in the output folder, it writes
     * FIG.png. */
    snprintf(fake, sizeof fake, "%s/fake-gnuplot", dir);
    FILE *f = fopen(fake, "w");
    ck_assert(f != NULL);
    fputs("#!/bin/sh\nfmt=${2#fmt=\\'}; fmt=${fmt%\\'}\necho image > \"${3%.gp}.$fmt\"\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(fake, 0755), 0);
    snprintf(out, sizeof out, "%s/out", dir);

    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    int64_t ids[NRUNS];
    for (int k = 0; k < NRUNS; k++) ids[k] = k + 1;
    FILE *notes = fopen("/dev/null", "w");
    plot_opts_t o = {.out_dir = out, .png = 1, .gnuplot = fake, .notes = notes};
    plot_result_t res;
    ck_assert_msg(plot_runs(db, ids, NRUNS, &o, &res, err, sizeof err) == 0, "%s", err);
    fclose(notes);
    sqlite3_close(db);

    /* cdf_ttft, cdf_tpot, cdf_e2e, a timeline per run, kv_queue (no sweep: no latency_rate) */
    ck_assert_int_eq(res.figures, NRUNS + 4);
    ck_assert_int_eq(res.images, res.figures);
    char img[400];
    struct stat sb;
    for (int k = 1; k <= NRUNS; k++) {
        snprintf(img, sizeof img, "%s/timeline_%d.png", out, k);
        ck_assert_msg(stat(img, &sb) == 0 && sb.st_size > 0, "%s not rendered", img);
    }
    snprintf(img, sizeof img, "%s/kv_queue.png", out);
    ck_assert_msg(stat(img, &sb) == 0, "%s not rendered", img);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    testutil_unlink_db(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_figure_rendered);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_plot: the scripts plot_runs writes, checked for what the figures must show; gnuplot
 * is replaced by a small stand-in script, so the suite runs without it (e2e_plot.sh renders
 * with the real one).
 *  - every figure written is rendered, however many runs (the figure list once stopped at
 *    64 entries, so runs past the 58th got a timeline script but no image);
 *  - per-run figures are named after their runs (file name and title);
 *  - latency vs rate starts at 0 on both axes, draws the SLO and marks the capacity by the
 *    rule of `sweep --capacity` (the highest passing rate below the lowest failing one);
 *  - a key of 15 runs goes below the plot in columns; a key of 3 stays inside;
 *  - the ITL figures appear only for runs with tokens, with a note otherwise, and take
 *    tokens sharing a time as one emission (no zero gap). */
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

/* One run: nreq finished requests, the first `slow` of them with a 1 s TTFT, the rest
 * 0.1 s; a prefill-only step and a decode-only step; with tokens, four per request (see
 * add_run). */
typedef struct {
    const char *name;
    const char *config;     /* NULL or a JSON object */
    int nreq, slow, tokens;
} run_spec_t;

static int64_t add_run(rec_t *r, const run_spec_t *sp) {
    rec_run_info_t in = {.name = sp->name, .kind = "sim", .policy = "p.lua", .version = "test",
                         .config = sp->config};
    int64_t id;
    ck_assert_msg(rec_run_begin(r, &in, &id) == 0, "%s", rec_errmsg(r));
    for (int i = 0; i < sp->nreq; i++) {
        double a = 0.1 * i, ttft = i < sp->slow ? 1.0 : 0.1;
        rec_request_t q = {.req_id = i, .arrival_s = a, .prompt_tokens = 10,
                           .output_tokens = 4, .generated_tokens = 4, .first_scheduled_s = a,
                           .first_token_s = a + ttft, .finish_s = a + ttft + 0.4,
                           .status = "finished"};
        ck_assert_msg(rec_request(r, id, &q) == 0, "%s", rec_errmsg(r));
        /* emissions at +0, +0.1, +0.1 (a speculative pair: one emission), +0.4 s */
        static const double dt[4] = { 0, 0.1, 0.1, 0.4 };
        for (int k = 0; sp->tokens && k < 4; k++) {
            rec_token_t t = {.req_id = i, .idx = k, .token_id = -1, .t_s = a + ttft + dt[k]};
            ck_assert_msg(rec_token(r, id, &t) == 0, "%s", rec_errmsg(r));
        }
    }
    rec_step_t st = {.step = 0, .start_s = 0, .dur_s = 0.05, .prefill_tokens = 20,
                     .num_seqs = 2, .kv_used = 4, .kv_total = 100};
    ck_assert(rec_step(r, id, &st) == 0);
    rec_step_t st2 = {.step = 1, .start_s = 0.05, .dur_s = 0.01, .decode_tokens = 2,
                      .num_seqs = 2, .kv_used = 4, .kv_total = 100};
    ck_assert(rec_step(r, id, &st2) == 0);
    ck_assert(rec_run_end(r, id, 1, NULL, 0.1) == 0);
    return id;
}

typedef struct {
    char db[256], dir[64], out[300], notes[300];
    int64_t ids[80];
    size_t n;
} fixture_t;

static void setup_fixture(fixture_t *fx, const run_spec_t *runs, size_t n) {
    char fake[320];
    ck_assert(testutil_tmpfile(fx->db, sizeof fx->db, ".db") != NULL);
    rec_t *r = rec_open(fx->db);
    ck_assert_msg(rec_errmsg(r) == NULL, "%s", rec_errmsg(r));
    for (size_t i = 0; i < n; i++) fx->ids[i] = add_run(r, &runs[i]);
    fx->n = n;
    rec_close(r);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/twintest-plotXXXXXX");
    ck_assert(mkdtemp(fx->dir) != NULL);
    /* The stand-in: called as `PROG -e "fmt='png'" FIG.gp` in the output folder, it writes
     * FIG.png. */
    snprintf(fake, sizeof fake, "%s/fake-gnuplot", fx->dir);
    FILE *f = fopen(fake, "w");
    ck_assert(f != NULL);
    fputs("#!/bin/sh\nfmt=${2#fmt=\\'}; fmt=${fmt%\\'}\necho image > \"${3%.gp}.$fmt\"\n", f);
    fclose(f);
    ck_assert_int_eq(chmod(fake, 0755), 0);
    snprintf(fx->out, sizeof fx->out, "%s/out", fx->dir);
    snprintf(fx->notes, sizeof fx->notes, "%s/notes.txt", fx->dir);
}

/* plot_runs on the fixture's runs; its notes go to fx->notes. */
static void plot(fixture_t *fx, const plot_opts_t *extra, plot_result_t *res) {
    char fake[320], err[4096];
    snprintf(fake, sizeof fake, "%s/fake-gnuplot", fx->dir);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open_v2(fx->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    FILE *notes = fopen(fx->notes, "w");
    ck_assert(notes != NULL);
    plot_opts_t o = extra ? *extra : (plot_opts_t){0};
    o.out_dir = fx->out, o.png = 1, o.gnuplot = fake, o.notes = notes;
    ck_assert_msg(plot_runs(db, fx->ids, fx->n, &o, res, err, sizeof err) == 0, "%s", err);
    fclose(notes);
    sqlite3_close(db);
}

static void teardown_fixture(fixture_t *fx) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx->dir);
    ck_assert_int_eq(system(cmd), 0);
    testutil_unlink_db(fx->db);
}

/* The contents of DIR/file (malloc'd), or NULL when it does not exist. */
static char *slurp(const char *dir, const char *file) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *s = calloc(1, 1 << 20);
    ck_assert(s != NULL);
    size_t n = fread(s, 1, (1 << 20) - 1, f);
    s[n] = 0;
    fclose(f);
    return s;
}

static int exists(const char *dir, const char *file) {
    char path[600];
    struct stat sb;
    snprintf(path, sizeof path, "%s/%s", dir, file);
    return stat(path, &sb) == 0 && sb.st_size > 0;
}

#define ASSERT_HAS(text, needle) \
    ck_assert_msg(strstr((text), (needle)) != NULL, "no \"%s\" in:\n%s", (needle), (text))
#define ASSERT_LACKS(text, needle) \
    ck_assert_msg(strstr((text), (needle)) == NULL, "\"%s\" should not be in:\n%s", (needle), (text))

START_TEST(test_every_figure_rendered) {
    enum { NRUNS = 70 };
    run_spec_t runs[NRUNS];
    char names[NRUNS][16], img[64];
    for (int k = 0; k < NRUNS; k++) {
        snprintf(names[k], sizeof names[k], "run%d", k + 1);
        runs[k] = (run_spec_t){.name = names[k], .nreq = 2};
    }
    fixture_t fx;
    setup_fixture(&fx, runs, NRUNS);
    plot_result_t res;
    plot(&fx, NULL, &res);
    /* cdf_ttft, cdf_tpot, cdf_e2e, a timeline per run, kv_queue (no sweep: no latency_rate,
     * no tokens: no ITL figures) */
    ck_assert_int_eq(res.figures, NRUNS + 4);
    ck_assert_int_eq(res.images, res.figures);
    for (int k = 0; k < NRUNS; k++) {
        snprintf(img, sizeof img, "timeline_run%d.png", k + 1);
        ck_assert_msg(exists(fx.out, img), "%s not rendered", img);
    }
    ck_assert(exists(fx.out, "kv_queue.png"));
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_named_after_runs) {
    /* "a b/c" and "a_b_c" make the same file name: the second gets its position */
    run_spec_t runs[] = { {.name = "a b/c", .nreq = 2}, {.name = "a_b_c", .nreq = 2},
                          {.name = "chunked\"x", .nreq = 2} };
    fixture_t fx;
    setup_fixture(&fx, runs, 3);
    plot_result_t res;
    plot(&fx, NULL, &res);
    char *t1 = slurp(fx.out, "timeline_a_b_c.gp"), *t2 = slurp(fx.out, "timeline_a_b_c-2.gp");
    char *t3 = slurp(fx.out, "timeline_chunked_x.gp");
    ck_assert_msg(t1 && t2 && t3, "timeline scripts not named after their runs");
    ASSERT_HAS(t1, "title \"a b/c\" . \": steps over time\"");
    ASSERT_HAS(t2, "title \"a_b_c\" . \": steps over time\"");
    ASSERT_HAS(t3, "title \"chunked\\\"x\" . \": steps over time\"");
    ASSERT_HAS(t1, "\"steps_a_b_c.dat\"");
    /* above: the step duration by kind (one prefill-only, one decode-only step) */
    ASSERT_HAS(t1, "step duration (ms");
    ASSERT_HAS(t1, "title \"prefill only\"");
    ASSERT_HAS(t1, "title \"decode only\"");
    ASSERT_LACKS(t1, "title \"prefill + decode\""); /* no such step: no empty series */
    free(t1);
    free(t2);
    free(t3);
    char *kv = slurp(fx.out, "kv_queue.gp");
    ASSERT_HAS(kv, "title \"a b/c\"");
    free(kv);
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_latency_rate) {
    /* sweep sw: rates 1 and 2 meet the TTFT SLO (every request 0.1 s), rate 3 misses it
     * (6 of 10 at 1 s: 40% attainment), rate 4 meets it again: the capacity is 2, not 4 */
    static const char *cfg[4] = {
        "{\"sweep\":{\"name\":\"sw\",\"rate_rps\":1,\"scale\":1}}",
        "{\"sweep\":{\"name\":\"sw\",\"rate_rps\":2,\"scale\":2}}",
        "{\"sweep\":{\"name\":\"sw\",\"rate_rps\":3,\"scale\":3}}",
        "{\"sweep\":{\"name\":\"sw\",\"rate_rps\":4,\"scale\":4}}",
    };
    run_spec_t runs[] = { {"sw@1rps", cfg[0], 10, 0, 0}, {"sw@2rps", cfg[1], 10, 0, 0},
                          {"sw@3rps", cfg[2], 10, 6, 0}, {"sw@4rps", cfg[3], 10, 0, 0} };
    fixture_t fx;
    setup_fixture(&fx, runs, 4);
    plot_result_t res;
    plot_opts_t o = {.has_slo = 1, .slo = {.ttft_s = 0.5}};
    plot(&fx, &o, &res);
    char *gp = slurp(fx.out, "latency_rate.gp");
    ck_assert_msg(gp != NULL, "no latency_rate.gp");
    ASSERT_HAS(gp, "set xrange [0:*]");
    ASSERT_HAS(gp, "set yrange [0:*]");
    ASSERT_LACKS(gp, "logscale");
    ASSERT_HAS(gp, "\"SLO 500 ms\"");
    ASSERT_HAS(gp, "500 with lines");           /* the TTFT SLO line */
    ASSERT_HAS(gp, "\"capacity 2 req/s\"");
    ASSERT_HAS(gp, "from first 2, graph 0 to first 2, graph 1");
    ASSERT_LACKS(gp, "capacity 4");
    ASSERT_LACKS(gp, "SLO 0 ms");                /* no TPOT SLO: no TPOT line */
    ASSERT_LACKS(gp, "E2E");                     /* E2E only with an e2e SLO */
    free(gp);
    char *dat = slurp(fx.out, "latency_rate.dat");
    ASSERT_HAS(dat, "0.4 sw@3rps");              /* attainment column */
    free(dat);

    /* a target of 0.3 passes rate 3 too: no failing rate, so "at least" 4 */
    o.target = 0.3;
    plot(&fx, &o, &res);
    gp = slurp(fx.out, "latency_rate.gp");
    ASSERT_HAS(gp, "\"capacity >= 4 req/s\"");
    free(gp);

    /* without an SLO: no line, no capacity, and a note saying why */
    plot(&fx, NULL, &res);
    gp = slurp(fx.out, "latency_rate.gp");
    ASSERT_LACKS(gp, "capacity");
    ASSERT_LACKS(gp, "SLO");
    free(gp);
    char *notes = slurp(fx.dir, "notes.txt");
    ASSERT_HAS(notes, "no --slo given");
    free(notes);
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_key_of_15_runs) {
    run_spec_t runs[15];
    char names[15][48];
    for (int k = 0; k < 15; k++) {
        snprintf(names[k], sizeof names[k], "chunked_prefill-seed%d", k + 1);
        runs[k] = (run_spec_t){.name = names[k], .nreq = 3, .tokens = 1};
    }
    fixture_t fx;
    setup_fixture(&fx, runs, 15);
    plot_result_t res;
    plot(&fx, NULL, &res);
    static const char *const figs[] = { "cdf_ttft.gp", "cdf_itl.gp", "kv_queue.gp" };
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
        char *gp = slurp(fx.out, figs[i]);
        ck_assert_msg(gp != NULL, "no %s", figs[i]);
        /* below the plot, several to a row, in a smaller font, with room made for it */
        ASSERT_HAS(gp, "set key at screen 0.5, screen");
        ASSERT_HAS(gp, "center top horizontal maxcols");
        ASSERT_HAS(gp, "font \",9\"");
        ASSERT_HAS(gp, "set bmargin at screen");
        ASSERT_LACKS(gp, "maxcols 1 ");
        ASSERT_LACKS(gp, "set key inside");
        free(gp);
    }
    teardown_fixture(&fx);

    setup_fixture(&fx, runs, 3);
    plot(&fx, NULL, &res);
    char *gp = slurp(fx.out, "cdf_ttft.gp");
    ASSERT_HAS(gp, "set key inside right bottom");
    free(gp);
    teardown_fixture(&fx);
}
END_TEST

START_TEST(test_itl_only_with_tokens) {
    run_spec_t none[] = { {.name = "a", .nreq = 2}, {.name = "b", .nreq = 2} };
    fixture_t fx;
    setup_fixture(&fx, none, 2);
    plot_result_t res;
    plot(&fx, NULL, &res);
    ck_assert(!exists(fx.out, "cdf_itl.gp"));
    ck_assert(!exists(fx.out, "tbt_a.gp"));
    char *notes = slurp(fx.dir, "notes.txt");
    ASSERT_HAS(notes, "no run saved per-token times");
    ASSERT_HAS(notes, "--save-tokens");
    free(notes);
    teardown_fixture(&fx);

    run_spec_t some[] = { {.name = "tok", .nreq = 2, .tokens = 1}, {.name = "plain", .nreq = 2} };
    setup_fixture(&fx, some, 2);
    plot(&fx, NULL, &res);
    ck_assert(exists(fx.out, "cdf_itl.png"));
    ck_assert(exists(fx.out, "tbt_tok.png"));
    ck_assert(!exists(fx.out, "tbt_plain.gp"));
    char *gp = slurp(fx.out, "cdf_itl.gp");
    ASSERT_HAS(gp, "title \"tok\"");
    ASSERT_LACKS(gp, "title \"plain\"");
    free(gp);
    notes = slurp(fx.dir, "notes.txt");
    ASSERT_HAS(notes, "run plain saved no per-token times");
    free(notes);
    /* two requests, gaps 100 and 300 ms each (the shared time is one emission): the CDF
     * holds 4 values, the last 300 ms; per request, mean 200 and largest 300 ms */
    char *dat = slurp(fx.out, "cdf_itl.dat");
    ASSERT_HAS(dat, "# run tok: 4 values");
    ASSERT_HAS(dat, "\n300 1\n");
    ASSERT_LACKS(dat, "\n0 ");
    free(dat);
    dat = slurp(fx.out, "tokens_tok.dat");
    ASSERT_HAS(dat, "# per request");
    ASSERT_HAS(dat, " 200 300 0 2\n");
    ASSERT_HAS(dat, " 200 300 1 2\n");
    free(dat);
    teardown_fixture(&fx);
}
END_TEST

/* Past PLOT_MAX_POINTS steps and gaps the timeline's durations and the gaps are binned:
 * at most PLOT_MAX_BINS rows, and a single 500 ms stall among 10 ms gaps survives as a bin's
 * largest gap. */
START_TEST(test_long_run_binned) {
    fixture_t fx;
    run_spec_t none[] = { {.name = "long", .nreq = 0} };
    setup_fixture(&fx, none, 0);
    rec_t *r = rec_open(fx.db);
    rec_run_info_t in = {.name = "long", .kind = "sim", .policy = "p.lua", .version = "test"};
    int64_t id;
    ck_assert(rec_run_begin(r, &in, &id) == 0);
    enum { N = PLOT_MAX_POINTS + 500 };
    rec_request_t q = {.req_id = 0, .arrival_s = 0, .prompt_tokens = 10, .output_tokens = N,
                       .generated_tokens = N, .first_scheduled_s = 0, .first_token_s = 0.01,
                       .finish_s = 0.01 * N + 0.49, .status = "finished"};
    ck_assert(rec_request(r, id, &q) == 0);
    for (int k = 0; k < N; k++) {
        /* token k ends step k; step 100 stalls for 0.5 s */
        double t = 0.01 * (k + 1) + (k >= 100 ? 0.49 : 0);
        rec_token_t tk = {.req_id = 0, .idx = k, .token_id = -1, .t_s = t};
        rec_step_t st = {.step = k, .start_s = t - (k == 100 ? 0.5 : 0.01),
                         .dur_s = k == 100 ? 0.5 : 0.01, .prefill_tokens = k ? 0 : 10,
                         .decode_tokens = k ? 1 : 0, .num_seqs = 1, .kv_used = 1,
                         .kv_total = 10};
        ck_assert(rec_token(r, id, &tk) == 0);
        ck_assert(rec_step(r, id, &st) == 0);
    }
    ck_assert(rec_run_end(r, id, 1, NULL, 1) == 0);
    rec_close(r);
    fx.ids[0] = id;
    fx.n = 1;
    plot_result_t res;
    plot(&fx, NULL, &res);

    char *dat = slurp(fx.out, "tokens_long.dat");
    ASSERT_HAS(dat, "# binned: 300 equal time bins");
    char *per_req = strstr(dat, "# per request");
    ck_assert(per_req != NULL);
    int rows = 0, stall = 0;
    double sum_mean = 0;
    for (char *line = strchr(dat, '\n'); line && line < per_req; line = strchr(line + 1, '\n')) {
        double t0, mean, max;
        if (sscanf(line + 1, "%lf %lf %lf", &t0, &mean, &max) != 3) continue;
        rows++;
        sum_mean += mean;
        if (max > 499 && max < 501) stall++;
    }
    ck_assert_int_le(rows, PLOT_MAX_BINS);
    ck_assert_int_ge(rows, PLOT_MAX_BINS - 1);
    ck_assert_int_eq(stall, 1);
    ck_assert_msg(sum_mean / rows > 9.9, "mean gaps %g, expected about 10 ms", sum_mean / rows);
    /* one request: N - 1 gaps, the largest the stall */
    ASSERT_HAS(per_req, " 500 0 " "20499\n");
    free(dat);
    char *gp = slurp(fx.out, "tbt_long.gp");
    ASSERT_HAS(gp, "title \"largest gap\"");
    ASSERT_HAS(gp, "(binned)");
    free(gp);
    gp = slurp(fx.out, "timeline_long.gp");
    ASSERT_HAS(gp, "title \"longest step\"");  /* too many steps for a point each */
    ASSERT_LACKS(gp, "index 1");
    free(gp);
    teardown_fixture(&fx);
}
END_TEST

int main(void) {
    Suite *s = suite_create("plot");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_every_figure_rendered);
    tcase_add_test(tc, test_named_after_runs);
    tcase_add_test(tc, test_latency_rate);
    tcase_add_test(tc, test_key_of_15_runs);
    tcase_add_test(tc, test_itl_only_with_tokens);
    tcase_add_test(tc, test_long_run_binned);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

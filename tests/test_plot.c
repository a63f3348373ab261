/* test_plot: the scripts plot_runs writes, checked for what the figures must show; gnuplot
 * is replaced by a small stand-in script, so the suite runs without it (e2e_plot.sh renders
 * with the real one).
 *  - every figure written is rendered, however many runs (the figure list once stopped at
 *    64 entries, so runs past the 58th got a timeline script but no image);
 *  - per-run figures are named after their runs (file name and title);
 *  - latency vs rate starts at 0 on both axes (a log rate axis past a 10x span), draws the
 *    SLO named in its panel's title and the capacity named in the key (no text inside the
 *    plot) by the rule of `sweep --capacity` (the highest passing rate below the lowest
 *    failing one); a rate's repeated runs are one row, its range drawn as bars;
 *  - an experiment's runs are one curve family (one colour, one key entry "E (N runs)"),
 *    and plot finds runs by experiment name as compare does;
 *  - the timeline's lower panel draws each kind of token from the axis (never stacked);
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
#include "analysis/plot_internal.h"
#include "traces/summary.h"
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
    /* below: decode tokens a line, prefill tokens points, each from the axis: no stack */
    ASSERT_HAS(t1, "index 1 using 1:($5 > 0 ? $5 : 1/0) with steps");
    ASSERT_HAS(t1, "index 1 using 1:($4 > 0 ? $4 : 1/0) with points");
    ASSERT_LACKS(t1, "with boxes");
    ASSERT_LACKS(t1, "$2+$3");
    char *d1 = slurp(fx.out, "steps_a_b_c.dat");
    ASSERT_HAS(d1, "# start_s dur_ms kind(0_decode_1_mixed_2_prefill) prefill decode pad\n"
                   "0 50 2 20 0 0\n0.05 10 0 0 2 0\n");
    free(d1);
    free(t1);
    free(t2);
    free(t3);
    char *kv = slurp(fx.out, "kv_queue.gp");
    ASSERT_HAS(kv, "title \"a b/c\"");
    free(kv);
    teardown_fixture(&fx);
}
END_TEST

/* Four runs of sweep `sweep`, 10 requests each, run k at rates[k] named names[k] with
 * slow[k] of its requests at a 1 s TTFT (the rest 0.1 s), plotted with a 0.5 s TTFT SLO. */
static void sweep_fixture(fixture_t *fx, const char *sweep, const double rates[4],
                          const char *const names[4], const int slow[4], plot_opts_t *o,
                          plot_result_t *res) {
    char cfg[4][160];
    run_spec_t runs[4];
    for (int k = 0; k < 4; k++) {
        snprintf(cfg[k], sizeof cfg[k], "{\"sweep\":{\"name\":\"%s\",\"rate_rps\":%g,"
                 "\"scale\":%g}}", sweep, rates[k], rates[k]);
        runs[k] = (run_spec_t){ names[k], cfg[k], 10, slow[k], 0 };
    }
    setup_fixture(fx, runs, 4);
    *o = (plot_opts_t){.has_slo = 1, .slo = {.ttft_s = 0.5}};
    plot(fx, o, res);
}

START_TEST(test_latency_rate) {
    /* sweep sw: rates 1 and 2 meet the TTFT SLO (every request 0.1 s), rate 3 misses it
     * (6 of 10 at 1 s: 40% attainment), rate 4 meets it again: the capacity is 2, not 4 */
    static const double rates[4] = { 1, 2, 3, 4 };
    static const char *const names[4] = { "sw@1rps", "sw@2rps", "sw@3rps", "sw@4rps" };
    static const int slow[4] = { 0, 0, 6, 0 };
    fixture_t fx;
    plot_result_t res;
    plot_opts_t o;
    sweep_fixture(&fx, "sw", rates, names, slow, &o, &res);
    char *gp = slurp(fx.out, "latency_rate.gp");
    ck_assert_msg(gp != NULL, "no latency_rate.gp");
    ASSERT_HAS(gp, "set xrange [0:*]");
    ASSERT_HAS(gp, "set yrange [0:*]");
    ASSERT_LACKS(gp, "set logscale x");         /* 1 to 4 req/s: a linear axis */
    ASSERT_HAS(gp, "set title \"TTFT, SLO 500 ms (red dotted line)\"");
    ASSERT_HAS(gp, "500 with lines");           /* the TTFT SLO line */
    ASSERT_HAS(gp, "title \"sw: capacity 2 req/s\"");  /* in the key */
    ASSERT_HAS(gp, "from first 2, graph 0 to first 2, graph 1");
    ASSERT_LACKS(gp, "\nset label");            /* no text inside the plot area */
    ASSERT_LACKS(gp, "yerrorlines");            /* one run per rate: no bars */
    ASSERT_LACKS(gp, "capacity 4");
    ASSERT_LACKS(gp, "SLO 0 ms");                /* no TPOT SLO: no TPOT line */
    ASSERT_LACKS(gp, "E2E");                     /* E2E only with an e2e SLO */
    free(gp);
    char *dat = slurp(fx.out, "latency_rate.dat");
    ASSERT_HAS(dat, "0.4 sw@3rps");              /* attainment column */
    ASSERT_HAS(dat, "\n3 1 ");                   /* rate 3, one run */
    free(dat);

    /* a target of 0.3 passes rate 3 too: no failing rate, so "at least" 4 */
    o.target = 0.3;
    plot(&fx, &o, &res);
    gp = slurp(fx.out, "latency_rate.gp");
    ASSERT_HAS(gp, "\"sw: capacity >= 4 req/s\"");
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

/* A sweep over 1 to 30 req/s: a log rate axis labelled 1-2-5; the two runs of rate 2 (a
 * repeated sweep) are one row with their range, and one of them missing the SLO fails the
 * rate: the capacity is 1. */
START_TEST(test_latency_rate_log_repeats) {
    static const double rates[4] = { 1, 2, 2, 30 };
    static const char *const names[4] = { "w@1rps", "w@2rps-r0", "w@2rps-r1", "w@30rps" };
    static const int slow[4] = { 0, 0, 6, 0 };
    fixture_t fx;
    plot_result_t res;
    plot_opts_t o;
    sweep_fixture(&fx, "w", rates, names, slow, &o, &res);
    char *gp = slurp(fx.out, "latency_rate.gp");
    ASSERT_HAS(gp, "set logscale x");
    ASSERT_HAS(gp, "set xtics (1, 2, 5, 10, 20)");
    ASSERT_HAS(gp, "log scale: the rates span 30x");
    ASSERT_LACKS(gp, "set xrange [0:*]");
    ASSERT_HAS(gp, "using 1:3:4:5 with yerrorlines");  /* TTFT p50 with its range */
    ASSERT_HAS(gp, "bars: the range over the seeds of a rate");
    ASSERT_HAS(gp, "\"w: capacity 1 req/s\"");
    free(gp);
    char *dat = slurp(fx.out, "latency_rate.dat");
    /* rate 2: two runs, TTFT p50 mean of 100 and 1000 ms, min 100, max 1000 */
    ASSERT_HAS(dat, "\n2 2 550 100 1000 ");
    ASSERT_LACKS(dat, "w@2rps-r1");              /* one row per rate */
    free(dat);
    teardown_fixture(&fx);

    /* the rules themselves */
    plot_rate_row_t v[3] = { {.rate = 1, .passes = 1}, {.rate = 2, .passes = 0},
                             {.rate = 3, .passes = 1} };
    int open;
    ck_assert(plot_rate_capacity(v, 3, &open) == 1 && !open);
    v[1].passes = 1;
    ck_assert(plot_rate_capacity(v, 3, &open) == 3 && open);
    v[0].passes = 0;
    ck_assert(isnan(plot_rate_capacity(v, 3, &open)));
    ck_assert(!plot_rate_logx(1, 10) && plot_rate_logx(1, 10.01) && !plot_rate_logx(0, 5));
}
END_TEST

/* An experiment's runs: one colour and one key entry; found by the experiment's name. */
START_TEST(test_experiment_runs) {
    static const char *cfg[2] = {
        "{\"experiment\":{\"name\":\"E\",\"index\":0,\"of\":2,\"seed\":0}}",
        "{\"experiment\":{\"name\":\"E\",\"index\":1,\"of\":2,\"seed\":1}}",
    };
    run_spec_t runs[] = { {"E-r0", cfg[0], 3, 0, 0}, {"E-r1", cfg[1], 3, 1, 0},
                          {"solo", NULL, 3, 0, 0} };
    fixture_t fx;
    setup_fixture(&fx, runs, 3);
    plot_result_t res;
    plot(&fx, NULL, &res);
    char *gp = slurp(fx.out, "cdf_ttft.gp");
    ASSERT_HAS(gp, "index 0 using 1:2 with steps lw 2 lc 1 dt 1 title \"E (2 runs)\"");
    ASSERT_HAS(gp, "index 1 using 1:2 with steps lw 2 lc 1 dt 1 notitle");
    ASSERT_HAS(gp, "index 2 using 1:2 with steps lw 2 lc 2 dt 1 title \"solo\"");
    free(gp);
    gp = slurp(fx.out, "kv_queue.gp");
    ASSERT_HAS(gp, "title \"E (2 runs)\"");
    ASSERT_HAS(gp, "notitle");
    free(gp);

    sqlite3 *db;
    char err[1024], want[600];
    int64_t ids[8];
    size_t n = 0;
    ck_assert_int_eq(sqlite3_open_v2(fx.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    ck_assert_int_eq(plot_find_runs(db, "E", ids, &n, 8, err, sizeof err), 0);
    ck_assert(n == 2 && ids[0] == fx.ids[0] && ids[1] == fx.ids[1]);
    ck_assert_int_eq(plot_find_runs(db, "solo", ids, &n, 8, err, sizeof err), 0);
    ck_assert(n == 3 && ids[2] == fx.ids[2]);
    ck_assert_int_eq(plot_find_runs(db, "E-r1", ids, &n, 8, err, sizeof err), 0);
    ck_assert_uint_eq(n, 3);                      /* listed already */
    ck_assert_int_eq(plot_find_runs(db, "nope", ids, &n, 8, err, sizeof err), -1);
    snprintf(want, sizeof want, "no run, experiment or sweep named 'nope' in %s; runs: E-r0, "
             "E-r1, solo", fx.db);
    ck_assert_str_eq(err, want);
    sqlite3_close(db);
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
    tcase_add_test(tc, test_latency_rate_log_repeats);
    tcase_add_test(tc, test_experiment_runs);
    tcase_add_test(tc, test_key_of_15_runs);
    tcase_add_test(tc, test_itl_only_with_tokens);
    tcase_add_test(tc, test_long_run_binned);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* cmd_plot: `twinserve plot DB --runs A,B --out DIR`, figures through gnuplot
 * (analysis/plot.h). */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/plot.h"
#include "analysis/report.h"
#include "traces/summary.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"

enum { MAX_RUNS = 256 };

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve plot DB --runs A[,B...] --out DIR [--format png,svg]\n"
        "                      [--slo ttft=S,tpot=S,e2e=S [--target F]]\n"
        "\n"
        "Draws, with gnuplot, from the records in DB:\n"
        "  cdf_ttft, cdf_tpot, cdf_e2e\n"
        "                      CDFs of TTFT, TPOT and E2E (ms, log scale), one curve per run\n"
        "                      (an experiment's runs in one colour, one key entry)\n"
        "  timeline_RUN        run RUN (its name as a file name) over time: step duration\n"
        "                      coloured by the step's kind above; below, each step's decode\n"
        "                      tokens (a line) and prefill tokens (points), each from the\n"
        "                      axis, never stacked (log scale); binned into %d time bins\n"
        "                      past %d steps\n"
        "  kv_queue            KV blocks in use (%%) and queue length over time, per run\n"
        "  cdf_itl, tbt_RUN    for runs recorded with --save-tokens: the CDF of the gaps\n"
        "                      between tokens, and per run every gap over time and each\n"
        "                      request's mean and largest gap (without tokens: a note)\n"
        "  latency_rate        p50/p99 TTFT and TPOT vs request rate, for runs made by\n"
        "                      `twinserve sweep` (a sweep's name selects all its runs): from\n"
        "                      0, or on a log rate axis when the rates span more than 10x; a\n"
        "                      repeated sweep's seeds averaged per rate, their range as bars;\n"
        "                      with --slo, each SLO a dotted line named in its panel's title\n"
        "                      and each sweep's capacity (as `sweep --capacity` defines it) a\n"
        "                      vertical line named in the key\n"
        "  replicas_RUN        a cluster run's requests held per replica over time: a curve\n"
        "                      each up to 4 replicas; more, a heatmap (replica by time) above\n"
        "                      the least, mean and most held across them\n"
        "Next to each image DIR holds the data (*.dat) and the gnuplot script (*.gp): edit\n"
        "and re-render with `cd DIR && gnuplot -e \"fmt='svg'\" cdf_ttft.gp`.\n"
        "\n"
        "  --runs LIST           comma-separated; each an experiment's name (its runs, as\n"
        "                        compare takes it), a run's name or id, or a sweep's name\n"
        "  --out DIR             output folder (created if missing)\n"
        "  --format F            png, svg or png,svg (default png,svg)\n"
        "  --gnuplot PROG        the gnuplot program (default gnuplot, from PATH)\n"
        "  --slo ttft=S,tpot=S,e2e=S   SLOs in seconds (suffix ms accepted) for latency_rate:\n"
        "                        drawn as lines (an e2e SLO adds an E2E panel), and the\n"
        "                        capacity of each sweep marked\n"
        "  --target F            attainment the capacity keeps, a fraction (default 0.9,\n"
        "                        as sweep's)\n"
        "\n"
        "Exit status: 0 done, 1 a run, the database or gnuplot failed, 2 usage error.\n",
        PLOT_MAX_BINS, PLOT_MAX_POINTS);
}

enum { O_RUNS = 256, O_OUT, O_FORMAT, O_GNUPLOT, O_SLO, O_TARGET, O_HELP };

int cmd_plot(int argc, char **argv) {
    static const struct option opts[] = {
        { "runs", 1, 0, O_RUNS }, { "out", 1, 0, O_OUT }, { "format", 1, 0, O_FORMAT },
        { "gnuplot", 1, 0, O_GNUPLOT }, { "slo", 1, 0, O_SLO }, { "target", 1, 0, O_TARGET },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    plot_opts_t o = { .png = 1, .svg = 1 };
    const char *runs = NULL, *dbpath = NULL;
    char err[2048], *list = NULL;
    int64_t *ids = NULL;
    size_t n = 0;
    sqlite3 *db = NULL;
    int rc = 2, c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_RUNS: runs = optarg; break;
        case O_OUT: o.out_dir = optarg; break;
        case O_FORMAT:
            if (plot_parse_formats(optarg, &o, err, sizeof err) != 0) {
                fprintf(stderr, "twinserve plot: %s\n", err);
                goto done;
            }
            break;
        case O_GNUPLOT: o.gnuplot = optarg; break;
        case O_SLO:
            if (report_parse_slo(optarg, &o.slo, err, sizeof err) != 0) {
                fprintf(stderr, "twinserve plot: --slo: %s\n", err);
                goto done;
            }
            o.has_slo = 1;
            break;
        case O_TARGET: {
            char *end;
            o.target = strtod(optarg, &end);
            if (end == optarg || *end || !(o.target > 0 && o.target <= 1)) {
                fprintf(stderr, "twinserve plot: --target '%s': want a fraction in (0, 1], "
                        "e.g. 0.9\n", optarg);
                goto done;
            }
            break;
        }
        case O_HELP: usage(stdout); rc = 0; goto done;
        default: rc = cli_bad_option("plot", argv, opts); goto done;
        }
    }
    if (optind < argc) dbpath = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "twinserve plot: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (o.target > 0 && !o.has_slo) {
        fprintf(stderr, "twinserve plot: --target needs --slo (the attainment is of the SLOs)\n");
        goto done;
    }
    if (!dbpath || !runs || !o.out_dir) {
        fprintf(stderr, "twinserve plot: DB, --runs and --out are required\n");
        usage(stderr);
        goto done;
    }
    rc = 1;
    list = strdup(runs);
    ids = calloc(MAX_RUNS, sizeof *ids);
    if (!list || !ids) {
        fprintf(stderr, "twinserve plot: out of memory\n");
        goto done;
    }
    if (summary_open(dbpath, &db, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve plot: %s\n", err);
        goto done;
    }
    for (char *save = NULL, *item = strtok_r(list, ",", &save); item;
         item = strtok_r(NULL, ",", &save)) {
        if (plot_find_runs(db, item, ids, &n, MAX_RUNS, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve plot: %s\n", err);
            goto done;
        }
    }
    if (n == 0) {
        fprintf(stderr, "twinserve plot: --runs '%s' names no run\n", runs);
        rc = 2;
        goto done;
    }
    plot_result_t res;
    if (plot_runs(db, ids, n, &o, &res, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve plot: %s\n", err);
        goto done;
    }
    printf("plot: %d figures, %d images in %s (data *.dat, scripts *.gp)\n", res.figures,
           res.images, o.out_dir);
    rc = 0;
done:
    sqlite3_close(db);
    free(list);
    free(ids);
    return rc;
}

/* twinserve compare DB --runs A,B [--db2 DB2] [--json] [--seed S] [--resamples N]
 * [--slo ...] [--min-effect F]: run or experiment B against A with bootstrap confidence
 * intervals (analysis/compare.h; experiments: analysis/experiment.h). */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/compare.h"
#include "analysis/experiment.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: twinserve compare DB --runs A,B [--db2 DB2] [--json] [--seed S]\n"
            "                        [--resamples N] [--slo ttft=S,tpot=S,e2e=S] [--min-effect F]\n"
            "\n"
            "Compares B against A, each a run or an experiment (the runs one `--repeat`\n"
            "recorded; a plain run is an experiment of one): for TTFT, TPOT, E2E latency and\n"
            "queueing delay (mean, p50, p99), the fraction of requests finished and\n"
            "throughput (requests/s, output tokens/s), the values of A and B, the difference\n"
            "B - A (and in %% of A), a 95%% bootstrap confidence interval of the difference,\n"
            "and a verdict: better, worse, no significant difference (the interval holds 0)\n"
            "or no meaningful difference (|B - A| below --min-effect of A). Finished,\n"
            "rejected and aborted counts are shown side by side. When a side verified\n"
            "speculative drafts, two more rows: the acceptance rate (redrawn by request)\n"
            "and tokens per decoding request-step (one figure per run, as throughput).\n"
            "When a side is a cluster run (or its prefix cache served tokens): the prefix\n"
            "hit rate (cached over prompt tokens, redrawn by request) and, for clusters,\n"
            "the load imbalance (the busiest replica's held request-time over the mean,\n"
            "1 = even; one figure per run, lower is better).\n"
            "\n"
            "The bootstrap redraws requests with replacement N times and takes the 2.5th and\n"
            "97.5th percentiles of the redrawn differences (percentile method). An experiment's\n"
            "runs are redrawn first, then requests within each drawn run (hierarchical), so\n"
            "run-to-run noise is in the interval. When every run replayed the same trace (same\n"
            "trace text and the same requests: ids, arrivals and lengths) a request's values\n"
            "are drawn together (paired) and latency rows cover the requests finished in every\n"
            "run; otherwise each side is redrawn on its own. Percentiles interpolate linearly.\n"
            "\n"
            "  --runs A,B       two experiment names, run names or ids (A in DB; B in DB, or\n"
            "                   in DB2 with --db2); an experiment name is looked up first\n"
            "  --db2 DB2        look up B in another database\n"
            "  --seed S         bootstrap seed (default %u); the output shows it\n"
            "  --resamples N    bootstrap resamples, 1..1000000 (default %d)\n"
            "  --slo ttft=S,tpot=S,e2e=S   SLOs in seconds (suffix ms accepted): adds SLO\n"
            "                   attainment and goodput rows with intervals\n"
            "  --min-effect F   smallest difference that matters, a fraction of A's value\n"
            "                   (default %g; 0 = any significant difference counts)\n"
            "  --json           one JSON object instead of the table (null where undefined)\n"
            "  --include-failed compare runs that are not done (failed, interrupted, still\n"
            "                   running) and incomplete experiments too; refused otherwise\n"
            "  -h, --help       this help\n"
            "\n"
            "Exit status: 0 ok, 1 a database or run cannot be read or is not done, 2 usage\n"
            "error.\n",
            COMPARE_DEFAULT_SEED, COMPARE_DEFAULT_RESAMPLES, COMPARE_DEFAULT_MIN_EFFECT);
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "twinserve compare: %s%s%s%s\n", msg, arg ? " '" : "", arg ? arg : "",
            arg ? "'" : "");
    return 2;
}

int cmd_compare(int argc, char **argv) {
    const char *path = NULL, *path2 = NULL, *runs = NULL;
    int json = 0, include_failed = 0;
    compare_opts_t o;
    compare_opts_default(&o);
    sqlite3 *db = NULL, *db2 = NULL;
    char *list = NULL;
    char err[1024];
    int status = 1;
    compare_result_t *res = NULL;
    int64_t *ids_a = NULL, *ids_b = NULL;

    static const struct option opts[] = {
        {"runs", 1, 0, 'r'}, {"db2", 1, 0, 'd'}, {"seed", 1, 0, 's'},
        {"resamples", 1, 0, 'n'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'},
        {"slo", 1, 0, 'S'}, {"min-effect", 1, 0, 'm'}, {"include-failed", 0, 0, 'F'},
        {0, 0, 0, 0},
    };
    int c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r': runs = optarg; break;
        case 'd':
            if (!*optarg) return usage_error("--db2 needs a database path", NULL);
            path2 = optarg;
            break;
        case 's':
            if (!cli_u64(optarg, &o.seed))
                return usage_error("--seed needs a non-negative integer, got", optarg);
            break;
        case 'n':
            if (!cli_int(optarg, 1, 1000000, &o.resamples))
                return usage_error("--resamples needs an integer in 1..1000000, got", optarg);
            break;
        case 'S':
            if (report_parse_slo(optarg, &o.slo, err, sizeof err) != 0)
                return usage_error(err, NULL);
            o.has_slo = 1;
            break;
        case 'm':
            if (!cli_double(optarg, 0, 10, &o.min_effect))
                return usage_error("--min-effect needs a fraction in 0..10, got", optarg);
            break;
        case 'j': json = 1; break;
        case 'F': include_failed = 1; break;
        case 'h': usage(stdout); return 0;
        default: return cli_bad_option("compare", argv, opts);
        }
    }
    if (optind < argc) path = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "twinserve compare: unexpected argument '%s'%s\n", argv[optind],
                " (the runs are named with --runs A,B; twinserve compare --help shows the usage)");
        return 2;
    }
    if (!path) {
        fprintf(stderr, "twinserve compare: missing DB\n");
        usage(stderr);
        return 2;
    }
    if (!runs) return usage_error("missing --runs A,B", NULL);
    list = strdup(runs);
    char *comma = list ? strchr(list, ',') : NULL;
    if (!comma || comma == list || !comma[1] || strchr(comma + 1, ',')) {
        free(list);
        return usage_error("--runs needs exactly two runs A,B, got", runs);
    }
    *comma = '\0';
    const char *name_a = list, *name_b = comma + 1;

    if (summary_open(path, &db, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    if (path2 && summary_open(path2, &db2, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    sqlite3 *dbb = db2 ? db2 : db;
    const char *path_b = path2 ? path2 : path;
    size_t n_a, n_b;
    int exp_a, exp_b;
    if (experiment_resolve(db, name_a, &ids_a, &n_a, &exp_a, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        goto done;
    }
    if (experiment_resolve(dbb, name_b, &ids_b, &n_b, &exp_b, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path_b, err);
        goto done;
    }
    if (!include_failed &&
        (experiment_check_done(db, name_a, ids_a, n_a, exp_a, err, sizeof err) != 0 ||
         experiment_check_done(dbb, name_b, ids_b, n_b, exp_b, err, sizeof err) != 0)) {
        fprintf(stderr, "twinserve compare: %s\n", err);
        goto done;
    }
    res = malloc(sizeof *res);
    if (!res) {
        fprintf(stderr, "twinserve compare: out of memory\n");
        goto done;
    }
    compare_input_t in_a = {db, path, exp_a ? name_a : NULL, ids_a, n_a};
    compare_input_t in_b = {dbb, path_b, exp_b ? name_b : NULL, ids_b, n_b};
    if (compare_experiments(&in_a, &in_b, &o, res, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    if (json) compare_json(stdout, res);
    else compare_print(stdout, res);
    status = 0;
done:
    free(res);
    free(ids_a);
    free(ids_b);
    free(list);
    sqlite3_close(db2);
    sqlite3_close(db);
    return status;
}

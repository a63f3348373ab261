/* twinserve compare DB --runs A,B [--db2 DB2] [--json] [--seed S] [--resamples N]: run B
 * against run A with bootstrap confidence intervals (analysis/compare.h). */
#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/compare.h"
#include "cli/cli.h"
#include "cli/cli_util.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: twinserve compare DB --runs A,B [--db2 DB2] [--json] [--seed S]\n"
            "                        [--resamples N]\n"
            "\n"
            "Compares run B against run A: for TTFT, TPOT, E2E latency and queueing delay\n"
            "(mean, p50, p99) and throughput (requests/s, output tokens/s), the values of A\n"
            "and B, the difference B - A (and in %% of A), a 95%% bootstrap confidence\n"
            "interval of the difference, and a verdict: better, worse, or no significant\n"
            "difference (whether the interval excludes 0; lower latency and higher throughput\n"
            "are better).\n"
            "\n"
            "The bootstrap redraws requests with replacement N times and takes the 2.5th and\n"
            "97.5th percentiles of the redrawn differences (percentile method). When both runs\n"
            "replayed the same trace (same trace text and the same requests: ids, arrivals and\n"
            "lengths) a request's A and B values are drawn together (paired); otherwise each\n"
            "run is redrawn on its own. Percentiles interpolate linearly (numpy's default).\n"
            "\n"
            "  --runs A,B       two run names or ids (A in DB; B in DB, or in DB2 with --db2)\n"
            "  --db2 DB2        look up run B in another database\n"
            "  --seed S         bootstrap seed (default %u); the output shows it\n"
            "  --resamples N    bootstrap resamples, 1..1000000 (default %d)\n"
            "  --json           one JSON object instead of the table (null where undefined)\n"
            "  -h, --help       this help\n"
            "\n"
            "Exit status: 0 ok, 1 a database or run cannot be read, 2 usage error.\n",
            COMPARE_DEFAULT_SEED, COMPARE_DEFAULT_RESAMPLES);
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "twinserve compare: %s%s%s%s\n", msg, arg ? " '" : "", arg ? arg : "",
            arg ? "'" : "");
    return 2;
}

int cmd_compare(int argc, char **argv) {
    const char *path = NULL, *path2 = NULL, *runs = NULL;
    int json = 0;
    compare_opts_t o;
    compare_opts_default(&o);
    sqlite3 *db = NULL, *db2 = NULL;
    char *list = NULL;
    char err[1024];
    int status = 1;
    compare_result_t *res = NULL;

    static const struct option opts[] = {
        {"runs", 1, 0, 'r'}, {"db2", 1, 0, 'd'}, {"seed", 1, 0, 's'},
        {"resamples", 1, 0, 'n'}, {"json", 0, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    int c;
    optind = 1;
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
        case 'j': json = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) path = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "twinserve compare: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
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
    int64_t id_a, id_b;
    if (summary_find_run(db, name_a, &id_a, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        goto done;
    }
    if (summary_find_run(dbb, name_b, &id_b, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path_b, err);
        goto done;
    }
    res = malloc(sizeof *res);
    if (!res) {
        fprintf(stderr, "twinserve compare: out of memory\n");
        goto done;
    }
    if (compare_runs(db, path, id_a, dbb, path_b, id_b, &o, res, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    if (json) compare_json(stdout, res);
    else compare_print(stdout, res);
    status = 0;
done:
    free(res);
    free(list);
    sqlite3_close(db2);
    sqlite3_close(db);
    return status;
}

/* twinserve runs DB [--run NAME|ID[,NAME|ID...]]: one table row per run of a database. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analysis/summary.h"
#include "cli/cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: twinserve runs DB [--run NAME|ID[,NAME|ID...]]\n"
            "\n"
            "Prints one line per run recorded in DB (all runs, or the listed ones): status,\n"
            "finished/rejected requests, makespan, throughput, TTFT and TPOT p50/p99, and\n"
            "for a run that failed its error, cut to fit (`twinserve report` shows it whole).\n"
            "A run that is not done (failed, interrupted, still running) covers only part\n"
            "of its trace.\n"
            "\n"
            "  --run LIST   comma-separated run names or ids\n"
            "  -h, --help   this help\n");
}

static int print_row(sqlite3 *db, const char *path, int64_t id) {
    char err[1024];
    summary_t s;
    if (summary_load(db, id, &s, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return -1;
    }
    summary_table_row(stdout, &s);
    return 0;
}

int cmd_runs(int argc, char **argv) {
    const char *path = NULL, *runs = NULL;
    sqlite3 *db = NULL;
    int64_t *ids = NULL;
    char *list = NULL;
    char err[1024];
    int status = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--run") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "twinserve runs: --run needs a value\n");
                return 2;
            }
            runs = argv[++i];
        } else if (strncmp(a, "--run=", 6) == 0) {
            runs = a + 6;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "twinserve runs: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "twinserve runs: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "twinserve runs: missing DB\n");
        usage(stderr);
        return 2;
    }
    if (runs && !*runs) {
        fprintf(stderr, "twinserve runs: --run needs a value\n");
        return 2;
    }

    if (summary_open(path, &db, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    size_t n = 0;
    if (runs) {
        /* Resolve every name before printing, so a typo fails without a partial table. */
        list = strdup(runs);
        ids = calloc(strlen(runs) / 2 + 1, sizeof *ids);   /* >= number of comma items */
        if (!list || !ids) {
            fprintf(stderr, "twinserve runs: out of memory\n");
            goto done;
        }
        char *save = NULL;
        for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (summary_find_run(db, tok, &ids[n], err, sizeof err) != 0) {
                fprintf(stderr, "%s: %s\n", path, err);
                goto done;
            }
            n++;
        }
        if (n == 0) {
            fprintf(stderr, "twinserve runs: --run lists no run\n");
            status = 2;
            goto done;
        }
    } else if (summary_list(db, &ids, &n, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        goto done;
    }
    summary_table_header(stdout);
    if (n == 0) printf("(no runs)\n");
    for (size_t i = 0; i < n; i++)
        if (print_row(db, path, ids[i]) != 0) goto done;
    status = 0;
done:
    free(ids);
    free(list);
    sqlite3_close(db);
    return status;
}

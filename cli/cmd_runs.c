/* twinserve runs DB [--run LIST | --delete LIST [--force]]: one table row per run of a
 * database, or the listed runs deleted with their rows. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/summary.h"
#include "cli/cli.h"
#include "traces/recorder.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: twinserve runs DB [--run NAME|ID[,NAME|ID...]]\n"
            "       twinserve runs DB --delete NAME|ID[,NAME|ID...] [--force]\n"
            "\n"
            "Prints one line per run recorded in DB (all runs, or the listed ones): status,\n"
            "finished/rejected requests, makespan, throughput, TTFT and TPOT p50/p99, and\n"
            "for a run that failed its error, cut to fit (`twinserve report` shows it whole).\n"
            "A run that is not done (failed, interrupted, still running) covers only part\n"
            "of its trace.\n"
            "\n"
            "  --run LIST     comma-separated run names or ids\n"
            "  --delete LIST  delete those runs and their requests, steps and tokens, all or\n"
            "                 none (a failed run's name can then be used again); a run still\n"
            "                 'running' is refused (a process may be writing it) unless --force\n"
            "  -h, --help     this help\n");
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
    int del = 0, force = 0;
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
        } else if (strcmp(a, "--delete") == 0 || strncmp(a, "--delete=", 9) == 0) {
            if (a[8] == '=') runs = a + 9;
            else if (i + 1 >= argc) {
                fprintf(stderr, "twinserve runs: --delete needs a value\n");
                return 2;
            } else runs = argv[++i];
            del = 1;
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "twinserve runs: unknown option '%s' (twinserve runs --help lists "
                    "them)\n", a);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "twinserve runs: unexpected argument '%s'%s\n", a,
                    " (twinserve runs --help shows the usage)");
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "twinserve runs: missing DB\n");
        usage(stderr);
        return 2;
    }
    if (runs && !*runs) {
        fprintf(stderr, "twinserve runs: --%s needs a value\n", del ? "delete" : "run");
        return 2;
    }
    if (force && !del) {
        fprintf(stderr, "twinserve runs: --force goes with --delete\n");
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
    if (del) {
        /* the readers' connection is read-only: the deletion writes through its own */
        sqlite3 *w = NULL;
        int ok = sqlite3_open_v2(path, &w, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
                 sqlite3_busy_timeout(w, 5000) == SQLITE_OK &&
                 rec_delete_runs(w, ids, n, force, err, sizeof err) == 0;
        if (!ok && w && !err[0]) snprintf(err, sizeof err, "%s", sqlite3_errmsg(w));
        sqlite3_close(w);
        if (!ok) {
            fprintf(stderr, "twinserve runs: %s: %s (nothing deleted)\n", path, err);
            goto done;
        }
        printf("deleted %zu run%s from %s\n", n, n == 1 ? "" : "s", path);
        status = 0;
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

/* cmd_merge: `twinserve merge OUT.db IN.db...`, the runs of several databases gathered into
 * one (traces/merge.h): a sweep's jobs run elsewhere (`sweep --emit-jobs`), runs from
 * several machines. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "traces/merge.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve merge OUT.db IN.db [IN.db ...] [-q]\n"
        "\n"
        "Copies every run of each input database (its requests, steps, tokens and every other\n"
        "table that refers to runs) into OUT.db, created when absent. Runs get OUT's next ids,\n"
        "in each input's order, inputs in the order given (so `merge OUT DIR/out/*.db` after\n"
        "`sweep --emit-jobs DIR` numbers them as the sweep would have).\n"
        "\n"
        "Run names stay unique: when a run's name is taken in OUT, its sweep (runs NAME@...),\n"
        "its experiment (runs NAME-rK) or the run alone is renamed NAME-2 (-3, ...) with its\n"
        "config tags, so it stays one sweep or experiment; each rename is said on stderr.\n"
        "Runs of one sweep or experiment merged from separate databases without a clash form\n"
        "that one sweep or experiment again, for plot, report and compare.\n"
        "\n"
        "Each input is one transaction: an input that fails (not a twinserve database, another\n"
        "schema version, unreadable) leaves OUT as it was before it, is named on stderr, and\n"
        "the others are still merged. A run still 'running' in an input (a job that did not\n"
        "finish) is merged as it is, with a warning; report and compare flag it.\n"
        "\n"
        "  -q, --quiet           no line per input (renames, warnings and errors still print)\n"
        "\n"
        "Exit status: 0 every input merged, 1 some input not merged (see stderr), 2 usage error.\n");
}

static void print_note(void *ud, const char *msg) {
    (void)ud;
    fprintf(stderr, "twinserve merge: %s\n", msg);
}

int cmd_merge(int argc, char **argv) {
    static const struct option opts[] = {
        { "quiet", 0, 0, 'q' }, { "help", 0, 0, 'h' }, { 0, 0, 0, 0 },
    };
    int quiet = 0, c, failed = 0;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (c) {
        case 'q': quiet = 1; break;
        case 'h': usage(stdout); return 0;
        default: return cli_bad_option("merge", argv, opts);
        }
    }
    if (argc - optind < 2) {
        fprintf(stderr, "twinserve merge: give the output database and at least one input\n");
        usage(stderr);
        return 2;
    }
    const char *out = argv[optind];
    merge_t *m = merge_open(out);
    if (!m || merge_errmsg(m)) {
        fprintf(stderr, "twinserve merge: %s\n", m ? merge_errmsg(m) : "out of memory");
        merge_close(m);
        return 1;
    }
    merge_set_notes(m, print_note, NULL);
    size_t runs = 0;
    for (int i = optind + 1; i < argc; i++) {
        if (merge_add(m, argv[i]) != 0) {
            fprintf(stderr, "twinserve merge: %s\n", merge_errmsg(m));
            failed++;
            continue;
        }
        size_t n = merge_n_runs(m);
        runs += n;
        if (quiet) continue;
        if (n == 0)
            printf("%s: no runs\n", argv[i]);
        else
            printf("%s: %zu run%s -> ids %lld..%lld\n", argv[i], n, n == 1 ? "" : "s",
                   (long long)merge_run_id(m, 0), (long long)merge_run_id(m, n - 1));
    }
    merge_close(m);
    int inputs = argc - optind - 1;
    if (failed)
        fprintf(stderr, "twinserve merge: %d of %d inputs not merged (above); %s has the "
                "others' %zu runs\n", failed, inputs, out, runs);
    else if (!quiet)
        printf("merged %d database%s, %zu runs, into %s\n", inputs, inputs == 1 ? "" : "s",
               runs, out);
    return failed ? 1 : 0;
}

/* cmd_upgrade: `twinserve upgrade DB...`, a database written by an older twinserve brought up
 * to this build's schema in place (traces/recorder.h, rec_upgrade_db), so the analysis
 * commands read it again. Commands that record into a database upgrade it themselves. */
#include <getopt.h>
#include <stdio.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "traces/recorder.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve upgrade DB [DB ...]\n"
        "\n"
        "Brings each database written by an older twinserve up to this build's record schema,\n"
        "in place and in one transaction, keeping every row: the versions since which only\n"
        "columns and tables were added (schema_version 5 and later). The analysis commands\n"
        "(runs, report, compare, plot, validate) only read, and refuse an older database with\n"
        "a hint to run this; sim, engine, sweep and import upgrade a database they record into.\n"
        "A database already current is left as it is.\n"
        "\n"
        "Exit status: 0 every database is current, 1 some could not be upgraded, 2 usage error.\n");
}

int cmd_upgrade(int argc, char **argv) {
    static const struct option opts[] = { { "help", 0, 0, 'h' }, { 0, 0, 0, 0 } };
    int c, failed = 0;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return 0;
        default: return cli_bad_option("upgrade", argv, opts);
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "twinserve upgrade: give at least one database\n");
        usage(stderr);
        return 2;
    }
    for (int i = optind; i < argc; i++) {
        FILE *probe = fopen(argv[i], "rb");
        if (!probe) { /* rec_open would create it: an upgrade needs a database to exist */
            perror(argv[i]);
            failed = 1;
            continue;
        }
        fclose(probe);
        rec_t *r = rec_open(argv[i]);
        const char *e = rec_errmsg(r);
        if (e) {
            fprintf(stderr, "twinserve upgrade: %s\n", e);
            failed = 1;
        } else if (rec_upgraded_from(r) > 0) {
            printf("%s: upgraded from schema_version %lld to the current one; every row kept\n",
                   argv[i], rec_upgraded_from(r));
        } else {
            printf("%s: already current\n", argv[i]);
        }
        rec_close(r);
    }
    return failed;
}

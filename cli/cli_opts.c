/* cli_opts: see cli_opts.h. */
#include "cli/cli_opts.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"

char cli_want[128];

int cli_bad_value(const char *cmd, const char *opt, const char *value) {
    fprintf(stderr, "twinserve %s: bad value '%s' for %s%s%s%s\n", cmd, value ? value : "", opt,
            cli_want[0] ? " (" : "", cli_want, cli_want[0] ? ")" : "");
    cli_want[0] = '\0';
    return 0;
}

int cli_edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    int row[65];
    if (n > 64) n = 64;
    if (m > 64) m = 64;
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[m] > 64 ? 64 : row[m];
}

int cli_bad_option(const char *cmd, char *const *argv, const struct option *opts) {
    char given[128];
    if (optopt > 0 && optopt < 256 && optopt != '?') {
        /* a short option: unknown, or its value missing */
        for (const struct option *o = opts; o && o->name; o++)
            if (o->val == optopt && o->has_arg == required_argument) {
                fprintf(stderr, "twinserve %s: option '-%c' needs a value (twinserve %s --help)\n",
                        cmd, optopt, cmd);
                return 2;
            }
        snprintf(given, sizeof given, "-%c", optopt);
    } else {
        snprintf(given, sizeof given, "%s", optind > 0 ? argv[optind - 1] : "?");
    }
    const char *name = given;
    while (*name == '-') name++;
    size_t len = strcspn(name, "=");
    char bare[128];
    snprintf(bare, sizeof bare, "%.*s", (int)len, name);
    const char *best = NULL;
    int best_d = 1 << 30;
    for (const struct option *o = opts; o && o->name; o++) {
        if (!strcmp(o->name, bare) && given[0] == '-' && given[1] == '-') {
            /* known: getopt refused its value (missing, or given to a flag) */
            fprintf(stderr, "twinserve %s: option '--%s' %s (twinserve %s --help)\n", cmd,
                    o->name, o->has_arg == required_argument ? "needs a value" : "takes no value",
                    cmd);
            return 2;
        }
        int d = cli_edit_distance(bare, o->name);
        if (d < best_d || (d == best_d && best && strcmp(o->name, best) < 0))
            best_d = d, best = o->name;
    }
    /* a suggestion only when it is close: one edit in a short name, two in a longer, three
     * in a long one (a typo, not another option) */
    size_t bl = strlen(bare);
    int most = bl <= 4 ? 1 : bl <= 8 ? 2 : 3;
    int close = best && best_d <= most;
    if (close)
        fprintf(stderr, "twinserve %s: unknown option '%s'; did you mean --%s? (twinserve %s "
                "--help lists them)\n", cmd, given, best, cmd);
    else
        fprintf(stderr, "twinserve %s: unknown option '%s' (twinserve %s --help lists them)\n",
                cmd, given, cmd);
    return 2;
}

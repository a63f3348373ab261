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
    /* optimal string alignment: a swap of two neighbours ("--prot" for --port) is one edit,
     * the commonest typo */
    size_t n = strlen(a), m = strlen(b);
    int d[65][65];
    if (n > 64) n = 64;
    if (m > 64) m = 64;
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m] > 64 ? 64 : d[n][m];
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

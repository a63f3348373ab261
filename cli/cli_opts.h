/* cli_opts: what a command says about an option it does not know. getopt's own message and a
 * whole help text buried the mistake; this says it in one line, with the nearest option the
 * command has ("did you mean --policy?"), and points to --help.
 *
 * Commands parse with opterr = 0 (main.c sets it) and, when getopt_long returns '?', return
 * cli_bad_option(...). Ownership: nothing kept. */
#ifndef TWIN_CLI_OPTS_H
#define TWIN_CLI_OPTS_H

#include <getopt.h>

/* The option getopt_long just refused, said on stderr ("twinserve CMD: unknown option
 * '--polcy'; did you mean --policy? (twinserve CMD --help lists them)", or "option
 * '--policy' needs a value"). Returns 2, the exit status of a usage error. */
int cli_bad_option(const char *cmd, char *const *argv, const struct option *opts);

/* "twinserve CMD: bad value 'VALUE' for OPT (WHAT IT TAKES)": what it takes is cli_want
 * (cli_util.h), set by the parser that refused the value; left out when that is empty.
 * Clears cli_want. Returns 0 (the apply functions' "bad value"). */
int cli_bad_value(const char *cmd, const char *opt, const char *value);

/* Edit distance between a and b (bytes: insertions, deletions, substitutions and swaps of
 * two neighbours, each one edit; optimal string alignment), capped at 64. */
int cli_edit_distance(const char *a, const char *b);

#endif

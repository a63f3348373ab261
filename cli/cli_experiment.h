/* cli_experiment: `--repeat` for the commands that record runs (sim, engine): the same
 * configuration once per seed, or once per window of the trace (windows:N[:LEN]), recorded
 * as the experiment's runs NAME-rK (analysis/experiment.h), so both commands name, seed and
 * report an experiment the same way.
 *
 * Ownership: the caller's; nothing is kept. */
#ifndef TWIN_CLI_EXPERIMENT_H
#define TWIN_CLI_EXPERIMENT_H

#include <stddef.h>
#include <stdint.h>

#include "traces/summary.h"
#include "traces/trace.h"

/* One member of an experiment: its run name, seed and config member ("experiment":{...});
 * for a window experiment (windowed 1) the trace window it replays, start_s and duration_s
 * in trace time (trace_opts_t's), which the command sets on its replay. */
typedef struct {
    const char *run;
    uint64_t seed;
    const char *member;
    int windowed;
    double start_s, duration_s;
} cli_member_t;

/* Runs one member. On success 0 and a one-line summary in line (may be ""); else the
 * message in err and -1 when the run failed (recorded failed), -2 when it could not start
 * (nothing recorded). */
typedef int (*cli_experiment_run_fn)(void *ud, const cli_member_t *m, char *line,
                                     size_t linelen, char *err, size_t errlen);

typedef struct {
    const char *cmd;              /* names the command in messages and the default name
                                   * (CMD-<policy stem>) */
    const char *spec;             /* --repeat: N, S1,S2,..., or windows:N[:LEN] */
    uint64_t base_seed;
    const char *db_path, *requested_name, *policy_path;
    const char *trace_path;       /* the trace and its options: windows:N without LEN */
    const trace_opts_t *topts;    /* split the span after --start (or --duration) in N */
    int quiet;
    cli_experiment_run_fn run;
    void *ud;
} cli_experiment_t;

/* Runs the experiment. Stops at the first failed run (recorded failed, as a single run is),
 * and after the run a signal interrupted (cli_signal.h; the caller watches), saying which
 * runs were not run. When the runs of a seed experiment came out identical (nothing in the
 * replay depends on the seed), says so and how to repeat what varies (windows:N): a
 * comparison of copies would report intervals of zero width. Returns the exit status: 0,
 * 1 a run failed or the experiment cannot be set up, 2 a bad --repeat or --name or a
 * configuration that cannot run, 128 + the signal when interrupted. */
int cli_experiment_repeat(const cli_experiment_t *x);

/* What a command says when one run did not complete, and its exit status: 2 and the message
 * when the run could not start (setup_failed: nothing recorded, a usage error); else the
 * message, "run ID marked failed in DB" (run_id >= 0), and 128 + the signal when a watched
 * signal arrived (cli_signal_caught), 1 otherwise. */
/* A member's line for --repeat: "RUN (id N, seed S): R requests, F finished, TTFT p50 ..,
 * TPOT p50 ..", and ", W s wall" when wall_s >= 0. */
void cli_member_line(char *line, size_t len, const char *run, int64_t run_id, uint64_t seed,
                     const summary_t *s, double wall_s);

int cli_run_failed(const char *cmd, const char *db_path, int64_t run_id, int setup_failed,
                   const char *err);

#endif

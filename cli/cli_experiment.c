/* cli_experiment: see cli_experiment.h. */
#include "cli/cli_experiment.h"

#include <stdio.h>
#include <stdlib.h>

#include "analysis/experiment.h"
#include "cli/cli_signal.h"
#include "traces/recorder.h"

int cli_experiment_repeat(const char *cmd, const char *spec, uint64_t base_seed,
                          const char *db_path, const char *requested_name,
                          const char *policy_path, int quiet, cli_experiment_run_fn run,
                          void *ud) {
    uint64_t *seeds = NULL;
    int n = 0, rc = 2;
    char err[8192], name[128], stem[128], base[140], member_run[160], member[256], line[512];
    if (experiment_parse_seeds(spec, base_seed, &seeds, &n, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve %s: %s\n", cmd, err);
        goto done;
    }
    rec_policy_stem(policy_path, stem, sizeof stem);
    snprintf(base, sizeof base, "%s-%s", cmd, stem);
    if (experiment_pick_name(db_path, requested_name, base, n, name, sizeof name, err,
                             sizeof err) != 0) {
        fprintf(stderr, "twinserve %s: %s\n", cmd, err);
        goto done;
    }
    rc = 1;
    for (int k = 0; k < n; k++) {
        experiment_run_name(member_run, sizeof member_run, name, k);
        experiment_member(member, sizeof member, name, k, n, seeds[k]);
        line[0] = '\0';
        int got = run(ud, member_run, seeds[k], member, line, sizeof line, err, sizeof err);
        if (got == -2) rc = 2;
        if (got != 0)
            fprintf(stderr, "twinserve %s: %s (seed %llu): %s\n", cmd, member_run,
                    (unsigned long long)seeds[k], err);
        else if (!quiet && line[0])
            printf("%s\n", line);
        if (got == 0 && !cli_signal_caught) continue;
        /* The experiment's members each say "of": N, so the missing ones stay visible. */
        if (k + 1 < n)
            fprintf(stderr, "twinserve %s: experiment %s stopped%s: runs %s-r%d..%s-r%d not "
                    "run\n", cmd, name, cli_signal_caught ? " by the signal" : "", name, k + 1,
                    name, n - 1);
        if (cli_signal_caught) rc = cli_signal_exit_code(cli_signal_caught);
        goto done;
    }
    if (!quiet)
        printf("experiment %s: %d runs in %s (compare it by this name)\n", name, n, db_path);
    rc = 0;
done:
    free(seeds);
    return rc;
}

void cli_member_line(char *line, size_t len, const char *run, int64_t run_id, uint64_t seed,
                     const summary_t *s, double wall_s) {
    int k = snprintf(line, len, "%s (id %lld, seed %llu): %lld requests, %lld finished, TTFT "
                     "p50 %.2f ms, TPOT p50 %.2f ms", run, (long long)run_id,
                     (unsigned long long)seed, (long long)s->requests, (long long)s->finished,
                     1e3 * s->ttft.p50, 1e3 * s->tpot.p50);
    if (wall_s >= 0 && k >= 0 && (size_t)k < len)
        snprintf(line + k, len - (size_t)k, ", %.3f s wall", wall_s);
}

int cli_run_failed(const char *cmd, const char *db_path, int64_t run_id, int setup_failed,
                   const char *err) {
    fprintf(stderr, "twinserve %s: %s\n", cmd, err);
    if (setup_failed) {
        fprintf(stderr, "twinserve %s: nothing was run or recorded\n", cmd);
        return 2;
    }
    if (run_id >= 0)
        fprintf(stderr, "twinserve %s: run %lld marked failed in %s\n", cmd, (long long)run_id,
                db_path);
    return cli_signal_caught ? cli_signal_exit_code(cli_signal_caught) : 1;
}

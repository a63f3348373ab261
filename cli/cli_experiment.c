/* cli_experiment: see cli_experiment.h. */
#include "cli/cli_experiment.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

#include "analysis/experiment.h"
#include "cli/cli_signal.h"
#include "traces/recorder.h"

/* The span of trace time the replay covers (from --start, within --duration), for
 * windows:N without LEN. 0, or -1 with a message. */
static int trace_span(const char *path, const trace_opts_t *topts, double *span, char *err,
                      size_t errlen) {
    trace_opts_t o = *topts;
    o.rate_scale = 1.0;
    o.limit = 0;
    if (o.duration_s > 0) {
        *span = o.duration_s;
        return 0;
    }
    trace_t *t = trace_open(path, &o);
    int rc = -1, k;
    if (!t) return snprintf(err, errlen, "out of memory opening %s", path), -1;
    trace_req_t r;
    double first = 0, last = 0;
    int64_t count = 0;
    while (!trace_errmsg(t) && (k = trace_next(t, &r)) == 1) {
        if (count++ == 0) first = r.arrival_s;
        last = r.arrival_s;
    }
    if (trace_errmsg(t)) snprintf(err, errlen, "%s", trace_errmsg(t));
    else if (!(last > first))
        snprintf(err, errlen, "%s: windows of a trace need requests at different times (it "
                 "has %lld)", path, (long long)count);
    else {
        *span = last - first + 1e-9;   /* the last request inside the last window */
        rc = 0;
    }
    trace_close(t);
    return rc;
}

/* After a seed experiment: its runs' records compared; copies are said to be copies. */
static void say_if_identical(const cli_experiment_t *x, const char *name, int n) {
    sqlite3 *db = NULL;
    int64_t *ids = NULL;
    size_t got = 0;
    int is_exp = 0, same = 0;
    char err[512];
    if (summary_open(x->db_path, &db, err, sizeof err) == 0 &&
        experiment_resolve(db, name, &ids, &got, &is_exp, err, sizeof err) == 0 &&
        (int)got == n && experiment_identical(db, ids, got, &same, err, sizeof err) == 0 && same)
        fprintf(stderr, "twinserve %s: NOTE the %d runs of experiment %s are identical: nothing "
                "in this replay depends on the seed (a trace replay is deterministic; seeds "
                "move only a policy's and a draft's random draws), so they show no variation; "
                "compare counts them as one run. --repeat windows:%d replays %d windows of the "
                "trace instead\n", x->cmd, n, name, n, n);
    free(ids);
    if (db) sqlite3_close(db);
}

int cli_experiment_repeat(const cli_experiment_t *x) {
    uint64_t *seeds = NULL;
    int n = 0, rc = 2, windowed;
    double len = NAN, span = NAN;
    char err[8192], name[128], stem[128], base[140], member_run[160], member[320], line[512];
    if ((windowed = experiment_parse_windows(x->spec, &n, &len, err, sizeof err)) < 0) {
        fprintf(stderr, "twinserve %s: %s\n", x->cmd, err);
        goto done;
    }
    if (windowed && isnan(len)) {
        if (trace_span(x->trace_path, x->topts, &span, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve %s: --repeat %s: %s\n", x->cmd, x->spec, err);
            goto done;
        }
        len = span / n;
    }
    if (!windowed &&
        experiment_parse_seeds(x->spec, x->base_seed, &seeds, &n, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve %s: %s\n", x->cmd, err);
        goto done;
    }
    rec_policy_stem(x->policy_path, stem, sizeof stem);
    snprintf(base, sizeof base, "%s-%s", x->cmd, stem);
    if (experiment_pick_name(x->db_path, x->requested_name, base, n, name, sizeof name, err,
                             sizeof err) != 0) {
        fprintf(stderr, "twinserve %s: %s\n", x->cmd, err);
        goto done;
    }
    rc = 1;
    for (int k = 0; k < n; k++) {
        cli_member_t m = { .run = member_run, .member = member, .windowed = windowed,
                           .seed = windowed ? x->base_seed : seeds[k] };
        experiment_run_name(member_run, sizeof member_run, name, k);
        if (windowed) {
            m.start_s = x->topts->start_s + k * len;
            m.duration_s = len;
            experiment_member_window(member, sizeof member, name, k, n, m.seed, m.start_s,
                                     m.duration_s);
        } else {
            experiment_member(member, sizeof member, name, k, n, m.seed);
        }
        line[0] = '\0';
        int got = x->run(x->ud, &m, line, sizeof line, err, sizeof err);
        if (got == -2) rc = 2;
        if (got != 0)
            fprintf(stderr, "twinserve %s: %s (seed %llu): %s\n", x->cmd, member_run,
                    (unsigned long long)m.seed, err);
        else if (!x->quiet && line[0])
            printf("%s\n", line);
        if (got == 0 && !cli_signal_caught) continue;
        /* The experiment's members each say "of": N, so the missing ones stay visible. */
        if (k + 1 < n)
            fprintf(stderr, "twinserve %s: experiment %s stopped%s: runs %s-r%d..%s-r%d not "
                    "run\n", x->cmd, name, cli_signal_caught ? " by the signal" : "", name,
                    k + 1, name, n - 1);
        if (cli_signal_caught) rc = cli_signal_exit_code(cli_signal_caught);
        goto done;
    }
    if (!x->quiet) {
        if (windowed)
            printf("experiment %s: %d runs over windows of %.6g s of the trace from %.6g s, in "
                   "%s (compare it by this name)\n", name, n, len, x->topts->start_s, x->db_path);
        else
            printf("experiment %s: %d runs in %s (compare it by this name)\n", name, n,
                   x->db_path);
    }
    if (!windowed) say_if_identical(x, name, n);
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

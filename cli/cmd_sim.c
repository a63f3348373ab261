/* cmd_sim: `twinserve sim`, a trace replay in the discrete-event simulator. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "analysis/band.h"
#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_sim.h"
#include "cli/cli_util.h"
#include "cli/cli_experiment.h"
#include "cli/cli_signal.h"
#include "sim/sim.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve sim --trace FILE --policy FILE [options]\n"
        "\n"
        "Replays a request trace through a Lua scheduling policy in the discrete-event\n"
        "simulator (a shipped GPU calibration, a --cost file or the roofline) and records\n"
        "per-request and per-step rows in SQLite.\n"
        "\n"
        "  --trace FILE          Azure/BurstGPT CSV, Mooncake JSONL or arrival_s,prompt_tokens,\n"
        "                        output_tokens CSV (detected from the header)\n"
        "  --policy FILE         policies/{static,continuous,chunked_prefill,speculative,\n"
        "                        priority,fair}.lua\n"
        "  --db FILE             SQLite database (default twinserve.db; many runs per file)\n"
        "  --name RUN            run name (default sim-<policy>-<id>)\n"
        "  --rate-scale X        multiply the request rate by X (divide arrival gaps by X)\n"
        "  --repeat N|S1,S2,...  run N times with seeds --seed .. --seed + N - 1 (or with the\n"
        "                        seeds listed), recorded as one experiment: runs NAME-r0..,\n"
        "                        config \"experiment\":{name,index,of,seed}; --name names the\n"
        "                        experiment (default sim-<policy>, made unique); `twinserve\n"
        "                        compare` takes the experiment's name. A trace replay does\n"
        "                        not depend on the seed (only a policy's and a draft's\n"
        "                        random draws do): its seed runs are copies, said so\n"
        "  --repeat windows:N[:LEN]\n"
        "                        N runs over N consecutive windows of the trace, LEN s each\n"
        "                        (default: the span from --start, or --duration, split in\n"
        "                        N), run k from --start + k LEN: the variation between parts\n"
        "                        of the trace, which `compare` pairs window by window\n"
        "  --config-json MEMBERS JSON members added to the run's config object, e.g.\n"
        "                        '\"sweep\":{\"name\":\"S\",\"rate_rps\":2,\"scale\":0.5}': the tags\n"
        "                        `sweep --emit-jobs` gives each job's run, so the merged runs\n"
        "                        are a sweep (and experiment) for plot, report and compare\n"
        "                        (not with --repeat)\n"
        "  -q, --quiet           no progress line or summary\n");
    cli_sim_usage(f);
    fprintf(f,
        "\n"
        "Exit status: 0 done, 1 the run failed (recorded as failed), 2 usage error: bad\n"
        "options, a missing or unreadable file, an unknown preset, a policy that does not\n"
        "load or a trace with no request to replay (nothing is recorded), 3 a policy call\n"
        "ran away inside JIT-compiled code and was stopped by the watchdog (recorded as\n"
        "failed; requests in flight at that moment are recorded as aborted), 130/143\n"
        "interrupted by SIGINT/SIGTERM: the run stops at the next step, is recorded as\n"
        "failed \"interrupted by SIGINT at t=...\" with its unfinished requests aborted (a\n"
        "second signal ends the process at once; the database stays valid).\n");
}

enum { O_TRACE = 256, O_POLICY, O_DB, O_NAME, O_RATE, O_REPEAT, O_CONFIG, O_HELP };

/* 1 when "{" members "}" is a JSON object: runs.config is CHECKed valid, and a bad
 * --config-json should be a usage error here, not a failed insert inside the run. */
static int json_members_ok(const char *members) {
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int ok = 0;
    if (sqlite3_open(":memory:", &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT json_valid('{' || ?1 || '}')", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, members, -1, SQLITE_STATIC);
        ok = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return ok;
}

/* --repeat (cli_experiment.h): one simulated run per seed. */
static int run_member(void *ud, const cli_member_t *m, char *line, size_t linelen, char *err,
                      size_t errlen) {
    sim_opts_t o = *(const sim_opts_t *)ud;
    sim_result_t res;
    o.run_name = m->run;
    o.seed = m->seed;
    o.config_extra = m->member;
    if (m->windowed) o.trace_opts.start_s = m->start_s, o.trace_opts.duration_s = m->duration_s;
    if (sim_run(&o, &res, err, errlen) != 0) return res.setup_failed ? -2 : -1;
    if (res.have_summary)
        cli_member_line(line, linelen, m->run, res.run_id, m->seed, &res.summary, -1);
    return 0;
}

/* --band: the two sides after the nominal run, then the ranges. */
static int run_band(const sim_opts_t *o, const sim_result_t *nom, int quiet) {
    double err;
    char src[256], e[8192];
    sim_result_t lo, hi;
    if (band_pick(o->band_err, nom->band_err, nom->band_src, &err, src, sizeof src, e,
                  sizeof e) != 0 ||
        band_sim(o, nom, err, &lo, &hi, e, sizeof e) != 0) {
        fprintf(stderr, "twinserve sim: %s\n", e);
        return 1;
    }
    if (!quiet) band_print(stdout, &nom->summary, &lo.summary, &hi.summary, err, src);
    return 0;
}

int cmd_sim(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "policy", 1, 0, O_POLICY }, { "db", 1, 0, O_DB },
        { "name", 1, 0, O_NAME }, { "rate-scale", 1, 0, O_RATE }, { "quiet", 0, 0, 'q' },
        { "repeat", 1, 0, O_REPEAT }, { "config-json", 1, 0, O_CONFIG },
        { "help", 0, 0, O_HELP }, CLI_SIM_OPTIONS,
        { 0, 0, 0, 0 },
    };
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.version = TWIN_VERSION;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int quiet = 0, rc = 2, c;
    const char *repeat = NULL;
    if (!sets) return 1;
    o.sets = sets;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        switch (c) {
        case O_TRACE: o.trace_path = optarg; break;
        case O_POLICY: o.policy_path = optarg; break;
        case O_DB: o.db_path = optarg; break;
        case O_NAME: o.run_name = optarg; break;
        case O_RATE:
            if (!cli_double(optarg, 1e-9, 1e9, &o.trace_opts.rate_scale)) {
                cli_bad_value("sim", "--rate-scale", optarg);
                goto done;
            }
            break;
        case 'q': quiet = 1; break;
        case O_REPEAT: repeat = optarg; break;
        case O_CONFIG:
            if (!*optarg || !json_members_ok(optarg)) {
                fprintf(stderr, "twinserve sim: --config-json '%s' is not JSON object members "
                        "(want e.g. '\"key\":{\"a\":1}')\n", optarg);
                goto done;
            }
            o.config_extra = optarg;
            break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default:
            if (c < CLI_SIM_FIRST) {
                rc = cli_bad_option("sim", argv, opts);
                goto done;
            }
            if (!cli_sim_apply("sim", c, optarg, &o)) goto done;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve sim: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (!o.trace_path || !o.policy_path) {
        fprintf(stderr, "twinserve sim: --trace and --policy are required\n");
        usage(stderr);
        goto done;
    }
    if (repeat && o.band) {
        fprintf(stderr, "twinserve sim: --band works without --repeat (the band of one run; "
                "an experiment's seeds give its noise instead)\n");
        goto done;
    }
    if (repeat && o.config_extra) {
        fprintf(stderr, "twinserve sim: --config-json works without --repeat (which tags "
                "each run as a member of its experiment)\n");
        goto done;
    }
    o.progress = !quiet && isatty(2);
    o.interrupt = &cli_signal_caught;
    cli_signal_watch();
    if (repeat) {
        cli_experiment_t x = { .cmd = "sim", .spec = repeat, .base_seed = o.seed,
                               .db_path = o.db_path, .requested_name = o.run_name,
                               .policy_path = o.policy_path, .trace_path = o.trace_path,
                               .topts = &o.trace_opts, .quiet = quiet, .run = run_member,
                               .ud = &o };
        rc = cli_experiment_repeat(&x);
        goto done;
    }

    sim_result_t res;
    char err[8192];
    if (sim_run(&o, &res, err, sizeof err) != 0) {
        rc = cli_run_failed("sim", o.db_path, res.run_id, res.setup_failed, err);
        goto done;
    }
    for (int k = 0; k < res.n_warnings; k++)
        fprintf(stderr, "twinserve sim: WARNING %s\n", res.warning[k]);
    if (!quiet) {
        printf("run %lld in %s: %lld requests (%lld trace rows skipped as failed), %lld steps, "
               "%d KV blocks%s; simulated in %.3f s wall\n",
               (long long)res.run_id, o.db_path, (long long)res.requests, (long long)res.skipped,
               (long long)res.steps, res.num_blocks, res.replicas > 1 ? " per replica" : "",
               res.wall_s);
        if (res.replicas > 1)
            printf("cluster: %d replicas, %.0f simulated requests per second of wall time\n",
                   (int)res.replicas, res.wall_s > 0 ? (double)res.requests / res.wall_s : 0.0);
        printf("cost model: %s\n", res.calibration[0] ? res.calibration : "the roofline");
        if (res.kv_tiers[0]) printf("kv tiers: %s\n", res.kv_tiers);
        if (res.have_summary) summary_print(stdout, &res.summary);
    }
    rc = 0;
    if (o.band) rc = run_band(&o, &res, quiet);
done:
    cli_signal_unwatch();
    free(sets);
    return rc;
}

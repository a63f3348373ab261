/* cmd_sim: `twinserve sim`, a trace replay in the discrete-event simulator. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_sim.h"
#include "cli/cli_util.h"
#include "analysis/experiment.h"
#include "sim/sim.h"
#include "traces/recorder.h"

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
        "                        compare` takes the experiment's name\n"
        "  -q, --quiet           no progress line or summary\n");
    cli_sim_usage(f);
    fprintf(f,
        "\n"
        "Exit status: 0 done, 1 the run failed (recorded as failed), 2 usage error,\n"
        "3 a policy call ran away inside JIT-compiled code and was stopped by the watchdog\n"
        "(recorded as failed; requests in flight at that moment are recorded as aborted).\n");
}

enum { O_TRACE = 256, O_POLICY, O_DB, O_NAME, O_RATE, O_REPEAT, O_HELP };

/* --repeat: the same configuration once per seed, as the experiment's runs NAME-rK. Stops
 * at the first failed run (recorded failed, as a single run is). 0, 1 a run failed or the
 * experiment cannot be set up, 2 a bad --repeat or --name. */
static int run_experiment(sim_opts_t *o, const char *spec, int quiet) {
    uint64_t *seeds = NULL;
    int n = 0, rc = 2;
    char err[8192], name[128], stem[128], run[160], member[256];
    if (experiment_parse_seeds(spec, o->seed, &seeds, &n, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve sim: %s\n", err);
        goto done;
    }
    char base[140];
    rec_policy_stem(o->policy_path, stem, sizeof stem);
    snprintf(base, sizeof base, "sim-%s", stem);
    if (experiment_pick_name(o->db_path, o->run_name, base, n, name, sizeof name, err,
                             sizeof err) != 0) {
        fprintf(stderr, "twinserve sim: %s\n", err);
        goto done;
    }
    rc = 1;
    for (int k = 0; k < n; k++) {
        sim_result_t res;
        experiment_run_name(run, sizeof run, name, k);
        experiment_member(member, sizeof member, name, k, n, seeds[k]);
        o->run_name = run;
        o->seed = seeds[k];
        o->config_extra = member;
        if (sim_run(o, &res, err, sizeof err) != 0) {
            fprintf(stderr, "twinserve sim: %s (seed %llu): %s\n", run,
                    (unsigned long long)seeds[k], err);
            goto done;
        }
        if (!quiet && res.have_summary)
            printf("%s (id %lld, seed %llu): %lld requests, %lld finished, TTFT p50 %.2f ms, "
                   "TPOT p50 %.2f ms\n", run, (long long)res.run_id,
                   (unsigned long long)seeds[k], (long long)res.summary.requests,
                   (long long)res.summary.finished, 1e3 * res.summary.ttft.p50,
                   1e3 * res.summary.tpot.p50);
    }
    if (!quiet)
        printf("experiment %s: %d runs in %s (compare it by this name)\n", name, n, o->db_path);
    rc = 0;
done:
    free(seeds);
    return rc;
}

int cmd_sim(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "policy", 1, 0, O_POLICY }, { "db", 1, 0, O_DB },
        { "name", 1, 0, O_NAME }, { "rate-scale", 1, 0, O_RATE }, { "quiet", 0, 0, 'q' },
        { "repeat", 1, 0, O_REPEAT }, { "help", 0, 0, O_HELP }, CLI_SIM_OPTIONS,
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
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        switch (c) {
        case O_TRACE: o.trace_path = optarg; break;
        case O_POLICY: o.policy_path = optarg; break;
        case O_DB: o.db_path = optarg; break;
        case O_NAME: o.run_name = optarg; break;
        case O_RATE:
            if (!cli_double(optarg, 1e-9, 1e9, &o.trace_opts.rate_scale)) {
                fprintf(stderr, "twinserve sim: bad value '%s' for --rate-scale\n", optarg);
                goto done;
            }
            break;
        case 'q': quiet = 1; break;
        case O_REPEAT: repeat = optarg; break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default:
            if (c < CLI_SIM_FIRST) {
                usage(stderr);
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
    o.progress = !quiet && isatty(2);
    if (repeat) {
        rc = run_experiment(&o, repeat, quiet);
        goto done;
    }

    sim_result_t res;
    char err[8192];
    if (sim_run(&o, &res, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve sim: %s\n", err);
        if (res.run_id >= 0)
            fprintf(stderr, "twinserve sim: run %lld marked failed in %s\n",
                    (long long)res.run_id, o.db_path);
        rc = 1;
        goto done;
    }
    if (!quiet) {
        printf("run %lld in %s: %lld requests (%lld trace rows skipped as failed), %lld steps, "
               "%d KV blocks; simulated in %.3f s wall\n",
               (long long)res.run_id, o.db_path, (long long)res.requests, (long long)res.skipped,
               (long long)res.steps, res.num_blocks, res.wall_s);
        printf("cost model: %s\n", res.calibration[0] ? res.calibration : "the roofline");
        if (res.have_summary) summary_print(stdout, &res.summary);
    }
    rc = 0;
done:
    free(sets);
    return rc;
}

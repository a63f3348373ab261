/* cmd_engine: `twinserve engine`, a trace replay on the real engine. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_engine.h"
#include "cli/cli_experiment.h"
#include "cli/cli_signal.h"
#include "cli/cli_util.h"
#include "engine/engine.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve engine --trace FILE --policy FILE --model FILE|dummy:PRESET [options]\n"
        "\n"
        "Replays a request trace on the real engine: requests arrive at their trace times on\n"
        "the wall clock, the Lua policy plans every step through the same scheduler core as\n"
        "the simulator, and a forward pass runs each step. Measured times go to the same\n"
        "SQLite records as `twinserve sim` (runs.kind = 'engine'); `twinserve report` reads\n"
        "both. Prompts are synthetic token ids of the trace's lengths (from the seed and the\n"
        "request id); generation runs to the trace's output length, ignoring EOS.\n"
        "\n"
        "  --trace FILE          Azure/BurstGPT CSV, Mooncake JSONL or plain CSV\n"
        "  --format F            force the trace format: azure|burstgpt|mooncake|plain\n"
        "  --policy FILE         policies/{static,continuous,chunked_prefill,speculative,\n"
        "                        priority,fair}.lua\n"
        "  --model FILE|dummy:P  llama2.c .bin, GGUF, or seeded random weights of preset P\n"
        "  --seed N              prompts, sampling, dummy weights, policy randomness (0)\n"
        "  --repeat N|S1,S2,...  run N times with seeds --seed .. --seed + N - 1 (or the\n"
        "                        seeds listed), recorded as one experiment: runs NAME-r0..,\n"
        "                        config \"experiment\":{name,index,of,seed}; --name names it\n"
        "                        (default engine-<policy>, made unique); `twinserve compare`\n"
        "                        takes the name and includes the run-to-run noise\n"
        "  --repeat windows:N[:LEN]\n"
        "                        N runs over N consecutive windows of the trace (LEN s each;\n"
        "                        default the span split in N), as for sim\n"
        "  --temperature T       0 = greedy (default)\n"
        "  --top-k K, --top-p P  sampling filters (off by default)\n"
        "  --max-prompt N        clip prompts to N tokens (to fit small models)\n"
        "  --max-output N        clip outputs to N tokens\n"
        "  --max-output-tokens N every request's max_tokens where the trace gives none; the\n"
        "                        limit policies see (default: the context left after the\n"
        "                        prompt); a longer output stops there\n"
        "  --oracle-lengths      show policies the true output lengths instead of the limit\n"
        "                        (an oracle no real server has; recorded in the run)\n"
        "  --clip-to-context     clip a request longer than the context to it (prompt and\n"
        "                        output cut in proportion, as Vidur) instead of rejecting it\n"
        "  --prefix-caching      reuse the KV of equal prompt prefixes (the core's cache, as\n"
        "                        sim's): prompts open with the trace's shared prefixes (Mooncake\n"
        "                        hash_ids, plain prefix_group,prefix_tokens) as equal tokens\n"
        "  --rate-scale X        multiply the request rate by X\n"
        "  --start S, --duration S, --limit N   replay a slice of the trace\n"
        "  --idle spin|sleep     between arrivals, keep the cores busy on the clock (spin,\n"
        "                        the default: a core that sleeps comes back slow, which\n"
        "                        makes step times depend on the idle time before them) or\n"
        "                        sleep (frees the cores; steps after long waits are slower)\n");
    cli_engine_usage(f);
    fprintf(f,
        "  -q, --quiet           no progress line or summary\n"
        "\n"
        "Exit status: 0 done, 1 the run failed (recorded as failed), 2 usage error: bad\n"
        "options, a missing or damaged file, an unknown backend, a policy that does not\n"
        "load or a trace with no request to replay (nothing is recorded), 3 the policy\n"
        "watchdog stopped a runaway policy call, 130/143 interrupted by SIGINT/SIGTERM:\n"
        "the run stops after the current step, is recorded as failed \"interrupted by\n"
        "SIGINT at t=...\" with its unfinished requests aborted (a second signal ends the\n"
        "process at once; the database stays valid).\n");
}

/* the engine's own options; the shared ones are cli_engine.h's */
enum {
    O_TRACE = 256, O_FORMAT, O_TEMP, O_TOPK, O_TOPP, O_MAXP, O_MAXO, O_RATE, O_START, O_DUR,
    O_LIMIT, O_IDLE, O_MAXOUTTOK, O_ORACLE, O_CLIP, O_REPEAT, O_HELP
};

static const struct option opts[] = {
    { "trace", 1, 0, O_TRACE }, { "format", 1, 0, O_FORMAT }, { "temperature", 1, 0, O_TEMP },
    { "top-k", 1, 0, O_TOPK }, { "top-p", 1, 0, O_TOPP },
    { "max-prompt", 1, 0, O_MAXP }, { "max-output", 1, 0, O_MAXO },
    { "rate-scale", 1, 0, O_RATE }, { "start", 1, 0, O_START }, { "duration", 1, 0, O_DUR },
    { "limit", 1, 0, O_LIMIT }, { "idle", 1, 0, O_IDLE },
    { "max-output-tokens", 1, 0, O_MAXOUTTOK }, { "oracle-lengths", 0, 0, O_ORACLE },
    { "clip-to-context", 0, 0, O_CLIP }, { "repeat", 1, 0, O_REPEAT },
    CLI_ENGINE_OPTIONS,
    { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
};

/* One of the engine's own options; 1 applied, 0 a bad value. */
static int apply(int c, const char *a, engine_opts_t *o, double *temp, double *topp) {
    switch (c) {
    case O_TRACE: o->trace_path = a; return 1;
    case O_FORMAT:
        if (trace_format_parse(a, &o->trace_opts.format) == 0) return 1;
        return snprintf(cli_want, sizeof cli_want, "azure, burstgpt, mooncake or plain"), 0;
    case O_TEMP: return cli_double(a, 0, 100, temp);
    case O_TOPK: return cli_int(a, 0, 1 << 24, &o->top_k);
    case O_TOPP: return cli_double(a, 1e-6, 1, topp);
    case O_MAXP: return cli_int(a, 1, 1 << 30, &o->trace_opts.max_prompt);
    case O_MAXO: return cli_int(a, 1, 1 << 30, &o->trace_opts.max_output);
    case O_RATE: return cli_double(a, 1e-9, 1e9, &o->trace_opts.rate_scale);
    case O_START: return cli_double(a, 0, 1e12, &o->trace_opts.start_s);
    case O_DUR: return cli_double(a, 0, 1e12, &o->trace_opts.duration_s);
    case O_LIMIT: return cli_i64(a, 0, INT32_MAX, &o->trace_opts.limit);
    case O_MAXOUTTOK: return cli_int(a, 1, 1 << 30, &o->max_output_tokens);
    case O_ORACLE: o->oracle_lengths = 1; return 1;
    case O_CLIP: o->clip_to_context = 1; return 1;
    case O_IDLE:
        if (!strcmp(a, "spin")) o->idle_sleep = 0;
        else if (!strcmp(a, "sleep")) o->idle_sleep = 1;
        else return snprintf(cli_want, sizeof cli_want, "spin or sleep"), 0;
        return 1;
    }
    return 0;
}

/* --repeat (cli_experiment.h): one engine run per seed. The seed moves the prompts' token
 * ids, sampling and dummy weights, not the trace's arrivals or lengths, so the runs pair by
 * request. */
static int run_member(void *ud, const cli_member_t *m, char *line, size_t linelen, char *err,
                      size_t errlen) {
    engine_opts_t o = *(const engine_opts_t *)ud;
    engine_result_t res;
    o.run_name = m->run;
    o.seed = m->seed;
    o.config_extra = m->member;
    if (m->windowed) o.trace_opts.start_s = m->start_s, o.trace_opts.duration_s = m->duration_s;
    if (engine_run(&o, &res, err, errlen) != 0) return res.setup_failed ? -2 : -1;
    if (res.have_summary)
        cli_member_line(line, linelen, m->run, res.run_id, m->seed, &res.summary, res.wall_s);
    return 0;
}

int cmd_engine(int argc, char **argv) {
    engine_opts_t o;
    engine_opts_defaults(&o);
    o.version = TWIN_VERSION;
    int quiet = 0, rc = 2, c;
    double temp = 0, topp = 1;
    const char *repeat = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    if (!sets) return 1;
    o.sets = sets;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        if (c == 'q') {
            quiet = 1;
        } else if (c == O_REPEAT) {
            repeat = optarg;
        } else if (c == O_HELP) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (c == '?' || c == ':') {
            rc = cli_bad_option("engine", argv, opts);
            goto done;
        } else if (c >= CLI_ENG_FIRST && c < CLI_ENG_END) {
            if (!cli_engine_apply("engine", c, optarg, &o)) goto done;
        } else if (!apply(c, optarg, &o, &temp, &topp)) {
            char opt[64];
            snprintf(opt, sizeof opt, "--%s", opts[c - O_TRACE].name);
            cli_bad_value("engine", opt, optarg);
            goto done;
        }
    }
    o.temperature = (float)temp;
    o.top_p = (float)topp;
    if (optind < argc) {
        fprintf(stderr, "twinserve engine: unexpected argument '%s'\n", argv[optind]);
        goto done;
    }
    if (!o.trace_path || !o.policy_path || !o.model) {
        fprintf(stderr, "twinserve engine: --trace, --policy and --model are required\n");
        usage(stderr);
        goto done;
    }
    o.progress = !quiet && isatty(2);
    o.interrupt = &cli_signal_caught;
    cli_signal_watch();
    if (repeat) {
        cli_experiment_t x = { .cmd = "engine", .spec = repeat, .base_seed = o.seed,
                               .db_path = o.db_path, .requested_name = o.run_name,
                               .policy_path = o.policy_path, .trace_path = o.trace_path,
                               .topts = &o.trace_opts, .quiet = quiet, .run = run_member,
                               .ud = &o };
        rc = cli_experiment_repeat(&x);
        goto done;
    }

    engine_result_t res;
    char err[8192];
    if (engine_run(&o, &res, err, sizeof err) != 0) {
        rc = cli_run_failed("engine", o.db_path, res.run_id, res.setup_failed, err);
        goto done;
    }
    if (!quiet) {
        printf("run %lld in %s: %lld requests (%lld trace rows skipped), %lld steps, %d KV "
               "blocks; %.3f s wall, scheduler %.2f%% of step time\n",
               (long long)res.run_id, o.db_path, (long long)res.requests,
               (long long)res.skipped, (long long)res.steps, res.num_blocks, res.wall_s,
               res.step_s > 0 ? 100.0 * res.sched_s / res.step_s : 0.0);
        if (res.spec_proposed > 0)
            printf("speculative: %lld drafts proposed, %lld accepted (%.1f%%)\n",
                   (long long)res.spec_proposed, (long long)res.spec_accepted,
                   100.0 * (double)res.spec_accepted / (double)res.spec_proposed);
        if (res.have_summary) summary_print(stdout, &res.summary);
    }
    rc = 0;
done:
    cli_signal_unwatch();
    free(sets);
    return rc;
}

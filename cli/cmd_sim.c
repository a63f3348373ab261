/* cmd_sim: `twinserve sim`, a trace replay in the discrete-event simulator. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/cli_util.h"
#include "sim/sim.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve sim --trace FILE --policy FILE [options]\n"
        "\n"
        "Replays a request trace through a Lua scheduling policy in the discrete-event\n"
        "simulator (roofline cost model) and records per-request and per-step rows in SQLite.\n"
        "\n"
        "  --trace FILE          Azure/BurstGPT CSV, Mooncake JSONL or arrival_s,prompt_tokens,\n"
        "                        output_tokens CSV (detected from the header)\n"
        "  --format F            force the trace format: azure|burstgpt|mooncake|plain\n"
        "  --policy FILE         policies/{static,continuous,chunked_prefill,speculative}.lua\n"
        "  --set KEY=VALUE       override a policy param (repeatable)\n"
        "  --model NAME|FILE     model preset (default llama-2-7b; `twinserve presets`)\n"
        "  --hw NAME|FILE        hardware preset (default a100-80g)\n"
        "  --tp N                tensor-parallel degree (default 1)\n"
        "  --db FILE             SQLite database (default twinserve.db; many runs per file)\n"
        "  --name RUN            run name (default sim-<policy>-<id>)\n"
        "  --seed N              seed for the policy's random numbers and speculative draws (0)\n"
        "  --rate-scale X        multiply the request rate by X (divide arrival gaps by X)\n"
        "  --start S             skip the first S seconds of the trace\n"
        "  --duration S          replay only S seconds of the trace\n"
        "  --limit N             replay at most N requests\n"
        "  --gpu-util F          fraction of device memory for weights + KV (0.9)\n"
        "  --block-size N        KV block size in tokens (16)\n"
        "  --watermark F         fraction of KV blocks kept free when admitting (0.01)\n"
        "  --max-tokens N        hard per-step token budget of the executor (8192)\n"
        "  --max-seqs N          hard per-step sequence limit (256)\n"
        "  --max-model-len N     context length (default: the model's)\n"
        "  --prefix-caching      reuse the KV of equal prompt prefixes (automatic prefix\n"
        "                        caching, as vLLM's); needs prefix hash ids (Mooncake traces)\n"
        "  --flops-eff F, --bw-eff F, --attn-eff F, --overhead S\n"
        "                        roofline efficiency factors and fixed per-step overhead\n"
        "  --policy-time-limit S limit per policy call (2 s)\n"
        "  --policy-mem-mb M     policy memory cap (256 MB)\n"
        "  -q, --quiet           no progress line or summary\n"
        "\n"
        "Exit status: 0 done, 1 the run failed (recorded as failed), 2 usage error,\n"
        "3 a policy call ran away inside JIT-compiled code and was stopped by the watchdog\n"
        "(recorded as failed; requests in flight at that moment are recorded as aborted).\n");
}

enum {
    O_TRACE = 256, O_FORMAT, O_POLICY, O_SET, O_MODEL, O_HW, O_TP, O_DB, O_NAME, O_SEED,
    O_RATE, O_START, O_DURATION, O_LIMIT, O_UTIL, O_BLOCK, O_WATERMARK, O_MAXTOK, O_MAXSEQ,
    O_MAXLEN, O_FEFF, O_BEFF, O_AEFF, O_OVERHEAD, O_PTIME, O_PMEM, O_PREFIX, O_HELP
};

int cmd_sim(int argc, char **argv) {
    static const struct option opts[] = {
        { "trace", 1, 0, O_TRACE }, { "format", 1, 0, O_FORMAT }, { "policy", 1, 0, O_POLICY },
        { "set", 1, 0, O_SET }, { "model", 1, 0, O_MODEL }, { "hw", 1, 0, O_HW },
        { "tp", 1, 0, O_TP }, { "db", 1, 0, O_DB }, { "name", 1, 0, O_NAME },
        { "seed", 1, 0, O_SEED }, { "rate-scale", 1, 0, O_RATE }, { "start", 1, 0, O_START },
        { "duration", 1, 0, O_DURATION }, { "limit", 1, 0, O_LIMIT },
        { "gpu-util", 1, 0, O_UTIL }, { "block-size", 1, 0, O_BLOCK },
        { "watermark", 1, 0, O_WATERMARK }, { "max-tokens", 1, 0, O_MAXTOK },
        { "max-seqs", 1, 0, O_MAXSEQ }, { "max-model-len", 1, 0, O_MAXLEN },
        { "flops-eff", 1, 0, O_FEFF }, { "bw-eff", 1, 0, O_BEFF }, { "attn-eff", 1, 0, O_AEFF },
        { "overhead", 1, 0, O_OVERHEAD }, { "policy-time-limit", 1, 0, O_PTIME },
        { "policy-mem-mb", 1, 0, O_PMEM }, { "prefix-caching", 0, 0, O_PREFIX },
        { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP },
        { 0, 0, 0, 0 },
    };
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.version = TWIN_VERSION;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int quiet = 0, rc = 2, c;
    if (!sets) return 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        int ok = 1;
        switch (c) {
        case O_TRACE: o.trace_path = optarg; break;
        case O_FORMAT:
            ok = trace_format_parse(optarg, &o.trace_opts.format) == 0;
            break;
        case O_POLICY: o.policy_path = optarg; break;
        case O_SET: sets[o.n_sets++] = optarg; break;
        case O_MODEL: o.model = optarg; break;
        case O_HW: o.hw = optarg; break;
        case O_TP: ok = cli_int(optarg, 1, 1024, &o.tp); break;
        case O_DB: o.db_path = optarg; break;
        case O_NAME: o.run_name = optarg; break;
        case O_SEED: ok = cli_u64(optarg, &o.seed); break;
        case O_RATE: ok = cli_double(optarg, 1e-9, 1e9, &o.trace_opts.rate_scale); break;
        case O_START: ok = cli_double(optarg, 0, 1e12, &o.trace_opts.start_s); break;
        case O_DURATION: ok = cli_double(optarg, 0, 1e12, &o.trace_opts.duration_s); break;
        case O_LIMIT: ok = cli_i64(optarg, 0, INT32_MAX, &o.trace_opts.limit); break;
        case O_UTIL: ok = cli_double(optarg, 0.01, 1.0, &o.gpu_util); break;
        case O_BLOCK: ok = cli_int(optarg, 1, 1 << 20, &o.block_size); break;
        case O_WATERMARK: ok = cli_double(optarg, 0, 0.99, &o.watermark); break;
        case O_MAXTOK: ok = cli_int(optarg, 1, 1 << 24, &o.max_tokens); break;
        case O_MAXSEQ: ok = cli_int(optarg, 1, 1 << 20, &o.max_seqs); break;
        case O_MAXLEN: ok = cli_int(optarg, 1, 1 << 30, &o.max_model_len); break;
        case O_FEFF: ok = cli_double(optarg, 1e-6, 1, &o.cost.flops_eff); break;
        case O_BEFF: ok = cli_double(optarg, 1e-6, 1, &o.cost.bw_eff); break;
        case O_AEFF: ok = cli_double(optarg, 1e-6, 1, &o.cost.attn_eff); break;
        case O_OVERHEAD: ok = cli_double(optarg, 0, 10, &o.cost.overhead_s); break;
        case O_PTIME: ok = cli_double(optarg, 1e-3, 3600, &o.limits.time_limit_s); break;
        case O_PMEM: ok = cli_double(optarg, 1, 1e6, &o.limits.mem_limit_mb); break;
        case O_PREFIX: o.prefix_caching = 1; break;
        case 'q': quiet = 1; break;
        case O_HELP: usage(stdout); rc = 0; goto done;
        default: usage(stderr); goto done;
        }
        if (!ok) {
            fprintf(stderr, "twinserve sim: bad value '%s' for --%s\n", optarg,
                    opts[c - O_TRACE].name);
            goto done;
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
    o.sets = sets;
    o.progress = !quiet && isatty(2);

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
        if (res.have_summary) summary_print(stdout, &res.summary);
    }
    rc = 0;
done:
    free(sets);
    return rc;
}

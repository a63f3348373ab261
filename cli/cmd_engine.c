/* cmd_engine: `twinserve engine`, a trace replay on the real engine. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
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
        "  --set KEY=VALUE       override a policy param (repeatable)\n"
        "  --model FILE|dummy:P  llama2.c .bin, GGUF, or seeded random weights of preset P\n"
        "  --backend NAME        cpu (default) or cuda\n"
        "  --threads N           CPU threads (default 0: all cores)\n"
        "  --dtype T             GPU weight type: bf16|f16|f32\n"
        "  --weights native|f32  CPU: matrices in the file's type (F16, BF16, Q8_0, Q4_0),\n"
        "                        dequantised inside the products (native, the default), or\n"
        "                        dequantised to fp32 at load\n"
        "  --batch-invariant     every request's output independent of its batch: one\n"
        "                        product and one attention kernel for all shapes on the GPU\n"
        "                        (slower; the CPU backend is always batch-invariant)\n"
        "  --db FILE             SQLite database (default twinserve.db)\n"
        "  --name RUN            run name (default engine-<policy>-<id>)\n"
        "  --seed N              prompts, sampling, dummy weights, policy randomness (0)\n"
        "  --repeat N|S1,S2,...  run N times with seeds --seed .. --seed + N - 1 (or the\n"
        "                        seeds listed), recorded as one experiment: runs NAME-r0..,\n"
        "                        config \"experiment\":{name,index,of,seed}; --name names it\n"
        "                        (default engine-<policy>, made unique); `twinserve compare`\n"
        "                        takes the name and includes the run-to-run noise\n"
        "  --temperature T       0 = greedy (default)\n"
        "  --top-k K, --top-p P  sampling filters (off by default)\n"
        "  --save-tokens         record every output token id and time (tokens table)\n"
        "  --max-prompt N        clip prompts to N tokens (to fit small models)\n"
        "  --max-output N        clip outputs to N tokens\n"
        "  --max-output-tokens N every request's max_tokens where the trace gives none; the\n"
        "                        limit policies see (default: the context left after the\n"
        "                        prompt); a longer output stops there\n"
        "  --oracle-lengths      show policies the true output lengths instead of the limit\n"
        "                        (an oracle no real server has; recorded in the run)\n"
        "  --clip-to-context     clip a request longer than the context to it (prompt and\n"
        "                        output cut in proportion, as Vidur) instead of rejecting it\n"
        "  --draft FILE|dummy:PRESET|ngram  speculative policies' drafts: a draft model (a\n"
        "                        second model on the same backend sharing the target's\n"
        "                        vocabulary; its KV lives in the same blocks; speculative\n"
        "                        sampling keeps outputs distributed as the target's) or the\n"
        "                        n-gram proposer over the request's own tokens (default)\n"
        "  --prefix-caching      reuse the KV of equal prompt prefixes (the core's cache, as\n"
        "                        sim's): prompts open with the trace's shared prefixes (Mooncake\n"
        "                        hash_ids, plain prefix_group,prefix_tokens) as equal tokens\n"
        "  --rate-scale X        multiply the request rate by X\n"
        "  --start S, --duration S, --limit N   replay a slice of the trace\n"
        "  --block-size N        KV block size in tokens (16)\n"
        "  --max-tokens N        per-step token budget (2048)\n"
        "  --max-seqs N          limit on running requests (vLLM max_num_seqs; 64)\n"
        "  --max-model-len N     context length (default: the model's)\n"
        "  --kv-blocks N         KV pool size in blocks (default: from --kv-mem)\n"
        "  --kv-mem GB           KV pool size in GB (default on cpu: max-seqs full\n"
        "                        contexts, at most a quarter of the free memory)\n"
        "  --gpu-util F          the KV pool takes what this fraction of the device's memory\n"
        "                        leaves after weights and activations (default 0.9 on cuda,\n"
        "                        as vLLM's gpu_memory_utilization)\n"
        "  --watermark F         fraction of KV blocks kept free when admitting (0.01)\n"
        "  --idle spin|sleep     between arrivals, keep the cores busy on the clock (spin,\n"
        "                        the default: a core that sleeps comes back slow, which\n"
        "                        makes step times depend on the idle time before them) or\n"
        "                        sleep (frees the cores; steps after long waits are slower)\n"
        "  --policy-time-limit S, --policy-mem-mb M   policy sandbox limits (2 s, 256 MB)\n"
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

enum {
    O_TRACE = 256, O_FORMAT, O_POLICY, O_SET, O_MODEL, O_BACKEND, O_THREADS, O_DTYPE, O_WEIGHTS,
    O_DB,
    O_NAME, O_SEED, O_TEMP, O_TOPK, O_TOPP, O_SAVE, O_MAXP, O_MAXO, O_RATE, O_START, O_DUR,
    O_LIMIT, O_BLOCK, O_MAXTOK, O_MAXSEQ, O_MAXLEN, O_KVB, O_KVMEM, O_WM, O_PTIME, O_PMEM,
    O_GPUUTIL, O_INVARIANT, O_IDLE, O_MAXOUTTOK, O_ORACLE, O_CLIP, O_PREFIX, O_REPEAT, O_DRAFT, O_HELP
};

static const struct option opts[] = {
    { "trace", 1, 0, O_TRACE }, { "format", 1, 0, O_FORMAT }, { "policy", 1, 0, O_POLICY },
    { "set", 1, 0, O_SET }, { "model", 1, 0, O_MODEL }, { "backend", 1, 0, O_BACKEND },
    { "threads", 1, 0, O_THREADS }, { "dtype", 1, 0, O_DTYPE },
    { "weights", 1, 0, O_WEIGHTS }, { "db", 1, 0, O_DB },
    { "name", 1, 0, O_NAME }, { "seed", 1, 0, O_SEED }, { "temperature", 1, 0, O_TEMP },
    { "top-k", 1, 0, O_TOPK }, { "top-p", 1, 0, O_TOPP }, { "save-tokens", 0, 0, O_SAVE },
    { "max-prompt", 1, 0, O_MAXP }, { "max-output", 1, 0, O_MAXO },
    { "rate-scale", 1, 0, O_RATE }, { "start", 1, 0, O_START }, { "duration", 1, 0, O_DUR },
    { "limit", 1, 0, O_LIMIT }, { "block-size", 1, 0, O_BLOCK },
    { "max-tokens", 1, 0, O_MAXTOK }, { "max-seqs", 1, 0, O_MAXSEQ },
    { "max-model-len", 1, 0, O_MAXLEN }, { "kv-blocks", 1, 0, O_KVB },
    { "kv-mem", 1, 0, O_KVMEM }, { "watermark", 1, 0, O_WM },
    { "policy-time-limit", 1, 0, O_PTIME }, { "policy-mem-mb", 1, 0, O_PMEM },
    { "gpu-util", 1, 0, O_GPUUTIL }, { "batch-invariant", 0, 0, O_INVARIANT },
    { "idle", 1, 0, O_IDLE }, { "max-output-tokens", 1, 0, O_MAXOUTTOK },
    { "oracle-lengths", 0, 0, O_ORACLE }, { "clip-to-context", 0, 0, O_CLIP },
    { "prefix-caching", 0, 0, O_PREFIX },
    { "repeat", 1, 0, O_REPEAT }, { "draft", 1, 0, O_DRAFT },
    { "quiet", 0, 0, 'q' }, { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
};

/* One option; 1 applied, 0 a bad value. */
static int apply(int c, const char *a, engine_opts_t *o, double *temp, double *topp) {
    switch (c) {
    case O_TRACE: o->trace_path = a; return 1;
    case O_FORMAT: return trace_format_parse(a, &o->trace_opts.format) == 0;
    case O_POLICY: o->policy_path = a; return 1;
    case O_SET: ((const char **)o->sets)[o->n_sets++] = a; return 1;
    case O_MODEL: o->model = a; return 1;
    case O_BACKEND: o->backend = a; return 1;
    case O_THREADS: { int32_t n; if (!cli_int(a, 0, 4096, &n)) return 0; o->n_threads = n; return 1; }
    case O_DTYPE: o->dtype = a; return 1;
    case O_WEIGHTS: o->weights = a; return !strcmp(a, "native") || !strcmp(a, "f32");
    case O_DB: o->db_path = a; return 1;
    case O_NAME: o->run_name = a; return 1;
    case O_SEED: return cli_u64(a, &o->seed);
    case O_TEMP: return cli_double(a, 0, 100, temp);
    case O_TOPK: return cli_int(a, 0, 1 << 24, &o->top_k);
    case O_TOPP: return cli_double(a, 1e-6, 1, topp);
    case O_SAVE: o->save_tokens = 1; return 1;
    case O_MAXP: return cli_int(a, 1, 1 << 30, &o->trace_opts.max_prompt);
    case O_MAXO: return cli_int(a, 1, 1 << 30, &o->trace_opts.max_output);
    case O_RATE: return cli_double(a, 1e-9, 1e9, &o->trace_opts.rate_scale);
    case O_START: return cli_double(a, 0, 1e12, &o->trace_opts.start_s);
    case O_DUR: return cli_double(a, 0, 1e12, &o->trace_opts.duration_s);
    case O_LIMIT: return cli_i64(a, 0, INT32_MAX, &o->trace_opts.limit);
    case O_BLOCK: return cli_int(a, 1, 1 << 16, &o->block_size);
    case O_MAXTOK: return cli_int(a, 1, 1 << 20, &o->max_tokens);
    case O_MAXSEQ: return cli_int(a, 1, 1 << 16, &o->max_seqs);
    case O_MAXLEN: return cli_int(a, 1, 1 << 30, &o->max_model_len);
    case O_KVB: return cli_int(a, 1, INT32_MAX, &o->kv_blocks);
    case O_KVMEM: return cli_double(a, 1e-6, 1e6, &o->kv_mem_gb);
    case O_WM: return cli_double(a, 0, 0.99, &o->watermark);
    case O_PTIME: return cli_double(a, 1e-3, 3600, &o->limits.time_limit_s);
    case O_PMEM: return cli_double(a, 1, 1e6, &o->limits.mem_limit_mb);
    case O_GPUUTIL: return cli_double(a, 0.01, 0.99, &o->gpu_util);
    case O_INVARIANT: o->batch_invariant = 1; return 1;
    case O_MAXOUTTOK: return cli_int(a, 1, 1 << 30, &o->max_output_tokens);
    case O_ORACLE: o->oracle_lengths = 1; return 1;
    case O_CLIP: o->clip_to_context = 1; return 1;
    case O_PREFIX: o->prefix_caching = 1; return 1;
    case O_DRAFT: o->draft = a; return *a != 0;
    case O_IDLE:
        if (!strcmp(a, "spin")) o->idle_sleep = 0;
        else if (!strcmp(a, "sleep")) o->idle_sleep = 1;
        else return 0;
        return 1;
    }
    return 0;
}

/* --repeat (cli_experiment.h): one engine run per seed. The seed moves the prompts' token
 * ids, sampling and dummy weights, not the trace's arrivals or lengths, so the runs pair by
 * request. */
static int run_member(void *ud, const char *run, uint64_t seed, const char *member, char *line,
                      size_t linelen, char *err, size_t errlen) {
    engine_opts_t *o = ud;
    engine_result_t res;
    o->run_name = run;
    o->seed = seed;
    o->config_extra = member;
    if (engine_run(o, &res, err, errlen) != 0) return res.setup_failed ? -2 : -1;
    if (res.have_summary)
        cli_member_line(line, linelen, run, res.run_id, seed, &res.summary, res.wall_s);
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
            usage(stderr);
            goto done;
        } else if (!apply(c, optarg, &o, &temp, &topp)) {
            fprintf(stderr, "twinserve engine: bad value '%s' for --%s\n", optarg,
                    opts[c - O_TRACE].name);
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
        rc = cli_experiment_repeat("engine", repeat, o.seed, o.db_path, o.run_name,
                                   o.policy_path, quiet, run_member, &o);
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

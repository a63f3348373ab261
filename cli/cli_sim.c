/* cli_sim: see cli_sim.h. */
#include "cli/cli_sim.h"
#include "engine/model.h"
#include "sim/parallel.h"

#include <string.h>

#include "analysis/band.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"

static const struct option shared[] = { CLI_SIM_OPTIONS, { 0, 0, 0, 0 } };

/* A name the preset setter takes (tried on a scratch shape: the run applies it to each
 * replica's model); else cli_want says which are. */
static int known_name(int (*set)(preset_model_t *, const char *, char *, size_t),
                      const char *arg, const char *names) {
    preset_model_t probe = {0};
    char e[160];
    if (set(&probe, arg, e, sizeof e) == 0) return 1;
    snprintf(cli_want, sizeof cli_want, "%s", names);
    return 0;
}

int cli_sim_apply(const char *cmd, int code, const char *arg, sim_opts_t *o) {
    int ok = 1;
    cli_want[0] = '\0';
    switch (code) {
    case CLI_SIM_FORMAT:
        ok = trace_format_parse(arg, &o->trace_opts.format) == 0;
        snprintf(cli_want, sizeof cli_want, "azure, burstgpt, mooncake or plain");
        break;
    case CLI_SIM_SET: ((const char **)o->sets)[o->n_sets++] = arg; break;
    case CLI_SIM_MODEL:
        if (model_is_gguf(arg)) {
            /* a GGUF's shape from its header (engine/model.h's resolver): the simulator
             * takes it as a shape; a few --model options at most in one process */
            static preset_model_t shapes[8];
            static int n_shapes;
            char e[512];
            if (n_shapes >= 8 || model_gguf_shape(arg, &shapes[n_shapes], e, sizeof e) != 0) {
                fprintf(stderr, "twinserve %s: --model: %s\n", cmd,
                        n_shapes >= 8 ? "too many GGUF models" : e);
                return 0;
            }
            o->model_shape = &shapes[n_shapes++];
            o->model = NULL;
        } else {
            o->model = arg;
        }
        break;
    case CLI_SIM_HW: o->hw = arg; break;
    case CLI_SIM_TP: ok = cli_int(arg, 1, 1024, &o->tp); break;
    case CLI_SIM_KVTIER:
        if (o->n_kv_tiers >= 4) {
            fprintf(stderr, "twinserve %s: --kv-tier given more than 4 times\n", cmd);
            return 0;
        }
        o->kv_tiers[o->n_kv_tiers++] = arg;
        break;
    case CLI_SIM_PARALLEL: {
        par_t p;
        char e[256];
        if (par_parse(arg, &p, e, sizeof e) != 0) {
            fprintf(stderr, "twinserve %s: --parallel: %s\n", cmd, e);
            return 0;
        }
        o->parallel = arg;
        break;
    }
    case CLI_SIM_REPLICAS: ok = cli_int(arg, 1, 1 << 20, &o->replicas); break;
    case CLI_SIM_ROUTER: o->router_path = arg; break;
    case CLI_SIM_CLUSTER: o->cluster_path = arg; break;
    case CLI_SIM_SEED: ok = cli_u64(arg, &o->seed); break;
    case CLI_SIM_START: ok = cli_double(arg, 0, 1e12, &o->trace_opts.start_s); break;
    case CLI_SIM_DURATION: ok = cli_double(arg, 0, 1e12, &o->trace_opts.duration_s); break;
    case CLI_SIM_LIMIT: ok = cli_i64(arg, 0, INT32_MAX, &o->trace_opts.limit); break;
    case CLI_SIM_UTIL: ok = cli_double(arg, 0.01, 1.0, &o->gpu_util); break;
    case CLI_SIM_BLOCK: ok = cli_int(arg, 1, 1 << 20, &o->block_size); break;
    case CLI_SIM_WATERMARK: ok = cli_double(arg, 0, 0.99, &o->watermark); break;
    case CLI_SIM_MAXTOK: ok = cli_int(arg, 1, 1 << 24, &o->max_tokens); break;
    case CLI_SIM_MAXSEQ: ok = cli_int(arg, 1, 1 << 20, &o->max_seqs); break;
    case CLI_SIM_MAXLEN: ok = cli_int(arg, 1, 1 << 30, &o->max_model_len); break;
    /* the roofline's own options ask for the roofline */
    case CLI_SIM_FEFF: o->roofline = 1; ok = cli_double(arg, 1e-6, 1, &o->cost.flops_eff); break;
    case CLI_SIM_BEFF: o->roofline = 1; ok = cli_double(arg, 1e-6, 1, &o->cost.bw_eff); break;
    case CLI_SIM_AEFF: o->roofline = 1; ok = cli_double(arg, 1e-6, 1, &o->cost.attn_eff); break;
    case CLI_SIM_OVERHEAD: o->roofline = 1; ok = cli_double(arg, 0, 10, &o->cost.overhead_s); break;
    case CLI_SIM_ROOFLINE: o->roofline = 1; break;
    case CLI_SIM_WFORMAT:
        ok = known_name(preset_model_set_format, o->weight_format = arg,
                        "bf16, fp8, int4, mxfp4, nvfp4, q8_0 or q4_0");
        break;
    case CLI_SIM_KVDTYPE:
        ok = known_name(preset_model_set_kv_dtype, o->kv_dtype = arg, "bf16 or fp8");
        break;
    case CLI_SIM_PTIME: ok = cli_double(arg, 1e-3, 3600, &o->limits.time_limit_s); break;
    case CLI_SIM_PMEM: ok = cli_double(arg, 1, 1e6, &o->limits.mem_limit_mb); break;
    case CLI_SIM_PREFIX: o->prefix_caching = 1; break;
    case CLI_SIM_SAVETOK: o->save_tokens = 1; break;
    case CLI_SIM_COST: o->cost_path = arg; break;
    case CLI_SIM_KVB: ok = cli_int(arg, 1, INT32_MAX, &o->kv_blocks); break;
    case CLI_SIM_MAXP: ok = cli_int(arg, 1, 1 << 30, &o->trace_opts.max_prompt); break;
    case CLI_SIM_MAXO: ok = cli_int(arg, 1, 1 << 30, &o->trace_opts.max_output); break;
    case CLI_SIM_CREQ: ok = cli_double(arg, 0, 3600, &o->client.request_s); break;
    case CLI_SIM_CPROMPT: ok = cli_double(arg, 0, 3600, &o->client.prompt_token_s); break;
    case CLI_SIM_CTOK: ok = cli_double(arg, 0, 3600, &o->client.token_s); break;
    case CLI_SIM_MAXOUTTOK: ok = cli_int(arg, 1, 1 << 30, &o->max_output_tokens); break;
    case CLI_SIM_ORACLE: o->oracle_lengths = 1; break;
    case CLI_SIM_CLIP: o->clip_to_context = 1; break;
    case CLI_SIM_SERVING: o->serving = arg; break;
    case CLI_SIM_METRICS:
        if (!strcmp(arg, "client")) o->metrics = SIM_METRICS_CLIENT;
        else if (!strcmp(arg, "server")) o->metrics = SIM_METRICS_SERVER;
        else ok = 0, snprintf(cli_want, sizeof cli_want, "client or server");
        break;
    case CLI_SIM_CTIMEOUT: ok = cli_double(arg, 1e-3, 1e9, &o->client_timeout_s); break;
    case CLI_SIM_BAND:
        o->band = 1;
        o->band_err = 0;
        if (arg) ok = band_parse(arg, &o->band_err);
        snprintf(cli_want, sizeof cli_want, "a fraction in (0, 0.9], e.g. 0.1 or 10%%");
        break;
    default: ok = 0; break;
    }
    if (!ok) {
        const char *name = code >= CLI_SIM_FIRST && code < CLI_SIM_END
                               ? shared[code - CLI_SIM_FIRST].name : "?";
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", name);
        cli_bad_value(cmd, opt, arg);
    }
    return ok;
}

void cli_sim_usage(FILE *f) {
    fprintf(f,
        "  --format F            force the trace format: azure|burstgpt|mooncake|plain\n"
        "  --set KEY=VALUE       override a policy param (repeatable)\n"
        "  --model NAME|FILE     model preset (default llama-2-7b, or the cost file's model;\n"
        "                        `twinserve presets`), a .model file or a Hugging Face\n"
        "                        config.json (docs/models.md)\n"
        "  --hw NAME|FILE        hardware preset (default a100-80g, or the cost file's)\n"
        "  --tp N                tensor-parallel degree (default 1)\n"
        "  --kv-tier KIND:SIZE[:read=B/s,write=B/s,lat=T,overlap=0|1]\n"
        "                        a KV tier below each replica's HBM, in order (repeatable):\n"
        "                        dram:256GB, ssd:2TB; evicted prefix blocks are kept there\n"
        "                        and reloaded instead of recomputed (needs\n"
        "                        --prefix-caching; docs/cluster.md, KV tiers)\n"
        "  --parallel SPEC       the replica's GPUs beyond tp: tp=T,dp=D,ep=E,pp=P[,mb=M]\n"
        "                        [,sched=async|sync]: data-parallel attention ranks (MoE,\n"
        "                        with ep=T x D), expert parallelism, pipeline stages and\n"
        "                        their micro-batches (docs/models.md, Parallelism)\n"
        "                        A built-in model on a100-80g or h100 uses the calibration\n"
        "                        shipped for it (Vidur's measured operators; `twinserve\n"
        "                        presets` lists them) unless --cost or --roofline is given;\n"
        "                        another model there, one built from the GPU's operator\n"
        "                        rates by shape (sim/costs/GPU.ops); the run's config says\n"
        "                        which (\"calibration\")\n"
        "  --seed N              seed for the policy's random numbers and speculative draws (0)\n"
        "  --start S             skip the first S seconds of the trace\n"
        "  --duration S          replay only S seconds of the trace: trace time, before\n"
        "                        --rate-scale (--duration 600 --rate-scale 2 replays the\n"
        "                        trace's 600 s in 300 s)\n"
        "  --limit N             replay at most N requests\n"
        "  --gpu-util F          fraction of device memory for weights + KV (0.9)\n"
        "  --block-size N        KV block size in tokens (16)\n"
        "  --watermark F         fraction of KV blocks kept free when admitting (0.01)\n"
        "  --max-tokens N        hard per-step token budget of the executor (8192)\n"
        "  --max-seqs N          hard limit on running requests (vLLM max_num_seqs; 256)\n"
        "  --max-model-len N     context length (default: the model's)\n"
        "  --prefix-caching      reuse the KV of equal prompt prefixes (automatic prefix\n"
        "                        caching, as vLLM's): cached tokens cost no step budget;\n"
        "                        prefixes come from Mooncake hash_ids or a plain trace's\n"
        "                        prefix_group,prefix_tokens; a preempted request reuses its\n"
        "                        own blocks on any trace\n"
        "  --save-tokens         also record one tokens row per output token (token_id -1,\n"
        "                        emitted at the end of its step), for inter-token latency\n"
        "  --roofline            the roofline model even where a calibration is shipped\n"
        "  --weight-format F     the layers' weights: bf16 (the model's), fp8 (W8A8), int4\n"
        "                        (W4A16, AWQ/GPTQ), mxfp4 (W4A16, gpt-oss), nvfp4 (W4A4 on\n"
        "                        a GPU with FP4), q8_0, q4_0 (ggml's blocks, a GGUF's);\n"
        "                        priced on the roofline (the shipped rates are bf16\n"
        "                        measurements). --model FILE.gguf takes the file's shape\n"
        "                        and matrix type from its header\n"
        "  --kv-dtype bf16|fp8   the KV cache's element (fp8: half the bytes, twice the blocks)\n"
        "  --flops-eff F, --bw-eff F, --attn-eff F, --overhead S\n"
        "                        roofline efficiency factors and fixed per-step overhead\n"
        "                        (each implies --roofline)\n"
        "  --cost FILE           a cost model from `twinserve calibrate` (or a roofline cost\n"
        "                        file) instead of the roofline's guesses; it carries the\n"
        "                        model's shape, so --model may be left out\n"
        "  --kv-blocks N         KV capacity in blocks (an engine run's num_blocks), instead\n"
        "                        of the capacity --hw and --gpu-util give; needed with a\n"
        "                        linear cost file\n"
        "  --max-prompt N, --max-output N\n"
        "                        clip the trace's lengths, as the engine's options do\n"
        "  --max-output-tokens N every request's max_tokens, where the trace gives none\n"
        "                        (a longer output stops there); policies see this limit\n"
        "                        (default: the context left after the prompt)\n"
        "  --oracle-lengths      show policies the true output lengths instead of the limit\n"
        "                        (an oracle no real server has; recorded in the run)\n"
        "  --clip-to-context     clip a request longer than the context (prompt + output)\n"
        "                        to it, cut from both in proportion, as Vidur does,\n"
        "                        instead of rejecting it: the same load as a Vidur run\n"
        "                        (recorded in the run)\n"
        "  --client-request S, --client-prompt-token S, --client-token S\n"
        "                        predict client-side metrics (what a streaming client such\n"
        "                        as vLLM's benchmark_serving measures): seconds per request\n"
        "                        and per prompt token in the front end before the\n"
        "                        scheduler, and per streamed output token (default: the\n"
        "                        cost file's client_*_s, else 0 = server-side metrics)\n"
        "  --serving NAME|FILE   the serving engine around the GPU's passes (sim/serving.h):\n"
        "                        vllm (vLLM 0.15: its CPU time per step with async\n"
        "                        scheduling, CUDA graphs, attention and all-reduce kernels,\n"
        "                        API server and KV sizing; fitted to real vLLM runs), none\n"
        "                        (the bare GPU), or a profile file; default vllm on a GPU\n"
        "                        preset (a100-80g, h100, h200), else none; the run's config\n"
        "                        records it (\"serving\")\n"
        "  --metrics client|server\n"
        "                        which latencies to record: client-side (what a benchmark\n"
        "                        client measures: the serving profile's API server and\n"
        "                        stream, the default when it has them) or server-side\n"
        "                        (a token counts when its step ends)\n"
        "  --client-timeout S    a client gives up a request unfinished S s after its\n"
        "                        arrival; the server aborts it (\"client timeout\")\n"
        "  --band[=E]            a prediction band: the run again with every step's time\n"
        "                        x (1 - E) and x (1 + E), each metric reported as the range\n"
        "                        (runs NAME-band-lo, -hi); E (0.05 or 5%%) defaults to the\n"
        "                        cost model's own cross-validated error; a run whose E2E\n"
        "                        moves > 3x the cost is flagged at a knee\n"
        "  --policy-time-limit S limit per policy call (2 s)\n"
        "  --policy-mem-mb M     policy memory cap (256 MB)\n"
        "  --replicas N          a cluster of N identical replicas of this configuration,\n"
        "                        each with its own scheduler, policy instance, KV cache and\n"
        "                        cost model, behind a router (docs/cluster.md)\n"
        "  --router FILE         the Lua router that picks each request's replica\n"
        "                        (policies/routers/{round_robin,least_loaded,power_of_two,\n"
        "                        prefix_affinity}.lua; default: round robin, built in);\n"
        "                        --set router.KEY=VALUE overrides its params\n"
        "  --cluster FILE        replica groups, each with its own count, model, hw, tp,\n"
        "                        policy and params, KV size and role, and the router\n"
        "                        (a key = value file with [cluster] and [group NAME]\n"
        "                        sections: docs/cluster.md); instead of --replicas\n");
}

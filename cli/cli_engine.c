/* cli_engine: see cli_engine.h. */
#include "cli/cli_engine.h"
#include "cli/cli_opts.h"

#include <stdint.h>
#include <string.h>

#include "cli/cli_util.h"

static const struct option shared[] = { CLI_ENGINE_OPTIONS, { 0, 0, 0, 0 } };

int cli_engine_apply(const char *cmd, int code, const char *arg, engine_opts_t *o) {
    int ok = 1;
    switch (code) {
    case CLI_ENG_POLICY: o->policy_path = arg; break;
    case CLI_ENG_SET: ((const char **)o->sets)[o->n_sets++] = arg; break;
    case CLI_ENG_MODEL: o->model = arg; break;
    case CLI_ENG_BACKEND: o->backend = arg; break;
    case CLI_ENG_THREADS: ok = cli_int(arg, 0, 4096, &o->n_threads); break;
    case CLI_ENG_DTYPE: o->dtype = arg; break;
    case CLI_ENG_WEIGHTS:
        o->weights = arg;
        ok = !strcmp(arg, "native") || !strcmp(arg, "f32");
        if (!ok) snprintf(cli_want, sizeof cli_want, "native or f32");
        break;
    case CLI_ENG_KVTYPE: ok = cli_kv_type_ok(o->kv_type = arg); break;
    case CLI_ENG_INVARIANT: o->batch_invariant = 1; break;
    case CLI_ENG_PCOST: o->policy_cost = arg; ok = *arg != '\0'; break;
    case CLI_ENG_DRAFT: o->draft = arg; ok = *arg != '\0'; break;
    case CLI_ENG_DB: o->db_path = arg; break;
    case CLI_ENG_NAME: o->run_name = arg; break;
    case CLI_ENG_SEED: ok = cli_u64(arg, &o->seed); break;
    case CLI_ENG_SAVE: o->save_tokens = 1; break;
    case CLI_ENG_PREFIX: o->prefix_caching = 1; break;
    case CLI_ENG_BLOCK: ok = cli_int(arg, 1, 1 << 16, &o->block_size); break;
    case CLI_ENG_MAXTOK: ok = cli_int(arg, 1, 1 << 20, &o->max_tokens); break;
    case CLI_ENG_MAXSEQ: ok = cli_int(arg, 1, 1 << 16, &o->max_seqs); break;
    case CLI_ENG_MAXLEN: ok = cli_int(arg, 1, 1 << 30, &o->max_model_len); break;
    case CLI_ENG_KVB: ok = cli_int(arg, 1, INT32_MAX, &o->kv_blocks); break;
    case CLI_ENG_KVMEM: ok = cli_double(arg, 1e-6, 1e6, &o->kv_mem_gb); break;
    case CLI_ENG_GPUUTIL: ok = cli_double(arg, 0.01, 0.99, &o->gpu_util); break;
    case CLI_ENG_WM: ok = cli_double(arg, 0, 0.99, &o->watermark); break;
    case CLI_ENG_PTIME: ok = cli_double(arg, 1e-3, 3600, &o->limits.time_limit_s); break;
    case CLI_ENG_PMEM: ok = cli_double(arg, 1, 1e6, &o->limits.mem_limit_mb); break;
    default: ok = 0; break;
    }
    if (!ok) {
        const char *name = code >= CLI_ENG_FIRST && code < CLI_ENG_END
                               ? shared[code - CLI_ENG_FIRST].name : "?";
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", name);
        cli_bad_value(cmd, opt, arg);
    }
    return ok;
}

void cli_backend_usage(FILE *f) {
    fprintf(f,
        "  --backend NAME        cpu (default) or cuda\n"
        "  --threads N           CPU threads (default 0: all cores)\n"
        "  --dtype T             GPU weight type: bf16|f16|f32\n"
        "  --weights native|f32  CPU: matrices in the file's type (F16, BF16, Q8_0, Q4_0),\n"
        "                        Q8_0/Q4_0 against activations quantised per block of 32\n"
        "                        (native, the default), or dequantised to fp32 at load\n"
        "  --kv-type f32|f16     CPU: the KV cache's elements (default f32); f16 halves the\n"
        "                        bytes per block (twice the blocks in --kv-mem) and what\n"
        "                        attention reads, K and V rounded to half when stored\n");
}

void cli_engine_usage(FILE *f) {
    fprintf(f, "  --set KEY=VALUE       override a policy param (repeatable)\n");
    cli_backend_usage(f);
    fprintf(f,
        "  --batch-invariant     every request's output independent of its batch: one\n"
        "                        product and one attention kernel for all shapes on the GPU\n"
        "                        (slower; the CPU backend is always batch-invariant)\n"
        "  --draft FILE|dummy:PRESET|ngram  speculative policies' drafts: a draft model (a\n"
        "                        second model on the same backend sharing the target's\n"
        "                        vocabulary; its KV lives in the same blocks; speculative\n"
        "                        sampling keeps outputs distributed as the target's) or the\n"
        "                        n-gram proposer over the request's own tokens (default)\n"
        "  --db FILE             SQLite database (default twinserve.db)\n"
        "  --name RUN            run name (default KIND-<policy>-<id>)\n"
        "  --save-tokens         record every output token id and time (tokens table)\n"
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
        "  --policy-time-limit S, --policy-mem-mb M   policy sandbox limits (2 s, 256 MB)\n"
        "  --policy-cost FILE    a cost file (twinserve calibrate of this engine's profile)\n"
        "                        that prices steps for policies' s:step_cost (default: a\n"
        "                        fit of the last 64 steps)\n");
}

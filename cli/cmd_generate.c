/* cmd_generate: `twinserve generate`, text from a model on the engine's forward pass. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_engine.h"
#include "cli/cli_util.h"
#include "engine/generate.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve generate --model FILE|dummy:PRESET [options]\n"
        "\n"
        "Generates text with the engine's forward pass (prompt in one prefill step, then one\n"
        "decode step per token) and prints it on stdout; statistics go to stderr. With no\n"
        "prompt it starts from BOS alone, as llama2.c does; it stops after N tokens, at the\n"
        "context length, or at BOS/EOS.\n"
        "\n"
        "  --model FILE|dummy:P  llama2.c .bin, GGUF (v3; F32/F16/BF16/Q8_0/Q4_0), or seeded\n"
        "                        random weights in the shape of preset P (prints token ids)\n"
        "  --tokenizer FILE      llama2.c tokenizer (default: the GGUF's own, or tok<V>.bin /\n"
        "                        tokenizer.bin next to a .bin model)\n"
        "  --prompt TEXT         the prompt (default: none, BOS alone)\n"
        "  --ids                 print the token ids, not their text (as without a tokenizer;\n"
        "                        a GGUF's placeholder tokenizer, from quantize, is ids only)\n"
        "  -n N                  new tokens (256)\n"
        "  --temperature T       0 = greedy (default)\n"
        "  --top-k K, --top-p P  sampling filters (off by default)\n"
        "  --seed N              sampling seed (0)\n");
    cli_backend_usage(f);
    fprintf(f,
        "  --draft FILE|dummy:P|ngram  speculative decoding: a draft model sharing the\n"
        "                        vocabulary (or the n-gram proposer) proposes --spec-k tokens\n"
        "                        per step, verified in one pass (greedy output unchanged;\n"
        "                        sampled output distributed as the target's)\n"
        "  --spec-k K            drafts per step with --draft (4)\n");
}

enum { O_MODEL = 256, O_TOK, O_PROMPT, O_TEMP, O_TOPK, O_TOPP, O_SEED, O_BACKEND, O_THREADS,
       O_DTYPE, O_WEIGHTS, O_DRAFT, O_SPECK, O_KVTYPE, O_IDS, O_HELP };

static const struct option opts[] = {
    { "model", 1, 0, O_MODEL }, { "tokenizer", 1, 0, O_TOK }, { "prompt", 1, 0, O_PROMPT },
    { "temperature", 1, 0, O_TEMP }, { "top-k", 1, 0, O_TOPK }, { "top-p", 1, 0, O_TOPP },
    { "seed", 1, 0, O_SEED }, { "backend", 1, 0, O_BACKEND }, { "threads", 1, 0, O_THREADS },
    { "dtype", 1, 0, O_DTYPE }, { "weights", 1, 0, O_WEIGHTS }, { "draft", 1, 0, O_DRAFT },
    { "spec-k", 1, 0, O_SPECK }, { "kv-type", 1, 0, O_KVTYPE }, { "ids", 0, 0, O_IDS },
    { "help", 0, 0, O_HELP },
    { 0, 0, 0, 0 },
};

int cmd_generate(int argc, char **argv) {
    gen_opts_t o;
    gen_opts_defaults(&o);
    double temp = 0, topp = 1;
    int32_t threads = 0;
    int c, ok = 1;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "n:", opts, NULL)) != -1) {
        switch (c) {
        case O_MODEL: o.model = optarg; break;
        case O_TOK: o.tokenizer = optarg; break;
        case O_PROMPT: o.prompt = optarg; break;
        case 'n': ok = cli_int(optarg, 0, 1 << 24, &o.n); break;
        case O_TEMP: ok = cli_double(optarg, 0, 100, &temp); break;
        case O_TOPK: ok = cli_int(optarg, 0, 1 << 24, &o.top_k); break;
        case O_TOPP: ok = cli_double(optarg, 1e-6, 1, &topp); break;
        case O_SEED: ok = cli_u64(optarg, &o.seed); break;
        case O_BACKEND: o.backend = optarg; break;
        case O_THREADS: ok = cli_int(optarg, 0, 4096, &threads); break;
        case O_DTYPE: o.dtype = optarg; break;
        case O_WEIGHTS:
            o.weights = optarg;
            ok = !strcmp(optarg, "native") || !strcmp(optarg, "f32");
            if (!ok) snprintf(cli_want, sizeof cli_want, "native or f32");
            break;
        case O_DRAFT: o.draft = optarg; ok = *optarg != 0; break;
        case O_SPECK: ok = cli_int(optarg, 1, 64, &o.spec_k); break;
        case O_KVTYPE: ok = cli_kv_type_ok(o.kv_type = optarg); break;
        case O_IDS: o.print_ids = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: return cli_bad_option("generate", argv, opts);
        }
        if (!ok) {
            char opt[64];
            snprintf(opt, sizeof opt, "%s%s", c == 'n' ? "-n" : "--",
                     c == 'n' ? "" : opts[c - O_MODEL].name);
            cli_bad_value("generate", opt, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve generate: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.model) {
        fprintf(stderr, "twinserve generate: --model is required\n");
        usage(stderr);
        return 2;
    }
    o.temperature = (float)temp;
    o.top_p = (float)topp;
    o.n_threads = threads;
    gen_stats_t st;
    char err[2048];
    if (gen_run(&o, stdout, &st, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve generate: %s\n", err);
        return 1;
    }
    int32_t decoded = st.generated > 0 ? st.generated - 1 : 0;
    fprintf(stderr, "[generate] %d prompt tokens, %d generated; load %.3f s, prefill %.1f ms, "
            "decode %.1f tok/s; %s weights\n", st.prompt_tokens, st.generated, st.load_s,
            st.prefill_s * 1e3, st.decode_s > 0 ? decoded / st.decode_s : 0.0, st.weights);
    if (o.draft)
        fprintf(stderr, "[generate] speculation (%s): %lld of %lld drafts accepted (%.1f%%), "
                "%.2f tokens per step\n", o.draft, (long long)st.spec_accepted,
                (long long)st.spec_proposed,
                st.spec_proposed ? 100.0 * st.spec_accepted / st.spec_proposed : 0.0,
                st.spec_steps ? (double)(st.spec_steps + st.spec_accepted) / st.spec_steps : 0.0);
    free(st.ids);
    return 0;
}

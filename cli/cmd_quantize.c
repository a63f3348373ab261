/* cmd_quantize: `twinserve quantize IN OUT --type T`, a model written as GGUF in one weight
 * type (engine/quantize.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "engine/dequant.h"
#include "engine/quantize.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve quantize IN OUT --type f32|f16|bf16|q8_0|q4_0 [options]\n"
        "\n"
        "Writes OUT, a GGUF copy of model IN (llama2.c .bin, GGUF, or dummy:PRESET) whose\n"
        "matrices are stored in the given type: F16/BF16 rounded to nearest even, Q8_0 and\n"
        "Q4_0 by ggml's round-to-nearest reference quantisers (blocks of 32). Norms stay F32;\n"
        "a matrix whose rows are not whole blocks of 32 is stored F16. The tokenizer is\n"
        "carried over (a GGUF's own, or the llama2.c tokenizer next to a .bin).\n"
        "\n"
        "  --type T            the weight type (required)\n"
        "  --tokenizer FILE    llama2.c tokenizer for a .bin (default: tok512.bin beside it)\n"
        "  --seed N            weights of a dummy:PRESET model (0)\n");
}

enum { O_TYPE = 256, O_TOK, O_SEED, O_HELP };

static const struct option opts[] = {
    { "type", 1, 0, O_TYPE }, { "tokenizer", 1, 0, O_TOK }, { "seed", 1, 0, O_SEED },
    { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
};

int cmd_quantize(int argc, char **argv) {
    quant_opts_t o = {.type = (uint32_t)-1};
    const char *type = NULL;
    int c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_TYPE: type = optarg; break;
        case O_TOK: o.tokenizer = optarg; break;
        case O_SEED:
            if (!cli_u64(optarg, &o.seed)) {
                cli_bad_value("quantize", "--seed", optarg);
                return 2;
            }
            break;
        case O_HELP: usage(stdout); return 0;
        default: return cli_bad_option("quantize", argv, opts);
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "twinserve quantize: expected IN and OUT, got %d argument%s\n",
                argc - optind, argc - optind == 1 ? "" : "s");
        usage(stderr);
        return 2;
    }
    if (!type) {
        fprintf(stderr, "twinserve quantize: --type is required (f32, f16, bf16, q8_0, q4_0)\n");
        return 2;
    }
    if (quant_type_parse(type, &o.type) != 0) {
        fprintf(stderr, "twinserve quantize: unknown --type '%s' (f32, f16, bf16, q8_0, q4_0)\n",
                type);
        return 2;
    }
    const char *in = argv[optind], *out = argv[optind + 1];
    if (strcmp(in, out) == 0) {
        fprintf(stderr, "twinserve quantize: OUT is IN (%s): write to another file\n", in);
        return 2;
    }
    quant_report_t r;
    char err[1024];
    if (quant_write(in, out, &o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve quantize: %s\n", err);
        return 1;
    }
    printf("%s: %d matrices as %s", out, r.n_matrices, dq_type_name(o.type));
    if (r.n_fallback) printf(" (%d of them F16: rows not whole blocks of 32)", r.n_fallback);
    printf(", %.0f weights in %.2f MB (%.3f bytes/weight); tokenizer: %s\n", r.params,
           (double)r.bytes / 1e6, (double)r.bytes / r.params, r.tokenizer);
    return 0;
}

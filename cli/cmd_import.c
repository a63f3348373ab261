/* cmd_import: `twinserve import`, measurements taken elsewhere as a run of kind 'measured'
 * (analysis/import.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cli_opts.h"
#include "cli/cli_util.h"
#include "analysis/import.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: twinserve import --db DB (--csv FILE | --vllm FILE | --inference-perf DIR)\n"
        "                        [--name RUN] [--model M] [--hw H] [--tp N] [--note TEXT]\n"
        "\n"
        "Records measurements taken elsewhere as a run of kind 'measured', so report,\n"
        "compare, plot and validate read them like any run (requests and per-token times;\n"
        "no steps).\n"
        "\n"
        "  --db DB               the database (created when missing)\n"
        "  --csv FILE            a per-request CSV with a header: arrival_s, prompt_tokens,\n"
        "                        output_tokens, ttft_s and e2e_s (from each arrival) or\n"
        "                        first_token_s and finish_s (on the arrival clock); optional\n"
        "                        token_times (';'-separated, the first-token column's clock),\n"
        "                        id, error (non-empty: the request failed)\n"
        "  --vllm FILE           the result JSON of vLLM's serving benchmark, saved with\n"
        "                        --save-result --save-detailed (it has no arrival times\n"
        "                        unless it lists start_times: validate then regenerates them\n"
        "                        from its request rate and burstiness)\n"
        "  --inference-perf DIR  one experiment folder of inference-perf against vLLM:\n"
        "                        replay.json, ground_truth.json, config.yaml,\n"
        "                        exp-config.yaml, stage_N_lifecycle_metrics.json (client-side\n"
        "                        latencies; the load stages, the prompt cycle and the stage\n"
        "                        files' own summaries go into the run's config; failed\n"
        "                        requests' prompts are imputed); the model and TP come from\n"
        "                        the folder, the model as the preset its Hugging Face id\n"
        "                        names when the shape matches\n"
        "  --name RUN            the run's name (default measured-<file stem>, or\n"
        "                        measured-<folder name>)\n"
        "  --model M, --hw H     the model and hardware measured, recorded with the run; a\n"
        "                        preset name lets validate use it by default (with\n"
        "                        --inference-perf, --model overrides the preset found and\n"
        "                        its shape is checked; the folder does not name the hardware)\n"
        "  --tp N                the tensor-parallel degree measured (an inference-perf\n"
        "                        folder's own; a different N is refused)\n"
        "  --note TEXT           free text kept in the run's config\n"
        "  -q, --quiet           no summary line\n"
        "\n"
        "Bad input names the place (FILE:LINE:COLUMN for a CSV, the key for a JSON, the\n"
        "file and row or FILE:LINE in a folder) and records nothing. docs/analysis.md,\n"
        "\"## import\", has every format.\n"
        "\n"
        "Exit status: 0 recorded, 1 bad input or a failed write, 2 usage error.\n");
}

enum { O_DB = 256, O_CSV, O_VLLM, O_IP, O_NAME, O_MODEL, O_HW, O_TP, O_NOTE, O_HELP };

int cmd_import(int argc, char **argv) {
    static const struct option opts[] = {
        { "db", 1, 0, O_DB }, { "csv", 1, 0, O_CSV }, { "vllm", 1, 0, O_VLLM },
        { "inference-perf", 1, 0, O_IP },
        { "name", 1, 0, O_NAME }, { "model", 1, 0, O_MODEL }, { "hw", 1, 0, O_HW },
        { "tp", 1, 0, O_TP }, { "note", 1, 0, O_NOTE }, { "quiet", 0, 0, 'q' },
        { "help", 0, 0, O_HELP }, { 0, 0, 0, 0 },
    };
    import_opts_t o = { .version = TWIN_VERSION };
    int quiet = 0, n_files = 0, c;
    optind = 1;
    opterr = 0;   /* cli_bad_option says it, in one line */
    while ((c = getopt_long(argc, argv, "q", opts, NULL)) != -1) {
        switch (c) {
        case O_DB: o.db_path = optarg; break;
        case O_CSV: o.path = optarg; o.format = IMPORT_CSV; n_files++; break;
        case O_VLLM: o.path = optarg; o.format = IMPORT_VLLM; n_files++; break;
        case O_IP: o.path = optarg; o.format = IMPORT_IP; n_files++; break;
        case O_NAME: o.name = optarg; break;
        case O_MODEL: o.model = optarg; break;
        case O_HW: o.hw = optarg; break;
        case O_TP:
            if (!cli_int(optarg, 1, 1024, &o.tp)) {
                fprintf(stderr, "twinserve import: bad value '%s' for --tp (1 to 1024)\n", optarg);
                return 2;
            }
            break;
        case O_NOTE: o.note = optarg; break;
        case 'q': quiet = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: return cli_bad_option("import", argv, opts);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "twinserve import: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o.db_path) {
        fprintf(stderr, "twinserve import: --db DB is required\n");
        return 2;
    }
    if (n_files != 1) {
        fprintf(stderr, "twinserve import: give one file, --csv FILE or --vllm FILE, or one "
                "folder, --inference-perf DIR\n");
        return 2;
    }
    if (o.name && !*o.name) {
        fprintf(stderr, "twinserve import: --name must not be empty\n");
        return 2;
    }
    import_result_t r;
    char err[4096];
    if (import_run(&o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "twinserve import: %s\n", err);
        if (r.run_id >= 0)
            fprintf(stderr, "twinserve import: run %lld marked failed in %s\n",
                    (long long)r.run_id, o.db_path);
        return 1;
    }
    if (!quiet)
        printf("run %s (id %lld) in %s: %lld requests (%lld finished, %lld failed), "
               "%lld token times, %s, %.3f s measured%s%s\n", r.name, (long long)r.run_id,
               o.db_path, (long long)r.requests, (long long)r.finished, (long long)r.rejected,
               (long long)r.tokens,
               r.arrivals_known ? "arrivals recorded" : "arrivals unknown", r.duration_s,
               r.detail[0] ? "; " : "", r.detail);
    return 0;
}

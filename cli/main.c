/* twinserve: one binary, subcommands. This file only dispatches. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command_t;

static const command_t commands[] = {
    { "sim", cmd_sim, "replay a trace through a policy in the discrete-event simulator" },
    { "trace", cmd_trace, "trace gen | trace info: synthetic traces, trace statistics" },
    { "runs", cmd_runs, "list the runs recorded in a database with their key metrics" },
    { "report", cmd_report, "one run's metrics: latency percentiles, throughput, SLO goodput" },
    { "compare", cmd_compare, "A/B: two runs side by side with bootstrap confidence intervals" },
    { "plot", cmd_plot, "CDFs, step timelines, KV and queue over time (gnuplot PNG/SVG)" },
    { "sweep", cmd_sweep, "simulate over request rates; --capacity finds the SLO knee" },
    { "merge", cmd_merge, "merge databases into one (e.g. a sweep's jobs run on a cluster)" },
    { "upgrade", cmd_upgrade, "bring a database written by an older twinserve up to date" },
    { "explain", cmd_explain, "step by step: what a policy schedules on a small trace" },
    { "engine", cmd_engine, "replay a trace through a policy on the real engine" },
    { "serve", cmd_serve, "serve a model over an OpenAI-compatible HTTP API (on the engine)" },
    { "generate", cmd_generate, "generate text from a model (llama2.c .bin, GGUF, dummy:PRESET)" },
    { "validate", cmd_validate, "replay an engine run in the simulator: predicted vs measured" },
    { "import", cmd_import, "record measurements taken elsewhere (CSV, vLLM benchmark JSON)" },
    { "calibrate", cmd_calibrate, "fit the simulator's cost model to a profile or an engine run" },
    { "bench", cmd_bench, "decode tokens/s per batch size against the machine's roofs" },
    { "quantize", cmd_quantize, "write a model as GGUF in one weight type (f32 ... q4_0)" },
    { "profile", cmd_profile, "time forward passes over a grid of batch shapes (a profile CSV)" },
    { "kv", cmd_kv, "KV-cache size calculator (bytes per token, per sequence)" },
    { "roofline", cmd_roofline, "decode/prefill roofline calculator for a model on a GPU" },
    { "presets", cmd_presets, "list the built-in model and hardware presets" },
};

static void usage(FILE *f) {
    fprintf(f, "twinserve %s: a workbench for LLM-serving scheduler research\n\n"
               "usage: twinserve COMMAND [options]   (twinserve COMMAND --help for details)\n\n",
            TWIN_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("twinserve %s\n", TWIN_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "twinserve: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}

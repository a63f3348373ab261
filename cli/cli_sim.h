/* cli_sim: the simulator options shared by `sim`, `sweep` and `explain` (one parser, one
 * help text). A command puts CLI_SIM_OPTIONS in its getopt_long table, uses codes below
 * CLI_SIM_FIRST for its own options, and hands every code >= CLI_SIM_FIRST to
 * cli_sim_apply. --trace, --policy, --db, --name and --rate-scale stay with each command.
 *
 * Ownership: sim_opts_t keeps pointers into argv (optarg); o->sets must have room for one
 * entry per argument (calloc(argc + 1)). */
#ifndef TWIN_CLI_SIM_H
#define TWIN_CLI_SIM_H

#include <getopt.h>
#include <stdio.h>

#include "sim/sim.h"

enum {
    CLI_SIM_FIRST = 1000,
    CLI_SIM_FORMAT = CLI_SIM_FIRST, CLI_SIM_SET, CLI_SIM_MODEL, CLI_SIM_HW, CLI_SIM_TP,
    CLI_SIM_SEED, CLI_SIM_START, CLI_SIM_DURATION, CLI_SIM_LIMIT, CLI_SIM_UTIL,
    CLI_SIM_BLOCK, CLI_SIM_WATERMARK, CLI_SIM_MAXTOK, CLI_SIM_MAXSEQ, CLI_SIM_MAXLEN,
    CLI_SIM_FEFF, CLI_SIM_BEFF, CLI_SIM_AEFF, CLI_SIM_OVERHEAD, CLI_SIM_PTIME, CLI_SIM_PMEM,
    CLI_SIM_PREFIX, CLI_SIM_SAVETOK, CLI_SIM_COST, CLI_SIM_KVB, CLI_SIM_MAXP, CLI_SIM_MAXO,
    CLI_SIM_CREQ, CLI_SIM_CPROMPT, CLI_SIM_CTOK, CLI_SIM_ROOFLINE,
    CLI_SIM_MAXOUTTOK, CLI_SIM_ORACLE, CLI_SIM_CLIP,
    CLI_SIM_REPLICAS, CLI_SIM_ROUTER, CLI_SIM_CLUSTER,
    CLI_SIM_SERVING, CLI_SIM_METRICS, CLI_SIM_CTIMEOUT, CLI_SIM_BAND,
    CLI_SIM_WFORMAT, CLI_SIM_KVDTYPE, CLI_SIM_PARALLEL, CLI_SIM_KVTIER,
    CLI_SIM_END
};

#define CLI_SIM_OPTIONS \
    { "format", 1, 0, CLI_SIM_FORMAT }, { "set", 1, 0, CLI_SIM_SET }, \
    { "model", 1, 0, CLI_SIM_MODEL }, { "hw", 1, 0, CLI_SIM_HW }, { "tp", 1, 0, CLI_SIM_TP }, \
    { "seed", 1, 0, CLI_SIM_SEED }, { "start", 1, 0, CLI_SIM_START }, \
    { "duration", 1, 0, CLI_SIM_DURATION }, { "limit", 1, 0, CLI_SIM_LIMIT }, \
    { "gpu-util", 1, 0, CLI_SIM_UTIL }, { "block-size", 1, 0, CLI_SIM_BLOCK }, \
    { "watermark", 1, 0, CLI_SIM_WATERMARK }, { "max-tokens", 1, 0, CLI_SIM_MAXTOK }, \
    { "max-seqs", 1, 0, CLI_SIM_MAXSEQ }, { "max-model-len", 1, 0, CLI_SIM_MAXLEN }, \
    { "flops-eff", 1, 0, CLI_SIM_FEFF }, { "bw-eff", 1, 0, CLI_SIM_BEFF }, \
    { "attn-eff", 1, 0, CLI_SIM_AEFF }, { "overhead", 1, 0, CLI_SIM_OVERHEAD }, \
    { "policy-time-limit", 1, 0, CLI_SIM_PTIME }, { "policy-mem-mb", 1, 0, CLI_SIM_PMEM }, \
    { "prefix-caching", 0, 0, CLI_SIM_PREFIX }, { "save-tokens", 0, 0, CLI_SIM_SAVETOK }, \
    { "cost", 1, 0, CLI_SIM_COST }, { "kv-blocks", 1, 0, CLI_SIM_KVB }, \
    { "max-prompt", 1, 0, CLI_SIM_MAXP }, { "max-output", 1, 0, CLI_SIM_MAXO }, \
    { "client-request", 1, 0, CLI_SIM_CREQ }, \
    { "client-prompt-token", 1, 0, CLI_SIM_CPROMPT }, { "client-token", 1, 0, CLI_SIM_CTOK }, \
    { "roofline", 0, 0, CLI_SIM_ROOFLINE }, \
    { "max-output-tokens", 1, 0, CLI_SIM_MAXOUTTOK }, { "oracle-lengths", 0, 0, CLI_SIM_ORACLE }, \
    { "clip-to-context", 0, 0, CLI_SIM_CLIP }, \
    { "replicas", 1, 0, CLI_SIM_REPLICAS }, { "router", 1, 0, CLI_SIM_ROUTER }, \
    { "cluster", 1, 0, CLI_SIM_CLUSTER }, { "serving", 1, 0, CLI_SIM_SERVING }, \
    { "metrics", 1, 0, CLI_SIM_METRICS }, { "client-timeout", 1, 0, CLI_SIM_CTIMEOUT }, \
    { "band", 2, 0, CLI_SIM_BAND }, \
    { "weight-format", 1, 0, CLI_SIM_WFORMAT }, { "kv-dtype", 1, 0, CLI_SIM_KVDTYPE }, \
    { "parallel", 1, 0, CLI_SIM_PARALLEL }, { "kv-tier", 1, 0, CLI_SIM_KVTIER }

/* Applies one shared option. 1 applied; 0 a bad value (a message naming the option and
 * value went to stderr, prefixed "twinserve CMD: "). */
int cli_sim_apply(const char *cmd, int code, const char *arg, sim_opts_t *o);

/* The help lines for the shared options. */
void cli_sim_usage(FILE *f);

#endif

/* cli_engine: the engine options shared by `engine` (a trace replay) and `serve` (live
 * clients): the policy, the model and backend, the draft, the database and run, and the
 * scheduler's limits and KV pool (one parser, one help text). A command puts
 * CLI_ENGINE_OPTIONS in its getopt_long table, uses codes below CLI_ENG_FIRST for its own
 * options, and hands every code in [CLI_ENG_FIRST, CLI_ENG_END) to cli_engine_apply.
 *
 * Ownership: engine_opts_t keeps pointers into argv (optarg); o->sets must have room for
 * one entry per argument (calloc(argc + 1)). */
#ifndef TWIN_CLI_ENGINE_H
#define TWIN_CLI_ENGINE_H

#include <getopt.h>
#include <stdio.h>

#include "engine/engine.h"

enum {
    CLI_ENG_FIRST = 2000,
    CLI_ENG_POLICY = CLI_ENG_FIRST, CLI_ENG_SET, CLI_ENG_MODEL, CLI_ENG_BACKEND,
    CLI_ENG_THREADS, CLI_ENG_DTYPE, CLI_ENG_WEIGHTS, CLI_ENG_INVARIANT, CLI_ENG_DRAFT,
    CLI_ENG_DB, CLI_ENG_NAME, CLI_ENG_SEED, CLI_ENG_SAVE, CLI_ENG_PREFIX, CLI_ENG_BLOCK,
    CLI_ENG_MAXTOK, CLI_ENG_MAXSEQ, CLI_ENG_MAXLEN, CLI_ENG_KVB, CLI_ENG_KVMEM,
    CLI_ENG_GPUUTIL, CLI_ENG_WM, CLI_ENG_PTIME, CLI_ENG_PMEM, CLI_ENG_KVTYPE,
    CLI_ENG_PCOST, CLI_ENG_END
};

/* In the enum's order: cli_engine_apply names a bad value's option by its code. */
#define CLI_ENGINE_OPTIONS \
    { "policy", 1, 0, CLI_ENG_POLICY }, { "set", 1, 0, CLI_ENG_SET }, \
    { "model", 1, 0, CLI_ENG_MODEL }, { "backend", 1, 0, CLI_ENG_BACKEND }, \
    { "threads", 1, 0, CLI_ENG_THREADS }, { "dtype", 1, 0, CLI_ENG_DTYPE }, \
    { "weights", 1, 0, CLI_ENG_WEIGHTS }, { "batch-invariant", 0, 0, CLI_ENG_INVARIANT }, \
    { "draft", 1, 0, CLI_ENG_DRAFT }, { "db", 1, 0, CLI_ENG_DB }, \
    { "name", 1, 0, CLI_ENG_NAME }, { "seed", 1, 0, CLI_ENG_SEED }, \
    { "save-tokens", 0, 0, CLI_ENG_SAVE }, { "prefix-caching", 0, 0, CLI_ENG_PREFIX }, \
    { "block-size", 1, 0, CLI_ENG_BLOCK }, { "max-tokens", 1, 0, CLI_ENG_MAXTOK }, \
    { "max-seqs", 1, 0, CLI_ENG_MAXSEQ }, { "max-model-len", 1, 0, CLI_ENG_MAXLEN }, \
    { "kv-blocks", 1, 0, CLI_ENG_KVB }, { "kv-mem", 1, 0, CLI_ENG_KVMEM }, \
    { "gpu-util", 1, 0, CLI_ENG_GPUUTIL }, { "watermark", 1, 0, CLI_ENG_WM }, \
    { "policy-time-limit", 1, 0, CLI_ENG_PTIME }, { "policy-mem-mb", 1, 0, CLI_ENG_PMEM }, \
    { "kv-type", 1, 0, CLI_ENG_KVTYPE }, { "policy-cost", 1, 0, CLI_ENG_PCOST }

/* Applies one shared option. 1 applied; 0 a bad value (a message naming the option and
 * value went to stderr, prefixed "twinserve CMD: "). */
int cli_engine_apply(const char *cmd, int code, const char *arg, engine_opts_t *o);

/* The help lines for the shared options. */
void cli_engine_usage(FILE *f);
/* The backend's options alone (--backend, --threads, --dtype, --weights, --kv-type),
 * which `generate`, `bench` and `profile` take too. */
void cli_backend_usage(FILE *f);

#endif

/* serving: what a serving engine adds to a GPU's forward passes, as a profile of physically
 * meaningful terms (docs/fidelity.md, "The serving engine's own time").
 *
 * A cost model (sim/cost.h) prices one forward pass from the GPU's operators; a real server
 * also spends CPU time per step, runs its passes as CUDA graphs or eagerly, picks its own
 * attention and all-reduce kernels, sizes its KV cache by profiling its memory at startup,
 * and sits behind an API server that a benchmark client times. A serving profile holds those
 * terms:
 *
 *   "vllm"  vLLM 0.15 (V1 engine) on NVIDIA GPUs: sim/serving/vllm.serving, embedded in the
 *           binary; its terms come from vLLM's source and published measurements, and the
 *           few that only a measured run shows are fitted to the real vLLM runs in
 *           shared/data/vllm-h100 (`calibrate --serving`; the file says which and how well).
 *   "none"  the bare GPU: the cost model's passes back to back, server-side metrics.
 *   a file  the same keys (sim/kvfile.h syntax), for another engine or version.
 *
 * The terms, and where the simulator applies them (sim.h, replica.c):
 *  - engine CPU per step (scheduling, input preparation, sampling, output processing):
 *        cpu = cpu_step_s + cpu_seq_s x sequences + cpu_token_s x tokens
 *    With async_scheduling (vLLM >= 0.14 default: the scheduler works one step ahead,
 *    overlapping the GPU) a step takes max(pass, cpu); without it, cpu + pass.
 *  - async_scheduling also means a request that arrives while step N runs is first
 *    scheduled in step N + 2 (N + 1 was planned when N began).
 *  - CUDA graphs: a step of at most graph_max_tokens tokens replays a captured graph,
 *    padded up to the next capture size (vLLM's default sizes 1, 2, 4, 8, 16, ... by 8 to
 *    256, then by 16; graph_max_tokens 0 takes vLLM's default min(2 x max_num_seqs, 512,
 *    max_num_batched_tokens)); a larger step runs eagerly, its CPU launching
 *    kernels_per_layer x layers kernels at launch_s each, so it takes at least that long.
 *  - attn_kv_bw_eff: the attention kernel reads each sequence's K/V at this fraction of the
 *    HBM bandwidth (replaces the cost model's KV term).
 *  - moe_gemm_eff: the fused MoE kernel's expert products run at this fraction of a dense
 *    product of the same rows (divides the cost model's expert term).
 *  - ar_*: the tensor-parallel all-reduce vLLM uses on one node (its custom all-reduce and
 *    symmetric-memory kernels for the messages a pass makes): latency + bytes x time per
 *    byte, by degree (2, 4, 8; other degrees take the next one up); replaces the cost
 *    model's all-reduce.
 *  - client side (the API server, what a streaming benchmark client measures): request_s +
 *    prompt_token_s x prompt tokens before the scheduler, token_s per streamed token
 *    (sim.h's client model).
 *  - KV capacity as vLLM computes it (serving_kv_blocks).
 *
 * Invariants: a profile that loads is valid (every term finite and >= 0, efficiencies in
 * (0, 1], counts >= 0); "none" has active 0 and every term 0.
 *
 * Ownership: serving_t is a plain value; nothing is kept between calls. */
#ifndef TWIN_SERVING_H
#define TWIN_SERVING_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/kvfile.h"
#include "sim/presets.h"

#define SERVING_AR_DEGREES 3   /* the all-reduce table's degrees: 2, 4, 8 */

typedef struct serving {
    char name[KV_NAME_CAP];        /* "vllm", "none", or the file's stem */
    char path[1024];               /* "builtin:vllm", the file, or "" for none */
    char engine[KV_TEXT_CAP];      /* what it models, e.g. "vLLM 0.15.1, V1 engine" */
    char source[KV_TEXT_CAP];      /* where its terms come from */
    char fitted_at[KV_TEXT_CAP];
    int active;                    /* 0: none (the bare GPU) */
    /* the engine core */
    int32_t async_scheduling;
    double cpu_step_s, cpu_seq_s, cpu_token_s;
    /* CUDA graphs */
    int32_t cuda_graphs;
    int32_t graph_max_tokens;
    double launch_s, kernels_per_layer;
    /* the kernels */
    double attn_kv_bw_eff;
    double moe_gemm_eff;
    double ar_latency_s[SERVING_AR_DEGREES], ar_s_per_byte[SERVING_AR_DEGREES];
    /* the API server */
    double request_s, prompt_token_s, token_s;
    /* the KV capacity (serving_kv_blocks) */
    double nontorch_bytes;         /* non-torch memory the profiling pass adds at TP 1 */
    double nccl_bytes;             /* more at TP > 1: NCCL's buffers (first collective) */
    double sampler_bytes_per_row;  /* the sampler's dummy run: bytes per row and vocab entry */
    /* how the fitted terms did (NAN when the file does not say); step_cv_err: the held-out
     * runs' median |error| of a step's time, seen through the client's mean TPOT of each
     * stage (calibrate --serving --loo), the width of --band's default */
    double fit_runs, fit_mape, cv_mape, step_cv_err;
} serving_t;

/* "vllm", "none", "builtin:NAME", or a file. 0, or -1 with a message in err ("unknown
 * serving profile 'x'; built-in profiles: vllm, none (or give a file)", or the file's
 * "PATH:LINE: ..."). */
int serving_get(const char *name, serving_t *out, char *err, size_t errlen);

/* The built-in profiles' names, "vllm, none", into out[cap]. */
void serving_list_builtins(char *out, size_t cap);

/* The built-in "none". */
void serving_none(serving_t *out);

/* Checks every term; 0, or -1 with the key named in err. */
int serving_validate(const serving_t *s, char *err, size_t errlen);

/* Writes s as a profile file (a comment first, each line prefixed "# "; may be NULL),
 * through a temporary file renamed into place. 0, or -1 with a message. */
int serving_write(const char *path, const serving_t *s, const char *comment, char *err,
                  size_t errlen);

/* The run config's "serving" object: name, path, engine, source and every term. */
void serving_json(FILE *f, const serving_t *s);

/* The largest CUDA graph of a server with these budgets: graph_max_tokens, else vLLM's
 * default; 0 when cuda_graphs is off. */
int32_t serving_graph_max(const serving_t *s, int32_t max_seqs, int32_t max_tokens);
/* The tokens a step of `tokens` runs as: the next capture size up when it is captured
 * (vLLM's default sizes below the largest graph), else tokens. */
int32_t serving_padded_tokens(int32_t tokens, int32_t graph_max);

/* The all-reduce of degree tp (> 1): latency and time per byte (the next degree up in the
 * table for one it does not list; the largest beyond). */
void serving_allreduce(const serving_t *s, int32_t tp, double *latency_s, double *s_per_byte);

/* The engine's CPU time for a step of this work (seconds). */
double serving_cpu_time(const serving_t *s, double seqs, double tokens);

/* vLLM's KV cache, as its memory profiling at startup sizes it (gpu_worker.py,
 * determine_available_memory: requested = total x gpu_memory_utilization, minus the
 * weights, the profiling pass's torch peak and its non-torch increase), in blocks of
 * block_size tokens over every layer of one device:
 *     blocks = floor((mem_cuda x util - weights/device - activations - nontorch) /
 *                    (block_size x KV bytes per token per device))
 * activations: the largest live tensors of a forward pass of max_tokens tokens (residual,
 * hidden, and the MLP's or the MoE kernel's intermediates, per device) plus the sampler's
 * dummy run over max_seqs rows of the vocabulary. The parts go to *parts (may be NULL).
 * -1 with the reason in err when nothing fits. With dp > 1 data-parallel attention ranks
 * (sim/parallel.h; m one pipeline stage's shape) each rank of tp devices keeps as many
 * blocks for its own sequences, the routed experts split tp x dp ways; max_tokens and
 * max_seqs are one rank's, and the count returned is the ranks' together. */
typedef struct {
    double total, requested, weights, activations, nontorch, per_block;
} serving_kv_parts_t;
int32_t serving_kv_blocks(const serving_t *s, const preset_model_t *m, const preset_hw_t *hw,
                          int32_t tp, int32_t dp, double gpu_util, int32_t block_size,
                          int32_t max_tokens, int32_t max_seqs, serving_kv_parts_t *parts,
                          char *err, size_t errlen);

/* The weights one device of tp holds (vLLM's sharding: every matrix split tp ways, the
 * embedding and LM head by vocabulary rows padded to a multiple of 64 x tp, norms and the
 * router replicated; with dp > 1 data-parallel ranks the routed experts tp x dp ways),
 * bytes. */
double serving_weight_bytes_per_device(const preset_model_t *m, int32_t tp, int32_t dp);

#endif

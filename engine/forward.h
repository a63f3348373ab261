/* forward: the Llama forward pass over one ragged batch, on any backend (engine/backend.h).
 *
 * fwd_new uploads the model's weights to the backend, allocates activations for the
 * largest step (max_tokens tokens, max_sample sampled rows) and reserves the paged KV pool
 * (n_blocks blocks of block_size tokens, every layer). fwd_step then runs one step: every
 * token of the batch (prompt chunks, decode tokens, speculative drafts of many requests,
 * mixed) through every layer in one pass, logits only for the sampled rows, and sampling
 * on the backend. A mixture-of-experts layer's MLP runs in engine/forward_moe.c (CPU
 * backend; a backend without the MoE ops refuses such a model at fwd_new).
 *
 * Invariants: the batch's block ids are < n_blocks and its positions < the model's max_seq
 * (checked; -1 with a message otherwise). The pass reads KV only through block tables.
 *
 * Ownership: the model is borrowed for fwd_new only (weights are copied to the backend);
 * the backend is borrowed for the fwd_t's lifetime. fwd_free releases its buffers. */
#ifndef TWIN_FORWARD_H
#define TWIN_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/model.h"
#include "sim/cost.h"

typedef struct {
    int32_t max_tokens;   /* tokens per step */
    int32_t max_sample;   /* sampled rows per step */
    int32_t n_blocks;     /* KV pool size; 0: later, with fwd_kv_init */
    int32_t block_size;
} fwd_opts_t;

typedef struct fwd fwd_t;

int fwd_new(backend_t *b, const model_t *m, const fwd_opts_t *o, fwd_t **out, char *err,
            size_t errlen);
void fwd_free(fwd_t *f);
/* Reserves the KV pool of a forward pass made with n_blocks 0, so that its size can come
 * from the memory left after the weights and activations (vLLM's gpu_memory_utilization).
 * Once only; 0, or -1 with a message in fwd_errmsg. */
int fwd_kv_init(fwd_t *f, int32_t n_blocks);
const char *fwd_errmsg(const fwd_t *f);

/* Runs the batch; ids [batch->n_sample] receives the sampled tokens. 0 or -1. */
int fwd_step(fwd_t *f, const bk_batch_t *batch, int32_t *ids);
/* An untimed pass to touch pages, caches and threads before timed ones: one sequence of
 * min(n, max_tokens, room in table) tokens (ids i % vocab at positions 0..) over the KV
 * blocks table[n_blocks], its last min(ns, max_sample) rows sampled greedily, the outputs
 * thrown away (the KV it writes stays in those blocks). 0 (also when nothing fits), or -1
 * with a message in fwd_errmsg. */
int fwd_warm_up(fwd_t *f, const int32_t *table, int32_t n_blocks, int32_t n, int32_t ns);
/* The last step's logits [n_sample][vocab] copied to the host (tests, teaching). */
int fwd_logits(fwd_t *f, float *dst);

/* Rows [row0, row0 + n) of the last step's logits to the host (speculative sampling needs
 * the distributions of its sampled requests; greedy ones only their ids). 0 or -1. */
int fwd_logits_rows(fwd_t *f, int32_t row0, int32_t n, float *dst);
const model_config_t *fwd_config(const fwd_t *f);
/* Bytes of weights the products read, in the types they are kept in (engine/backend.h,
 * stored types): every matrix, the norms, and the embedding table when the LM head is the
 * table or the model is untied (a table kept only for lookups beside a stored-type head is
 * not counted); in the backend's layout, so with the padding rows of a matrix whose rows
 * are not whole panels (they are read too). */
double fwd_weight_bytes(const fwd_t *f);
/* The stored type holding most of the matrices' bytes ("Q8_0", ...), or NULL when every
 * matrix is in the backend's own weight type. */
const char *fwd_weight_type(const fwd_t *f);

/* The batch's work as the cost models see it (sim/cost.h): each sequence's new tokens and
 * its context before the step (seq_len - new tokens), and the sampled rows. */
void fwd_batch_features(const bk_batch_t *b, cost_features_t *f);

/* KV blocks that fit in `bytes` on this backend for the model (all layers). */
int32_t fwd_kv_blocks_for(backend_t *b, const model_config_t *c, int32_t block_size,
                          double bytes);

#endif

/* prefix: content keys for a request's full prompt blocks, for the KV prefix cache.
 *
 * The simulator has no token ids, but traces such as Mooncake's give a hash per fixed-size
 * block of the prompt (512 tokens there). A KV block j (tokens [j*B, (j+1)*B)) is keyed by
 * chaining: key_j = mix(key_{j-1}, hash of the trace block holding it, j's offset in it),
 * so equal keys mean an equal whole prefix, as vLLM's chained block hashes do. Only full
 * blocks that lie inside the prompt and are covered by a hash are keyed ("cacheable").
 *
 * Invariants: `keyed` blocks 0..keyed-1 of the request have been published (or were taken
 * from the cache); `chain` is the key of block keyed-1 (a fixed seed when keyed is 0).
 * Keys are 64-bit; a collision (about 2^-64 per pair) would share a block wrongly.
 *
 * Ownership: a prefix_t is a plain member of the request; prefix_set copies the hashes,
 * prefix_clear frees them. */
#ifndef TWIN_PREFIX_H
#define TWIN_PREFIX_H

#include <stdint.h>

#include "policies/kv.h"

typedef struct {
    int64_t *hash;
    int32_t n_hash, cap;
    int32_t cacheable;  /* full prompt blocks that can carry a key */
    int32_t per_hash;   /* KV blocks per trace hash block */
    int32_t keyed;
    uint64_t chain;
} prefix_t;

/* Copies n hashes, each covering hash_block tokens (a multiple of block_size, else nothing
 * is cacheable). 0, or -1 when out of memory. */
int prefix_set(prefix_t *p, const int64_t *hash, int32_t n, int32_t hash_block,
               int32_t prompt_tokens, int32_t block_size);
void prefix_clear(prefix_t *p);
/* Back to "nothing published" (after a preemption released the blocks). */
void prefix_reset(prefix_t *p);

/* How many leading blocks (at most max_blocks) are in the cache: their ids go to ids[],
 * and *idle counts those that are idle (taking them uses allocatable blocks). Pure. */
int32_t prefix_match(const prefix_t *p, const kv_t *kv, int32_t max_blocks, int32_t *ids,
                     int32_t *idle);
/* After taking the first `hits` blocks from the cache: the chain continues from there. */
void prefix_take(prefix_t *p, int32_t hits);
/* Keys the request's blocks that became full (computed tokens) and were not yet keyed. */
void prefix_publish(prefix_t *p, kv_t *kv, const int32_t *blocks, int32_t computed,
                    int32_t block_size);

#endif

/* prefix: content keys for a request's full KV blocks, for the KV prefix cache.
 *
 * The simulator has no token ids, so a block's content is named by what the trace says of
 * the prompt: Mooncake's hash per 512-token block, or a plain trace's shared-prefix group
 * (one "hash", the group, covering the prefix's length). KV block j (tokens [j*B, (j+1)*B))
 * lies in the trace's hashed prefix when it ends inside it; it is then named by the hash of
 * the trace block holding its last token (each trace hash covers its whole prefix). Every
 * other full block (the prompt's own tail, generated tokens) holds content no other request
 * has: it is named by the request's salt. Keys chain, key_j = mix(key_{j-1}, name of j, j),
 * so equal keys mean an equal whole prefix, as vLLM's chained block hashes do. Keying the
 * request's own blocks too lets a preempted request find what it computed, generated
 * tokens included, and recompute only the blocks that were evicted meanwhile.
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
    int32_t n_hash;
    int32_t hash_block; /* tokens per trace hash */
    int32_t block_size;
    int32_t shared;     /* leading full blocks named by the trace's hashes */
    uint64_t salt;      /* names the request's own blocks */
    int32_t keyed;
    uint64_t chain;
} prefix_t;

/* Copies n hashes, each covering hash_block tokens of the prompt (n = 0: no shared prefix;
 * the request's own blocks are still keyed). id makes the salt: unique per request. 0, or
 * -1 when out of memory. */
int prefix_set(prefix_t *p, int32_t id, const int64_t *hash, int32_t n, int32_t hash_block,
               int32_t prompt_tokens, int32_t block_size);
void prefix_clear(prefix_t *p);
/* Back to "nothing published" (after a preemption released the blocks). */
void prefix_reset(prefix_t *p);

/* How many leading blocks (at most max_blocks) are in the cache: their ids go to ids[]
 * (may be NULL), and *idle counts those that are idle (taking them uses allocatable
 * blocks). Pure. */
int32_t prefix_match(const prefix_t *p, const kv_t *kv, int32_t max_blocks, int32_t *ids,
                     int32_t *idle);
/* After the first hbm_hits blocks found in HBM (prefix_match): how many of the next blocks
 * (up to max_blocks in all) are held in a row by a tier below or by HBM again (a chain's
 * later blocks can outlive its earlier ones there), the run ending at its last tier block.
 * tier_of[], keys[] and ids[] (indexed from hbm_hits) say where (a tier, or -1 for HBM,
 * whose block id is then ids[]) and what. Pure. */
struct kv_tiers;
int32_t prefix_match_tiers(const prefix_t *p, const kv_t *kv, const struct kv_tiers *tiers,
                           int32_t hbm_hits, int32_t max_blocks, int8_t *tier_of,
                           uint64_t *keys, int32_t *ids);
/* After taking the first `hits` blocks from the cache: the chain continues from there. */
void prefix_take(prefix_t *p, int32_t hits);
/* Keys the request's blocks that became full (computed tokens) and were not yet keyed. */
void prefix_publish(prefix_t *p, kv_t *kv, const int32_t *blocks, int32_t computed);

#endif

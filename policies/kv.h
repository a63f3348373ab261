/* kv: the paged KV-cache block manager of the scheduler core.
 *
 * Blocks are numbered 0 .. num_blocks-1 and each holds block_size tokens of K and V for every
 * layer. The manager only counts and hands out ids: the engine maps an id to device memory,
 * the simulator never touches memory at all, so both see the same pressure.
 *
 * Invariants:
 *  - A block is either free (ref 0, on the free stack) or in use (ref >= 1).
 *  - kv_alloc is all-or-nothing: on failure nothing was taken.
 *  - Reference counts allow a block to be shared (prefix sharing, forks); kv_release frees a
 *    block when its count reaches 0. Releasing a free block is a caller bug and is reported.
 *  - Allocation order is deterministic (LIFO free stack), so runs are reproducible.
 *  - Prefix cache (optional, kv_enable_cache): a full block can carry a 64-bit content key
 *    that covers its whole prefix. When its count drops to 0 it is not freed but kept,
 *    idle, on an LRU list, so a later request with the same prefix can take it back
 *    (kv_cache_acquire). Idle blocks count as free: allocation takes the free stack first,
 *    then evicts the least recently released idle block, which loses its key.
 *
 * Ownership: kv_new returns an object owned by the caller (kv_free). */
#ifndef TWIN_KV_H
#define TWIN_KV_H

#include <stdint.h>

typedef struct kv kv_t;

/* NULL when out of memory or num_blocks < 0 or block_size < 1. */
kv_t *kv_new(int32_t num_blocks, int32_t block_size);
void kv_free(kv_t *kv);

int32_t kv_num_blocks(const kv_t *kv);
int32_t kv_block_size(const kv_t *kv);
int32_t kv_num_free(const kv_t *kv);   /* allocatable: free plus idle cached blocks */
int32_t kv_num_used(const kv_t *kv);   /* held by someone (count >= 1) */
int32_t kv_num_cached(const kv_t *kv); /* blocks that carry a key, held or idle */

/* Blocks needed to hold n tokens. */
static inline int32_t kv_blocks_for(int32_t n, int32_t block_size) {
    return n <= 0 ? 0 : (n + block_size - 1) / block_size;
}

/* Takes n free blocks into ids[0..n-1]. 0 on success, -1 if fewer than n are free. */
int kv_alloc(kv_t *kv, int32_t n, int32_t *ids);
/* Adds a reference to each block (which must be in use). 0, or -1 on a bad id. */
int kv_retain(kv_t *kv, const int32_t *ids, int32_t n);
/* Drops a reference to each block. 0, or -1 on a bad or free id (nothing else changes). */
int kv_release(kv_t *kv, const int32_t *ids, int32_t n);
int32_t kv_refcount(const kv_t *kv, int32_t id);

/* --- prefix cache ----------------------------------------------------------------------- */
struct kv_tiers;
/* The tiers below (kv_tier.h; NULL: none): a keyed block the cache evicts is written there
 * (its key; the cache never owns the tiers). */
void kv_set_tiers(kv_t *kv, struct kv_tiers *tiers);
int kv_enable_cache(kv_t *kv);                 /* 0, or -1 when out of memory */
/* The block holding key, held or idle, or -1. */
int32_t kv_cache_lookup(const kv_t *kv, uint64_t key);
/* Gives held block id the key. 0; 1 if another block has the key already (this one stays
 * unkeyed); -1 on a bad id, a block that has a key, or the cache off. */
int kv_cache_insert(kv_t *kv, uint64_t key, int32_t id);
/* Adds a reference to a keyed block, taking it off the idle list if it was idle. */
int kv_cache_acquire(kv_t *kv, int32_t id);
/* 1 if the block is keyed and idle: acquiring it uses up one allocatable block. */
int kv_cache_is_idle(const kv_t *kv, int32_t id);

#endif

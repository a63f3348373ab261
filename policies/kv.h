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
int32_t kv_num_free(const kv_t *kv);
int32_t kv_num_used(const kv_t *kv);

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

#endif

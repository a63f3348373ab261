/* kv: see kv.h. A free stack plus a reference count per block: O(1) per block. With the
 * prefix cache on, blocks that carry a content key sit, once unreferenced, on an LRU list
 * instead of the free stack, and a key -> block table (linear probing, backward-shift
 * deletion) finds them; allocation takes the free stack first, then evicts the LRU head. */
#include "policies/kv.h"

#include <stdlib.h>

#include "policies/kv_tier.h"

struct kv {
    int32_t num_blocks;
    int32_t block_size;
    int32_t num_free;    /* on the free stack (LRU blocks not counted here) */
    int32_t *free_stack; /* [num_blocks], top at num_free - 1 */
    int32_t *ref;        /* [num_blocks] */

    /* prefix cache, NULL/0 when off */
    uint64_t *key;       /* [num_blocks] content key of a block that has one */
    uint8_t *keyed;      /* [num_blocks] */
    int32_t *lru_prev, *lru_next; /* [num_blocks], -1 ends; unreferenced keyed blocks */
    int32_t lru_head, lru_tail, lru_n;
    int32_t *map;        /* [map_cap] block ids, -1 empty */
    int32_t map_cap;     /* a power of two >= 2 x num_blocks */
    int32_t num_keyed;
    struct kv_tiers *tiers; /* below HBM (kv_tier.h), not owned; NULL: none */
};

kv_t *kv_new(int32_t num_blocks, int32_t block_size) {
    if (num_blocks < 0 || block_size < 1) return NULL;
    kv_t *kv = calloc(1, sizeof *kv);
    if (!kv) goto fail;
    kv->free_stack = malloc(sizeof(int32_t) * (size_t)(num_blocks ? num_blocks : 1));
    kv->ref = calloc((size_t)(num_blocks ? num_blocks : 1), sizeof(int32_t));
    if (!kv->free_stack || !kv->ref) goto fail;
    kv->num_blocks = num_blocks;
    kv->block_size = block_size;
    kv->num_free = num_blocks;
    kv->lru_head = kv->lru_tail = -1;
    /* Lowest ids on top, so a fresh cache hands out 0, 1, 2, ... */
    for (int32_t i = 0; i < num_blocks; i++) kv->free_stack[i] = num_blocks - 1 - i;
    return kv;
fail:
    kv_free(kv);
    return NULL;
}

void kv_free(kv_t *kv) {
    if (!kv) return;
    free(kv->free_stack);
    free(kv->ref);
    free(kv->key);
    free(kv->keyed);
    free(kv->lru_prev);
    free(kv->lru_next);
    free(kv->map);
    free(kv);
}

int kv_enable_cache(kv_t *kv) {
    if (kv->map) return 0;
    size_t n = (size_t)(kv->num_blocks ? kv->num_blocks : 1);
    int32_t cap = 16;
    while (cap < 2 * kv->num_blocks) cap *= 2;
    kv->key = calloc(n, sizeof *kv->key);
    kv->keyed = calloc(n, 1);
    kv->lru_prev = malloc(n * sizeof(int32_t));
    kv->lru_next = malloc(n * sizeof(int32_t));
    kv->map = malloc((size_t)cap * sizeof(int32_t));
    if (!kv->key || !kv->keyed || !kv->lru_prev || !kv->lru_next || !kv->map) return -1;
    for (int32_t i = 0; i < cap; i++) kv->map[i] = -1;
    kv->map_cap = cap;
    return 0;
}

void kv_set_tiers(kv_t *kv, struct kv_tiers *tiers) { kv->tiers = tiers; }

int32_t kv_num_blocks(const kv_t *kv) { return kv->num_blocks; }
int32_t kv_block_size(const kv_t *kv) { return kv->block_size; }
int32_t kv_num_free(const kv_t *kv) { return kv->num_free + kv->lru_n; }
int32_t kv_num_used(const kv_t *kv) { return kv->num_blocks - kv->num_free - kv->lru_n; }
int32_t kv_num_cached(const kv_t *kv) { return kv->num_keyed; }

/* ------------------------------------------------------------------ key table */

static uint32_t slot_of(const kv_t *kv, uint64_t key) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (uint32_t)key & (uint32_t)(kv->map_cap - 1);
}

int32_t kv_cache_lookup(const kv_t *kv, uint64_t key) {
    if (!kv->map) return -1;
    uint32_t mask = (uint32_t)kv->map_cap - 1;
    for (uint32_t h = slot_of(kv, key); kv->map[h] >= 0; h = (h + 1) & mask)
        if (kv->key[kv->map[h]] == key) return kv->map[h];
    return -1;
}

static void map_remove(kv_t *kv, int32_t id) {
    uint32_t mask = (uint32_t)kv->map_cap - 1, h = slot_of(kv, kv->key[id]);
    while (kv->map[h] != id) h = (h + 1) & mask;
    kv->map[h] = -1;
    for (uint32_t j = (h + 1) & mask; kv->map[j] >= 0; j = (j + 1) & mask) {
        uint32_t home = slot_of(kv, kv->key[kv->map[j]]);
        if (((j - home) & mask) >= ((j - h) & mask)) {
            kv->map[h] = kv->map[j];
            kv->map[j] = -1;
            h = j;
        }
    }
    kv->keyed[id] = 0;
    kv->num_keyed--;
}

int kv_cache_insert(kv_t *kv, uint64_t key, int32_t id) {
    if (!kv->map || id < 0 || id >= kv->num_blocks || kv->ref[id] <= 0 || kv->keyed[id])
        return -1;
    if (kv_cache_lookup(kv, key) >= 0) return 1; /* computed twice: the first copy stays */
    uint32_t mask = (uint32_t)kv->map_cap - 1, h = slot_of(kv, key);
    while (kv->map[h] >= 0) h = (h + 1) & mask;
    kv->map[h] = id;
    kv->key[id] = key;
    kv->keyed[id] = 1;
    kv->num_keyed++;
    return 0;
}

/* ------------------------------------------------------------------ LRU of unreferenced keyed blocks */

static void lru_unlink(kv_t *kv, int32_t id) {
    int32_t p = kv->lru_prev[id], n = kv->lru_next[id];
    if (p >= 0) kv->lru_next[p] = n; else kv->lru_head = n;
    if (n >= 0) kv->lru_prev[n] = p; else kv->lru_tail = p;
    kv->lru_n--;
}

static void lru_append(kv_t *kv, int32_t id) {
    kv->lru_prev[id] = kv->lru_tail;
    kv->lru_next[id] = -1;
    if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = id; else kv->lru_head = id;
    kv->lru_tail = id;
    kv->lru_n++;
}

int kv_cache_acquire(kv_t *kv, int32_t id) {
    if (!kv->map || id < 0 || id >= kv->num_blocks || !kv->keyed[id]) return -1;
    if (kv->ref[id]++ == 0) lru_unlink(kv, id);
    return 0;
}

int kv_cache_is_idle(const kv_t *kv, int32_t id) {
    return kv->map && id >= 0 && id < kv->num_blocks && kv->keyed[id] && kv->ref[id] == 0;
}

/* ------------------------------------------------------------------ alloc / release */

int kv_alloc(kv_t *kv, int32_t n, int32_t *ids) {
    if (n < 0 || n > kv->num_free + kv->lru_n) return -1;
    for (int32_t i = 0; i < n; i++) {
        int32_t id;
        if (kv->num_free > 0) {
            id = kv->free_stack[--kv->num_free];
        } else { /* evict the least recently used cached block */
            id = kv->lru_head;
            lru_unlink(kv, id);
            kv_tiers_put(kv->tiers, kv->key[id]);   /* written down a tier, if any */
            map_remove(kv, id);
        }
        kv->ref[id] = 1;
        ids[i] = id;
    }
    return 0;
}

static int kv_valid_used(const kv_t *kv, const int32_t *ids, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kv->num_blocks || kv->ref[ids[i]] <= 0) return 0;
    return 1;
}

int kv_retain(kv_t *kv, const int32_t *ids, int32_t n) {
    if (!kv_valid_used(kv, ids, n)) return -1;
    for (int32_t i = 0; i < n; i++) kv->ref[ids[i]]++;
    return 0;
}

int kv_release(kv_t *kv, const int32_t *ids, int32_t n) {
    /* Validate first so a bad id changes nothing. An id repeated within one call can still
     * drive its count below zero: that is caught in the loop (earlier copies stay released). */
    if (!kv_valid_used(kv, ids, n)) return -1;
    /* Last block first: idle cached blocks join the LRU tail in reverse, so a prefix's root
     * is evicted last (a chain is useless past its first missing block). */
    for (int32_t i = n - 1; i >= 0; i--) {
        int32_t id = ids[i];
        if (kv->ref[id] <= 0) return -1;
        if (--kv->ref[id] > 0) continue;
        if (kv->map && kv->keyed[id]) lru_append(kv, id); /* kept for reuse until evicted */
        else kv->free_stack[kv->num_free++] = id;
    }
    return 0;
}

int32_t kv_refcount(const kv_t *kv, int32_t id) {
    return (id < 0 || id >= kv->num_blocks) ? -1 : kv->ref[id];
}

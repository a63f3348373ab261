/* prefix: see prefix.h. */
#include "policies/prefix.h"

#include <stdlib.h>

#include "policies/kv_tier.h"
#include <string.h>

enum { CHAIN_SEED = 0x2545F491 };

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t key_of(const prefix_t *p, uint64_t prev, int32_t j) {
    uint64_t name = p->salt;
    if (j < p->shared) /* the trace block that holds the block's last token */
        name = mix((uint64_t)p->hash[((int64_t)j * p->block_size + p->block_size - 1) /
                                     p->hash_block]);
    return mix(prev * 0x9E3779B97F4A7C15ull ^ name ^ (uint64_t)j);
}

int prefix_set(prefix_t *p, int32_t id, const int64_t *hash, int32_t n, int32_t hash_block,
               int32_t prompt_tokens, int32_t block_size) {
    prefix_clear(p);
    p->block_size = block_size;
    /* A request's own content: salted apart from every trace hash (mix is a bijection, so
     * the extra round keeps salts off the values mix(hash) can take, but for collisions). */
    p->salt = mix(mix((uint64_t)(uint32_t)id ^ 0xA0761D6478BD642Full) ^ 0xE7037ED1A0B428DBull);
    if (n > 0 && hash_block > 0) {
        p->hash = malloc(sizeof *p->hash * (size_t)n);
        if (!p->hash) return -1;
        memcpy(p->hash, hash, sizeof *p->hash * (size_t)n);
        p->n_hash = n;
        p->hash_block = hash_block;
        int64_t covered = (int64_t)n * hash_block;
        if (covered > prompt_tokens) covered = prompt_tokens;
        p->shared = (int32_t)(covered / block_size);
    }
    prefix_reset(p);
    return 0;
}

void prefix_clear(prefix_t *p) {
    free(p->hash);
    memset(p, 0, sizeof *p);
}

void prefix_reset(prefix_t *p) {
    p->keyed = 0;
    p->chain = CHAIN_SEED;
}

int32_t prefix_match(const prefix_t *p, const kv_t *kv, int32_t max_blocks, int32_t *ids,
                     int32_t *idle) {
    int32_t h = 0;
    uint64_t key = CHAIN_SEED;
    *idle = 0;
    for (; h < max_blocks; h++) {
        key = key_of(p, key, h);
        int32_t id = kv_cache_lookup(kv, key);
        if (id < 0) break;
        if (ids) ids[h] = id;
        *idle += kv_cache_is_idle(kv, id);
    }
    return h;
}

int32_t prefix_match_tiers(const prefix_t *p, const kv_t *kv, const struct kv_tiers *tiers,
                           int32_t hbm_hits, int32_t max_blocks, int8_t *tier_of,
                           uint64_t *keys, int32_t *ids) {
    if (!tiers || kv_tiers_count(tiers) == 0) return 0;
    uint64_t key = CHAIN_SEED;
    int32_t j = 0, last_tier = -1;
    for (; j < hbm_hits; j++) key = key_of(p, key, j);
    for (; j < max_blocks; j++) {
        key = key_of(p, key, j);
        int32_t id = kv_cache_lookup(kv, key);
        int t = id >= 0 ? -1 : kv_tiers_find(tiers, key);
        if (id < 0 && t < 0) break;
        tier_of[j - hbm_hits] = (int8_t)t;
        keys[j - hbm_hits] = key;
        ids[j - hbm_hits] = id;
        if (t >= 0) last_tier = j;
    }
    return last_tier < 0 ? 0 : last_tier + 1 - hbm_hits;
}

void prefix_take(prefix_t *p, int32_t hits) {
    prefix_reset(p);
    for (int32_t j = 0; j < hits; j++) p->chain = key_of(p, p->chain, j);
    p->keyed = hits;
}

void prefix_publish(prefix_t *p, kv_t *kv, const int32_t *blocks, int32_t computed) {
    int32_t full = computed / p->block_size;
    for (int32_t j = p->keyed; j < full; j++) {
        p->chain = key_of(p, p->chain, j);
        kv_cache_insert(kv, p->chain, blocks[j]); /* 1: someone computed it first; fine */
    }
    if (full > p->keyed) p->keyed = full;
}

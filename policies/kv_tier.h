/* kv_tier: the KV cache below HBM (issue #31): CPU DRAM, local SSD and a shared pool, as
 * LMCache, vLLM's offloading connector and Mooncake's store keep evicted blocks.
 *
 * A tier holds content keys (prefix.h's chained block keys), not data: the simulator moves
 * no bytes, and the executor prices what moves (kv_tier_reload_s). Tiers are ordered below
 * HBM: a block the HBM cache evicts is written to tier 0; a tier that is full evicts its
 * least recently used key to the next tier (the last one drops it). A hit in a tier is a
 * reload: the key is copied back into HBM and stays in the tier (inclusive, as LMCache keeps
 * its CPU copy), touched as recently used. Writes are write-back and asynchronous (counted,
 * not waited for).
 *
 * Invariants: a key is in at most one tier (a write of a key some tier holds touches it
 * there and moves nothing); no tier holds more than its capacity; counts are exact. Plain
 * value specs; kv_tiers_t is owned by its creator (kv_tiers_free). */
#ifndef TWIN_KV_TIER_H
#define TWIN_KV_TIER_H

#include <stddef.h>
#include <stdint.h>

enum { KV_TIER_MAX = 4 };

typedef struct {
    char kind[8];            /* "dram", "ssd" or "pool" */
    int64_t capacity_blocks; /* > 0 */
    double read_bps;         /* bytes/s a device reads back from it (> 0) */
    double write_bps;        /* bytes/s a device writes to it (> 0) */
    double latency_s;        /* per reload (>= 0) */
    int overlap;             /* 1: a reload overlaps the step's compute, layer by layer */
} kv_tier_spec_t;

typedef struct {
    int64_t held;            /* keys in the tier now */
    int64_t writes;          /* blocks written to it (from above) */
    int64_t hits;            /* blocks reloaded from it */
    int64_t evictions;       /* keys it pushed down (or dropped, the last tier) */
} kv_tier_stats_t;

typedef struct kv_tiers kv_tiers_t;

/* NULL when out of memory or a spec is invalid (kv_tier_check says why). */
kv_tiers_t *kv_tiers_new(const kv_tier_spec_t *specs, int n);
void kv_tiers_free(kv_tiers_t *t);
/* 0, or -1 with the reason (naming the tier by its kind and place) in err. */
int kv_tier_check(const kv_tier_spec_t *specs, int n, char *err, size_t errlen);
int kv_tiers_count(const kv_tiers_t *t);
const kv_tier_spec_t *kv_tiers_spec(const kv_tiers_t *t, int tier);
const kv_tier_stats_t *kv_tiers_stats(const kv_tiers_t *t, int tier);

/* A block with this key left HBM: written to tier 0 (see above). */
void kv_tiers_put(kv_tiers_t *t, uint64_t key);
/* The tier that holds key, or -1. Pure. */
int kv_tiers_find(const kv_tiers_t *t, uint64_t key);
/* The key was reloaded from its tier: counted, and touched there. */
void kv_tiers_hit(kv_tiers_t *t, int tier, uint64_t key);

/* Parses "KIND:SIZE[:key=value,...]" (dram:256GB, ssd:2TB:read=6GB/s,lat=100us, pool:10TB)
 * into spec with the kind's defaults (kv_tier.c cites them) and capacity in blocks of
 * block_bytes bytes (what one block of every layer takes on one device). 0, or -1 with a
 * message naming the item. */
int kv_tier_parse(const char *text, double block_bytes, kv_tier_spec_t *spec, char *err,
                  size_t errlen);

/* Seconds to reload n[t] blocks of block_bytes from each tier t (latency once per tier
 * with a reload, then the bytes at its read bandwidth), split into what overlaps the
 * step's compute (*overlap_s) and what delays it (*serial_s). */
void kv_tier_reload_s(const kv_tiers_t *t, const int32_t *n, double block_bytes,
                      double *overlap_s, double *serial_s);

#endif

/* sched_internal: the scheduler core's private state, shared by sched.c (the cycle, plan
 * building, queries) and sched_transfer.c (prefill/decode hand-offs). Not a public
 * interface: executors and policies use sched.h only.
 *
 * Invariants: those of sched.h; besides, every live request (not final) is in exactly one
 * of waiting, running or transit, and in the id map; a final one leaves all three at the
 * next compaction (or at once when it never joined a list) and its slot is recycled.
 *
 * Ownership: struct sched owns the pool, the map, the lists and the KV manager. */
#ifndef TWIN_SCHED_INTERNAL_H
#define TWIN_SCHED_INTERNAL_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#include "policies/kv.h"
#include "policies/prefix.h"
#include "traces/rng.h"
#include "policies/sched.h"

enum { POOL_CHUNK = 1024 };

/* Private part of a request; the public view comes first so the two convert freely. */
typedef struct slot {
    sched_req_t pub;
    int32_t *blocks;
    int32_t blocks_cap;
    uint8_t in_plan;     /* scheduled in the plan being built */
    uint8_t leaving;     /* reached a final state in this step or commit: remove + recycle */
    uint8_t preempted_now;
    uint8_t admitted_now; /* moved from the queue into this step's plan */
    uint8_t handoff;      /* prefill only: handed off after its first token */
    prefix_t *prefix;     /* prompt block hashes, only with prefix caching (kept out of
                           * line: the per-step loops touch every slot) */
    struct slot *next_free;
} slot_t;

typedef struct chunk {
    struct chunk *next;
    slot_t slots[POOL_CHUNK];
} chunk_t;

typedef struct {
    slot_t **v;
    int32_t head, n, cap; /* items v[head .. head+n-1] */
} queue_t;

struct sched {
    sched_config_t cfg;
    sched_policy_t policy;
    sched_sink_fn sink;
    void *sink_ud;
    kv_t *kv;
    struct kv_tiers *tiers;    /* below HBM (sched_set_tiers; not owned), NULL: none */
    int8_t *tier_of;           /* scratch for a tier match, [tier_cap] */
    uint64_t *tier_keys;
    int32_t *tier_ids;
    int32_t tier_cap;
    rng_t rng;
    char err[8192]; /* policy errors carry a Lua traceback */

    chunk_t *chunks;
    slot_t *free_slots;
    /* id -> slot, linear probing with backward-shift deletion; cap is a power of two */
    slot_t **map;
    int32_t map_cap, map_n;

    queue_t waiting;
    queue_t running;
    queue_t transit;      /* SCHED_TRANSFER: handed off (prefill) or reserved (decode) */
    sched_handoff_fn handoff_fn;
    void *handoff_ud;
    int32_t reserved;     /* transit members reserved here (decode side): they count as
                           * running sequences, so that max_seqs holds when they arrive */

    sched_entry_t *entries;
    sched_pad_t *pads;
    int32_t entries_cap, pads_cap;
    sched_plan_t plan;
    int64_t steps;
    int in_step;          /* inside the schedule hook: plan calls allowed */
    int need_compact;     /* waiting/running contain slots that must move */
    int stalled;
    int64_t total_preemptions;
    int32_t num_unfinished;
    int32_t wait_out;     /* queue members that left the queue since the last compaction */
    int32_t admitted;     /* requests admitted in the plan being built */
    slot_t **scratch;     /* preempted slots during compaction */
    int32_t scratch_cap;
    slot_t **gone;        /* rejected from the queue during a plan: out of the waiting view
                           * at once, recycled at the next compaction (the policy may still
                           * read them in the same call) */
    int32_t n_gone, gone_cap;
    /* sched_cost.c: the executor's estimate, and the recent steps for the fit */
    sched_cost_fn cost_fn;
    void *cost_ud;
    double step_now;      /* the now of the last sched_step that planned work */
    double last_step_s;
    double rec_prefill[SCHED_COST_WINDOW], rec_decode[SCHED_COST_WINDOW];
    double rec_dur[SCHED_COST_WINDOW];
    int32_t rec_n, rec_head;
    sched_shape_t *est_seqs;  /* scratch for sched_estimate_plan */
    int32_t est_cap;

    sched_view_t view;
};

/* the request store (sched_store.c), shared by sched.c and sched_transfer.c */
int sched_queue_reserve(queue_t *q, int32_t need_front, int32_t need_back);
int sched_queue_push_back(queue_t *q, slot_t *x);
slot_t *sched_queue_at(const queue_t *q, int32_t i);
slot_t *sched_map_get(const sched_t *s, int32_t id);
int sched_map_put(sched_t *s, slot_t *x);
int sched_map_grow(sched_t *s);            /* doubles the map (1024 at first); -1: no memory */
slot_t *sched_slot_get(sched_t *s);     /* NULL when out of memory */
void sched_slot_put(sched_t *s, slot_t *x); /* forgets the id and recycles the slot */
void sched_view_sync(sched_t *s);
/* Applies the pending list moves now (final requests leave, and are recycled): for calls
 * outside a step that end requests (sched_finish_early). */
void sched_compact(sched_t *s);
/* sched_cost.c: a committed step's work and duration, for the fit */
void sched_cost_observe(sched_t *s, double prefill, double decode, double dur);

/* A request reached a final state: its KV freed, reported once through the sink. */
void sched_finalize(sched_t *s, slot_t *x, int32_t state, const char *reason);
int sched_grow(void **v, int32_t *cap, int32_t need, size_t size);

/* Blocks a sequence of n tokens holds (sched.h: window_tokens); kv_blocks_for without a
 * window. */
static inline int32_t sched_blocks_for(const sched_t *s, int64_t n) {
    const int32_t bs = s->cfg.block_size;
    if (n <= 0) return 0;
    int64_t nb = (n + bs - 1) / bs;
    if (s->cfg.window_tokens > 0 && s->cfg.window_share > 0) {
        int64_t past = nb - ((int64_t)s->cfg.window_tokens + bs - 1) / bs - 1;
        if (past > 0) nb -= (int64_t)floor(s->cfg.window_share * (double)past);
    }
    return nb > INT32_MAX ? INT32_MAX : (int32_t)nb;
}

#endif

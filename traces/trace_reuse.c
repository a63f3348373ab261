/* trace_reuse: see trace_reuse.h. An open-addressing set of int64 ids (linear probing,
 * grown at half full); INT64_MIN marks an empty slot and is kept aside when it is an id. */
#include "traces/trace_reuse.h"

#include <stdlib.h>

#define EMPTY INT64_MIN

struct trace_reuse {
    int64_t *slot;
    size_t cap, used;             /* cap: a power of two */
    int has_min;                  /* INT64_MIN was added */
    trace_reuse_stats_t st;
};

static size_t slot_of(int64_t id, size_t cap) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}

static int seen(const trace_reuse_t *u, int64_t id) {
    if (id == EMPTY) return u->has_min;
    for (size_t i = slot_of(id, u->cap);; i = (i + 1) & (u->cap - 1)) {
        if (u->slot[i] == id) return 1;
        if (u->slot[i] == EMPTY) return 0;
    }
}

static int grow(trace_reuse_t *u) {
    size_t cap = u->cap * 2;
    int64_t *s = malloc(cap * sizeof *s);
    if (!s) return -1;
    for (size_t i = 0; i < cap; i++) s[i] = EMPTY;
    for (size_t i = 0; i < u->cap; i++) {
        if (u->slot[i] == EMPTY) continue;
        size_t j = slot_of(u->slot[i], cap);
        while (s[j] != EMPTY) j = (j + 1) & (cap - 1);
        s[j] = u->slot[i];
    }
    free(u->slot);
    u->slot = s;
    u->cap = cap;
    return 0;
}

/* 0, or -1 when out of memory. */
static int insert(trace_reuse_t *u, int64_t id) {
    if (id == EMPTY) {
        u->has_min = 1;
        return 0;
    }
    if (2 * (u->used + 1) > u->cap && grow(u) != 0) return -1;
    size_t i = slot_of(id, u->cap);
    for (; u->slot[i] != EMPTY; i = (i + 1) & (u->cap - 1))
        if (u->slot[i] == id) return 0;
    u->slot[i] = id;
    u->used++;
    return 0;
}

trace_reuse_t *trace_reuse_new(void) {
    trace_reuse_t *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->cap = 1024;
    u->slot = malloc(u->cap * sizeof *u->slot);
    if (!u->slot) {
        free(u);
        return NULL;
    }
    for (size_t i = 0; i < u->cap; i++) u->slot[i] = EMPTY;
    return u;
}

int trace_reuse_add(trace_reuse_t *u, const trace_req_t *r) {
    int32_t k = 0;
    while (k < r->n_hash && seen(u, r->hash_ids[k])) k++;
    for (int32_t i = k; i < r->n_hash; i++)
        if (insert(u, r->hash_ids[i]) != 0) return -1;
    int64_t tokens = (int64_t)k * (r->hash_block > 0 ? r->hash_block : 0);
    u->st.requests++;
    u->st.hashed_requests += r->n_hash > 0;
    u->st.blocks += r->n_hash;
    u->st.reused_blocks += k;
    u->st.prompt_tokens += r->prompt_tokens;
    u->st.reused_tokens += tokens < r->prompt_tokens ? tokens : r->prompt_tokens;
    return 0;
}

void trace_reuse_stats(const trace_reuse_t *u, trace_reuse_stats_t *out) { *out = u->st; }

void trace_reuse_free(trace_reuse_t *u) {
    if (!u) return;
    free(u->slot);
    free(u);
}

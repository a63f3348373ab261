/* sched_store: the scheduler's request store (sched_internal.h): the queues of slot
 * pointers, the open-addressing id map, and the chunked slot pool whose slots never move
 * (policies hold views into them). Split from sched.c, which decides; this file only
 * keeps. */
#include <stdlib.h>
#include <string.h>

#include "policies/sched_internal.h"

/* ------------------------------------------------------------------ queues */

int sched_queue_reserve(queue_t *q, int32_t need_front, int32_t need_back) {
    if (q->head >= need_front && q->head + q->n + need_back <= q->cap) return 0;
    /* Slack at the front too: preemptions prepend, and every step reserves room for them. */
    int32_t front = need_front + need_front / 2 + 16;
    int32_t cap = q->n + front + need_back + q->n / 2 + 16;
    slot_t **v = malloc(sizeof *v * (size_t)cap);
    if (!v) return -1;
    if (q->n) memcpy(v + front, q->v + q->head, sizeof *v * (size_t)q->n);
    free(q->v);
    q->v = v;
    q->head = front;
    q->cap = cap;
    return 0;
}

int sched_queue_push_back(queue_t *q, slot_t *x) {
    if (sched_queue_reserve(q, 0, 1)) return -1;
    q->v[q->head + q->n++] = x;
    return 0;
}

slot_t *sched_queue_at(const queue_t *q, int32_t i) { return q->v[q->head + i]; }

/* ------------------------------------------------------------------ id map */

static uint32_t map_hash(int32_t id) { return (uint32_t)id * 2654435761u; }

int sched_map_grow(sched_t *s) {
    int32_t cap = s->map_cap ? s->map_cap * 2 : 1024;
    slot_t **m = calloc((size_t)cap, sizeof *m);
    if (!m) return -1;
    for (int32_t i = 0; i < s->map_cap; i++) {
        slot_t *x = s->map[i];
        if (!x) continue;
        uint32_t h = map_hash(x->pub.id) & (uint32_t)(cap - 1);
        while (m[h]) h = (h + 1) & (uint32_t)(cap - 1);
        m[h] = x;
    }
    free(s->map);
    s->map = m;
    s->map_cap = cap;
    return 0;
}

slot_t *sched_map_get(const sched_t *s, int32_t id) {
    if (!s->map_cap) return NULL;
    uint32_t mask = (uint32_t)s->map_cap - 1, h = map_hash(id) & mask;
    for (slot_t *x; (x = s->map[h]); h = (h + 1) & mask)
        if (x->pub.id == id) return x;
    return NULL;
}

int sched_map_put(sched_t *s, slot_t *x) {
    if ((s->map_n + 1) * 2 > s->map_cap && sched_map_grow(s)) return -1;
    uint32_t mask = (uint32_t)s->map_cap - 1, h = map_hash(x->pub.id) & mask;
    while (s->map[h]) h = (h + 1) & mask;
    s->map[h] = x;
    s->map_n++;
    return 0;
}

static void map_del(sched_t *s, int32_t id) {
    uint32_t mask = (uint32_t)s->map_cap - 1, h = map_hash(id) & mask;
    while (s->map[h] && s->map[h]->pub.id != id) h = (h + 1) & mask;
    if (!s->map[h]) return;
    s->map[h] = NULL;
    s->map_n--;
    /* Backward shift: move later members of the probe run into the hole when their home
     * position allows it, so lookups never stop early at a false empty slot. */
    for (uint32_t j = (h + 1) & mask; s->map[j]; j = (j + 1) & mask) {
        uint32_t home = map_hash(s->map[j]->pub.id) & mask;
        if (((j - home) & mask) >= ((j - h) & mask)) {
            s->map[h] = s->map[j];
            s->map[j] = NULL;
            h = j;
        }
    }
}

/* ------------------------------------------------------------------ pool */

slot_t *sched_slot_get(sched_t *s) {
    if (!s->free_slots) {
        chunk_t *c = calloc(1, sizeof *c);
        if (!c) return NULL;
        c->next = s->chunks;
        s->chunks = c;
        for (int i = POOL_CHUNK - 1; i >= 0; i--) {
            c->slots[i].next_free = s->free_slots;
            s->free_slots = &c->slots[i];
        }
    }
    slot_t *x = s->free_slots;
    s->free_slots = x->next_free;
    int32_t *blocks = x->blocks, cap = x->blocks_cap; /* keep the block table allocation */
    memset(x, 0, sizeof *x);
    x->blocks = blocks;
    x->blocks_cap = cap;
    return x;
}

void sched_slot_put(sched_t *s, slot_t *x) {
    map_del(s, x->pub.id);
    if (x->prefix) prefix_clear(x->prefix);
    free(x->prefix);
    x->prefix = NULL;
    x->next_free = s->free_slots;
    s->free_slots = x;
}

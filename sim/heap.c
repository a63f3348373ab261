/* sim_heap: see heap.h. */
#include "sim/heap.h"

#include <stdlib.h>

static int before(const sim_event_t *a, const sim_event_t *b) {
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

int sim_heap_push(sim_heap_t *h, sim_event_t ev) {
    if (h->n == h->cap) {
        int32_t cap = h->cap ? h->cap * 2 : 64;
        sim_event_t *v = realloc(h->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    ev.seq = h->next_seq++;
    int32_t i = h->n++;
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!before(&ev, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = ev;
    return 0;
}

int sim_heap_pop(sim_heap_t *h, sim_event_t *out) {
    if (h->n == 0) return 0;
    *out = h->v[0];
    sim_event_t last = h->v[--h->n];
    int32_t i = 0;
    for (;;) {
        int32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && before(&h->v[c + 1], &h->v[c])) c++;
        if (!before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) h->v[i] = last;
    return 1;
}

const sim_event_t *sim_heap_peek(const sim_heap_t *h) { return h->n ? &h->v[0] : NULL; }

void sim_heap_free(sim_heap_t *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

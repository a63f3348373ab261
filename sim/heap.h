/* sim_heap: the simulator's event queue, a binary min-heap ordered by (time, insertion
 * sequence), so events at equal times come out in the order they were pushed and runs are
 * reproducible. Owned by its user (sim_heap_free); events are plain values. */
#ifndef TWIN_SIM_HEAP_H
#define TWIN_SIM_HEAP_H

#include <stdint.h>

/* SIM_EV_TRANSFER: a KV transfer ends (arg: the request id; sim_disagg.c) */
typedef enum {
    SIM_EV_ARRIVAL = 0, SIM_EV_STEP_DONE = 1, SIM_EV_WAKE = 2, SIM_EV_TRANSFER = 3,
    SIM_EV_TIMEOUT = 4   /* a client gives up (arg: the request id; sim_serving.c) */
} sim_event_type_t;

typedef struct {
    double t;
    uint64_t seq;      /* set by sim_heap_push */
    int32_t type;      /* sim_event_type_t */
    int32_t replica;
    int64_t arg;
} sim_event_t;

typedef struct {
    sim_event_t *v;
    int32_t n, cap;
    uint64_t next_seq;
} sim_heap_t;

int sim_heap_push(sim_heap_t *h, sim_event_t ev); /* 0, or -1 when out of memory */
int sim_heap_pop(sim_heap_t *h, sim_event_t *out); /* 1, or 0 when empty */
const sim_event_t *sim_heap_peek(const sim_heap_t *h); /* NULL when empty */
void sim_heap_free(sim_heap_t *h);

#endif

/* sched_transfer: the scheduler core's prefill/decode hand-offs (sched.h, the
 * disaggregation invariants): the prefill side's release, the decode side's reservation
 * and arrival. A request in transit is on the transit list, in no queue a policy sees. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched_internal.h"

void sched_set_handoff(sched_t *s, sched_handoff_fn fn, void *ud) {
    s->handoff_fn = fn;
    s->handoff_ud = ud;
}

int32_t sched_num_transit(const sched_t *s) { return s->transit.n; }

/* The transit member with this id: its index, or -1 (a short list: the back-pressure
 * bounds it). */
static int32_t transit_index(const sched_t *s, int32_t id) {
    for (int32_t i = 0; i < s->transit.n; i++)
        if (sched_queue_at(&s->transit, i)->pub.id == id) return i;
    return -1;
}

static slot_t *transit_take(sched_t *s, int32_t id, const char *what) {
    int32_t i = transit_index(s, id);
    if (i < 0) {
        sched_set_error(s, "%s: request %d is not in transit here", what, id);
        return NULL;
    }
    slot_t *x = sched_queue_at(&s->transit, i);
    slot_t **v = s->transit.v + s->transit.head;
    memmove(v + i, v + i + 1, sizeof *v * (size_t)(s->transit.n - i - 1));
    s->transit.n--;
    return x;
}

int sched_add_transfer(sched_t *s, const sched_req_t *from, double now) {
    s->view.now = now;
    char why[200];
    if (from->state != SCHED_TRANSFER) {
        sched_set_error(s, "transfer of request %d, which is %s (not handed off)", from->id,
                        sched_state_name(from->state));
        return -1;
    }
    if (sched_map_get(s, from->id)) {
        sched_set_error(s, "duplicate request id %d", from->id);
        return -1;
    }
    if (!sched_can_ever_hold(s, from->prompt_tokens, from->true_output_tokens, why,
                             sizeof why)) {
        sched_set_error(s, "transfer of request %d: it can never run here: %s", from->id, why);
        return -1;
    }
    /* the blocks the prefill side holds after its commit: the computed tokens and the
     * first sampled one, whose K/V the first decode step computes */
    int32_t want = sched_blocks_for(s, (int64_t)from->computed + 1);
    if (want > kv_num_free(s->kv) - s->view.watermark_blocks ||
        sched_running_seqs(s) >= s->cfg.max_seqs)
        return 1;
    slot_t *x = NULL;
    if (sched_queue_reserve(&s->transit, 0, 1) || sched_queue_reserve(&s->running, 0, 1) ||
        !(x = sched_slot_get(s)))
        goto oom;
    x->pub = *from;
    x->pub.num_blocks = 0;
    x->pub.scheduled = x->pub.spec = 0;
    if (sched_map_put(s, x)) {
        x->next_free = s->free_slots;
        s->free_slots = x;
        goto oom;
    }
    /* blocks it computes here are keyed by its id, as any request's (no prompt hashes:
     * the prompt's blocks arrive computed) */
    if (sched_grow((void **)&x->blocks, &x->blocks_cap, want, sizeof(int32_t)) ||
        (s->cfg.prefix_caching &&
         (!(x->prefix = calloc(1, sizeof *x->prefix)) ||
          prefix_set(x->prefix, from->id, NULL, 0, 0, from->prompt_tokens,
                     s->cfg.block_size) != 0))) {
        sched_slot_put(s, x);
        goto oom;
    }
    kv_alloc(s->kv, want, x->blocks); /* checked free above */
    x->pub.num_blocks = want;
    s->transit.v[s->transit.head + s->transit.n++] = x; /* reserved above */
    s->num_unfinished++;
    s->reserved++;
    sched_view_sync(s);
    return 0;
oom:
    sched_set_error(s, "out of memory reserving request %d", from->id);
    return -1;
}

int sched_transfer_done(sched_t *s, int32_t id, double now) {
    s->view.now = now;
    slot_t *x = transit_take(s, id, "transfer done");
    if (!x) return -1;
    x->pub.state = SCHED_RUNNING;
    s->reserved--;
    /* sched_add_transfer reserved room in the running list; a step since may have used it */
    if (sched_queue_push_back(&s->running, x)) {
        sched_finalize(s, x, SCHED_ABORTED, "out of memory joining the running list");
        sched_slot_put(s, x);
        sched_view_sync(s);
        sched_set_error(s, "out of memory admitting transferred request %d", id);
        return -1;
    }
    sched_view_sync(s);
    return 0;
}

int sched_release(sched_t *s, int32_t id) {
    slot_t *x = transit_take(s, id, "release");
    if (!x) return -1;
    if (x->pub.num_blocks) kv_release(s->kv, x->blocks, x->pub.num_blocks);
    x->pub.num_blocks = 0;
    s->num_unfinished--;
    sched_slot_put(s, x);
    sched_view_sync(s);
    return 0;
}

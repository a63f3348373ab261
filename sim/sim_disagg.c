/* sim_disagg: prefill/decode disaggregation in the simulator (docs/cluster.md). A request
 * is added to its prefill replica with hand-off set (replay_add_prefill); the commit that
 * emits its first token hands it off (sched.h), and after that commit it is reserved on
 * its decode replica (sched_add_transfer) or, when that replica has no room, queued
 * behind the hand-offs already waiting for it (FIFO per decode replica: back-pressure,
 * retried after each of that replica's steps). A reserved request's KV then crosses its
 * link: link latency + KV bytes / bandwidth, after the transfers queued on the same link
 * (FIFO). When it lands, the decode replica runs it and the prefill replica frees it.
 *
 * Invariants: a request's KV is held by its prefill replica from its admission until its
 * transfer ends, and by its decode replica from the reservation on; neither ever holds
 * more blocks than it has (the core refuses). Exactly one replica writes its row: the
 * decode replica once it is reserved there (the prefill side's copy is released when the
 * transfer lands, or by sim_disagg_abort when the run fails), else the prefill replica. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

static void on_handoff(void *ud, const sched_req_t *r) {
    sim_t *m = ud;
    if (m->n_handed == m->handed_cap) {
        int32_t cap = m->handed_cap ? m->handed_cap * 2 : 64;
        int32_t *v = realloc(m->handed, sizeof *v * (size_t)cap);
        if (!v) {
            sim_fail(m, "out of memory (hand-offs)");
            return;
        }
        m->handed = v;
        m->handed_cap = cap;
    }
    m->handed[m->n_handed++] = r->id;
    m->pd[r->id].held = r; /* routed here, so pd covers the id */
}

int sim_disagg_setup(sim_t *m) {
    m->disagg = m->cluster.disaggregated;
    if (!m->disagg) return 0;
    int32_t n = m->cluster.link_shared ? 1 : m->n_reps * m->n_reps;
    if (!(m->link_free = calloc((size_t)n, sizeof *m->link_free)))
        return sim_fail(m, "out of memory (links)");
    for (int32_t i = 0; i < m->n_reps; i++)
        if (m->reps[i].spec.role == SIM_ROLE_PREFILL)
            sched_set_handoff(m->rp.reps[i].sched, on_handoff, m);
    m->has_route_decode = m->router && router_has_route_decode(m->router);
    return 0;
}

/* q's lengths as sched_add would take them on s (clipped, its limit applied). */
static void lengths(const sched_t *s, const trace_req_t *q, int64_t *prompt, int64_t *out) {
    const sched_config_t *cfg = sched_config(s);
    int32_t p = q->prompt_tokens, o = q->output_tokens;
    if (cfg->clip_to_context) sched_clip_lengths(&p, &o, cfg->max_model_len);
    int32_t cap = q->max_output_tokens > 0 ? q->max_output_tokens : cfg->max_output_tokens;
    *prompt = p;
    *out = cap > 0 && o > cap ? cap : o;
}

int sim_disagg_fits(sim_t *m, const trace_req_t *q, int32_t decode, char *why, size_t len) {
    for (int32_t i = 0; i < m->n_reps; i++) {
        if (m->reps[i].spec.role != SIM_ROLE_DECODE || (decode >= 0 && i != decode)) continue;
        int64_t p, o;
        lengths(m->scheds[i], q, &p, &o);
        if (o < 1 || sched_can_ever_hold(m->scheds[i], p, o, why, len)) return 1;
    }
    return 0;
}

static sim_pd_t *pd_of(sim_t *m, int32_t id) {
    if (id >= m->pd_cap) {
        int64_t cap = m->pd_cap ? m->pd_cap : 1024;
        while (cap <= id) cap *= 2;
        sim_pd_t *v = realloc(m->pd, sizeof *v * (size_t)cap);
        if (!v) return NULL;
        memset(v + m->pd_cap, 0, sizeof *v * (size_t)(cap - m->pd_cap));
        m->pd = v;
        m->pd_cap = cap;
    }
    return &m->pd[id];
}

int sim_disagg_routed(sim_t *m, const trace_req_t *q, int32_t prefill, int32_t decode) {
    sim_pd_t *x = pd_of(m, q->id);
    if (!x) return sim_fail(m, "out of memory (disaggregation)");
    *x = (sim_pd_t){ .prefill = prefill, .decode = decode, .stage = SIM_PD_ROUTED,
                     .prompt = q->prompt_tokens };
    m->reps[decode].incoming += x->prompt;
    m->reps[decode].dirty = 1;
    return 0;
}

/* The request no longer weighs on its decode replica's incoming load (landed or ended). */
static void uncount(sim_t *m, sim_pd_t *x) {
    m->reps[x->decode].incoming -= x->prompt;
    m->reps[x->decode].dirty = 1;
    x->prompt = 0;
}

/* Reserves id on its decode replica and starts its transfer: 0, 1 no room, -1 failed. */
static int start(sim_t *m, int32_t id, double now) {
    sim_pd_t *x = &m->pd[id];
    sched_t *dec = m->scheds[x->decode];
    const sched_req_t *from = x->held;
    if (!from) return sim_fail(m, "request %d is not held by prefill replica %d", id, x->prefill);
    int rc = sched_add_transfer(dec, from, now);
    if (rc < 0) return sim_fail(m, "decode replica %d: %s", x->decode, sched_errmsg(dec));
    if (rc == 1) return 1;
    const sim_cluster_t *c = &m->cluster;
    double *link = &m->link_free[c->link_shared ? 0 : x->prefill * m->n_reps + x->decode];
    /* the K/V of the computed tokens (the prompt; the first token's are computed by the
     * decode replica's first step), as the prefill replica's model lays them out */
    double bytes = (double)from->computed * preset_model_kv_bytes_per_token(&m->reps[x->prefill].model);
    x->end_s = fmax(now, *link) + c->link_latency_s + bytes / c->link_bandwidth;
    *link = x->end_s;
    x->stage = SIM_PD_MOVING;
    m->reps[x->decode].dirty = 1; /* its free blocks changed */
    if (sim_heap_push(&m->heap, (sim_event_t){ .t = x->end_s, .type = SIM_EV_TRANSFER,
                                               .arg = id }))
        return sim_fail(m, "out of memory (event heap)");
    return 0;
}

static int pend(sim_t *m, int32_t id) {
    if (m->n_pending == m->pending_cap) {
        int32_t cap = m->pending_cap ? m->pending_cap * 2 : 64;
        int32_t *v = realloc(m->pending, sizeof *v * (size_t)cap);
        if (!v) return sim_fail(m, "out of memory (hand-offs)");
        m->pending = v;
        m->pending_cap = cap;
    }
    m->pending[m->n_pending++] = id;
    m->pd[id].stage = SIM_PD_PENDING;
    return 0;
}

/* The hand-offs waiting for decode replica d, in order, until one finds no room. */
static int drain(sim_t *m, int32_t d, double now) {
    int32_t w = 0, blocked = 0;
    for (int32_t i = 0; i < m->n_pending; i++) {
        int32_t id = m->pending[i];
        if (m->pd[id].decode == d && !blocked) {
            int rc = start(m, id, now);
            if (rc < 0) return -1;
            if (rc == 0) continue;
            blocked = 1;
        }
        m->pending[w++] = id;
    }
    m->n_pending = w;
    return 0;
}

static int waits_for(const sim_t *m, int32_t d) {
    for (int32_t i = 0; i < m->n_pending; i++)
        if (m->pd[m->pending[i]].decode == d) return 1;
    return 0;
}

int sim_disagg_after_commit(sim_t *m, int32_t r, double now) {
    if (!m->disagg) return 0;
    if (m->rp.failed) return -1;
    for (int32_t k = 0; k < m->n_handed; k++) {
        int32_t id = m->handed[k];
        sim_pd_t *x = &m->pd[id];
        x->handoff_s = now;
        int rc = waits_for(m, x->decode) ? 1 : start(m, id, now);
        if (rc < 0 || (rc == 1 && pend(m, id))) return -1;
    }
    m->n_handed = 0;
    return m->reps[r].spec.role == SIM_ROLE_DECODE ? drain(m, r, now) : 0;
}

int sim_disagg_transfer_done(sim_t *m, int32_t id, double now) {
    sim_pd_t *x = &m->pd[id];
    sched_t *dec = m->scheds[x->decode], *pre = m->scheds[x->prefill];
    if (sched_transfer_done(dec, id, now) != 0)
        return sim_fail(m, "decode replica %d: %s", x->decode, sched_errmsg(dec));
    if (sched_release(pre, id) != 0)
        return sim_fail(m, "prefill replica %d: %s", x->prefill, sched_errmsg(pre));
    x->stage = SIM_PD_LANDED;
    x->held = NULL;
    uncount(m, x);
    sim_poke(m, x->decode);
    sim_poke(m, x->prefill);
    return 0;
}

void sim_disagg_row(sim_t *m, const sched_req_t *q, rec_request_t *row) {
    if (!m->disagg || q->id >= m->pd_cap || m->pd[q->id].stage == SIM_PD_NONE) return;
    sim_pd_t *x = &m->pd[q->id];
    if (x->prompt) uncount(m, x); /* ended before its KV landed */
    row->has_pd = 1;
    row->prefill_replica = x->prefill;
    /* from the hand-off to the landing: back-pressure, the link's queue, the transfer */
    row->kv_transfer_s = x->stage == SIM_PD_LANDED && row->replica == x->decode
                            ? x->end_s - x->handoff_s : -1;
}

void sim_disagg_abort(sim_t *m) {
    for (int64_t id = 0; m->disagg && id < m->pd_cap; id++)
        if (m->pd[id].stage == SIM_PD_MOVING) sched_release(m->scheds[m->pd[id].prefill], (int32_t)id);
}

void sim_disagg_free(sim_t *m) {
    free(m->pd);
    free(m->handed);
    free(m->pending);
    free(m->link_free);
}

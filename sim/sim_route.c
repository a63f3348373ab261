/* sim_route: routing arrivals over the simulated replicas (sim.h): one replica takes
 * everything; several without --router are served round robin (built in); with --router
 * the Lua router (policies/router.h) decides from a read-only view of the replicas, which
 * is refreshed only for replicas whose state changed since the last decision. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

void sim_poke(sim_t *m, int32_t i) {
    m->reps[i].dirty = 1;
    if (m->reps[i].poked) return;
    m->reps[i].poked = 1;
    m->poked[m->n_poked++] = i;
}

int sim_route_setup(sim_t *m) {
    const sim_opts_t *o = m->o;
    m->poked = calloc((size_t)m->n_reps, sizeof *m->poked);
    m->vrep = calloc((size_t)m->n_reps, sizeof *m->vrep);
    m->scheds = calloc((size_t)m->n_reps, sizeof *m->scheds);
    if (!m->poked || !m->vrep || !m->scheds) return sim_fail(m, "out of memory (router)");
    for (int32_t i = 0; i < m->n_reps; i++) {
        m->scheds[i] = m->rp.reps[i].sched;
        m->vrep[i].role = m->reps[i].spec.role;
        m->vrep[i].group = m->reps[i].spec.group_index;
        m->reps[i].dirty = 1;
    }
    m->view = (router_view_t){ .n = m->n_reps, .rep = m->vrep, .scheds = m->scheds };
    if (!m->router_path) return 0;
    /* the cluster file's set.KEY, then --set router.KEY=VALUE (the rest went to the
     * policies), so that the command line overrides the file */
    const sim_cluster_t *c = &m->cluster;
    const char **sets = calloc((size_t)(o->n_sets + c->n_router_sets) + 1, sizeof *sets);
    if (!sets) return sim_fail(m, "out of memory (router)");
    int n = 0;
    for (int i = 0; i < c->n_router_sets; i++) sets[n++] = c->router_sets[i];
    for (int i = 0; i < o->n_sets; i++)
        if (!strncmp(o->sets[i], "router.", 7)) sets[n++] = o->sets[i] + 7;
    lhost_limits_t lim;
    replay_limits(&m->rp, &o->limits, &lim);
    m->router = router_open(m->router_path, sets, n, &lim);
    free(sets);
    if (!m->router) return sim_fail(m, "out of memory loading the router");
    if (router_errmsg(m->router)) return sim_fail(m, "%s", router_errmsg(m->router));
    if (router_attach(m->router, &m->view, o->seed) != 0)
        return sim_fail(m, "%s", router_errmsg(m->router));
    return 0;
}

/* Replica i's load as the router sees it (router.h). */
static void refresh(sim_t *m, int32_t i) {
    const sched_view_t *v = sched_view(m->scheds[i]);
    router_replica_t *x = &m->vrep[i];
    double prompt = 0, decode = 0;
    for (int pass = 0; pass < 2; pass++) {
        const sched_req_t *const *list = pass ? v->running : v->waiting;
        int32_t n = pass ? v->n_running : v->n_waiting;
        for (int32_t k = 0; k < n; k++) {
            const sched_req_t *q = list[k];
            if (q->generated == 0) prompt += q->prompt_tokens - q->computed;
            else decode += q->prompt_tokens + q->generated;
        }
    }
    x->waiting = v->n_waiting;
    x->running = v->n_running;
    x->free_blocks = v->free_blocks;
    x->total_blocks = v->num_blocks;
    x->prompt_tokens = prompt;
    /* a decode replica's coming work too: routing happens at arrival, long before the
     * KV lands, and a burst would otherwise all look at the same idle replica */
    x->decode_tokens = decode + m->reps[i].incoming;
    m->reps[i].dirty = 0;
}

/* The request as policies would see it on arrival: its limit, not its true length (the
 * limit sched_add gives it on replica 0's configuration). */
static void request_view(const sim_t *m, const trace_req_t *q, sched_req_t *r) {
    const sched_config_t *cfg = sched_config(m->scheds[0]);
    int32_t cap = q->max_output_tokens > 0 ? q->max_output_tokens : cfg->max_output_tokens;
    int64_t left = (int64_t)cfg->max_model_len - q->prompt_tokens;
    int64_t limit = cap > 0 && cap < left ? cap : left;
    int32_t out = cap > 0 && q->output_tokens > cap ? cap : q->output_tokens;
    memset(r, 0, sizeof *r);
    r->id = q->id;
    r->state = SCHED_WAITING;
    r->arrival_s = q->arrival_s;
    r->prompt_tokens = q->prompt_tokens;
    r->output_tokens = cfg->oracle_lengths ? out : (int32_t)(limit < 0 ? 0 : limit);
    r->predicted_output_tokens = q->predicted_output_tokens > 0 ? q->predicted_output_tokens : -1;
    r->priority = q->priority;
    r->deadline = q->deadline_s > 0 ? q->deadline_s : -1;
    snprintf(r->tenant_name, sizeof r->tenant_name, "%s", q->tenant);
    r->first_scheduled_s = r->first_token_s = r->finish_s = -1;
}

/* The next replica of this role in index order after *rr (the built-in round robin). */
static int32_t next_of_role(sim_t *m, int64_t *rr, int32_t role) {
    for (;;) {
        int32_t i = (int32_t)((*rr)++ % m->n_reps);
        if (m->reps[i].spec.role == role) return i;
    }
}

/* Replica i must have this role: else the router's error, naming it and its function. */
static int check_role(sim_t *m, const trace_req_t *q, const char *fname, int32_t i,
                      int32_t role) {
    if (m->reps[i].spec.role == role) return 0;
    return sim_fail(m, "router %s: %s() for request %d returned replica %d, a %s replica: "
                    "%s() picks a %s replica (c:role(i))", router_path(m->router), fname,
                    q->id, (int)i + 1, sim_role_name(m->reps[i].spec.role), fname,
                    sim_role_name(role));
}

/* A disaggregated cluster: the prefill replica (*pick) and the decode replica, from the
 * router's route (a second value) or route_decode. 0 routed, 1 held, 2 rejected, -1. */
static int route_pd(sim_t *m, const trace_req_t *q, const sched_req_t *r, int32_t *pick) {
    char e[200], why[300];
    int32_t dec;
    if (!sim_disagg_fits(m, q, -1, e, sizeof e)) {
        snprintf(why, sizeof why, "no decode replica can ever hold it: %s", e);
        return replay_reject_unrouted(&m->rp, q, why) ? -1 : 2;
    }
    if (!m->router) {
        *pick = next_of_role(m, &m->rr, SIM_ROLE_PREFILL);
        dec = next_of_role(m, &m->rr_decode, SIM_ROLE_DECODE);
    } else {
        router_decision_t d;
        if (router_route(m->router, 0, r, &d) != 0)
            return sim_fail(m, "%s", router_errmsg(m->router));
        if (d.verdict == ROUTER_HOLD) return 1;
        if (d.verdict == ROUTER_REJECT) {
            snprintf(why, sizeof why, "router: %s", d.reason);
            return replay_reject_unrouted(&m->rp, q, why) ? -1 : 2;
        }
        *pick = d.replica;
        dec = d.decode;
        if (check_role(m, q, "route", *pick, SIM_ROLE_PREFILL)) return -1;
        const char *fname = "route";
        if (dec < 0) {
            if (!m->has_route_decode)
                return sim_fail(m, "router %s: route() for request %d gave no decode replica: "
                                "a disaggregated cluster needs one (return it as route's "
                                "second value, or define route_decode(c, r))",
                                router_path(m->router), q->id);
            fname = "route_decode";
            if (router_route(m->router, 1, r, &d) != 0)
                return sim_fail(m, "%s", router_errmsg(m->router));
            if (d.verdict != ROUTER_ROUTED)
                return sim_fail(m, "router %s: route_decode() for request %d did not return a "
                                "replica (it cannot hold or reject: route does)",
                                router_path(m->router), q->id);
            dec = d.replica;
        }
        if (check_role(m, q, fname, dec, SIM_ROLE_DECODE)) return -1;
    }
    if (!sim_disagg_fits(m, q, dec, e, sizeof e)) {
        snprintf(why, sizeof why, "decode replica %d can never hold it: %s", (int)dec, e);
        return replay_reject_unrouted(&m->rp, q, why) ? -1 : 2;
    }
    return sim_disagg_routed(m, q, *pick, dec);
}

/* 0 routed or rejected, 1 held, -1 failed. */
static int route_one(sim_t *m, const trace_req_t *q, double now) {
    int32_t pick = 0;
    if (m->disagg) {
        sched_req_t r;
        if (m->router) {
            for (int32_t i = 0; i < m->n_reps; i++)
                if (m->reps[i].dirty) refresh(m, i);
            m->view.now = now;
            m->view.n_held = m->n_held;
            router_view_request(&m->view, q->id, q->prompt_tokens, q->hash_ids, q->n_hash,
                                q->hash_block);
            request_view(m, q, &r);
        }
        int rc = route_pd(m, q, &r, &pick);
        if (rc != 0) return rc == 2 ? 0 : rc;
        m->hashed_requests += q->n_hash > 0;
        if (replay_add_prefill(&m->rp, pick, q, q->hash_block, now)) return -1;
        sim_poke(m, pick);
        return 0;
    }
    if (m->n_reps == 1) {
        pick = 0;
    } else if (!m->router) {
        pick = (int32_t)(m->rr++ % m->n_reps);
    } else {
        for (int32_t i = 0; i < m->n_reps; i++)
            if (m->reps[i].dirty) refresh(m, i);
        m->view.now = now;
        m->view.n_held = m->n_held;
        router_view_request(&m->view, q->id, q->prompt_tokens, q->hash_ids, q->n_hash,
                            q->hash_block);
        sched_req_t r;
        router_decision_t d;
        request_view(m, q, &r);
        if (router_route(m->router, 0, &r, &d) != 0)
            return sim_fail(m, "%s", router_errmsg(m->router));
        if (d.verdict == ROUTER_HOLD) return 1;
        if (d.verdict == ROUTER_REJECT) {
            char why[300];
            snprintf(why, sizeof why, "router: %s", d.reason);
            return replay_reject_unrouted(&m->rp, q, why);
        }
        pick = d.replica;
    }
    m->hashed_requests += q->n_hash > 0;
    if (sim_serving_deliver(m, pick, q, now)) return -1;
    sim_poke(m, pick);
    return 0;
}

static int hold(sim_t *m, const trace_req_t *q) {
    if (m->n_held == m->held_cap) {
        int32_t cap = m->held_cap ? m->held_cap * 2 : 64;
        sim_held_t *v = malloc(sizeof *v * (size_t)cap);
        if (!v) return sim_fail(m, "out of memory (held requests)");
        for (int32_t i = 0; i < m->n_held; i++) v[i] = m->held[(m->held_head + i) % m->held_cap];
        free(m->held);
        m->held = v;
        m->held_cap = cap;
        m->held_head = 0;
    }
    sim_held_t *h = &m->held[(m->held_head + m->n_held) % m->held_cap];
    h->q = *q;
    h->hash = NULL;
    if (q->n_hash > 0) {
        if (!(h->hash = malloc(sizeof *h->hash * (size_t)q->n_hash)))
            return sim_fail(m, "out of memory (held requests)");
        memcpy(h->hash, q->hash_ids, sizeof *h->hash * (size_t)q->n_hash);
    }
    h->q.hash_ids = h->hash;
    m->n_held++;
    return 0;
}

int sim_route_arrival(sim_t *m, const trace_req_t *q, double now) {
    /* requests already held go first: a new one may not overtake them */
    int rc = m->n_held > 0 ? 1 : route_one(m, q, now);
    return rc == 1 ? hold(m, q) : rc;
}

int sim_route_held(sim_t *m, double now) {
    while (m->n_held > 0) {
        sim_held_t *h = &m->held[m->held_head];
        int rc = route_one(m, &h->q, now);
        if (rc < 0) return -1;
        if (rc == 1) break;
        free(h->hash);
        m->held_head = (m->held_head + 1) % m->held_cap;
        m->n_held--;
    }
    return 0;
}

void sim_route_free(sim_t *m) {
    for (int32_t i = 0; i < m->n_held; i++) free(m->held[(m->held_head + i) % m->held_cap].hash);
    free(m->held);
    free(m->poked);
    free(m->vrep);
    free(m->scheds);
    router_view_free(&m->view);
    router_close(m->router);
}

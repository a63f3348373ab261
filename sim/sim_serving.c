/* sim_serving: the serving profile's parts of the simulator's event loop (sim.h, the serving
 * bullet; sim/serving.h has the terms): which profile a run gets, the async scheduler's
 * inbox, a step's wall time with the engine's CPU, and client timeouts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

/* The GPUs whose servers the vllm profile describes: the built-in GPU presets. */
static int is_gpu_preset(const char *hw) {
    return hw && (!strcmp(hw, "a100-80g") || !strcmp(hw, "h100") || !strcmp(hw, "h200"));
}

int sim_serving_pick(sim_t *m, const char *hw, const cost_file_t *cf) {
    char e[1024];
    if (m->o->serving_profile) {
        if (serving_validate(m->o->serving_profile, e, sizeof e) != 0)
            return sim_fail(m, "the serving profile %s: %s", m->o->serving_profile->name, e);
        m->serving = *m->o->serving_profile;
        return 0;
    }
    const char *name = m->o->serving;
    if (!name) {
        /* a cost file of one machine (the CPU engine's) or of inline roofline figures
         * describes no server; a GPU preset's runs are served by vLLM unless told */
        const char *fitted = cf && cf->hw_preset[0] ? cf->hw_preset : NULL;
        int gpu = cf ? cf->kind == COST_FILE_LINEAR && is_gpu_preset(fitted)
                     : is_gpu_preset(hw ? hw : SIM_DEFAULT_HW);
        name = gpu ? "vllm" : "none";
    }
    if (serving_get(name, &m->serving, e, sizeof e) != 0) return sim_fail(m, "--serving: %s", e);
    return 0;
}

static int async_on(const sim_t *m) {
    return m->serving.active && m->serving.async_scheduling && !m->disagg;
}

static int end_now(sim_t *m, int32_t rep, int32_t id, double now);

/* Request id's flags, grown as ids come (NULL when out of memory). */
static uint8_t *req_flags(sim_t *m, int64_t id) {
    if (id < 0) return NULL;
    if (id >= m->req_flags_cap) {
        int64_t cap = m->req_flags_cap ? m->req_flags_cap : 1024;
        while (cap <= id) cap *= 2;
        uint8_t *v = realloc(m->req_flags, (size_t)cap);
        if (!v) return NULL;
        memset(v + m->req_flags_cap, 0, (size_t)(cap - m->req_flags_cap));
        m->req_flags = v;
        m->req_flags_cap = cap;
    }
    return &m->req_flags[id];
}

int sim_serving_deliver(sim_t *m, int32_t i, const trace_req_t *q, double now) {
    sim_rep_t *r = &m->reps[i];
    if (m->o->client_timeout_s > 0) {
        uint8_t *f = req_flags(m, q->id);
        if (!f) return sim_fail(m, "out of memory (client timeouts)");
        *f |= SIM_REQ_DELIVERED;
        if (*f & SIM_REQ_GONE) {   /* its client gave up before the server handed it on */
            if (replay_add_at(&m->rp, i, q, q->hash_block, now)) return -1;
            return sched_find(m->rp.reps[i].sched, q->id) ? end_now(m, i, q->id, now) : 0;
        }
    }
    if (!async_on(m) || !r->busy) return replay_add_at(&m->rp, i, q, q->hash_block, now);
    if (r->n_inbox == r->inbox_cap) {
        int32_t cap = r->inbox_cap ? 2 * r->inbox_cap : 16;
        sim_held_t *v = realloc(r->inbox, sizeof *v * (size_t)cap);
        if (!v) return sim_fail(m, "out of memory (arrivals during a step)");
        r->inbox = v;
        r->inbox_cap = cap;
    }
    sim_held_t *h = &r->inbox[r->n_inbox];
    h->q = *q;
    h->hash = NULL;
    if (q->n_hash > 0) {
        if (!(h->hash = malloc(sizeof *h->hash * (size_t)q->n_hash)))
            return sim_fail(m, "out of memory (arrivals during a step)");
        memcpy(h->hash, q->hash_ids, sizeof *h->hash * (size_t)q->n_hash);
    }
    h->q.hash_ids = h->hash;
    r->n_inbox++;
    return 0;
}

int sim_serving_flush(sim_t *m, sim_rep_t *r, double now) {
    int rc = 0;
    for (int32_t k = 0; k < r->n_inbox; k++) {
        if (!rc && replay_add_at(&m->rp, r->index, &r->inbox[k].q, r->inbox[k].q.hash_block, now))
            rc = -1;
        free(r->inbox[k].hash);
    }
    r->n_inbox = 0;
    return rc;
}

void sim_serving_step_time(const sim_t *m, const sim_rep_t *r, const cost_features_t *f,
                           double pass, double *host_s, double *dur_s) {
    const serving_t *s = &m->serving;
    if (!s->active) {
        *host_s = cost_host_time(r->cost, f);
        *dur_s = pass;
        return;
    }
    double cpu = serving_cpu_time(s, (double)f->seqs, (double)f->tokens);
    if (s->async_scheduling) {
        /* the CPU prepared this step while the last one ran: the GPU waits only when the
         * CPU is the slower of the two */
        *host_s = 0;
        *dur_s = fmax(pass, cpu);
    } else {
        *host_s = cpu;
        *dur_s = pass;
    }
}

/* ------------------------------------------------------------------ client timeouts */

static int in_plan(const sim_rep_t *r, int32_t id) {
    if (!r->busy || !r->plan) return 0;
    for (int32_t i = 0; i < r->plan->n; i++)
        if (r->plan->entries[i].req_id == id) return 1;
    return 0;
}

static int end_now(sim_t *m, int32_t rep, int32_t id, double now) {
    char why[96];
    snprintf(why, sizeof why, "client timeout after %.4g s", m->o->client_timeout_s);
    int rc = sched_finish_early(m->rp.reps[rep].sched, id, SCHED_ABORTED, why, now);
    if (rc < 0) return sim_fail(m, "%s", sched_errmsg(m->rp.reps[rep].sched));
    sim_poke(m, rep);
    return 0;
}

int sim_serving_timeout(sim_t *m, int32_t id, double now) {
    for (int32_t i = 0; i < m->n_reps; i++) {
        sim_rep_t *r = &m->reps[i];
        for (int32_t k = 0; k < r->n_inbox; k++) {
            if (r->inbox[k].q.id != id) continue;
            /* never seen by the scheduler: it arrives and is ended at once */
            sim_held_t h = r->inbox[k];
            memmove(&r->inbox[k], &r->inbox[k + 1], sizeof *r->inbox * (size_t)(r->n_inbox - k - 1));
            r->n_inbox--;
            int rc = replay_add_at(&m->rp, i, &h.q, h.q.hash_block, now);
            free(h.hash);
            return rc ? -1 : end_now(m, i, id, now);
        }
        if (!sched_find(m->rp.reps[i].sched, id)) continue;
        if (!in_plan(r, id)) return end_now(m, i, id, now);
        /* in the step in flight: the server notices after it (vLLM aborts between steps) */
        if (r->n_timed_out == r->timed_out_cap) {
            int32_t cap = r->timed_out_cap ? 2 * r->timed_out_cap : 16;
            int32_t *v = realloc(r->timed_out, sizeof *v * (size_t)cap);
            if (!v) return sim_fail(m, "out of memory (client timeouts)");
            r->timed_out = v;
            r->timed_out_cap = cap;
        }
        r->timed_out[r->n_timed_out++] = id;
        return 0;
    }
    /* no replica has it: still in the front end or held by the router (ended when it
     * arrives), or finished (or rejected) before its client gave up */
    uint8_t *f = req_flags(m, id);
    if (!f) return sim_fail(m, "out of memory (client timeouts)");
    if (!(*f & SIM_REQ_DELIVERED)) *f |= SIM_REQ_GONE;
    return 0;
}

int sim_serving_after_commit(sim_t *m, sim_rep_t *r, double now) {
    int32_t n = r->n_timed_out;
    r->n_timed_out = 0;
    for (int32_t k = 0; k < n; k++)
        if (sched_find(m->rp.reps[r->index].sched, r->timed_out[k]) &&
            end_now(m, r->index, r->timed_out[k], now))
            return -1;
    return 0;
}

void sim_serving_free(sim_t *m) {
    for (int32_t i = 0; m->reps && i < m->n_reps; i++) {
        sim_rep_t *r = &m->reps[i];
        for (int32_t k = 0; k < r->n_inbox; k++) free(r->inbox[k].hash);
        free(r->inbox);
        free(r->timed_out);
    }
    free(m->req_flags);
}

/* ------------------------------------------------------------------ the band's width */

void sim_band_width(const sim_t *m, const sim_rep_t *r0, double *err, char *src, size_t srclen) {
    double c = r0->cf ? r0->cf->cv_median_err : NAN;
    double s = m->serving.active ? m->serving.step_cv_err : NAN;
    *err = NAN;
    src[0] = '\0';
    /* The serving profile's held-out error already holds its runs' cost models' error; a
     * cost model less sure of itself than those widens the band to its own. */
    if (isfinite(s) && s > 0 && !(isfinite(c) && c > s)) {
        *err = s;
        int n = snprintf(src, srclen, "the %.40s profile's held-out step error", m->serving.name);
        if (isfinite(c) && n > 0 && (size_t)n < srclen)
            snprintf(src + n, srclen - (size_t)n, " (the cost model's own: %.1f%%)", 100 * c);
    } else if (isfinite(c) && c > 0) {
        *err = c;
        snprintf(src, srclen, "the cost model's cross-validated median step error%s",
                 isfinite(s) ? ", above the serving profile's" : "");
    }
}

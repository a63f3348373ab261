/* sim: see sim.h. The event loop over the replicas and the run's records; one replica's
 * setup and costing are in replica.c, routing in sim_route.c (sim_internal.h). */
#include "sim/sim.h"

#include <math.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "policies/sched.h"
#include "sim/sim_internal.h"
#include "policies/kv_tier.h"
#include "traces/json.h"
#include "traces/recorder.h"

#define fail sim_fail
#define wall_now replay_wall

static void stop(sim_t *m) {
    m->stopped = 1;
    fail(m, "stopped by the caller after %lld steps", (long long)m->steps);
}

void sim_opts_defaults(sim_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->trace_opts.rate_scale = 1.0;
    o->hw = NULL;   /* a100-80g, or the hardware a cost file was fitted for */
    o->tp = 1;
    o->db_path = "twinserve.db";
    o->gpu_util = 0.9;
    o->watermark = 0.01;
    o->block_size = 16;
    o->max_tokens = 8192;
    o->max_seqs = 256;
    cost_roofline_defaults(&o->cost);
    o->client = (sim_client_t){ NAN, NAN, NAN };
    o->version = "dev";
    o->cost_scale = 1.0;
}

int32_t sim_kv_blocks(const preset_model_t *m, const preset_model_t *draft,
                      const preset_hw_t *hw, int32_t tp, int32_t dp, double gpu_util,
                      int32_t block_size, int32_t max_tokens, int32_t max_seqs, char *err,
                      size_t errlen) {
    const double ranks = dp > 1 ? dp : 1;
    double mem = hw->mem_bytes * tp * ranks * gpu_util;
    /* every rank holds all but the routed experts, which the ranks split */
    double whole = preset_model_weight_bytes(m);
    double experts = preset_model_all_expert_params(m) * preset_model_matrix_bytes(m);
    double weights = whole + (ranks - 1) * (whole - experts) +
                     (draft ? preset_model_weight_bytes(draft) : 0);
    /* Peak activations of the largest step (hidden states, QKV, MLP intermediates) plus
     * fp32 logits for every sequence, on each rank: what vLLM's profiling run would find,
     * roughly. */
    double act = ranks * ((double)max_tokens * (4.0 * m->d_model + 2.0 * m->d_ff) *
                          m->dtype_bytes + (double)max_seqs * m->vocab * 4.0);
    /* a token's KV over the tp devices: heads split (one replicated each past the KV heads),
     * MLA's latent whole on every device; a draft model runs on one device (its KV there) */
    double per_block = (double)block_size * (tp * preset_model_kv_bytes_device(m, tp) +
                                             (draft ? preset_model_kv_bytes_per_token(draft) : 0));
    double blocks = floor((mem - weights - act) / per_block);
    if (blocks < 1) {
        snprintf(err, errlen, "%s does not fit on %d x %s: weights %.1f GB + activations %.1f "
                 "GB exceed %.1f GB (memory x gpu_util %.2f); use a larger --tp or --hw",
                 m->name, (int)(tp * ranks), hw->name, weights / 1e9, act / 1e9, mem / 1e9, gpu_util);
        return -1;
    }
    return blocks > INT32_MAX ? INT32_MAX : (int32_t)blocks;
}

/* ------------------------------------------------------------------ records */

static void final_hook(void *ud, const sched_req_t *r, const char *reason) {
    sim_t *m = ud;
    if (m->o->on_final && !m->stopped && m->o->on_final(m->o->hook_ud, r, reason) != 0)
        stop(m);
}

/* ------------------------------------------------------------------ tokens */

/* The tokens the step emits at its end, `now` (sched_req_emit, as sched_commit counts):
 * in client mode each advances its request's stream (sim.h), and with save_tokens each gets
 * a tokens row at the time its side sees it. Entries whose request was aborted meanwhile
 * emit nothing. Called before the commit, while generated is the count before the step. */
static int emit_tokens(sim_t *m, const sim_rep_t *r, const sched_plan_t *p, double now) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        if (!e->sample || e->req->state != SCHED_RUNNING) continue;
        int32_t gen = e->req->generated;
        int32_t emit = sched_req_emit(e->req, r->draft_cost ? m->accepted[i] : 0);
        for (int32_t k = 0; k < emit; k++) {
            double t_s = now;
            if (m->client_on) { /* sent after the previous token, never before its step */
                double *c = &m->client_last[e->req_id];
                t_s = *c = fmax(now, *c) + m->client.token_s;
            }
            if (!m->o->save_tokens) continue;
            rec_token_t t = { .req_id = e->req_id, .idx = gen + k, .token_id = -1, .t_s = t_s };
            if (rec_token(m->rp.rec, m->rp.run_id, &t) != 0)
                return fail(m, "recording a token of request %d: %s", e->req_id,
                            rec_errmsg(m->rp.rec));
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ client side */

/* The client-side terms in effect: each option given, else the serving profile's (an
 * active one, with client metrics), else the cost file's, else 0; server metrics switch
 * them all off. */
static int pick_client(sim_t *m) {
    const sim_client_t *o = &m->o->client;
    const cost_file_t *cf = m->reps[0].cf; /* the front end is the cluster's */
    const serving_t *sv = &m->serving;
    int server = m->o->metrics == SIM_METRICS_SERVER;
    const struct { const char *key; double opt, file; double *out; } t[] = {
        { "client_request_s", o->request_s,
          sv->active ? sv->request_s : cf ? cf->client_request_s : 0, &m->client.request_s },
        { "client_prompt_token_s", o->prompt_token_s,
          sv->active ? sv->prompt_token_s : cf ? cf->client_prompt_token_s : 0,
          &m->client.prompt_token_s },
        { "client_token_s", o->token_s, sv->active ? sv->token_s : cf ? cf->client_token_s : 0,
          &m->client.token_s },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        double v = isnan(t[i].opt) ? t[i].file : t[i].opt;
        if (!isfinite(v) || v < 0)
            return fail(m, "%s must be a finite number of seconds >= 0 (got %g)", t[i].key, v);
        *t[i].out = server ? 0 : v;
    }
    m->client_on = m->client.request_s > 0 || m->client.prompt_token_s > 0 ||
                   m->client.token_s > 0;
    if (m->o->metrics == SIM_METRICS_CLIENT && !m->client_on)
        return fail(m, "--metrics client: the serving profile '%s' has no API server and no "
                    "--client-request/--client-prompt-token/--client-token (or cost file "
                    "client_*_s) term is given: nothing separates the client from the server",
                    sv->name);
    return 0;
}

/* When request q reaches the scheduler: its trace arrival, or in client mode after the
 * front end (one worker, first come first served: sim.h). Also opens q's stream clock. */
static int front_end(sim_t *m, const trace_req_t *q, double *t) {
    *t = q->arrival_s;
    if (!m->client_on) return 0;
    *t = fmax(q->arrival_s, m->front_free) + m->client.request_s +
         m->client.prompt_token_s * (double)q->prompt_tokens;
    m->front_free = *t;
    if (q->id >= m->client_cap) {
        int64_t cap = m->client_cap ? m->client_cap : 1024;
        while (cap <= q->id) cap *= 2;
        double *v = realloc(m->client_last, sizeof *v * (size_t)cap);
        if (!v) return fail(m, "out of memory (client-side clocks)");
        m->client_last = v;
        m->client_cap = cap;
    }
    m->client_last[q->id] = -INFINITY;
    return 0;
}

/* A speculative run's draft-model position for a new request (it holds nothing yet). */
static int draft_track(sim_t *m, int32_t id) {
    if (id >= m->draft_cap) {
        int64_t cap = m->draft_cap ? m->draft_cap : 1024;
        while (cap <= id) cap *= 2;
        int32_t *v = realloc(m->draft_pos, sizeof *v * (size_t)cap);
        if (!v) return fail(m, "out of memory (draft positions)");
        m->draft_pos = v;
        m->draft_cap = cap;
    }
    m->draft_pos[id] = 0;
    return 0;
}

/* A request's row: in a disaggregated run its prefill replica and KV transfer time
 * (sim_disagg.c); in client mode its first token reached the client token_s after the
 * step that produced it (c_1), its last at the stream's clock (c_n). */
static void client_row(void *ud, const sched_req_t *q, rec_request_t *row) {
    sim_t *m = ud;
    sim_disagg_row(m, q, row);
    if (!m->client_on || q->generated == 0) return;
    row->first_token_s = q->first_token_s + m->client.token_s;
    if (q->finish_s >= 0) row->finish_s = m->client_last[q->id];
}

/* The run config's "metrics" member (and the terms when client-side). */
static void client_json(FILE *f, const sim_t *m) {
    if (!m->client_on) {
        fputs(",\"metrics\":\"server\"", f);
        return;
    }
    fprintf(f, ",\"metrics\":\"client\",\"client_request_s\":%.17g,"
               "\"client_prompt_token_s\":%.17g,\"client_token_s\":%.17g",
            m->client.request_s, m->client.prompt_token_s, m->client.token_s);
}

/* ------------------------------------------------------------------ setup */

/* A replica's split: its group's parallel spec or tp, else the options' (--parallel, whose
 * tp --tp must not contradict, or --tp). */
static int pick_par(sim_t *m, const sim_group_t *g, par_t *out) {
    const sim_opts_t *o = m->o;
    char e[512];
    if (g && g->parallel[0]) {
        if (par_parse(g->parallel, out, e, sizeof e) != 0)
            return fail(m, "%s:%d: group '%s': %s", m->cluster.path, g->line, g->name, e);
        return 0;
    }
    if (g && g->tp > 0) {
        par_default(out, g->tp);
        return 0;
    }
    if (!o->parallel) {
        par_default(out, o->tp);
        return 0;
    }
    if (par_parse(o->parallel, out, e, sizeof e) != 0) return fail(m, "--parallel: %s", e);
    if (o->tp > 1 && o->tp != out->tp)
        return fail(m, "--tp %d and --parallel %s disagree on the tensor-parallel degree (give "
                    "it once, in the spec)", (int)o->tp, o->parallel);
    return 0;
}

/* Group g's replicas from index *next on: the options, overridden by what g gives. */
static int make_group(sim_t *m, int gi, int32_t *next) {
    const sim_opts_t *o = m->o;
    const sim_group_t *g = &m->cluster.groups[gi];
    const char **sets = calloc((size_t)(g->n_sets + m->n_policy_sets) + 1, sizeof *sets);
    if (!sets) return fail(m, "out of memory (replicas)");
    m->group_sets[gi] = sets;
    par_t par;
    if (pick_par(m, g, &par)) return -1;
    for (int i = 0; i < g->n_sets; i++) sets[i] = g->sets[i];
    for (int i = 0; i < m->n_policy_sets; i++) sets[g->n_sets + i] = m->policy_sets[i];
    for (int32_t k = 0; k < g->count; k++, (*next)++)
        m->reps[*next] = (sim_rep_t){
            .index = *next,
            .spec = { .group = g->name, .group_index = gi, .role = g->role,
                      .model = g->model[0] ? g->model : o->model,
                      .hw = g->hw[0] ? g->hw : o->hw,
                      .policy_path = g->policy[0] ? g->policy : o->policy_path,
                      .sets = sets, .n_sets = g->n_sets + m->n_policy_sets,
                      .par = par,
                      .kv_blocks = g->kv_blocks > 0 ? g->kv_blocks : o->kv_blocks,
                      .gpu_util = g->gpu_util > 0 ? g->gpu_util : o->gpu_util },
        };
    return 0;
}

/* The replicas: the --cluster file's groups, or --replicas N alike, from the options. */
static int make_replicas(sim_t *m) {
    const sim_opts_t *o = m->o;
    const sim_cluster_t *c = &m->cluster;
    int32_t n = c->n_groups ? c->replicas : o->replicas > 0 ? o->replicas : 1;
    if (!(m->reps = calloc((size_t)n, sizeof *m->reps))) return fail(m, "out of memory (replicas)");
    m->n_reps = n;
    /* --set router.KEY=VALUE go to the router (sim_route.c), the rest to each policy */
    const char **sets = calloc((size_t)o->n_sets + 1, sizeof *sets);
    if (!sets) return fail(m, "out of memory (replicas)");
    m->policy_sets = sets;
    for (int i = 0; i < o->n_sets; i++)
        if (strncmp(o->sets[i], "router.", 7) != 0) sets[m->n_policy_sets++] = o->sets[i];
    if (c->n_groups) {
        if (!(m->group_sets = calloc((size_t)c->n_groups, sizeof *m->group_sets)))
            return fail(m, "out of memory (replicas)");
        int32_t next = 0;
        for (int g = 0; g < c->n_groups; g++)
            if (make_group(m, g, &next)) return -1;
    } else {
        par_t par;
        if (pick_par(m, NULL, &par)) return -1;
        for (int32_t i = 0; i < n; i++)
            m->reps[i] = (sim_rep_t){
                .index = i,
                .spec = { .model = o->model, .hw = o->hw, .policy_path = o->policy_path,
                          .sets = sets, .n_sets = m->n_policy_sets, .par = par,
                          .kv_blocks = o->kv_blocks, .gpu_util = o->gpu_util },
            };
    }
    return replay_set_replicas(&m->rp, n);
}

/* --cluster: read the file; the router is --router, else the file's. */
static int read_cluster(sim_t *m) {
    const sim_opts_t *o = m->o;
    char e[1024];
    m->router_path = o->router_path;
    if (!o->cluster_path) {
        if (o->router_path && o->replicas < 1)
            return fail(m, "--router needs --replicas N (or --cluster FILE)");
        return 0;
    }
    if (o->replicas > 0) return fail(m, "--replicas and --cluster: give one of them");
    if (sim_cluster_read(o->cluster_path, &m->cluster, e, sizeof e) != 0)
        return fail(m, "--cluster: %s", e);
    if (!m->router_path && m->cluster.router[0]) m->router_path = m->cluster.router;
    return 0;
}

/* Every replica, the client-side terms, the router, the trace. */
static int setup(sim_t *m) {
    if (read_cluster(m) || make_replicas(m)) return -1;
    for (int32_t i = 0; i < m->n_reps; i++)
        if (sim_rep_setup(m, &m->reps[i])) return -1;
    if (pick_client(m)) return -1;
    if (sim_route_setup(m) || sim_disagg_setup(m)) return -1;
    m->rp.on_final = final_hook;
    if (m->client_on || m->disagg) m->rp.on_row = client_row;
    m->rp.final_ud = m;
    return replay_open_trace(&m->rp, m->o->trace_path, &m->o->trace_opts);
}

/* ------------------------------------------------------------------ the loop */

static int push_next_arrival(sim_t *m, trace_req_t *next) {
    int rc = replay_next(&m->rp, next);
    if (rc <= 0) return rc;
    if (!(m->first_arrival <= next->arrival_s)) m->first_arrival = next->arrival_s;
    m->last_arrival = next->arrival_s;
    double t;
    if (front_end(m, next, &t)) return -1;
    if (m->o->client_timeout_s > 0 &&
        sim_heap_push(&m->heap, (sim_event_t){ .t = next->arrival_s + m->o->client_timeout_s,
                                               .type = SIM_EV_TIMEOUT, .arg = next->id }))
        return fail(m, "out of memory (event heap)");
    if (m->any_draft && draft_track(m, next->id)) return -1;
    if (sim_heap_push(&m->heap, (sim_event_t){ .t = t, .type = SIM_EV_ARRIVAL }))
        return fail(m, "out of memory (event heap)");
    return 0;
}

/* Replica r's step ends at `now`: its tokens, the commit, its row. */
static int step_done(sim_t *m, sim_rep_t *r, double now) {
    const sched_plan_t *plan = r->plan;
    sched_t *s = m->rp.reps[r->index].sched;
    double w0 = wall_now();
    if (r->draft_cost) {
        sim_draw_acceptances(m, r, plan);
        sim_draft_advance(m, plan);
    }
    if (m->o->on_step) {
        sim_step_info_t si = {
            .plan = plan, .accepted = r->draft_cost ? m->accepted : NULL,
            .start_s = r->step_start, .dur_s = now - r->step_start, .view = sched_view(s),
            .kv_used = sched_kv_used(s), .kv_total = sched_kv_total(s), .replica = r->index,
        };
        if (m->o->on_step(m->o->hook_ud, &si) != 0) {
            stop(m);
            return -1;
        }
    }
    if ((m->o->save_tokens || m->client_on) && emit_tokens(m, r, plan, now)) return -1;
    if (sched_commit(s, plan, r->draft_cost ? m->accepted : NULL, now) != 0)
        return fail(m, "%s", sched_errmsg(s));
    if (r->n_timed_out > 0 && sim_serving_after_commit(m, r, now)) return -1;
    if (sim_disagg_after_commit(m, r->index, now)) return -1;
    /* step numbers are the run's (one replica: the scheduler's own) */
    rec_step_t st = {
        .step = m->steps, .start_s = r->step_start, .dur_s = now - r->step_start,
        .prefill_tokens = plan->prefill_tokens, .decode_tokens = plan->decode_tokens,
        .pad_tokens = plan->pad_tokens, .num_seqs = plan->n,
        .num_preempted = plan->num_preempted, .sched_s = r->step_sched + (wall_now() - w0),
        .tokens = r->feat.tokens, .pass_seqs = r->feat.seqs, .sampled = r->feat.sampled,
        .kv_tokens = r->feat.kv_tokens, .attn_pairs = r->feat.attn_pairs, .host_s = r->host_s,
    };
    if (!m->o->no_steps && replay_record_step_at(&m->rp, r->index, &st)) return -1;
    m->steps++;
    r->busy = 0;
    sim_poke(m, r->index);
    if (replay_after_step(&m->rp, plan)) return -1;
    /* a replica finished a step: what the router held may go now */
    return m->n_held > 0 ? sim_route_held(m, now) : 0;
}

/* Replica r is idle at `now`: ask its policy for the next step. */
static int decide(sim_t *m, sim_rep_t *r, double now) {
    sched_t *s = m->rp.reps[r->index].sched;
    /* An empty plan that rejected or preempted something changed the state: ask again
     * at this instant (bounded, like wake-ups, against a policy that never settles). */
    for (;;) {
        double w0 = wall_now();
        if (sched_step(s, now, &r->plan) != 0) return fail(m, "%s", sched_errmsg(s));
        const sched_plan_t *plan = r->plan;
        r->step_sched = wall_now() - w0;
        if (plan->n > 0 || plan->n_pads > 0) {
            if (sim_seqs_reserve(m, plan->n + plan->n_pads)) return -1;
            double pass = sim_step_cost(m, r, plan, &r->feat), dur;
            /* The executor's CPU-side work comes before the pass (engine.c measures it
             * the same way): decided now, the pass starts host_s later; a serving
             * profile's async scheduler overlaps it with the pass instead. */
            sim_serving_step_time(m, r, &r->feat, pass, &r->host_s, &dur);
            r->host_s *= m->o->cost_scale;
            dur *= m->o->cost_scale;
            r->step_start = now + r->host_s;
            r->busy = 1;
            r->dirty = 1;
            if (sim_heap_push(&m->heap, (sim_event_t){ .t = r->step_start + dur,
                                                       .type = SIM_EV_STEP_DONE,
                                                       .replica = r->index }))
                return fail(m, "out of memory (event heap)");
            return 0;
        }
        if (replay_after_idle(&m->rp)) return -1;
        if (plan->num_rejected > 0 || plan->num_preempted > 0) continue;
        double wake = sched_wakeup(s);
        if (isfinite(wake) && wake != r->pushed_wake) {
            r->pushed_wake = wake;
            if (sim_heap_push(&m->heap, (sim_event_t){ .t = wake, .type = SIM_EV_WAKE,
                                                       .replica = r->index }))
                return fail(m, "out of memory (event heap)");
        }
        return 0;
    }
}

static int run_loop(sim_t *m) {
    trace_req_t next;
    double now = 0;
    if (push_next_arrival(m, &next)) return -1;

    sim_event_t ev;
    while (sim_heap_pop(&m->heap, &ev)) {
        now = ev.t;
        for (;;) { /* every event at this instant before the next decision */
            if (ev.type == SIM_EV_ARRIVAL) {
                if (sim_route_arrival(m, &next, now)) return -1;
                if (push_next_arrival(m, &next)) return -1;
            } else if (ev.type == SIM_EV_STEP_DONE) {
                if (step_done(m, &m->reps[ev.replica], now)) return -1;
            } else if (ev.type == SIM_EV_TRANSFER) {
                if (sim_disagg_transfer_done(m, (int32_t)ev.arg, now)) return -1;
            } else if (ev.type == SIM_EV_WAKE) {
                m->reps[ev.replica].pushed_wake = INFINITY;
                sim_poke(m, ev.replica);
            } else if (ev.type == SIM_EV_TIMEOUT) {
                if (sim_serving_timeout(m, (int32_t)ev.arg, now)) return -1;
            }
            if (m->rp.failed) return -1;
            const sim_event_t *peek = sim_heap_peek(&m->heap);
            if (!peek || peek->t > now) break;
            sim_heap_pop(&m->heap, &ev);
        }
        /* the replicas an event touched, in index order of their first event */
        int checked = 0;
        for (int32_t k = 0; k < m->n_poked; k++) {
            sim_rep_t *r = &m->reps[m->poked[k]];
            r->poked = 0;
            if (r->busy || m->rp.failed) continue;
            /* a step boundary: nothing in flight here, its last step committed and recorded */
            if (!checked++ && replay_interrupted(&m->rp, now)) return -1;
            if (decide(m, r, now)) return -1;
            /* what arrived during the last step reaches the scheduler now that it planned
             * the next one (async scheduling), or at once when it planned nothing */
            if (r->n_inbox > 0) {
                if (sim_serving_flush(m, r, now)) return -1;
                if (!r->busy && decide(m, r, now)) return -1;
            }
        }
        m->n_poked = 0;
        if (m->rp.failed) return -1;
        if (m->o->progress) replay_progress(&m->rp, "sim", now, m->steps, 0);
    }
    if (m->o->progress) replay_progress(&m->rp, "sim", now, m->steps, 1);
    if (m->o->prefix_caching && m->hashed_requests == 0)
        fprintf(stderr, "twinserve sim: note: this trace names no shared prefixes (Mooncake "
                        "hash_ids, or a plain trace's prefix_group,prefix_tokens columns): "
                        "--prefix-caching only spares preempted requests their recompute\n");
    if (m->n_held > 0)
        return fail(m, "router %s held %d requests at t=%.3f s with no step in flight on any "
                    "replica and no arrival left: nothing could release them (a router bug: "
                    "hold only while some replica is busy)", router_path(m->router),
                    (int)m->n_held, now);
    return replay_unfinished(&m->rp) > 0 ? replay_stalled(&m->rp, now) : 0;
}

/* ------------------------------------------------------------------ entry point */

/* The replicas table: one row per replica (schema.sql). */
static int record_replicas(sim_t *m) {
    for (int32_t i = 0; i < m->n_reps; i++) {
        const sim_rep_t *r = &m->reps[i];
        char hw[128];
        snprintf(hw, sizeof hw, "%s x%d", r->hw.name, (int)par_gpus(&r->spec.par));
        rec_replica_t x = {
            .replica = i, .group = r->spec.group, .role = sim_role_name(r->spec.role),
            .model = r->model.name, .hardware = hw, .policy = r->spec.policy_path,
            .params = lhost_params_json_for(m->rp.reps[i].host, "sim"), .tp = r->spec.par.tp,
            .kv_blocks = r->num_blocks,
        };
        if (rec_replica(m->rp.rec, m->rp.run_id, &x) != 0)
            return fail(m, "recording replica %d: %s", (int)i, rec_errmsg(m->rp.rec));
    }
    return 0;
}

/* What the caller should hear about a run that went through but may not mean what was
 * meant: a context past the model's, a rate that made the trace one burst. */
static void warn(sim_result_t *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(sim_result_t *res, const char *fmt, ...) {
    if (res->n_warnings >= SIM_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->warning[res->n_warnings++], sizeof res->warning[0], fmt, ap);
    va_end(ap);
}

int sim_run(const sim_opts_t *o, sim_result_t *res, char *err, size_t errlen) {
    sim_t m = { .o = o, .first_arrival = NAN, .last_arrival = NAN };
    char *config = NULL;
    size_t config_len = 0;
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    if (replay_init(&m.rp, o->db_path) != 0) goto done;
    char trace_desc[1024], hw_desc[128];
    replay_describe_trace(o->trace_path, &o->trace_opts, trace_desc, sizeof trace_desc);
    snprintf(hw_desc, sizeof hw_desc, "%s x%d", o->hw ? o->hw : SIM_DEFAULT_HW, o->tp);
    rec_run_info_t early = {
        .name = o->run_name, .kind = "sim", .policy = o->policy_path, .params = "{}",
        .trace = trace_desc,
        .model = o->model         ? o->model
                 : o->model_shape ? o->model_shape->name
                 : o->cost_path   ? "(the cost file's)"
                                  : SIM_DEFAULT_MODEL,
        .hardware = hw_desc, .seed = o->seed,
        .version = o->version,
    };
    m.rp.early_info = &early;
    m.rp.interrupt = o->interrupt;
    /* A sweep forks its later points after a signal: they are not run, and not recorded. */
    if (replay_not_started(&m.rp)) goto done;
    /* A configuration that cannot run records nothing (sim.h): the caller says why. */
    if (setup(&m) != 0) {
        res->setup_failed = 1;
        goto done;
    }
    if (replay_not_started(&m.rp)) goto done;
    if (o->progress) replay_count_trace(&m.rp, o->trace_path, &o->trace_opts);

    /* the run row describes replica 0; a cluster's config lists its replicas */
    const sim_rep_t *r0 = &m.reps[0];
    const preset_model_t *model = &r0->model;
    int32_t num_blocks = r0->num_blocks;
    if (r0->cf && r0->cf->kind == COST_FILE_LINEAR)
        snprintf(hw_desc, sizeof hw_desc, "cost file: %.100s",
                 r0->cf->fitted_for[0] ? r0->cf->fitted_for : o->cost_path);
    else if (!par_is_tp_only(&r0->spec.par)) {
        char spec[96];
        par_format(&r0->spec.par, spec, sizeof spec);
        snprintf(hw_desc, sizeof hw_desc, "%.40s x%d (%.60s)", r0->hw.name,
                 (int)par_gpus(&r0->spec.par), spec);
    } else
        snprintf(hw_desc, sizeof hw_desc, "%s x%d", r0->hw.name, (int)par_gpus(&r0->spec.par));
    FILE *cf = open_memstream(&config, &config_len);
    if (!cf) {
        fail(&m, "out of memory (run config)");
        goto done;
    }
    fprintf(cf, "{\"weight_format\":\"%s\",\"kv_dtype_bytes\":%d,", preset_model_format_name(model),
            (int)preset_model_kv_elem_bytes(model));
    fprintf(cf, "\"num_blocks\":%d,\"block_size\":%d,\"max_tokens\":%d,\"max_seqs\":%d,"
                "\"max_model_len\":%d,\"watermark\":%.17g,\"gpu_util\":%.17g,\"tp\":%d,"
                "\"prefix_caching\":%s,\"kv_blocks_given\":%s,\"cost\":",
            num_blocks, o->block_size, o->max_tokens, o->max_seqs,
            o->max_model_len > 0 ? o->max_model_len : model->max_seq,
            o->watermark, o->gpu_util, (int)r0->spec.par.tp, o->prefix_caching ? "true" : "false",
            o->kv_blocks > 0 ? "true" : "false");
    if (r0->cf)
        cost_file_json(cf, r0->cf);
    else
        fprintf(cf, "{\"model\":\"roofline\",\"flops_eff\":%.17g,\"bw_eff\":%.17g,"
                    "\"attn_eff\":%.17g,\"overhead_s\":%.17g}",
                o->cost.flops_eff, o->cost.bw_eff, o->cost.attn_eff, o->cost.overhead_s);
    if (o->n_kv_tiers > 0) {   /* the KV tiers below HBM, as given */
        fputs(",\"kv_tiers\":[", cf);
        for (int i = 0; i < o->n_kv_tiers; i++) {
            if (i) fputc(',', cf);
            json_write_str(cf, o->kv_tiers[i]);
        }
        fputc(']', cf);
    }
    if (!par_is_tp_only(&r0->spec.par)) {
        char spec[128];
        par_format(&r0->spec.par, spec, sizeof spec);
        fprintf(cf, ",\"parallel\":\"%s\",\"gpus\":%d", spec, (int)par_gpus(&r0->spec.par));
    }
    fputs(",\"calibration\":", cf);
    json_write_str(cf, r0->calibration);
    fputc(',', cf);
    replay_json_path(cf, "policy_file", o->policy_path);
    fputc(',', cf);
    replay_trace_json(cf, o->trace_path, &o->trace_opts);
    client_json(cf, &m);
    fputs(",\"serving\":", cf);
    serving_json(cf, &m.serving);
    if (o->client_timeout_s > 0) fprintf(cf, ",\"client_timeout_s\":%.17g", o->client_timeout_s);
    if (o->no_steps) fputs(",\"steps\":\"not recorded\"", cf);
    if (o->cost_scale != 1) fprintf(cf, ",\"cost_scale\":%.17g", o->cost_scale);
    sim_band_width(&m, r0, &res->band_err, res->band_src, sizeof res->band_src);
    if (isfinite(res->band_err)) {
        fprintf(cf, ",\"band_width\":{\"err\":%.6g,\"source\":", res->band_err);
        json_write_str(cf, res->band_src);
        fputc('}', cf);
    }
    /* What policies were shown of output lengths (replayed by validate, shown by report). */
    fprintf(cf, ",\"oracle_lengths\":%s", o->oracle_lengths ? "true" : "false");
    /* How over-long requests were treated: the load differs between the two. */
    fprintf(cf, ",\"clip_to_context\":%s", o->clip_to_context ? "true" : "false");
    if (o->max_output_tokens > 0) fprintf(cf, ",\"max_output_tokens\":%d", o->max_output_tokens);
    if (o->replicas > 0 || m.router || o->cluster_path) {
        /* a cluster (--replicas, even of 1, or --cluster): the router and its params */
        fprintf(cf, ",\"replicas\":%d,", (int)m.n_reps);
        if (o->cluster_path) {
            replay_json_path(cf, "cluster", o->cluster_path);
            fputc(',', cf);
        }
        replay_json_path(cf, "router", m.router_path ? m.router_path : "(round robin)");
        fprintf(cf, ",\"router_params\":%s", m.router ? router_params_json(m.router) : "{}");
    }
    if (o->config_extra) fprintf(cf, ",%s", o->config_extra);
    fputc('}', cf);
    if (fclose(cf) != 0 || !config) {
        fail(&m, "out of memory (run config)");
        goto done;
    }
    rec_run_info_t info = early;
    info.params = lhost_params_json_for(m.rp.host, "sim");
    info.model = model->name;
    info.hardware = hw_desc;
    info.config = config;
    if (replay_begin(&m.rp, &info) != 0) goto done;
    res->run_id = m.rp.run_id;
    if (record_replicas(&m) == 0) run_loop(&m);
    /* a failed run's arrivals still in an inbox are the scheduler's to abort */
    for (int32_t i = 0; m.rp.failed && i < m.n_reps; i++)
        if (m.reps[i].n_inbox > 0) {
            int failed = m.rp.failed;
            m.rp.failed = 0;
            sim_serving_flush(&m, &m.reps[i], 0);
            m.rp.failed = failed;
        }
    if (m.rp.failed) sim_disagg_abort(&m);
    replay_finish(&m.rp);
    res->requests = m.rp.requests;
    res->skipped = m.rp.trace ? trace_skipped(m.rp.trace) : 0;
    res->steps = m.steps;
    res->num_blocks = num_blocks;
    res->replicas = m.n_reps;
    res->wall_s = wall_now() - m.rp.wall0;
    res->stopped = m.stopped;
    snprintf(res->calibration, sizeof res->calibration, "%s", r0->calibration);
    snprintf(res->serving, sizeof res->serving, "%s", m.serving.name);
    if (r0->tiers) {
        /* every replica's tiers alike (the options'): their totals */
        size_t used = 0;
        for (int i = 0; i < kv_tiers_count(r0->tiers); i++) {
            const kv_tier_spec_t *sp = kv_tiers_spec(r0->tiers, i);
            int64_t w = 0, h = 0, e = 0, held = 0;
            for (int32_t k = 0; k < m.n_reps; k++) {
                if (!m.reps[k].tiers) continue;
                const kv_tier_stats_t *st = kv_tiers_stats(m.reps[k].tiers, i);
                w += st->writes, h += st->hits, e += st->evictions, held += st->held;
            }
            int n = snprintf(res->kv_tiers + used, sizeof res->kv_tiers - used,
                             "%s%s %.1f GB a replica (%lld blocks): %lld blocks written, %lld "
                             "reloaded (%.2f GB), %lld pushed down or dropped, %lld held at the "
                             "end", i ? "; " : "", sp->kind,
                             (double)sp->capacity_blocks * r0->tier_block_bytes / 1e9,
                             (long long)sp->capacity_blocks, (long long)w, (long long)h,
                             (double)h * r0->tier_block_bytes / 1e9, (long long)e, (long long)held);
            if (n < 0 || (size_t)n >= sizeof res->kv_tiers - used) break;
            used += (size_t)n;
        }
    }
    if (o->max_model_len > model->max_seq)
        warn(res, "--max-model-len %d is past %s's %d-token context: the simulator serves it, "
             "a real model was not trained for it", o->max_model_len, model->name,
             model->max_seq);
    /* windows are priced and their blocks freed (sched.h), except where that is not
     * modelled */
    const sched_config_t *sc = sched_config(m.rp.reps[0].sched);
    if (model->sliding_window > 0 && model->n_window_layers > 0 && sc->window_tokens == 0)
        warn(res, "%s's %d-token sliding window (%d of its %d layers): the KV capacity counts "
             "every layer at the whole context with %s (vLLM's hybrid allocator frees the "
             "blocks that left a window), an overestimate of the KV past %d tokens",
             model->name, model->sliding_window, model->n_window_layers, model->n_layers,
             o->prefix_caching ? "--prefix-caching" : "a draft model", model->sliding_window);
    if (res->requests >= 100 && m.last_arrival - m.first_arrival < 1e-3)
        warn(res, "all %lld requests arrive within 1 ms (--rate-scale %g): the trace is one "
             "burst, its arrival times no longer matter", (long long)res->requests,
             o->trace_opts.rate_scale > 0 ? o->trace_opts.rate_scale : 1.0);
    if (!m.rp.failed) {
        char e[256];
        res->have_summary =
            summary_load(rec_db(m.rp.rec), m.rp.run_id, &res->summary, e, sizeof e) == 0;
    }
done:
    res->interrupted = m.rp.interrupted;
    if (m.rp.failed) snprintf(err, errlen, "%s", m.rp.err);
    sim_serving_free(&m);
    sim_route_free(&m);
    sim_disagg_free(&m);
    replay_close(&m.rp);
    for (int32_t i = 0; i < m.n_reps; i++) sim_rep_free(&m.reps[i]);
    free(m.reps);
    free(m.policy_sets);
    for (int g = 0; m.group_sets && g < m.cluster.n_groups; g++) free(m.group_sets[g]);
    free(m.group_sets);
    sim_cluster_free(&m.cluster);
    sim_heap_free(&m.heap);
    free(m.seqs);
    free(m.accepted);
    free(m.client_last);
    free(m.draft_pos);
    free(config);
    return m.rp.failed ? -1 : 0;
}

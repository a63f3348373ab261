/* sim: see sim.h. One replica for now; the event heap carries a replica index so a router
 * over several replicas can be added without changing the loop's shape. */
#include "sim/sim.h"

#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "policies/replay.h"
#include "traces/json.h"
#include "policies/rng.h"
#include "policies/sched.h"
#include "sim/cost_file.h"
#include "sim/heap.h"
#include "sim/presets.h"
#include "traces/recorder.h"

typedef struct {
    const sim_opts_t *o;
    replay_t rp;          /* database, policy, scheduler, trace, failure state */
    cost_model_t *cost, *draft_cost;
    cost_file_t *cf;      /* the --cost file or a shipped calibration; NULL: the roofline */
    char calibration[320];/* which (sim_result_t.calibration) */
    double alpha;
    sim_heap_t heap;
    cost_seq_t *seqs;
    int32_t seqs_cap;
    int32_t *accepted;
    int32_t accepted_cap;
    int stopped;          /* a hook asked to stop */
    int64_t steps, hashed_requests;
    cost_features_t feat; /* the step in flight: its target pass's work and host time */
    double host_s;
    sim_client_t client;  /* the client-side terms in effect (sim.h) */
    int client_on;        /* any of them > 0: the records are the client's */
    double front_free;    /* when the front end hands on the last request it took */
    double *client_last;  /* [request id]: client time of its last streamed token */
    int64_t client_cap;   /* 8 bytes per request of the trace, in client mode only */
    int32_t *draft_pos;   /* [request id]: positions whose K/V the draft model holds */
    int64_t draft_cap;    /* speculative runs only */
} sim_t;

#define fail(m, ...) replay_fail(&(m)->rp, __VA_ARGS__)
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
}

int32_t sim_kv_blocks(const preset_model_t *m, const preset_model_t *draft,
                      const preset_hw_t *hw, int32_t tp, double gpu_util, int32_t block_size,
                      int32_t max_tokens, int32_t max_seqs, char *err, size_t errlen) {
    double mem = hw->mem_bytes * tp * gpu_util;
    double weights = preset_model_weight_bytes(m) + (draft ? preset_model_weight_bytes(draft) : 0);
    /* Peak activations of the largest step (hidden states, QKV, MLP intermediates) plus
     * fp32 logits for every sequence: what vLLM's profiling run would find, roughly. */
    double act = (double)max_tokens * (4.0 * m->d_model + 2.0 * m->d_ff) * m->dtype_bytes +
                 (double)max_seqs * m->vocab * 4.0;
    double per_block = (double)block_size * (preset_model_kv_bytes_per_token(m) +
                                             (draft ? preset_model_kv_bytes_per_token(draft) : 0));
    double blocks = floor((mem - weights - act) / per_block);
    if (blocks < 1) {
        snprintf(err, errlen, "%s does not fit on %d x %s: weights %.1f GB + activations %.1f "
                 "GB exceed %.1f GB (memory x gpu_util %.2f); use a larger --tp or --hw",
                 m->name, tp, hw->name, weights / 1e9, act / 1e9, mem / 1e9, gpu_util);
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

/* ------------------------------------------------------------------ costing */

static int seqs_reserve(sim_t *m, int32_t n) {
    if (n <= m->seqs_cap) return 0;
    int32_t cap = n * 2;
    cost_seq_t *v = realloc(m->seqs, sizeof *v * (size_t)cap);
    int32_t *a = realloc(m->accepted, sizeof *a * (size_t)cap);
    if (v) m->seqs = v;
    if (a) m->accepted = a;
    if (!v || !a) return fail(m, "out of memory costing a step");
    m->seqs_cap = cap;
    return 0;
}

/* The target's pass over the whole plan (its features in *f), plus, for speculative
 * policies, the draft model: one pass over the prefills and the first draft token, then
 * k - 1 single-token passes. The first pass also runs what the draft model is behind on:
 * after a step that accepted all k drafts, the last draft (proposed, never run through the
 * draft model) besides the target's bonus token, so 2 tokens (draft_pos, draft_advance). */
static double step_cost(sim_t *m, const sched_plan_t *p, cost_features_t *f) {
    int32_t n = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        m->seqs[n++] = (cost_seq_t){ e->num_tokens + e->num_spec, e->start,
                                     e->sample ? 1 + e->num_spec : 0 };
    }
    for (int32_t i = 0; i < p->n_pads; i++)
        m->seqs[n++] = (cost_seq_t){ p->pads[i].num_tokens, p->pads[i].ctx,
                                     p->pads[i].ctx > 0 ? p->pads[i].num_tokens : 0 };
    cost_features(m->seqs, n, f);
    double t = cost_step_time(m->cost, m->seqs, n);
    if (!m->draft_cost) return t;
    int32_t kmax = 0;
    n = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        if (e->num_spec > kmax) kmax = e->num_spec;
        if (!e->is_decode) m->seqs[n++] = (cost_seq_t){ e->num_tokens, e->start, 0 };
        else if (e->num_spec > 0) {
            int32_t lag = e->start - m->draft_pos[e->req_id];
            lag = lag < 0 ? 0 : lag;
            m->seqs[n++] = (cost_seq_t){ 1 + lag, e->start - lag, 1 };
        }
    }
    t += cost_step_time(m->draft_cost, m->seqs, n);
    for (int32_t j = 1; j < kmax; j++) {
        n = 0;
        for (int32_t i = 0; i < p->n; i++) {
            const sched_entry_t *e = &p->entries[i];
            if (e->is_decode && e->num_spec > j) m->seqs[n++] = (cost_seq_t){ 1, e->start + j, 1 };
        }
        t += cost_step_time(m->draft_cost, m->seqs, n);
    }
    return t;
}

/* After step p with its acceptances drawn: the positions the draft model now holds valid
 * K/V for. A prefill (or recompute) runs through it; a verified step leaves its passes'
 * K/V up to the last draft it ran (start + k - 1), and only up to the accepted ones. A
 * decode without drafts leaves it behind by one more token. */
static void draft_advance(sim_t *m, const sched_plan_t *p) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        int32_t *d = &m->draft_pos[e->req_id];
        if (!e->is_decode) *d = e->start + e->num_tokens;
        else if (e->num_spec > 0) {
            int32_t ran = e->start + e->num_spec, ok = e->start + 1 + m->accepted[i];
            *d = ran < ok ? ran : ok;
        }
    }
}

/* Drafts accepted left to right with probability alpha until the first rejection, drawn
 * from (seed, request, position) so the outcome does not depend on the batch. */
static void draw_acceptances(sim_t *m, const sched_plan_t *p) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        int32_t a = 0;
        if (e->num_spec > 0) {
            rng_t r;
            rng_seed3(&r, m->o->seed, (uint64_t)e->req_id, (uint64_t)e->req->generated);
            while (a < e->num_spec && rng_uniform(&r) < m->alpha) a++;
        }
        m->accepted[i] = a;
    }
}

/* The tokens the step emits at its end, `now` (sched_req_emit, as sched_commit counts):
 * in client mode each advances its request's stream (sim.h), and with save_tokens each gets
 * a tokens row at the time its side sees it. Entries whose request was aborted meanwhile
 * emit nothing. Called before the commit, while generated is the count before the step. */
static int emit_tokens(sim_t *m, const sched_plan_t *p, double now) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        if (!e->sample || e->req->state != SCHED_RUNNING) continue;
        int32_t gen = e->req->generated;
        int32_t emit = sched_req_emit(e->req, m->draft_cost ? m->accepted[i] : 0);
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

/* The client-side terms in effect: each option given, else the cost file's, else 0. */
static int pick_client(sim_t *m) {
    const sim_client_t *o = &m->o->client;
    const cost_file_t *cf = m->cf;
    const struct { const char *key; double opt, file; double *out; } t[] = {
        { "client_request_s", o->request_s, cf ? cf->client_request_s : 0,
          &m->client.request_s },
        { "client_prompt_token_s", o->prompt_token_s, cf ? cf->client_prompt_token_s : 0,
          &m->client.prompt_token_s },
        { "client_token_s", o->token_s, cf ? cf->client_token_s : 0, &m->client.token_s },
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        double v = isnan(t[i].opt) ? t[i].file : t[i].opt;
        if (!isfinite(v) || v < 0)
            return fail(m, "%s must be a finite number of seconds >= 0 (got %g)", t[i].key, v);
        *t[i].out = v;
    }
    m->client_on = m->client.request_s > 0 || m->client.prompt_token_s > 0 ||
                   m->client.token_s > 0;
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

/* A request's row in client mode: its first token reached the client token_s after the
 * step that produced it (c_1), its last at the stream's clock (c_n). */
static void client_row(void *ud, const sched_req_t *q, rec_request_t *row) {
    sim_t *m = ud;
    if (q->generated == 0) return;
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

/* Loads presets, the policy and the trace; sizes the KV cache; builds the scheduler. */
/* The model: --model, checked against the cost file's shape when both are given; or the
 * cost file's own; or the default preset. */
static int pick_model(sim_t *m, preset_model_t *model) {
    const sim_opts_t *o = m->o;
    char e[512];
    const char *what = o->model ? o->model : "the run's model";
    if (!o->model && o->model_shape) {
        *model = *o->model_shape;
        if (preset_model_validate(model, e, sizeof e) != 0) return fail(m, "model: %s", e);
    } else if (!o->model && m->cf) {
        *model = m->cf->model;
        return 0;
    } else if (preset_model_get(o->model ? o->model : SIM_DEFAULT_MODEL, model, e, sizeof e)) {
        return fail(m, "--model: %s", e);
    }
    if (m->cf && cost_file_same_shape(model, &m->cf->model, e, sizeof e) != 0)
        return fail(m, "%s does not have the shape the cost file %s was fitted for (%s: %s); "
                    "a cost model describes one model", what, o->cost_path, m->cf->model.name,
                    e);
    return 0;
}

/* Without --cost, the calibration shipped for this built-in model on this built-in GPU at
 * this tp (cost_file_builtin), unless the roofline was asked for; m->calibration says
 * which model costs the run, and why the roofline when it is the roofline. */
static int pick_builtin(sim_t *m, const preset_model_t *model, const preset_hw_t *hw) {
    const sim_opts_t *o = m->o;
    char path[320], e[1024];
    if (m->cf) {
        snprintf(m->calibration, sizeof m->calibration, "%s", o->cost_path);
        return 0;
    }
    if (o->roofline) {
        snprintf(m->calibration, sizeof m->calibration, "none: the roofline was asked for");
        return 0;
    }
    if (!preset_hw_find(hw->name) || !preset_model_find(model->name) ||
        cost_file_builtin(model->name, hw->name, o->tp, path, sizeof path) != 0) {
        snprintf(m->calibration, sizeof m->calibration, "none: no shipped calibration for "
                 "%.60s on %.60s at tp %d; the roofline's efficiencies are guesses",
                 model->name, hw->name, (int)o->tp);
        return 0;
    }
    cost_file_t *cf = malloc(sizeof *cf);
    if (!cf) return fail(m, "out of memory (cost file)");
    if (cost_file_read(path, cf, e, sizeof e) != 0) {
        free(cf);
        return fail(m, "%s", e);
    }
    if (cost_file_same_shape(model, &cf->model, e, sizeof e) != 0) {
        snprintf(m->calibration, sizeof m->calibration, "none: %.60s is not the shape of the "
                 "shipped %.100s (%.60s)", model->name, path, e);
        free(cf);
        return 0;
    }
    m->cf = cf;
    snprintf(m->calibration, sizeof m->calibration, "%s", path);
    return 0;
}

static int setup(sim_t *m, preset_model_t *model, preset_hw_t *hw, int32_t *num_blocks) {
    const sim_opts_t *o = m->o;
    char e[1024];
    if (o->cost_path) {
        if (!(m->cf = malloc(sizeof *m->cf))) return fail(m, "out of memory (cost file)");
        if (cost_file_read(o->cost_path, m->cf, e, sizeof e) != 0) return fail(m, "--cost: %s", e);
    }
    if (pick_client(m)) return -1;
    if (pick_model(m, model)) return -1;
    const char *fitted_hw = m->cf && m->cf->hw_preset[0] ? m->cf->hw_preset : NULL;
    if (fitted_hw && o->hw && strcmp(o->hw, fitted_hw) != 0)
        return fail(m, "--hw %s, but the cost file %s was fitted on %s", o->hw, o->cost_path,
                    fitted_hw);
    if (m->cf && m->cf->kind == COST_FILE_ROOFLINE) *hw = m->cf->hw;
    else if (preset_hw_get(o->hw ? o->hw : fitted_hw ? fitted_hw : SIM_DEFAULT_HW, hw, e,
                           sizeof e) != 0)
        return fail(m, "--hw: %s", e);
    if (o->tp < 1) return fail(m, "--tp must be >= 1 (got %d)", o->tp);
    if (m->cf && m->cf->kind == COST_FILE_LINEAR && o->kv_blocks <= 0 && !fitted_hw)
        return fail(m, "--cost %s models one machine, not a hardware preset: give its KV "
                    "capacity with --kv-blocks N (an engine run's num_blocks)", o->cost_path);
    if (!m->cf && o->tp > 1 && model->n_heads % o->tp != 0)
        return fail(m, "--tp %d does not divide %s's %d attention heads", (int)o->tp,
                    model->name, (int)model->n_heads);
    if (pick_builtin(m, model, hw)) return -1;

    if (replay_load_policy(&m->rp, o->policy_path, o->sets, o->n_sets, &o->limits)) return -1;

    /* Speculative policies name a draft model and an acceptance rate in their params. */
    char draft_name[256];
    preset_model_t draft;
    int has_draft = lhost_param_str(m->rp.host, "draft", draft_name, sizeof draft_name);
    if (has_draft < 0) return fail(m, "policy param 'draft' must be a model preset name");
    if (has_draft) {
        if (preset_model_get(draft_name, &draft, e, sizeof e) != 0)
            return fail(m, "policy param draft: %s", e);
        int rc = lhost_param_num(m->rp.host, "alpha", &m->alpha);
        if (rc != 1 || !(m->alpha >= 0 && m->alpha <= 1))
            return fail(m, "a policy with a 'draft' model needs a param 'alpha' in [0, 1]");
        /* a cost file of one machine cannot cost another model; one fitted for a
         * hardware preset can leave the draft to the roofline on that preset */
        if (m->cf && !m->cf->hw_preset[0])
            return fail(m, "--cost %s models %s only, not the policy's draft model '%s'; "
                        "simulate speculative decoding with the roofline (--hw)", o->cost_path,
                        m->cf->model.name, draft_name);
    }

    if (o->kv_blocks > 0) {
        *num_blocks = o->kv_blocks;
    } else {
        *num_blocks = sim_kv_blocks(model, has_draft ? &draft : NULL, hw, o->tp, o->gpu_util,
                                    o->block_size, o->max_tokens, o->max_seqs, e, sizeof e);
        if (*num_blocks < 0) return fail(m, "%s", e);
    }

    cost_roofline_params_t cp = o->cost;
    cp.tp = o->tp;
    if (m->cf) {
        if (!(m->cost = cost_file_model(m->cf, o->tp, e, sizeof e))) return fail(m, "%s", e);
    } else {
        if (cost_roofline_check(model, hw, &cp, e, sizeof e) != 0) return fail(m, "%s", e);
        m->cost = cost_roofline_new(model, hw, &cp);
    }
    if (has_draft) {
        cost_roofline_params_t dp = cp;
        dp.tp = 1; /* a small draft model runs on one device */
        m->draft_cost = cost_roofline_new(&draft, hw, &dp);
    }
    if (!m->cost || (has_draft && !m->draft_cost)) return fail(m, "out of memory (cost model)");

    sched_config_t cfg = {
        .num_blocks = *num_blocks, .block_size = o->block_size, .watermark = o->watermark,
        .max_tokens = o->max_tokens, .max_seqs = o->max_seqs,
        .max_model_len = o->max_model_len > 0 ? o->max_model_len : model->max_seq,
        .seed = o->seed, .prefix_caching = o->prefix_caching,
        .max_output_tokens = o->max_output_tokens, .oracle_lengths = o->oracle_lengths,
        .clip_to_context = o->clip_to_context,
    };
    if (replay_start_sched(&m->rp, &cfg)) return -1;
    m->rp.on_final = final_hook;
    if (m->client_on) m->rp.on_row = client_row;
    m->rp.final_ud = m;
    return replay_open_trace(&m->rp, o->trace_path, &o->trace_opts);
}

/* ------------------------------------------------------------------ the loop */

static int push_next_arrival(sim_t *m, trace_req_t *next) {
    int rc = replay_next(&m->rp, next);
    if (rc <= 0) return rc;
    double t;
    if (front_end(m, next, &t)) return -1;
    if (m->draft_cost && draft_track(m, next->id)) return -1;
    if (sim_heap_push(&m->heap, (sim_event_t){ .t = t, .type = SIM_EV_ARRIVAL }))
        return fail(m, "out of memory (event heap)");
    return 0;
}

static int run_loop(sim_t *m) {
    trace_req_t next;
    const sched_plan_t *plan = NULL;
    double now = 0, step_start = 0, step_sched = 0, pushed_wake = INFINITY;
    int busy = 0;
    if (push_next_arrival(m, &next)) return -1;

    sim_event_t ev;
    while (sim_heap_pop(&m->heap, &ev)) {
        now = ev.t;
        for (;;) { /* every event at this instant before the next decision */
            if (ev.type == SIM_EV_ARRIVAL) {
                m->hashed_requests += next.n_hash > 0;
                if (replay_add(&m->rp, &next, next.hash_block, now)) return -1;
                if (push_next_arrival(m, &next)) return -1;
            } else if (ev.type == SIM_EV_STEP_DONE) {
                double w0 = wall_now();
                if (m->draft_cost) {
                    draw_acceptances(m, plan);
                    draft_advance(m, plan);
                }
                if (m->o->on_step) {
                    sim_step_info_t si = {
                        .plan = plan, .accepted = m->draft_cost ? m->accepted : NULL,
                        .start_s = step_start, .dur_s = now - step_start,
                        .view = sched_view(m->rp.sched), .kv_used = sched_kv_used(m->rp.sched),
                        .kv_total = sched_kv_total(m->rp.sched),
                    };
                    if (m->o->on_step(m->o->hook_ud, &si) != 0) {
                        stop(m);
                        return -1;
                    }
                }
                if ((m->o->save_tokens || m->client_on) && emit_tokens(m, plan, now))
                    return -1;
                if (sched_commit(m->rp.sched, plan, m->draft_cost ? m->accepted : NULL, now) != 0)
                    return fail(m, "%s", sched_errmsg(m->rp.sched));
                rec_step_t st = {
                    .step = plan->step, .start_s = step_start, .dur_s = now - step_start,
                    .prefill_tokens = plan->prefill_tokens, .decode_tokens = plan->decode_tokens,
                    .pad_tokens = plan->pad_tokens, .num_seqs = plan->n,
                    .num_preempted = plan->num_preempted,
                    .sched_s = step_sched + (wall_now() - w0),
                    .tokens = m->feat.tokens, .pass_seqs = m->feat.seqs,
                    .sampled = m->feat.sampled, .kv_tokens = m->feat.kv_tokens,
                    .attn_pairs = m->feat.attn_pairs, .host_s = m->host_s,
                };
                if (replay_record_step(&m->rp, &st)) return -1;
                m->steps++;
                busy = 0;
                if (replay_after_step(&m->rp, plan)) return -1;
            } else if (ev.type == SIM_EV_WAKE) {
                pushed_wake = INFINITY;
            }
            if (m->rp.failed) return -1;
            const sim_event_t *peek = sim_heap_peek(&m->heap);
            if (!peek || peek->t > now) break;
            sim_heap_pop(&m->heap, &ev);
        }
        if (busy) continue;
        /* a step boundary: nothing in flight, the last step committed and recorded */
        if (replay_interrupted(&m->rp, now)) return -1;

        /* An empty plan that rejected or preempted something changed the state: ask again
         * at this instant (bounded, like wake-ups, against a policy that never settles). */
        for (int again = 1; again;) {
            again = 0;
            double w0 = wall_now();
            if (sched_step(m->rp.sched, now, &plan) != 0) return fail(m, "%s", sched_errmsg(m->rp.sched));
            step_sched = wall_now() - w0;
            if (plan->n > 0 || plan->n_pads > 0) {
                if (seqs_reserve(m, plan->n + plan->n_pads)) return -1;
                double dur = step_cost(m, plan, &m->feat);
                /* The executor's CPU-side work comes before the pass (engine.c measures it
                 * the same way): decided now, the pass starts host_s later. */
                m->host_s = cost_host_time(m->cost, &m->feat);
                step_start = now + m->host_s;
                busy = 1;
                if (sim_heap_push(&m->heap, (sim_event_t){ .t = step_start + dur,
                                                           .type = SIM_EV_STEP_DONE }))
                    return fail(m, "out of memory (event heap)");
                break;
            }
            if (replay_after_idle(&m->rp)) return -1;
            if (plan->num_rejected > 0 || plan->num_preempted > 0) {
                again = 1;
                continue;
            }
            double wake = sched_wakeup(m->rp.sched);
            if (isfinite(wake) && wake != pushed_wake) {
                pushed_wake = wake;
                if (sim_heap_push(&m->heap, (sim_event_t){ .t = wake, .type = SIM_EV_WAKE }))
                    return fail(m, "out of memory (event heap)");
            }
        }
        if (m->o->progress) replay_progress(&m->rp, "sim", now, m->steps, 0);
    }
    if (m->o->progress) replay_progress(&m->rp, "sim", now, m->steps, 1);
    if (m->o->prefix_caching && m->hashed_requests == 0)
        fprintf(stderr, "twinserve sim: note: this trace names no shared prefixes (Mooncake "
                        "hash_ids, or a plain trace's prefix_group,prefix_tokens columns): "
                        "--prefix-caching only spares preempted requests their recompute\n");
    return sched_num_unfinished(m->rp.sched) > 0 ? replay_stalled(&m->rp, now) : 0;
}

/* ------------------------------------------------------------------ entry point */

int sim_run(const sim_opts_t *o, sim_result_t *res, char *err, size_t errlen) {
    sim_t m = { .o = o };
    preset_model_t model;
    preset_hw_t hw;
    int32_t num_blocks = 0;
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
    if (setup(&m, &model, &hw, &num_blocks) != 0) {
        res->setup_failed = 1;
        goto done;
    }
    if (replay_not_started(&m.rp)) goto done;
    if (o->progress) replay_count_trace(&m.rp, o->trace_path, &o->trace_opts);

    if (m.cf && m.cf->kind == COST_FILE_LINEAR)
        snprintf(hw_desc, sizeof hw_desc, "cost file: %.100s",
                 m.cf->fitted_for[0] ? m.cf->fitted_for : o->cost_path);
    else
        snprintf(hw_desc, sizeof hw_desc, "%s x%d", hw.name, o->tp);
    FILE *cf = open_memstream(&config, &config_len);
    if (!cf) {
        fail(&m, "out of memory (run config)");
        goto done;
    }
    fprintf(cf, "{\"num_blocks\":%d,\"block_size\":%d,\"max_tokens\":%d,\"max_seqs\":%d,"
                "\"max_model_len\":%d,\"watermark\":%.17g,\"gpu_util\":%.17g,\"tp\":%d,"
                "\"prefix_caching\":%s,\"kv_blocks_given\":%s,\"cost\":",
            num_blocks, o->block_size, o->max_tokens, o->max_seqs,
            o->max_model_len > 0 ? o->max_model_len : model.max_seq,
            o->watermark, o->gpu_util, o->tp, o->prefix_caching ? "true" : "false",
            o->kv_blocks > 0 ? "true" : "false");
    if (m.cf)
        cost_file_json(cf, m.cf);
    else
        fprintf(cf, "{\"model\":\"roofline\",\"flops_eff\":%.17g,\"bw_eff\":%.17g,"
                    "\"attn_eff\":%.17g,\"overhead_s\":%.17g}",
                o->cost.flops_eff, o->cost.bw_eff, o->cost.attn_eff, o->cost.overhead_s);
    fputs(",\"calibration\":", cf);
    json_write_str(cf, m.calibration);
    fputc(',', cf);
    replay_json_path(cf, "policy_file", o->policy_path);
    fputc(',', cf);
    replay_trace_json(cf, o->trace_path, &o->trace_opts);
    client_json(cf, &m);
    /* What policies were shown of output lengths (replayed by validate, shown by report). */
    fprintf(cf, ",\"oracle_lengths\":%s", o->oracle_lengths ? "true" : "false");
    /* How over-long requests were treated: the load differs between the two. */
    fprintf(cf, ",\"clip_to_context\":%s", o->clip_to_context ? "true" : "false");
    if (o->max_output_tokens > 0) fprintf(cf, ",\"max_output_tokens\":%d", o->max_output_tokens);
    if (o->config_extra) fprintf(cf, ",%s", o->config_extra);
    fputc('}', cf);
    if (fclose(cf) != 0 || !config) {
        fail(&m, "out of memory (run config)");
        goto done;
    }
    rec_run_info_t info = early;
    info.params = lhost_params_json_for(m.rp.host, "sim");
    info.model = model.name;
    info.hardware = hw_desc;
    info.config = config;
    if (replay_begin(&m.rp, &info) != 0) goto done;
    res->run_id = m.rp.run_id;
    run_loop(&m);
    replay_finish(&m.rp);
    res->requests = m.rp.requests;
    res->skipped = m.rp.trace ? trace_skipped(m.rp.trace) : 0;
    res->steps = m.steps;
    res->num_blocks = num_blocks;
    res->wall_s = wall_now() - m.rp.wall0;
    res->stopped = m.stopped;
    snprintf(res->calibration, sizeof res->calibration, "%s", m.calibration);
    if (!m.rp.failed) {
        char e[256];
        res->have_summary =
            summary_load(rec_db(m.rp.rec), m.rp.run_id, &res->summary, e, sizeof e) == 0;
    }
done:
    res->interrupted = m.rp.interrupted;
    if (m.rp.failed) snprintf(err, errlen, "%s", m.rp.err);
    replay_close(&m.rp);
    cost_free(m.cost);
    cost_free(m.draft_cost);
    sim_heap_free(&m.heap);
    free(m.seqs);
    free(m.accepted);
    free(m.client_last);
    free(m.draft_pos);
    free(config);
    free(m.cf);
    return m.rp.failed ? -1 : 0;
}

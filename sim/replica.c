/* replica: one replica of the simulated cluster: its cost model, KV size, policy instance
 * and scheduler (sim_rep_setup), and the costing of its steps (sim_step_cost and the
 * speculative draws). See sim.h for the models and sim_internal.h for what is per replica. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/kv_tier.h"
#include "traces/rng.h"
#include "sim/gpu_ops.h"
#include "sim/serving_cost.h"
#include "sim/sim_internal.h"

/* The model: --model, checked against the cost file's shape when both are given; or the
 * cost file's own; or the default preset. */
static int pick_model(sim_t *m, sim_rep_t *r, preset_model_t *model) {
    const sim_opts_t *o = m->o;
    const char *name = r->spec.model;
    char e[512];
    const char *what = name ? name : "the run's model";
    if (!name && o->model_shape) {
        *model = *o->model_shape;
        if (preset_model_validate(model, e, sizeof e) != 0) return sim_fail(m, "model: %s", e);
    } else if (!name && r->cf) {
        *model = r->cf->model;
        return 0;
    } else if (preset_model_get(name ? name : SIM_DEFAULT_MODEL, model, e, sizeof e)) {
        return sim_fail(m, "--model: %s", e);
    }
    if (o->weight_format && preset_model_set_format(model, o->weight_format, e, sizeof e) != 0)
        return sim_fail(m, "--weight-format: %s", e);
    if (o->kv_dtype && preset_model_set_kv_dtype(model, o->kv_dtype, e, sizeof e) != 0)
        return sim_fail(m, "--kv-dtype: %s", e);
    if (r->cf && cost_file_same_shape(model, &r->cf->model, e, sizeof e) != 0)
        return sim_fail(m, "%s does not have the shape the cost file %s was fitted for (%s: %s); "
                    "a cost model describes one model", what, o->cost_path, r->cf->model.name,
                    e);
    return 0;
}

/* On hardware with no measurement in the data (preset_hw_t.measured 0: every preset but
 * a100-80g, h100 and h200, and any --hw file that does not say measured = 1) the roofline
 * that costs the run uses efficiencies and a link latency nobody measured there: the
 * calibration text, which the run prints and records, says so. */
static void note_unmeasured(sim_rep_t *r, const preset_hw_t *hw) {
    size_t n = strlen(r->calibration);
    if (hw->measured || n >= sizeof r->calibration) return;
    snprintf(r->calibration + n, sizeof r->calibration - n, "; on %.48s the efficiencies "
             "(flops_eff, bw_eff, attn_eff) and link latency are not measured (datasheet "
             "figures only)", hw->name);
}

/* Without --cost, the calibration shipped for this built-in model on this built-in GPU at
 * this tp (cost_file_builtin), unless the roofline was asked for; r->calibration says
 * which model costs the run, and why the roofline when it is the roofline. */
static int pick_builtin(sim_t *m, sim_rep_t *r, const preset_model_t *model,
                        const preset_hw_t *hw) {
    const sim_opts_t *o = m->o;
    char path[320], e[1024];
    if (r->cf) {
        snprintf(r->calibration, sizeof r->calibration, "%s", o->cost_path);
        return 0;
    }
    if (o->roofline) {
        snprintf(r->calibration, sizeof r->calibration, "none: the roofline was asked for");
        note_unmeasured(r, hw);
        return 0;
    }
    int shipped = preset_hw_find(hw->name) &&
                  cost_file_builtin_by_shape(model, hw->name, r->spec.par.tp, path, sizeof path) == 0;
    cost_file_t *cf = malloc(sizeof *cf);
    if (!cf) return sim_fail(m, "out of memory (cost file)");
    if (!shipped) {
        /* no profile of this model: the GPU's operator rates by shape (sim/gpu_ops.h) */
        gpu_ops_t *ops = malloc(sizeof *ops);
        int have_ops = ops && preset_hw_find(hw->name) && gpu_ops_builtin(hw->name, ops) == 0;
        int got = have_ops && gpu_ops_linear(ops, model, hw, r->spec.par.tp, cf, e, sizeof e) == 0;
        free(ops);
        if (!got) {
            free(cf);
            if (have_ops)   /* the rates exist but do not price this shape: their reason */
                snprintf(r->calibration, sizeof r->calibration, "none: %.180s; the roofline's "
                         "efficiencies are guesses", e);
            else
                snprintf(r->calibration, sizeof r->calibration, "none: no shipped calibration "
                         "or operator rates for %.60s on %.60s at tp %d; the roofline's "
                         "efficiencies are guesses", model->name, hw->name, (int)r->spec.par.tp);
            note_unmeasured(r, hw);
            return 0;
        }
        r->cf = cf;
        snprintf(r->calibration, sizeof r->calibration, "synthesized:%.60s.%.40s.tp%d "
                 "(builtin:%.40s operator rates by shape)", model->name, hw->name,
                 (int)r->spec.par.tp, hw->name);
        snprintf(cf->path, sizeof cf->path, "%s", r->calibration);
        return 0;
    }
    if (cost_file_read(path, cf, e, sizeof e) != 0) {
        free(cf);
        return sim_fail(m, "%s", e);
    }
    if (strcmp(cf->model.name, model->name) != 0 && cf->kind == COST_FILE_LINEAR) {
        /* found by its layers: the model's own vocabulary and name */
        cost_file_adopt_shape(cf, model);
        char by[400];
        snprintf(by, sizeof by, "%.300s (the layers of %.60s)", path, cf->fitted_for);
        snprintf(path, sizeof path, "%.318s", by);
    }
    if (cost_file_same_shape(model, &cf->model, e, sizeof e) != 0) {
        snprintf(r->calibration, sizeof r->calibration, "none: %.60s is not the shape of the "
                 "shipped %.100s (%.60s)", model->name, path, e);
        note_unmeasured(r, hw);
        free(cf);
        return 0;
    }
    r->cf = cf;
    snprintf(r->calibration, sizeof r->calibration, "%s", path);
    return 0;
}

/* s:step_cost for replica r's policy: what the run would charge a step of these sequences,
 * its serving profile's CPU and the band's factor included (a speculative step's draft
 * passes are not: the shape says nothing of drafts). */
static double policy_estimate(void *ud, const sched_shape_t *seqs, int32_t n) {
    const sim_rep_t *r = ud;
    const sim_t *m = r->owner;
    cost_features_t f = {.window = r->model.sliding_window};
    for (int32_t i = 0; i < n; i++)
        cost_features_add(&f, seqs[i].n_new, seqs[i].ctx, seqs[i].n_sampled);
    double host, dur;
    sim_serving_step_time(m, r, &f, cost_pass_time(r->cost, &f), &host, &dur);
    return (host + dur) * m->o->cost_scale;
}

/* The KV tiers below replica r's HBM (sim.h: kv_tiers), sized in blocks of the stage's
 * layers on one device, given to its scheduler. */
static int setup_tiers(sim_t *m, sim_rep_t *r, const preset_model_t *stage) {
    const sim_opts_t *o = m->o;
    kv_tier_spec_t sp[KV_TIER_MAX];
    char e[512];
    if (!o->prefix_caching)
        return sim_fail(m, "--kv-tier keeps evicted prefix blocks: it needs --prefix-caching");
    if (o->n_kv_tiers > KV_TIER_MAX)
        return sim_fail(m, "--kv-tier given %d times: at most %d tiers", o->n_kv_tiers,
                        KV_TIER_MAX);
    r->tier_block_bytes = (double)o->block_size * preset_model_kv_bytes_device(stage, r->spec.par.tp);
    for (int i = 0; i < o->n_kv_tiers; i++) {
        if (kv_tier_parse(o->kv_tiers[i], r->tier_block_bytes, &sp[i], e, sizeof e) != 0)
            return sim_fail(m, "--kv-tier: %s", e);
        if (!strcmp(sp[i].kind, "pool"))
            return sim_fail(m, "--kv-tier %s: the shared pool needs the cluster-wide index "
                            "(issue #31, item 2), which is not built yet; use dram or ssd "
                            "tiers per replica", o->kv_tiers[i]);
    }
    if (kv_tier_check(sp, o->n_kv_tiers, e, sizeof e) != 0) return sim_fail(m, "--kv-tier: %s", e);
    if (!(r->tiers = kv_tiers_new(sp, o->n_kv_tiers))) return sim_fail(m, "out of memory (KV tiers)");
    sched_t *s = m->rp.reps[r->index].sched;
    if (sched_set_tiers(s, r->tiers) != 0) return sim_fail(m, "%s", sched_errmsg(s));
    return 0;
}

/* Loads replica r's cost file, presets and policy; sizes its KV cache; builds its
 * scheduler (replica r.index of the replay). */
int sim_rep_setup(sim_t *m, sim_rep_t *r) {
    const sim_opts_t *o = m->o;
    const sim_spec_t *sp = &r->spec;
    preset_model_t *model = &r->model;
    preset_hw_t *hw = &r->hw;
    char e[1024];
    if (o->cost_path) {
        if (!(r->cf = malloc(sizeof *r->cf))) return sim_fail(m, "out of memory (cost file)");
        if (cost_file_read(o->cost_path, r->cf, e, sizeof e) != 0)
            return sim_fail(m, "--cost: %s", e);
    }
    if (pick_model(m, r, model)) return -1;
    const char *fitted_hw = r->cf && r->cf->hw_preset[0] ? r->cf->hw_preset : NULL;
    if (fitted_hw && sp->hw && strcmp(sp->hw, fitted_hw) != 0)
        return sim_fail(m, "--hw %s, but the cost file %s was fitted on %s", sp->hw,
                        o->cost_path, fitted_hw);
    if (r->cf && r->cf->kind == COST_FILE_ROOFLINE) *hw = r->cf->hw;
    else if (preset_hw_get(sp->hw ? sp->hw : fitted_hw ? fitted_hw : SIM_DEFAULT_HW, hw, e,
                           sizeof e) != 0)
        return sim_fail(m, "--hw: %s", e);
    const par_t *par = &sp->par;
    const int32_t tp = par->tp;
    if (tp < 1) return sim_fail(m, "--tp must be >= 1 (got %d)", tp);
    if (r->cf && r->cf->kind == COST_FILE_LINEAR && sp->kv_blocks <= 0 && !fitted_hw)
        return sim_fail(m, "--cost %s models one machine, not a hardware preset: give its KV "
                        "capacity with --kv-blocks N (an engine run's num_blocks)", o->cost_path);
    if (!r->cf && tp > 1 && model->n_heads % tp != 0)
        return sim_fail(m, "--tp %d does not divide %s's %d attention heads", (int)tp,
                        model->name, (int)model->n_heads);
    if (!par_is_tp_only(par)) {
        char spec[128];
        par_format(par, spec, sizeof spec);
        if (par_check(par, model, hw, e, sizeof e) != 0)
            return sim_fail(m, "--parallel %s on %s: %s", spec, hw->name, e);
        if (par->pp > 1 && o->cost_path)
            return sim_fail(m, "--parallel %s: a --cost file prices the whole model on one "
                            "device group, not one pipeline stage; pipelines are priced from "
                            "the GPU's operator rates or the roofline (leave out --cost)", spec);
    }
    /* what one device group computes: the fullest pipeline stage (the model at pp 1) */
    preset_model_t stage;
    par_stage_model(model, par, &stage);
    if (pick_builtin(m, r, &stage, hw)) return -1;
    /* the run's serving profile follows replica 0's hardware (sim_serving.c) */
    if (r->index == 0 && sim_serving_pick(m, hw->name, r->cf)) return -1;
    const serving_t *sv = &m->serving;

    if (replay_load_policy_at(&m->rp, r->index, sp->policy_path, sp->sets, sp->n_sets,
                              &o->limits))
        return -1;
    lhost_t *host = m->rp.reps[r->index].host;

    /* Speculative policies name a draft model and an acceptance rate in their params. */
    char draft_name[256];
    preset_model_t draft;
    int has_draft = lhost_param_str(host, "draft", draft_name, sizeof draft_name);
    if (has_draft < 0) return sim_fail(m, "policy param 'draft' must be a model preset name");
    int draft_by_cf = 0;   /* the cost file's model has the draft's shape: it costs both */
    if (has_draft) {
        if (o->draft_shape) {
            draft = *o->draft_shape;
            snprintf(draft_name, sizeof draft_name, "%s", draft.name);
        } else if (preset_model_get(draft_name, &draft, e, sizeof e) != 0) {
            return sim_fail(m, "policy param draft: %s", e);
        }
        draft_by_cf = r->cf && cost_file_same_shape(&draft, &r->cf->model, e, sizeof e) == 0;
        int rc = lhost_param_num(host, "alpha", &r->alpha);
        if (rc != 1 || !(r->alpha >= 0 && r->alpha <= 1))
            return sim_fail(m, "a policy with a 'draft' model needs a param 'alpha' in [0, 1]");
        /* a cost file of one machine cannot cost another model; one fitted for a
         * hardware preset can leave the draft to the roofline on that preset */
        if (r->cf && !r->cf->hw_preset[0] && !draft_by_cf)
            return sim_fail(m, "--cost %s models %s only, not the policy's draft model '%s'; "
                            "simulate speculative decoding with the roofline (--hw)",
                            o->cost_path, r->cf->model.name, draft_name);
    }

    if (sp->kv_blocks > 0) {
        r->num_blocks = sp->kv_blocks;
    } else if (sv->active && !has_draft) {
        /* vLLM sizes its KV cache by profiling its memory at startup (serving.h) */
        r->num_blocks = serving_kv_blocks(sv, &stage, hw, tp, par->dp, sp->gpu_util,
                                          o->block_size, o->max_tokens, o->max_seqs, NULL, e,
                                          sizeof e);
        if (r->num_blocks < 0) return sim_fail(m, "%s", e);
    } else {
        r->num_blocks = sim_kv_blocks(&stage, has_draft ? &draft : NULL, hw, tp, par->dp,
                                      sp->gpu_util, o->block_size, o->max_tokens, o->max_seqs, e,
                                      sizeof e);
        if (r->num_blocks < 0) return sim_fail(m, "%s", e);
    }
    if (has_draft && !par_is_tp_only(par))
        return sim_fail(m, "a draft model with --parallel beyond tp is not modelled (the draft "
                        "runs on one device of a tensor-parallel replica)");

    /* the split's communication beyond tp (sim/parallel.h) */
    double a2a_lat, a2a_spt, p2p_lat, p2p_spt;
    if (par_a2a(par, &stage, hw, o->cost.bw_eff, &a2a_lat, &a2a_spt, e, sizeof e) != 0 ||
        par_p2p(par, &stage, hw, o->cost.bw_eff, &p2p_lat, &p2p_spt, e, sizeof e) != 0)
        return sim_fail(m, "--parallel: %s", e);
    cost_roofline_params_t cp = o->cost;
    cp.tp = tp;
    cp.dp = par->dp;
    cp.ep = par->ep;
    cp.a2a_latency_s = a2a_lat;
    cp.a2a_s_per_token = a2a_spt;
    serving_adjust_roofline(sv, &cp);
    if (r->cf) {
        /* the serving engine's kernels change the file's own terms (serving_cost.h) */
        cost_file_t *adj = malloc(sizeof *adj);
        if (!adj) return sim_fail(m, "out of memory (cost file)");
        *adj = *r->cf;
        if (adj->kind == COST_FILE_LINEAR) {
            adj->lin.tp = adj->lin.tp > 1 ? adj->lin.tp : 1;
            /* a file fitted for a hardware preset (a shipped or synthesized GPU
             * calibration) knows its bandwidth; one of a single machine does not */
            serving_adjust_linear(sv, &adj->lin, &stage, adj->hw_preset[0] ? hw : NULL);
            cost_file_attn_shape(&stage, &adj->lin);
            par_apply_linear(par, &stage, a2a_lat, a2a_spt, &adj->lin);
        } else {
            serving_adjust_roofline(sv, &adj->roof);
            par_apply_roofline(par, a2a_lat, a2a_spt, &adj->roof);
        }
        r->cost = cost_file_model(adj, tp, e, sizeof e);
        free(adj);
        if (!r->cost) return sim_fail(m, "%s", e);
    } else {
        if (cost_roofline_check(&stage, hw, &cp, e, sizeof e) != 0) return sim_fail(m, "%s", e);
        r->cost = cost_roofline_new(&stage, hw, &cp);
    }
    /* each rank's CUDA graphs are for its own batch; each stage's step is graphed or eager
     * on its own, and the pipeline runs the stages' steps */
    r->graph_max = serving_graph_max(sv, o->max_seqs, o->max_tokens);
    if (r->cost && !(r->cost = serving_cost_wrap(sv, r->cost, &stage, r->graph_max)))
        return sim_fail(m, "out of memory (cost model)");
    if (r->cost && !(r->cost = par_pipeline_new(r->cost, par, p2p_lat, p2p_spt)))
        return sim_fail(m, "out of memory (cost model)");
    if (has_draft && draft_by_cf) {
        if (!(r->draft_cost = cost_file_model(r->cf, 1, e, sizeof e))) return sim_fail(m, "%s", e);
        m->any_draft = 1;
    } else if (has_draft) {
        cost_roofline_params_t dp = cp;
        dp.tp = 1; /* a small draft model runs on one device */
        r->draft_cost = cost_roofline_new(&draft, hw, &dp);
        m->any_draft = 1;
    }
    if (!r->cost || (has_draft && !r->draft_cost)) return sim_fail(m, "out of memory (cost model)");

    sched_config_t cfg = {
        .num_blocks = r->num_blocks, .block_size = o->block_size, .watermark = o->watermark,
        /* dp ranks' schedulers as one: their per-rank limits summed (sim/parallel.h) */
        .max_tokens = o->max_tokens * par->dp, .max_seqs = o->max_seqs * par->dp,
        .max_model_len = o->max_model_len > 0 ? o->max_model_len : model->max_seq,
        .seed = o->seed, .prefix_caching = o->prefix_caching,
        .max_output_tokens = o->max_output_tokens, .oracle_lengths = o->oracle_lengths,
        .clip_to_context = o->clip_to_context,
    };
    /* vLLM's hybrid allocator frees a window layer's blocks that left its window (sched.h);
     * not with prefix caching (not modelled with it) or a draft model's KV in the blocks */
    if (stage.sliding_window > 0 && stage.n_window_layers > 0 && !o->prefix_caching &&
        !has_draft) {
        cfg.window_tokens = stage.sliding_window;
        cfg.window_share = (double)stage.n_window_layers / stage.n_layers;
    }
    r->pushed_wake = INFINITY;
    if (replay_start_sched_at(&m->rp, r->index, &cfg)) return -1;
    if (o->n_kv_tiers > 0 && setup_tiers(m, r, &stage)) return -1;
    r->owner = m;
    sched_set_cost_fn(m->rp.reps[r->index].sched, policy_estimate, r);
    return 0;
}

void sim_rep_free(sim_rep_t *r) {
    kv_tiers_free(r->tiers);
    cost_free(r->cost);
    cost_free(r->draft_cost);
    free(r->cf);
}

/* ------------------------------------------------------------------ costing */

int sim_seqs_reserve(sim_t *m, int32_t n) {
    if (n <= m->seqs_cap) return 0;
    int32_t cap = n * 2;
    cost_seq_t *v = realloc(m->seqs, sizeof *v * (size_t)cap);
    int32_t *a = realloc(m->accepted, sizeof *a * (size_t)cap);
    if (v) m->seqs = v;
    if (a) m->accepted = a;
    if (!v || !a) return sim_fail(m, "out of memory costing a step");
    m->seqs_cap = cap;
    return 0;
}

/* The target's pass over the whole plan (its features in *f), plus, for speculative
 * policies, the draft model: one pass over the prefills and the first draft token, then
 * k - 1 single-token passes. The first pass also runs what the draft model is behind on:
 * after a step that accepted all k drafts, the last draft (proposed, never run through the
 * draft model) besides the target's bonus token, so 2 tokens (draft_pos, draft_advance). */
double sim_step_cost(sim_t *m, sim_rep_t *r, const sched_plan_t *p, cost_features_t *f) {
    int32_t n = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        m->seqs[n++] = (cost_seq_t){ e->num_tokens + e->num_spec, e->start,
                                     e->sample ? 1 + e->num_spec : 0 };
    }
    for (int32_t i = 0; i < p->n_pads; i++)
        m->seqs[n++] = (cost_seq_t){ p->pads[i].num_tokens, p->pads[i].ctx,
                                     p->pads[i].ctx > 0 ? p->pads[i].num_tokens : 0 };
    cost_features_window(m->seqs, n, r->model.sliding_window, f);
    double t = cost_pass_time(r->cost, f);
    if (r->tiers) {
        /* reloads from the tiers below HBM: the overlapped ones run under the pass (layer
         * by layer), the others before it */
        double ov, ser;
        kv_tier_reload_s(r->tiers, p->reload_blocks, r->tier_block_bytes, &ov, &ser);
        t = fmax(t, ov) + ser;
    }
    if (!r->draft_cost) return t;
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
    t += cost_step_time(r->draft_cost, m->seqs, n);
    for (int32_t j = 1; j < kmax; j++) {
        n = 0;
        for (int32_t i = 0; i < p->n; i++) {
            const sched_entry_t *e = &p->entries[i];
            if (e->is_decode && e->num_spec > j) m->seqs[n++] = (cost_seq_t){ 1, e->start + j, 1 };
        }
        t += cost_step_time(r->draft_cost, m->seqs, n);
    }
    return t;
}

/* After step p with its acceptances drawn: the positions the draft model now holds valid
 * K/V for. A prefill (or recompute) runs through it; a verified step leaves its passes'
 * K/V up to the last draft it ran (start + k - 1), and only up to the accepted ones. A
 * decode without drafts leaves it behind by one more token. */
void sim_draft_advance(sim_t *m, const sched_plan_t *p) {
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
void sim_draw_acceptances(sim_t *m, sim_rep_t *r, const sched_plan_t *p) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &p->entries[i];
        int32_t a = 0;
        if (e->num_spec > 0) {
            rng_t g;
            rng_seed3(&g, m->o->seed, (uint64_t)e->req_id, (uint64_t)e->req->generated);
            while (a < e->num_spec && rng_uniform(&g) < r->alpha) a++;
        }
        m->accepted[i] = a;
    }
}


/* serving_cost: see serving_cost.h. */
#include "sim/serving_cost.h"

#include <math.h>
#include <stdlib.h>

void serving_adjust_linear(const serving_t *s, cost_linear_params_t *p, const preset_model_t *m,
                           const preset_hw_t *hw) {
    if (!s->active) return;
    const int32_t tp = p->tp > 1 ? p->tp : 1;
    if (isfinite(s->attn_kv_bw_eff) && hw && hw->mem_bw > 0) {
        const double bytes = preset_model_kv_bytes_device(m, tp);
        p->kv_token_s = bytes / (s->attn_kv_bw_eff * hw->mem_bw);
        p->n_kv_knots = 0;
    }
    if (tp > 1) serving_allreduce(s, tp, &p->allreduce_latency_s, &p->allreduce_s_per_byte);
    double lat, spb;   /* vLLM's custom all-reduce stays within a node: the network beyond */
    if (hw && preset_hw_multinode_allreduce(hw, tp, &lat, &spb, NULL, 0) == 1)
        p->allreduce_latency_s = lat, p->allreduce_s_per_byte = spb;
    if (isfinite(s->moe_gemm_eff) && s->moe_gemm_eff > 0) p->moe_eff = s->moe_gemm_eff;
}

void serving_adjust_roofline(const serving_t *s, cost_roofline_params_t *p) {
    if (!s->active) return;
    if (isfinite(s->attn_kv_bw_eff)) p->attn_bw_eff = s->attn_kv_bw_eff;
    if (p->tp > 1) serving_allreduce(s, p->tp, &p->ar_latency_s, &p->ar_s_per_byte);
    if (isfinite(s->moe_gemm_eff) && s->moe_gemm_eff > 0) p->moe_eff = s->moe_gemm_eff;
}

typedef struct {
    cost_model_t base;        /* first: a cost_model_t * is the object */
    cost_model_t *inner;
    int32_t graph_max;
    double eager_floor_s;     /* launches x launch_s of an eager step */
} wrap_t;

static double wrap_pass(const cost_model_t *m, const cost_features_t *f) {
    const wrap_t *w = (const wrap_t *)m;
    if (f->tokens <= 0) return 0;
    if (f->tokens <= w->graph_max) {
        cost_features_t g = *f;
        g.tokens = serving_padded_tokens((int32_t)f->tokens, w->graph_max);
        return cost_pass_time(w->inner, &g);
    }
    return fmax(cost_pass_time(w->inner, f), w->eager_floor_s);
}

static void wrap_destroy(cost_model_t *m) {
    wrap_t *w = (wrap_t *)m;
    cost_free(w->inner);
    free(w);
}

cost_model_t *serving_cost_wrap(const serving_t *s, cost_model_t *base, const preset_model_t *m,
                                int32_t graph_max) {
    if (!base || !s->active) return base;
    wrap_t *w = calloc(1, sizeof *w);
    if (!w) {
        cost_free(base);
        return NULL;
    }
    w->base.pass_time = wrap_pass;
    w->base.host_time = NULL;   /* the engine's CPU is the profile's (sim.c) */
    w->base.destroy = wrap_destroy;
    w->base.name = base->name;
    w->inner = base;
    w->graph_max = graph_max;
    w->eager_floor_s = (double)m->n_layers * s->kernels_per_layer * s->launch_s;
    return &w->base;
}

/* parallel: see parallel.h. */
#include "sim/parallel.h"
#include "sim/errf.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void par_default(par_t *p, int32_t tp) {
    *p = (par_t){.tp = tp > 0 ? tp : 1, .dp = 1, .ep = 1, .pp = 1, .mb = 0, .pp_sync = 0};
}

int32_t par_gpus(const par_t *p) { return p->tp * p->dp * p->pp; }

int par_is_tp_only(const par_t *p) { return p->dp == 1 && p->ep == 1 && p->pp == 1; }

int par_parse(const char *spec, par_t *p, char *err, size_t errlen) {
    static const char *const keys[] = {"tp", "dp", "ep", "pp", "mb", "sched"};
    enum { NK = sizeof keys / sizeof *keys };
    int seen[NK] = {0};
    par_default(p, 1);
    if (!spec || !*spec)
        return errf(err, errlen, "an empty parallel spec (give e.g. tp=8,ep=8 or tp=4,pp=2)");
    const char *s = spec;
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        char item[64];
        if (len == 0 || len >= sizeof item)
            return errf(err, errlen, "parallel spec '%s': %s item at offset %d", spec,
                        len ? "an overlong" : "an empty", (int)(s - spec));
        memcpy(item, s, len);
        item[len] = 0;
        char *eq = strchr(item, '=');
        if (!eq)
            return errf(err, errlen, "parallel spec '%s': '%s' is not KEY=VALUE (keys: tp, dp, "
                        "ep, pp, mb, sched)", spec, item);
        *eq = 0;
        const char *val = eq + 1;
        int k = -1;
        for (int i = 0; i < NK; i++)
            if (!strcmp(item, keys[i])) k = i;
        if (k < 0)
            return errf(err, errlen, "parallel spec '%s': unknown key '%s' (keys: tp, dp, ep, pp, "
                        "mb, sched)", spec, item);
        if (seen[k]++) return errf(err, errlen, "parallel spec '%s': %s given twice", spec, item);
        if (k == 5) {
            if (!strcmp(val, "async")) p->pp_sync = 0;
            else if (!strcmp(val, "sync")) p->pp_sync = 1;
            else
                return errf(err, errlen, "parallel spec '%s': sched=%s is not async or sync",
                            spec, val);
        } else {
            char *stop;
            errno = 0;
            long v = strtol(val, &stop, 10);
            if (!*val || *stop || errno || v < 1 || v > 65536)
                return errf(err, errlen, "parallel spec '%s': %s=%s is not a whole number in "
                            "[1, 65536]", spec, item, val);
            int32_t *f[] = {&p->tp, &p->dp, &p->ep, &p->pp, &p->mb};
            *f[k] = (int32_t)v;
        }
        s += len;
        if (*s == ',') s++;
    }
    if (p->pp == 1 && (seen[4] || seen[5]))
        return errf(err, errlen, "parallel spec '%s': mb and sched are a pipeline's (give pp > 1)",
                    spec);
    return 0;
}

void par_format(const par_t *p, char *buf, size_t n) {
    int k = snprintf(buf, n, "tp=%d,dp=%d,ep=%d,pp=%d", (int)p->tp, (int)p->dp, (int)p->ep,
                     (int)p->pp);
    if (p->pp > 1 && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, ",mb=%d,sched=%s", (int)(p->mb > 0 ? p->mb : p->pp),
                 p->pp_sync ? "sync" : "async");
}

int par_check(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, char *err,
              size_t errlen) {
    const int moe = preset_model_is_moe(m);
    const int32_t stage = p->tp * p->dp, all = par_gpus(p);
    if (preset_model_check_tp(m, p->tp, err, errlen) != 0) return -1;
    if (p->dp > 1 && !moe)
        return errf(err, errlen, "dp %d: %s is dense, and dense data-parallel ranks are "
                    "independent replicas (use --replicas %d)", (int)p->dp, m->name, (int)p->dp);
    if (p->ep > 1 && !moe)
        return errf(err, errlen, "ep %d: %s has no experts", (int)p->ep, m->name);
    if (p->ep != 1 && p->ep != stage)
        return errf(err, errlen, "ep %d: expert parallelism spans a stage's tp x dp = %d GPUs "
                    "(ep=%d) or none (ep=1)", (int)p->ep, (int)stage, (int)stage);
    if (p->dp > 1 && p->ep != stage)
        return errf(err, errlen, "dp %d needs expert parallelism over its ranks: ep=%d (the "
                    "ranks meet in the expert layers)", (int)p->dp, (int)stage);
    if (p->ep > 1 && m->n_experts % p->ep != 0)
        return errf(err, errlen, "ep %d does not divide %s's %d experts", (int)p->ep, m->name,
                    (int)m->n_experts);
    if (p->pp > m->n_layers)
        return errf(err, errlen, "pp %d: %s has only %d layers to split into stages", (int)p->pp,
                    m->name, (int)m->n_layers);
    if (all > 1 && !(hw->link_bw > 0))
        return errf(err, errlen, "%d GPUs need the interconnect bandwidth: %s has no link_bw",
                    (int)all, hw->name);
    if (hw->node_gpus > 0 && all > hw->node_gpus && !(hw->net_bw > 0))
        return errf(err, errlen, "%d GPUs span %d nodes of %d %s GPUs, and the network between "
                    "them is unknown (net_bw)", (int)all,
                    (int)((all + hw->node_gpus - 1) / hw->node_gpus), (int)hw->node_gpus,
                    hw->name);
    return 0;
}

void par_stage_model(const preset_model_t *m, const par_t *p, preset_model_t *stage) {
    *stage = *m;
    if (p->pp <= 1) return;
    const int32_t L = m->n_layers, n = (L + p->pp - 1) / p->pp;
    /* the last stage: the last n layers, so the dense first layers it holds are those past
     * the first L - n */
    stage->n_layers = n;
    int32_t dense = m->n_dense_layers - (L - n);
    stage->n_dense_layers = dense > 0 ? dense : 0;
    stage->n_window_layers = (int32_t)lround((double)m->n_window_layers * n / L);
}

/* The link a group of `span` GPUs talks over: NVLink at bw_eff within a node, the network
 * beyond. Returns seconds per byte and the latency; -1 when the figure is unknown. */
static int path(const preset_hw_t *hw, int32_t span, double bw_eff, double *s_per_byte,
                double *latency_s, char *err, size_t errlen) {
    if (hw->node_gpus > 0 && span > hw->node_gpus) {
        if (!(hw->net_bw > 0))
            return errf(err, errlen, "%d GPUs span nodes of %d %s GPUs, and the network between "
                        "them is unknown (net_bw)", (int)span, (int)hw->node_gpus, hw->name);
        *s_per_byte = 1.0 / hw->net_bw;
        *latency_s = hw->link_latency + hw->net_latency;
        return 0;
    }
    if (!(hw->link_bw > 0))
        return errf(err, errlen, "%d GPUs need the interconnect bandwidth: %s has no link_bw",
                    (int)span, hw->name);
    *s_per_byte = 1.0 / (hw->link_bw * bw_eff);
    *latency_s = hw->link_latency;
    return 0;
}

int par_a2a(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, double bw_eff,
            double *latency_s, double *s_per_token, char *err, size_t errlen) {
    *latency_s = *s_per_token = 0;
    if (p->dp <= 1 || !preset_model_is_moe(m)) return 0;
    const double G = (double)p->tp * p->dp, k = m->experts_per_tok;
    const double tok = (double)m->d_model * m->dtype_bytes;
    /* the other GPUs a token's k experts land on (each of the G - 1 holds one of them with
     * probability 1 - (1 - 1/G)^k, experts spread evenly) */
    const double remote = (G - 1.0) * (1.0 - pow(1.0 - 1.0 / G, k));
    /* a GPU sends its T / G tokens' copies: per token of the pass, remote x tok / G bytes */
    const double per_token = remote * tok / G;
    double spb_in = 0, lat_in = 0;
    if (path(hw, hw->node_gpus > 0 && hw->node_gpus < (int32_t)G ? hw->node_gpus : (int32_t)G,
             bw_eff, &spb_in, &lat_in, err, errlen) != 0)
        return -1;
    double t_in = per_token * spb_in, lat = lat_in;
    if (hw->node_gpus > 0 && G > hw->node_gpus) {
        double spb_net = 0, lat_net = 0;
        if (path(hw, (int32_t)G, bw_eff, &spb_net, &lat_net, err, errlen) != 0) return -1;
        const double off = (G - hw->node_gpus) / (G - 1.0);   /* of the remote GPUs */
        t_in = fmax(per_token * (1.0 - off) * spb_in, per_token * off * spb_net);
        lat = lat_net;
    }
    /* dispatch, then combine: the same volume back */
    *latency_s = 2.0 * lat;
    *s_per_token = 2.0 * t_in;
    return 0;
}

int par_p2p(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, double bw_eff,
            double *latency_s, double *s_per_token, char *err, size_t errlen) {
    *latency_s = *s_per_token = 0;
    if (p->pp <= 1) return 0;
    double spb = 0, lat = 0;
    if (path(hw, par_gpus(p), bw_eff, &spb, &lat, err, errlen) != 0) return -1;
    *latency_s = lat;
    *s_per_token = (double)m->d_model * m->dtype_bytes * spb;
    return 0;
}

void par_apply_roofline(const par_t *p, double a2a_latency_s, double a2a_s_per_token,
                        cost_roofline_params_t *rp) {
    rp->dp = p->dp;
    rp->ep = p->ep;
    rp->a2a_latency_s = a2a_latency_s;
    rp->a2a_s_per_token = a2a_s_per_token;
}

void par_apply_linear(const par_t *p, const preset_model_t *stage, double a2a_latency_s,
                      double a2a_s_per_token, cost_linear_params_t *lp) {
    lp->dp = p->dp;
    lp->a2a_latency_s = a2a_latency_s;
    lp->a2a_s_per_token = a2a_s_per_token;
    if (p->ep > 1 && lp->moe_layers > 0) {
        lp->moe_experts = (double)stage->n_experts / p->ep;
        lp->moe_top_k = (double)stage->experts_per_tok / p->ep;
        lp->moe_expert_params = preset_model_expert_params(stage);
    }
}

void par_split_features(const cost_features_t *f, int32_t m, cost_features_t *out) {
    if (m <= 1) {
        *out = *f;
        return;
    }
    const int64_t d = m;
    out->tokens = f->tokens > 0 ? (f->tokens + d - 1) / d : 0;
    out->seqs = (f->seqs + d - 1) / d;
    out->sampled = (f->sampled + d - 1) / d;
    out->kv_tokens = (f->kv_tokens + d - 1) / d;
    out->attn_pairs = (f->attn_pairs + d - 1) / d;
    out->window = f->window;
    out->kv_tokens_w = (f->kv_tokens_w + d - 1) / d;
    out->attn_pairs_w = (f->attn_pairs_w + d - 1) / d;
    out->pf_kv_tokens = (f->pf_kv_tokens + d - 1) / d;
    out->pf_attn_pairs = (f->pf_attn_pairs + d - 1) / d;
}

typedef struct {
    cost_model_t base;   /* first: a cost_model_t * is the object */
    cost_model_t *stage;
    int32_t pp, mb, sync;
    double lat, spt;
} pipe_t;

static double pipe_pass(const cost_model_t *cm, const cost_features_t *f) {
    const pipe_t *w = (const pipe_t *)cm;
    if (f->tokens <= 0) return 0;
    int64_t m = w->mb;
    if (f->seqs < m) m = f->seqs > 0 ? f->seqs : 1;
    cost_features_t g;
    par_split_features(f, (int32_t)m, &g);
    const double t = cost_pass_time(w->stage, &g) + w->lat + w->spt * (double)g.tokens;
    const double slots = w->sync ? (double)(m + w->pp - 1) : (double)(m > w->pp ? m : w->pp);
    return slots * t;
}

static double pipe_host(const cost_model_t *cm, const cost_features_t *f) {
    return cost_host_time(((const pipe_t *)cm)->stage, f);
}

static void pipe_destroy(cost_model_t *cm) {
    pipe_t *w = (pipe_t *)cm;
    cost_free(w->stage);
    free(w);
}

cost_model_t *par_pipeline_new(cost_model_t *stage, const par_t *p, double p2p_latency_s,
                               double p2p_s_per_token) {
    if (!stage || p->pp <= 1) return stage;
    pipe_t *w = calloc(1, sizeof *w);
    if (!w) {
        cost_free(stage);
        return NULL;
    }
    w->base.pass_time = pipe_pass;
    w->base.host_time = stage->host_time ? pipe_host : NULL;
    w->base.destroy = pipe_destroy;
    w->base.name = stage->name;
    w->stage = stage;
    w->pp = p->pp;
    w->mb = p->mb > 0 ? p->mb : p->pp;
    w->sync = p->pp_sync;
    w->lat = p2p_latency_s;
    w->spt = p2p_s_per_token;
    return &w->base;
}

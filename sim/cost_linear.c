/* cost_linear: the calibrated step-cost model (cost.h has its formula). Fitted by
 * sim/fit.c from a profile or a measured run, read from and written to cost files by
 * sim/cost_file.c. A call is a handful of multiply-adds and two knot lookups (binary
 * search), as cheap as the roofline. */
#include "sim/cost.h"
#include "sim/errf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cost_model_t base;   /* first, so a cost_model_t * is the object */
    cost_linear_params_t p;
} linear_t;

void cost_linear_gemm_weights(const double *knot_rows, int32_t n_knots, double rows,
                              double *w) {
    memset(w, 0, sizeof *w * (size_t)n_knots);
    if (!(rows > 0) || n_knots < 1) return;
    if (rows <= knot_rows[0]) {              /* memory-bound floor */
        w[0] = 1;
        return;
    }
    if (rows >= knot_rows[n_knots - 1]) {    /* compute-bound: the last rate per row */
        w[n_knots - 1] = rows / knot_rows[n_knots - 1];
        return;
    }
    int32_t lo = 0, hi = n_knots - 1;        /* knot_rows[lo] < rows < knot_rows[hi] */
    while (hi - lo > 1) {
        int32_t mid = (lo + hi) / 2;
        if (knot_rows[mid] <= rows) lo = mid;
        else hi = mid;
    }
    double a = (rows - knot_rows[lo]) / (knot_rows[hi] - knot_rows[lo]);
    w[lo] = 1 - a;
    w[hi] = a;
}

/* gemm(rows): cost_linear_gemm_weights' interpolation without its weight vector (a call
 * per simulated step must not clear hundreds of knots' weights). */
static double curve(const double *x, const double *v, int32_t n, double rows) {
    if (!(rows > 0) || n < 1) return 0.0;
    if (rows <= x[0]) return v[0];
    if (rows >= x[n - 1]) return v[n - 1] * rows / x[n - 1];
    int32_t lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int32_t mid = (lo + hi) / 2;
        if (x[mid] <= rows) lo = mid;
        else hi = mid;
    }
    double a = (rows - x[lo]) / (x[hi] - x[lo]);
    return (1 - a) * v[lo] + a * v[hi];
}

static double gemm(const cost_linear_params_t *p, double rows) {
    return curve(p->knot_rows, p->knot_s, p->n_knots, rows);
}

double cost_linear_kv_time(const cost_linear_params_t *p, double positions) {
    double t = p->kv_token_s * positions;
    for (int32_t j = 0; j < p->n_kv_knots && positions > p->kv_knots[j]; j++)
        t += p->kv_extra_s[j] * (positions - p->kv_knots[j]);
    return t;
}

double cost_linear_comm_time(const cost_linear_params_t *p, double tokens) {
    if (p->tp <= 1 || !(tokens > 0)) return 0.0;
    return p->allreduces *
           (p->allreduce_latency_s + p->allreduce_s_per_byte * tokens * p->ar_bytes_per_token);
}

double cost_moe_experts_touched(double experts, double top_k, double tokens) {
    if (!(experts > 0) || !(tokens > 0)) return 0.0;
    if (top_k >= experts) return experts;
    return experts * (1.0 - pow(1.0 - top_k / experts, tokens));
}

/* moe_gemm(rows): the experts' own knots, else the layers' curve. */
static double moe_gemm(const cost_linear_params_t *p, double rows) {
    if (p->n_moe_knots < 1) return gemm(p, rows);
    return curve(p->moe_knot_rows, p->moe_knot_s, p->n_moe_knots, rows);
}

double cost_linear_moe_time(const cost_linear_params_t *p, double tokens) {
    if (!(p->moe_layers > 0) || !(tokens > 0)) return 0.0;
    double touched = cost_moe_experts_touched(p->moe_experts, p->moe_top_k, tokens);
    double rows = tokens * p->moe_top_k / touched;
    double eff = p->moe_eff > 0 ? p->moe_eff : 1.0;
    return p->moe_layers * touched * p->moe_expert_params * moe_gemm(p, rows) / eff;
}

static double linear_pass_time(const cost_model_t *m, const cost_features_t *f) {
    const cost_linear_params_t *p = &((const linear_t *)m)->p;
    if (f->tokens <= 0) return 0.0;
    /* one data-parallel rank's share of all but the experts (cost.h) */
    const double r = cost_rank_share(f, p->dp);
    const double T = (double)f->tokens, S = (double)f->sampled * r;
    double a2a = 0;
    if (p->dp > 1 && p->moe_layers > 0)
        a2a = p->moe_layers * (p->a2a_latency_s + p->a2a_s_per_token * T);
    /* window layers read their windows only (cost.h) */
    const double w = p->window_share;
    const double kv = (1 - w) * (double)f->kv_tokens + w * cost_kv_w(f);
    double pairs = (1 - w) * (double)f->attn_pairs + w * cost_pairs_w(f), mla = 0;
    if (p->mla_pf_pair_scale > 0 && f->pf_attn_pairs > 0) {
        /* latent attention prefills in the expanded form (cost.h) */
        pairs -= (1 - p->mla_pf_pair_scale) * (double)f->pf_attn_pairs;
        mla = p->mla_expand_params * gemm(p, (double)f->pf_kv_tokens * r);
    }
    return p->step_s + p->seq_s * (double)f->seqs * r + p->layer_params * gemm(p, T * r) +
           p->lm_params * gemm(p, S) + p->sampled_s * S + cost_linear_kv_time(p, kv * r) +
           p->attn_pair_s * pairs * r + cost_linear_comm_time(p, T * r) +
           cost_linear_moe_time(p, T) + a2a + mla;
}

static double linear_host_time(const cost_model_t *m, const cost_features_t *f) {
    const cost_linear_params_t *p = &((const linear_t *)m)->p;
    if (f->tokens <= 0) return 0.0;
    return p->host_step_s + p->host_seq_s * (double)f->seqs +
           p->host_token_s * (double)f->tokens;
}

static void linear_destroy(cost_model_t *m) { free(m); }

int cost_linear_check(const cost_linear_params_t *p, char *err, size_t errlen) {
    const struct { const char *name; double v; } terms[] = {
        {"step_s", p->step_s}, {"seq_s", p->seq_s}, {"sampled_s", p->sampled_s},
        {"kv_token_s", p->kv_token_s}, {"attn_pair_s", p->attn_pair_s},
        {"layer_params", p->layer_params}, {"lm_params", p->lm_params},
        {"host_step_s", p->host_step_s}, {"host_seq_s", p->host_seq_s},
        {"host_token_s", p->host_token_s},
        {"allreduce_latency_s", p->allreduce_latency_s},
        {"allreduce_s_per_byte", p->allreduce_s_per_byte},
        {"allreduces", p->allreduces}, {"ar_bytes_per_token", p->ar_bytes_per_token},
        {"moe_layers", p->moe_layers}, {"moe_experts", p->moe_experts},
        {"moe_top_k", p->moe_top_k}, {"moe_expert_params", p->moe_expert_params},
        {"moe_eff", p->moe_eff},
        {"a2a_latency_s", p->a2a_latency_s}, {"a2a_s_per_token", p->a2a_s_per_token},
        {"window_share", p->window_share}, {"mla_pf_pair_scale", p->mla_pf_pair_scale},
        {"mla_expand_params", p->mla_expand_params},
    };
    for (size_t i = 0; i < sizeof terms / sizeof terms[0]; i++)
        if (!isfinite(terms[i].v) || terms[i].v < 0)
            return errf(err, errlen, "%s must be a finite number >= 0 (got %g)", terms[i].name,
                        terms[i].v);
    if (!(p->layer_params > 0))
        return errf(err, errlen, "layer_params must be > 0 (the model's layer matrix "
                    "parameters)");
    if (p->window_share > 1)
        return errf(err, errlen, "window_share must be in [0, 1] (got %g)", p->window_share);
    if (p->dp < 0 || p->dp > 65536)
        return errf(err, errlen, "dp must be a data-parallel degree >= 1 (got %d)", (int)p->dp);
    if (p->tp < 0 || p->tp > 4096)
        return errf(err, errlen, "tp must be a tensor-parallel degree >= 1 (got %d)", (int)p->tp);
    if (p->tp > 1 && !(p->allreduces > 0 && p->ar_bytes_per_token > 0))
        return errf(err, errlen, "tp %d needs the all-reduces' shape (2 n_layers of d_model x "
                    "dtype_bytes per token)", (int)p->tp);
    if (p->n_knots < 1 || p->n_knots > COST_MAX_KNOTS)
        return errf(err, errlen, "gemm_rows must hold 1 to %d knots (got %d)", COST_MAX_KNOTS,
                    (int)p->n_knots);
    for (int32_t k = 0; k < p->n_knots; k++) {
        if (!isfinite(p->knot_rows[k]) || p->knot_rows[k] < 1 ||
            (k > 0 && !(p->knot_rows[k] > p->knot_rows[k - 1])))
            return errf(err, errlen, "gemm_rows must be ascending row counts >= 1 (knot %d is "
                        "%g)", (int)k + 1, p->knot_rows[k]);
        if (!isfinite(p->knot_s[k]) || p->knot_s[k] < 0)
            return errf(err, errlen, "gemm_s_per_param must be finite numbers >= 0 (knot %d "
                        "is %g)", (int)k + 1, p->knot_s[k]);
        if (k > 0 && p->knot_s[k] < p->knot_s[k - 1])
            return errf(err, errlen, "gemm_s_per_param must not decrease with the rows (knot "
                        "%d: %g after %g): a product of more rows cannot take less time",
                        (int)k + 1, p->knot_s[k], p->knot_s[k - 1]);
    }
    /* top_k below 1: one GPU's share under expert parallelism (k / ep of its experts) */
    if (p->moe_layers > 0 && !(p->moe_experts >= 1 && p->moe_top_k > 0 &&
                               p->moe_top_k <= p->moe_experts && p->moe_expert_params > 0))
        return errf(err, errlen, "moe_layers %g needs moe_experts >= 1, moe_top_k in (0, "
                    "experts] and moe_expert_params > 0 (got %g, %g, %g)", p->moe_layers,
                    p->moe_experts, p->moe_top_k, p->moe_expert_params);
    if (p->moe_eff > 1)
        return errf(err, errlen, "moe_eff must be in (0, 1] (got %g)", p->moe_eff);
    if (p->n_moe_knots < 0 || p->n_moe_knots > COST_MAX_KNOTS)
        return errf(err, errlen, "moe_rows must hold 0 to %d knots (got %d)", COST_MAX_KNOTS,
                    (int)p->n_moe_knots);
    for (int32_t k = 0; k < p->n_moe_knots; k++) {
        if (!isfinite(p->moe_knot_rows[k]) || p->moe_knot_rows[k] < 1 ||
            (k > 0 && !(p->moe_knot_rows[k] > p->moe_knot_rows[k - 1])))
            return errf(err, errlen, "moe_rows must be ascending row counts >= 1 (knot %d is "
                        "%g)", (int)k + 1, p->moe_knot_rows[k]);
        if (!isfinite(p->moe_knot_s[k]) || p->moe_knot_s[k] < 0 ||
            (k > 0 && p->moe_knot_s[k] < p->moe_knot_s[k - 1]))
            return errf(err, errlen, "moe_s_per_param must be finite, >= 0 and not decrease "
                        "(knot %d is %g)", (int)k + 1, p->moe_knot_s[k]);
    }
    if (p->n_kv_knots < 0 || p->n_kv_knots > COST_MAX_KNOTS)
        return errf(err, errlen, "kv_knots must hold 0 to %d knots (got %d)", COST_MAX_KNOTS,
                    (int)p->n_kv_knots);
    for (int32_t k = 0; k < p->n_kv_knots; k++) {
        if (!isfinite(p->kv_knots[k]) || p->kv_knots[k] < 1 ||
            (k > 0 && !(p->kv_knots[k] > p->kv_knots[k - 1])))
            return errf(err, errlen, "kv_knots must be ascending position counts >= 1 (knot %d "
                        "is %g)", (int)k + 1, p->kv_knots[k]);
        if (!isfinite(p->kv_extra_s[k]) || p->kv_extra_s[k] < 0)
            return errf(err, errlen, "kv_extra_s must be finite numbers >= 0 (knot %d is %g): "
                        "a position never costs less as the K/V grow", (int)k + 1,
                        p->kv_extra_s[k]);
    }
    return 0;
}

cost_model_t *cost_linear_new(const cost_linear_params_t *p) {
    if (cost_linear_check(p, NULL, 0) != 0) return NULL;
    linear_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->base.pass_time = linear_pass_time;
    l->base.host_time = linear_host_time;
    l->base.destroy = linear_destroy;
    l->base.name = "linear";
    l->p = *p;
    return &l->base;
}

const cost_linear_params_t *cost_linear_params(const cost_model_t *m) {
    return m && m->pass_time == linear_pass_time ? &((const linear_t *)m)->p : NULL;
}

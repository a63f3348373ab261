/* cost_roofline: the analytic step-cost model (see cost.h for the interface).
 *
 * The model. A forward pass is a fixed list of operators; each is either limited by
 * arithmetic or by memory traffic, never both at once, so its time is
 *
 *     t_op = max(FLOPs / (peak * eff), bytes / (bandwidth * bw_eff))
 *
 * and a step costs sum(t_op) + overhead_s. Operators do not overlap (a GPU runs one kernel
 * at a time in a decode loop), which makes the model slightly pessimistic for big prefills.
 * With T = new tokens in the step (all sequences), S = sampled positions, d = d_model,
 * b = dtype_bytes, per layer:
 *
 *   rmsnorm x2  FLOPs 4*T*d            bytes (2*T*d + d) * b           (read x, write y, weight)
 *   qkv         FLOPs 2*T*Wqkv         bytes Wqkv*b + T*d*b + T*(H+2*KV)*hd*b
 *               Wqkv = d * (H + 2*KV) * hd (GQA: K and V have KV heads, not H)
 *   attention   one operator over all sequences of the step (a varlen/paged kernel):
 *               FLOPs 4*H*hd * sum_i n_i * (c_i + (n_i + 1)/2)
 *                 (QK^T and PV, 2 FLOPs per MAC each; token j of a chunk of n_i new tokens
 *                  after c_i cached ones attends to c_i + j positions, causal)
 *               bytes 2*KV*hd*b * sum_i (c_i + n_i)   read K and V of every attended token
 *                   + 2*KV*hd*b * T                   write the new K and V
 *                   + 2*T*H*hd*b                      read Q, write the output
 *               A sliding-window layer (n_window_layers of them) sums min(c_i + j, W) for
 *               its pairs and min(c_i + n_i, W) positions read (cost.h's windowed sums)
 *   o proj      FLOPs 2*T*Wo, Wo = H*hd*d   bytes Wo*b + T*H*hd*b + T*d*b
 *   mlp         FLOPs 2*T*Wmlp, Wmlp = 3*d*d_ff (SwiGLU gate, up, down as one fused operator:
 *               only its input and output activations count)   bytes Wmlp*b + 2*T*d*b
 *               A mixture of experts instead: the router (FLOPs 2*T*d*E, bytes d*E*b + T*d*b)
 *               and the experts (FLOPs 2*T*k*We, We = 3*d*moe_d_ff; bytes E_t(T)*We*b +
 *               2*T*k*d*b: each expert a token touches is read once, sim/cost.h's E_t),
 *               divided by the MoE kernel's efficiency (moe_eff, 1 unless a serving
 *               profile says)
 *
 * Latent attention (MLA, DeepSeek): the projections are q_a, q_b, kv_a, kv_b and o
 * (q_a and kv_a replicated on every device, as vLLM keeps them); attention runs in the
 * latent space, as vLLM's decode does: per (token, position) 2*H*(2*kv_lora + rope) FLOPs
 * over the latent's (kv_lora + rope)*b bytes a position, which every device reads whole.
 * A prefill sequence (n > 1: cost.h's pf_ sums) runs as vLLM's prefill does instead: kv_b
 * expands every position's latent into per-head keys and values (2 x kv_lora x H x (nope +
 * v) FLOPs a position, writing and reading back H x (nope + v) elements), then plain
 * attention over the expanded heads, 2 x H x (nope + rope + v) FLOPs a pair. Fine-grained MoE: the first n_dense_layers
 * layers have the dense MLP, the others the experts plus a shared expert of shared_d_ff
 * every token passes through (a dense product).
 *
 * and once per step: the embedding gather (bytes 2*T*d*b: read T rows, write them), the
 * final rmsnorm over T tokens, the LM head over the S sampled positions (FLOPs 2*S*d*vocab,
 * bytes vocab*d*b + S*d*b + S*vocab*b; skipped entirely when S = 0, as a non-final prefill
 * chunk computes no logits). Residual adds, RoPE, softmax and sampling are folded into
 * overhead_s.
 *
 * Efficiency factors (defaults in cost_roofline_defaults):
 *   flops_eff 0.7   GEMMs: large bf16 cuBLAS GEMMs reach 70-80% of the datasheet peak, which
 *                   assumes boost clocks the chips do not hold under load.
 *   bw_eff 0.77     streaming reads as measured: in Vidur's published operator profiles
 *                   (profiles/vidur, analysis/vidur.h) the products at one token, which
 *                   stream their weights, read at 75% of the A100's datasheet bandwidth
 *                   (llama-2-7b), 77% of the H100's (llama-2-7b) and 80% (llama-2-70b,
 *                   TP 4); the median. (It was a guessed 0.85.)
 *   attn_eff 0.5    attention kernels (softmax, masking, paged gathers) reach about half of
 *                   the GEMM peak even with FlashAttention-style kernels.
 *   overhead_s 4e-4 kernel launches, sampling and the scheduler's own work per step: the
 *                   floor measured for small-batch decode in vLLM-class engines is a few
 *                   hundred microseconds.
 *
 * Tensor parallelism (tp > 1), Megatron style: each device holds 1/tp of the heads and of
 * d_ff and of the LM head's vocabulary rows, so weights, FLOPs and head-split activations
 * divide by tp. K/V heads divide by tp too, except when tp > n_kv_heads: then each device
 * keeps one replicated K/V head (as vLLM does). The d-wide activations at operator
 * boundaries, the norms and the embedding gather are replicated. Two all-reduces per layer
 * (after o proj and after the MLP) move T*d*b bytes each; a ring all-reduce sends
 * 2*(tp-1)/tp of that per device, at link_bw * bw_eff, after the hardware's link_latency
 * (the fixed cost of one all-reduce). Communication does not overlap compute.
 *
 * Beyond tp (sim/parallel.h): at dp > 1 data-parallel ranks every operator above but the
 * experts prices the busiest rank's share of T, S and the attention sums (cost_rank_share:
 * ceil(seqs / dp) of the sequences); with ep > 1 this GPU holds
 * n_experts / ep whole experts and computes the tokens of every rank routed to them (top_k
 * / ep a token on average), and at dp > 1 each MoE layer adds its all-to-all (a2a_latency_s
 * + a2a_s_per_token x T, dispatch and combine). Pipeline stages are priced by the caller
 * with a stage's shape (par_pipeline_new).
 *
 * Speed: step_time is called ~1e5 times per simulated trace, so every per-model constant is
 * precomputed in the object, a layer is evaluated once and multiplied by n_layers (all
 * layers are the same), and it reads only the batch's sums (cost_features: T = tokens,
 * S = sampled, sum n_i (c_i + (n_i + 1)/2) = attn_pairs, sum (c_i + n_i) = kv_tokens). No
 * allocation per call. */
#include "sim/cost.h"
#include "sim/errf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cost_model_t base;  /* first, so a cost_model_t * is the object */
    preset_model_t m;
    preset_hw_t hw;
    cost_roofline_params_t p;
    /* Reciprocal throughputs, s per FLOP or per byte (efficiencies applied). */
    double inv_gemm, inv_attn, inv_bw, inv_link;
    /* the layers' matrices: their bytes a parameter and their products' reciprocal peak
     * (the weight format's, presets.h); the LM head and the activations stay at b */
    double bm, inv_mm;
    /* Per device: */
    double layers, d, b;     /* n_layers, d_model, dtype_bytes */
    /* attention by presets.h's per-device figures (preset_model_attn_device, _pair_flops,
     * _kv_bytes_device), so GQA and MLA share this code */
    double w_qkv, w_o, w_mlp, w_lm;  /* parameters of each weight matrix group */
    double qkv_out;          /* (H + 2*KV) * hd: qkv output elements per token */
    double q_dim;            /* H * hd: attention output elements per token */
    double attn_flop;        /* 4 * H * hd: FLOPs per (new token, attended position) */
    double kv_tok;           /* 2 * KV * hd * b: K+V bytes per token per layer (MLA: its
                              * latent and rope key, replicated on every device) */
    double vocab_dev;        /* vocab rows of the LM head on this device */
    double ar_bytes;         /* bytes sent per token per all-reduce: 2(tp-1)/tp * d * b */
    double inv_attn_bw;      /* K/V reads: 1 / (bandwidth * attn_bw_eff) */
    /* a mixture of experts (moe 0: dense): experts, top-k, one expert's parameters on this
     * device, and the kernel's efficiency; the layers of each kind (dense first layers of
     * w_mlp, then layers of experts) and a shared expert's parameters (0: none) */
    int moe;
    double n_exp, top_k, w_exp, moe_eff;
    double dense_layers, moe_layers, w_shared;
    double dp;               /* data-parallel attention ranks (1: none) */
    double win_layers;       /* layers with a sliding window (presets.h; 0: none) */
    /* latent attention's prefill (0: not MLA): FLOPs a (token, position) pair of a prefill
     * in the expanded form, kv_b's parameters a position expands through, and the
     * expanded K and V elements a position writes and reads back */
    double pf_pair_flop, w_expand, expand_elems;
} roofline_t;

/* Running totals of a step; the same code serves step_time and explain so they agree. */
typedef struct {
    double flops, bytes, wbytes, kvbytes, comm_bytes;
    double t_compute, t_memory, t_comm;
} acc_t;

static inline void op_bw(const roofline_t *r, acc_t *a, double flops, double inv_peak,
                         double wbytes, double kvbytes, double other_bytes, double scale) {
    double bytes = wbytes + kvbytes + other_bytes;
    double tc = flops * inv_peak * scale;
    double tm = ((wbytes + other_bytes) * r->inv_bw + kvbytes * r->inv_attn_bw) * scale;
    a->flops += flops;
    a->bytes += bytes;
    a->wbytes += wbytes;
    a->kvbytes += kvbytes;
    if (tc > tm) a->t_compute += tc;
    else a->t_memory += tm;
}

static inline void op(const roofline_t *r, acc_t *a, double flops, double inv_peak,
                      double wbytes, double kvbytes, double other_bytes) {
    op_bw(r, a, flops, inv_peak, wbytes, kvbytes, other_bytes, 1.0);
}

static inline void acc_add_scaled(acc_t *dst, const acc_t *src, double k) {
    dst->flops += k * src->flops;
    dst->bytes += k * src->bytes;
    dst->wbytes += k * src->wbytes;
    dst->kvbytes += k * src->kvbytes;
    dst->comm_bytes += k * src->comm_bytes;
    dst->t_compute += k * src->t_compute;
    dst->t_memory += k * src->t_memory;
    dst->t_comm += k * src->t_comm;
}

/* Evaluates the work into a (zeroed by the caller). Returns the step time in seconds. */
static double roofline_eval(const roofline_t *r, const cost_features_t *f, acc_t *a) {
    /* the busiest data-parallel rank's share of the step (all of it at dp 1); the experts
     * see every rank's tokens (Tall) */
    const double share = cost_rank_share(f, (int32_t)r->dp);
    const double Tall = (double)f->tokens, T = Tall * share, S = (double)f->sampled * share;
    const double attn_pairs = (double)f->attn_pairs * share;
    const double attended = (double)f->kv_tokens * share;
    const double pairs_w = cost_pairs_w(f) * share, attended_w = cost_kv_w(f) * share;
    /* a latent-attention prefill's pairs and positions (the expanded form) */
    const double pf_pairs = r->pf_pair_flop > 0 ? (double)f->pf_attn_pairs * share : 0;
    const double pf_kv = r->pf_pair_flop > 0 ? (double)f->pf_kv_tokens * share : 0;
    if (Tall == 0) return 0.0;
    const double d = r->d, b = r->b;
    const double act = T * d * b;  /* one d-wide activation of the step, bytes */

    /* every layer: its norms, attention and all-reduces; then the MLP of each layer kind */
    acc_t layer = {0};
    /* Both rmsnorms of the layer are identical: evaluate one, count it twice below. */
    acc_t norm = {0};
    op(r, &norm, 4.0 * T * d, r->inv_gemm, d * b, 0, 2.0 * act);
    acc_add_scaled(&layer, &norm, 2.0);
    op(r, &layer, 2.0 * T * r->w_qkv, r->inv_mm, r->w_qkv * r->bm, 0, act + T * r->qkv_out * b);
    /* attention: the full layers over every position, the window layers over their
     * windows (cost.h's windowed sums) */
    acc_t attn = {0}, attn_w = {0};
    op(r, &attn, r->attn_flop * (attn_pairs - pf_pairs) + r->pf_pair_flop * pf_pairs,
       r->inv_attn, 0, r->kv_tok * (attended + T),
       2.0 * T * r->q_dim * b + 2.0 * pf_kv * r->expand_elems * b);
    if (pf_kv > 0)   /* kv_b over every position of the prefills (its weights: w_qkv's) */
        op(r, &attn, 2.0 * pf_kv * r->w_expand, r->inv_gemm, 0, 0, 0);
    if (r->win_layers > 0)
        op(r, &attn_w, r->attn_flop * pairs_w, r->inv_attn, 0, r->kv_tok * (attended_w + T),
           2.0 * T * r->q_dim * b);
    op(r, &layer, 2.0 * T * r->w_o, r->inv_mm, r->w_o * r->bm, 0, T * r->q_dim * b + act);
    acc_t dense = {0}, sparse = {0};
    if (r->dense_layers > 0)
        op(r, &dense, 2.0 * T * r->w_mlp, r->inv_mm, r->w_mlp * r->bm, 0, 2.0 * act);
    if (r->moe) {
        /* the router over every token, then each touched expert's weights read once and
         * its tokens' products (sim/cost.h: E_t), and a shared expert every token passes */
        /* (under expert parallelism n_exp and top_k are this GPU's share, over Tall) */
        double touched = cost_moe_experts_touched(r->n_exp, r->top_k, Tall);
        const double E = r->m.n_experts;
        op(r, &sparse, 2.0 * T * r->d * E, r->inv_gemm, r->d * E * b, 0, act);
        op_bw(r, &sparse, 2.0 * Tall * r->top_k * r->w_exp, r->inv_mm,
              touched * r->w_exp * r->bm, 0, 2.0 * Tall * r->top_k * r->d * b, 1.0 / r->moe_eff);
        if (r->w_shared > 0)
            op(r, &sparse, 2.0 * T * r->w_shared, r->inv_mm, r->w_shared * r->bm, 0, 2.0 * act);
        if (r->dp > 1) {
            sparse.t_comm += r->p.a2a_latency_s + r->p.a2a_s_per_token * Tall;
        }
    }
    if (r->ar_bytes > 0 && r->p.ar_s_per_byte > 0) {
        /* a serving profile's all-reduce: latency + message bytes x time per byte */
        layer.comm_bytes = 2.0 * T * r->ar_bytes;
        layer.t_comm = 2.0 * (r->p.ar_latency_s + T * d * b * r->p.ar_s_per_byte);
    } else if (r->ar_bytes > 0) {
        layer.comm_bytes = 2.0 * T * r->ar_bytes;
        layer.t_comm = layer.comm_bytes * r->inv_link + 2.0 * r->hw.link_latency;
    }
    acc_add_scaled(a, &layer, r->layers);
    acc_add_scaled(a, &attn, r->layers - r->win_layers);
    acc_add_scaled(a, &attn_w, r->win_layers);
    acc_add_scaled(a, &dense, r->dense_layers);
    acc_add_scaled(a, &sparse, r->moe_layers);

    op(r, a, 0, r->inv_gemm, 0, 0, 2.0 * act);  /* embedding gather */
    acc_add_scaled(a, &norm, 1.0);               /* final norm */
    if (S > 0)
        op(r, a, 2.0 * S * r->w_lm, r->inv_gemm, r->w_lm * b, 0,
           S * d * b + S * r->vocab_dev * b);
    return a->t_compute + a->t_memory + a->t_comm + r->p.overhead_s;
}

static double roofline_pass_time(const cost_model_t *m, const cost_features_t *f) {
    acc_t a = {0};
    return roofline_eval((const roofline_t *)m, f, &a);
}

static void roofline_destroy(cost_model_t *m) { free(m); }

void cost_roofline_defaults(cost_roofline_params_t *p) {
    p->flops_eff = 0.7;
    p->bw_eff = 0.77;
    p->attn_eff = 0.5;
    p->overhead_s = 4e-4;
    p->tp = 1;
    p->attn_bw_eff = p->ar_latency_s = p->ar_s_per_byte = p->moe_eff = 0;
    p->dp = p->ep = 1;
    p->a2a_latency_s = p->a2a_s_per_token = 0;
}

static int eff_ok(double e) { return isfinite(e) && e > 0 && e <= 1; }

int cost_roofline_check(const preset_model_t *m, const preset_hw_t *hw,
                        const cost_roofline_params_t *p, char *err, size_t errlen) {
    char sub[256];
    if (preset_model_validate(m, sub, sizeof sub) != 0) return errf(err, errlen, "%s", sub);
    if (preset_hw_validate(hw, sub, sizeof sub) != 0) return errf(err, errlen, "%s", sub);
    if (!eff_ok(p->flops_eff) || !eff_ok(p->bw_eff) || !eff_ok(p->attn_eff))
        return errf(err, errlen, "efficiencies must be in (0, 1] (flops_eff %g, bw_eff %g, "
                    "attn_eff %g)", p->flops_eff, p->bw_eff, p->attn_eff);
    if (!(p->attn_bw_eff == 0 || eff_ok(p->attn_bw_eff)) || !(p->moe_eff == 0 || eff_ok(p->moe_eff)))
        return errf(err, errlen, "attn_bw_eff and moe_eff must be in (0, 1] (got %g, %g)",
                    p->attn_bw_eff, p->moe_eff);
    if (!isfinite(p->ar_latency_s) || p->ar_latency_s < 0 || !isfinite(p->ar_s_per_byte) ||
        p->ar_s_per_byte < 0)
        return errf(err, errlen, "the all-reduce's latency and time per byte must be >= 0");
    if (!isfinite(p->overhead_s) || p->overhead_s < 0)
        return errf(err, errlen, "overhead_s must be >= 0 (got %g)", p->overhead_s);
    if (p->tp < 1) return errf(err, errlen, "tp must be >= 1 (got %d)", (int)p->tp);
    if (p->dp < 0 || p->ep < 0 || !isfinite(p->a2a_latency_s) || p->a2a_latency_s < 0 ||
        !isfinite(p->a2a_s_per_token) || p->a2a_s_per_token < 0)
        return errf(err, errlen, "dp and ep must be >= 1 and the all-to-all's figures >= 0");
    if (p->ep > 1 && (!preset_model_is_moe(m) || m->n_experts % p->ep != 0))
        return errf(err, errlen, "ep %d does not divide %s's %d experts", (int)p->ep, m->name,
                    (int)m->n_experts);
    if (preset_model_check_tp(m, p->tp, err, errlen) != 0) return -1;
    if (p->tp > 1 && !(hw->link_bw > 0))
        return errf(err, errlen, "tp %d needs the interconnect bandwidth: %s has no link_bw",
                    (int)p->tp, hw->name);
    double lat, spb;
    if (preset_hw_multinode_allreduce(hw, p->tp, &lat, &spb, err, errlen) < 0) return -1;
    return 0;
}

cost_model_t *cost_roofline_new(const preset_model_t *m, const preset_hw_t *hw,
                                const cost_roofline_params_t *p) {
    cost_roofline_params_t defaults;
    roofline_t *r = NULL;
    if (!p) {
        cost_roofline_defaults(&defaults);
        p = &defaults;
    }
    if (cost_roofline_check(m, hw, p, NULL, 0) != 0) goto fail;
    r = calloc(1, sizeof *r);
    if (!r) goto fail;
    r->base.pass_time = roofline_pass_time;
    r->base.destroy = roofline_destroy;
    r->base.name = "roofline";
    r->m = *m;
    r->hw = *hw;
    r->p = *p;
    /* a group wider than one link domain all-reduces over the network, whatever a serving
     * profile measured within a node */
    double lat, spb;
    if (preset_hw_multinode_allreduce(hw, p->tp, &lat, &spb, NULL, 0) == 1)
        r->p.ar_latency_s = lat, r->p.ar_s_per_byte = spb;

    const double tp = p->tp;
    r->inv_gemm = 1.0 / (hw->flops * p->flops_eff);
    r->inv_mm = 1.0 / (preset_hw_matrix_flops(hw, m) * p->flops_eff);
    r->bm = preset_model_matrix_bytes(m);
    r->inv_attn = 1.0 / (hw->flops * p->attn_eff);
    r->inv_bw = 1.0 / (hw->mem_bw * p->bw_eff);
    r->inv_link = hw->link_bw > 0 ? 1.0 / (hw->link_bw * p->bw_eff) : 0.0;
    r->layers = m->n_layers;
    r->d = m->d_model;
    r->b = m->dtype_bytes;
    preset_model_attn_device(m, p->tp, &r->w_qkv, &r->w_o, &r->qkv_out, &r->q_dim);
    r->w_mlp = 3.0 * r->d * m->d_ff / tp;
    r->vocab_dev = m->vocab / tp;
    r->w_lm = r->vocab_dev * r->d;
    r->attn_flop = preset_model_attn_pair_flops(m, p->tp);
    r->kv_tok = preset_model_kv_bytes_device(m, p->tp) / m->n_layers;
    r->ar_bytes = p->tp > 1 ? 2.0 * (tp - 1.0) / tp * r->d * r->b : 0.0;
    r->inv_attn_bw = 1.0 / (hw->mem_bw * (p->attn_bw_eff > 0 ? p->attn_bw_eff : p->bw_eff));
    r->moe = preset_model_is_moe(m);
    r->dp = p->dp > 1 ? p->dp : 1;
    r->win_layers = m->sliding_window > 0 ? m->n_window_layers : 0;
    r->pf_pair_flop = preset_model_mla_prefill_pair_flops(m, p->tp);
    r->w_expand = preset_model_mla_expand_params(m, p->tp);
    r->expand_elems = m->kv_lora_rank > 0
                          ? m->n_heads / tp * ((double)m->qk_nope_head_dim + m->v_head_dim)
                          : 0;
    if (p->ep > 1) {   /* whole experts, n_experts / ep of them on this GPU */
        r->n_exp = (double)m->n_experts / p->ep;
        r->top_k = (double)m->experts_per_tok / p->ep;
        r->w_exp = preset_model_expert_params(m);
    } else {
        r->n_exp = m->n_experts;
        r->top_k = m->experts_per_tok;
        r->w_exp = preset_model_expert_params(m) / tp;
    }
    r->moe_eff = p->moe_eff > 0 ? p->moe_eff : 1.0;
    r->moe_layers = preset_model_moe_layers(m);
    r->dense_layers = m->n_layers - r->moe_layers;
    r->w_shared = 3.0 * r->d * m->shared_d_ff / tp;
    return &r->base;
fail:
    free(r);
    return NULL;
}

int cost_roofline_explain(const cost_model_t *m, const cost_seq_t *seqs, int32_t n,
                          cost_breakdown_t *out) {
    if (!m || m->pass_time != roofline_pass_time) return -1;
    const roofline_t *r = (const roofline_t *)m;
    acc_t a = {0};
    cost_features_t f;
    cost_features_window(seqs, n, r->m.sliding_window, &f);
    double t = roofline_eval(r, &f, &a);
    memset(out, 0, sizeof *out);
    out->flops = a.flops;
    out->bytes = a.bytes;
    out->weight_bytes = a.wbytes;
    out->kv_bytes = a.kvbytes;
    out->comm_bytes = a.comm_bytes;
    out->compute_bound_s = a.t_compute;
    out->memory_bound_s = a.t_memory;
    out->comm_s = a.t_comm;
    out->overhead_s = t > 0 ? r->p.overhead_s : 0.0;
    out->time_s = t;
    return 0;
}

/* cost: the simulator's step-cost models, behind one interface (batch shape -> seconds).
 *
 * A batch is the list of sequences that run in one forward pass: for each, how many new
 * tokens it computes (a prompt, a prompt chunk, 1 decode token, or 1 + k to verify k drafts),
 * how many tokens of context are already in its KV cache, and how many positions are sampled
 * (logits through the LM head). Padding slots of static batching are ordinary entries.
 *
 * Invariants: cost_step_time is a pure function of the batch's features (no hidden
 * state), >= 0, and an empty batch costs 0. The model object is owned by its creator
 * (cost_free). */
#ifndef TWIN_COST_H
#define TWIN_COST_H

#include <stddef.h>
#include <stdint.h>

#include "sim/presets.h"

typedef struct {
    int32_t n_new;      /* tokens computed this step (>= 1) */
    int32_t ctx;        /* tokens already cached before this step */
    int32_t n_sampled;  /* positions whose logits are computed (0 for a non-final chunk) */
} cost_seq_t;

/* The work of one forward pass, summed over its sequences: the features a calibrated cost
 * model is linear in, and what both executors record per step (steps table, schema 3). A
 * sequence computing n new tokens after c cached ones (n >= 1; entries with n < 1 count for
 * nothing) adds
 *     tokens += n        rows of every token-parallel product (projections, MLP, norms)
 *     seqs += 1
 *     sampled += s       rows of the LM head (and the sampler)
 *     kv_tokens += c + n KV positions attention reads for the sequence (its context after
 *                        the step: a decode reads every cached position once)
 *     attn_pairs += n c + n (n + 1) / 2    (query, key) pairs attention scores, causal
 *                        (token j of the chunk attends to c + j + 1 positions)
 * so a decode (n = 1) adds c + 1 to both kv_tokens and attn_pairs, and a prompt chunk adds
 * its quadratic term to attn_pairs only. */
typedef struct {
    int64_t tokens, seqs, sampled, kv_tokens, attn_pairs;
    /* Sliding-window layers (presets.h): with window W > 0 (set before adding sequences)
     * a window layer reads min(c + n, W) positions for the sequence and scores
     *     sum over j = 1..n of min(c + j, W)
     * pairs (token j of the chunk sees the last W positions up to itself); kv_tokens_w and
     * attn_pairs_w are those sums, equal to kv_tokens and attn_pairs when window is 0.
     * They are not recorded (steps table): a recorded step re-costs its window layers as
     * full attention, the engine having no window layers to record. Cost models read them
     * only when window > 0 (cost_kv_w, cost_pairs_w), so features built field by field
     * price windows as full attention. */
    int64_t window, kv_tokens_w, attn_pairs_w;
    /* The prefill sequences' (n > 1) shares of kv_tokens and attn_pairs: latent attention
     * prefills in the expanded form (presets.h). Not recorded either (0 in a recorded
     * step: every pair priced as decode's). */
    int64_t pf_kv_tokens, pf_attn_pairs;
} cost_features_t;

void cost_features(const cost_seq_t *seqs, int32_t n, cost_features_t *f);
/* The same with a window of W positions (0: none). */
void cost_features_window(const cost_seq_t *seqs, int32_t n, int64_t window,
                          cost_features_t *f);
/* Adds one sequence (n new tokens after ctx cached ones, `sampled` rows) to f: the one
 * place the formulas above live, for executors that describe batches in their own way. */
void cost_features_add(cost_features_t *f, int64_t n, int64_t ctx, int64_t sampled);

typedef struct cost_model cost_model_t;

/* Every model is a function of the features alone: a batch's sequences matter only
 * through their sums, so a recorded step (which keeps the sums) can be costed again. */
struct cost_model {
    /* the forward pass of this work, seconds (0 when f->tokens == 0) */
    double (*pass_time)(const cost_model_t *m, const cost_features_t *f);
    /* the executor's CPU-side time before a pass of this work (arrivals, the policy, batch
     * preparation, the previous step's commit and records), seconds; NULL: not modelled
     * (0), as in the roofline, whose overhead_s is part of step_time */
    double (*host_time)(const cost_model_t *m, const cost_features_t *f);
    void (*destroy)(cost_model_t *m);
    const char *name;
};

typedef struct {
    double flops_eff;     /* fraction of peak FLOP/s reached by GEMMs (default 0.7) */
    double bw_eff;        /* fraction of peak bandwidth reached (default 0.77, measured) */
    double attn_eff;      /* fraction reached by attention kernels (default 0.5) */
    double overhead_s;    /* fixed per-step overhead: launch, sampling, scheduling (default 4e-4) */
    int32_t tp;           /* tensor-parallel degree: weights and work split over tp devices (default 1) */
    /* Set by a serving profile (sim/serving.h), 0 otherwise: attention's K/V read rate as a
     * fraction of peak bandwidth (0: bw_eff), the all-reduce as latency + bytes x time per
     * byte (0: the hardware's link_latency + bytes / (link_bw x bw_eff)), and the MoE
     * kernel's efficiency against a dense product (0: 1). */
    double attn_bw_eff, ar_latency_s, ar_s_per_byte, moe_eff;
    /* Parallelism beyond tp (sim/parallel.h; 0 is read as 1): dp data-parallel attention
     * ranks, whose attention, dense layers, shared experts, embedding and LM head run the
     * busiest rank's share of the step's work (cost_rank_share), and ep expert-parallel GPUs, each holding
     * n_experts / ep whole experts and computing the tokens of all ranks routed to them;
     * each MoE layer then adds a2a_latency_s + a2a_s_per_token x T (dispatch and combine,
     * par_a2a). */
    int32_t dp, ep;
    double a2a_latency_s, a2a_s_per_token;
} cost_roofline_params_t;

void cost_roofline_defaults(cost_roofline_params_t *p);
/* Checks the combination: efficiencies in (0, 1], overhead >= 0, tp >= 1, tp dividing
 * n_heads, and a link_bw for tp > 1. Returns 0, or -1 with a message in err. */
int cost_roofline_check(const preset_model_t *m, const preset_hw_t *hw,
                        const cost_roofline_params_t *p, char *err, size_t errlen);
/* Copies m and hw; p NULL means the defaults. Returns NULL when out of memory or when
 * cost_roofline_check fails (call it first for the message). */
cost_model_t *cost_roofline_new(const preset_model_t *m, const preset_hw_t *hw,
                                const cost_roofline_params_t *p);

/* The calibrated model (sim/cost_linear.c), physically the roofline's terms with measured
 * rates instead of datasheet peaks and guessed efficiencies:
 *
 *   pass = step_s                        fixed per pass: launches, thread wake-ups
 *        + seq_s x seqs                  per sequence: block tables, per-sequence kernels
 *        + layer_params x gemm(tokens)   the layers' products (and every token-parallel op)
 *        + lm_params x gemm(sampled)     the LM head's product, over the sampled rows
 *        + sampled_s x sampled           the sampler, per row
 *        + kv(kv_tokens)                 attention reading each sequence's cached K/V
 *        + attn_pair_s x attn_pairs      attention's scores and weighted sums
 *        + comm(tokens)                  tensor parallelism: the all-reduces (below)
 *   host = host_step_s + host_seq_s x seqs + host_token_s x tokens   (cost_host_time)
 *
 * At tensor-parallel degree tp > 1 the times are one device's (each holds 1/tp of the
 * heads and of the MLP), and each pass adds its all-reduces (Megatron: two per layer, after
 * the attention output and after the MLP, each of tokens x d_model activations):
 *     comm(T) = allreduces x (allreduce_latency_s + allreduce_s_per_byte x T x ar_bytes)
 * with allreduces = 2 n_layers and ar_bytes = d_model x dtype_bytes from the model's shape
 * (cost_file.c fills them). Communication does not overlap compute.
 *
 * gemm(M) is the time per matrix parameter of a product of M rows: measured at knot row
 * counts (knot_rows, ascending, >= 1) and linear between them; flat below the first knot
 * (a product's weights are read once, whatever the rows: memory-bound), proportional to M
 * beyond the last (compute-bound: the last knot's rate per row), and 0 for M = 0 (a
 * step that samples nothing skips the LM head).
 *
 * kv(P) is the time to read P KV positions: kv_token_s per position, plus kv_extra_s[j]
 * per position beyond kv_knots[j] for each knot, so the marginal cost of a position rises
 * as a step's K/V outgrow the caches (convex and piecewise linear; DRAM-bound beyond the
 * last knot). Without knots it is linear.
 *
 * Every coefficient is >= 0 and gemm is non-decreasing in M, so more work never costs
 * less. */
/* 512: a GPU calibration keeps every profiled token count as a knot (a GEMM's time is a
 * staircase of its tiles, which sparse knots smooth away: analysis/vidur.h) */
#define COST_MAX_KNOTS 512

typedef struct {
    double step_s, seq_s, sampled_s, kv_token_s, attn_pair_s;
    double layer_params, lm_params;   /* matrix parameters (presets.h), for the GEMM terms */
    int32_t n_knots;
    double knot_rows[COST_MAX_KNOTS]; /* ascending, >= 1 */
    double knot_s[COST_MAX_KNOTS];    /* gemm at each knot: seconds per parameter */
    int32_t n_kv_knots;               /* 0: kv is linear */
    double kv_knots[COST_MAX_KNOTS];  /* KV positions per step, ascending, >= 1 */
    double kv_extra_s[COST_MAX_KNOTS];/* seconds per position beyond each knot */
    double host_step_s, host_seq_s, host_token_s;
    int32_t tp;                       /* the degree it models (0 is read as 1) */
    double allreduce_latency_s;       /* per all-reduce (tp > 1) */
    double allreduce_s_per_byte;      /* per byte of the all-reduced tensor (tp > 1) */
    double allreduces;                /* per pass: 2 n_layers (from the shape) */
    double ar_bytes_per_token;        /* d_model x dtype_bytes (from the shape) */
    /* A mixture of experts (moe_layers 0: dense). Each of moe_layers layers sends every
     * token through moe_top_k of moe_experts experts of moe_expert_params parameters each
     * (one device's share); a step reads each expert its tokens touch once:
     *     moe(T) = moe_layers x E_t(T) x moe_expert_params x moe_gemm(T k / E_t(T)) / moe_eff
     *     E_t(T) = E (1 - (1 - k / E)^T)   the distinct experts T tokens touch, with each
     *              token routed to k of the E uniformly (so all of them at large T, k at 1)
     * moe_gemm(m): seconds per parameter of a product of m rows (an expert's share of the
     * step's rows): the moe_rows/moe_s knots when given, else the layers' gemm curve;
     * moe_eff (0 is read as 1) the MoE kernel's efficiency against it. */
    double moe_layers, moe_experts, moe_top_k, moe_expert_params, moe_eff;
    int32_t n_moe_knots;
    double moe_knot_rows[COST_MAX_KNOTS];
    double moe_knot_s[COST_MAX_KNOTS];
    /* Data-parallel attention and expert parallelism (sim/parallel.h; set for a run, never
     * read from a file; dp 0 is read as 1): every term but moe(T) prices the busiest rank's
     * share of the work (cost_rank_share), moe(T) all ranks' tokens over the local experts (the moe_ fields then one
     * GPU's: n_experts / ep experts, top_k / ep of them a token, whole experts), and each
     * of moe_layers adds a2a_latency_s + a2a_s_per_token x T. */
    int32_t dp;
    double a2a_latency_s, a2a_s_per_token;
    /* The window layers' share of the layers (0: none; set for a run from the shape): kv()
     * and the attention pairs read (1 - window_share) x the full sums + window_share x the
     * windowed ones (cost_features_t). */
    double window_share;
    /* Latent attention (0: other attention; set for a run from the shape): a prefill's
     * pairs cost mla_pf_pair_scale x a decode's (the expanded form's FLOPs over the
     * absorbed form's), and its positions add the expansion, mla_expand_params x
     * gemm(pf_kv_tokens) (kv_b's product over every position of the prefill sequences). */
    double mla_pf_pair_scale, mla_expand_params;
} cost_linear_params_t;

/* 0, or -1 with a message naming the field (negative or non-finite values, knots not
 * ascending or below 1, gemm decreasing, no knots, no parameters). */
int cost_linear_check(const cost_linear_params_t *p, char *err, size_t errlen);
/* Copies p; NULL when out of memory or when cost_linear_check fails. */
cost_model_t *cost_linear_new(const cost_linear_params_t *p);
/* The interpolation weights of gemm(rows) on the knots (w[n_knots], most are 0): gemm(M)
 * = sum_k w[k] knot_s[k]. The fit builds its design matrix with the same weights. */
void cost_linear_gemm_weights(const double *knot_rows, int32_t n_knots, double rows,
                              double *w);
/* comm(T) of p (see above): the all-reduces of a pass of T tokens; 0 at tp 1. */
double cost_linear_comm_time(const cost_linear_params_t *p, double tokens);
/* kv(P) of p (see above): the time to read P KV positions. */
double cost_linear_kv_time(const cost_linear_params_t *p, double positions);
/* moe(T) of p (see above): the experts' products of a pass of T tokens; 0 when dense. */
double cost_linear_moe_time(const cost_linear_params_t *p, double tokens);
/* E_t(T): the distinct experts of E that T tokens routed to k each touch (uniformly). */
double cost_moe_experts_touched(double experts, double top_k, double tokens);
/* The parameters of a linear model (NULL when m is not one). */
const cost_linear_params_t *cost_linear_params(const cost_model_t *m);

/* Where a roofline step's time goes, per device (teaching output, tests). */
typedef struct {
    double flops;           /* FLOPs on one device */
    double bytes;           /* HBM bytes moved on one device: weights + KV + activations */
    double weight_bytes;    /* of which weights */
    double kv_bytes;        /* of which K/V reads and writes */
    double comm_bytes;      /* bytes each device sends in all-reduces (0 when tp == 1) */
    double compute_bound_s; /* time of the operators limited by FLOP/s */
    double memory_bound_s;  /* time of the operators limited by bandwidth */
    double comm_s;          /* all-reduce time */
    double overhead_s;      /* fixed per-step overhead (0 for an empty batch) */
    double time_s;          /* the sum: equals cost_step_time for the same batch */
} cost_breakdown_t;

/* Fills out for the batch. Returns 0, or -1 when m is not a roofline model. */
int cost_roofline_explain(const cost_model_t *m, const cost_seq_t *seqs, int32_t n,
                          cost_breakdown_t *out);

/* The busiest of dp data-parallel ranks' share of a step's work (cost_roofline_params_t):
 * ceil(seqs / dp) of its seqs sequences (all of it at dp <= 1, or one sequence), as a
 * fraction; the ranks run in lockstep, so the busiest sets the time. */
static inline double cost_rank_share(const cost_features_t *f, int32_t dp) {
    if (dp <= 1 || f->seqs <= 1) return 1.0;
    return (double)((f->seqs + dp - 1) / dp) / (double)f->seqs;
}

static inline double cost_kv_w(const cost_features_t *f) {
    return (double)(f->window > 0 ? f->kv_tokens_w : f->kv_tokens);
}
static inline double cost_pairs_w(const cost_features_t *f) {
    return (double)(f->window > 0 ? f->attn_pairs_w : f->attn_pairs);
}

static inline double cost_pass_time(const cost_model_t *m, const cost_features_t *f) {
    return m->pass_time(m, f);
}
static inline double cost_step_time(const cost_model_t *m, const cost_seq_t *seqs, int32_t n) {
    cost_features_t f;
    cost_features(seqs, n, &f);
    return m->pass_time(m, &f);
}
static inline double cost_host_time(const cost_model_t *m, const cost_features_t *f) {
    return m->host_time ? m->host_time(m, f) : 0.0;
}
static inline void cost_free(cost_model_t *m) { if (m) m->destroy(m); }

#endif

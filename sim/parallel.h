/* parallel: how one replica's GPUs split a model, and what the split costs beyond one
 * device's share of the work.
 *
 * A spec is "tp=8", "tp=8,ep=8", "tp=1,dp=8,ep=8", "tp=8,pp=2,mb=4", ... (keys in any
 * order, each at most once; absent ones are 1):
 *   tp  tensor parallelism (Megatron): every attention and dense matrix split tp ways, two
 *       all-reduces a layer (sim/cost.h)
 *   dp  data-parallel attention (DeepSeek's deployment, vLLM's --data-parallel-size with
 *       expert parallelism): dp ranks of tp GPUs each run attention, the dense layers and
 *       the shared experts for their own sequences (weights replicated, KV not), and meet
 *       in the expert layers. A mixture of experts only, and only with ep = tp x dp: on a
 *       dense model dp ranks are dp replicas (--replicas).
 *   ep  expert parallelism: each of the ep = tp x dp GPUs of a stage holds n_experts / ep
 *       whole experts (1: every expert split tp ways). At dp 1 the tokens are on every GPU
 *       already and the layer's all-reduce combines the experts' outputs, so ep costs no
 *       more than tp (vLLM's EP without DP); at dp > 1 each MoE layer dispatches every
 *       token's hidden state to the GPUs of its experts and combines the outputs back
 *       (an all-to-all each way, as DeepEP: par_a2a).
 *   pp  pipeline parallelism: pp stages of tp x dp GPUs, each with a contiguous share of the
 *       layers (ceil(n_layers / pp) on the fullest; vLLM splits unevenly too), handing each
 *       micro-batch's activations (tokens x d_model) to the next stage.
 *   mb  micro-batches a step's sequences are split into when pp > 1 (default pp), and
 *   sched=async|sync  how steps follow each other (default async): see par_pipeline_new.
 * The replica has tp x dp x pp GPUs; the scheduler sees all its sequences (with dp > 1 the
 * dp ranks' schedulers as one, their limits summed: sim.h), the KV capacity is the ranks'
 * together and the fullest stage's (sim_kv_blocks, serving_kv_blocks).
 *
 * Not modelled, said in docs/models.md: expert load imbalance (routing is uniform: the
 * busiest GPU's excess is not priced), uneven DP ranks (the ranks' work is split evenly),
 * overlap of communication with compute, DeepEP's FP8 dispatch, and the pipeline's first
 * stages being lighter than the last (the embedding and LM head are priced on one stage).
 *
 * Invariants: every degree >= 1 after par_parse or par_default; par_check is the one place
 * a spec meets a model and a GPU. Plain values, no ownership; par_pipeline_new takes its
 * inner model. */
#ifndef TWIN_PARALLEL_H
#define TWIN_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "sim/cost.h"
#include "sim/presets.h"

typedef struct {
    int32_t tp, dp, ep, pp;
    int32_t mb;        /* micro-batches a step with pp > 1 splits into; 0: pp */
    int32_t pp_sync;   /* 1: GPipe steps (bubbles every step); 0: vLLM's asynchronous batches */
} par_t;

/* tp given, everything else 1. */
void par_default(par_t *p, int32_t tp);
/* Parses spec into p. 0, or -1 with a message naming the offending key or value. */
int par_parse(const char *spec, par_t *p, char *err, size_t errlen);
/* The canonical spec ("tp=8,dp=1,ep=8,pp=1"; mb and sched when pp > 1), as runs record it. */
void par_format(const par_t *p, char *buf, size_t n);
/* GPUs of one replica: tp x dp x pp. */
int32_t par_gpus(const par_t *p);
/* 1 when the spec is plain tensor parallelism (dp, ep, pp 1). */
int par_is_tp_only(const par_t *p);
/* The spec against the model and the GPU: tp dividing the heads (and the KV heads one way
 * or the other), ep 1 or tp x dp and dividing the experts, dp and ep only on a mixture of
 * experts, pp at most the layers, a link for any group of more than one GPU and the
 * network for one wider than a node. 0, or -1 with the reason in err. */
int par_check(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, char *err,
              size_t errlen);

/* The fullest stage's shape: m with ceil(n_layers / pp) layers, of which dense first
 * layers as many as that last stage holds and window layers in proportion. m itself when
 * pp is 1. */
void par_stage_model(const preset_model_t *m, const par_t *p, preset_model_t *stage);
/* Expert parallelism's all-to-all at dp > 1, per MoE layer of a pass of T tokens (all
 * ranks' together): latency + s_per_token x T, dispatch and combine. Each token goes once
 * to every other GPU that holds one of its k experts, (G - 1)(1 - (1 - 1/G)^k) GPUs on
 * average of the stage's G = tp x dp (DeepEP sends a token to a GPU once), d_model x
 * dtype_bytes each way; a GPU sends its T / G tokens' share at link_bw x bw_eff within a
 * node, and the off-node part at net_bw across nodes (the slower of the two paths sets
 * the time). Both 0 when dp is 1 or the model is dense. 0, or -1 with a message when a
 * needed bandwidth is unknown. */
int par_a2a(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, double bw_eff,
            double *latency_s, double *s_per_token, char *err, size_t errlen);
/* Pipeline parallelism's hand-over between stages, per micro-batch of T tokens: latency +
 * s_per_token x T (d_model x dtype_bytes a token; over the network when the replica is
 * wider than a node, else the link at bw_eff). Both 0 when pp is 1. 0 or -1 (message). */
int par_p2p(const par_t *p, const preset_model_t *m, const preset_hw_t *hw, double bw_eff,
            double *latency_s, double *s_per_token, char *err, size_t errlen);

/* A run's split into a cost model's parameters (cost.h): dp, ep and the all-to-all's
 * figures (from par_a2a); for a linear model also the moe_ fields as one GPU's share under
 * expert parallelism (n_experts / ep whole experts of stage's shape, top_k / ep a token).
 * Nothing changes at tp alone. */
void par_apply_roofline(const par_t *p, double a2a_latency_s, double a2a_s_per_token,
                        cost_roofline_params_t *rp);
void par_apply_linear(const par_t *p, const preset_model_t *stage, double a2a_latency_s,
                      double a2a_s_per_token, cost_linear_params_t *lp);

/* The step cost of a pipeline of p->pp stages, each costing `stage` (one stage's model,
 * taken: freed with the result) plus its hand-over. A step's sequences split into
 * m = min(mb, seqs) micro-batches of 1/m of the work each (t = stage(f / m) + hand-over):
 *   async (vLLM V1: pp batches in flight, the next step's micro-batches fill the pipeline
 *         behind this one's): a step takes max(m, pp) x t; m < pp leaves stages idle
 *   sync  (GPipe: each step drains the pipeline): (m + pp - 1) x t, the bubble every step
 * Host time is the stage model's for the whole step. NULL when out of memory (stage is
 * freed); `stage` itself when pp is 1. */
cost_model_t *par_pipeline_new(cost_model_t *stage, const par_t *p, double p2p_latency_s,
                               double p2p_s_per_token);
/* The micro-batch's features: f's sums over m, rounded up (at least one token). */
void par_split_features(const cost_features_t *f, int32_t m, cost_features_t *out);

#endif

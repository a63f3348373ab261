/* serving_cost: a serving profile (sim/serving.h) applied to a cost model (sim/cost.h):
 * the kernels the serving engine picks change the cost model's own terms before it is built
 * (attention's K/V read rate, the all-reduce, the MoE kernel's efficiency), and its CUDA
 * graphs change how a step's work is run (padding up to a capture size; the launch-bound
 * floor of an eager step), which a wrapper around the built model applies.
 *
 * Invariants: with an inactive profile ("none") every function leaves its input as it was
 * and serving_cost_wrap returns the base model itself; the wrapper is a pure function of a
 * step's features, as every cost model is.
 *
 * Ownership: serving_cost_wrap takes ownership of base (freed with the wrapper, or at once
 * when the wrapper cannot be made: NULL is returned then). */
#ifndef TWIN_SERVING_COST_H
#define TWIN_SERVING_COST_H

#include "sim/cost.h"
#include "sim/presets.h"
#include "sim/serving.h"

/* A linear model's terms under the profile: kv_token_s from attn_kv_bw_eff of hw's
 * bandwidth (the KV knots dropped: the kernel's rate is what the profile says), the
 * all-reduce from the profile's table at p->tp, the expert term's efficiency. */
void serving_adjust_linear(const serving_t *s, cost_linear_params_t *p, const preset_model_t *m,
                           const preset_hw_t *hw);
/* The roofline's parameters likewise. */
void serving_adjust_roofline(const serving_t *s, cost_roofline_params_t *p);

/* The model under the profile's CUDA graphs: a step of at most graph_max tokens costs the
 * base pass of its padded token count; a larger one at least n_layers x kernels_per_layer
 * x launch_s (the CPU launching its kernels eagerly). */
cost_model_t *serving_cost_wrap(const serving_t *s, cost_model_t *base, const preset_model_t *m,
                                int32_t graph_max);

#endif

/* cost_file: cost models as plain `key = value` text files (sim/kvfile.h syntax), written
 * by `twinserve calibrate` and read by `sim --cost FILE` (and sweep, explain, validate).
 *
 * A file says what it models and where it came from, then its coefficients:
 *
 *   format = 1
 *   kind = linear                 # or roofline
 *   fitted_for = dummy:smollm2-135m on cpu (f32 weights), 2 threads
 *   source = profile smollm2.csv (64 points)
 *   fitted_at = 2026-12-01T15:00:00Z
 *   version = 0.1.0
 *   name = smollm2-135m           # the model's shape: a model preset file's keys
 *   n_layers = 30 ... dtype_bytes = 4
 *   step_s = 1.2e-4               # kind = linear: cost.h's formula, seconds
 *   seq_s, sampled_s, kv_token_s, attn_pair_s, host_step_s, host_seq_s, host_token_s
 *   gemm_rows = 1, 2, 4, ...      # knots (rows), ascending
 *   gemm_s_per_param = ...        # gemm(rows) at each knot, s per matrix parameter
 *   kv_knots = 512, 4096          # optional: where a KV position's cost rises, and
 *   kv_extra_s = ...              #   by how much (s per position beyond each)
 *   tp = 4                        # optional (1): the tensor-parallel degree it models;
 *   allreduce_latency_s = ...     #   with tp > 1, the all-reduce's latency and
 *   allreduce_s_per_byte = ...    #   time per byte (cost.h: comm)
 *   moe_eff, moe_rows, moe_s_per_param  # optional, a mixture of experts (cost.h: moe):
 *                                 #   the kernel's efficiency and the experts' own curve
 *   hw = a100-80g                 # optional: the hardware preset it was fitted for
 *   layer_params, lm_params       # optional: checked against the shape's
 *   fit_points, fit_median_err, cv_median_err, cv_p90_err           # informational
 *   range_tokens, range_seqs, range_kv_tokens, range_attn_pairs     # the largest fitted
 *
 * Either kind may add the client-side terms (sim.h: what a streaming client measures beyond
 * the server), each optional, 0 when absent, written only when non-zero:
 *   client_request_s = 0.002      # per request: HTTP/API handling, tokeniser call
 *   client_prompt_token_s = 1e-6  # per prompt token: tokenising the prompt
 *   client_token_s = 5e-5         # per streamed output token
 *
 * kind = roofline holds hardware figures (a hardware preset file's keys but name: mem_bw,
 * flops, mem_bytes, link_bw) and the roofline's flops_eff, bw_eff, attn_eff, overhead_s.
 *
 * Invariants: a file that loads describes a valid model: an unknown key, a key of the other
 * kind, a missing one, a value out of range (negative, non-finite, knots not ascending,
 * gemm decreasing, lists of different lengths) or a shape that does not match
 * layer_params/lm_params is refused with "PATH:LINE: ..." or "PATH: ..." naming the key.
 *
 * Ownership: cost_file_t is a plain value. cost_file_model returns a model the caller frees
 * with cost_free. */
#ifndef TWIN_COST_FILE_H
#define TWIN_COST_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "sim/cost.h"
#include "sim/kvfile.h"
#include "sim/presets.h"

typedef enum { COST_FILE_LINEAR = 1, COST_FILE_ROOFLINE = 2 } cost_file_kind_t;

typedef struct {
    cost_file_kind_t kind;
    char path[1024];                     /* as read (empty for a fitted, unsaved one) */
    char fitted_for[KV_TEXT_CAP], source[KV_TEXT_CAP], fitted_at[KV_TEXT_CAP];
    char version[KV_TEXT_CAP];
    char hw_preset[KV_TEXT_CAP];         /* "hw": the hardware preset it was fitted for ("" if
                                          * none): sim takes the KV capacity from it */
    preset_model_t model;                /* the shape it models */
    cost_linear_params_t lin;            /* kind linear */
    preset_hw_t hw;                      /* kind roofline */
    cost_roofline_params_t roof;
    /* how well the fit did (NAN when the file does not say) */
    double fit_points, fit_median_err, cv_median_err, cv_p90_err;
    /* the largest tokens, sequences, KV positions and attention pairs of a fitted point:
     * beyond them the model extrapolates (cost.h says how) */
    double range_tokens, range_seqs, range_kv_tokens, range_attn_pairs;
    /* client-side terms, seconds (sim.h's sim_client_t; 0 when the file has none) */
    double client_request_s, client_prompt_token_s, client_token_s;
} cost_file_t;

/* 0, or -1 with the message in err. A path "builtin:NAME" reads one of the calibrations
 * shipped in the binary (sim/costs/NAME.cost, see cost_file_builtin). */
int cost_file_read(const char *path, cost_file_t *cf, char *err, size_t errlen);

/* The shipped calibration for a built-in model preset on a built-in hardware preset at
 * degree tp: its "builtin:NAME" path in out (0), or -1 when none is shipped. */
int cost_file_builtin(const char *model, const char *hw, int32_t tp, char *out, size_t outlen);
/* The same, found by the layers' shape when m is not the built-in of its name (a
 * config.json of Llama-2-70B-chat, another vocabulary): the first shipped calibration for
 * hw at tp whose layers match m's (layers, d_model, heads, KV heads, head_dim, d_ff,
 * experts, dtype). 0 with its path, or -1. */
int cost_file_builtin_by_shape(const preset_model_t *m, const char *hw, int32_t tp, char *out,
                               size_t outlen);
/* A linear file fitted for the same layers made m's: its shape, parameter counts (the LM
 * head's follow m's vocabulary; the layers' curve is the measured one). */
void cost_file_adopt_shape(cost_file_t *cf, const preset_model_t *m);
/* The number of shipped calibrations and the name of the i-th (for listings). */
int cost_file_builtin_count(void);
const char *cost_file_builtin_name(int i);

/* Writes cf to path through a temporary file renamed into place (a failure leaves no
 * partial file). `comment` (may be NULL) goes first, each line prefixed with "# ". 0 or -1. */
int cost_file_write(const char *path, const cost_file_t *cf, const char *comment, char *err,
                    size_t errlen);

/* The model, at tensor-parallel degree tp (a linear model was fitted at one degree: tp
 * must be 1). NULL with a message in err. */
cost_model_t *cost_file_model(const cost_file_t *cf, int32_t tp, char *err, size_t errlen);

/* The model as a JSON object for a run's config ({"model":"linear","file":...,...}). */
void cost_file_json(FILE *f, const cost_file_t *cf);

/* A linear model's expert terms from the model's shape (sim/cost.h: moe): every layer a
 * mixture of m's experts, each device holding 1/tp of each expert; all 0 for a dense model. */
void cost_file_moe_shape(const preset_model_t *m, cost_linear_params_t *p);
/* The attention terms a run takes from the shape, never from a file: the window layers'
 * share (window_share) and latent attention's prefill (mla_pf_pair_scale,
 * mla_expand_params at p->tp). Zero for a model without them. */
void cost_file_attn_shape(const preset_model_t *m, cost_linear_params_t *p);

/* 0 when a and b have the same shape (names aside), else -1 with the first difference in
 * err ("n_layers 30 vs 32"). */
int cost_file_same_shape(const preset_model_t *a, const preset_model_t *b, char *err,
                         size_t errlen);

#endif

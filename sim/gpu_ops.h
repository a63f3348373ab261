/* gpu_ops: a GPU's operator rates by shape, for models no published profile covers.
 *
 * Vidur's profiles (analysis/vidur.h) time every token-parallel operator of six models on
 * A100 and H100 at TP 1, 2, 4 and 8: 96 matrix shapes (the fused QKV, O, gate/up and down
 * products of each) and the element-wise operators at as many widths. A calibration from a
 * model's own profile is the best there is (sim/costs/); a model without one (Mixtral,
 * Mistral, Qwen, any config.json) still runs the same kinds of operators, only of other
 * sizes. This module holds, at each profiled token count M, what one call of each kind
 * costs as a function of its size:
 *
 *     t(M, size) = t0(M) + size x s(M)
 *
 * size: a product's matrix parameters (GPU_OP_GEMM); the row width in elements for the
 * RMS norm and the residual add (d_model), RoPE ((heads + KV heads) x head_dim per device),
 * the activation (d_ff per device) and the embedding gather (d_model). t0 is the call's
 * fixed cost (launch, tails, small-matrix inefficiency), s its cost per unit of size (a
 * product's time per parameter at M rows: memory-bound and flat at small M, compute-bound
 * at large M). Both are fitted at every M across all the profiles of one GPU
 * (analysis/vidur_ops.c, `calibrate --vidur DIR --ops`), each non-decreasing in M; and
 * NCCL's all-reduce at 2, 4 and 8 GPUs (latency + bytes x time per byte) from the same
 * data's network profiles. Between token counts the rates are linear; below the first
 * flat, beyond the last proportional to M (cost.h's gemm semantics).
 *
 * From these, gpu_ops_linear builds a linear cost file (sim/cost.h) for any shape, as
 * analysis/vidur.c builds one from a model's own profile: each token count's pass is
 * n_layers x (the layer's operators at this shape) + the embedding + the final norm, over
 * the layer parameters; a mixture of experts' products get the per-parameter curve s(M) of
 * GPU_OP_GEMM at each expert's share of the rows (cost.h: moe) and its two fused kernels'
 * t0 in the layer; attention stays on the roofline (K/V at the products' one-row read rate,
 * FLOPs at GPU_ATTN_EFF of the peak), exactly as vidur.c does.
 *
 * Files: `key = value` (sim/kvfile.h), kind = ops; the built-in ones are sim/costs/GPU.ops,
 * embedded in the binary and made by sim/costs/regen.sh.
 *
 * Invariants: a file that loads has n >= 2 ascending token counts, every curve finite,
 * >= 0 and non-decreasing. Ownership: gpu_ops_t is a plain value. */
#ifndef TWIN_GPU_OPS_H
#define TWIN_GPU_OPS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "sim/cost_file.h"
#include "sim/kvfile.h"
#include "sim/presets.h"

#define GPU_OPS_MAX 512

/* Attention's FLOPs at this fraction of the tensor peak: FlashAttention-2 reaches 50-73% of
 * A100's peak in its forward pass (Dao, 2023, fig. on A100 forward speed, head dim 128)
 * and FlashAttention-3 up to 75% of H100's in FP16 (Shah et al., 2024); a serving
 * prefill's causal mask and chunk lengths of 512-2048 sit at the lower end of both. */
#define GPU_ATTN_EFF 0.5

enum { GPU_OP_GEMM, GPU_OP_NORM, GPU_OP_ROPE, GPU_OP_ACT, GPU_OP_ADD, GPU_OP_EMB, GPU_OP_KINDS };

/* The kinds' names in files and reports: "gemm", "norm", "rope", "act", "add", "emb". */
extern const char *const gpu_op_names[GPU_OP_KINDS];

typedef struct {
    char hw[KV_TEXT_CAP];           /* the hardware preset it was fitted for */
    char source[KV_TEXT_CAP], fitted_at[KV_TEXT_CAP], path[1024];
    int32_t n;
    double rows[GPU_OPS_MAX];       /* token counts, ascending */
    double t0[GPU_OP_KINDS][GPU_OPS_MAX];  /* seconds a call */
    double s[GPU_OP_KINDS][GPU_OPS_MAX];   /* seconds per unit of size */
    double ar_latency_s[3], ar_s_per_byte[3];   /* NCCL at 2, 4, 8 GPUs on one node */
    /* how well the rates predict the profiles of a model left out of the fit, by
     * operator kind and for a whole layer (relative errors; NAN when unknown) */
    double cv_median[GPU_OP_KINDS + 1], cv_p90[GPU_OP_KINDS + 1];
} gpu_ops_t;

/* "builtin:GPU" (sim/costs/GPU.ops), or a file. 0, or -1 with a message. */
int gpu_ops_read(const char *path, gpu_ops_t *ops, char *err, size_t errlen);
/* The built-in rates for a hardware preset name: 0, or -1 when none is shipped. */
int gpu_ops_builtin(const char *hw, gpu_ops_t *ops);
int gpu_ops_write(const char *path, const gpu_ops_t *ops, const char *comment, char *err,
                  size_t errlen);

/* One call of kind k with this size at M rows, seconds. */
double gpu_ops_time(const gpu_ops_t *ops, int kind, double rows, double size);
/* The products' time per parameter at M rows, without the call's fixed cost. */
double gpu_ops_gemm_s(const gpu_ops_t *ops, double rows);

/* The linear cost file of model m at degree tp on hw (whose figures give attention's
 * FLOP rate), from these rates (see above). 0, or -1 with a message (tp not dividing the
 * heads, no NCCL rate for the degree). */
int gpu_ops_linear(const gpu_ops_t *ops, const preset_model_t *m, const preset_hw_t *hw,
                   int32_t tp, cost_file_t *cf, char *err, size_t errlen);

#endif

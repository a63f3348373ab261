/* vidur: the linear cost model of a GPU, calibrated from Vidur's published operator and
 * network profiles (profiles/vidur/ in the shared data: CUDA-event timings on real A100 and
 * H100 GPUs, Agrawal et al., MLSys 2024), for `twinserve calibrate --vidur DIR`.
 *
 * What the profiles give and what this module makes of them:
 *  - compute/<gpu>/<org>/<model>/mlp.csv: one call of each token-parallel operator of ONE
 *    layer (QKV, RoPE, O, the two RMSNorms, gated MLP up, activation, down, residual add)
 *    and the embedding, in ms, at 259 token counts (1..4096) and TP 1, 2, 4, 8. The model
 *    directory is found by shape (heads, KV heads, d_model, d_ff), not by name. Each
 *    operator's median time is fitted as the non-decreasing piecewise-linear curve nearest
 *    it in relative least squares (isotonic regression, a knot at every profiled token
 *    count: a GEMM's time is a staircase of its tiles, which sparse knots smooth away) and
 *    cross-validated on held-out token counts; so is the whole pass's token-parallel time
 *        n_layers x (sum of the layer's operators, the add twice) + embedding + final norm
 *    which becomes the cost file's gemm curve (divided by the model's layer parameters; at
 *    TP > 1 the times are one device's).
 *  - network/<gpu>_dgx/all_reduce.csv: NCCL all-reduce times by message size and workers.
 *    The rows of tp workers on one node are fitted as latency + bytes x time per byte
 *    (relative least squares, cross-validated on held-out sizes), over the message sizes a
 *    pass can produce (up to 2 x 4096 tokens of d_model activations).
 *  - Attention is not in the profiles and stays on the roofline, in the linear model's
 *    terms: KV reads (kv_token_s) at the bandwidth the profile's own GEMMs reach at one
 *    token (a one-row product streams its weights exactly as decode attention streams its
 *    K/V), attention FLOPs (attn_pair_s) at VIDUR_ATTN_EFF of the preset's tensor peak, and
 *    two kernels per layer (the KV write and the attention) at the profile's smallest
 *    kernel time, in step_s.
 *  - Not in the profiles, left at 0 and said so: the sampler, per-sequence work and the
 *    serving engine's CPU time (host terms); `calibrate --db DB --run MEASURED` fits those
 *    from a user's own benchmark.
 *
 * Ownership: plain values; nothing is kept between calls. */
#ifndef TWIN_VIDUR_H
#define TWIN_VIDUR_H

#include <stdio.h>

#include "sim/cost_file.h"
#include "sim/gpu_ops.h"

/* attention's FLOPs at GPU_ATTN_EFF of the peak (sim/gpu_ops.h says why) */
#define VIDUR_ATTN_EFF GPU_ATTN_EFF

typedef struct {
    const char *dir;       /* the profiles' root: .../profiles/vidur */
    const char *model;     /* a model preset name or file */
    const char *hw;        /* a built-in hardware preset: a100-80g or h100 */
    int32_t tp;            /* 1, 2, 4 or 8 */
    const char *network;   /* network/<network>/all_reduce.csv; NULL: "<gpu>_dgx" */
    int folds;             /* cross-validation folds (5) */
    unsigned long long seed;
} vidur_opts_t;

#define VIDUR_MAX_OPS 12
#define VIDUR_MAX_POINTS 4096

typedef struct {
    char name[40];
    int n;                         /* token counts (sizes for the all-reduce) */
    double fit_median, cv_median, cv_p90;   /* relative errors */
    double at_1, at_max;           /* the measured median at the fewest and most tokens, ms */
} vidur_op_fit_t;

typedef struct {
    cost_file_t cf;                /* the calibration (kind linear) */
    char compute_path[2048], network_path[2048];
    vidur_op_fit_t ops[VIDUR_MAX_OPS];   /* each operator, then "layer" and "pass" */
    int n_ops;
    vidur_op_fit_t allreduce;      /* n = 0 at tp 1 */
    double gemm_read_bw;           /* bytes/s the GEMMs reach at the fewest tokens */
    double gemm_flops;             /* FLOP/s they reach at the most tokens */
    double kernel_floor_s;         /* the smallest kernel's median */
    preset_hw_t hw;
    /* the measured token-parallel time of a pass at each profiled token count (the sum the
     * gemm curve is fitted to), seconds: what a calibration is checked against */
    int n_points;
    double tokens[VIDUR_MAX_POINTS], pass_s[VIDUR_MAX_POINTS];
} vidur_result_t;

/* 0, or -1 with the reason in err: an unknown model or hardware, no profile of that shape
 * on that GPU, missing columns, non-numeric cells (file, line and column), no rows at the
 * requested TP. */
int vidur_calibrate(const vidur_opts_t *o, vidur_result_t *r, char *err, size_t errlen);

/* The report: each fit's errors, the rates they imply against the preset's peaks, and what
 * comes from where. */
void vidur_report(FILE *f, const vidur_result_t *r);
void vidur_report_json(FILE *f, const vidur_result_t *r);

#endif

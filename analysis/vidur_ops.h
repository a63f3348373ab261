/* vidur_ops: a GPU's operator rates by shape (sim/gpu_ops.h) fitted to every profile Vidur
 * published for that GPU (profiles/vidur/compute/GPU/ORG/MODEL/mlp.csv at TP 1, 2, 4, 8;
 * network/GPU_dgx/all_reduce.csv), for `twinserve calibrate --vidur DIR --ops --hw GPU
 * --out FILE` and sim/costs/regen.sh, which ships sim/costs/GPU.ops.
 *
 * At each token count M the profiles share, each operator kind's calls (a product of P
 * parameters; an element-wise operator of width w) are fitted as t = t0(M) + size x s(M)
 * by non-negative relative least squares across every model and degree, then each of t0
 * and s is made non-decreasing in M (pool-adjacent-violators). Leave-one-model-out
 * cross-validation (the rates refitted without a model, its calls predicted) measures how
 * well the rates carry to a shape they never saw: per kind and for a whole layer (the
 * layer's calls summed, as a cost file uses them). NCCL's all-reduce at 2, 4 and 8 GPUs
 * on one node is fitted as latency + bytes x time per byte over messages up to 64 MiB.
 *
 * Ownership: plain values; nothing kept. */
#ifndef TWIN_VIDUR_OPS_H
#define TWIN_VIDUR_OPS_H

#include <stdio.h>

#include "sim/gpu_ops.h"

#define VIDUR_OPS_MAX_MODELS 16

typedef struct {
    gpu_ops_t ops;
    int n_models;
    char models[VIDUR_OPS_MAX_MODELS][96];   /* the profiles used (ORG/MODEL) */
    int calls[GPU_OP_KINDS];                 /* operator instances per kind (x token counts) */
    /* leave-one-model-out: the median error of a layer per left-out model */
    double cv_layer_by_model[VIDUR_OPS_MAX_MODELS];
    double fit_median[GPU_OP_KINDS + 1];     /* in-sample */
} vidur_ops_result_t;

/* 0, or -1 with the reason (no profiles for the GPU, a file without the columns, token
 * counts the files do not share). */
int vidur_ops_fit(const char *dir, const char *hw, vidur_ops_result_t *r, char *err,
                  size_t errlen);
void vidur_ops_report(FILE *f, const vidur_ops_result_t *r);

#endif

/* fit: calibrates the linear cost model (sim/cost.h) from measured points: a profile's
 * timed batch shapes, or an engine run's recorded steps. Used by `twinserve calibrate`.
 *
 * The forward pass. Every coefficient is a time and must be >= 0, and gemm(rows) must not
 * fall as rows grow, so the fit is a non-negative least-squares problem (sim/nnls.h) in
 * the per-pass, per-sequence, per-sampled-row, per-KV-position and per-pair times and the
 * increments of gemm between knots (gemm_k = d_1 + ... + d_k, d >= 0), and the KV curve's
 * extra rates beyond its knots (>= 0: convex). Knots are the distinct row counts of the
 * points (tokens, and sampled rows), thinned to at least knot_ratio apart, so every knot
 * has data; the KV curve's are their KV positions, at least 2x apart, the largest left
 * out. A KV knot whose extra rate comes out 0 is dropped from the model. Errors are relative: each point's row is
 * divided by its measured time, so a 50 us decode counts as much as a 2 s prefill; a
 * point that stands for w samples counts w times.
 *
 * Outliers: after a first fit, points more than max(0.5, 8 x the median) off in relative
 * terms (a step that the OS interrupted) are dropped once and the model refitted; the
 * report says how many.
 *
 * Identifiability: a term the points cannot tell from the ones before it (every sequence
 * samples, so per-sequence and per-sampled-row times are one; no prompt chunk, so pairs
 * equal KV positions) is fixed at 0 and named in the report (`folded`), its cost carried by
 * the terms it equals on these points. Too few points, non-positive times or a single
 * token count (no GEMM curve) are refused with the reason.
 *
 * Cross-validation: `folds` seeded folds; each is held out in turn, the whole procedure
 * (knots included) rerun on the rest, and the held-out points predicted: their relative
 * errors are what the report's cv_ figures summarise. The host model (host_step_s,
 * host_seq_s, host_token_s) is fitted the same way, without knots, from host points.
 *
 * Ownership: fit_report_t's arrays are malloc'd; fit_report_free frees them. */
#ifndef TWIN_FIT_H
#define TWIN_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "sim/cost.h"

typedef struct {
    cost_features_t f;
    double t;          /* measured seconds, > 0 */
    double w;          /* weight: the samples behind t (a profile's host group); <= 0: 1 */
} fit_point_t;

typedef struct {
    int folds;         /* cross-validation folds, >= 2 (5); fewer points than folds: one per fold */
    uint64_t seed;
    double knot_ratio; /* successive knots at least this factor apart (1.4) */
    int kv_curve;      /* the KV curve: 1 fit it, 0 keep kv linear, -1 (default) both, and
                        * keep the curve only when it predicts held-out points 5% better */
} fit_opts_t;

enum { FIT_TERM_STEP, FIT_TERM_SEQ, FIT_TERM_SAMPLED, FIT_TERM_KV, FIT_TERM_PAIR, FIT_TERMS };
extern const char *const fit_term_names[FIT_TERMS];   /* "step_s", "seq_s", ... */

typedef struct {
    size_t n;                /* points given */
    size_t dropped;          /* outliers dropped before the final fit */
    int folded[FIT_TERMS];   /* 1: the term was not identifiable and is fixed at 0 */
    double *fit_err;         /* [n] (pred - meas) / meas of the final fit; NAN if dropped */
    double *cv_err;          /* [n] the same for the held-out prediction of each point */
    double fit_median, fit_p90, cv_median, cv_p90;   /* of |err|, over kept points */
    double max_tokens, max_seqs, max_kv_tokens, max_attn_pairs;  /* the fitted range */
    int kv_curve;            /* the kept model has the KV curve (fit_pass) */
} fit_report_t;

void fit_opts_defaults(fit_opts_t *o);

/* Fits the forward-pass terms of p (layer_params and lm_params must be set: the model's;
 * the knots and the five terms are written) from pts[n]. 0, or -1 with the reason. */
int fit_pass(const fit_point_t *pts, size_t n, const fit_opts_t *o, cost_linear_params_t *p,
             fit_report_t *r, char *err, size_t errlen);

/* Fits host_step_s, host_seq_s and host_token_s of p from host-time points (p must
 * already hold a valid forward-pass model: fit_pass first). 0 or -1. */
int fit_host(const fit_point_t *pts, size_t n, const fit_opts_t *o, cost_linear_params_t *p,
             fit_report_t *r, char *err, size_t errlen);

void fit_report_free(fit_report_t *r);

#endif

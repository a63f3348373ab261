/* fit: see fit.h. */
#include "sim/fit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "traces/stats.h"
#include "traces/rng.h"
#include "sim/errf.h"
#include "sim/nnls.h"

const char *const fit_term_names[FIT_TERMS] = {
    "step_s", "seq_s", "sampled_s", "kv_token_s", "attn_pair_s",
};

#define MIN_POINTS 8
#define KV_KNOT_RATIO 2.0   /* the KV curve's knots: at least this factor apart, */
#define KV_KNOT_BEYOND 3    /* and at least this many points beyond each */
#define FIT_CURVE_GAIN 0.05 /* the KV curve is kept when it cuts the held-out error by 5% */
#define DEP_TOL 1e-7   /* relative residual norm below which a column is a combination */

void fit_opts_defaults(fit_opts_t *o) {
    o->folds = 5;
    o->kv_curve = -1;
    o->seed = 1;
    o->knot_ratio = 1.4;
}

void fit_report_free(fit_report_t *r) {
    if (!r) return;
    free(r->fit_err);
    free(r->cv_err);
    r->fit_err = r->cv_err = NULL;
}

/* Distinct row counts of the points (tokens, and sampled rows > 0), thinned so that
 * successive knots are at least `ratio` apart; the largest is always a knot. */
static int pick_knots(const fit_point_t *pts, const size_t *idx, size_t n, double ratio,
                      double *knots) {
    double *v = malloc(sizeof *v * 2 * (n ? n : 1));
    if (!v) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const cost_features_t *f = &pts[idx[i]].f;
        v[m++] = (double)f->tokens;
        if (f->sampled > 0) v[m++] = (double)f->sampled;
    }
    stats_sort(v, m);
    int nk = 0;
    for (;;) {
        nk = 0;
        for (size_t i = 0; i < m; i++) {
            if (v[i] < 1) continue;
            if (nk == 0 || v[i] >= knots[nk - 1] * ratio) {
                if (nk == COST_MAX_KNOTS) break;
                knots[nk++] = v[i];
            }
        }
        double top = m ? v[m - 1] : 0;
        if (nk > 0 && knots[nk - 1] < top) {
            if (top < knots[nk - 1] * ratio && nk > 1) knots[nk - 1] = top;
            else if (nk < COST_MAX_KNOTS) knots[nk++] = top;
            else knots[nk - 1] = top;
        }
        if (nk < COST_MAX_KNOTS || ratio > 1e6) break;
        ratio *= 1.25;   /* too many distinct sizes for the knot table: spread them */
    }
    free(v);
    return nk;
}

/* The KV curve's knots: distinct KV position counts of the points, at least `ratio`
 * apart, each with at least KV_KNOT_BEYOND points beyond it (a hinge that only one or two
 * points pin down follows their noise, and cross-validation then rightly rejects it). */
static int pick_kv_knots(const fit_point_t *pts, const size_t *idx, size_t n, double ratio,
                         double *knots) {
    double *v = malloc(sizeof *v * (n ? n : 1));
    if (!v) return -1;
    for (size_t i = 0; i < n; i++) v[i] = (double)pts[idx[i]].f.kv_tokens;
    stats_sort(v, n);
    int nk = 0;
    for (size_t i = 0; i + KV_KNOT_BEYOND < n && nk < COST_MAX_KNOTS; i++) {
        if (v[i] < 1 || v[n - KV_KNOT_BEYOND] <= v[i]) continue;   /* too few beyond it */
        if (nk == 0 || v[i] >= knots[nk - 1] * ratio) knots[nk++] = v[i];
    }
    free(v);
    return nk;
}

/* The design row of a point: [d_1 .. d_K, step, seq, sampled, kv, pairs, h_1 .. h_J],
 * where d_j is the increment of gemm at knot j (its column is the sum of the knots'
 * weights from j on) and h_j the KV curve's extra rate beyond kv knot j (its column the
 * positions beyond it). */
static void design_row(const cost_features_t *f, const double *knots, int nk,
                       const double *kv_knots, int nkv, const cost_linear_params_t *p,
                       double *row) {
    double wt[COST_MAX_KNOTS], ws[COST_MAX_KNOTS], wm[COST_MAX_KNOTS], suffix = 0;
    const double lp = p->layer_params, hp = p->lm_params;
    cost_linear_gemm_weights(knots, nk, (double)f->tokens, wt);
    cost_linear_gemm_weights(knots, nk, (double)f->sampled, ws);
    /* a mixture of experts' products run on the same gemm curve (cost_linear_moe_time
     * without expert knots): the experts a pass touches, each at its share of the rows */
    double mp = 0;
    if (p->moe_layers > 0 && f->tokens > 0) {
        double touched = cost_moe_experts_touched(p->moe_experts, p->moe_top_k, (double)f->tokens);
        mp = p->moe_layers * touched * p->moe_expert_params / (p->moe_eff > 0 ? p->moe_eff : 1.0);
        cost_linear_gemm_weights(knots, nk, (double)f->tokens * p->moe_top_k / touched, wm);
    }
    for (int k = nk - 1; k >= 0; k--) {
        suffix += lp * wt[k] + hp * ws[k] + (mp > 0 ? mp * wm[k] : 0.0);
        row[k] = suffix;
    }
    row[nk + FIT_TERM_STEP] = 1;
    row[nk + FIT_TERM_SEQ] = (double)f->seqs;
    row[nk + FIT_TERM_SAMPLED] = (double)f->sampled;
    row[nk + FIT_TERM_KV] = (double)f->kv_tokens;
    row[nk + FIT_TERM_PAIR] = (double)f->attn_pairs;
    for (int j = 0; j < nkv; j++)
        row[nk + FIT_TERMS + j] = fmax(0.0, (double)f->kv_tokens - kv_knots[j]);
}

/* Solves the NNLS problem whose normal equations are G, c (nv variables), with the columns
 * `dep` marks held at 0. x receives the solution. */
static int solve_gram(double *G, double *c, int nv, const int *dep, double *x, char *err,
                      size_t errlen) {
    double *s = malloc(sizeof *s * (size_t)nv);
    if (!s) return errf(err, errlen, "out of memory (fit)");
    for (int j = 0; j < nv; j++)
        if (dep[j]) {
            for (int i = 0; i < nv; i++) G[i * nv + j] = G[j * nv + i] = 0;
            c[j] = 0;
        }
    nnls_scale(G, c, nv, s);
    int rc = nnls_solve(G, c, nv, x, err, errlen);
    for (int j = 0; j < nv; j++) x[j] *= s[j];
    free(s);
    return rc < 0 ? -1 : 0;
}

/* One fit of the pass terms on the points idx[0..n): knots, design, dependency, NNLS.
 * folded[] receives the terms fixed at 0. */
static int fit_once(const fit_point_t *pts, const size_t *idx, size_t n, double ratio,
                    int kv_curve, cost_linear_params_t *p, int *folded, char *err,
                    size_t errlen) {
    int rc = -1;
    double knots[COST_MAX_KNOTS], kv_knots[COST_MAX_KNOTS], kv_ratio = KV_KNOT_RATIO;
    int nk = pick_knots(pts, idx, n, ratio, knots);
    int nkv = kv_curve ? pick_kv_knots(pts, idx, n, kv_ratio, kv_knots) : 0;
    /* keep the variables well below the points, so the fit is determined: the KV curve's
     * knots go first (the GEMM curve's resolution is what the products need), then the
     * GEMM curve's */
    while (nkv > 0 && (size_t)(nk + nkv + FIT_TERMS) * 2 > n) {
        kv_ratio *= 1.5;   /* a wide enough ratio leaves one knot: then none */
        nkv = nkv == 1 ? 0 : pick_kv_knots(pts, idx, n, kv_ratio, kv_knots);
    }
    while (nk > 2 && nk >= 0 && nkv >= 0 && (size_t)(nk + nkv + FIT_TERMS) * 2 > n) {
        ratio *= 1.5;
        nk = pick_knots(pts, idx, n, ratio, knots);
    }
    if (nk < 0 || nkv < 0) return errf(err, errlen, "out of memory (fit)");
    int nv = nk + FIT_TERMS + nkv;
    double *G = calloc((size_t)nv * (size_t)nv, sizeof *G), *c = calloc((size_t)nv, sizeof *c);
    double *row = malloc(sizeof *row * (size_t)nv), *x = calloc((size_t)nv, sizeof *x);
    int *dep = calloc((size_t)nv, sizeof *dep);
    if (!G || !c || !row || !x || !dep) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const fit_point_t *pt = &pts[idx[i]];
        design_row(&pt->f, knots, nk, kv_knots, nkv, p, row);
        double w = pt->w > 0 ? pt->w : 1;
        for (int a = 0; a < nv; a++) row[a] /= pt->t;   /* relative error: the target is 1 */
        for (int a = 0; a < nv; a++) {
            c[a] += w * row[a];
            for (int b = 0; b <= a; b++) G[a * nv + b] += w * row[a] * row[b];
        }
    }
    for (int a = 0; a < nv; a++)
        for (int b = a + 1; b < nv; b++) G[a * nv + b] = G[b * nv + a];
    if (nnls_dependent(G, nv, DEP_TOL, dep) < 0) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    for (int t = 0; t < FIT_TERMS; t++) folded[t] = dep[nk + t];
    if (solve_gram(G, c, nv, dep, x, err, errlen) != 0) goto done;
    p->n_knots = nk;
    double acc = 0;
    for (int k = 0; k < nk; k++) {
        acc += x[k];
        p->knot_rows[k] = knots[k];
        p->knot_s[k] = acc;
    }
    p->step_s = x[nk + FIT_TERM_STEP];
    p->seq_s = x[nk + FIT_TERM_SEQ];
    p->sampled_s = x[nk + FIT_TERM_SAMPLED];
    p->kv_token_s = x[nk + FIT_TERM_KV];
    p->attn_pair_s = x[nk + FIT_TERM_PAIR];
    /* the KV curve: only the knots where the rate rises */
    p->n_kv_knots = 0;
    for (int j = 0; j < nkv; j++)
        if (x[nk + FIT_TERMS + j] > 0) {
            p->kv_knots[p->n_kv_knots] = kv_knots[j];
            p->kv_extra_s[p->n_kv_knots++] = x[nk + FIT_TERMS + j];
        }
    rc = 0;
done:
    free(G);
    free(c);
    free(row);
    free(x);
    free(dep);
    return rc;
}

/* The host model: [step, seq, tokens], relative errors, NNLS. */
static int fit_host_once(const fit_point_t *pts, const size_t *idx, size_t n,
                         cost_linear_params_t *p, char *err, size_t errlen) {
    enum { NV = 3 };
    double G[NV * NV] = {0}, c[NV] = {0}, x[NV] = {0};
    int dep[NV] = {0};
    for (size_t i = 0; i < n; i++) {
        const fit_point_t *pt = &pts[idx[i]];
        double row[NV] = {1 / pt->t, (double)pt->f.seqs / pt->t, (double)pt->f.tokens / pt->t};
        double w = pt->w > 0 ? pt->w : 1;
        for (int a = 0; a < NV; a++) {
            c[a] += w * row[a];
            for (int b = 0; b < NV; b++) G[a * NV + b] += w * row[a] * row[b];
        }
    }
    if (nnls_dependent(G, NV, DEP_TOL, dep) < 0) return errf(err, errlen, "out of memory (fit)");
    if (solve_gram(G, c, NV, dep, x, err, errlen) != 0) return -1;
    p->host_step_s = x[0];
    p->host_seq_s = x[1];
    p->host_token_s = x[2];
    return 0;
}

static double predict(const cost_linear_params_t *p, const cost_features_t *f, int host) {
    cost_model_t *m = cost_linear_new(p);
    if (!m) return NAN;
    double t = host ? cost_host_time(m, f) : cost_pass_time(m, f);
    cost_free(m);
    return t;
}

/* median and p90 of |e| over the non-NAN entries */
static void summarise(const double *e, size_t n, double *med, double *p90) {
    double *a = malloc(sizeof *a * (n ? n : 1));
    size_t m = 0;
    *med = *p90 = NAN;
    if (!a) return;
    for (size_t i = 0; i < n; i++)
        if (!isnan(e[i])) a[m++] = fabs(e[i]);
    stats_sort(a, m);
    *med = stats_percentile_sorted(a, m, 50);
    *p90 = stats_percentile_sorted(a, m, 90);
    free(a);
}

static int check_points(const fit_point_t *pts, size_t n, const char *what, char *err,
                        size_t errlen) {
    if (n < MIN_POINTS)
        return errf(err, errlen, "%zu %s points are too few for a fit: at least %d are needed",
                    n, what, MIN_POINTS);
    for (size_t i = 0; i < n; i++) {
        const cost_features_t *f = &pts[i].f;
        if (!(pts[i].t > 0) || !isfinite(pts[i].t))
            return errf(err, errlen, "%s point %zu: its time must be > 0 (got %g)", what, i + 1,
                        pts[i].t);
        if (f->tokens < 1 || f->seqs < 1 || f->sampled < 0 || f->kv_tokens < f->tokens ||
            f->attn_pairs < f->tokens)
            return errf(err, errlen, "%s point %zu: impossible features (tokens %lld, seqs "
                        "%lld, sampled %lld, kv_tokens %lld, attn_pairs %lld)", what, i + 1,
                        (long long)f->tokens, (long long)f->seqs, (long long)f->sampled,
                        (long long)f->kv_tokens, (long long)f->attn_pairs);
    }
    return 0;
}

/* The folds' assignment: a seeded shuffle dealt round-robin. */
static int *make_folds(size_t n, int folds, uint64_t seed) {
    int *fold = malloc(sizeof *fold * (n ? n : 1));
    size_t *perm = malloc(sizeof *perm * (n ? n : 1));
    if (!fold || !perm) {
        free(fold);
        free(perm);
        return NULL;
    }
    rng_t r;
    rng_seed3(&r, seed, 0x666974ULL /* "fit" */, n);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(rng_u64(&r) % i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; i++) fold[perm[i]] = (int)(i % (size_t)folds);
    free(perm);
    return fold;
}

/* The shared driver of fit_pass and fit_host: fit, drop outliers once, refit, then
 * cross-validate. */
static int fit_common(const fit_point_t *pts, size_t n, const fit_opts_t *o, int host,
                      int kv_curve, cost_linear_params_t *p, fit_report_t *r, char *err,
                      size_t errlen) {
    int rc = -1, *fold = NULL, folded[FIT_TERMS] = {0}, cv_folded[FIT_TERMS];
    size_t *idx = malloc(sizeof *idx * (n ? n : 1)), *train = malloc(sizeof *train * (n ? n : 1));
    memset(r, 0, sizeof *r);
    r->n = n;
    r->fit_err = malloc(sizeof *r->fit_err * (n ? n : 1));
    r->cv_err = malloc(sizeof *r->cv_err * (n ? n : 1));
    if (!idx || !train || !r->fit_err || !r->cv_err) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    const char *what = host ? "host-time" : "forward-pass";
    if (check_points(pts, n, what, err, errlen) != 0) goto done;
    if (!host) {
        int varied = 0;
        for (size_t i = 1; i < n && !varied; i++) varied = pts[i].f.tokens != pts[0].f.tokens;
        if (!varied) {
            errf(err, errlen, "every point computes %lld tokens: the time per token (the GEMM "
                 "curve) cannot be fitted; measure several batch sizes",
                 (long long)pts[0].f.tokens);
            goto done;
        }
    }
    size_t m = n;
    for (size_t i = 0; i < n; i++) idx[i] = i;
    for (int round = 0; round < 2; round++) {
        if (host ? fit_host_once(pts, idx, m, p, err, errlen)
                 : fit_once(pts, idx, m, o->knot_ratio, kv_curve, p, folded, err, errlen))
            goto done;
        for (size_t i = 0; i < n; i++) r->fit_err[i] = NAN;
        for (size_t i = 0; i < m; i++) {
            double t = predict(p, &pts[idx[i]].f, host);
            r->fit_err[idx[i]] = (t - pts[idx[i]].t) / pts[idx[i]].t;
        }
        if (round == 1) break;
        double med, p90;
        summarise(r->fit_err, n, &med, &p90);
        double cut = fmax(0.5, 8 * med);
        size_t keep = 0;
        for (size_t i = 0; i < m; i++)
            if (fabs(r->fit_err[idx[i]]) <= cut) idx[keep++] = idx[i];
        r->dropped = m - keep;
        if (keep == m || keep < MIN_POINTS) {
            r->dropped = 0;
            break;
        }
        m = keep;
    }
    memcpy(r->folded, folded, sizeof folded);
    summarise(r->fit_err, n, &r->fit_median, &r->fit_p90);

    /* cross-validation over the kept points */
    int folds = o->folds >= 2 ? o->folds : 2;
    if ((size_t)folds > m) folds = (int)m;
    fold = make_folds(m, folds, o->seed);
    if (!fold) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    for (size_t i = 0; i < n; i++) r->cv_err[i] = NAN;
    for (int k = 0; k < folds; k++) {
        size_t nt = 0;
        for (size_t i = 0; i < m; i++)
            if (fold[i] != k) train[nt++] = idx[i];
        cost_linear_params_t q = *p;
        if (host ? fit_host_once(pts, train, nt, &q, err, errlen)
                 : fit_once(pts, train, nt, o->knot_ratio, kv_curve, &q, cv_folded, err,
                            errlen))
            goto done;
        for (size_t i = 0; i < m; i++)
            if (fold[i] == k) {
                const fit_point_t *pt = &pts[idx[i]];
                r->cv_err[idx[i]] = (predict(&q, &pt->f, host) - pt->t) / pt->t;
            }
    }
    summarise(r->cv_err, n, &r->cv_median, &r->cv_p90);
    for (size_t i = 0; i < m; i++) {
        const cost_features_t *f = &pts[idx[i]].f;
        r->max_tokens = fmax(r->max_tokens, (double)f->tokens);
        r->max_seqs = fmax(r->max_seqs, (double)f->seqs);
        r->max_kv_tokens = fmax(r->max_kv_tokens, (double)f->kv_tokens);
        r->max_attn_pairs = fmax(r->max_attn_pairs, (double)f->attn_pairs);
    }
    rc = 0;
done:
    free(idx);
    free(train);
    free(fold);
    if (rc != 0) fit_report_free(r);
    return rc;
}

int fit_pass(const fit_point_t *pts, size_t n, const fit_opts_t *o, cost_linear_params_t *p,
             fit_report_t *r, char *err, size_t errlen) {
    if (!(p->layer_params > 0) || !(p->lm_params >= 0))
        return errf(err, errlen, "the model's layer and LM-head parameters are needed");
    if (o->kv_curve >= 0) {
        if (fit_common(pts, n, o, 0, o->kv_curve, p, r, err, errlen) != 0) return -1;
        r->kv_curve = o->kv_curve;
        return 0;
    }
    /* Both forms, the simpler kept unless the curve predicts held-out points better: the
     * curve's extra knots can follow noise as well as a cache, and cross-validation is
     * what tells the two apart. */
    cost_linear_params_t lin = *p;
    fit_report_t rl;
    if (fit_common(pts, n, o, 0, 0, &lin, &rl, err, errlen) != 0) return -1;
    if (fit_common(pts, n, o, 0, 1, p, r, err, errlen) != 0) {
        fit_report_free(&rl);
        return -1;
    }
    if (!(r->cv_median < rl.cv_median * (1 - FIT_CURVE_GAIN))) {
        fit_report_free(r);
        *r = rl;
        *p = lin;
        r->kv_curve = 0;
    } else {
        fit_report_free(&rl);
        r->kv_curve = 1;
    }
    return 0;
}

int fit_host(const fit_point_t *pts, size_t n, const fit_opts_t *o, cost_linear_params_t *p,
             fit_report_t *r, char *err, size_t errlen) {
    return fit_common(pts, n, o, 1, 0, p, r, err, errlen);
}

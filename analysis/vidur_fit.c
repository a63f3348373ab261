/* vidur_fit: the curve and line fits and the CSV collection that the GPU calibrations from
 * Vidur's profiles share (analysis/vidur.c: one model's own profile; analysis/vidur_ops.c:
 * a GPU's operator rates over all of them). Contract: analysis/vidur_internal.h. */
#include "analysis/vidur_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/stats.h"
#include "sim/errf.h"
#include "sim/nnls.h"

/* ------------------------------------------------------------------ the curve fit */


double vidur_curve_at(const vidur_curve_t *c, double x) {
    double w[COST_MAX_KNOTS], t = 0;
    cost_linear_gemm_weights(c->knots, c->nk, x, w);
    for (int k = 0; k < c->nk; k++) t += w[k] * c->val[k];
    return t;
}

/* The monotone least-squares curve through the used points (x ascending, distinct), in
 * relative terms (weights 1 / y^2): pool-adjacent-violators, every used x a knot. A GEMM's
 * time is a staircase (its tiles, its waves of thread blocks): dense knots follow the
 * steps that a smooth curve would average away, and monotonicity keeps a noisy point from
 * making more tokens cheaper. 0 or -1. */
int vidur_curve_fit(const double *x, const double *y, const int *use, int n, vidur_curve_t *c,
                     char *err, size_t errlen) {
    double *sw = malloc(sizeof *sw * (size_t)n), *swy = malloc(sizeof *swy * (size_t)n);
    int *len = malloc(sizeof *len * (size_t)n), nb = 0, rc = -1;
    if (!sw || !swy || !len) {
        errf(err, errlen, "out of memory (fit)");
        goto done;
    }
    c->nk = 0;
    for (int i = 0; i < n; i++) {
        if ((use && !use[i]) || !(y[i] > 0)) continue;
        if (c->nk == COST_MAX_KNOTS) {
            errf(err, errlen, "more than %d token counts", COST_MAX_KNOTS);
            goto done;
        }
        c->knots[c->nk++] = x[i];
        double w = 1 / (y[i] * y[i]);
        sw[nb] = w, swy[nb] = w * y[i], len[nb++] = 1;
        while (nb > 1 && swy[nb - 2] / sw[nb - 2] > swy[nb - 1] / sw[nb - 1]) {
            sw[nb - 2] += sw[nb - 1], swy[nb - 2] += swy[nb - 1], len[nb - 2] += len[nb - 1];
            nb--;
        }
    }
    if (c->nk < 1) {
        errf(err, errlen, "no points to fit");
        goto done;
    }
    for (int b = 0, k = 0; b < nb; b++)
        for (int j = 0; j < len[b]; j++) c->val[k++] = swy[b] / sw[b];
    rc = 0;
done:
    free(sw);
    free(swy);
    free(len);
    return rc;
}


int vidur_line_fit(const double *x, const double *y, const int *use, int n, vidur_line_t *l,
                    char *err, size_t errlen) {
    double G[4] = {0}, c[2] = {0}, s[2], v[2];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if ((use && !use[i]) || !(y[i] > 0)) continue;
        double r[2] = {1 / y[i], x[i] / y[i]};
        for (int j = 0; j < 2; j++) {
            c[j] += r[j];
            for (int k = 0; k < 2; k++) G[j * 2 + k] += r[j] * r[k];
        }
        m++;
    }
    if (m < 2) return errf(err, errlen, "fewer than 2 points");
    nnls_scale(G, c, 2, s);
    if (nnls_solve(G, c, 2, v, err, errlen) < 0) return -1;
    l->a = v[0] * s[0];
    l->b = v[1] * s[1];
    return 0;
}

/* Seeded fold of each point (splitmix64 shuffle of 0..n-1 dealt round robin). */
void vidur_deal_folds(int n, int folds, unsigned long long seed, int *fold) {
    int *perm = malloc(sizeof *perm * (size_t)n);
    if (!perm) {
        for (int i = 0; i < n; i++) fold[i] = i % folds;
        return;
    }
    for (int i = 0; i < n; i++) perm[i] = i;
    unsigned long long st = seed;
    for (int i = n - 1; i > 0; i--) {
        unsigned long long z = (st += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        int j = (int)(z % (unsigned long long)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < n; i++) fold[perm[i]] = i % folds;
    free(perm);
}

/* ------------------------------------------------------------------ reading */


static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Rows of t where column `where[i]` equals `eq[i]` (n_where of them), their x column
 * collected into g (distinct, ascending) and the y column's median per x into y (ms). */
int vidur_collect(const csvtab_t *t, int xcol, int ycol, const int *where, const double *eq,
                   int n_where, vidur_grid_t *g, double *y, char *err, size_t errlen) {
    double *xs = malloc(sizeof *xs * (size_t)(t->n_rows + 1));
    double *ys = malloc(sizeof *ys * (size_t)(t->n_rows + 1));
    int m = 0, rc = -1;
    if (!xs || !ys) {
        errf(err, errlen, "out of memory reading %s", t->path);
        goto done;
    }
    for (int r = 0; r < t->n_rows; r++) {
        int keep = 1;
        for (int i = 0; i < n_where && keep; i++) {
            double v;
            if (csvtab_num(t, r, where[i], &v, err, errlen)) goto done;
            keep = v == eq[i];
        }
        if (!keep) continue;
        if (csvtab_num(t, r, xcol, &xs[m], err, errlen) ||
            csvtab_num(t, r, ycol, &ys[m], err, errlen))
            goto done;
        if (!(xs[m] > 0) || ys[m] < 0) {
            errf(err, errlen, "%s:%d: %s %g with %s %g: expected a positive size and a "
                 "time >= 0", t->path, t->line[r], t->names[xcol], xs[m], t->names[ycol], ys[m]);
            goto done;
        }
        m++;
    }
    g->n = 0;
    /* sort pairs by x: an index sort through a packed copy */
    double *pk = malloc(sizeof *pk * 2 * (size_t)(m + 1));
    if (!pk) {
        errf(err, errlen, "out of memory reading %s", t->path);
        goto done;
    }
    for (int i = 0; i < m; i++) pk[2 * i] = xs[i], pk[2 * i + 1] = ys[i];
    qsort(pk, (size_t)m, 2 * sizeof *pk, cmp_dbl);
    for (int i = 0; i < m;) {
        int j = i, k = 0;
        while (j < m && pk[2 * j] == pk[2 * i]) ys[k++] = pk[2 * j++ + 1];
        if (g->n == VIDUR_MAX_POINTS) {
            free(pk);
            errf(err, errlen, "%s: more than %d distinct %s values", t->path, VIDUR_MAX_POINTS,
                 t->names[xcol]);
            goto done;
        }
        g->x[g->n] = pk[2 * i];
        y[g->n++] = stats_percentile(ys, (size_t)k, 50);
        i = j;
    }
    free(pk);
    rc = 0;
done:
    free(xs);
    free(ys);
    return rc;
}


/* the GPU directory (and DGX network) of each built-in hardware preset the data covers */
const char *vidur_gpu_dir(const char *hw) {
    static const struct { const char *hw, *gpu; } gpus[] = {{"a100-80g", "a100"}, {"h100", "h100"}};
    for (size_t i = 0; hw && i < sizeof gpus / sizeof gpus[0]; i++)
        if (!strcmp(hw, gpus[i].hw)) return gpus[i].gpu;
    return NULL;
}

/* nnls: see nnls.h. The active set P holds the variables free to move; the subproblem on
 * P is solved by a Cholesky factorisation of G restricted to P, which is small (the fits
 * have tens of variables). */
#include "sim/nnls.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Least squares on the variables in P (idx[0..k)): solves G_PP z = c_P by Cholesky. A
 * pivot below tiny (a dependent column) makes the factorisation fail: returns -1. */
static int solve_sub(const double *G, const double *c, int n, const int *idx, int k,
                     double *L, double *z) {
    for (int i = 0; i < k; i++) {
        for (int j = 0; j <= i; j++) {
            double s = G[idx[i] * n + idx[j]];
            for (int t = 0; t < j; t++) s -= L[i * k + t] * L[j * k + t];
            if (i == j) {
                /* relative to the scaled diagonal (1 for a unit column) */
                if (!(s > 1e-12 * (G[idx[i] * n + idx[i]] + 1e-300))) return -1;
                L[i * k + i] = sqrt(s);
            } else {
                L[i * k + j] = s / L[j * k + j];
            }
        }
    }
    for (int i = 0; i < k; i++) {   /* L y = c_P */
        double s = c[idx[i]];
        for (int t = 0; t < i; t++) s -= L[i * k + t] * z[t];
        z[i] = s / L[i * k + i];
    }
    for (int i = k - 1; i >= 0; i--) {   /* L^T z = y */
        double s = z[i];
        for (int t = i + 1; t < k; t++) s -= L[t * k + i] * z[t];
        z[i] = s / L[i * k + i];
    }
    return 0;
}

/* w = c - G x: the negative gradient of 1/2 ||Ax - b||^2. */
static void gradient(const double *G, const double *c, int n, const double *x, double *w) {
    for (int i = 0; i < n; i++) {
        double s = c[i];
        for (int j = 0; j < n; j++) s -= G[i * n + j] * x[j];
        w[i] = s;
    }
}

int nnls_solve(const double *G, const double *c, int n, double *x, char *err, size_t errlen) {
    int iters = 0, ret = -1;
    int *inP = calloc((size_t)n, sizeof *inP), *idx = malloc(sizeof *idx * (size_t)n);
    int *banned = calloc((size_t)n, sizeof *banned);
    double *w = malloc(sizeof *w * (size_t)n), *z = malloc(sizeof *z * (size_t)n);
    double *L = malloc(sizeof *L * (size_t)n * (size_t)n);
    if (!inP || !idx || !banned || !w || !z || !L) {
        snprintf(err, errlen, "out of memory (nnls with %d variables)", n);
        goto done;
    }
    memset(x, 0, sizeof *x * (size_t)n);
    double scale = 0;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(c[i]));
    const double tol = 1e-12 * (scale > 0 ? scale : 1.0);
    for (;;) {
        gradient(G, c, n, x, w);
        int t = -1;
        for (int j = 0; j < n; j++)
            if (!inP[j] && !banned[j] && w[j] > tol && (t < 0 || w[j] > w[t])) t = j;
        if (t < 0) break;                     /* Kuhn-Tucker conditions hold */
        inP[t] = 1;
        for (int first = 1;; first = 0) {
            if (++iters > 30 * n + 30) {
                snprintf(err, errlen, "nnls did not converge in %d iterations", iters - 1);
                goto done;
            }
            int k = 0;
            for (int j = 0; j < n; j++)
                if (inP[j]) idx[k++] = j;
            if (solve_sub(G, c, n, idx, k, L, z) != 0) {
                /* t is dependent on the others in P: it cannot move the solution */
                inP[t] = 0;
                banned[t] = 1;
                break;
            }
            int all_pos = 1;
            for (int i = 0; i < k; i++) {
                all_pos &= z[i] > 0;
                /* the gradient said t helps, but rounding says it cannot take a positive
                 * value: drop it for this round rather than cycle (Lawson & Hanson's
                 * step 6 safeguard) */
                if (first && idx[i] == t && !(z[i] > 0)) {
                    inP[t] = 0;
                    banned[t] = 1;
                    goto next;
                }
            }
            if (all_pos) {
                for (int i = 0; i < k; i++) x[idx[i]] = z[i];
                break;
            }
            /* step from x toward z until the first variable hits 0, and drop it (and any
             * other that reaches 0 with it) */
            double alpha = 1;
            int hit = -1;
            for (int i = 0; i < k; i++)
                if (z[i] <= 0) {
                    double a = x[idx[i]] / (x[idx[i]] - z[i]);
                    if (hit < 0 || a < alpha) {
                        alpha = a;
                        hit = idx[i];
                    }
                }
            for (int i = 0; i < k; i++) {
                int j = idx[i];
                x[j] += alpha * (z[i] - x[j]);
                if (j == hit || x[j] <= 0) {
                    x[j] = 0;
                    inP[j] = 0;
                }
            }
        }
        /* a variable banned as dependent may become useful once the active set changed */
        if (!banned[t]) memset(banned, 0, sizeof *banned * (size_t)n);
    next:;
    }
    ret = iters;
done:
    free(inP);
    free(idx);
    free(banned);
    free(w);
    free(z);
    free(L);
    return ret;
}

void nnls_scale(double *G, double *c, int n, double *s) {
    for (int j = 0; j < n; j++) s[j] = G[j * n + j] > 0 ? 1.0 / sqrt(G[j * n + j]) : 0.0;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) G[i * n + j] *= s[i] * s[j];
        c[i] *= s[i];
    }
}

int nnls_dependent(const double *G, int n, double tol, int *dependent) {
    /* Cholesky of G in column order, skipping columns whose pivot is below tol of their
     * own squared norm: the Schur complement's diagonal is the squared norm of what is
     * left of a column after projecting out the ones before it. */
    double *L = calloc((size_t)n * (size_t)n, sizeof *L);
    if (!L) return -1;
    int count = 0;
    for (int i = 0; i < n; i++) {
        double s = G[i * n + i];
        for (int t = 0; t < i; t++)
            if (!dependent[t]) s -= L[i * n + t] * L[i * n + t];
        dependent[i] = !(G[i * n + i] > 0) || s <= tol * tol * G[i * n + i];
        if (dependent[i]) {
            count++;
            continue;
        }
        L[i * n + i] = sqrt(s);
        for (int j = i + 1; j < n; j++) {
            double v = G[j * n + i];
            for (int t = 0; t < i; t++)
                if (!dependent[t]) v -= L[j * n + t] * L[i * n + t];
            L[j * n + i] = v / L[i * n + i];
        }
    }
    free(L);
    return count;
}

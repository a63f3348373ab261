/* vidur_internal: what analysis/vidur.c and analysis/vidur_ops.c share (implemented in
 * analysis/vidur_fit.c): monotone curves and straight lines fitted in relative least
 * squares, seeded folds, and the medians of a CSV column per distinct value of another.
 * Not a public interface. Ownership: the caller's values; nothing is kept. */
#ifndef TWIN_VIDUR_INTERNAL_H
#define TWIN_VIDUR_INTERNAL_H

#include "analysis/csvtab.h"
#include "analysis/vidur.h"

/* A non-decreasing piecewise-linear curve on knots (cost.h's gemm semantics: flat below
 * the first knot, proportional beyond the last). */
typedef struct {
    int nk;
    double knots[COST_MAX_KNOTS], val[COST_MAX_KNOTS];
} vidur_curve_t;
/* A straight line a + b x (a, b >= 0) by relative least squares, as a 2-knot-free fit. */
typedef struct {
    double a, b;
} vidur_line_t;
/* The distinct values of x (n rows, grouped) with the median of each y column per value:
 * Vidur's files repeat some token counts and sizes from separate profiling runs. */
typedef struct {
    int n;
    double x[VIDUR_MAX_POINTS];
} vidur_grid_t;

double vidur_curve_at(const vidur_curve_t *c, double x);
/* The monotone least-squares curve through the used points (see vidur_fit.c). 0 or -1. */
int vidur_curve_fit(const double *x, const double *y, const int *use, int n, vidur_curve_t *c,
                    char *err, size_t errlen);
/* a + b x, a, b >= 0, by relative least squares over the used points. 0 or -1. */
int vidur_line_fit(const double *x, const double *y, const int *use, int n, vidur_line_t *l,
                   char *err, size_t errlen);
/* Seeded fold of each of n points, 0 .. folds - 1. */
void vidur_deal_folds(int n, int folds, unsigned long long seed, int *fold);
/* Rows of t where column where[i] equals eq[i] (n_where of them): the distinct values of
 * column xcol into g (ascending) and the median of column ycol per value into y. 0 or -1
 * with the file, line and column. */
int vidur_collect(const csvtab_t *t, int xcol, int ycol, const int *where, const double *eq,
                  int n_where, vidur_grid_t *g, double *y, char *err, size_t errlen);
/* The GPU directory of a built-in hardware preset in Vidur's data ("h100"), or NULL. */
const char *vidur_gpu_dir(const char *hw);

#endif

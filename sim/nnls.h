/* nnls: non-negative least squares, min ||A x - b|| subject to x >= 0 (Lawson & Hanson,
 * "Solving Least Squares Problems", 1974, ch. 23: the active-set method), for the cost
 * models' fits, whose coefficients are times and must not go negative.
 *
 * The problem is given by its normal equations, G = A^T A (n x n, symmetric) and
 * c = A^T b, so that one pass over a large design matrix A (thousands of recorded steps)
 * builds it and every cross-validation fold re-solves in O(n^3). Callers should scale A's
 * columns to unit norm first (nnls_scale does it on G and c): the normal equations square
 * the condition number, and the fits' columns differ by many orders of magnitude.
 *
 * Invariants: the result is >= 0 in every component; variables the data leave
 * undetermined (a zero column, or one exactly dependent on the variables in the solution)
 * stay at 0. Ownership: the caller's arrays; nothing is kept. */
#ifndef TWIN_NNLS_H
#define TWIN_NNLS_H

#include <stddef.h>

/* Solves for x[n]; G[n*n] row-major. Returns the number of active-set iterations (>= 0),
 * or -1 when out of memory or when it does not converge within 30 n iterations (with a
 * message in err). */
int nnls_solve(const double *G, const double *c, int n, double *x, char *err, size_t errlen);

/* Scales column j of A by s[j] = 1 / sqrt(G[j][j]) in G and c (in place): the problem in
 * y = x / s. Columns with G[j][j] == 0 get s[j] = 0 (they can only stay at 0). */
void nnls_scale(double *G, double *c, int n, double *s);

/* Pivot-free Gram-Schmidt on G in column order: dependent[j] = 1 when column j of A is
 * (relatively, below tol of its norm) a combination of the columns before it that are
 * not themselves dependent. For telling a user which term the data cannot determine.
 * Returns -1 when out of memory, else the number of dependent columns. */
int nnls_dependent(const double *G, int n, double tol, int *dependent);

#endif

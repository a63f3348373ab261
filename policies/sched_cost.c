/* sched_cost: what a step will cost, for policies (contract: sched.h, "what a step will
 * cost"). The executor's estimate when it gave one; else a fit over the recent steps. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched_internal.h"

void sched_set_cost_fn(sched_t *s, sched_cost_fn fn, void *ud) {
    s->cost_fn = fn;
    s->cost_ud = ud;
}

double sched_last_step_s(const sched_t *s) { return s->last_step_s; }

void sched_cost_observe(sched_t *s, double prefill, double decode, double dur) {
    if (!(dur >= 0) || !isfinite(dur)) return;
    s->last_step_s = dur;
    int32_t i = (s->rec_head + s->rec_n) % SCHED_COST_WINDOW;
    if (s->rec_n == SCHED_COST_WINDOW) {
        i = s->rec_head;
        s->rec_head = (s->rec_head + 1) % SCHED_COST_WINDOW;
    } else {
        s->rec_n++;
    }
    s->rec_prefill[i] = prefill;
    s->rec_decode[i] = decode;
    s->rec_dur[i] = dur;
}

/* Least squares of dur on the columns cols[0..k) of the recent steps (k <= 3; column 0 is
 * the constant); the coefficients into c. 0, or -1 when the system is singular. */
static int fit(const sched_t *s, int k, const int *cols, double *c) {
    double A[3][4] = {{0}};
    for (int32_t j = 0; j < s->rec_n; j++) {
        double x[3] = {1, s->rec_prefill[j], s->rec_decode[j]}, v[3];
        for (int a = 0; a < k; a++) v[a] = x[cols[a]];
        for (int a = 0; a < k; a++) {
            for (int b = 0; b < k; b++) A[a][b] += v[a] * v[b];
            A[a][k] += v[a] * s->rec_dur[j];
        }
    }
    for (int p = 0; p < k; p++) {   /* Gauss-Jordan with partial pivoting */
        int best = p;
        for (int r = p + 1; r < k; r++)
            if (fabs(A[r][p]) > fabs(A[best][p])) best = r;
        if (fabs(A[best][p]) < 1e-12) return -1;
        for (int b = 0; b <= k; b++) {
            double t = A[p][b];
            A[p][b] = A[best][b];
            A[best][b] = t;
        }
        for (int r = 0; r < k; r++) {
            if (r == p) continue;
            double f = A[r][p] / A[p][p];
            for (int b = p; b <= k; b++) A[r][b] -= f * A[p][b];
        }
    }
    for (int a = 0; a < k; a++) c[a] = A[a][k] / A[a][a];
    return 0;
}

/* The recent steps' model (a, b, c) >= 0: the full fit, else prefill and decode tokens as one
 * kind, else their mean. */
static void recent_model(const sched_t *s, double *a, double *b, double *c) {
    double k3[3], k2[2];
    static const int c3[3] = {0, 1, 2}, c2[2] = {0, 1};
    if (fit(s, 3, c3, k3) == 0 && k3[0] >= 0 && k3[1] >= 0 && k3[2] >= 0) {
        *a = k3[0], *b = k3[1], *c = k3[2];
        return;
    }
    /* one kind of token: refit on their sum */
    sched_t t = *s;
    for (int32_t j = 0; j < t.rec_n; j++) t.rec_prefill[j] += t.rec_decode[j];
    if (fit(&t, 2, c2, k2) == 0 && k2[0] >= 0 && k2[1] >= 0) {
        *a = k2[0], *b = *c = k2[1];
        return;
    }
    double m = 0;
    for (int32_t j = 0; j < s->rec_n; j++) m += s->rec_dur[j];
    *a = s->rec_n ? m / s->rec_n : NAN;
    *b = *c = 0;
}

double sched_estimate(const sched_t *s, const sched_shape_t *seqs, int32_t n, int *source) {
    int src = s->cost_fn ? SCHED_COST_EXECUTOR
              : s->rec_n >= SCHED_COST_MIN_STEPS ? SCHED_COST_RECENT : SCHED_COST_NONE;
    if (source) *source = src;
    if (src == SCHED_COST_NONE) return NAN;
    if (n <= 0) return 0;   /* nothing to run costs nothing, in any model */
    if (src == SCHED_COST_EXECUTOR) return s->cost_fn(s->cost_ud, seqs, n);
    double a, b, c, prefill = 0, decode = 0;
    for (int32_t i = 0; i < n; i++) {
        /* a decode: one token after the prompt, sampled */
        if (seqs[i].n_new == 1 && seqs[i].ctx > 0 && seqs[i].n_sampled > 0) decode += 1;
        else prefill += seqs[i].n_new;
    }
    recent_model(s, &a, &b, &c);
    return a + b * prefill + c * decode;
}

double sched_estimate_plan(const sched_t *s, const sched_shape_t *extra, int32_t n_extra,
                           int *source) {
    const sched_plan_t *p = &s->plan;
    int32_t n = p->n + p->n_pads + (extra ? n_extra : 0);
    sched_t *w = (sched_t *)s;   /* the scratch only: the estimate reads, never plans */
    if (n > w->est_cap && sched_grow((void **)&w->est_seqs, &w->est_cap, n, sizeof *w->est_seqs)) {
        if (source) *source = SCHED_COST_NONE;
        return NAN;
    }
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *e = &s->entries[i];
        w->est_seqs[i] = (sched_shape_t){ e->num_tokens + e->num_spec, e->start,
                                          e->sample ? 1 + e->num_spec : 0 };
    }
    for (int32_t i = 0; i < p->n_pads; i++)
        w->est_seqs[p->n + i] = (sched_shape_t){ s->pads[i].num_tokens, s->pads[i].ctx,
                                                 s->pads[i].ctx > 0 ? s->pads[i].num_tokens : 0 };
    for (int32_t i = 0; extra && i < n_extra; i++) w->est_seqs[p->n + p->n_pads + i] = extra[i];
    return sched_estimate(s, w->est_seqs, n, source);
}

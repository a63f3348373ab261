/* sampler: see sampler.h. The reference the device samplers are checked against, so every
 * step is exactly specified: the candidates in cmp_desc order, their probabilities summed
 * in that order. Two shortcuts keep the result bit for bit and avoid sorting the whole
 * vocabulary (30 ms at 128k ids):
 *  - an id whose probability rounds to 0 in float can neither change a sum nor be drawn
 *    (r = u * total < total is always reached by a positive term), and such ids form the
 *    tail of the order, so only the others are sorted (when the top logit and 1/temperature
 *    are finite and no logit is NaN; otherwise the whole row is sorted as specified);
 *  - with top-k, the k first ids in cmp_desc order are selected with a heap of k, then
 *    sorted. */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int32_t sampler_argmax(const float *logits, int32_t vocab) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab; i++)
        if (logits[i] > logits[best]) best = i;   /* strict: the lowest id wins ties */
    return best;
}

/* Descending by logit, ascending id on ties: a total order, so qsort's instability cannot
 * change which tokens survive top-k or top-p. The logits come through qsort_r's context, so
 * concurrent samplers (one per backend thread) share nothing. */
static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *logits = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = logits[i], y = logits[j];
    if (x != y) return x > y ? -1 : 1;
    return (i > j) - (i < j);
}

/* The weight of logit x under the row's top and 1/temperature: the one formula of both
 * the filter and the softmax. */
static float weight(float x, float top, double inv_t) {
    return (float)exp(((double)x - top) * inv_t);
}

/* Floats in their order as unsigned keys, and back (NaN excluded). */
static uint32_t fkey(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
static float funkey(uint32_t k) {
    uint32_t u = k & 0x80000000u ? k & 0x7fffffffu : ~k;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* The smallest logit of non-zero weight: weight is non-decreasing in x and weight(top) =
 * 1, so a bisection over the floats below top finds it with ~32 exps instead of one per id. */
static float weight_cut(float top, double inv_t) {
    uint32_t lo = fkey(-FLT_MAX), hi = fkey(top);
    if (weight(-FLT_MAX, top, inv_t) != 0) return -FLT_MAX;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (weight(funkey(mid), top, inv_t) != 0) hi = mid;
        else lo = mid;
    }
    return funkey(hi);
}

/* Heap of ids whose root is the last in cmp_desc order (a min-heap of "goodness"). */
static void sift_down(int32_t *h, int32_t n, int32_t i, const float *logits) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cmp_desc(&h[l], &h[w], (void *)logits) > 0) w = l;
        if (r < n && cmp_desc(&h[r], &h[w], (void *)logits) > 0) w = r;
        if (w == i) return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* In place: idx[0 .. k) becomes the k first of idx[0 .. n) in cmp_desc order (as a heap,
 * unsorted); k < n. Entries past k are only read. */
static void select_k(int32_t *idx, int32_t n, int32_t k, const float *logits) {
    for (int32_t i = k / 2 - 1; i >= 0; i--) sift_down(idx, k, i, logits);
    for (int32_t i = k; i < n; i++)
        if (cmp_desc(&idx[i], &idx[0], (void *)logits) < 0) {
            idx[0] = idx[i];
            sift_down(idx, k, 0, logits);
        }
}

/* The candidates a draw chooses among, in cmp_desc order: idx[0..n) with their weights
 * probs[0..n) (after temperature, top-k and top-p), *total their sum, summed in that order.
 * Temperature > 0 and vocab > 1 only. */
static int32_t candidates(const float *logits, int32_t vocab, const bk_sample_t *p,
                          float *probs, int32_t *idx, double *total_out) {
    double inv_t = 1.0 / p->temperature, total = 0;
    int32_t nan = 0, m = 0;   /* m: the candidates of non-zero weight */
    float top = logits[0];
    for (int32_t i = 0; i < vocab; i++) {
        nan |= isnan(logits[i]);
        if (logits[i] > top) top = logits[i];
    }
    int32_t n;
    if (!nan && isfinite(top) && isfinite(inv_t)) {   /* weights in [0, 1], never NaN */
        float cut = weight_cut(top, inv_t);
        for (int32_t i = 0; i < vocab; i++)
            if (logits[i] >= cut) idx[m++] = i;
        n = p->top_k > 0 && p->top_k < m ? p->top_k : m;
        if (n < m) select_k(idx, m, n, logits);
        qsort_r(idx, (size_t)n, sizeof *idx, cmp_desc, (void *)logits);
    } else {
        for (int32_t i = 0; i < vocab; i++) idx[i] = i;
        qsort_r(idx, (size_t)vocab, sizeof *idx, cmp_desc, (void *)logits);
        n = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
    }

    /* softmax over the kept candidates, in sorted order (probs[j] belongs to idx[j]) */
    top = logits[idx[0]];
    for (int32_t j = 0; j < n; j++) {
        probs[j] = weight(logits[idx[j]], top, inv_t);
        total += probs[j];
    }
    if (p->top_p < 1) {
        double want = p->top_p * total, cum = 0;
        int32_t keep = 0;
        while (keep < n && cum < want) cum += probs[keep++];
        n = keep > 0 ? keep : 1;
        total = 0;   /* renormalise over the kept prefix, summed in the same order */
        for (int32_t j = 0; j < n; j++) total += probs[j];
    }
    *total_out = total;
    return n;
}

int32_t sampler_pick(const float *logits, int32_t vocab, const bk_sample_t *p, float *probs,
                     int32_t *idx) {
    if (!(p->temperature > 0) || vocab <= 1) return sampler_argmax(logits, vocab);
    double total;
    int32_t n = candidates(logits, vocab, p, probs, idx, &total);
    double r = sampler_uniform(p->seed, p->idx) * total, acc = 0;
    for (int32_t j = 0; j < n; j++) {
        acc += probs[j];
        if (r < acc) return idx[j];
    }
    return idx[n - 1];   /* rounding left r at the very top */
}

void sampler_dist(const float *logits, int32_t vocab, const bk_sample_t *p, double *dist,
                  float *probs, int32_t *idx) {
    for (int32_t i = 0; i < vocab; i++) dist[i] = 0;
    if (!(p->temperature > 0) || vocab <= 1) {
        dist[sampler_argmax(logits, vocab)] = 1;
        return;
    }
    double total;
    int32_t n = candidates(logits, vocab, p, probs, idx, &total);
    /* total >= the top candidate's weight 1 whenever the row is finite; a row of NaNs
     * leaves the first candidate as sampler_pick's fallback does */
    if (!(total > 0)) {
        dist[idx[0]] = 1;
        return;
    }
    for (int32_t j = 0; j < n; j++) dist[idx[j]] = probs[j] / total;
}

int32_t sampler_draw(const double *dist, int32_t vocab, double u) {
    double total = 0;
    for (int32_t i = 0; i < vocab; i++) total += dist[i];
    double r = u * total, acc = 0;
    int32_t last = -1;
    for (int32_t i = 0; i < vocab; i++) {
        if (!(dist[i] > 0)) continue;
        acc += dist[i];
        last = i;
        if (r < acc) return i;
    }
    return last >= 0 ? last : 0;   /* rounding left r at the very top; an empty row: 0 */
}

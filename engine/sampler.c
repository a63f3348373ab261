/* sampler: see sampler.h. The reference the device samplers are checked against, so it
 * favours plain, exactly specified steps over speed. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>

/* splitmix64's finaliser: a bijective mix, so distinct (seed, idx) give unrelated outputs. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double sampler_uniform(uint64_t seed, int32_t idx) {
    uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ULL * ((uint64_t)(uint32_t)idx + 1));
    z = mix64(z ^ 0xd1b54a32d192ed03ULL);
    return (double)(z >> 11) * (1.0 / 9007199254740992.0); /* 53 bits: [0, 1) */
}

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

int32_t sampler_pick(const float *logits, int32_t vocab, const bk_sample_t *p, float *probs,
                     int32_t *idx) {
    if (!(p->temperature > 0) || vocab <= 1) return sampler_argmax(logits, vocab);
    for (int32_t i = 0; i < vocab; i++) idx[i] = i;
    qsort_r(idx, (size_t)vocab, sizeof *idx, cmp_desc, (void *)logits);
    int32_t n = vocab;
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;

    /* softmax over the kept candidates, in sorted order (probs[j] belongs to idx[j]) */
    double inv_t = 1.0 / p->temperature, total = 0;
    float top = logits[idx[0]];
    for (int32_t j = 0; j < n; j++) {
        probs[j] = (float)exp(((double)logits[idx[j]] - top) * inv_t);
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
    double r = sampler_uniform(p->seed, p->idx) * total, acc = 0;
    for (int32_t j = 0; j < n; j++) {
        acc += probs[j];
        if (r < acc) return idx[j];
    }
    return idx[n - 1];   /* rounding left r at the very top */
}

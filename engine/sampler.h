/* sampler: the reference token sampler (greedy, temperature, top-k, top-p), used by the CPU
 * backend and as the CPU reference for device samplers.
 *
 * A draw depends only on the logits row and the bk_sample_t: the uniform number comes from
 * (seed, idx) through a counter-based hash, never from a shared stream, so a request's
 * output does not depend on what else was in its batch or on thread scheduling.
 * Order of filters: temperature scaling, top-k (keep the k largest), softmax, top-p (the
 * smallest prefix of the sorted distribution whose mass reaches p), renormalise, draw.
 * Greedy (temperature <= 0) is argmax with the lowest id on ties.
 *
 * Speculative sampling (engine/spec.h) needs the distribution itself: sampler_dist gives the
 * one sampler_pick draws from (the same candidates and weights), and its draws take
 * uniforms of their own purposes (sampler_uniform_for), so that they never reuse the
 * uniform of the plain draw at the same output index.
 *
 * Ownership: scratch buffers are the caller's ([vocab] floats and [vocab] ints). */
#ifndef TWIN_SAMPLER_H
#define TWIN_SAMPLER_H

#include <stdint.h>

#include "engine/backend.h"
#include "engine/sampler_uniform.h"   /* sampler_uniform: the uniform number a draw uses */

int32_t sampler_argmax(const float *logits, int32_t vocab);

/* probs/idx: scratch of vocab entries each. */
int32_t sampler_pick(const float *logits, int32_t vocab, const bk_sample_t *p, float *probs,
                     int32_t *idx);

/* dist [vocab]: the probability of each id under p (0 outside the kept candidates; greedy:
 * 1 at the argmax). probs/idx: scratch as sampler_pick's. */
void sampler_dist(const float *logits, int32_t vocab, const bk_sample_t *p, double *dist,
                  float *probs, int32_t *idx);

/* The id whose cumulative weight first exceeds u * sum(dist), u in [0, 1): dist need not be
 * normalised; ids of weight <= 0 are never drawn. */
int32_t sampler_draw(const double *dist, int32_t vocab, double u);

/* The uniform of a draw at output index idx of stream seed for `purpose` (a constant per
 * kind of draw: a draft, an acceptance test, a residual): independent of sampler_uniform(seed,
 * idx) and of the other purposes. */
static inline double sampler_uniform_for(uint64_t seed, int32_t idx, uint64_t purpose) {
    return sampler_uniform(dummy_mix64(seed ^ dummy_mix64(purpose)), idx);
}

#endif

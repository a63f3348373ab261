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

#endif

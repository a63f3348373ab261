/* sampler_uniform: the uniform number of a draw, a pure function of (seed, idx), never of a
 * shared stream, so a request's draws do not depend on its batch or on thread scheduling.
 * One definition for the CPU reference sampler (sampler.c) and the device sampler
 * (engine/cuda/cuda_sample.cu): plain C99 that nvcc also compiles for the device, as
 * dummy_weight.h, whose splitmix64 finaliser it uses. Integer mixing, then 53 bits scaled
 * by a power of two: exact on every compiler and device. */
#ifndef TWIN_SAMPLER_UNIFORM_H
#define TWIN_SAMPLER_UNIFORM_H

#include <stdint.h>

#include "engine/dummy_weight.h"

/* In [0, 1), at most 1 - 2^-53. */
DUMMY_FN double sampler_uniform(uint64_t seed, int32_t idx) {
    uint64_t z = dummy_mix64(seed + 0x9e3779b97f4a7c15ULL * ((uint64_t)(uint32_t)idx + 1));
    z = dummy_mix64(z ^ 0xd1b54a32d192ed03ULL);
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

#endif

/* dummy_weight: the value of every dummy:PRESET weight, a pure function of (seed, tensor,
 * element index), so that the host loader (model_dummy.c) and a device generator
 * (engine/cuda/) produce the same model without one copying the other, in any order and on
 * any number of threads.
 *
 * Values are uniform in [-a, a) with a = 0.02 * sqrt(3) (standard deviation 0.02, the usual
 * initialiser scale, so activations stay finite through many layers). Tensor ids: see
 * DUMMY_T_*; a layer's tensors are DUMMY_T_LAYER(l, kind). A tensor holds < 2^40 elements.
 * Plain C99 that nvcc also compiles for the device. */
#ifndef TWIN_DUMMY_WEIGHT_H
#define TWIN_DUMMY_WEIGHT_H

#include <stdint.h>

#ifdef __CUDACC__
#define DUMMY_FN static inline __host__ __device__
#else
#define DUMMY_FN static inline
#endif

enum { DUMMY_T_TOK_EMB = 0, DUMMY_T_LM_HEAD = 1 };
enum { DUMMY_K_WQ = 0, DUMMY_K_WK, DUMMY_K_WV, DUMMY_K_WO, DUMMY_K_W1, DUMMY_K_W2, DUMMY_K_W3,
       DUMMY_K_ROUTER, DUMMY_K_SH_W1, DUMMY_K_SH_W2, DUMMY_K_SH_W3 };
#define DUMMY_T_LAYER(l, kind) (16u + 16u * (uint64_t)(l) + (uint64_t)(kind))
/* A routed expert's matrices (kind DUMMY_K_W1, W2 or W3: gate, down, up), expert e of layer
 * l in a model of n_experts: above every DUMMY_T_LAYER id (layers < 4096), and below 2^24 as
 * long as layers x experts < 2^21 (model_config_check), so `tensor << 40` keeps every bit. */
#define DUMMY_T_EXPERT(l, e, n_experts, kind)                                               \
    ((1u << 20) + 3u * ((uint64_t)(l) * (uint64_t)(n_experts) + (uint64_t)(e)) +             \
     (uint64_t)(kind) - DUMMY_K_W1)

DUMMY_FN uint64_t dummy_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The per-model key: mixed once, so nearby seeds give unrelated weights. */
DUMMY_FN uint64_t dummy_key(uint64_t seed) { return dummy_mix64(seed ^ 0x5DEECE66Dull); }

/* One weight: splitmix64 of the element's global counter under the key; the top 24 bits
 * give an exact float in [-a, a). */
DUMMY_FN float dummy_weight_k(uint64_t key, uint64_t tensor, uint64_t i) {
    uint64_t r = dummy_mix64(key + 0x9E3779B97F4A7C15ull * ((tensor << 40) + i + 1));
    return (float)((int32_t)(r >> 40) - 8388608) * (0.0346410162f / 8388608.0f);
}

DUMMY_FN float dummy_weight(uint64_t seed, uint64_t tensor, uint64_t i) {
    return dummy_weight_k(dummy_key(seed), tensor, i);
}

#endif

/* rng: seeded pseudo-random numbers for the scheduler core, the simulator and the trace
 * generator. Header-only, no global state.
 *
 * Invariants: every draw is a pure function of the state it is given, so the same seed gives
 * the same stream on every machine (splitmix64 seeding, xoshiro256** stream). rng_hash()
 * derives independent streams from (seed, a, b) so that a per-request decision does not
 * depend on which other requests were drawn before it (batch composition). */
#ifndef TWIN_RNG_H
#define TWIN_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct { uint64_t s[4]; } rng_t;

static inline uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&seed);
}

/* A stream keyed by (seed, a, b): e.g. (run seed, request id, draw index). */
static inline void rng_seed3(rng_t *r, uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed;
    uint64_t k = rng_splitmix64(&x) ^ (a * 0xD1B54A32D192ED03ull);
    k = rng_splitmix64(&k) ^ (b * 0x8CB92BA72F3D8DD7ull);
    rng_seed(r, k);
}

static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_u64(rng_t *r) {
    uint64_t *s = r->s;
    uint64_t out = rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rng_rotl(s[3], 45);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

/* Exponential with the given rate (mean 1/rate). */
static inline double rng_exp(rng_t *r, double rate) { return -log1p(-rng_uniform(r)) / rate; }

/* Standard normal (Box-Muller; one value per call keeps the state simple). */
static inline double rng_normal(rng_t *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Gamma(shape, scale) by Marsaglia-Tsang; shape < 1 via the boost u^(1/shape). */
static inline double rng_gamma(rng_t *r, double shape, double scale) {
    double boost = 1.0;
    if (shape < 1.0) { boost = pow(rng_uniform(r), 1.0 / shape); shape += 1.0; }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale * boost;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale * boost;
    }
}

#endif

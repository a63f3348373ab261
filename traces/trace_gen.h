/* trace_gen: synthetic request traces, written as the plain CSV that trace_open reads back
 * (header arrival_s,prompt_tokens,output_tokens, plus prefix_group,prefix_tokens with a
 * shared prefix; arrivals in seconds with 6 decimals).
 *
 * Arrivals: the first request arrives at 0, then gaps are drawn from an exponential
 * (poisson) or a gamma distribution with mean 1/rate and coefficient of variation cv
 * (shape 1/cv^2). Lengths: each of prompt and output is fixed:N, uniform:A:B (integers,
 * inclusive), lognormal:MEDIAN:SIGMA[:MAX] (rounded, clamped to [1, MAX], MAX 32768 unless
 * given) or trace:PATH, which resamples rows of a real trace with replacement. When prompt
 * and output name the same trace they are drawn as (prompt, output) PAIRS of one row, so
 * their correlation is kept; at most max_pairs rows are kept (a seeded reservoir sample).
 *
 * Invariants:
 *  - Output is a pure function of the options: the same seed gives identical bytes (given
 *    the same libm for exp/log/cos; the integer RNG stream itself is portable). Arrivals, prompt lengths and output lengths come from independent streams
 *    (rng_seed3(seed, stream, 0)), so changing a length distribution does not move arrivals.
 *  - Arrivals are rounded to the microsecond before they are handed out, so what tgen_next
 *    returns is exactly what the CSV says and what trace_open reads back.
 *  - Generation stops after n requests (n > 0) or at the first arrival >= duration_s
 *    (duration_s > 0), whichever comes first; at least one of them must be set.
 *
 * Ownership: tgen_open returns an object even on failure (NULL only when out of memory);
 * check tgen_errmsg and always tgen_close it. Options are copied; the trace file of a
 * trace:PATH distribution is read completely inside tgen_open and closed there. */
#ifndef TWIN_TRACE_GEN_H
#define TWIN_TRACE_GEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TGEN_PATH_MAX 1024
#define TGEN_DEFAULT_MAX_LEN 32768
#define TGEN_DEFAULT_MAX_PAIRS 1000000

typedef enum {
    TGEN_DIST_FIXED = 0, /* a = N */
    TGEN_DIST_UNIFORM,   /* integers in [a, b] */
    TGEN_DIST_LOGNORMAL, /* median a, sigma b, clamped to [1, max] */
    TGEN_DIST_TRACE      /* resampled from the trace at path */
} tgen_dist_kind_t;

typedef struct {
    tgen_dist_kind_t kind;
    double a, b;
    int32_t max;
    char path[TGEN_PATH_MAX];
} tgen_dist_t;

typedef enum { TGEN_ARRIVAL_POISSON = 0, TGEN_ARRIVAL_GAMMA } tgen_arrival_kind_t;

typedef struct {
    tgen_arrival_kind_t kind;
    double cv; /* gamma: coefficient of variation of the gaps, > 0 (1 equals poisson) */
} tgen_arrival_t;

typedef struct {
    int64_t n;              /* number of requests; <= 0: bounded by duration_s only */
    double duration_s;      /* > 0: no arrival at or after this time */
    double rate;            /* mean requests per second, > 0 */
    tgen_arrival_t arrival;
    tgen_dist_t prompt, output;
    uint64_t seed;
    int64_t max_pairs;      /* reservoir size for trace:PATH; <= 0: TGEN_DEFAULT_MAX_PAIRS */
    /* --shared-prefix GROUPS:TOKENS (0:0 = none): every prompt opens with a TOKENS-token
     * shared prefix (a system prompt) of one of GROUPS groups, drawn uniformly from its own
     * stream; the drawn prompt length follows it, so arrivals and lengths are those of the
     * same seed without the option, prompts TOKENS longer. */
    int32_t prefix_groups, prefix_tokens;
} tgen_opts_t;

typedef struct {
    int64_t id;             /* 0, 1, 2, ... */
    double arrival_s;       /* non-decreasing, a whole number of microseconds */
    int32_t prompt_tokens;  /* >= 0 (>= 1 unless resampled from a trace) */
    int32_t output_tokens;  /* >= 1 */
    int32_t prefix_group;   /* 0 .. prefix_groups-1, or -1 without a shared prefix */
    int32_t prefix_tokens;  /* the shared prefix's length (of prompt_tokens), 0 without */
} tgen_req_t;

typedef struct tgen tgen_t;

/* What tgen_next has handed out so far (the first arrival is 0). */
typedef struct {
    int64_t requests;
    double last_arrival_s;
    int64_t prompt_tokens, output_tokens;   /* summed */
} tgen_stats_t;

/* The CLI defaults: n 1000, rate 1, poisson, prompt lognormal:1000:1.0, output
 * lognormal:200:1.0, seed 0. */
void tgen_opts_default(tgen_opts_t *o);

/* Parses "fixed:N", "uniform:A:B", "lognormal:MEDIAN:SIGMA[:MAX]" or "trace:PATH". 0 on
 * success; -1 with a message in err (e.g. "uniform:5:2: A must not exceed B"). */
int tgen_dist_parse(const char *s, tgen_dist_t *out, char *err, size_t errlen);
/* Parses "poisson" or "gamma:CV". 0 or -1 with a message in err. */
int tgen_arrival_parse(const char *s, tgen_arrival_t *out, char *err, size_t errlen);
/* Parses --shared-prefix's "GROUPS:TOKENS" (both >= 1). 0 or -1 with a message in err. */
int tgen_prefix_parse(const char *s, int32_t *groups, int32_t *tokens, char *err,
                      size_t errlen);
/* Writes the DIST string back (the form tgen_dist_parse reads) into buf. */
void tgen_dist_format(const tgen_dist_t *d, char *buf, size_t len);

tgen_t *tgen_open(const tgen_opts_t *o);
/* 1: *out filled; 0: done; -1: error (tgen_errmsg). */
int tgen_next(tgen_t *g, tgen_req_t *out);
/* Writes the header and every remaining request to f. 0, or -1 (tgen_errmsg). */
int tgen_write_csv(tgen_t *g, FILE *f);
/* For the caller's "wrote N requests" line. */
void tgen_stats(const tgen_t *g, tgen_stats_t *out);
/* NULL when no error happened. */
const char *tgen_errmsg(const tgen_t *g);
void tgen_close(tgen_t *g);

#endif

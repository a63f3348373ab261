/* logprob: the log-probabilities a server reports with its tokens (OpenAI's `logprobs`,
 * `twinserve serve`, engine/live.h), from one logits row.
 *
 * Which distribution: the model's own, the log-softmax of the raw logits, before the
 * request's temperature, top-k and top-p. This is vLLM v1's default (logprobs_mode
 * "raw_logprobs": its sampler takes "the original logits (before any penalties or
 * temperature scaling) for the top-k logprobs", unlike its v0 sampler), so a token's
 * log-probability does not depend on how the request samples, and a greedy request and a
 * sampled one report the same figures for the same token at the same position.
 *
 * Invariants: log p(i) = (x_i - m) - log(sum_j exp(x_j - m)) with m the row's maximum,
 * summed in double in id order, so the figures are a pure function of the row. The top ids are in
 * descending order of logit, the lowest id first on ties (sampler.c's cmp_desc order). A
 * logit of -inf has log-probability -inf; a row with a NaN or without a finite maximum
 * gives NaN for every id (the server reports what it cannot compute as such).
 *
 * Ownership: no state; the caller's buffers. */
#ifndef TWIN_LOGPROB_H
#define TWIN_LOGPROB_H

#include <stdint.h>

#define LOGPROB_MAX_TOP 20        /* the most alternatives a server returns (vLLM's default
                                   * max_logprobs; OpenAI's top_logprobs limit) */

typedef struct {
    int32_t id;
    float logprob;
} logprob_alt_t;

/* log(sum_j exp(x_j)) over the row (NaN for a row with a NaN or no finite maximum). */
double logprob_lse(const float *logits, int32_t vocab);

/* The log-probability of `token` (0 <= token < vocab) in *token_lp, and the k most likely
 * ids with theirs in top[0 .. min(k, vocab)) (k <= LOGPROB_MAX_TOP; 0: none). Returns the
 * count written to top. */
int32_t logprob_row(const float *logits, int32_t vocab, int32_t token, int32_t k,
                    float *token_lp, logprob_alt_t *top);

#endif

/* spec: speculative-decoding draft proposers for the engine.
 *
 * The n-gram (prompt-lookup) proposer: find the most recent earlier occurrence of the last
 * g tokens (g = max_ngram down to 1) in the request's own tokens and propose the tokens that
 * followed it; with no match, repeat the last token. Cheap, model-free, deterministic.
 *
 * Ownership: reads toks[0..n), writes drafts[0..k). */
#ifndef TWIN_SPEC_H
#define TWIN_SPEC_H

#include <stdint.h>

enum { SPEC_MAX_NGRAM = 3 };

void spec_propose_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t *drafts);

/* Drafts accepted: the longest prefix of drafts[0..k) equal to sampled[0..k) (sampled has
 * k + 1 entries: the model's token at each draft position and one more). */
int32_t spec_accept(const int32_t *drafts, const int32_t *sampled, int32_t k);

#endif

/* spec: speculative decoding for the engine: the n-gram draft proposer, verification, and
 * the per-position acceptance counts. (The draft MODEL, engine/draft.h, proposes with a
 * second forward pass.)
 *
 * The n-gram (prompt-lookup) proposer: find the most recent earlier occurrence of the last
 * g tokens (g = max_ngram down to 1) in the request's own tokens and propose the tokens that
 * followed it; with no match, repeat the last token. Cheap, model-free, deterministic.
 *
 * Verification. A deterministic proposer (n-grams; any greedy request) is verified by
 * spec_accept: drafts are kept while they equal the target's own seeded sample, which
 * leaves every output exactly as without speculation. A sampling draft model is verified
 * by speculative sampling (Leviathan et al. 2023; Chen et al. 2023), spec_verify: draft x,
 * drawn from q, is kept with probability min(1, p(x) / q(x)); at the first rejection the
 * token is drawn from normalise(max(0, p - q)); after k acceptances a bonus token is drawn
 * from p. Each output token is then distributed as the target's p, whatever q is. Every
 * uniform is a pure function of (the request's stream, output index, purpose).
 *
 * Ownership: the caller's arrays, read or written as stated; nothing is kept. */
#ifndef TWIN_SPEC_H
#define TWIN_SPEC_H

#include <stdint.h>

enum { SPEC_MAX_NGRAM = 3 };

void spec_propose_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t *drafts);

/* Drafts accepted: the longest prefix of drafts[0..k) equal to sampled[0..k) (sampled has
 * k + 1 entries: the model's token at each draft position and one more). */
int32_t spec_accept(const int32_t *drafts, const int32_t *sampled, int32_t k);

/* Speculative sampling. p: k + 1 rows [vocab] (the target's distributions at the draft
 * positions and one more), q: k rows (the draft's, each drafts[j] drawn from q row j, so
 * q of a draft is > 0), each row normalised (sampler_dist). seed: the request's stream;
 * idx0: the output index of drafts[0]. Writes out[0 .. a] (the a accepted drafts, then the residual's
 * or the bonus token) and returns a. resid: scratch of vocab doubles. */
int32_t spec_verify(const double *p, const double *q, const int32_t *drafts, int32_t k,
                    int32_t vocab, uint64_t seed, int32_t idx0, int32_t *out, double *resid);

/* The purposes of spec_verify's and the draft model's uniforms (sampler_uniform_for). */
#define SPEC_U_DRAFT 0x6472616674ULL    /* "draft": the draft model's draw */
#define SPEC_U_ACCEPT 0x616363657074ULL /* "accept": the acceptance test */
#define SPEC_U_RESID 0x7265736964ULL    /* "resid": the draw after a rejection */
#define SPEC_U_BONUS 0x626f6e7573ULL    /* "bonus": the draw after k acceptances */

/* The per-position acceptance curve of a run: proposed[j] counts verifications of more than
 * j drafts, reached[j] those that got to draft j (drafts 0..j-1 accepted), accepted[j] those
 * that accepted it too, for j < SPEC_CURVE_MAX (later positions are not counted). accepted[j] / reached[j] is the
 * conditional acceptance at position j: the simulator's alpha, which speculative.lua takes
 * as the same at every position. */
enum { SPEC_CURVE_MAX = 32 };
typedef struct {
    int64_t proposed[SPEC_CURVE_MAX], reached[SPEC_CURVE_MAX], accepted[SPEC_CURVE_MAX];
    int32_t n;   /* positions counted: the largest k seen, capped */
} spec_curve_t;

void spec_curve_add(spec_curve_t *c, int32_t k, int32_t accepted);
/* The alpha under which the counts are likeliest (each reached draft accepted independently
 * with probability alpha): sum(accepted) / sum(reached); -1 with nothing reached. */
double spec_curve_alpha(const spec_curve_t *c);
/* The counts as one JSON object {"proposed":[..],"reached":[..],"accepted":[..]} (what a
 * run's config holds as "spec_curve"); buf of SPEC_CURVE_JSON_MAX bytes. */
#define SPEC_CURVE_JSON_MAX (3 * SPEC_CURVE_MAX * 21 + 64)
void spec_curve_json(const spec_curve_t *c, char *buf);

#endif

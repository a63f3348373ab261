/* logprob: see logprob.h. */
#include "engine/logprob.h"

#include <math.h>

/* The row's maximum m and log(sum_j exp(x_j - m)) (both NaN for a row with a NaN or no
 * finite maximum): log p(i) = (x_i - m) - *log_s, which keeps log 2 for two logits of 1e30. */
static double row_max(const float *logits, int32_t vocab, double *log_s) {
    *log_s = NAN;
    if (vocab <= 0) return NAN;
    float m = logits[0];
    for (int32_t i = 0; i < vocab; i++) {
        if (isnan(logits[i])) return NAN;
        if (logits[i] > m) m = logits[i];
    }
    if (!isfinite(m)) return NAN;
    double s = 0;
    for (int32_t i = 0; i < vocab; i++) s += exp((double)logits[i] - m);
    *log_s = log(s);
    return m;
}

double logprob_lse(const float *logits, int32_t vocab) {
    double log_s, m = row_max(logits, vocab, &log_s);
    return m + log_s;
}

/* a before b in the order of the top list: larger logit, then lower id */
static int before(const float *logits, int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

int32_t logprob_row(const float *logits, int32_t vocab, int32_t token, int32_t k,
                    float *token_lp, logprob_alt_t *top) {
    double log_s, m = row_max(logits, vocab, &log_s);
    *token_lp = token >= 0 && token < vocab ? (float)(((double)logits[token] - m) - log_s) : NAN;
    if (k > LOGPROB_MAX_TOP) k = LOGPROB_MAX_TOP;
    if (k > vocab) k = vocab;
    if (k <= 0) return 0;
    /* insertion into a sorted list of k: one pass, and a shift only for the few ids that
     * beat the current k-th */
    int32_t n = 0;
    for (int32_t i = 0; i < vocab; i++) {
        if (n == k && !before(logits, i, top[k - 1].id)) continue;
        int32_t j = n < k ? n++ : k - 1;
        while (j > 0 && before(logits, i, top[j - 1].id)) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].id = i;
    }
    for (int32_t j = 0; j < n; j++)
        top[j].logprob = (float)(((double)logits[top[j].id] - m) - log_s);
    return n;
}

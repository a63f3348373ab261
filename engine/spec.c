/* spec: see spec.h. */
#include "engine/spec.h"

void spec_propose_ngram(const int32_t *toks, int32_t n, int32_t k, int32_t *drafts) {
    int32_t from = -1;
    for (int32_t g = SPEC_MAX_NGRAM; g >= 1 && from < 0; g--) {
        if (n <= g) continue;
        const int32_t *tail = toks + n - g;
        /* The latest match wins: recent context predicts best. i is where the match starts. */
        for (int32_t i = n - g - 1; i >= 0 && from < 0; i--) {
            int32_t j = 0;
            while (j < g && toks[i + j] == tail[j]) j++;
            if (j == g) from = i + g;
        }
    }
    for (int32_t j = 0; j < k; j++) {
        if (from >= 0 && from + j < n) drafts[j] = toks[from + j];
        else drafts[j] = j > 0 ? drafts[j - 1] : (n > 0 ? toks[n - 1] : 0);
    }
}

int32_t spec_accept(const int32_t *drafts, const int32_t *sampled, int32_t k) {
    int32_t a = 0;
    while (a < k && drafts[a] == sampled[a]) a++;
    return a;
}

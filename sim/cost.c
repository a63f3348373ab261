/* cost: what every cost model shares (see cost.h): the features of a batch. */
#include "sim/cost.h"

#include <string.h>

void cost_features_add(cost_features_t *f, int64_t n, int64_t ctx, int64_t sampled) {
    if (n < 1) return;
    int64_t c = ctx > 0 ? ctx : 0;
    f->tokens += n;
    f->seqs++;
    f->sampled += sampled > 0 ? sampled : 0;
    f->kv_tokens += c + n;
    f->attn_pairs += n * c + n * (n + 1) / 2;
}

void cost_features(const cost_seq_t *seqs, int32_t n, cost_features_t *f) {
    memset(f, 0, sizeof *f);
    for (int32_t i = 0; i < n; i++)
        cost_features_add(f, seqs[i].n_new, seqs[i].ctx, seqs[i].n_sampled);
}

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
    const int64_t pairs = n * c + n * (n + 1) / 2;
    f->attn_pairs += pairs;
    if (n > 1) {
        f->pf_kv_tokens += c + n;
        f->pf_attn_pairs += pairs;
    }
    const int64_t W = f->window;
    if (W <= 0 || c + n <= W) {
        f->kv_tokens_w += c + n;
        f->attn_pairs_w += pairs;
    } else if (c >= W) {
        f->kv_tokens_w += W;
        f->attn_pairs_w += n * W;
    } else {
        /* tokens j = 1 .. W - c see c + j positions, the rest W */
        const int64_t u = W - c;
        f->kv_tokens_w += W;
        f->attn_pairs_w += u * c + u * (u + 1) / 2 + (n - u) * W;
    }
}

void cost_features_window(const cost_seq_t *seqs, int32_t n, int64_t window,
                          cost_features_t *f) {
    memset(f, 0, sizeof *f);
    f->window = window > 0 ? window : 0;
    for (int32_t i = 0; i < n; i++)
        cost_features_add(f, seqs[i].n_new, seqs[i].ctx, seqs[i].n_sampled);
}

void cost_features(const cost_seq_t *seqs, int32_t n, cost_features_t *f) {
    cost_features_window(seqs, n, 0, f);
}

/* spec: see spec.h. */
#include "engine/spec.h"

#include <stdio.h>

#include "engine/sampler.h"

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

int32_t spec_verify(const double *p, const double *q, const int32_t *drafts, int32_t k,
                    int32_t vocab, uint64_t seed, int32_t idx0, int32_t *out, double *resid) {
    for (int32_t j = 0; j < k; j++, p += vocab, q += vocab) {
        int32_t x = drafts[j];
        double px = p[x], qx = q[x];
        double u = sampler_uniform_for(seed, idx0 + j, SPEC_U_ACCEPT);
        /* accept with probability min(1, p(x) / q(x)), as u < p(x) / q(x) without dividing */
        if (qx > 0 && u * qx < px) {
            out[j] = x;
            continue;
        }
        double total = 0;
        for (int32_t i = 0; i < vocab; i++) {
            double r = p[i] - q[i];
            resid[i] = r > 0 ? r : 0;
            total += resid[i];
        }
        /* p == q up to rounding (a rejection then has probability ~0): p itself */
        const double *from = total > 0 ? resid : p;
        out[j] = sampler_draw(from, vocab, sampler_uniform_for(seed, idx0 + j, SPEC_U_RESID));
        return j;
    }
    out[k] = sampler_draw(p, vocab, sampler_uniform_for(seed, idx0 + k, SPEC_U_BONUS));
    return k;
}

void spec_curve_add(spec_curve_t *c, int32_t k, int32_t accepted) {
    for (int32_t j = 0; j < k && j < SPEC_CURVE_MAX; j++) {
        c->proposed[j]++;
        c->reached[j] += j <= accepted;
        c->accepted[j] += j < accepted;
        if (j + 1 > c->n) c->n = j + 1;
    }
}

double spec_curve_alpha(const spec_curve_t *c) {
    int64_t r = 0, a = 0;
    for (int32_t j = 0; j < c->n; j++) {
        r += c->reached[j];
        a += c->accepted[j];
    }
    return r > 0 ? (double)a / (double)r : -1;
}

void spec_curve_json(const spec_curve_t *c, char *buf) {
    const int64_t *cols[] = { c->proposed, c->reached, c->accepted };
    const char *keys[] = { "proposed", "reached", "accepted" };
    size_t len = 0, cap = SPEC_CURVE_JSON_MAX;
    for (int k = 0; k < 3; k++) {
        len += (size_t)snprintf(buf + len, cap - len, "%s\"%s\":[", k ? "]," : "{", keys[k]);
        for (int32_t j = 0; j < c->n; j++)
            len += (size_t)snprintf(buf + len, cap - len, "%s%lld", j ? "," : "",
                                    (long long)cols[k][j]);
    }
    snprintf(buf + len, cap - len, "]}");
}

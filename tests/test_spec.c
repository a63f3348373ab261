/* test_spec: speculative sampling (engine/spec.c: spec_verify, the acceptance curve) and the
 * sampler's distribution (engine/sampler.c: sampler_dist, sampler_draw), on synthetic
 * distributions. The statistical checks are seeded: each outcome is fixed, and the
 * thresholds sit far in the tails (chi-square p < 1e-6), so a correct implementation never
 * fails them while a wrong one (accepting every draft, a residual that is not max(0, p - q),
 * a bonus from q) fails by orders of magnitude. */
#include <math.h>

#include "engine/sampler.h"
#include "engine/spec.h"
#include "testutil.h"

enum { V = 6, K = 3, N = 200000 };

/* Chi-square critical values at p = 1e-6 for 5 degrees of freedom (V - 1). */
#define CHI2_DF5_1E6 35.9

static double chi2(const int64_t *count, const double *p, int64_t n) {
    double x = 0;
    for (int i = 0; i < V; i++) {
        double want = p[i] * (double)n;
        if (want > 0) x += (count[i] - want) * (count[i] - want) / want;
        else ck_assert_msg(count[i] == 0, "id %d drawn %lld times with probability 0", i,
                           (long long)count[i]);
    }
    return x;
}

/* Target rows p[K + 1][V] and draft rows q[K][V], far apart (the draft favours other ids)
 * and with zeros on both sides. */
static const double P[K + 1][V] = {
    { 0.50, 0.20, 0.10, 0.10, 0.10, 0.00 },
    { 0.05, 0.05, 0.60, 0.10, 0.20, 0.00 },
    { 0.30, 0.30, 0.00, 0.20, 0.10, 0.10 },
    { 0.10, 0.10, 0.10, 0.10, 0.10, 0.50 },
};
static const double Q[K][V] = {
    { 0.10, 0.10, 0.10, 0.10, 0.10, 0.50 },
    { 0.05, 0.05, 0.20, 0.10, 0.60, 0.00 },
    { 0.30, 0.30, 0.40, 0.00, 0.00, 0.00 },
};

/* Every emitted token at output position j is distributed as P[j], whatever the draft
 * proposed: the drafts are drawn from Q (as the draft model does), verified, and the
 * tokens at each position counted over N independent request streams. Position j is
 * emitted when drafts 0 .. j-1 were accepted; since P's rows do not depend on the earlier
 * tokens here, its token must still follow P[j]. */
START_TEST(test_verify_keeps_target_distribution) {
    int64_t count[K + 1][V] = { { 0 } }, emitted[K + 1] = { 0 }, accepted0 = 0;
    double resid[V];
    for (int64_t r = 0; r < N; r++) {
        uint64_t seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(r + 1);
        int32_t drafts[K], out[K + 1];
        for (int j = 0; j < K; j++)
            drafts[j] = sampler_draw(Q[j], V, sampler_uniform_for(seed, j, SPEC_U_DRAFT));
        int32_t a = spec_verify(&P[0][0], &Q[0][0], drafts, K, V, seed, 0, out, resid);
        ck_assert(a >= 0 && a <= K);
        for (int j = 0; j < a; j++) ck_assert_int_eq(out[j], drafts[j]);
        for (int j = 0; j <= a; j++) {
            ck_assert(out[j] >= 0 && out[j] < V);
            count[j][out[j]]++;
            emitted[j]++;
        }
        accepted0 += a > 0;
    }
    for (int j = 0; j <= K; j++) {
        double x = chi2(count[j], P[j], emitted[j]);
        ck_assert_msg(x < CHI2_DF5_1E6, "position %d: chi-square %.1f over %lld tokens", j, x,
                      (long long)emitted[j]);
    }
    ck_assert_int_eq(emitted[0], N);
    ck_assert(emitted[K] > 1000);   /* the bonus position was reached often enough to test */
    /* the first draft is kept with probability sum_x min(p(x), q(x)) = 0.5 */
    double rate = (double)accepted0 / N;
    ck_assert_msg(fabs(rate - 0.5) < 0.01, "first-draft acceptance %.4f, want 0.5", rate);
}
END_TEST

/* A draft equal to the target is always accepted, and the bonus comes from the last row. */
START_TEST(test_verify_same_distribution_accepts_all) {
    double resid[V];
    for (int64_t r = 0; r < 2000; r++) {
        uint64_t seed = (uint64_t)r * 7919 + 3;
        int32_t drafts[K], out[K + 1];
        for (int j = 0; j < K; j++)
            drafts[j] = sampler_draw(P[j], V, sampler_uniform_for(seed, j, SPEC_U_DRAFT));
        ck_assert_int_eq(spec_verify(&P[0][0], &P[0][0], drafts, K, V, seed, 10, out, resid), K);
        ck_assert(P[K][out[K]] > 0);
    }
}
END_TEST

/* Results depend on (seed, output index) only: the same call gives the same tokens, and
 * another starting index other ones. */
START_TEST(test_verify_deterministic) {
    double resid[V];
    int32_t drafts[K] = { 5, 4, 2 }, a1[K + 1], a2[K + 1];
    int differ = 0;
    for (uint64_t s = 1; s < 200; s++) {
        int32_t n1 = spec_verify(&P[0][0], &Q[0][0], drafts, K, V, s, 0, a1, resid);
        int32_t n2 = spec_verify(&P[0][0], &Q[0][0], drafts, K, V, s, 0, a2, resid);
        ck_assert_int_eq(n1, n2);
        ck_assert_mem_eq(a1, a2, sizeof(int32_t) * (size_t)(n1 + 1));
        int32_t n3 = spec_verify(&P[0][0], &Q[0][0], drafts, K, V, s, 7, a2, resid);
        differ |= n3 != n1 || a2[0] != a1[0];
    }
    ck_assert(differ);
}
END_TEST

/* sampler_dist is the distribution sampler_pick draws from: under temperature, top-k and
 * top-p, draws over many streams match it, and it is zero where sampler_pick never goes. */
START_TEST(test_dist_matches_pick) {
    float logits[V] = { 1.0f, 2.5f, 0.2f, 2.4f, -1.0f, 1.9f };
    bk_sample_t cases[] = {
        { .temperature = 1.0f, .top_k = 0, .top_p = 1.0f },
        { .temperature = 0.7f, .top_k = 3, .top_p = 1.0f },
        { .temperature = 1.3f, .top_k = 0, .top_p = 0.8f },
    };
    float probs[V];
    int32_t idx[V];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double dist[V], sum = 0;
        sampler_dist(logits, V, &cases[c], dist, probs, idx);
        for (int i = 0; i < V; i++) sum += dist[i];
        ck_assert(fabs(sum - 1) < 1e-9);
        int64_t count[V] = { 0 };
        for (int32_t n = 0; n < N; n++) {
            bk_sample_t p = cases[c];
            p.seed = 0x1234567ULL + (uint64_t)n * 0x9e3779b97f4a7c15ULL;
            p.idx = n % 5;
            count[sampler_pick(logits, V, &p, probs, idx)]++;
        }
        double x = chi2(count, dist, N);
        ck_assert_msg(x < CHI2_DF5_1E6, "case %zu: chi-square %.1f", c, x);
    }
    ck_assert_int_eq(cases[1].top_k, 3);
    double dist[V];
    sampler_dist(logits, V, &cases[1], dist, probs, idx);
    ck_assert(dist[0] == 0 && dist[2] == 0 && dist[4] == 0);   /* outside the top 3 */
    bk_sample_t greedy = { .temperature = 0, .top_p = 1 };
    sampler_dist(logits, V, &greedy, dist, probs, idx);
    ck_assert(dist[1] == 1 && dist[3] == 0);
}
END_TEST

START_TEST(test_draw) {
    double d[4] = { 0, 2, 0, 2 };   /* not normalised */
    ck_assert_int_eq(sampler_draw(d, 4, 0.0), 1);
    ck_assert_int_eq(sampler_draw(d, 4, 0.49), 1);
    ck_assert_int_eq(sampler_draw(d, 4, 0.51), 3);
    ck_assert_int_eq(sampler_draw(d, 4, 1.0 - 1e-16), 3);
    /* purposes give other uniforms than the plain draw's */
    ck_assert(sampler_uniform_for(5, 3, SPEC_U_ACCEPT) != sampler_uniform(5, 3));
    ck_assert(sampler_uniform_for(5, 3, SPEC_U_ACCEPT) != sampler_uniform_for(5, 3, SPEC_U_RESID));
}
END_TEST

/* The curve counts reached and accepted drafts per position; alpha is their pooled ratio. */
START_TEST(test_curve) {
    spec_curve_t c = { { 0 }, { 0 }, { 0 }, 0 };
    ck_assert(spec_curve_alpha(&c) < 0);
    spec_curve_add(&c, 3, 3);   /* reached 0,1,2, all accepted */
    spec_curve_add(&c, 3, 1);   /* reached 0,1; accepted 0 */
    spec_curve_add(&c, 2, 0);   /* reached 0 */
    spec_curve_add(&c, 0, 0);   /* nothing proposed */
    ck_assert_int_eq(c.n, 3);
    ck_assert_int_eq(c.proposed[0], 3);
    ck_assert_int_eq(c.proposed[1], 3);
    ck_assert_int_eq(c.proposed[2], 2);
    ck_assert_int_eq(c.reached[0], 3);
    ck_assert_int_eq(c.accepted[0], 2);
    ck_assert_int_eq(c.reached[1], 2);
    ck_assert_int_eq(c.accepted[1], 1);
    ck_assert_int_eq(c.reached[2], 1);
    ck_assert_int_eq(c.accepted[2], 1);
    ck_assert(fabs(spec_curve_alpha(&c) - 4.0 / 6.0) < 1e-12);
    spec_curve_add(&c, SPEC_CURVE_MAX + 5, SPEC_CURVE_MAX + 5);   /* capped, not overrun */
    ck_assert_int_eq(c.n, SPEC_CURVE_MAX);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("spec");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_verify_keeps_target_distribution);
    tcase_add_test(t, test_verify_same_distribution_accepts_all);
    tcase_add_test(t, test_verify_deterministic);
    tcase_add_test(t, test_dist_matches_pick);
    tcase_add_test(t, test_draw);
    tcase_add_test(t, test_curve);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return testutil_run(suite()); }

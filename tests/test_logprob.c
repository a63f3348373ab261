/* Check suite for engine/logprob.c: the log-probabilities `twinserve serve` reports, checked
 * against log-softmaxes worked by hand, with ties, -inf and NaN logits, huge logits, and the
 * top-k order. */
#include <check.h>
#include <math.h>

#include "engine/logprob.h"
#include "tests/testutil.h"

/* logits 1, 2, 3: log(e^1 + e^2 + e^3) = 3 + log(1 + e^-1 + e^-2) = 3.4076059644 */
START_TEST(log_softmax_by_hand) {
    const float x[] = { 1, 2, 3 };
    ck_assert_double_eq_tol(logprob_lse(x, 3), 3.4076059644, 1e-9);
    float lp;
    logprob_alt_t top[3];
    ck_assert_int_eq(logprob_row(x, 3, 0, 0, &lp, top), 0);
    ck_assert_float_eq_tol(lp, -2.4076059644f, 1e-6f);
    ck_assert_int_eq(logprob_row(x, 3, 1, 2, &lp, top), 2);
    ck_assert_float_eq_tol(lp, -1.4076059644f, 1e-6f);
    ck_assert_int_eq(top[0].id, 2);
    ck_assert_float_eq_tol(top[0].logprob, -0.4076059644f, 1e-6f);
    ck_assert_int_eq(top[1].id, 1);
    ck_assert_float_eq_tol(top[1].logprob, -1.4076059644f, 1e-6f);
    /* k above the vocabulary: every id, in order */
    ck_assert_int_eq(logprob_row(x, 3, 2, 20, &lp, top), 3);
    ck_assert_int_eq(top[2].id, 0);
}
END_TEST

/* Ties keep the lowest id first (the sampler's order); the k-th place goes to the lower id. */
START_TEST(ties_lowest_id_first) {
    const float x[] = { 0.1f, 0.5f, 0.5f, 0.2f, 0.5f };
    float lp;
    logprob_alt_t top[3];
    ck_assert_int_eq(logprob_row(x, 5, 0, 2, &lp, top), 2);
    ck_assert_int_eq(top[0].id, 1);
    ck_assert_int_eq(top[1].id, 2);
    ck_assert_float_eq(top[0].logprob, top[1].logprob);
}
END_TEST

/* A logit of -inf is impossible (log p = -inf) and takes no mass; huge logits do not
 * overflow: two equal ones each have log p = -log 2. */
START_TEST(infinities_and_huge_logits) {
    const float x[] = { -INFINITY, 0, 0 };
    float lp;
    logprob_alt_t top[3];
    logprob_row(x, 3, 0, 3, &lp, top);
    ck_assert(isinf(lp) && lp < 0);
    ck_assert_float_eq_tol(top[0].logprob, -0.6931471806f, 1e-6f);
    ck_assert_int_eq(top[2].id, 0);
    const float big[] = { 1e30f, 1e30f };
    logprob_row(big, 2, 1, 0, &lp, top);
    ck_assert_float_eq_tol(lp, -0.6931471806f, 1e-6f);
    const float bad[] = { 0, NAN };
    logprob_row(bad, 2, 0, 0, &lp, top);
    ck_assert(isnan(lp));
    const float none[] = { -INFINITY, -INFINITY };
    ck_assert(isnan(logprob_lse(none, 2)));
}
END_TEST

/* Over a larger row: the probabilities sum to 1, the top list is sorted and is the true
 * top (every other id is no more likely than the last one listed). */
START_TEST(a_row_of_512) {
    float x[512];
    uint64_t s = 12345;
    for (int i = 0; i < 512; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = (float)((s >> 40) % 10000) / 700.0f - 7;
    }
    double sum = 0;
    float lp;
    logprob_alt_t top[LOGPROB_MAX_TOP];
    for (int i = 0; i < 512; i++) {
        logprob_row(x, 512, i, 0, &lp, top);
        sum += exp((double)lp);
    }
    ck_assert_double_eq_tol(sum, 1.0, 1e-5);
    ck_assert_int_eq(logprob_row(x, 512, 7, LOGPROB_MAX_TOP, &lp, top), LOGPROB_MAX_TOP);
    for (int j = 1; j < LOGPROB_MAX_TOP; j++) ck_assert(top[j - 1].logprob >= top[j].logprob);
    int listed[512] = { 0 };
    for (int j = 0; j < LOGPROB_MAX_TOP; j++) listed[top[j].id] = 1;
    for (int i = 0; i < 512; i++)
        if (!listed[i]) ck_assert(x[i] <= x[top[LOGPROB_MAX_TOP - 1].id]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("logprob");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, log_softmax_by_hand);
    tcase_add_test(tc, ties_lowest_id_first);
    tcase_add_test(tc, infinities_and_huge_logits);
    tcase_add_test(tc, a_row_of_512);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

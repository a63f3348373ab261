/* test_stats: mean and percentiles against values numpy.percentile (linear, its default)
 * gives, worked out by hand: rank = p/100 * (n - 1), interpolated between neighbours. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/stats.h"
#include "tests/testutil.h"

#define EQ(a, b) ck_assert_double_eq_tol((a), (b), 1e-12)

START_TEST(test_mean) {
    double x[] = {1, 2, 3, 4};
    EQ(stats_mean(x, 4), 2.5);
    EQ(stats_mean(x, 1), 1);
    ck_assert(isnan(stats_mean(x, 0)));
    ck_assert(isnan(stats_mean(NULL, 0)));
    /* Compensated sum: a million 0.1s average to 0.1 far closer than a naive sum would. */
    size_t n = 1000000;
    double *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = 0.1;
    ck_assert_double_eq_tol(stats_mean(y, n), 0.1, 1e-15);
    free(y);
}
END_TEST

START_TEST(test_percentile_four) {
    double x[] = {1, 2, 3, 4};
    EQ(stats_percentile_sorted(x, 4, 50), 2.5);   /* rank 1.5 */
    EQ(stats_percentile_sorted(x, 4, 90), 3.7);   /* rank 2.7 */
    EQ(stats_percentile_sorted(x, 4, 25), 1.75);  /* rank 0.75 */
    EQ(stats_percentile_sorted(x, 4, 99), 3.97);  /* rank 2.97 */
    ck_assert(stats_percentile_sorted(x, 4, 0) == 1);
    ck_assert(stats_percentile_sorted(x, 4, 100) == 4);
    /* Exactly on a rank: no interpolation error at all. */
    double y[] = {10, 20, 30, 40, 50};
    ck_assert(stats_percentile_sorted(y, 5, 50) == 30);
    ck_assert(stats_percentile_sorted(y, 5, 75) == 40);
    EQ(stats_percentile_sorted(y, 5, 95), 48);    /* rank 3.8 */
    EQ(stats_percentile_sorted(y, 5, 99), 49.6);  /* rank 3.96 */
    double z[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    EQ(stats_percentile_sorted(z, 10, 99), 9.91);  /* rank 8.91 */
    EQ(stats_percentile_sorted(z, 10, 90), 9.1);   /* rank 8.1 */
}
END_TEST

START_TEST(test_percentile_edges) {
    double one[] = {5.5};
    for (double p = 0; p <= 100; p += 12.5) ck_assert(stats_percentile_sorted(one, 1, p) == 5.5);
    ck_assert(stats_percentile(one, 1, 99) == 5.5);
    ck_assert(isnan(stats_percentile_sorted(one, 0, 50)));
    ck_assert(isnan(stats_percentile(NULL, 0, 50)));
    ck_assert(isnan(stats_percentile_sorted(one, 1, -1)));
    ck_assert(isnan(stats_percentile_sorted(one, 1, 100.5)));
    ck_assert(isnan(stats_percentile_sorted(one, 1, NAN)));
    /* Equal neighbours interpolate to themselves. */
    double flat[] = {2, 2, 2};
    ck_assert(stats_percentile_sorted(flat, 3, 37) == 2);
    /* 0..100: percentile p is p itself. */
    double r[101];
    for (int i = 0; i <= 100; i++) r[i] = i;
    for (int p = 0; p <= 100; p++) EQ(stats_percentile_sorted(r, 101, p), p);
    /* Negative values are just values. */
    double neg[] = {-3, -1};
    EQ(stats_percentile_sorted(neg, 2, 50), -2);
}
END_TEST

START_TEST(test_unsorted) {
    double x[] = {4, 1, 3, 2};
    double before[4];
    memcpy(before, x, sizeof x);
    EQ(stats_percentile(x, 4, 50), 2.5);
    EQ(stats_percentile(x, 4, 90), 3.7);
    ck_assert(stats_percentile(x, 4, 0) == 1);
    ck_assert(memcmp(x, before, sizeof x) == 0);   /* the caller's array is untouched */
    stats_sort(x, 4);
    for (int i = 0; i < 4; i++) ck_assert(x[i] == i + 1);
    double y[] = {0.3, -2, 7, 0.3, 1e9, -1e-9};
    stats_sort(y, 6);
    for (int i = 1; i < 6; i++) ck_assert(y[i - 1] <= y[i]);
    stats_sort(y, 0);
}
END_TEST

START_TEST(test_describe) {
    double x[] = {0.1, 0.3, 1.0, 1.5};
    stats_dist_t d;
    stats_describe_sorted(x, 4, &d);
    ck_assert_uint_eq(d.n, 4);
    EQ(d.mean, 0.725);
    EQ(d.min, 0.1);
    EQ(d.max, 1.5);
    EQ(d.p50, 0.65);    /* rank 1.5 */
    EQ(d.p90, 1.35);    /* rank 2.7 */
    EQ(d.p95, 1.425);   /* rank 2.85 */
    EQ(d.p99, 1.485);   /* rank 2.97 */
    stats_describe_sorted(NULL, 0, &d);
    ck_assert_uint_eq(d.n, 0);
    ck_assert(isnan(d.mean) && isnan(d.min) && isnan(d.max) && isnan(d.p50) && isnan(d.p99));
}
END_TEST

static Suite *stats_suite(void) {
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_mean);
    tcase_add_test(tc, test_percentile_four);
    tcase_add_test(tc, test_percentile_edges);
    tcase_add_test(tc, test_unsorted);
    tcase_add_test(tc, test_describe);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    return testutil_run(stats_suite());
}

/* test_trace_gen: the synthetic trace generator. Measured rate, gamma CV and lognormal
 * median against the requested ones, determinism per seed, the CSV read back through
 * trace_open, resampling of real (prompt, output) pairs, and the DIST parser's messages. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traces/trace.h"
#include "traces/trace_gen.h"
#include "tests/testutil.h"

static tgen_opts_t opts(int64_t n, double rate, uint64_t seed)
{
    tgen_opts_t o;
    tgen_opts_default(&o);
    o.n = n;
    o.rate = rate;
    o.seed = seed;
    return o;
}

/* Generates all requests into a fresh array of *n. */
static tgen_req_t *gen_all(const tgen_opts_t *o, int64_t *n)
{
    tgen_t *g = tgen_open(o);
    ck_assert_ptr_nonnull(g);
    ck_assert_msg(tgen_errmsg(g) == NULL, "%s", tgen_errmsg(g));
    int64_t cap = 1024, k = 0;
    tgen_req_t *r = malloc((size_t)cap * sizeof *r);
    int rc;
    for (;;) {
        if (k == cap) r = realloc(r, (size_t)(cap *= 2) * sizeof *r);
        if ((rc = tgen_next(g, &r[k])) != 1) break;
        ck_assert_int_eq(r[k].id, k);
        ck_assert(k == 0 || r[k].arrival_s >= r[k - 1].arrival_s);
        ck_assert(r[k].output_tokens >= 1 && r[k].prompt_tokens >= 0);
        k++;
    }
    ck_assert_int_eq(rc, 0);
    tgen_close(g);
    *n = k;
    return r;
}

/* Coefficient of variation of the inter-arrival gaps. */
static double gap_cv(const tgen_req_t *r, int64_t n)
{
    double s = 0, s2 = 0;
    for (int64_t i = 1; i < n; i++) {
        double g = r[i].arrival_s - r[i - 1].arrival_s;
        s += g;
        s2 += g * g;
    }
    double m = s / (double)(n - 1);
    return sqrt(s2 / (double)(n - 1) - m * m) / m;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

START_TEST(test_poisson_rate) {
    tgen_opts_t o = opts(20000, 5.0, 1);
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    ck_assert_int_eq(n, 20000);
    ck_assert(r[0].arrival_s == 0);
    /* The mean gap of 20000 exponentials has a relative sd of 0.7%: 3% is > 4 sd. */
    double rate = (double)(n - 1) / r[n - 1].arrival_s;
    ck_assert_msg(fabs(rate / 5.0 - 1) < 0.03, "rate %f", rate);
    ck_assert_msg(fabs(gap_cv(r, n) - 1) < 0.05, "cv %f", gap_cv(r, n));
    free(r);
}
END_TEST

START_TEST(test_gamma_cv) {
    const double cvs[] = {0.5, 2.0};
    for (int i = 0; i < 2; i++) {
        tgen_opts_t o = opts(20000, 10.0, 7);
        char err[256];
        char spec[32];
        snprintf(spec, sizeof spec, "gamma:%g", cvs[i]);
        ck_assert_int_eq(tgen_arrival_parse(spec, &o.arrival, err, sizeof err), 0);
        int64_t n;
        tgen_req_t *r = gen_all(&o, &n);
        double rate = (double)(n - 1) / r[n - 1].arrival_s, cv = gap_cv(r, n);
        ck_assert_msg(fabs(rate / 10.0 - 1) < 0.05, "cv %g: rate %f", cvs[i], rate);
        ck_assert_msg(fabs(cv / cvs[i] - 1) < 0.1, "cv %g measured %f", cvs[i], cv);
        free(r);
    }
}
END_TEST

START_TEST(test_lengths) {
    tgen_opts_t o = opts(20000, 1.0, 3);
    char err[256];
    ck_assert_int_eq(tgen_dist_parse("lognormal:1000:1.0", &o.prompt, err, sizeof err), 0);
    ck_assert_int_eq(tgen_dist_parse("uniform:10:20", &o.output, err, sizeof err), 0);
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    int32_t *p = malloc((size_t)n * sizeof *p);
    double osum = 0;
    int lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        p[i] = r[i].prompt_tokens;
        ck_assert(r[i].output_tokens >= 10 && r[i].output_tokens <= 20);
        lo += r[i].output_tokens == 10;
        hi += r[i].output_tokens == 20;
        osum += r[i].output_tokens;
        ck_assert(p[i] >= 1 && p[i] <= TGEN_DEFAULT_MAX_LEN);
    }
    qsort(p, (size_t)n, sizeof *p, cmp_i32);
    /* sd of the sample median in log space is 1.25 * sigma / sqrt(n) = 0.9% */
    ck_assert_msg(fabs(p[n / 2] / 1000.0 - 1) < 0.04, "median %d", (int)p[n / 2]);
    ck_assert(lo > 1000 && hi > 1000);
    ck_assert_double_eq_tol(osum / (double)n, 15.0, 0.1);
    free(p);
    free(r);

    /* clamped to [1, MAX] */
    ck_assert_int_eq(tgen_dist_parse("lognormal:20:3:50", &o.prompt, err, sizeof err), 0);
    ck_assert_int_eq(tgen_dist_parse("fixed:7", &o.output, err, sizeof err), 0);
    o.n = 5000;
    r = gen_all(&o, &n);
    int at_max = 0, at_min = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(r[i].prompt_tokens >= 1 && r[i].prompt_tokens <= 50 && r[i].output_tokens == 7);
        at_max += r[i].prompt_tokens == 50;
        at_min += r[i].prompt_tokens == 1;
    }
    ck_assert(at_max > 500 && at_min > 500);
    free(r);
}
END_TEST

static void write_to(const tgen_opts_t *o, const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    tgen_t *g = tgen_open(o);
    ck_assert_int_eq(tgen_write_csv(g, f), 0);
    tgen_close(g);
    ck_assert_int_eq(fclose(f), 0);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    char *b = malloc(*len + 1);
    ck_assert_uint_eq(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

START_TEST(test_determinism_and_readback) {
    char a[64], b[64], c[64];
    ck_assert_ptr_nonnull(testutil_tmpfile(a, sizeof a, ".csv"));
    ck_assert_ptr_nonnull(testutil_tmpfile(b, sizeof b, ".csv"));
    ck_assert_ptr_nonnull(testutil_tmpfile(c, sizeof c, ".csv"));
    tgen_opts_t o = opts(3000, 20.0, 42);
    char err[256];
    ck_assert_int_eq(tgen_arrival_parse("gamma:1.5", &o.arrival, err, sizeof err), 0);
    write_to(&o, a);
    write_to(&o, b);
    o.seed = 43;
    write_to(&o, c);
    size_t la, lb, lc;
    char *ta = slurp(a, &la), *tb = slurp(b, &lb), *tc = slurp(c, &lc);
    ck_assert(la == lb && memcmp(ta, tb, la) == 0);
    ck_assert(la != lc || memcmp(ta, tc, la) != 0);
    ck_assert(strncmp(ta, "arrival_s,prompt_tokens,output_tokens\n0.000000,", 47) == 0);

    /* What tgen_next hands out is exactly what trace_open reads back. */
    o.seed = 42;
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    trace_t *t = trace_open(a, NULL);
    trace_req_t q;
    int64_t k = 0;
    while (trace_next(t, &q) == 1) {
        ck_assert(k < n);
        ck_assert_msg(q.arrival_s == r[k].arrival_s, "row %lld: %.9f vs %.9f", (long long)k,
                      q.arrival_s, r[k].arrival_s);
        ck_assert(q.prompt_tokens == r[k].prompt_tokens && q.output_tokens == r[k].output_tokens);
        k++;
    }
    ck_assert_msg(trace_errmsg(t) == NULL, "%s", trace_errmsg(t));
    ck_assert_int_eq(trace_format(t), TRACE_FMT_PLAIN);
    ck_assert_int_eq(k, n);
    trace_close(t);

    /* Streams are independent: another prompt distribution leaves the arrivals alone. */
    ck_assert_int_eq(tgen_dist_parse("uniform:1:9", &o.prompt, err, sizeof err), 0);
    int64_t n2;
    tgen_req_t *r2 = gen_all(&o, &n2);
    ck_assert(n2 == n);
    for (int64_t i = 0; i < n; i++)
        ck_assert(r2[i].arrival_s == r[i].arrival_s && r2[i].output_tokens == r[i].output_tokens);
    free(r);
    free(r2);
    free(ta);
    free(tb);
    free(tc);
    unlink(a);
    unlink(b);
    unlink(c);
}
END_TEST

START_TEST(test_shared_prefix) {
    /* --shared-prefix 4:2048: the same arrivals and drawn lengths as without it, each prompt
     * 2,048 tokens longer, groups drawn uniformly from their own stream, and the columns read
     * back as one hash id per request, equal within a group, covering the prefix. */
    tgen_opts_t o = opts(4000, 10.0, 7);
    int64_t n, n2;
    tgen_req_t *base = gen_all(&o, &n);
    char err[256];
    ck_assert_int_eq(tgen_prefix_parse("4:2048", &o.prefix_groups, &o.prefix_tokens, err,
                                       sizeof err), 0);
    tgen_req_t *r = gen_all(&o, &n2);
    ck_assert_int_eq(n2, n);
    int count[4] = { 0 };
    for (int64_t i = 0; i < n; i++) {
        ck_assert(r[i].arrival_s == base[i].arrival_s);
        ck_assert_int_eq(r[i].output_tokens, base[i].output_tokens);
        ck_assert_int_eq(r[i].prompt_tokens, base[i].prompt_tokens + 2048);
        ck_assert_int_eq(r[i].prefix_tokens, 2048);
        ck_assert(r[i].prefix_group >= 0 && r[i].prefix_group < 4);
        ck_assert_int_eq(base[i].prefix_group, -1);
        count[r[i].prefix_group]++;
    }
    for (int g = 0; g < 4; g++) ck_assert_int_gt(count[g], 900);

    char a[64];
    ck_assert_ptr_nonnull(testutil_tmpfile(a, sizeof a, ".csv"));
    write_to(&o, a);
    size_t la;
    char *ta = slurp(a, &la);
    ck_assert(strncmp(ta, "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n",
                      65) == 0);
    trace_t *t = trace_open(a, NULL);
    trace_req_t q;
    int64_t k = 0, first_of[4] = { -1, -1, -1, -1 };
    int64_t hash_of[4] = { 0 };
    while (trace_next(t, &q) == 1) {
        ck_assert_int_eq(q.n_hash, 1);
        ck_assert_int_eq(q.hash_block, 2048);
        ck_assert_int_eq(q.prompt_tokens, r[k].prompt_tokens);
        int g = r[k].prefix_group;
        if (first_of[g] < 0) first_of[g] = k, hash_of[g] = q.hash_ids[0];
        ck_assert(q.hash_ids[0] == hash_of[g]);
        for (int h = 0; h < 4; h++)
            if (h != g && first_of[h] >= 0) ck_assert(hash_of[h] != q.hash_ids[0]);
        k++;
    }
    ck_assert_msg(trace_errmsg(t) == NULL, "%s", trace_errmsg(t));
    ck_assert_int_eq(k, n);
    trace_close(t);

    ck_assert_int_eq(tgen_prefix_parse("4", &o.prefix_groups, &o.prefix_tokens, err,
                                       sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "GROUPS:TOKENS"));
    ck_assert_int_eq(tgen_prefix_parse("0:10", &o.prefix_groups, &o.prefix_tokens, err,
                                       sizeof err), -1);
    free(base);
    free(r);
    free(ta);
    unlink(a);
}
END_TEST

START_TEST(test_duration) {
    tgen_opts_t o = opts(0, 50.0, 9);
    o.duration_s = 100;
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    ck_assert(r[n - 1].arrival_s < 100);
    ck_assert_msg(labs((long)n - 5000) < 300, "n %lld", (long long)n);
    free(r);
    /* both set: whichever ends first */
    o.n = 10;
    r = gen_all(&o, &n);
    ck_assert_int_eq(n, 10);
    free(r);
}
END_TEST

START_TEST(test_resample_pairs) {
    char p[64], err[256];
    /* every row has output = prompt + 1: joint draws keep that, marginal ones do not */
    char text[4096], *w = text;
    w += sprintf(w, "arrival_s,prompt_tokens,output_tokens\n");
    for (int i = 0; i < 100; i++) w += sprintf(w, "%d,%d,%d\n", i, 10 * i, 10 * i + 1);
    ck_assert_ptr_nonnull(testutil_write_tmp(p, sizeof p, ".csv", text));
    char spec[128];
    snprintf(spec, sizeof spec, "trace:%s", p);
    tgen_opts_t o = opts(2000, 1.0, 5);
    ck_assert_int_eq(tgen_dist_parse(spec, &o.prompt, err, sizeof err), 0);
    ck_assert_int_eq(tgen_dist_parse(spec, &o.output, err, sizeof err), 0);
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    int distinct[100] = {0}, nd = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert(r[i].output_tokens == r[i].prompt_tokens + 1 && r[i].prompt_tokens % 10 == 0);
        if (!distinct[r[i].prompt_tokens / 10]++) nd++;
    }
    ck_assert(nd > 95);
    free(r);

    /* a bounded reservoir keeps at most max_pairs rows */
    o.max_pairs = 10;
    r = gen_all(&o, &n);
    memset(distinct, 0, sizeof distinct);
    nd = 0;
    for (int64_t i = 0; i < n; i++)
        if (!distinct[r[i].prompt_tokens / 10]++) nd++;
    ck_assert_int_eq(nd, 10);
    free(r);

    /* only the prompt from the trace: outputs follow their own distribution */
    o.max_pairs = 0;
    ck_assert_int_eq(tgen_dist_parse("fixed:3", &o.output, err, sizeof err), 0);
    r = gen_all(&o, &n);
    for (int64_t i = 0; i < n; i++) ck_assert(r[i].output_tokens == 3);
    free(r);
    unlink(p);
}
END_TEST

START_TEST(test_resample_real) {
    char p[512], spec[600], err[256];
    if (!testutil_data_path("traces/AzureLLMInferenceTrace_conv.csv", p, sizeof p)) return;
    snprintf(spec, sizeof spec, "trace:%s", p);
    tgen_opts_t o = opts(20000, 5.0, 11);
    ck_assert_int_eq(tgen_dist_parse(spec, &o.prompt, err, sizeof err), 0);
    o.output = o.prompt;
    int64_t n;
    tgen_req_t *r = gen_all(&o, &n);
    double ps = 0, os = 0;
    for (int64_t i = 0; i < n; i++) {
        ps += r[i].prompt_tokens;
        os += r[i].output_tokens;
        ck_assert(r[i].prompt_tokens >= 2 && r[i].prompt_tokens <= 14050);
        ck_assert(r[i].output_tokens >= 7 && r[i].output_tokens <= 1000);
    }
    /* the trace's means are 1154.7 and 211.1 (data README) */
    ck_assert_msg(fabs(ps / (double)n / 1154.7 - 1) < 0.04, "prompt mean %f", ps / (double)n);
    ck_assert_msg(fabs(os / (double)n / 211.1 - 1) < 0.04, "output mean %f", os / (double)n);
    free(r);
}
END_TEST

START_TEST(test_parse_errors) {
    tgen_dist_t d;
    tgen_arrival_t a;
    char err[512], buf[128];
    static const char *good[] = {"fixed:5", "uniform:1:1", "lognormal:200:0.5",
                                 "lognormal:200:0:4096", "trace:/x:y.csv"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(tgen_dist_parse(good[i], &d, err, sizeof err) == 0, "%s", err);
        tgen_dist_format(&d, buf, sizeof buf);
        tgen_dist_t d2;
        ck_assert_int_eq(tgen_dist_parse(buf, &d2, err, sizeof err), 0);
        ck_assert(d2.kind == d.kind && d2.a == d.a && d2.b == d.b && d2.max == d.max);
    }
    static const struct { const char *s, *err; } bad[] = {
        {"fixed:0", "'fixed:0': N must be an integer in [1, 2147483647]"},
        {"fixed:2.5", "'fixed:2.5': N must be an integer in [1, 2147483647]"},
        {"uniform:5:2", "'uniform:5:2': A must not exceed B"},
        {"uniform::5", "'uniform::5' is not a length distribution; expected fixed:N, "
                       "uniform:A:B, lognormal:MEDIAN:SIGMA[:MAX] or trace:PATH"},
        {"lognormal:0:1", "'lognormal:0:1': MEDIAN must be a positive number"},
        {"lognormal:10:-1", "'lognormal:10:-1': SIGMA must be a non-negative number"},
        {"lognormal:100:1:50", "'lognormal:100:1:50': MEDIAN must not exceed MAX (50)"},
        {"trace:", "'trace:': expected trace:PATH with a path under 1024 bytes"},
        {"normal:5:1", "'normal:5:1' is not a length distribution; expected fixed:N, "
                       "uniform:A:B, lognormal:MEDIAN:SIGMA[:MAX] or trace:PATH"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(tgen_dist_parse(bad[i].s, &d, err, sizeof err), -1);
        ck_assert_str_eq(err, bad[i].err);
    }
    ck_assert_int_eq(tgen_arrival_parse("poisson", &a, err, sizeof err), 0);
    ck_assert_int_eq(tgen_arrival_parse("gamma:0", &a, err, sizeof err), -1);
    ck_assert_str_eq(err, "'gamma:0': CV must be a positive number");
    ck_assert_int_eq(tgen_arrival_parse("bursty", &a, err, sizeof err), -1);
    ck_assert_str_eq(err, "'bursty' is not an arrival process; expected poisson or gamma:CV");

    tgen_opts_t o = opts(10, 0, 0);
    tgen_t *g = tgen_open(&o);
    ck_assert_str_eq(tgen_errmsg(g), "rate 0 must be a positive number of requests per second");
    tgen_req_t r;
    ck_assert_int_eq(tgen_next(g, &r), -1);
    tgen_close(g);
    o = opts(0, 1, 0);
    g = tgen_open(&o);
    ck_assert_str_eq(tgen_errmsg(g), "set a number of requests or a duration");
    tgen_close(g);
    o = opts(10, 1, 0);
    ck_assert_int_eq(tgen_dist_parse("trace:/nonexistent.csv", &o.output, err, sizeof err), 0);
    g = tgen_open(&o);
    ck_assert_str_eq(tgen_errmsg(g), "output trace: /nonexistent.csv: No such file or directory");
    tgen_close(g);
}
END_TEST

static Suite *trace_gen_suite(void)
{
    Suite *s = suite_create("trace_gen");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_poisson_rate);
    tcase_add_test(tc, test_gamma_cv);
    tcase_add_test(tc, test_lengths);
    tcase_add_test(tc, test_determinism_and_readback);
    tcase_add_test(tc, test_shared_prefix);
    tcase_add_test(tc, test_duration);
    tcase_add_test(tc, test_resample_pairs);
    tcase_add_test(tc, test_resample_real);
    tcase_add_test(tc, test_parse_errors);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return testutil_run(trace_gen_suite());
}

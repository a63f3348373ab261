/* test_band: prediction bands (analysis/band.h): the width's parsing and choice, the
 * elasticity and the knee verdict by hand, and sim's two sides recorded as their own runs
 * with every step's time scaled, their latencies bracketing the nominal run's. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "analysis/band.h"
#include "sim/sim.h"
#include "tests/testutil.h"

static char db[256], trace[256];

static void setup(void) {
    ck_assert_ptr_nonnull(testutil_tmpfile(db, sizeof db, ".db"));
    testutil_gen_trace(trace, sizeof trace, 120, 6.0, 7, "lognormal:500:0.6", "lognormal:80:0.5");
}

static void teardown(void) {
    testutil_unlink_db(db);
    unlink(trace);
}

START_TEST(width_parsing_and_choice) {
    double e = 0;
    ck_assert(band_parse("0.05", &e) && e == 0.05);
    ck_assert(band_parse("12%", &e) && fabs(e - 0.12) < 1e-15);
    ck_assert(!band_parse("0", &e));
    ck_assert(!band_parse("1.5", &e));
    ck_assert(!band_parse("5x", &e));
    ck_assert(!band_parse("", &e));
    char src[256], err[256];
    ck_assert(band_pick(0.1, 0.03, "stated", &e, src, sizeof src, err, sizeof err) == 0);
    ck_assert(e == 0.1 && strstr(src, "given"));
    ck_assert(band_pick(0, 0.03, "the cost model's", &e, src, sizeof src, err, sizeof err) == 0);
    ck_assert(e == 0.03 && !strcmp(src, "the cost model's"));
    ck_assert_int_eq(band_pick(0, NAN, "", &e, src, sizeof src, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "roofline") && strstr(err, "--band=0.1"), "%s", err);
}
END_TEST

START_TEST(elasticity_and_knee_by_hand) {
    /* latency proportional to cost: elasticity 1 */
    ck_assert(fabs(band_elasticity(0.9, 1.1, 0.1) - 1) < 1e-12);
    /* (1.1/0.9)^4: elasticity 4, past the knee threshold */
    double hi = pow(1.1 / 0.9, 4);
    ck_assert(fabs(band_elasticity(1, hi, 0.1) - 4) < 1e-12);
    ck_assert(isnan(band_elasticity(0, 1, 0.1)));
    summary_t lo, h;
    memset(&lo, 0, sizeof lo);
    memset(&h, 0, sizeof h);
    lo.e2e.mean = 1, h.e2e.mean = 1.1 / 0.9;
    lo.finished = h.finished = 100;
    double el;
    ck_assert(!band_at_knee(&lo, &h, 0.1, &el) && fabs(el - 1) < 1e-12);
    h.e2e.mean = hi;
    ck_assert(band_at_knee(&lo, &h, 0.1, &el));
    /* the slower side losing requests is the knee whatever the elasticity */
    h.e2e.mean = 1.1 / 0.9;
    h.finished = 90;
    ck_assert(band_at_knee(&lo, &h, 0.1, &el));
    /* the verdict's three levels */
    char line[256];
    ck_assert_int_eq(band_verdict(1.2, 0, line, sizeof line), 0);
    ck_assert_msg(strstr(line, "not at a knee"), "%s", line);
    ck_assert_int_eq(band_verdict(2.5, 0, line, sizeof line), 1);
    ck_assert_msg(strstr(line, "near a knee") && strstr(line, "2.5E"), "%s", line);
    ck_assert_int_eq(band_verdict(4, 0, line, sizeof line), 2);
    ck_assert_msg(strstr(line, "WARNING   at a knee: mean E2E moves 4.0x"), "%s", line);
    ck_assert_int_eq(band_verdict(1.0, 1, line, sizeof line), 2);
    ck_assert_msg(strstr(line, "loses requests"), "%s", line);
    ck_assert_int_eq(band_verdict(NAN, 0, line, sizeof line), 0);
    ck_assert_str_eq(line, "");
}
END_TEST

static double q(const char *fmt, long long id) { return testutil_sql_num(db, fmt, id); }

START_TEST(sim_band_runs_both_sides) {
    sim_opts_t o;
    sim_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = "policies/vllm.lua";
    o.db_path = db;
    o.model = "llama-2-7b";
    o.hw = "h100";
    o.run_name = "nom";
    o.config_extra = "\"sweep\":{\"name\":\"s\",\"rate_rps\":6,\"scale\":1}";
    sim_result_t nom, lo, hi;
    char err[8192];
    ck_assert_msg(sim_run(&o, &nom, err, sizeof err) == 0, "%s", err);
    /* the shipped calibration states its cross-validated error, recorded as the width */
    ck_assert_msg(isfinite(nom.band_err) && nom.band_err > 0 && nom.band_err < 0.5, "%g",
                  nom.band_err);
    ck_assert(fabs(q("SELECT json_extract(config, '$.band_width.err') FROM runs WHERE id=%lld",
                     (long long)nom.run_id) - nom.band_err) < 1e-6);
    ck_assert_msg(band_sim(&o, &nom, 0.2, &lo, &hi, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(lo.summary.name, "nom-band-lo");
    ck_assert_str_eq(hi.summary.name, "nom-band-hi");
    ck_assert(fabs(lo.summary.cost_scale - 0.8) < 1e-12 && fabs(hi.summary.cost_scale - 1.2) < 1e-12);
    ck_assert(nom.summary.cost_scale == 1);
    /* tagged as the band of nom, without the nominal run's sweep tag */
    ck_assert(q("SELECT count(*) FROM runs WHERE json_extract(config, '$.band.of') = 'nom' "
                "AND json_extract(config, '$.sweep') IS NULL AND id > %lld",
                (long long)nom.run_id) == 2);
    /* less cost, less latency; the band brackets the nominal run */
    ck_assert(lo.summary.e2e.mean < nom.summary.e2e.mean);
    ck_assert(nom.summary.e2e.mean < hi.summary.e2e.mean);
    ck_assert(lo.summary.tpot.p50 < hi.summary.tpot.p50);
    /* the decode steps scale with the cost: their TPOT ratio is about 1.2 / 0.8 */
    double r = hi.summary.tpot.mean / lo.summary.tpot.mean;
    ck_assert_msg(r > 1.3 && r < 1.7, "TPOT ratio %g", r);
    /* a second band of the same run gets fresh names */
    ck_assert_msg(band_sim(&o, &nom, 0.1, &lo, &hi, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(lo.summary.name, "nom-band-lo-2");
    char out[8192];
    FILE *f = fmemopen(out, sizeof out, "w");
    band_print(f, &nom.summary, &lo.summary, &hi.summary, 0.1, "given");
    fclose(f);
    ck_assert_msg(strstr(out, "step time -10.0% .. +10.0%") && strstr(out, "E2E mean") &&
                  strstr(out, "nom-band-lo-2"), "%s", out);
}
END_TEST

int main(void) {
    Suite *s = suite_create("band");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, width_parsing_and_choice);
    tcase_add_test(tc, elasticity_and_knee_by_hand);
    tcase_add_test(tc, sim_band_runs_both_sides);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

/* test_draft: the engine's draft model (engine/draft.c, engine --draft), on stories260K where
 * the data is, else on its shape with seeded weights (dummy:stories260k): greedy outputs
 * identical with and without a draft under every policy (test_engine checks the runs
 * without one against each request decoded alone), a draft equal to the target accepted
 * everywhere, sampled outputs distributed as without speculation, bad --draft values
 * refused with a message before anything is recorded; generate --draft's greedy text the
 * same as without. */
#include <math.h>
#include <sqlite3.h>

#include "engine/engine.h"
#include "engine/generate.h"
#include "testutil.h"

/* As test_engine's: all at time 0, so that batches (and preemptions, with 16 blocks) do not
 * depend on the machine's speed; the last request is too long for the context. */
static const char *TRACE0 =
    "arrival_s,prompt_tokens,output_tokens\n"
    "0,40,24\n0,7,30\n0,65,12\n0,18,20\n0,33,17\n0,90,9\n0,12,28\n0,50,16\n0,25,22\n"
    "0,70,14\n0,600,5\n";

typedef struct {
    const char *policy, *set, *draft;
    int32_t kv_blocks;
    float temperature;
    int32_t top_k;
} run_t;

static int run(const char *model, const char *trace, const char *db, const char *name,
               const run_t *r, char *err, size_t errlen) {
    engine_opts_t o;
    engine_opts_defaults(&o);
    const char *sets[1] = { r->set };
    o.trace_path = trace;
    o.policy_path = r->policy;
    o.sets = sets;
    o.n_sets = r->set ? 1 : 0;
    o.model = model;
    o.draft = r->draft;
    o.db_path = db;
    o.run_name = name;
    o.save_tokens = 1;
    o.temperature = r->temperature;
    o.top_k = r->top_k;
    o.n_threads = 2;
    o.batch_invariant = 1;
    o.seed = 11;
    o.max_seqs = 8;
    o.kv_blocks = r->kv_blocks;
    engine_result_t res;
    return engine_run(&o, &res, err, errlen);
}

static const char *model_path(char *buf, size_t len) {
    if (testutil_data_path("models/stories260K.bin", buf, len)) return buf;
    fprintf(stderr, "test_draft: stories260K not found: checks on dummy:stories260k\n");
    snprintf(buf, len, "dummy:stories260k");
    return buf;
}

static int64_t query_i64(sqlite3 *h, const char *sql, const char *a, const char *b) {
    sqlite3_stmt *st;
    ck_assert_msg(sqlite3_prepare_v2(h, sql, -1, &st, NULL) == SQLITE_OK, "%s",
                  sqlite3_errmsg(h));
    sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
    if (b) sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

#define TOKENS_OF "(SELECT t.req_id, t.idx, t.token_id FROM tokens t JOIN runs r ON r.id = " \
                  "t.run_id WHERE r.name = "

/* Tokens of run a that run b does not have, either way (0: identical outputs). */
static int64_t token_diff(sqlite3 *h, const char *a, const char *b) {
    return query_i64(h, "SELECT (SELECT count(*) FROM (SELECT * FROM " TOKENS_OF "?1) EXCEPT "
                        "SELECT * FROM " TOKENS_OF "?2))) + (SELECT count(*) FROM (SELECT * "
                        "FROM " TOKENS_OF "?2) EXCEPT SELECT * FROM " TOKENS_OF "?1)))", a, b) +
           (query_i64(h, "SELECT count(*) FROM " TOKENS_OF "?1)", a, NULL) == 0);
}

/* Greedy tokens are the same with a draft model as without, under every policy: with a
 * perfect draft (the target itself), with a poor one (seeded weights: most drafts
 * rejected) and the n-gram proposer; with preemptions too (12 blocks). */
START_TEST(test_greedy_identical_with_draft) {
    char model[512], trace[256], db[256], err[4096], name[64], base[64];
    model_path(model, sizeof model);
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE0);
    testutil_tmpfile(db, sizeof db, ".db");
    const char *poor = strncmp(model, "dummy:", 6) ? "dummy:stories260k" : NULL;
    run_t policies[] = {
        { "policies/continuous.lua", NULL, NULL, 160, 0, 0 },
        { "policies/static.lua", "batch=4", NULL, 160, 0, 0 },
        { "policies/chunked_prefill.lua", "chunk=16", NULL, 160, 0, 0 },
        { "policies/speculative.lua", "k=3", NULL, 160, 0, 0 },
        { "policies/speculative.lua", "k=4", NULL, 12, 0, 0 },
    };
    const char *drafts[] = { model, poor, "ngram" };
    sqlite3 *h;
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++) {
        snprintf(base, sizeof base, "p%zu", i);
        ck_assert_msg(run(model, trace, db, base, &policies[i], err, sizeof err) == 0, "%s: %s",
                      base, err);
        for (size_t d = 0; d < sizeof drafts / sizeof *drafts; d++) {
            if (!drafts[d]) continue;
            run_t r = policies[i];
            r.draft = drafts[d];
            snprintf(name, sizeof name, "p%zu-d%zu", i, d);
            ck_assert_msg(run(model, trace, db, name, &r, err, sizeof err) == 0, "%s: %s", name,
                          err);
            ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
            ck_assert_msg(token_diff(h, base, name) == 0, "%s differs from %s", name, base);
            sqlite3_close(h);
        }
    }
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    /* the draft equal to the target: every reached draft accepted, at every position */
    ck_assert_int_eq(query_i64(h, "SELECT json_extract(config, '$.spec_curve.reached') = "
                                  "json_extract(config, '$.spec_curve.accepted') AND "
                                  "json_array_length(config, '$.spec_curve.reached') = 3 AND "
                                  "json_extract(config, '$.proposer') = 'draft' FROM runs WHERE "
                                  "name = ?1", "p3-d0", NULL), 1);
    ck_assert_int_gt(query_i64(h, "SELECT sum(spec_accepted) FROM requests q JOIN runs r ON "
                                  "r.id = q.run_id WHERE r.name = ?1", "p3-d0", NULL), 0);
    /* preempted and recomputed with the draft's KV in the same blocks */
    ck_assert_int_gt(query_i64(h, "SELECT sum(preemptions) FROM requests q JOIN runs r ON "
                                  "r.id = q.run_id WHERE r.name = ?1", "p4-d0", NULL), 0);
    if (poor)   /* the poor draft was rejected somewhere: verification did more than accept */
        ck_assert_int_eq(query_i64(h, "SELECT json_extract(config, '$.spec_curve.reached[0]') > "
                                      "json_extract(config, '$.spec_curve.accepted[0]') FROM runs "
                                      "WHERE name = ?1", "p3-d1", NULL), 1);
    ck_assert_int_eq(query_i64(h, "SELECT json_extract(config, '$.proposer') = 'ngram' FROM runs "
                                  "WHERE name = ?1", "p3-d2", NULL), 1);
    sqlite3_close(h);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* Sampled outputs keep their distribution under speculative sampling: N requests with one
 * prompt (one shared prefix covering it), temperature 1 over the top 2 ids, each its own
 * sampling stream; the joint distribution of the first three output tokens (the first from
 * the prefill, the others through verified drafts) is compared between a run without
 * speculation and runs with a perfect and a poor draft (a two-sample chi-square, p < 1e-6).
 * Deterministic: the seeds fix every draw. The poor draft's top ids are mostly not the
 * target's, so this checks that rejections happen where they must (a draft accepted too
 * often brings ids outside the target's top 2); the exact residual, max(0, p - q), is
 * checked on synthetic distributions by test_spec. */
enum { SAME_N = 400, SAME_OUT = 4 };

#define CATS 64
static void joint_counts(sqlite3 *h, const char *name, int32_t *ids, int64_t *count) {
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT group_concat(token_id) FROM (SELECT "
                                           "t.req_id, t.token_id FROM tokens t JOIN runs r ON "
                                           "r.id = t.run_id WHERE r.name = ?1 AND t.idx < 3 "
                                           "ORDER BY t.req_id, t.idx) GROUP BY req_id", -1, &st,
                                        NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int32_t a, b, c;
        ck_assert_int_eq(sscanf((const char *)sqlite3_column_text(st, 0), "%d,%d,%d", &a, &b,
                                &c), 3);
        /* a category per distinct (a, b, c), in order of first appearance over both runs */
        int32_t key = a * 1000003 ^ b * 1009 ^ c, k = 0;
        while (k < CATS && ids[k] != -1 && ids[k] != key) k++;
        ck_assert_msg(k < CATS, "more than %d distinct prefixes", CATS);
        ids[k] = key;
        count[k]++;
        rows++;
    }
    sqlite3_finalize(st);
    ck_assert_int_eq(rows, SAME_N);
}

START_TEST(test_sampled_distribution_kept) {
    char model[512], trace[256], db[256], err[4096];
    model_path(model, sizeof model);
    size_t cap = 64 + (size_t)SAME_N * 24;
    char *csv = malloc(cap);
    ck_assert_ptr_nonnull(csv);
    int len = snprintf(csv, cap, "arrival_s,prompt_tokens,output_tokens,prefix_group,"
                                 "prefix_tokens\n");
    for (int i = 0; i < SAME_N; i++)
        len += snprintf(csv + len, cap - (size_t)len, "0,32,%d,sys,32\n", SAME_OUT);
    testutil_write_tmp(trace, sizeof trace, ".csv", csv);
    free(csv);
    testutil_tmpfile(db, sizeof db, ".db");
    /* seeded weights: a poor draft for the real model (without the data the target is the
     * same seeded model, and only the perfect draft is checked) */
    int have_poor = strncmp(model, "dummy:", 6) != 0;
    run_t runs[] = {
        { "policies/continuous.lua", NULL, NULL, 400, 1.0f, 2 },
        { "policies/speculative.lua", "k=3", model, 400, 1.0f, 2 },
        { "policies/speculative.lua", "k=3", "dummy:stories260k", 400, 1.0f, 2 },
    };
    const char *names[] = { "plain", "self", "poor" };
    int n_runs = have_poor ? 3 : 2;
    for (int i = 0; i < n_runs; i++)
        ck_assert_msg(run(model, trace, db, names[i], &runs[i], err, sizeof err) == 0, "%s: %s",
                      names[i], err);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    /* df 1..8 at p = 1e-6 */
    static const double crit[] = { 0, 23.9, 27.6, 30.7, 33.4, 35.9, 38.3, 40.5, 42.6 };
    for (int r = 1; r < n_runs; r++) {
        int32_t ids[CATS];
        int64_t a[CATS] = { 0 }, b[CATS] = { 0 };
        for (int k = 0; k < CATS; k++) ids[k] = -1;
        joint_counts(h, "plain", ids, a);
        joint_counts(h, names[r], ids, b);
        double x = 0;
        int cats = 0;
        for (int k = 0; k < CATS && ids[k] != -1; k++, cats++) {
            double e = (a[k] + b[k]) / 2.0;   /* equal sample sizes */
            x += (a[k] - e) * (a[k] - e) / e + (b[k] - e) * (b[k] - e) / e;
        }
        ck_assert_msg(cats >= 3 && cats <= 9, "%d categories", cats);
        ck_assert_msg(x < crit[cats - 1], "%s vs plain: chi-square %.1f over %d categories",
                      names[r], x, cats);
    }
    /* the poor draft was rejected often: the residual draws were exercised */
    if (have_poor)
        ck_assert_int_eq(query_i64(h, "SELECT json_extract(config, '$.spec_curve.accepted[0]') * 2 < "
                                  "json_extract(config, '$.spec_curve.reached[0]') FROM runs "
                                  "WHERE name = ?1", "poor", NULL), 1);
    sqlite3_close(h);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* Bad --draft values: a clear message naming the draft, and nothing recorded. */
START_TEST(test_bad_draft) {
    char model[512], trace[256], db[256], bad[256], err[4096];
    model_path(model, sizeof model);
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE0);
    testutil_tmpfile(db, sizeof db, ".db");
    testutil_write_tmp(bad, sizeof bad, ".bin", "this is not a model");
    struct { const char *draft, *want; } cases[] = {
        { "/nonexistent/draft.gguf", "/nonexistent/draft.gguf" },
        { bad, bad },
        { "dummy:smollm2-135m", "vocabulary has 49152 ids, the target model's 512" },
        { "dummy:no-such-preset", "no-such-preset" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_t r = { "policies/speculative.lua", "k=2", cases[i].draft, 160, 0, 0 };
        err[0] = 0;
        ck_assert_int_ne(run(model, trace, db, NULL, &r, err, sizeof err), 0);
        ck_assert_msg(strstr(err, "--draft") && strstr(err, cases[i].want),
                      "case %zu: message '%s' lacks '%s'", i, err, cases[i].want);
    }
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(query_i64(h, "SELECT count(*) FROM runs WHERE ?1 = ?1", "", NULL), 0);
    sqlite3_close(h);
    unlink(trace);
    unlink(bad);
    testutil_unlink_db(db);
}
END_TEST

/* generate --draft: the same greedy tokens as without, with a perfect, a poor and the
 * n-gram proposer, at several k; the perfect draft accepted everywhere. */
START_TEST(test_generate_with_draft) {
    char model[512], err[2048];
    model_path(model, sizeof model);
    gen_opts_t o;
    gen_opts_defaults(&o);
    o.model = model;
    o.n = 120;
    o.n_threads = 2;
    o.seed = 5;
    FILE *sink = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(sink);
    gen_stats_t ref, st;
    ck_assert_msg(gen_run(&o, sink, &ref, err, sizeof err) == 0, "%s", err);
    const char *drafts[] = { model, "dummy:stories260k", "ngram" };
    for (size_t d = 0; d < sizeof drafts / sizeof *drafts; d++)
        for (int32_t k = 1; k <= 5; k += 2) {
            o.draft = drafts[d];
            o.spec_k = k;
            ck_assert_msg(gen_run(&o, sink, &st, err, sizeof err) == 0, "%s", err);
            ck_assert_int_eq(st.generated, ref.generated);
            ck_assert_mem_eq(st.ids, ref.ids, sizeof(int32_t) * (size_t)ref.generated);
            ck_assert_int_gt(st.spec_proposed, 0);
            if (d == 0) ck_assert_int_eq(st.spec_accepted, st.spec_proposed);
            free(st.ids);
        }
    free(ref.ids);
    fclose(sink);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("draft");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, test_greedy_identical_with_draft);
    tcase_add_test(t, test_sampled_distribution_kept);
    tcase_add_test(t, test_bad_draft);
    tcase_add_test(t, test_generate_with_draft);
    suite_add_tcase(s, t);
    return s;
}

int main(void) { return testutil_run(suite()); }

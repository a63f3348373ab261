/* test_engine: the engine loop (engine/engine.c), its draft proposer (engine/spec.c) and
 * text generation (engine/generate.c), on the real stories260K model where present.
 *
 * TWIN_TEST_BACKEND (cpu by default) and TWIN_TEST_DTYPE run the whole suite on another
 * backend: bench/gpu.sh runs it with cuda and f32, so every policy's greedy tokens are
 * checked on the GPU against the GPU's own one-request-at-a-time reference. */
#include <math.h>
#include <sqlite3.h>

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/forward.h"
#include "engine/generate.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "testutil.h"

static const char *test_backend(void) {
    const char *b = getenv("TWIN_TEST_BACKEND");
    return b && *b ? b : "cpu";
}

static const char *test_dtype(void) {
    const char *d = getenv("TWIN_TEST_DTYPE");
    return d && *d ? d : NULL;
}

/* ------------------------------------------------------------------ proposer */

START_TEST(test_ngram_proposer) {
    int32_t toks[] = { 5, 6, 7, 8, 5, 6 }, d[4];
    spec_propose_ngram(toks, 6, 3, d); /* "5 6" was followed by 7 8 5 */
    ck_assert_int_eq(d[0], 7);
    ck_assert_int_eq(d[1], 8);
    ck_assert_int_eq(d[2], 5);
    int32_t none[] = { 1, 2, 3 };
    spec_propose_ngram(none, 3, 2, d); /* no match: repeat the last token */
    ck_assert_int_eq(d[0], 3);
    ck_assert_int_eq(d[1], 3);
    int32_t run[] = { 9, 4, 9, 4, 9 };
    spec_propose_ngram(run, 5, 4, d); /* latest match of "9 4 9" at 0: then 4 9, then end */
    ck_assert_int_eq(d[0], 4);
    ck_assert_int_eq(d[1], 9);
    int32_t drafts[] = { 1, 2, 3 }, sampled[] = { 1, 2, 7, 4 };
    ck_assert_int_eq(spec_accept(drafts, sampled, 3), 2);
    ck_assert_int_eq(spec_accept(drafts, sampled, 0), 0);
    int32_t all[] = { 1, 2, 3, 9 };
    ck_assert_int_eq(spec_accept(drafts, all, 3), 3);
}
END_TEST

START_TEST(test_prompt_tokens) {
    int32_t a[64], b[64], c[64];
    engine_prompt_tokens(7, 3, 512, a, 64);
    engine_prompt_tokens(7, 3, 512, b, 64);
    engine_prompt_tokens(7, 4, 512, c, 64);
    ck_assert_mem_eq(a, b, sizeof a);
    int same = 0;
    for (int i = 0; i < 64; i++) {
        ck_assert(a[i] >= 3 && a[i] < 512);
        same += a[i] == c[i];
    }
    ck_assert_int_lt(same, 8);
}
END_TEST

/* Mooncake-style ids over 16-token blocks: requests 3 and 4 share ids 10, 11 and part
 * from there. Their tokens agree exactly under the shared ids, and each tail is the
 * request's own prompt (as without hashes). */
START_TEST(test_prompt_tokens_hashed) {
    int32_t a[56], b[56], own[56];
    const int64_t ha[] = { 10, 11, 12 }, hb[] = { 10, 11, 99 };
    engine_prompt_tokens_hashed(7, 3, ha, 3, 16, 512, a, 56);
    engine_prompt_tokens_hashed(7, 4, hb, 3, 16, 512, b, 56);
    ck_assert_mem_eq(a, b, sizeof(int32_t) * 32);
    int same = 0;
    for (int i = 32; i < 48; i++) same += a[i] == b[i];
    ck_assert_int_lt(same, 4);
    engine_prompt_tokens(7, 3, 512, own, 56);
    ck_assert_mem_eq(a + 48, own + 48, sizeof(int32_t) * 8);
    same = 0;
    for (int i = 0; i < 48; i++) same += a[i] == own[i];
    ck_assert_int_lt(same, 4);
    /* no hashes: the plain prompt */
    engine_prompt_tokens_hashed(7, 3, NULL, 0, 0, 512, a, 56);
    ck_assert_mem_eq(a, own, sizeof a);
}
END_TEST

/* ------------------------------------------------------------------ engine runs */

/* 10 requests, arrivals over 30 ms, mixed lengths; request 10's prompt exceeds the
 * 512-token context and must be rejected. */
static const char *TRACE =
    "arrival_s,prompt_tokens,output_tokens\n"
    "0.000,40,24\n0.002,7,30\n0.004,65,12\n0.006,18,20\n0.010,33,17\n"
    "0.012,90,9\n0.015,12,28\n0.020,50,16\n0.025,25,22\n0.030,70,14\n"
    "0.031,600,5\n";
/* The same requests all at time 0: with no later arrival, the plans (and so preemptions
 * under a small KV cache) do not depend on how fast the machine is. */
static const char *TRACE0 =
    "arrival_s,prompt_tokens,output_tokens\n"
    "0,40,24\n0,7,30\n0,65,12\n0,18,20\n0,33,17\n0,90,9\n0,12,28\n0,50,16\n0,25,22\n"
    "0,70,14\n0,600,5\n";
enum { N_REQ = 11, N_OK = 10 };

typedef struct {
    int32_t n[N_REQ];
    int32_t tok[N_REQ][64];
} outputs_t;

static int32_t kv_blocks = 160;
static int clip_to_context = 0;

static int run_engine(const char *model, const char *trace, const char *db, const char *policy,
                      const char *set, const char *name, float temp, char *err, size_t errlen) {
    engine_opts_t o;
    engine_opts_defaults(&o);
    const char *sets[1] = { set };
    o.trace_path = trace;
    o.policy_path = policy;
    o.sets = sets;
    o.n_sets = set ? 1 : 0;
    o.model = model;
    o.db_path = db;
    o.run_name = name;
    o.save_tokens = 1;
    o.temperature = temp;
    o.top_p = temp > 0 ? 0.9f : 1.0f;
    o.n_threads = 2;
    o.backend = test_backend();
    o.dtype = test_dtype();
    o.batch_invariant = 1;   /* the GPU's outputs must not depend on the batching either */
    o.seed = 11;
    o.max_seqs = 8;
    o.kv_blocks = kv_blocks;
    o.clip_to_context = clip_to_context;
    engine_result_t res;
    return engine_run(&o, &res, err, errlen);
}

static void load_outputs(sqlite3 *db, const char *name, outputs_t *out) {
    memset(out, 0, sizeof *out);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(db,
        "SELECT t.req_id, t.idx, t.token_id FROM tokens t JOIN runs r ON r.id = t.run_id "
        "WHERE r.name = ?1 ORDER BY t.req_id, t.idx", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int r = sqlite3_column_int(st, 0), i = sqlite3_column_int(st, 1);
        ck_assert(r >= 0 && r < N_REQ && i >= 0 && i < 64);
        ck_assert_int_eq(i, out->n[r]);
        out->tok[r][i] = sqlite3_column_int(st, 2);
        out->n[r]++;
    }
    sqlite3_finalize(st);
}

/* Greedy decode of one request alone, one token per step: the reference for batching. */
static void reference_outputs(const char *model_path, outputs_t *ref) {
    static const int32_t P[N_REQ] = { 40, 7, 65, 18, 33, 90, 12, 50, 25, 70, 600 };
    static const int32_t O[N_REQ] = { 24, 30, 12, 20, 17, 9, 28, 16, 22, 14, 5 };
    model_t *m;
    char err[512];
    /* run_engine's seed: it also draws dummy weights */
    ck_assert_msg(model_load(model_path, 11, &m, err, sizeof err) == 0, "%s", err);
    backend_t *b = backend_new(test_backend(),
                               &(bk_opts_t){ .n_threads = 2, .dtype = test_dtype(),
                                             .batch_invariant = 1 },
                               err, sizeof err);
    ck_assert_msg(b != NULL, "%s", err);
    fwd_t *f;
    fwd_opts_t fo = { .max_tokens = 128, .max_sample = 1, .n_blocks = 32, .block_size = 16 };
    ck_assert_msg(fwd_new(b, m, &fo, &f, err, sizeof err) == 0, "%s", err);
    memset(ref, 0, sizeof *ref);
    int32_t table[32];
    for (int i = 0; i < 32; i++) table[i] = 31 - i; /* any block order must do */
    for (int r = 0; r < N_OK; r++) {
        int32_t toks[256], pos[256], n = P[r];
        engine_prompt_tokens(11, r, m->cfg.vocab, toks, n);
        for (int32_t start = 0; ref->n[r] < O[r];) {
            int32_t len = n - start, ss[2] = { 0, len }, sl = n, bt[2] = { 0, 32 }, row = len - 1;
            for (int32_t i = 0; i < len; i++) pos[i] = start + i;
            bk_sample_t sp = { .temperature = 0, .top_p = 1 };
            bk_batch_t bb = { .n_tokens = len, .n_seqs = 1, .tokens = toks + start, .pos = pos,
                              .seq_start = ss, .seq_len = &sl, .bt_start = bt,
                              .block_table = table, .n_sample = 1, .sample_rows = &row,
                              .sample = &sp };
            int32_t next;
            ck_assert_msg(fwd_step(f, &bb, &next) == 0, "%s", fwd_errmsg(f));
            ref->tok[r][ref->n[r]++] = next;
            toks[n++] = next;
            start = n - 1;
        }
    }
    fwd_free(f);
    b->destroy(b);
    model_free(m);
}

static const char *stories(char *buf, size_t len) {
    return testutil_data_path("models/stories260K.bin", buf, len);
}

/* The real stories260K where the data is, else its shape with seeded weights: the batching
 * checks hold for any weights, so they run everywhere (a GPU machine without the data too). */
static const char *stories_or_dummy(char *buf, size_t len) {
    if (stories(buf, len)) return buf;
    fprintf(stderr, "test_engine: stories260K not found: batching checks on dummy:stories260k\n");
    snprintf(buf, len, "dummy:stories260k");
    return buf;
}

/* Greedy tokens are the same under every policy, chunk size and speculation, and equal to
 * each request decoded alone. */
START_TEST(test_policies_identical_greedy) {
    char model[512], trace[256], trace0[256], db[256], err[4096];
    stories_or_dummy(model, sizeof model);
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_write_tmp(trace0, sizeof trace0, ".csv", TRACE0);
    testutil_tmpfile(db, sizeof db, ".db");
    struct { const char *policy, *set, *name; int32_t kv; const char *trace; } runs[] = {
        { "policies/continuous.lua", NULL, "cont", 160, trace },
        { "policies/static.lua", "batch=4", "static", 160, trace },
        /* all at time 0: chunks mix with decodes whatever the machine's speed (on the
         * spread-out trace a fast machine finishes each prompt before the next arrives) */
        { "policies/chunked_prefill.lua", "chunk=16", "chunk16", 160, trace0 },
        { "policies/speculative.lua", "k=3", "spec", 160, trace },
        /* too little KV for everyone: requests are preempted and recomputed */
        { "policies/continuous.lua", NULL, "preempt", 16, trace0 },
    };
    outputs_t ref, got;
    reference_outputs(model, &ref);
    kv_blocks = 160;
    sqlite3 *h;
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        kv_blocks = runs[i].kv;
        ck_assert_msg(run_engine(model, runs[i].trace, db, runs[i].policy, runs[i].set, runs[i].name,
                                 0, err, sizeof err) == 0, "%s: %s", runs[i].name, err);
    }
    kv_blocks = 160;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        load_outputs(h, runs[i].name, &got);
        for (int r = 0; r < N_OK; r++) {
            ck_assert_msg(got.n[r] == ref.n[r], "%s: request %d has %d tokens, want %d",
                          runs[i].name, r, got.n[r], ref.n[r]);
            for (int j = 0; j < ref.n[r]; j++)
                ck_assert_msg(got.tok[r][j] == ref.tok[r][j], "%s: request %d token %d: %d != %d",
                              runs[i].name, r, j, got.tok[r][j], ref.tok[r][j]);
        }
        ck_assert_int_eq(got.n[10], 0);
    }
    /* Records: the same shape as the simulator's; the long request rejected with a reason. */
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h,
        "SELECT r.kind, r.status, (SELECT count(*) FROM requests q WHERE q.run_id = r.id AND "
        "q.status = 'finished'), (SELECT q.reason FROM requests q WHERE q.run_id = r.id AND "
        "q.req_id = 10 AND q.status = 'rejected'), (SELECT count(*) FROM steps s WHERE "
        "s.run_id = r.id AND s.dur_s > 0), (SELECT sum(spec_accepted) FROM requests q WHERE "
        "q.run_id = r.id) FROM runs r ORDER BY r.id", -1, &st, NULL), SQLITE_OK);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "engine");
        ck_assert_str_eq((const char *)sqlite3_column_text(st, 1), "done");
        ck_assert_int_eq(sqlite3_column_int(st, 2), N_OK);
        ck_assert_ptr_nonnull(sqlite3_column_text(st, 3));
        ck_assert_ptr_nonnull(strstr((const char *)sqlite3_column_text(st, 3), "context"));
        ck_assert_int_gt(sqlite3_column_int(st, 4), 0);
        if (n == 3) ck_assert_int_gt(sqlite3_column_int(st, 5), 0); /* some drafts accepted */
        n++;
    }
    ck_assert_int_eq(n, 5);
    sqlite3_finalize(st);
    ck_assert_int_eq(sqlite3_prepare_v2(h,
        "SELECT sum(q.preemptions) FROM requests q JOIN runs r ON r.id = q.run_id "
        "WHERE r.name = 'preempt'", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_gt(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    /* chunk=16 really mixed prefill chunks and decodes in one step */
    ck_assert_int_eq(sqlite3_prepare_v2(h,
        "SELECT count(*) FROM steps s JOIN runs r ON r.id = s.run_id WHERE r.name = 'chunk16' "
        "AND s.prefill_tokens > 0 AND s.decode_tokens > 0", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_gt(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    summary_t s;
    sqlite3 *ro;
    ck_assert_int_eq(summary_open(db, &ro, err, sizeof err), 0);
    ck_assert_int_eq(summary_load(ro, 1, &s, err, sizeof err), 0);
    ck_assert_int_eq(s.finished, N_OK);
    ck_assert_int_eq(s.rejected, 1);
    ck_assert(s.ttft.n == N_OK && s.ttft.p50 > 0);
    sqlite3_close(ro);
    unlink(trace);
    unlink(trace0);
    testutil_unlink_db(db);
}
END_TEST

/* With sampling, outputs depend on the request's seed only: not on the batching. */
START_TEST(test_sampling_independent_of_batching) {
    char model[512], trace[256], db[256], err[4096];
    stories_or_dummy(model, sizeof model);
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_tmpfile(db, sizeof db, ".db");
    ck_assert_msg(run_engine(model, trace, db, "policies/continuous.lua", NULL, "a", 0.8f, err,
                             sizeof err) == 0, "%s", err);
    ck_assert_msg(run_engine(model, trace, db, "policies/chunked_prefill.lua", "chunk=8", "b",
                             0.8f, err, sizeof err) == 0, "%s", err);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    outputs_t a, b, greedy;
    load_outputs(h, "a", &a);
    load_outputs(h, "b", &b);
    sqlite3_close(h);
    ck_assert_mem_eq(&a, &b, sizeof a);
    reference_outputs(model, &greedy);
    ck_assert(memcmp(&a, &greedy, sizeof a) != 0); /* the temperature did something */
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* A damaged model file: a clear message naming it, refused before the run starts, so
 * nothing is recorded (engine.h: a configuration that cannot run). */
START_TEST(test_bad_model_records_no_run) {
    char trace[256], db[256], bad[256], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_tmpfile(db, sizeof db, ".db");
    testutil_write_tmp(bad, sizeof bad, ".bin", "this is not a model");
    ck_assert_int_ne(run_engine(bad, trace, db, "policies/continuous.lua", NULL, NULL, 0, err,
                                sizeof err), 0);
    ck_assert_msg(strstr(err, bad) != NULL, "message does not name the file: %s", err);
    sqlite3 *h;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT count(*) FROM runs", -1, &st, NULL),
                     SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    unlink(trace);
    unlink(bad);
    testutil_unlink_db(db);
}
END_TEST

/* Rows go to the database through the recorder's writer thread: a run that fails part-way
 * (here the policy, at its 40th call or after the first finish, whichever comes first, after
 * idle waits and the warm-up pass) still has every row it handed over: a step row per step
 * run, a token row per token emitted, a request row per request that arrived. */
START_TEST(test_failed_run_keeps_its_rows) {
    char trace[256], db[256], policy[256], model[512], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_tmpfile(db, sizeof db, ".db");
    testutil_write_tmp(policy, sizeof policy, ".lua",
        "local calls, finished = 0, false\n"
        "return { on_finish = function(s, r) finished = true end,\n"
        "schedule = function(s)\n"
        "    calls = calls + 1\n"
        /* A slow build (sanitizers) waits less between steps, so makes fewer calls: the
         * first finish also ends it, so the failure always comes mid-run. */
        "    if calls == 40 or finished then error('planned failure') end\n"
        "    local budget, seqs = s.max_tokens, s.max_seqs\n"
        "    for i = 1, math.min(s:num_running(), seqs) do\n"
        "        s:schedule(s:running(i)); budget = budget - 1; seqs = seqs - 1\n"
        "    end\n"
        "    for i = 1, s:num_waiting() do\n"
        "        local r = s:waiting(i)\n"
        "        if seqs == 0 or r:remaining() > budget or not s:can_allocate(r) then break end\n"
        "        s:schedule(r); budget = budget - r:remaining(); seqs = seqs - 1\n"
        "    end\n"
        "end }\n");
    engine_opts_t o;
    engine_opts_defaults(&o);
    o.trace_path = trace;
    o.policy_path = policy;
    o.model = stories_or_dummy(model, sizeof model);
    o.db_path = db;
    o.save_tokens = 1;
    o.n_threads = 2;
    o.backend = test_backend();
    o.dtype = test_dtype();
    o.max_seqs = 8;
    o.kv_blocks = kv_blocks;
    engine_result_t res;
    ck_assert_int_ne(engine_run(&o, &res, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "planned failure") != NULL, "%s", err);
    ck_assert_int_gt(res.steps, 0);
    sqlite3 *h;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_prepare_v2(h,
        "SELECT (SELECT status FROM runs), (SELECT COUNT(*) FROM steps), "
        "(SELECT MAX(step) + 1 FROM steps), (SELECT COUNT(*) FROM requests), "
        "(SELECT COUNT(*) FROM tokens), (SELECT SUM(generated_tokens) FROM requests)",
        -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "failed");
    ck_assert_int_eq(sqlite3_column_int64(st, 1), res.steps);
    ck_assert_int_eq(sqlite3_column_int64(st, 2), res.steps);
    ck_assert_int_eq(sqlite3_column_int64(st, 3), res.requests);
    ck_assert_int_gt(sqlite3_column_int64(st, 4), 0);
    ck_assert_int_eq(sqlite3_column_int64(st, 4), sqlite3_column_int64(st, 5));
    sqlite3_finalize(st);
    sqlite3_close(h);
    unlink(trace);
    unlink(policy);
    testutil_unlink_db(db);
}
END_TEST

/* dummy:PRESET weights run the same loop (timing studies without a checkpoint). */
START_TEST(test_dummy_model_runs) {
    char trace[256], db[256], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_tmpfile(db, sizeof db, ".db");
    ck_assert_msg(run_engine("dummy:stories260k", trace, db, "policies/continuous.lua", NULL,
                             NULL, 0, err, sizeof err) == 0, "%s", err);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* Static batching pads a finished member's slot at its final context. A member that filled
 * the whole context (500 + 12 = 512, the model's length and a multiple of the block size)
 * leaves no position for its padding token: the run must still go through. */
START_TEST(test_static_padding_at_full_context) {
    char trace[256], db[256], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv",
                       "arrival_s,prompt_tokens,output_tokens\n0,500,12\n0,10,40\n");
    testutil_tmpfile(db, sizeof db, ".db");
    ck_assert_msg(run_engine("dummy:stories260k", trace, db, "policies/static.lua", "batch=2",
                             NULL, 0, err, sizeof err) == 0, "%s", err);
    sqlite3 *h;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT count(*), sum(generated_tokens), "
        "(SELECT sum(pad_tokens) FROM steps) FROM requests WHERE status = 'finished'", -1,
        &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 2);
    ck_assert_int_eq(sqlite3_column_int(st, 1), 52);
    ck_assert_int_gt(sqlite3_column_int(st, 2), 0); /* the slot really was padded */
    sqlite3_finalize(st);
    sqlite3_close(h);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* --clip-to-context: 500 + 30 tokens in the model's 512 run as 483 + 28 (Vidur's
 * proportional cut), on the engine as in the simulator, and the run records it. */
START_TEST(test_clip_to_context) {
    char trace[256], db[256], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv",
                       "arrival_s,prompt_tokens,output_tokens\n0,500,30\n0,10,5\n");
    testutil_tmpfile(db, sizeof db, ".db");
    clip_to_context = 1;
    int rc = run_engine("dummy:stories260k", trace, db, "policies/continuous.lua", NULL, NULL, 0,
                        err, sizeof err);
    clip_to_context = 0;
    ck_assert_msg(rc == 0, "%s", err);
    sqlite3 *h;
    sqlite3_stmt *st;
    ck_assert_int_eq(sqlite3_open(db, &h), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(h, "SELECT status, prompt_tokens, generated_tokens, "
        "(SELECT json_extract(config, '$.clip_to_context') FROM runs) FROM requests "
        "WHERE req_id = 0", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "finished");
    ck_assert_int_eq(sqlite3_column_int(st, 1), 483);
    ck_assert_int_eq(sqlite3_column_int(st, 2), 28);
    ck_assert_int_eq(sqlite3_column_int(st, 3), 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* A KV pool too large to index (blocks + padding's scratch past INT32_MAX): a message that
 * names the option, not a wrapped block count. */
START_TEST(test_kv_blocks_too_large) {
    char trace[256], db[256], err[4096];
    testutil_write_tmp(trace, sizeof trace, ".csv", TRACE);
    testutil_tmpfile(db, sizeof db, ".db");
    kv_blocks = INT32_MAX;
    int rc = run_engine("dummy:stories260k", trace, db, "policies/continuous.lua", NULL, NULL,
                        0, err, sizeof err);
    kv_blocks = 160;
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(err, "--kv-blocks") != NULL, "message: %s", err);
    ck_assert_msg(strstr(err, "-2147") == NULL, "wrapped count in: %s", err);
    unlink(trace);
    testutil_unlink_db(db);
}
END_TEST

/* ------------------------------------------------------------------ generate */

static char *generate(const char *model, int32_t n, gen_stats_t *st) {
    gen_opts_t o;
    gen_opts_defaults(&o);
    o.model = model;
    o.n = n;
    o.n_threads = 2;
    o.backend = test_backend();
    o.dtype = test_dtype();
    char *text = NULL, err[1024];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ck_assert_msg(gen_run(&o, f, st, err, sizeof err) == 0, "%s", err);
    fclose(f);
    return text;
}

START_TEST(test_generate_bin_and_gguf_agree) {
    char bin[512], gguf[512];
    if (!stories(bin, sizeof bin) ||
        !testutil_data_path("models/stories260K.gguf", gguf, sizeof gguf))
        return;
    gen_stats_t a, b;
    char *ta = generate(bin, 200, &a), *tb = generate(gguf, 200, &b);
    ck_assert_msg(strncmp(ta, "Once upon a time", 16) == 0, "story starts: %.60s", ta);
    ck_assert_int_gt(a.generated, 50);
    ck_assert_int_eq(a.generated, b.generated);
    ck_assert_mem_eq(a.ids, b.ids, sizeof(int32_t) * (size_t)a.generated);
    ck_assert_str_eq(ta, tb);
    free(ta), free(tb), free(a.ids), free(b.ids);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("engine");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_ngram_proposer);
    tcase_add_test(t, test_prompt_tokens);
    tcase_add_test(t, test_prompt_tokens_hashed);
    tcase_add_test(t, test_policies_identical_greedy);
    tcase_add_test(t, test_sampling_independent_of_batching);
    tcase_add_test(t, test_bad_model_records_no_run);
    tcase_add_test(t, test_failed_run_keeps_its_rows);
    tcase_add_test(t, test_dummy_model_runs);
    tcase_add_test(t, test_static_padding_at_full_context);
    tcase_add_test(t, test_clip_to_context);
    tcase_add_test(t, test_kv_blocks_too_large);
    tcase_add_test(t, test_generate_bin_and_gguf_agree);
    suite_add_tcase(s, t);
    return s;
}

int main(void) {
    char why[256];
    if (!testutil_backend_available(test_backend(), why, sizeof why)) {
        fprintf(stderr, "SKIP: test_engine on backend %s: %s\n", test_backend(), why);
        return 0;
    }
    if (strcmp(test_backend(), "cpu"))
        fprintf(stderr, "test_engine: on backend %s (%s)\n", test_backend(),
                test_dtype() ? test_dtype() : "its default dtype");
    return testutil_run(suite());
}

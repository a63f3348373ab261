/* Check suite for engine/live.c: the hand-over between a server's HTTP threads and the
 * engine thread, driven from one thread here in the order the two sides would call it.
 * The tokenizer is a small llama2.c-format file written by the test (specials, the 256
 * byte pieces, a few words), so nothing here needs the shared data. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/live.h"
#include "policies/sched.h"
#include "tests/live_tok.h"
#include "tests/testutil.h"

static live_req_t *submit(live_t *l, int32_t max_tokens, const char *stop) {
    int32_t prompt[] = { TOK_BOS, W_ONCE, W_UPON };
    live_params_t p = { .prompt = prompt, .n_prompt = 3, .max_tokens = max_tokens,
                        .temperature = 0, .top_p = 1 };
    if (stop) p.stop[p.n_stop++] = stop;
    live_req_t *q = NULL;
    char msg[128];
    ck_assert_int_eq(live_submit(l, &p, &q, msg, sizeof msg), 0);
    return q;
}

/* Everything readable now (no wait). */
static const char *drain(live_req_t *q, live_status_t *st) {
    static char all[4096];
    char buf[256];
    size_t n, len = 0;
    all[0] = '\0';
    while (live_read(q, buf, sizeof buf, &n, st, 0.001) && n > 0 && len + n < sizeof all) {
        memcpy(all + len, buf, n);
        len += n;
        all[len] = '\0';
    }
    return all;
}

static void emit1(live_t *l, int32_t id, int32_t tok) { live_engine_emit(l, id, &tok, 1); }

START_TEST(submissions_wait_for_the_engine_and_pop_in_order) {
    live_t *l = live_new(NULL, 512);
    int32_t prompt[] = { TOK_BOS, 5 };
    live_params_t p = { .prompt = prompt, .n_prompt = 2, .max_tokens = 4, .top_p = 1 };
    live_req_t *q = NULL;
    char msg[128];
    ck_assert_int_eq(live_submit(l, &p, &q, msg, sizeof msg), 1);
    ck_assert_str_eq(msg, "the engine is still loading");
    ck_assert_ptr_null(q);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *a = submit(l, 4, NULL), *b = submit(l, 7, NULL);
    ck_assert_int_eq(live_req_id(a), 0);
    ck_assert_int_eq(live_req_id(b), 1);
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.submitted, 2);
    ck_assert_int_eq(st.in_flight, 2);
    ck_assert_int_eq(st.max_model_len, 512);
    live_arrival_t x;
    ck_assert_int_eq(live_engine_pop(l, &x), 1);
    ck_assert_int_eq(x.id, 0);
    ck_assert_int_eq(x.n_prompt, 3);
    ck_assert_int_eq(x.prompt[1], W_ONCE);
    ck_assert_int_eq(live_engine_pop(l, &x), 1);
    ck_assert_int_eq(x.id, 1);
    ck_assert_int_eq(x.max_tokens, 7);
    ck_assert_int_eq(live_engine_pop(l, &x), 0);
    /* the engine stops: both channels end with the message, new ones are refused */
    live_engine_close(l, "the server stopped");
    live_status_t s;
    drain(a, &s);
    ck_assert_int_eq(s.done, 1);
    ck_assert_str_eq(s.error, "aborted: the server stopped");
    ck_assert_int_eq(live_submit(l, &p, &q, msg, sizeof msg), 1);
    ck_assert_str_eq(msg, "the server stopped");
    live_release(a);
    live_release(b);
    live_free(l);
}
END_TEST

START_TEST(cancel_asks_the_engine_to_abort_once) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, 10, NULL);
    live_arrival_t x;
    ck_assert_int_eq(live_engine_pop(l, &x), 1);
    live_cancel(q);
    live_cancel(q);
    int32_t id, state;
    char reason[64];
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 1);
    ck_assert_int_eq(id, 0);
    ck_assert_int_eq(state, SCHED_ABORTED);
    ck_assert_str_eq(reason, "client disconnected");
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 0);
    live_release(q); /* the HTTP side lets go first; the engine's final frees it */
    live_engine_final(l, 0, SCHED_ABORTED, "client disconnected", 3, 2);
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.aborted, 1);
    ck_assert_int_eq(st.in_flight, 0);
    live_free(l);
}
END_TEST

/* EOS ends the answer ("stop"), later tokens are dropped; a request that reaches its
 * max_tokens ends "length"; usage counts come from the core's. */
START_TEST(eos_and_length_endings) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *a = submit(l, 10, NULL), *b = submit(l, 2, NULL);
    live_arrival_t x;
    while (live_engine_pop(l, &x)) {
    }
    int32_t toks[] = { W_WAS, W_A, TOK_EOS, W_LILY };
    /* the request keeps its tokens through EOS: the engine emits 3 of the step's 4 */
    ck_assert_int_eq(live_engine_emit(l, 0, toks, 4), 3);
    live_status_t s;
    ck_assert_str_eq(drain(a, &s), " was a");
    ck_assert_int_eq(s.done, 0);
    int32_t id, state;
    char reason[64];
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 1);
    ck_assert_int_eq(state, SCHED_FINISHED);
    ck_assert_str_eq(reason, "stop: eos");
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 3);
    drain(a, &s);
    ck_assert_int_eq(s.done, 1);
    ck_assert_str_eq(s.finish_reason, "stop");
    ck_assert_int_eq(s.completion_tokens, 3);
    emit1(l, 1, W_LILY);
    emit1(l, 1, W_NAMED);
    live_engine_final(l, 1, SCHED_FINISHED, NULL, 3, 2);
    ck_assert_str_eq(drain(b, &s), " Lily named");
    ck_assert_str_eq(s.finish_reason, "length");
    ck_assert_str_eq(s.error, "");
    live_release(a);
    live_release(b);
    live_free(l);
    tok_free(t);
}
END_TEST

/* Text that may begin a stop string is held back until it cannot; the stop string and
 * what follows never reach the client. */
START_TEST(stop_strings_are_held_back_and_cut) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, 20, "was a");
    live_arrival_t x;
    live_engine_pop(l, &x);
    live_status_t s;
    emit1(l, 0, W_LILY);
    emit1(l, 0, W_WAS); /* " Lily was": " was" could begin "was a" */
    char got[256];
    snprintf(got, sizeof got, "%s", drain(q, &s)); /* drain's buffer is reused */
    ck_assert_msg(strstr(got, "was") == NULL, "sent '%s' before the stop string was ruled out",
                  got);
    ck_assert_str_eq(got, " Lily");
    /* " Lily was a": the stop string, completed by the step's first token; the second is
     * not kept */
    int32_t last[] = { W_A, W_NAMED };
    ck_assert_int_eq(live_engine_emit(l, 0, last, 2), 1);
    int32_t id, state;
    char reason[64];
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 1);
    ck_assert_str_eq(reason, "stop: stop string");
    live_engine_final(l, 0, SCHED_FINISHED, reason, 3, 3);
    char all[256];
    snprintf(all, sizeof all, "%s%s", got, drain(q, &s));
    ck_assert_str_eq(all, " Lily ");
    ck_assert_str_eq(s.finish_reason, "stop");
    live_release(q);
    live_free(l);
    tok_free(t);
}
END_TEST

/* Only whole UTF-8 characters are sent; a byte that cannot start or continue one becomes
 * U+FFFD, as does a character cut short at the end. */
START_TEST(utf8_whole_characters_only) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, 20, NULL);
    live_arrival_t x;
    live_engine_pop(l, &x);
    live_status_t s;
    emit1(l, 0, BYTE(0xE2));
    emit1(l, 0, BYTE(0x82));
    ck_assert_str_eq(drain(q, &s), "");
    emit1(l, 0, BYTE(0xAC)); /* the euro sign, complete */
    ck_assert_str_eq(drain(q, &s), "\xE2\x82\xAC");
    emit1(l, 0, BYTE(0xFF));
    emit1(l, 0, BYTE('x'));
    emit1(l, 0, BYTE(0xC3)); /* cut short by the end */
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 6);
    ck_assert_str_eq(drain(q, &s), "\xEF\xBF\xBDx\xEF\xBF\xBD");
    live_release(q);
    live_free(l);
    tok_free(t);
}
END_TEST

/* The trace of the served requests: arrival order, output = what each generated, its
 * max_tokens kept. */
START_TEST(served_trace_in_arrival_order) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *a = submit(l, 9, NULL), *b = submit(l, 5, NULL);
    live_arrival_t x;
    while (live_engine_pop(l, &x)) {
    }
    live_engine_final(l, 1, SCHED_FINISHED, NULL, 3, 5);
    live_engine_final(l, 0, SCHED_ABORTED, "client disconnected", 3, 2);
    char path[256], err[256], line[256];
    testutil_tmpfile(path, sizeof path, ".csv");
    ck_assert_msg(live_write_trace(l, path, err, sizeof err) == 0, "%s", err);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    ck_assert_str_eq(line, "arrival_s,prompt_tokens,output_tokens,max_output_tokens\n");
    double t0, t1;
    int p, o, m;
    ck_assert_int_eq(fscanf(f, "%lf,%d,%d,%d\n", &t0, &p, &o, &m), 4);
    ck_assert_int_eq(o, 2);
    ck_assert_int_eq(m, 9); /* request 0 arrived first */
    ck_assert_int_eq(fscanf(f, "%lf,%d,%d,%d\n", &t1, &p, &o, &m), 4);
    ck_assert_int_eq(o, 5);
    ck_assert_int_eq(m, 5);
    ck_assert(t0 <= t1);
    ck_assert_int_eq(fgetc(f), EOF);
    fclose(f);
    unlink(path);
    live_release(a);
    live_release(b);
    live_free(l);
}
END_TEST

/* Block names for the prefix cache: equal openings give equal names, a token changed in
 * block 1 changes block 1's name and every later one, and a partial block gets none. */
START_TEST(prompt_hashes_name_whole_prefixes) {
    int32_t a[50], b[50];
    for (int i = 0; i < 50; i++) a[i] = b[i] = 3 + i;
    b[20] = 99;
    int64_t ha[4], hb[4];
    ck_assert_int_eq(live_prompt_hashes(a, 50, 16, ha), 3);
    ck_assert_int_eq(live_prompt_hashes(b, 50, 16, hb), 3);
    ck_assert(ha[0] == hb[0]);
    ck_assert(ha[1] != hb[1]);
    ck_assert(ha[2] != hb[2]);
    ck_assert(ha[0] != ha[1] && ha[1] != ha[2]);
    ck_assert_int_eq(live_prompt_hashes(a, 15, 16, ha), 0);
}
END_TEST

/* A reader waits for output across threads: the engine's emit wakes it. */
static void *engine_side(void *arg) {
    live_t *l = arg;
    usleep(20000);
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 1);
    return NULL;
}

START_TEST(a_waiting_reader_is_woken) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, 4, NULL);
    live_arrival_t x;
    live_engine_pop(l, &x);
    pthread_t th;
    pthread_create(&th, NULL, engine_side, l);
    char buf[64];
    size_t n;
    live_status_t s;
    /* a generous bound: the wake-up, not the timeout, must end the wait */
    ck_assert_int_eq(live_read(q, buf, sizeof buf, &n, &s, 20.0), 1);
    ck_assert_int_eq(s.done, 1);
    pthread_join(th, NULL);
    live_release(q);
    live_free(l);
}
END_TEST

int main(void) {
    Suite *s = suite_create("live");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, submissions_wait_for_the_engine_and_pop_in_order);
    tcase_add_test(tc, cancel_asks_the_engine_to_abort_once);
    tcase_add_test(tc, eos_and_length_endings);
    tcase_add_test(tc, stop_strings_are_held_back_and_cut);
    tcase_add_test(tc, utf8_whole_characters_only);
    tcase_add_test(tc, served_trace_in_arrival_order);
    tcase_add_test(tc, prompt_hashes_name_whole_prefixes);
    tcase_add_test(tc, a_waiting_reader_is_woken);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

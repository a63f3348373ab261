/* Check suite for engine/live.c's channels of pieces (live_next, issue #28 item 5): one
 * piece per emitted token with its id, text and log-probabilities; n choices as n engine
 * requests behind one channel; draining; the engine closing on choices it never took.
 * Driven from one thread in the order the HTTP and engine sides would call; the tokenizer is
 * a small llama2.c-format file written here (as tests/test_live.c's). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine/live.h"
#include "policies/sched.h"
#include "tests/live_tok.h"
#include "tests/testutil.h"

static live_req_t *submit(live_t *l, live_params_t p) {
    static const int32_t prompt[] = { TOK_BOS, W_ONCE, W_UPON };
    p.prompt = prompt;
    p.n_prompt = 3;
    if (!p.max_tokens) p.max_tokens = 10;
    p.top_p = 1;
    live_req_t *q = NULL;
    char msg[128];
    ck_assert_int_eq(live_submit(l, &p, &q, msg, sizeof msg), 0);
    return q;
}

static void pop_all(live_t *l) {
    live_arrival_t x;
    while (live_engine_pop(l, &x)) {
    }
}

/* Three tokens in one step (a speculative step's) are three pieces, each with its own id
 * and text, then the end; the end's text is what a stop string held back. */
START_TEST(one_piece_per_token) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, (live_params_t){ .stop = { "xyz" }, .n_stop = 1 });
    pop_all(l);
    int32_t toks[] = { W_WAS, W_A, W_LILY };
    ck_assert_int_eq(live_engine_emit(l, 0, toks, 3), 3);
    live_piece_t p;
    /* the last 2 bytes are held back: they could begin "xyz" */
    const char *want[] = { " w", "as", " a Li" };
    const char *own[] = { " was", " a", " Lily" };
    int64_t offset = 0;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(live_next(q, &p, 0.001), 1);
        ck_assert_int_eq(p.end, 0);
        ck_assert_int_eq(p.index, 0);
        ck_assert_int_eq(p.token, toks[i]);
        ck_assert_str_eq(p.token_text, own[i]);
        ck_assert_int_eq(p.text_offset, offset);
        ck_assert_int_eq(p.has_logprob, 0);
        offset += (int64_t)strlen(own[i]);
        ck_assert_str_eq(p.text, want[i]);
        live_piece_clear(&p);
    }
    ck_assert_int_eq(live_next(q, &p, 0.001), 0);
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 3);
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.end, 1);
    ck_assert_str_eq(p.text, "ly");
    ck_assert_str_eq(p.st.finish_reason, "length");
    ck_assert_int_eq(p.st.completion_tokens, 3);
    live_piece_clear(&p);
    ck_assert_int_eq(live_next(q, &p, 0.001), -1);
    live_release(q);
    live_free(l);
    tok_free(t);
}
END_TEST

/* EOS has no piece of its own: the end stands for it, finish "stop". */
START_TEST(eos_is_the_end) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, (live_params_t){ 0 });
    pop_all(l);
    int32_t toks[] = { W_LILY, TOK_EOS, W_A };
    ck_assert_int_eq(live_engine_emit(l, 0, toks, 3), 2);
    live_engine_final(l, 0, SCHED_FINISHED, "stop: eos", 3, 2);
    live_piece_t p;
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.token, W_LILY);
    live_piece_clear(&p);
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.end, 1);
    ck_assert_str_eq(p.st.finish_reason, "stop");
    live_piece_clear(&p);
    ck_assert_int_eq(live_next(q, &p, 0.001), -1);
    live_release(q);
    live_free(l);
    tok_free(t);
}
END_TEST

/* n = 2: two engine requests (consecutive ids, one prompt), seeds seed and seed + 1, pieces
 * carrying their choice's index, two ends; in flight counts choices. A cancel ends both. */
START_TEST(n_choices) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, (live_params_t){ .n = 2, .has_seed = 1, .seed = 42,
                                               .temperature = 1 });
    ck_assert_int_eq(live_req_choices(q), 2);
    ck_assert_int_eq(live_req_id(q), 0);
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.in_flight, 2);
    live_arrival_t a, b;
    ck_assert_int_eq(live_engine_pop(l, &a), 1);
    ck_assert_int_eq(live_engine_pop(l, &b), 1);
    ck_assert_int_eq(live_engine_pop(l, &b), 0);
    ck_assert_int_eq(a.id, 0);
    ck_assert_int_eq(b.id, 1);
    ck_assert_ptr_eq(a.prompt, b.prompt);
    bk_sample_t s0 = { .seed = 7 }, s1 = { .seed = 7 };
    live_engine_sampling(l, 0, &s0);
    live_engine_sampling(l, 1, &s1);
    ck_assert(s0.seed == 42 && s1.seed == 43);
    int32_t tok = 77;
    live_engine_emit(l, 1, &tok, 1);
    live_engine_emit(l, 0, &tok, 1);
    live_piece_t p;
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.index, 1);
    live_piece_clear(&p);
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.index, 0);
    live_piece_clear(&p);
    live_cancel(q);
    int32_t id, state;
    char reason[64];
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 1);
    ck_assert_int_eq(id, 0);
    ck_assert_int_eq(live_engine_next_ending(l, &id, &state, reason, sizeof reason), 1);
    ck_assert_int_eq(id, 1);
    ck_assert_int_eq(state, SCHED_ABORTED);
    live_engine_final(l, 1, SCHED_FINISHED, NULL, 3, 1);
    live_engine_final(l, 0, SCHED_ABORTED, "client disconnected", 3, 1);
    int ends = 0;
    while (live_next(q, &p, 0.001) == 1) {
        ends += p.end;
        live_piece_clear(&p);
    }
    ck_assert_int_eq(ends, 2);
    live_metrics(l, &st);
    ck_assert_int_eq(st.in_flight, 0);
    ck_assert_int_eq(st.submitted, 2);
    live_release(q);
    live_free(l);
}
END_TEST

/* With logprobs: each token's log-probability under its row (a hand-worked log-softmax),
 * the top alternatives with their texts at that position. */
START_TEST(logprobs_from_the_rows) {
    tok_t *t = tiny_tokenizer();
    live_t *l = live_new(t, 0);
    live_engine_offer_logprobs(l);
    live_engine_ready(l, 0, 512, 100);
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.logprobs, 1);
    live_req_t *q = submit(l, (live_params_t){ .logprobs = 1, .top_logprobs = 2 });
    live_req_t *plain = submit(l, (live_params_t){ 0 });
    pop_all(l);
    ck_assert_int_eq(live_engine_logprobs(l, 0), 1);
    ck_assert_int_eq(live_engine_logprobs(l, 1), 0);
    static float row[VOCAB];
    for (int i = 0; i < VOCAB; i++) row[i] = -INFINITY;
    row[W_WAS] = 1, row[W_A] = 2, row[W_LILY] = 3; /* log-softmax: -2.4076, -1.4076, -0.4076 */
    int32_t tok = W_WAS;
    live_engine_emit_logits(l, 0, &tok, 1, row, VOCAB);
    live_piece_t p;
    ck_assert_int_eq(live_next(q, &p, 0.001), 1);
    ck_assert_int_eq(p.has_logprob, 1);
    ck_assert_float_eq_tol(p.logprob, -2.4076059644f, 1e-6f);
    ck_assert_int_eq(p.n_top, 2);
    ck_assert_int_eq(p.top[0].id, W_LILY);
    ck_assert_str_eq(p.top[0].text, " Lily");
    ck_assert_float_eq_tol(p.top[0].logprob, -0.4076059644f, 1e-6f);
    ck_assert_int_eq(p.top[1].id, W_A);
    live_piece_clear(&p);
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 1);
    live_engine_final(l, 1, SCHED_FINISHED, NULL, 3, 0);
    live_release(q);
    live_release(plain);
    live_free(l);
    tok_free(t);
}
END_TEST

/* Draining refuses new submissions with the message; live_wait_idle waits for what is in
 * flight. */
START_TEST(drain_refuses_and_waits) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, (live_params_t){ 0 });
    pop_all(l);
    live_drain(l, "shutting down");
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.draining, 1);
    int32_t prompt[] = { TOK_BOS };
    live_params_t p = { .prompt = prompt, .n_prompt = 1, .max_tokens = 2, .top_p = 1 };
    live_req_t *r = NULL;
    char msg[128];
    ck_assert_int_eq(live_submit(l, &p, &r, msg, sizeof msg), 1);
    ck_assert_str_eq(msg, "shutting down");
    ck_assert_int_eq(live_wait_idle(l, 0.01), 0);
    live_engine_final(l, 0, SCHED_FINISHED, NULL, 3, 2);
    ck_assert_int_eq(live_wait_idle(l, 0.01), 1);
    live_release(q);
    live_free(l);
}
END_TEST

/* The engine stops with a request of 3 choices of which it took 1: all three end with the
 * message, and the request is freed when its reader lets go. */
START_TEST(close_ends_choices_never_taken) {
    live_t *l = live_new(NULL, 512);
    live_engine_ready(l, 0, 512, 100);
    live_req_t *q = submit(l, (live_params_t){ .n = 3 });
    live_arrival_t a;
    ck_assert_int_eq(live_engine_pop(l, &a), 1);
    live_engine_close(l, "the server stopped");
    live_piece_t p;
    int ends = 0;
    while (live_next(q, &p, 0.001) == 1) {
        ck_assert_str_eq(p.st.error, "aborted: the server stopped");
        ends += p.end;
        live_piece_clear(&p);
    }
    ck_assert_int_eq(ends, 3);
    live_stats_t st;
    live_metrics(l, &st);
    ck_assert_int_eq(st.in_flight, 0);
    live_release(q);
    live_free(l);
}
END_TEST

int main(void) {
    Suite *s = suite_create("live_pieces");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, one_piece_per_token);
    tcase_add_test(tc, eos_is_the_end);
    tcase_add_test(tc, n_choices);
    tcase_add_test(tc, logprobs_from_the_rows);
    tcase_add_test(tc, drain_refuses_and_waits);
    tcase_add_test(tc, close_ends_choices_never_taken);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

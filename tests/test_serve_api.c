/* Check suite for cli/serve_api.c (compiled in: the cli/ objects are not in the library):
 * the request fields of issue #28 item 5 (token-id prompts checked against the vocabulary,
 * n, logprobs and top_logprobs with their ranges) and the JSON of logprobs in OpenAI's two
 * layouts, with -inf, split UTF-8 characters and the sampled token outside the top. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "cli/serve_api.c"
#include "tests/testutil.h"

static char err[512], param[64];

static int parse(const char *body, int chat, serve_req_t *r) {
    return serve_parse(body, strlen(body), chat, 512, r, err, sizeof err, param, sizeof param);
}

/* body must be refused naming field, with text in the message. */
static void refused(const char *body, int chat, const char *field, const char *text) {
    serve_req_t r;
    ck_assert_msg(parse(body, chat, &r) == -1, "accepted %s", body);
    ck_assert_str_eq(param, field);
    ck_assert_msg(strstr(err, text), "'%s' lacks '%s'", err, text);
    serve_req_free(&r);
}

START_TEST(token_id_prompts) {
    serve_req_t r;
    ck_assert_int_eq(parse("{\"prompt\":[1, 259, 511]}", 0, &r), 0);
    ck_assert_ptr_null(r.prompt);
    ck_assert_int_eq(r.n_ids, 3);
    ck_assert_int_eq(r.ids[2], 511);
    serve_req_free(&r);
    ck_assert_int_eq(parse("{\"prompt\":[[5, 6]]}", 0, &r), 0);
    ck_assert_int_eq(r.n_ids, 2);
    serve_req_free(&r);
    ck_assert_int_eq(parse("{\"prompt\":[\"Once\"]}", 0, &r), 0);
    ck_assert_str_eq(r.prompt, "Once");
    serve_req_free(&r);
    refused("{\"prompt\":[1, 2, 512]}", 0, "prompt", "prompt[2] is 512, not a token id of this "
            "model (its vocabulary is 0..511)");
    refused("{\"prompt\":[[1, -4]]}", 0, "prompt", "prompt[0][1] is -4");
    refused("{\"prompt\":[1, \"a\"]}", 0, "prompt", "prompt[1] is not an integer");
    refused("{\"prompt\":[]}", 0, "prompt", "'prompt' is empty");
    refused("{\"prompt\":[[]]}", 0, "prompt", "'prompt[0]' is empty");
    refused("{\"prompt\":[[1], [2]]}", 0, "prompt", "holds 2 prompts");
    refused("{\"prompt\":[\"a\", \"b\"]}", 0, "prompt", "one per request");
}
END_TEST

START_TEST(n_and_logprobs_ranges) {
    serve_req_t r;
    ck_assert_int_eq(parse("{\"prompt\":\"x\",\"n\":3,\"logprobs\":5}", 0, &r), 0);
    ck_assert_int_eq(r.n, 3);
    ck_assert_int_eq(r.logprobs, 1);
    ck_assert_int_eq(r.top_logprobs, 5);
    serve_req_free(&r);
    ck_assert_int_eq(parse("{\"prompt\":\"x\",\"logprobs\":0}", 0, &r), 0);
    ck_assert_int_eq(r.logprobs, 1);
    ck_assert_int_eq(r.top_logprobs, 0);
    serve_req_free(&r);
    ck_assert_int_eq(parse("{\"prompt\":\"x\"}", 0, &r), 0);
    ck_assert_int_eq(r.n, 1);
    ck_assert_int_eq(r.logprobs, 0);
    serve_req_free(&r);
    refused("{\"prompt\":\"x\",\"n\":0}", 0, "n", "between 1 and 16 (got 0)");
    refused("{\"prompt\":\"x\",\"n\":17}", 0, "n", "(got 17)");
    refused("{\"prompt\":\"x\",\"n\":1.5}", 0, "n", "must be an integer");
    refused("{\"prompt\":\"x\",\"logprobs\":21}", 0, "logprobs", "between 0 and 20 (got 21)");
    refused("{\"prompt\":\"x\",\"logprobs\":true}", 0, "logprobs", "must be an integer");
    refused("{\"prompt\":\"x\",\"top_logprobs\":2}", 0, "top_logprobs", "unknown field");
    const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
    char body[256];
    snprintf(body, sizeof body, "{%s,\"logprobs\":true,\"top_logprobs\":4,\"n\":2}", msgs);
    ck_assert_int_eq(parse(body, 1, &r), 0);
    ck_assert(r.logprobs == 1 && r.top_logprobs == 4 && r.n == 2);
    serve_req_free(&r);
    snprintf(body, sizeof body, "{%s,\"top_logprobs\":4}", msgs);
    refused(body, 1, "top_logprobs", "needs \"logprobs\": true");
    snprintf(body, sizeof body, "{%s,\"logprobs\":true,\"top_logprobs\":25}", msgs);
    refused(body, 1, "top_logprobs", "between 0 and 20 (got 25)");
    snprintf(body, sizeof body, "{%s,\"logprobs\":3}", msgs);
    refused(body, 1, "logprobs", "true or false");
}
END_TEST

START_TEST(utf8_cleaned) {
    char *c = utf8_clean("a\xE2\x82" "b\xE2\x82\xAC\xFF");
    ck_assert_str_eq(c, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xE2\x82\xAC\xEF\xBF\xBD");
    free(c);
}
END_TEST

/* A token piece of "\xE2" (half a character), log p = -inf, and a top of two that does not
 * hold the sampled token. */
static live_piece_t piece(void) {
    live_piece_t p = { .token = 9, .token_text = "\xE2", .text_offset = 4, .has_logprob = 1,
                       .logprob = -INFINITY, .n_top = 2 };
    p.top[0] = (live_alt_t){ .id = 5, .logprob = -0.25f, .text = " a" };
    p.top[1] = (live_alt_t){ .id = 6, .logprob = -1.5f, .text = " b" };
    return p;
}

static json_t *lp_of(int chat) {
    serve_lp_t *lp = serve_lp_new(chat);
    live_piece_t p = piece();
    ck_assert_int_eq(serve_lp_add(lp, &p), 0);
    ck_assert_int_eq(serve_lp_add(lp, &p), 0);
    json_t *j = json_deep_copy(lp->o);
    serve_lp_free(lp);
    return j;
}

START_TEST(completions_logprobs_layout) {
    json_t *j = lp_of(0);
    json_t *toks = json_object_get(j, "tokens"), *lps = json_object_get(j, "token_logprobs");
    json_t *top = json_object_get(j, "top_logprobs"), *off = json_object_get(j, "text_offset");
    ck_assert_int_eq(json_array_size(toks), 2);
    ck_assert_str_eq(json_string_value(json_array_get(toks, 0)), "\xEF\xBF\xBD");
    ck_assert_double_eq(json_real_value(json_array_get(lps, 0)), -9999.0);
    ck_assert_int_eq(json_integer_value(json_array_get(off, 1)), 4);
    json_t *t0 = json_array_get(top, 0);
    ck_assert_int_eq(json_object_size(t0), 3); /* k = 2 and the sampled token */
    ck_assert_double_eq_tol(json_real_value(json_object_get(t0, " a")), -0.25, 1e-9);
    ck_assert_double_eq(json_real_value(json_object_get(t0, "\xEF\xBF\xBD")), -9999.0);
    json_decref(j);
}
END_TEST

START_TEST(chat_logprobs_layout) {
    json_t *j = lp_of(1);
    json_t *c = json_object_get(j, "content");
    ck_assert_int_eq(json_array_size(c), 2);
    json_t *e = json_array_get(c, 0);
    ck_assert_str_eq(json_string_value(json_object_get(e, "token")), "\xEF\xBF\xBD");
    json_t *bytes = json_object_get(e, "bytes");
    ck_assert_int_eq(json_array_size(bytes), 1);
    ck_assert_int_eq(json_integer_value(json_array_get(bytes, 0)), 0xE2);
    json_t *top = json_object_get(e, "top_logprobs");
    ck_assert_int_eq(json_array_size(top), 2); /* exactly k */
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(top, 1), "token")), " b");
    json_decref(j);
}
END_TEST

/* Chunks and answers carry their choice's index. */
START_TEST(choices_by_index) {
    serve_meta_t m = { .chat = 0, .id = "cmpl-3", .model = "m", .created = 1 };
    char *c = serve_chunk_json(&m, 1, "hi", NULL, 0, NULL);
    ck_assert_ptr_nonnull(strstr(c, "\"index\":1"));
    free(c);
    serve_choice_t ch[2] = { { "a", "length", NULL }, { "b", "stop", NULL } };
    char *a = serve_answer_json(&m, ch, 2, 3, 4);
    json_t *j = json_loads(a, 0, NULL);
    json_t *cs = json_object_get(j, "choices");
    ck_assert_int_eq(json_array_size(cs), 2);
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(cs, 1), "index")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(cs, 1), "text")), "b");
    json_decref(j);
    free(a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("serve_api");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, token_id_prompts);
    tcase_add_test(tc, n_and_logprobs_ranges);
    tcase_add_test(tc, utf8_cleaned);
    tcase_add_test(tc, completions_logprobs_layout);
    tcase_add_test(tc, chat_logprobs_layout);
    tcase_add_test(tc, choices_by_index);
    suite_add_tcase(s, tc);
    return testutil_run(s);
}

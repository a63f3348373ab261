/* serve_api: see serve_api.h. */
#include "cli/serve_api.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets the message and the field; returns -1. */
static int bad(char *err, size_t errlen, char *param, size_t plen, const char *field,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static int bad(char *err, size_t errlen, char *param, size_t plen, const char *field,
               const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    snprintf(param, plen, "%s", field);
    return -1;
}

void serve_req_free(serve_req_t *r) {
    free(r->prompt);
    free(r->ids);
    free(r->model);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    memset(r, 0, sizeof *r);
}

static int is_field(const char *key, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(key, *list)) return 1;
    return 0;
}

/* A number field within [lo, hi] (absent or null: unchanged). */
static int get_number(json_t *o, const char *key, double lo, double hi, double *out, char *err,
                      size_t errlen, char *param, size_t plen) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return bad(err, errlen, param, plen, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return bad(err, errlen, param, plen, key, "'%s' must be between %g and %g (got %g)", key,
                   lo, hi, x);
    *out = x;
    return 0;
}

/* The chat template (serve_api.h) over messages, into a malloc'd string. */
static char *chat_prompt(json_t *msgs, char *err, size_t errlen, char *param, size_t plen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    size_t i;
    json_t *m;
    int failed = 0;
    json_array_foreach(msgs, i, m) {
        char field[64];
        snprintf(field, sizeof field, "messages[%zu]", i);
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_object(m) || !json_is_string(role) || !json_is_string(content)) {
            failed = bad(err, errlen, param, plen, field, "%s must be an object with a string "
                         "'role' and a string 'content'", field);
            break;
        }
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) {
            if (strcmp(k, "role") && strcmp(k, "content") && strcmp(k, "name")) {
                failed = bad(err, errlen, param, plen, field, "%s: unknown field '%s'", field, k);
                break;
            }
        }
        if (failed) break;
        const char *r = json_string_value(role), *c = json_string_value(content);
        if (!strcmp(r, "system")) fprintf(f, "%s\n\n", c);
        else if (!strcmp(r, "user")) fprintf(f, "User: %s\n", c);
        else if (!strcmp(r, "assistant")) fprintf(f, "Assistant: %s\n", c);
        else {
            failed = bad(err, errlen, param, plen, field, "%s: role '%s' is not system, user "
                         "or assistant", field, r);
            break;
        }
    }
    if (!failed) fputs("Assistant:", f);
    if (fclose(f) != 0 || failed) {
        free(text);
        return NULL;
    }
    return text;
}

/* logprobs (completions: an integer 0..LIVE_MAX_LOGPROBS; chat: a boolean, with
 * top_logprobs 0..LIVE_MAX_LOGPROBS) into r. */
/* An alternatives count (completions' logprobs, chat's top_logprobs): 0..LIVE_MAX_LOGPROBS. */
static int get_alternatives(json_t *v, const char *key, int32_t *out, char *err, size_t errlen,
                            char *param, size_t plen) {
    if (json_is_integer(v) && json_integer_value(v) >= 0 &&
        json_integer_value(v) <= LIVE_MAX_LOGPROBS) {
        *out = (int32_t)json_integer_value(v);
        return 0;
    }
    if (json_is_integer(v))
        return bad(err, errlen, param, plen, key, "'%s' must be an integer between 0 and %d "
                   "(got %lld)", key, LIVE_MAX_LOGPROBS, (long long)json_integer_value(v));
    return bad(err, errlen, param, plen, key, "'%s' must be an integer between 0 and %d (the "
               "alternatives per token)", key, LIVE_MAX_LOGPROBS);
}

static int get_logprobs(json_t *o, int chat, serve_req_t *r, char *err, size_t errlen,
                        char *param, size_t plen) {
    json_t *v = json_object_get(o, "logprobs"), *t = json_object_get(o, "top_logprobs");
    int have = v && !json_is_null(v);
    if (!chat) {
        if (!have) return 0;
        r->logprobs = 1;
        return get_alternatives(v, "logprobs", &r->top_logprobs, err, errlen, param, plen);
    }
    if (have && !json_is_boolean(v))
        return bad(err, errlen, param, plen, "logprobs", "'logprobs' must be true or false "
                   "(the alternatives per token are 'top_logprobs')");
    r->logprobs = have && json_is_true(v);
    if (!t || json_is_null(t)) return 0;
    if (get_alternatives(t, "top_logprobs", &r->top_logprobs, err, errlen, param, plen))
        return -1;
    if (!r->logprobs)
        return bad(err, errlen, param, plen, "top_logprobs", "'top_logprobs' needs "
                   "\"logprobs\": true");
    return 0;
}

/* A completions prompt: a string, an array of token ids, or an array of one of either.
 * Ids must be in [0, vocab). */
static int get_prompt(json_t *v, int32_t vocab, serve_req_t *r, char *err, size_t errlen,
                      char *param, size_t plen) {
    static const char what[] = "'prompt' must be a string or an array of token ids (or an "
                               "array of one of either)";
    const char *at = "prompt";
    char where[64];
    if (json_is_array(v) && json_array_size(v) >= 1 && !json_is_integer(json_array_get(v, 0))) {
        if (json_array_size(v) > 1)
            return bad(err, errlen, param, plen, "prompt", "'prompt' holds %zu prompts: this "
                       "server takes one per request (send one request for each)",
                       json_array_size(v));
        v = json_array_get(v, 0);
        at = "prompt[0]";
    }
    if (json_is_string(v)) {
        if (!(r->prompt = strdup(json_string_value(v))))
            return bad(err, errlen, param, plen, "", "out of memory");
        return 0;
    }
    if (!json_is_array(v)) return bad(err, errlen, param, plen, "prompt", "%s", what);
    size_t n = json_array_size(v);
    if (n == 0)
        return bad(err, errlen, param, plen, "prompt", "'%s' is empty: a prompt needs at least "
                   "one token", at);
    if (n > INT32_MAX || !(r->ids = malloc(sizeof *r->ids * n)))
        return bad(err, errlen, param, plen, "", "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        snprintf(where, sizeof where, "%s[%zu]", at, i);
        if (!json_is_integer(x))
            return bad(err, errlen, param, plen, "prompt", "%s is not an integer: %s", where,
                       what);
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= vocab)
            return bad(err, errlen, param, plen, "prompt", "%s is %lld, not a token id of this "
                       "model (its vocabulary is 0..%d)", where, (long long)id, vocab - 1);
        r->ids[i] = (int32_t)id;
    }
    r->n_ids = (int32_t)n;
    return 0;
}

int serve_parse(const char *body, size_t len, int chat, int32_t vocab, serve_req_t *r,
                char *err, size_t errlen, char *param, size_t plen) {
    static const char *const common[] = { "model", "max_tokens", "temperature", "top_p", "seed",
                                          "stop", "stream", "stream_options", "n", "user",
                                          "logprobs", 0 };
    static const char *const comp[] = { "prompt", 0 };
    static const char *const chats[] = { "messages", "max_completion_tokens", "top_logprobs",
                                         0 };
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->n = 1;
    r->max_tokens = -1;
    r->temperature = 1;
    r->top_p = 1;
    param[0] = '\0';
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    int rc = -1;
    if (!o) return bad(err, errlen, param, plen, "", "malformed JSON at line %d column %d: %s",
                       je.line, je.column, je.text);
    if (!json_is_object(o)) {
        bad(err, errlen, param, plen, "", "the body must be a JSON object");
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!is_field(k, common) && !is_field(k, chat ? chats : comp)) {
            bad(err, errlen, param, plen, k, "unknown field '%s' (this server takes: model, %s, "
                "max_tokens, temperature, top_p, seed, stop, stream, stream_options, n, "
                "logprobs, user)", k,
                chat ? "messages, max_completion_tokens, top_logprobs" : "prompt");
            goto done;
        }
    }
    v = json_object_get(o, "model");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v)) {
            bad(err, errlen, param, plen, "model", "'model' must be a string");
            goto done;
        }
        if (!(r->model = strdup(json_string_value(v)))) goto oom;
    }
    const char *mt = chat && json_object_get(o, "max_completion_tokens") ? "max_completion_tokens"
                                                                          : "max_tokens";
    v = json_object_get(o, mt);
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) {
            bad(err, errlen, param, plen, mt, "'%s' must be an integer", mt);
            goto done;
        }
        json_int_t n = json_integer_value(v);
        if (n < 1 || n > INT32_MAX) {
            bad(err, errlen, param, plen, mt, "'%s' must be at least 1 (got %lld)", mt,
                (long long)n);
            goto done;
        }
        r->max_tokens = (int32_t)n;
    }
    if (get_number(o, "temperature", 0, 2, &r->temperature, err, errlen, param, plen) ||
        get_number(o, "top_p", 0, 1, &r->top_p, err, errlen, param, plen))
        goto done;
    if (r->top_p <= 0) {
        bad(err, errlen, param, plen, "top_p", "'top_p' must be above 0");
        goto done;
    }
    v = json_object_get(o, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) {
            bad(err, errlen, param, plen, "seed", "'seed' must be an integer");
            goto done;
        }
        r->has_seed = 1;
        r->seed = (uint64_t)json_integer_value(v);
    }
    v = json_object_get(o, "n");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) {
            bad(err, errlen, param, plen, "n", "'n' must be an integer between 1 and %d",
                LIVE_MAX_N);
            goto done;
        }
        if (json_integer_value(v) < 1 || json_integer_value(v) > LIVE_MAX_N) {
            bad(err, errlen, param, plen, "n", "'n' must be between 1 and %d (got %lld)",
                LIVE_MAX_N, (long long)json_integer_value(v));
            goto done;
        }
        r->n = (int32_t)json_integer_value(v);
    }
    if (get_logprobs(o, chat, r, err, errlen, param, plen)) goto done;
    v = json_object_get(o, "user");
    if (v && !json_is_null(v) && !json_is_string(v)) {
        bad(err, errlen, param, plen, "user", "'user' must be a string");
        goto done;
    }
    v = json_object_get(o, "stream");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) {
            bad(err, errlen, param, plen, "stream", "'stream' must be true or false");
            goto done;
        }
        r->stream = json_is_true(v);
    }
    v = json_object_get(o, "stream_options");
    if (v && !json_is_null(v)) {
        json_t *u = json_object_get(v, "include_usage");
        if (!json_is_object(v) || json_object_size(v) != (u ? 1u : 0u) ||
            (u && !json_is_boolean(u))) {
            bad(err, errlen, param, plen, "stream_options", "'stream_options' must be "
                "{\"include_usage\": true|false}");
            goto done;
        }
        r->include_usage = u && json_is_true(u);
    }
    v = json_object_get(o, "stop");
    if (v && !json_is_null(v)) {
        size_t n = json_is_array(v) ? json_array_size(v) : 1;
        if ((!json_is_string(v) && !json_is_array(v)) || n > LIVE_MAX_STOP) {
            bad(err, errlen, param, plen, "stop", "'stop' must be a string or an array of at "
                "most %d strings", LIVE_MAX_STOP);
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
            if (!json_is_string(s) || !json_string_length(s)) {
                bad(err, errlen, param, plen, "stop", "'stop' must hold non-empty strings");
                goto done;
            }
            if (!(r->stop[r->n_stop] = strdup(json_string_value(s)))) goto oom;
            r->n_stop++;
        }
    }
    if (chat) {
        v = json_object_get(o, "messages");
        if (!json_is_array(v) || json_array_size(v) == 0) {
            bad(err, errlen, param, plen, "messages", "'messages' must be a non-empty array");
            goto done;
        }
        if (!(r->prompt = chat_prompt(v, err, errlen, param, plen))) {
            if (!param[0]) goto oom;
            goto done;
        }
    } else {
        if (get_prompt(json_object_get(o, "prompt"), vocab, r, err, errlen, param, plen))
            goto done;
    }
    rc = 0;
    goto done;
oom:
    bad(err, errlen, param, plen, "", "out of memory");
done:
    json_decref(o);
    return rc;
}

/* The compact text of o (consumed); NULL when out of memory. */
static char *dump(json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(o);
    return s;
}

char *serve_error_json(const char *message, const char *type, const char *param) {
    return dump(json_pack("{s:{s:s, s:s, s:o, s:n}}", "error", "message", message, "type", type,
                          "param", param && *param ? json_string(param) : json_null(),
                          "code"));
}

static json_t *usage(int32_t p, int32_t c) {
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", p, "completion_tokens", c,
                     "total_tokens", p + c);
}

static json_t *head(const serve_meta_t *m, const char *object) {
    return json_pack("{s:s, s:s, s:I, s:s}", "id", m->id, "object", object, "created",
                     (json_int_t)m->created, "model", m->model);
}

/* ------------------------------------------------------------------ logprobs */

/* s as valid UTF-8 (malloc'd): each byte that is not part of a whole character becomes
 * U+FFFD. NULL when out of memory. */
static char *utf8_clean(const char *s) {
    const unsigned char *t = (const unsigned char *)s;
    size_t n = strlen(s), o = 0;
    char *out = malloc(n * 3 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        int len = t[i] < 0x80 ? 1 : (t[i] & 0xE0) == 0xC0 && t[i] >= 0xC2 ? 2
                : (t[i] & 0xF0) == 0xE0 ? 3 : (t[i] & 0xF8) == 0xF0 && t[i] <= 0xF4 ? 4 : 0;
        for (int k = 1; k < len; k++)
            if (i + (size_t)k >= n || (t[i + k] & 0xC0) != 0x80) len = 0;
        if (len == 0) {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, (size_t)len);
        o += (size_t)len;
        i += (size_t)len;
    }
    out[o] = '\0';
    return out;
}

/* A log-probability as JSON: -inf (and NaN) as -9999.0, vLLM's convention. */
static json_t *lp_num(float x) {
    return json_real(x >= -9999.0f ? (double)x : -9999.0);
}

static json_t *text_json(const char *raw) {
    char *c = utf8_clean(raw);
    json_t *j = c ? json_string(c) : NULL;
    free(c);
    return j;
}

static json_t *bytes_json(const char *raw) {
    json_t *a = json_array();
    for (const unsigned char *t = (const unsigned char *)raw; a && *t; t++)
        json_array_append_new(a, json_integer(*t));
    return a;
}

struct serve_lp {
    int chat;
    json_t *o;   /* completions: {tokens, token_logprobs, top_logprobs, text_offset};
                  * chat: {content} */
};

serve_lp_t *serve_lp_new(int chat) {
    serve_lp_t *lp = calloc(1, sizeof *lp);
    if (!lp) return NULL;
    lp->chat = chat;
    lp->o = chat ? json_pack("{s:[]}", "content")
                 : json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs",
                             "top_logprobs", "text_offset");
    if (!lp->o) {
        free(lp);
        return NULL;
    }
    return lp;
}

void serve_lp_free(serve_lp_t *lp) {
    if (!lp) return;
    json_decref(lp->o);
    free(lp);
}

/* Chat: {token, logprob, bytes}. */
static json_t *chat_entry(const char *raw, float logprob) {
    json_t *e = json_object(), *t = text_json(raw);
    if (!e || !t) {
        json_decref(e);
        json_decref(t);
        return NULL;
    }
    json_object_set_new(e, "token", t);
    json_object_set_new(e, "logprob", lp_num(logprob));
    json_object_set_new(e, "bytes", bytes_json(raw));
    return e;
}

int serve_lp_add(serve_lp_t *lp, const live_piece_t *p) {
    if (lp->chat) {
        json_t *e = chat_entry(p->token_text, p->logprob), *top = json_array();
        if (!e || !top) {
            json_decref(e);
            json_decref(top);
            return -1;
        }
        for (int32_t j = 0; j < p->n_top; j++)
            json_array_append_new(top, chat_entry(p->top[j].text, p->top[j].logprob));
        json_object_set_new(e, "top_logprobs", top);
        if (!p->has_logprob) json_object_set_new(e, "logprob", json_null());
        return json_array_append_new(json_object_get(lp->o, "content"), e);
    }
    json_t *tok = text_json(p->token_text), *top = NULL;
    if (!tok) return -1;
    if (p->has_logprob) {
        top = json_object();
        int sampled_in = 0;
        for (int32_t j = 0; top && j < p->n_top; j++) {
            json_t *k = text_json(p->top[j].text);
            if (k) json_object_set_new(top, json_string_value(k), lp_num(p->top[j].logprob));
            json_decref(k);
            sampled_in |= p->top[j].id == p->token;
        }
        /* the sampled token is always there (k or k + 1 entries, as vLLM returns) */
        if (top && !sampled_in)
            json_object_set_new(top, json_string_value(tok), lp_num(p->logprob));
    }
    int rc = json_array_append_new(json_object_get(lp->o, "tokens"), tok);
    rc |= json_array_append_new(json_object_get(lp->o, "token_logprobs"),
                                p->has_logprob ? lp_num(p->logprob) : json_null());
    rc |= json_array_append_new(json_object_get(lp->o, "top_logprobs"), top ? top : json_null());
    rc |= json_array_append_new(json_object_get(lp->o, "text_offset"),
                                json_integer((json_int_t)p->text_offset));
    return rc ? -1 : 0;
}

/* A choice's logprobs member: a copy of lp's object, or null. */
static json_t *lp_json(const serve_lp_t *lp) {
    return lp ? json_deep_copy(lp->o) : json_null();
}

/* ------------------------------------------------------------------ answers */

char *serve_answer_json(const serve_meta_t *m, const serve_choice_t *choices, int32_t n,
                        int32_t prompt_tokens, int32_t completion_tokens) {
    json_t *o = head(m, m->chat ? "chat.completion" : "text_completion"), *arr = json_array();
    if (!o || !arr) goto oom;
    for (int32_t i = 0; i < n; i++) {
        const serve_choice_t *c = &choices[i];
        json_t *choice = m->chat
            ? json_pack("{s:i, s:{s:s, s:s}, s:s, s:o}", "index", i, "message", "role",
                        "assistant", "content", c->text, "finish_reason", c->finish_reason,
                        "logprobs", lp_json(c->logprobs))
            : json_pack("{s:i, s:s, s:s, s:o}", "index", i, "text", c->text, "finish_reason",
                        c->finish_reason, "logprobs", lp_json(c->logprobs));
        if (!choice || json_array_append_new(arr, choice)) goto oom;
    }
    json_object_set_new(o, "choices", arr);
    json_object_set_new(o, "usage", usage(prompt_tokens, completion_tokens));
    return dump(o);
oom:
    json_decref(o);
    json_decref(arr);
    return NULL;
}

char *serve_chunk_json(const serve_meta_t *m, int32_t index, const char *text,
                       const char *finish_reason, int role, const serve_lp_t *lp) {
    json_t *o = head(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_t *fr = finish_reason ? json_string(finish_reason) : json_null();
    json_t *choice;
    if (m->chat) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (*text || !finish_reason) json_object_set_new(delta, "content", json_string(text));
        choice = json_pack("{s:i, s:o, s:o, s:o}", "index", index, "delta", delta,
                           "finish_reason", fr, "logprobs", lp_json(lp));
    } else {
        choice = json_pack("{s:i, s:s, s:o, s:o}", "index", index, "text", text,
                           "finish_reason", fr, "logprobs", lp_json(lp));
    }
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return dump(o);
}

char *serve_usage_chunk_json(const serve_meta_t *m, int32_t prompt_tokens,
                             int32_t completion_tokens) {
    json_t *o = head(m, m->chat ? "chat.completion.chunk" : "text_completion");
    if (!o) return NULL;
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage(prompt_tokens, completion_tokens));
    return dump(o);
}

char *serve_models_json(const char *model, long long created) {
    return dump(json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id",
                          model, "object", "model", "created", (json_int_t)created, "owned_by",
                          "twinserve"));
}

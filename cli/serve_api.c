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

int serve_parse(const char *body, size_t len, int chat, serve_req_t *r, char *err,
                size_t errlen, char *param, size_t plen) {
    static const char *const common[] = { "model", "max_tokens", "temperature", "top_p", "seed",
                                          "stop", "stream", "stream_options", "n", "user", 0 };
    static const char *const comp[] = { "prompt", 0 };
    static const char *const chats[] = { "messages", "max_completion_tokens", 0 };
    memset(r, 0, sizeof *r);
    r->chat = chat;
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
                "max_tokens, temperature, top_p, seed, stop, stream, stream_options, n, user)", k,
                chat ? "messages, max_completion_tokens" : "prompt");
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
    if (v && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1)) {
        bad(err, errlen, param, plen, "n", "'n' must be 1 (one choice per request)");
        goto done;
    }
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
        v = json_object_get(o, "prompt");
        if (json_is_array(v) && json_array_size(v) == 1) v = json_array_get(v, 0);
        if (!json_is_string(v)) {
            bad(err, errlen, param, plen, "prompt", "'prompt' must be a string (or an array "
                "of one string)");
            goto done;
        }
        if (!(r->prompt = strdup(json_string_value(v)))) goto oom;
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
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
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

char *serve_answer_json(const serve_meta_t *m, const char *text, const char *finish_reason,
                        int32_t prompt_tokens, int32_t completion_tokens) {
    json_t *o = head(m, m->chat ? "chat.completion" : "text_completion");
    json_t *choice = m->chat
        ? json_pack("{s:i, s:{s:s, s:s}, s:s, s:n}", "index", 0, "message", "role", "assistant",
                    "content", text, "finish_reason", finish_reason, "logprobs")
        : json_pack("{s:i, s:s, s:s, s:n}", "index", 0, "text", text, "finish_reason",
                    finish_reason, "logprobs");
    if (!o || !choice) {
        json_decref(o);
        json_decref(choice);
        return NULL;
    }
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage(prompt_tokens, completion_tokens));
    return dump(o);
}

char *serve_chunk_json(const serve_meta_t *m, const char *text, const char *finish_reason,
                       int first) {
    json_t *o = head(m, m->chat ? "chat.completion.chunk" : "text_completion");
    json_t *fr = finish_reason ? json_string(finish_reason) : json_null();
    json_t *choice;
    if (m->chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (*text || !finish_reason) json_object_set_new(delta, "content", json_string(text));
        choice = json_pack("{s:i, s:o, s:o, s:n}", "index", 0, "delta", delta, "finish_reason",
                           fr, "logprobs");
    } else {
        choice = json_pack("{s:i, s:s, s:o, s:n}", "index", 0, "text", text, "finish_reason",
                           fr, "logprobs");
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

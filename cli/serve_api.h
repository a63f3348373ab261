/* serve_api: the OpenAI-compatible request and response bodies of `twinserve serve`
 * (cli/cmd_serve.c): parsing and checking a completions or chat completions request
 * (jansson), the chat template, and the JSON of answers, stream chunks and errors. No I/O.
 *
 * Accepted fields. Both: model, max_tokens, temperature (0..2), top_p (0..1], seed, stop
 * (a string or up to 4 strings), stream, stream_options ({include_usage}), n (1 only),
 * user. Completions: prompt (a string, or an array of one string). Chat: messages (an
 * array of {role: system|user|assistant, content: string, name?}), max_completion_tokens.
 * Anything else, a wrong type or an out-of-range value is refused with the field's name
 * (HTTP 400), as a strict server should: a client that misspells a parameter learns it.
 *
 * The chat template (the llama2.c/GGUF models here are not chat-tuned; this one is plain
 * and documented in docs/engine.md "Serving"): each system message as "CONTENT\n\n", each
 * user message as "User: CONTENT\n", each assistant message as "Assistant: CONTENT\n", then
 * "Assistant:" for the answer to follow.
 *
 * Ownership: serve_req_t owns its strings (serve_req_free). Builders return malloc'd
 * NUL-terminated text (NULL when out of memory) that the caller frees. */
#ifndef TWIN_SERVE_API_H
#define TWIN_SERVE_API_H

#include <stddef.h>
#include <stdint.h>

#include "engine/live.h"

typedef struct {
    int chat;              /* /v1/chat/completions */
    int stream;
    int include_usage;     /* stream_options.include_usage */
    char *prompt;          /* the text to encode (chat: the template applied) */
    int32_t max_tokens;    /* -1: not given (the context left) */
    double temperature;    /* default 1, as OpenAI's */
    double top_p;          /* default 1 */
    int has_seed;
    uint64_t seed;
    char *stop[LIVE_MAX_STOP];
    int n_stop;
    char *model;           /* as given; NULL when absent */
} serve_req_t;

/* 0, or -1 with an OpenAI-style message in err and the offending field in param ("" when
 * the body as a whole is wrong). r is always safe to serve_req_free. */
int serve_parse(const char *body, size_t len, int chat, serve_req_t *r, char *err,
                size_t errlen, char *param, size_t paramlen);
void serve_req_free(serve_req_t *r);

/* {"error":{"message":..,"type":..,"param":..,"code":null}}; param NULL or "" -> null. */
char *serve_error_json(const char *message, const char *type, const char *param);

/* What a finished answer or a stream event describes. */
typedef struct {
    int chat;
    const char *id;        /* "cmpl-N" / "chatcmpl-N" */
    const char *model;
    long long created;     /* Unix seconds */
} serve_meta_t;

/* The whole answer (stream: false). */
char *serve_answer_json(const serve_meta_t *m, const char *text, const char *finish_reason,
                        int32_t prompt_tokens, int32_t completion_tokens);
/* One stream chunk: text (may be ""), finish_reason NULL while the answer goes on; first
 * (chat) adds the assistant role to the delta. */
char *serve_chunk_json(const serve_meta_t *m, const char *text, const char *finish_reason,
                       int first);
/* The usage-only chunk that stream_options.include_usage asks for (choices empty). */
char *serve_usage_chunk_json(const serve_meta_t *m, int32_t prompt_tokens,
                             int32_t completion_tokens);
/* GET /v1/models. */
char *serve_models_json(const char *model, long long created);

#endif

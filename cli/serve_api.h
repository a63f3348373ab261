/* serve_api: the OpenAI-compatible request and response bodies of `twinserve serve`
 * (cli/cmd_serve.c): parsing and checking a completions or chat completions request
 * (jansson), the chat template, and the JSON of answers, stream chunks and errors. No I/O.
 *
 * Accepted fields. Both: model, max_tokens, temperature (0..2), top_p (0..1], seed, stop
 * (a string or up to 4 strings), stream, stream_options ({include_usage}), n (1..16
 * choices), user. Completions: prompt (a string, an array of token ids, or an array of one
 * of either), logprobs (an integer 0..20: the sampled token's log-probability and that many
 * alternatives per token). Chat: messages (an array of {role: system|user|assistant,
 * content: string, name?}), max_completion_tokens, logprobs (a boolean), top_logprobs
 * (0..20, with logprobs). Anything else, a wrong type or an out-of-range value is refused
 * with the field's name (HTTP 400), as a strict server should: a client that misspells a
 * parameter learns it. One prompt per request: an array of several is refused.
 *
 * Log-probabilities (engine/logprob.h: the model's raw distribution, vLLM's default) as
 * OpenAI lays them out. Completions: {tokens, token_logprobs, top_logprobs (per token an
 * object text -> logprob of the k most likely ids, with the sampled token added when it is
 * not among them, so k or k + 1 entries, as vLLM), text_offset (characters of the
 * choice's text before the token)}. Chat: {content: [{token, logprob, bytes, top_logprobs:
 * [{token, logprob, bytes}] (exactly k)}]}. A log-probability of -inf is written -9999.0
 * (JSON has no infinity; vLLM's convention); token texts that are not whole UTF-8 (a byte
 * of a character split over tokens) show U+FFFD, and bytes gives the raw bytes.
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
    char *prompt;          /* the text to encode (chat: the template applied); NULL when the
                            * prompt is token ids */
    int32_t *ids;          /* a token-id prompt, checked against the vocabulary */
    int32_t n_ids;
    int32_t n;             /* choices, 1..LIVE_MAX_N */
    int logprobs;          /* 1: log-probabilities per token */
    int32_t top_logprobs;  /* alternatives per token (completions: logprobs' value) */
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
 * the body as a whole is wrong). vocab: token ids of a prompt must be below it. r is
 * always safe to serve_req_free. */
int serve_parse(const char *body, size_t len, int chat, int32_t vocab, serve_req_t *r,
                char *err, size_t errlen, char *param, size_t paramlen);
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

/* A choice's log-probabilities, built one token (live_piece_t) at a time. */
typedef struct serve_lp serve_lp_t;
serve_lp_t *serve_lp_new(int chat);
/* Adds a token piece; 0, or -1 out of memory. */
int serve_lp_add(serve_lp_t *lp, const live_piece_t *p);
void serve_lp_free(serve_lp_t *lp);

/* A choice of the whole answer. */
typedef struct {
    const char *text;
    const char *finish_reason;
    const serve_lp_t *logprobs;  /* NULL: "logprobs": null */
} serve_choice_t;

/* The whole answer (stream: false): n choices, indices 0..n-1. */
char *serve_answer_json(const serve_meta_t *m, const serve_choice_t *choices, int32_t n,
                        int32_t prompt_tokens, int32_t completion_tokens);
/* One stream chunk of choice `index`: text (may be ""), finish_reason NULL while the
 * answer goes on, lp this chunk's log-probabilities (NULL: null). Chat: role adds the
 * assistant role to the delta (the first chunk of each choice). */
char *serve_chunk_json(const serve_meta_t *m, int32_t index, const char *text,
                       const char *finish_reason, int role, const serve_lp_t *lp);
/* The usage-only chunk that stream_options.include_usage asks for (choices empty). */
char *serve_usage_chunk_json(const serve_meta_t *m, int32_t prompt_tokens,
                             int32_t completion_tokens);
/* GET /v1/models. */
char *serve_models_json(const char *model, long long created);

#endif

/* serve_http: the HTTP side of `twinserve serve` on libmicrohttpd (one thread per
 * connection): routes, request bodies, answers and server-sent event streams. Requests go
 * to the engine thread only through engine/live.h (never the scheduler or the backend).
 *
 * Routes: POST /v1/completions and /v1/chat/completions (cli/serve_api.h; stream: true
 * answers as text/event-stream: one "data: CHUNK" event per generated token, written as
 * soon as the engine's step emitted it (its text, maybe "" while a stop string may begin or
 * a character is split; its logprobs when asked; chat: each choice opens with a role
 * chunk), each choice's final chunk with its finish_reason, the usage chunk when asked,
 * then "data: [DONE]"; while a request waits, ": keep-alive" comments every second, so a
 * client gone is noticed); GET /v1/models, GET /health (200 {"status":"ok"}, 503 while the
 * engine loads, drains or after it stopped), GET /metrics (Prometheus text).
 *
 * Draining (serve_http_drain, at SIGTERM): the listening socket stops listening, so new
 * connections are refused (ECONNREFUSED); a request on a connection already open gets 503;
 * answers in flight go on. serve_http_wait_idle waits for them to be completely sent.
 *
 * Errors are OpenAI-style JSON: 400 (malformed JSON, unknown fields, wrong types or values,
 * a prompt over the context), 404 (an unknown path or model), 405, 413 (a body over 1 MiB),
 * 500 (the engine aborted the request), 503 (not ready). A client that disconnects has its
 * request cancelled (live_cancel): streams at their next write, non-streamed requests at
 * the next check of their socket (every second).
 *
 * Ownership: serve_http_start borrows ctx (and what it points to) until serve_http_stop,
 * which waits for every connection thread. */
#ifndef TWIN_SERVE_HTTP_H
#define TWIN_SERVE_HTTP_H

#include <stddef.h>

#include "engine/live.h"

typedef struct {
    live_t *live;
    const char *model;        /* the served model's id (GET /v1/models, answers) */
    const char *policy;       /* for /metrics' info line */
    long long created;        /* Unix seconds the server started */
} serve_ctx_t;

typedef struct serve_http serve_http_t;

/* Binds host:port (port 0: any free one, *bound says which) and starts serving. 0, or -1
 * with a message. */
int serve_http_start(const serve_ctx_t *ctx, const char *host, int port, serve_http_t **out,
                     int *bound, char *err, size_t errlen);
/* Stops taking connections (above); requests in flight go on. Call from one thread. */
void serve_http_drain(serve_http_t *h);
/* Waits up to timeout_s until every completion received has been answered (its last byte
 * handed to the socket, or its client gone): 1 when none is left, 0 on timeout. */
int serve_http_wait_idle(serve_http_t *h, double timeout_s);
void serve_http_stop(serve_http_t *h);

#endif

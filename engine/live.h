/* live: the hand-over between a server's HTTP threads and the engine thread (`twinserve
 * serve`, cli/cmd_serve.c). HTTP threads submit requests (prompt tokens, max_tokens,
 * sampling, stop strings, n choices, logprobs) into a locked queue and read their output
 * back through a per-request channel of pieces; the engine thread (engine_run with
 * engine_opts_t.live) takes the arrivals at step boundaries, emits each step's tokens into
 * the channels, and ends requests early at EOS, a stop string or a client gone
 * (sched_finish_early).
 *
 * A submission of n choices is n requests of the engine (consecutive ids, one sequence
 * each through the scheduler, the same prompt and arrival; choice i of a request with a
 * seed samples with seed + i, as vLLM's parallel sampling does) behind one channel.
 *
 * The channel is a queue of pieces, one per emitted token, in the order the engine emitted
 * them: the token's id, its own text, the text it releases to the client (below), and, when
 * the request asked for them, its log-probability and top alternatives (engine/logprob.h:
 * the model's raw distribution). A choice's last piece is its end (finish reason or error,
 * usage counts, the text still held back). So a stream writes one event per token as soon
 * as its step ends. The EOS token that ends a choice has no piece of its own: the end
 * stands for it (it is counted in completion_tokens, as the core counts it).
 *
 * Invariants:
 *  - HTTP threads never touch the scheduler, the backend or the records: they only call
 *    live_submit / live_next / live_read / live_cancel / live_release / live_metrics /
 *    live_encode / live_drain / live_wait_idle / live_nudge. The engine thread alone calls
 *    the live_engine_* functions.
 *  - Ids are 0, 1, 2... in submission order and arrivals are taken in that order (the
 *    engine's request table and the recorder's ledger want consecutive ids).
 *  - Every submitted choice's channel ends exactly once with a finish reason: "stop" (EOS
 *    or a stop string), "length" (max_tokens or the context), or an error ("aborted: ...",
 *    "rejected: ..."); live_engine_close ends those still open (the server stops).
 *  - Stop strings never reach the client: text that could still turn into one is held
 *    back until it cannot; text is released only in whole UTF-8 characters (an invalid byte
 *    becomes U+FFFD). A piece's text may therefore be "" (held back, or half a character)
 *    and a later piece's, or the end's, carries it.
 *  - Draining (live_drain): new submissions are refused (1, with the message); what is in
 *    flight runs to its end.
 *  - A request lives until both sides let go: the engine at its choices' final states, the
 *    HTTP thread at live_release. A cancelled request's ending reaches the engine at its
 *    next step boundary, which frees its KV.
 *  - One mutex guards everything shared; the tokenizer is used under it too (tok_t keeps a
 *    decode buffer).
 *
 * Ownership: live_new borrows the tokenizer (NULL: token ids only, no text) for the live
 * object's lifetime; live_free frees the rest. Strings and prompts handed to live_submit
 * are copied. A piece from live_next owns its strings until live_piece_clear. */
#ifndef TWIN_LIVE_H
#define TWIN_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/logprob.h"
#include "engine/tokenizer.h"

typedef struct live live_t;
typedef struct live_req live_req_t;

#define LIVE_MAX_STOP 4        /* stop strings per request (OpenAI's limit) */
#define LIVE_MAX_N 16          /* choices per request */
#define LIVE_MAX_LOGPROBS LOGPROB_MAX_TOP

typedef struct {
    const int32_t *prompt;     /* copied */
    int32_t n_prompt;
    int32_t max_tokens;        /* >= 1, prompt + max_tokens within the context */
    float temperature;         /* 0: greedy */
    float top_p;               /* (0, 1] */
    int has_seed;              /* 0: the engine's stream for the request (run seed, id) */
    uint64_t seed;             /* the request's sampling stream (choice i: seed + i) */
    const char *stop[LIVE_MAX_STOP];
    int n_stop;
    int32_t n;                 /* choices, 1..LIVE_MAX_N (0: 1) */
    int logprobs;              /* 1: each token's log-probability (live_engine_logprobs) */
    int32_t top_logprobs;      /* with logprobs: alternatives per token, 0..LIVE_MAX_LOGPROBS */
} live_params_t;

/* What the metrics endpoint shows; the engine updates it at every step boundary. Counts
 * of requests count choices (each is a request of the engine and a row of the records). */
typedef struct {
    int ready;                 /* the engine is running (model loaded, clock started) */
    int draining;              /* live_drain was called: submissions are refused */
    int logprobs;              /* the engine hands logits over (live_engine_offer_logprobs) */
    int32_t waiting, running;  /* the scheduler's queue and running list */
    int32_t kv_used, kv_total; /* KV blocks */
    int64_t steps;
    int64_t prompt_tokens, generation_tokens; /* over finished/ended requests' rows */
    int64_t submitted, finished, aborted, rejected;
    int64_t in_flight;         /* submitted, channel not yet ended */
    int32_t max_model_len;
} live_stats_t;

/* A choice's end. */
typedef struct {
    int done;                  /* the channel ended: finish_reason (or error) is set */
    char finish_reason[16];    /* "stop" | "length" | "" (error) */
    char error[256];           /* non-empty when the request failed (aborted, rejected) */
    int32_t prompt_tokens, completion_tokens;
} live_status_t;

typedef struct {
    int32_t id;
    float logprob;             /* the model's raw log-probability (may be -inf) */
    const char *text;          /* the id's text at this position, raw bytes */
} live_alt_t;

/* One piece of a channel (live_next). */
typedef struct {
    int32_t index;             /* the choice, 0 .. n-1 */
    int end;                   /* 1: the choice ended (st); 0: a token */
    const char *text;          /* text released to the client: whole valid UTF-8
                                * characters, maybe ""; at the end, what was held back */
    int32_t token;             /* a token: its id */
    const char *token_text;    /* its own decoded text, raw bytes (maybe half a character) */
    int64_t text_offset;       /* characters of the choice's earlier tokens' texts */
    int has_logprob;           /* the request asked for logprobs and the engine gave them */
    float logprob;
    int32_t n_top;
    live_alt_t top[LIVE_MAX_LOGPROBS];
    live_status_t st;          /* end: how the choice ended */
    char *mem_;                /* owns the strings */
} live_piece_t;

/* vocab: the model's vocabulary, which token-id prompts are checked against (the
 * tokenizer's when there is one; a GGUF's placeholder tokenizer is none) */
live_t *live_new(tok_t *tok, int32_t vocab);
void live_free(live_t *l);

/* --- HTTP threads ------------------------------------------------------------------- */
/* Encodes text (BOS first) under the lock. 0, or -1 with a message. */
int live_encode(live_t *l, const char *text, int32_t *ids, int32_t cap, int32_t *n,
                char *err, size_t errlen);
/* The vocabulary token-id prompts are checked against (live_new's). */
int32_t live_vocab(const live_t *l);
/* 0 with *out (hold it until live_release); 1 the server is not ready, is draining or
 * stopped (msg says which); -1 out of memory. */
int live_submit(live_t *l, const live_params_t *p, live_req_t **out, char *msg, size_t len);
/* The first choice's id (choice i is id + i). */
int32_t live_req_id(const live_req_t *q);
int32_t live_req_choices(const live_req_t *q);
/* Waits up to timeout_s for the next piece: 1 with *out (free with live_piece_clear), 0 on
 * timeout, -1 when every choice's end has been read. */
int live_next(live_req_t *q, live_piece_t *out, double timeout_s);
void live_piece_clear(live_piece_t *p);
/* The text of choice 0 at once (requests of one choice): waits up to timeout_s for text or
 * the end; moves the text released since the last read into buf (at most cap - 1 bytes,
 * NUL-terminated; *n its length) and fills st (done once all text was read). Returns 1
 * when something changed (text or the end), 0 on timeout. */
int live_read(live_req_t *q, char *buf, size_t cap, size_t *n, live_status_t *st,
              double timeout_s);
/* The client went away: the engine aborts the request's choices at its next step
 * boundary. */
void live_cancel(live_req_t *q);
void live_release(live_req_t *q);
void live_metrics(live_t *l, live_stats_t *out);
/* Refuses new submissions from now on with msg (a server shutting down); in-flight ones
 * go on. Any thread. */
void live_drain(live_t *l, const char *msg);
/* Waits up to timeout_s until nothing is in flight: 1 when nothing is, 0 on timeout. */
int live_wait_idle(live_t *l, double timeout_s);
/* Wakes the engine's idle wait (live_engine_wait), e.g. after its interrupt flag was set. */
void live_nudge(live_t *l);

/* --- the engine thread ---------------------------------------------------------------- */
typedef struct {
    int32_t id;
    double received;           /* replay_wall() at live_submit */
    const int32_t *prompt;     /* valid until the request's final state */
    int32_t n_prompt, max_tokens;
} live_arrival_t;

/* Content names of a prompt's full blocks of `block` tokens, for the core's prefix cache
 * (sched_new_req_t.hash_ids, hash_block = block): out[i] names tokens [0, (i+1) * block),
 * so prompts that open alike (a shared system prompt, a conversation's history) share
 * their leading blocks' KV. Returns n / block, the count written to out. Pure. */
int32_t live_prompt_hashes(const int32_t *toks, int32_t n, int32_t block, int64_t *out);

/* The engine runs: submissions are accepted from now on. t0: replay_wall() at the run's
 * time 0 (arrival times in the trace log are from it). */
void live_engine_ready(live_t *l, double t0, int32_t max_model_len, int32_t kv_total);
/* The engine hands each emitted token's logits row over (live_engine_emit_logits) for
 * requests that ask (live_engine_logprobs): call before live_engine_ready. Without it,
 * requests for logprobs are refused by the server (live_stats_t.logprobs is 0). */
void live_engine_offer_logprobs(live_t *l);
/* The next submission in id order (one choice at a time): 1 with *a, 0 none. */
int live_engine_pop(live_t *l, live_arrival_t *a);
/* Waits up to timeout_s for a submission or a cancellation (returns at once if one is
 * pending). */
void live_engine_wait(live_t *l, double timeout_s);
/* A request's sampling parameters over the engine's defaults (sp keeps its idx). */
void live_engine_sampling(live_t *l, int32_t id, bk_sample_t *sp);
/* 1 when request id wants its tokens' log-probabilities (the engine then passes the logits
 * rows to live_engine_emit_logits), else 0. */
int live_engine_logprobs(live_t *l, int32_t id);
/* Tokens a request emitted in a step (after its accepted drafts): decoded, checked for
 * EOS and stop strings, queued one piece each. Returns how many of them the request keeps:
 * through the token that ended it (EOS, or the one that completed a stop string), else n.
 * The engine emits only those (accepted drafts after an ending are dropped, as a real server
 * drops them), so the records and usage count the tokens the client got. */
int32_t live_engine_emit(live_t *l, int32_t id, const int32_t *toks, int32_t n);
/* The same with the logits rows the tokens were drawn from: rows [n][vocab] (row j: the
 * distribution of toks[j]), or NULL. */
int32_t live_engine_emit_logits(live_t *l, int32_t id, const int32_t *toks, int32_t n,
                                const float *rows, int32_t vocab);
/* A request to end early: 1 with its id, state (SCHED_FINISHED at EOS or a stop string,
 * SCHED_ABORTED for a client gone) and reason; 0 none left. */
int live_engine_next_ending(live_t *l, int32_t *id, int32_t *state, char *reason,
                            size_t len);
/* The request reached its final state (sched_state_t), with the core's counts. */
void live_engine_final(live_t *l, int32_t id, int32_t state, const char *reason,
                       int32_t prompt_tokens, int32_t generated);
void live_engine_stats(live_t *l, int32_t waiting, int32_t running, int32_t kv_used,
                       int64_t steps);
/* The engine stopped: open channels end with msg, new submissions are refused. */
void live_engine_close(live_t *l, const char *msg);

/* The served workload as a plain trace (traces/trace.h: arrival_s, prompt_tokens,
 * output_tokens, max_output_tokens), one row per request the engine ended, in arrival
 * order: what a replay (validate) needs. The output length is what the request generated
 * (its true length when it finished; up to where its client left when aborted, 0 when it
 * left while queued, which a replay rejects). Call after the engine stopped. 0, or -1
 * with a message. */
int live_write_trace(live_t *l, const char *path, char *err, size_t errlen);

#endif

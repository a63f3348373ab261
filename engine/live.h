/* live: the hand-over between a server's HTTP threads and the engine thread (`twinserve
 * serve`, cli/cmd_serve.c). HTTP threads submit requests (prompt tokens, max_tokens,
 * sampling, stop strings) into a locked queue and read their output back through a
 * per-request channel; the engine thread (engine_run with engine_opts_t.live) takes the
 * arrivals at step boundaries, emits each step's tokens into the channels, and ends
 * requests early at EOS, a stop string or a client gone (sched_finish_early).
 *
 * Invariants:
 *  - HTTP threads never touch the scheduler, the backend or the records: they only call
 *    live_submit / live_read / live_cancel / live_release / live_metrics / live_encode.
 *    The engine thread alone calls the live_engine_* functions.
 *  - Ids are 0, 1, 2... in submission order and arrivals are taken in that order (the
 *    engine's request table and the recorder's ledger want consecutive ids).
 *  - Every submitted request's channel ends exactly once with a finish reason: "stop" (EOS
 *    or a stop string), "length" (max_tokens or the context), or an error ("aborted: ...",
 *    "rejected: ..."); live_engine_close ends those still open (the server stops).
 *  - Stop strings never reach the client: text that could still turn into one is held
 *    back until it cannot; text is sent only in whole UTF-8 characters (an invalid byte
 *    becomes U+FFFD).
 *  - A request lives until both sides let go: the engine at its final state, the HTTP
 *    thread at live_release. A cancelled request's ending reaches the engine at its next
 *    step boundary, which frees its KV.
 *  - One mutex guards everything shared; the tokenizer is used under it too (tok_t keeps a
 *    decode buffer).
 *
 * Ownership: live_new borrows the tokenizer (NULL: token ids only, no text) for the live
 * object's lifetime; live_free frees the rest. Strings handed to live_submit are copied. */
#ifndef TWIN_LIVE_H
#define TWIN_LIVE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/tokenizer.h"

typedef struct live live_t;
typedef struct live_req live_req_t;

#define LIVE_MAX_STOP 4        /* stop strings per request (OpenAI's limit) */

typedef struct {
    const int32_t *prompt;     /* copied */
    int32_t n_prompt;
    int32_t max_tokens;        /* >= 1, prompt + max_tokens within the context */
    float temperature;         /* 0: greedy */
    float top_p;               /* (0, 1] */
    int has_seed;              /* 0: the engine's stream for the request (run seed, id) */
    uint64_t seed;             /* the request's sampling stream */
    const char *stop[LIVE_MAX_STOP];
    int n_stop;
} live_params_t;

/* What the metrics endpoint shows; the engine updates it at every step boundary. */
typedef struct {
    int ready;                 /* the engine is running (model loaded, clock started) */
    int32_t waiting, running;  /* the scheduler's queue and running list */
    int32_t kv_used, kv_total; /* KV blocks */
    int64_t steps;
    int64_t prompt_tokens, generation_tokens; /* over finished/ended requests' rows */
    int64_t submitted, finished, aborted, rejected;
    int64_t in_flight;         /* submitted, channel not yet ended */
    int32_t max_model_len;
} live_stats_t;

/* A channel read. */
typedef struct {
    int done;                  /* the channel ended: finish_reason (or error) is set */
    char finish_reason[16];    /* "stop" | "length" | "" (error) */
    char error[256];           /* non-empty when the request failed (aborted, rejected) */
    int32_t prompt_tokens, completion_tokens;
} live_status_t;

live_t *live_new(tok_t *tok);
void live_free(live_t *l);

/* --- HTTP threads ------------------------------------------------------------------- */
/* Encodes text (BOS first) under the lock. 0, or -1 with a message. */
int live_encode(live_t *l, const char *text, int32_t *ids, int32_t cap, int32_t *n,
                char *err, size_t errlen);
/* 0 with *out (hold it until live_release); 1 the server is not ready or is stopping
 * (msg says which); -1 out of memory. */
int live_submit(live_t *l, const live_params_t *p, live_req_t **out, char *msg, size_t len);
int32_t live_req_id(const live_req_t *q);
/* Waits up to timeout_s for text or the end: moves the text sent since the last read into
 * buf (at most cap - 1 bytes, NUL-terminated; *n its length) and fills st. Returns 1 when
 * something changed (text or the end), 0 on timeout. */
int live_read(live_req_t *q, char *buf, size_t cap, size_t *n, live_status_t *st,
              double timeout_s);
/* The client went away: the engine aborts the request at its next step boundary. */
void live_cancel(live_req_t *q);
void live_release(live_req_t *q);
void live_metrics(live_t *l, live_stats_t *out);

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
/* The next submission in id order: 1 with *a, 0 none. */
int live_engine_pop(live_t *l, live_arrival_t *a);
/* Waits up to timeout_s for a submission or a cancellation (returns at once if one is
 * pending). */
void live_engine_wait(live_t *l, double timeout_s);
/* A request's sampling parameters over the engine's defaults (sp keeps its idx). */
void live_engine_sampling(live_t *l, int32_t id, bk_sample_t *sp);
/* Tokens a request emitted in a step (after its accepted drafts): decoded, checked for
 * EOS and stop strings, sent. Returns how many of them the request keeps: through the
 * token that ended it (EOS, or the one that completed a stop string), else n. The engine
 * emits only those (accepted drafts after an ending are dropped, as a real server drops
 * them), so the records and usage count the tokens the client got. */
int32_t live_engine_emit(live_t *l, int32_t id, const int32_t *toks, int32_t n);
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

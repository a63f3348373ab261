/* live_internal: the state engine/live.c (submissions, the engine's side, draining, the
 * served trace) and engine/live_out.c (the channels: text, stop strings, pieces, readers)
 * share. Not for other modules: engine/live.h is the interface.
 *
 * Invariants (beyond live.h's):
 *  - A request (live_req_t) holds n choices (live_seq_t), each an engine request of its
 *    own id. refs = 1 (the HTTP side, until live_release) + one per choice whose channel has
 *    not ended (end_channel drops it); the request is freed at 0.
 *  - popped counts the choices the engine took; the request stays at the head of the
 *    submission queue until all n are taken. by_id maps a taken, not yet ended choice's id
 *    to it.
 *  - Pieces queue on the request (one queue for its n choices) in emission order; ends
 *    counts the end pieces queued, ends_read those live_next handed out.
 *  - Everything shared is under live.mu; the fields marked "engine thread" are touched only
 *    there (they need no lock). */
#ifndef TWIN_LIVE_INTERNAL_H
#define TWIN_LIVE_INTERNAL_H

#include <pthread.h>
#include <time.h>

#include "engine/live.h"

typedef struct live_node {
    struct live_node *next;
    live_piece_t p;
} live_node_t;

typedef struct {
    live_req_t *r;
    int32_t id, index;
    /* engine thread only */
    char *text;                     /* decoded output so far (NUL-terminated) */
    size_t text_len, text_cap, sent;
    int32_t prev;                   /* the last token, for the decoder's spacing */
    int ended;                      /* EOS or a stop string: later tokens are dropped */
    int64_t chars;                  /* characters of the emitted tokens' texts */
    char *rel;                      /* scratch: the text a token releases */
    size_t rel_len, rel_cap;
    live_node_t *end_node;          /* its end's piece, allocated at submission */
    /* under the mutex */
    int final;                      /* its end piece is queued */
    int cancelled;
} live_seq_t;

struct live_req {
    live_t *l;
    int refs;
    live_req_t *next;               /* submission queue */
    pthread_cond_t cv;              /* the HTTP thread waits on it for pieces */
    double received;
    /* the submission, immutable once queued */
    int32_t *prompt, n_prompt, max_tokens;
    float temperature, top_p;
    int has_seed;
    uint64_t seed;
    char *stop[LIVE_MAX_STOP];
    int n_stop;
    size_t stop_hold;               /* longest stop string - 1: text that may start one */
    int logprobs;
    int32_t top_logprobs;
    int32_t n;
    live_seq_t *seqs;               /* [n] */
    /* under the mutex */
    int32_t popped, ends, ends_read;
    live_node_t *head, *tail;       /* pieces not yet read */
    size_t head_off;                /* live_read: bytes of the head's text already read */
    live_status_t last;             /* live_read: choice 0's end, once read */
};

typedef struct {
    int32_t id, state;
    char reason[64];
} live_ending_t;

typedef struct {
    double arrival_s;
    int32_t prompt, output, max_tokens;
} live_logged_t;

struct live {
    pthread_mutex_t mu;
    pthread_cond_t engine_cv;       /* the engine's idle wait */
    pthread_cond_t idle_cv;         /* live_wait_idle: in_flight reached 0 */
    tok_t *tok;
    int32_t vocab;                  /* token ids a prompt may hold: 0 .. vocab - 1 */
    int ready, closed, draining;
    char closed_msg[200], drain_msg[200];
    int32_t next_id;
    live_req_t *q_head, *q_tail;    /* submitted, not yet all taken by the engine */
    int wakeups;                    /* submissions or cancellations since the last wait */
    live_seq_t **by_id;             /* the engine's requests, taken and not yet final */
    int64_t by_cap;
    live_ending_t *endings;
    int32_t n_endings, endings_cap;
    double t0;                      /* replay_wall() at the engine's time 0 */
    live_logged_t *log;             /* the ended requests, for live_write_trace */
    int64_t n_log, log_cap;
    int log_failed;                 /* out of memory: the trace would be incomplete */
    live_stats_t stats;
};

/* live_out.c: frees a request's pieces and text buffers (not the request). */
void live_out_free(live_req_t *r);
/* Ends s's channel (mutex held): its held text flushed into an end piece with its status
 * and the core's counts, the engine's hold on the request let go. */
void live_out_end(live_t *l, live_seq_t *s, const char *finish, const char *error,
                  int32_t prompt_tokens, int32_t completion_tokens);
/* Drops one hold on r (mutex held); frees it at the last. */
void live_req_unref(live_req_t *r);
/* Queues an early ending for the engine (mutex held); out of memory: the request then
 * runs to its max_tokens, nothing leaks. */
void live_push_ending(live_t *l, int32_t id, int32_t state, const char *reason);
/* timeout_s from now on the clock pthread_cond_timedwait reads (CLOCK_REALTIME). */
struct timespec live_deadline(double timeout_s);
/* A taken choice by id, or NULL. */
live_seq_t *live_seq_by_id(live_t *l, int32_t id);

#endif

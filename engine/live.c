/* live: see live.h. */
#include "engine/live.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "policies/replay.h"
#include "policies/rng.h"
#include "policies/sched.h"

struct live_req {
    live_t *l;
    int32_t id;
    int refs;                       /* the HTTP thread's and the engine's */
    live_req_t *next;               /* submission queue */
    pthread_cond_t cv;              /* the HTTP thread waits on it for output */
    double received;
    /* the submission, immutable once queued */
    int32_t *prompt, n_prompt, max_tokens;
    float temperature, top_p;
    int has_seed;
    uint64_t seed;
    char *stop[LIVE_MAX_STOP];
    int n_stop;
    size_t stop_hold;               /* longest stop string - 1: text that may start one */
    /* engine thread only */
    char *text;                     /* decoded output so far (NUL-terminated) */
    size_t text_len, text_cap, sent;
    int32_t prev;                   /* the last token, for the decoder's spacing */
    int ended;                      /* EOS or a stop string: later tokens are dropped */
    /* shared, under the mutex */
    char *out;                      /* sent, not yet read */
    size_t out_len, out_cap;
    live_status_t st;
    int cancelled;
};

typedef struct {
    int32_t id, state;
    char reason[64];
} ending_t;

typedef struct {
    double arrival_s;
    int32_t prompt, output, max_tokens;
} logged_t;

struct live {
    pthread_mutex_t mu;
    pthread_cond_t engine_cv;       /* the engine's idle wait */
    tok_t *tok;
    int ready, closed;
    char closed_msg[200];
    int32_t next_id;
    live_req_t *q_head, *q_tail;    /* submitted, not yet taken by the engine */
    int wakeups;                    /* submissions or cancellations since the last wait */
    live_req_t **by_id;             /* the engine's requests, taken and not yet final */
    int64_t by_cap;
    ending_t *endings;
    int32_t n_endings, endings_cap;
    double t0;                      /* replay_wall() at the engine's time 0 */
    logged_t *log;                  /* the ended requests, for live_write_trace */
    int64_t n_log, log_cap;
    int log_failed;                 /* out of memory: the trace would be incomplete */
    live_stats_t stats;
};

live_t *live_new(tok_t *tok) {
    live_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->engine_cv, NULL);
    l->tok = tok;
    return l;
}

static void req_free(live_req_t *q) {
    pthread_cond_destroy(&q->cv);
    free(q->prompt);
    for (int i = 0; i < q->n_stop; i++) free(q->stop[i]);
    free(q->text);
    free(q->out);
    free(q);
}

/* Drops one side's hold; the mutex is held. */
static void req_unref(live_req_t *q) {
    if (--q->refs == 0) req_free(q);
}

void live_free(live_t *l) {
    if (!l) return;
    live_engine_close(l, "the server stopped");
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->engine_cv);
    free(l->by_id);
    free(l->endings);
    free(l->log);
    free(l);
}

/* ------------------------------------------------------------------ text */

/* The length of the UTF-8 character at s (n bytes left): 1-4, 0 when it is cut short by the
 * end, -1 when invalid. */
static int utf8_len(const unsigned char *s, size_t n) {
    int len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
            : (s[0] & 0xF8) == 0xF0 ? 4 : -1;
    if (len <= 1 || (len == 2 && s[0] < 0xC2)) return len == 2 ? -1 : len;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        if ((s[i] & 0xC0) != 0x80) return -1;
    }
    return len;
}

static int out_put(live_req_t *q, const char *s, size_t n) {
    if (q->out_len + n + 1 > q->out_cap) {
        size_t cap = (q->out_len + n + 1) * 2;
        char *v = realloc(q->out, cap);
        if (!v) return -1;
        q->out = v;
        q->out_cap = cap;
    }
    memcpy(q->out + q->out_len, s, n);
    q->out_len += n;
    q->out[q->out_len] = '\0';
    return 0;
}

/* Moves text[sent..upto) to the channel in whole, valid characters: a character cut short
 * at upto waits unless final (then it, like any invalid byte, becomes U+FFFD). Mutex held. */
static void send_text(live_req_t *q, size_t upto, int final) {
    const unsigned char *t = (const unsigned char *)q->text;
    size_t i = q->sent;
    while (i < upto) {
        int n = utf8_len(t + i, upto - i);
        if (n == 0 && !final) break;
        if (n <= 0) {
            out_put(q, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        /* control characters other than tab and newline are dropped, as generate does */
        if (!(n == 1 && t[i] < 0x20 && t[i] != '\n' && t[i] != '\t'))
            out_put(q, q->text + i, (size_t)n);
        i += (size_t)n;
    }
    q->sent = i;
    pthread_cond_broadcast(&q->cv);
}

static int text_append(live_req_t *q, const char *s) {
    size_t n = strlen(s);
    if (q->text_len + n + 1 > q->text_cap) {
        size_t cap = (q->text_len + n + 1) * 2 + 64;
        char *v = realloc(q->text, cap);
        if (!v) return -1;
        q->text = v;
        q->text_cap = cap;
    }
    memcpy(q->text + q->text_len, s, n + 1);
    q->text_len += n;
    return 0;
}

/* ------------------------------------------------------------------ HTTP threads */

/* timeout_s from now on the clock pthread_cond_timedwait reads (CLOCK_REALTIME). */
static struct timespec deadline(double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - floor(end)) * 1e9);
    return ts;
}

int live_encode(live_t *l, const char *text, int32_t *ids, int32_t cap, int32_t *n,
                char *err, size_t errlen) {
    if (!l->tok) {
        snprintf(err, errlen, "the model has no tokenizer: text prompts cannot be encoded");
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    int rc = tok_encode(l->tok, text, 1, 0, ids, cap, n, err, errlen);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int live_submit(live_t *l, const live_params_t *p, live_req_t **out, char *msg, size_t len) {
    *out = NULL;
    live_req_t *q = calloc(1, sizeof *q);
    if (!q) return -1;
    pthread_cond_init(&q->cv, NULL);
    q->l = l;
    q->refs = 2;
    q->prompt = malloc(sizeof *q->prompt * (size_t)(p->n_prompt > 0 ? p->n_prompt : 1));
    if (!q->prompt) goto oom;
    memcpy(q->prompt, p->prompt, sizeof *q->prompt * (size_t)p->n_prompt);
    q->n_prompt = p->n_prompt;
    q->max_tokens = p->max_tokens;
    q->temperature = p->temperature;
    q->top_p = p->top_p;
    q->has_seed = p->has_seed;
    q->seed = p->seed;
    q->prev = p->n_prompt > 0 ? p->prompt[p->n_prompt - 1] : TOK_BOS;
    for (int i = 0; i < p->n_stop && i < LIVE_MAX_STOP; i++) {
        if (!(q->stop[i] = strdup(p->stop[i]))) goto oom;
        q->n_stop = i + 1;
        size_t sl = strlen(p->stop[i]);
        if (sl > 0 && sl - 1 > q->stop_hold) q->stop_hold = sl - 1;
    }
    q->received = replay_wall();
    pthread_mutex_lock(&l->mu);
    if (!l->ready || l->closed) {
        snprintf(msg, len, "%s", l->closed ? l->closed_msg : "the engine is still loading");
        pthread_mutex_unlock(&l->mu);
        req_free(q);
        return 1;
    }
    q->id = l->next_id++;
    if (l->q_tail) l->q_tail->next = q;
    else l->q_head = q;
    l->q_tail = q;
    l->stats.submitted++;
    l->stats.in_flight++;
    l->wakeups++;
    pthread_cond_signal(&l->engine_cv);
    pthread_mutex_unlock(&l->mu);
    *out = q;
    return 0;
oom:
    req_free(q);
    return -1;
}

int32_t live_req_id(const live_req_t *q) { return q->id; }

int live_read(live_req_t *q, char *buf, size_t cap, size_t *n, live_status_t *st,
              double timeout_s) {
    live_t *l = q->l;
    struct timespec ts = deadline(timeout_s);
    pthread_mutex_lock(&l->mu);
    int rc = 0;
    while (q->out_len == 0 && !q->st.done)
        if (pthread_cond_timedwait(&q->cv, &l->mu, &ts) == ETIMEDOUT) break;
    *n = 0;
    if (q->out_len > 0 && cap > 1) {
        size_t k = q->out_len < cap - 1 ? q->out_len : cap - 1;
        /* only whole characters: the channel holds valid UTF-8 */
        while (k < q->out_len && k > 0 && ((unsigned char)q->out[k] & 0xC0) == 0x80) k--;
        memcpy(buf, q->out, k);
        buf[k] = '\0';
        memmove(q->out, q->out + k, q->out_len - k + 1);
        q->out_len -= k;
        *n = k;
        rc = 1;
    }
    if (q->st.done) rc = 1;
    *st = q->st;
    /* the end is reported once all text was read */
    if (q->out_len > 0) st->done = 0;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

static void push_ending(live_t *l, int32_t id, int32_t state, const char *reason) {
    if (l->n_endings == l->endings_cap) {
        int32_t cap = l->endings_cap ? l->endings_cap * 2 : 16;
        ending_t *v = realloc(l->endings, sizeof *v * (size_t)cap);
        if (!v) return; /* the request then runs to its max_tokens: nothing leaks */
        l->endings = v;
        l->endings_cap = cap;
    }
    ending_t *e = &l->endings[l->n_endings++];
    e->id = id;
    e->state = state;
    snprintf(e->reason, sizeof e->reason, "%s", reason);
}

void live_cancel(live_req_t *q) {
    live_t *l = q->l;
    pthread_mutex_lock(&l->mu);
    if (!q->st.done && !q->cancelled) {
        q->cancelled = 1;
        push_ending(l, q->id, SCHED_ABORTED, "client disconnected");
        l->wakeups++;
        pthread_cond_signal(&l->engine_cv);
    }
    pthread_mutex_unlock(&l->mu);
}

void live_release(live_req_t *q) {
    live_t *l = q->l;
    pthread_mutex_lock(&l->mu);
    req_unref(q);
    pthread_mutex_unlock(&l->mu);
}

void live_metrics(live_t *l, live_stats_t *out) {
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    pthread_mutex_unlock(&l->mu);
}

/* ------------------------------------------------------------------ the engine thread */

void live_engine_ready(live_t *l, double t0, int32_t max_model_len, int32_t kv_total) {
    pthread_mutex_lock(&l->mu);
    l->t0 = t0;
    l->ready = 1;
    l->stats.ready = 1;
    l->stats.max_model_len = max_model_len;
    l->stats.kv_total = kv_total;
    pthread_mutex_unlock(&l->mu);
}

int32_t live_prompt_hashes(const int32_t *toks, int32_t n, int32_t block, int64_t *out) {
    uint64_t h = 0x6c69766570726566ULL; /* "liveprefix" */
    int32_t full = block > 0 ? n / block : 0;
    for (int32_t i = 0; i < full; i++) {
        /* chained: block i's name covers every token before it too */
        for (int32_t j = i * block; j < (i + 1) * block; j++) {
            h ^= (uint64_t)(uint32_t)toks[j];
            h *= 0x100000001b3ULL;
            h ^= h >> 29;
        }
        uint64_t x = h;
        out[i] = (int64_t)rng_splitmix64(&x);
    }
    return full;
}

static live_req_t *by_id(live_t *l, int32_t id) {
    return id >= 0 && id < l->by_cap ? l->by_id[id] : NULL;
}

int live_engine_pop(live_t *l, live_arrival_t *a) {
    pthread_mutex_lock(&l->mu);
    live_req_t *q = l->q_head;
    if (q && q->id >= l->by_cap) {
        int64_t cap = l->by_cap ? l->by_cap * 2 : 1024;
        while (cap <= q->id) cap *= 2;
        live_req_t **v = realloc(l->by_id, sizeof *v * (size_t)cap);
        if (!v) q = NULL; /* taken at a later step boundary */
        else {
            memset(v + l->by_cap, 0, sizeof *v * (size_t)(cap - l->by_cap));
            l->by_id = v;
            l->by_cap = cap;
        }
    }
    if (q) {
        l->q_head = q->next;
        if (!l->q_head) l->q_tail = NULL;
        l->by_id[q->id] = q;
        *a = (live_arrival_t){ .id = q->id, .received = q->received, .prompt = q->prompt,
                               .n_prompt = q->n_prompt, .max_tokens = q->max_tokens };
    }
    pthread_mutex_unlock(&l->mu);
    return q != NULL;
}

void live_engine_wait(live_t *l, double timeout_s) {
    if (!(timeout_s > 0)) return;
    if (timeout_s > 3600) timeout_s = 3600;
    struct timespec ts = deadline(timeout_s);
    pthread_mutex_lock(&l->mu);
    while (l->wakeups == 0)
        if (pthread_cond_timedwait(&l->engine_cv, &l->mu, &ts) == ETIMEDOUT) break;
    l->wakeups = 0;
    pthread_mutex_unlock(&l->mu);
}

void live_engine_sampling(live_t *l, int32_t id, bk_sample_t *sp) {
    const live_req_t *q = by_id(l, id);
    if (!q) return;
    sp->temperature = q->temperature;
    sp->top_p = q->top_p;
    sp->top_k = 0;
    if (q->has_seed) sp->seed = q->seed;
}

/* The first stop string in text from byte `from` on: its offset, or -1. */
static int64_t find_stop(const live_req_t *q, size_t from) {
    int64_t best = -1;
    for (int i = 0; i < q->n_stop; i++) {
        if (!q->stop[i][0]) continue;
        const char *hit = strstr(q->text + from, q->stop[i]);
        if (hit && (best < 0 || hit - q->text < best)) best = hit - q->text;
    }
    return best;
}

int32_t live_engine_emit(live_t *l, int32_t id, const int32_t *toks, int32_t n) {
    live_req_t *q = by_id(l, id);
    if (!q) return n;
    pthread_mutex_lock(&l->mu);
    int32_t kept = n;
    for (int32_t i = 0; i < n && !q->ended; i++) {
        if (toks[i] == TOK_EOS) {
            q->ended = 1;
            kept = i + 1;
            push_ending(l, id, SCHED_FINISHED, "stop: eos");
            break;
        }
        size_t before = q->text_len;
        if (l->tok && text_append(q, tok_decode(l->tok, q->prev, toks[i])) != 0) break;
        q->prev = toks[i];
        if (q->n_stop == 0) continue;
        /* a stop string may straddle the new piece: look from where one could begin */
        size_t from = before > q->stop_hold ? before - q->stop_hold : 0;
        int64_t at = find_stop(q, from);
        if (at >= 0) {
            q->text_len = (size_t)at;
            q->text[at] = '\0';
            q->ended = 1;
            kept = i + 1;
            push_ending(l, id, SCHED_FINISHED, "stop: stop string");
        }
    }
    size_t upto = q->text_len;
    if (!q->ended) upto = upto > q->stop_hold ? upto - q->stop_hold : 0;
    if (upto < q->sent) upto = q->sent;
    send_text(q, upto, 0);
    pthread_mutex_unlock(&l->mu);
    return kept;
}

int live_engine_next_ending(live_t *l, int32_t *id, int32_t *state, char *reason,
                            size_t len) {
    pthread_mutex_lock(&l->mu);
    int have = l->n_endings > 0;
    if (have) {
        ending_t e = l->endings[0];
        memmove(l->endings, l->endings + 1, sizeof e * (size_t)(l->n_endings - 1));
        l->n_endings--;
        *id = e.id;
        *state = e.state;
        snprintf(reason, len, "%s", e.reason);
    }
    pthread_mutex_unlock(&l->mu);
    return have;
}

/* Ends q's channel (mutex held): its text flushed, its status set, the engine's hold let go. */
static void end_channel(live_t *l, live_req_t *q, const char *finish, const char *error) {
    if (q->text) send_text(q, q->text_len, 1);
    snprintf(q->st.finish_reason, sizeof q->st.finish_reason, "%s", finish);
    snprintf(q->st.error, sizeof q->st.error, "%s", error ? error : "");
    q->st.done = 1;
    l->stats.in_flight--;
    pthread_cond_broadcast(&q->cv);
    if (q->id >= 0 && q->id < l->by_cap && l->by_id[q->id] == q) l->by_id[q->id] = NULL;
    req_unref(q);
}

void live_engine_final(live_t *l, int32_t id, int32_t state, const char *reason,
                       int32_t prompt_tokens, int32_t generated) {
    live_req_t *q = by_id(l, id);
    if (!q) return;
    pthread_mutex_lock(&l->mu);
    q->st.prompt_tokens = prompt_tokens;
    q->st.completion_tokens = generated;
    l->stats.prompt_tokens += prompt_tokens;
    l->stats.generation_tokens += generated;
    if (l->n_log == l->log_cap) {
        int64_t cap = l->log_cap ? l->log_cap * 2 : 1024;
        logged_t *v = realloc(l->log, sizeof *v * (size_t)cap);
        if (v) {
            l->log = v;
            l->log_cap = cap;
        }
    }
    if (l->n_log < l->log_cap)
        l->log[l->n_log++] = (logged_t){ q->received - l->t0, prompt_tokens, generated,
                                         q->max_tokens };
    else
        l->log_failed = 1;
    char err[256] = "";
    if (state == SCHED_FINISHED) {
        l->stats.finished++;
    } else if (state == SCHED_REJECTED) {
        l->stats.rejected++;
        snprintf(err, sizeof err, "rejected: %s", reason ? reason : "");
    } else {
        l->stats.aborted++;
        snprintf(err, sizeof err, "aborted: %s", reason ? reason : "");
    }
    end_channel(l, q, err[0] ? "" : q->ended ? "stop" : "length", err[0] ? err : NULL);
    pthread_mutex_unlock(&l->mu);
}

void live_engine_stats(live_t *l, int32_t waiting, int32_t running, int32_t kv_used,
                       int64_t steps) {
    pthread_mutex_lock(&l->mu);
    l->stats.waiting = waiting;
    l->stats.running = running;
    l->stats.kv_used = kv_used;
    l->stats.steps = steps;
    pthread_mutex_unlock(&l->mu);
}

void live_engine_close(live_t *l, const char *msg) {
    pthread_mutex_lock(&l->mu);
    if (!l->closed) snprintf(l->closed_msg, sizeof l->closed_msg, "%s", msg);
    l->closed = 1;
    l->stats.ready = 0;
    char err[256];
    snprintf(err, sizeof err, "aborted: %s", msg);
    while (l->q_head) {
        live_req_t *q = l->q_head;
        l->q_head = q->next;
        end_channel(l, q, "", err);
    }
    l->q_tail = NULL;
    for (int64_t i = 0; i < l->by_cap; i++)
        if (l->by_id[i]) end_channel(l, l->by_id[i], "", err);
    pthread_mutex_unlock(&l->mu);
}

static int by_arrival(const void *a, const void *b) {
    double x = ((const logged_t *)a)->arrival_s, y = ((const logged_t *)b)->arrival_s;
    return x < y ? -1 : x > y;
}

int live_write_trace(live_t *l, const char *path, char *err, size_t errlen) {
    pthread_mutex_lock(&l->mu);
    int rc = -1;
    FILE *f = NULL;
    if (l->log_failed) {
        snprintf(err, errlen, "out of memory logging the served requests");
        goto done;
    }
    qsort(l->log, (size_t)l->n_log, sizeof *l->log, by_arrival);
    if (!(f = fopen(path, "w"))) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto done;
    }
    fputs("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n", f);
    for (int64_t i = 0; i < l->n_log; i++)
        fprintf(f, "%.9f,%d,%d,%d\n", l->log[i].arrival_s > 0 ? l->log[i].arrival_s : 0,
                l->log[i].prompt, l->log[i].output, l->log[i].max_tokens);
    rc = 0;
done:
    if (f && fclose(f) != 0 && rc == 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        rc = -1;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

/* live: see live.h. The channels (text, stop strings, pieces, readers) are live_out.c's;
 * the state both share is live_internal.h's. */
#include "engine/live.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/live_internal.h"
#include "policies/replay.h"
#include "traces/rng.h"
#include "policies/sched.h"

live_t *live_new(tok_t *tok, int32_t vocab) {
    live_t *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->engine_cv, NULL);
    pthread_cond_init(&l->idle_cv, NULL);
    l->tok = tok;
    l->vocab = tok ? tok_vocab(tok) : vocab;
    return l;
}

static void req_free(live_req_t *r) {
    pthread_cond_destroy(&r->cv);
    live_out_free(r);
    free(r->prompt);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->seqs);
    free(r);
}

void live_req_unref(live_req_t *r) {
    if (--r->refs == 0) req_free(r);
}

void live_free(live_t *l) {
    if (!l) return;
    live_engine_close(l, "the server stopped");
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->engine_cv);
    pthread_cond_destroy(&l->idle_cv);
    free(l->by_id);
    free(l->endings);
    free(l->log);
    free(l);
}

/* timeout_s from now on the clock pthread_cond_timedwait reads (CLOCK_REALTIME). */
struct timespec live_deadline(double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double end = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + timeout_s;
    ts.tv_sec = (time_t)end;
    ts.tv_nsec = (long)((end - floor(end)) * 1e9);
    return ts;
}

/* ------------------------------------------------------------------ HTTP threads */

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

int32_t live_vocab(const live_t *l) { return l->vocab; }

int live_submit(live_t *l, const live_params_t *p, live_req_t **out, char *msg, size_t len) {
    *out = NULL;
    int32_t n = p->n > 0 ? p->n : 1;
    if (n > LIVE_MAX_N) n = LIVE_MAX_N;
    live_req_t *r = calloc(1, sizeof *r);
    if (!r) return -1;
    pthread_cond_init(&r->cv, NULL);
    r->l = l;
    r->n = n;
    r->refs = 1 + n;
    r->prompt = malloc(sizeof *r->prompt * (size_t)(p->n_prompt > 0 ? p->n_prompt : 1));
    r->seqs = calloc((size_t)n, sizeof *r->seqs);
    if (!r->prompt || !r->seqs) goto oom;
    memcpy(r->prompt, p->prompt, sizeof *r->prompt * (size_t)p->n_prompt);
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->temperature = p->temperature;
    r->top_p = p->top_p;
    r->has_seed = p->has_seed;
    r->seed = p->seed;
    r->logprobs = p->logprobs;
    r->top_logprobs = p->top_logprobs < 0 ? 0 : p->top_logprobs > LIVE_MAX_LOGPROBS
                                                    ? LIVE_MAX_LOGPROBS : p->top_logprobs;
    for (int i = 0; i < p->n_stop && i < LIVE_MAX_STOP; i++) {
        if (!(r->stop[i] = strdup(p->stop[i]))) goto oom;
        r->n_stop = i + 1;
        size_t sl = strlen(p->stop[i]);
        if (sl > 0 && sl - 1 > r->stop_hold) r->stop_hold = sl - 1;
    }
    for (int32_t i = 0; i < n; i++) {
        r->seqs[i] = (live_seq_t){ .r = r, .index = i,
                                   .prev = p->n_prompt > 0 ? p->prompt[p->n_prompt - 1]
                                                           : TOK_BOS };
        if (!(r->seqs[i].end_node = calloc(1, sizeof *r->seqs[i].end_node))) goto oom;
    }
    r->received = replay_wall();
    pthread_mutex_lock(&l->mu);
    if (!l->ready || l->closed || l->draining) {
        snprintf(msg, len, "%s", l->closed     ? l->closed_msg
                                 : l->draining ? l->drain_msg
                                               : "the engine is still loading");
        pthread_mutex_unlock(&l->mu);
        req_free(r);
        return 1;
    }
    for (int32_t i = 0; i < n; i++) r->seqs[i].id = l->next_id++;
    if (l->q_tail) l->q_tail->next = r;
    else l->q_head = r;
    l->q_tail = r;
    l->stats.submitted += n;
    l->stats.in_flight += n;
    l->wakeups++;
    pthread_cond_signal(&l->engine_cv);
    pthread_mutex_unlock(&l->mu);
    *out = r;
    return 0;
oom:
    req_free(r);
    return -1;
}

int32_t live_req_id(const live_req_t *q) { return q->seqs[0].id; }
int32_t live_req_choices(const live_req_t *q) { return q->n; }

void live_push_ending(live_t *l, int32_t id, int32_t state, const char *reason) {
    if (l->n_endings == l->endings_cap) {
        int32_t cap = l->endings_cap ? l->endings_cap * 2 : 16;
        live_ending_t *v = realloc(l->endings, sizeof *v * (size_t)cap);
        if (!v) return;
        l->endings = v;
        l->endings_cap = cap;
    }
    live_ending_t *e = &l->endings[l->n_endings++];
    e->id = id;
    e->state = state;
    snprintf(e->reason, sizeof e->reason, "%s", reason);
}

void live_cancel(live_req_t *q) {
    live_t *l = q->l;
    pthread_mutex_lock(&l->mu);
    int any = 0;
    for (int32_t i = 0; i < q->n; i++) {
        live_seq_t *s = &q->seqs[i];
        if (s->final || s->cancelled) continue;
        s->cancelled = 1;
        live_push_ending(l, s->id, SCHED_ABORTED, "client disconnected");
        any = 1;
    }
    if (any) {
        l->wakeups++;
        pthread_cond_signal(&l->engine_cv);
    }
    pthread_mutex_unlock(&l->mu);
}

void live_release(live_req_t *q) {
    live_t *l = q->l;
    pthread_mutex_lock(&l->mu);
    live_req_unref(q);
    pthread_mutex_unlock(&l->mu);
}

void live_metrics(live_t *l, live_stats_t *out) {
    pthread_mutex_lock(&l->mu);
    *out = l->stats;
    pthread_mutex_unlock(&l->mu);
}

void live_drain(live_t *l, const char *msg) {
    pthread_mutex_lock(&l->mu);
    if (!l->draining) snprintf(l->drain_msg, sizeof l->drain_msg, "%s", msg);
    l->draining = 1;
    l->stats.draining = 1;
    pthread_mutex_unlock(&l->mu);
}

int live_wait_idle(live_t *l, double timeout_s) {
    struct timespec ts = live_deadline(timeout_s > 0 ? timeout_s : 0);
    pthread_mutex_lock(&l->mu);
    while (l->stats.in_flight > 0)
        if (pthread_cond_timedwait(&l->idle_cv, &l->mu, &ts) == ETIMEDOUT) break;
    int idle = l->stats.in_flight == 0;
    pthread_mutex_unlock(&l->mu);
    return idle;
}

void live_nudge(live_t *l) {
    pthread_mutex_lock(&l->mu);
    l->wakeups++;
    pthread_cond_signal(&l->engine_cv);
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

void live_engine_offer_logprobs(live_t *l) {
    pthread_mutex_lock(&l->mu);
    l->stats.logprobs = 1;
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

live_seq_t *live_seq_by_id(live_t *l, int32_t id) {
    return id >= 0 && id < l->by_cap ? l->by_id[id] : NULL;
}

int live_engine_pop(live_t *l, live_arrival_t *a) {
    pthread_mutex_lock(&l->mu);
    live_req_t *r = l->q_head;
    live_seq_t *s = r ? &r->seqs[r->popped] : NULL;
    if (s && s->id >= l->by_cap) {
        int64_t cap = l->by_cap ? l->by_cap * 2 : 1024;
        while (cap <= s->id) cap *= 2;
        live_seq_t **v = realloc(l->by_id, sizeof *v * (size_t)cap);
        if (!v) s = NULL; /* taken at a later step boundary */
        else {
            memset(v + l->by_cap, 0, sizeof *v * (size_t)(cap - l->by_cap));
            l->by_id = v;
            l->by_cap = cap;
        }
    }
    if (s) {
        if (++r->popped == r->n) {
            l->q_head = r->next;
            if (!l->q_head) l->q_tail = NULL;
        }
        l->by_id[s->id] = s;
        *a = (live_arrival_t){ .id = s->id, .received = r->received, .prompt = r->prompt,
                               .n_prompt = r->n_prompt, .max_tokens = r->max_tokens };
    }
    pthread_mutex_unlock(&l->mu);
    return s != NULL;
}

void live_engine_wait(live_t *l, double timeout_s) {
    if (!(timeout_s > 0)) return;
    if (timeout_s > 3600) timeout_s = 3600;
    struct timespec ts = live_deadline(timeout_s);
    pthread_mutex_lock(&l->mu);
    while (l->wakeups == 0)
        if (pthread_cond_timedwait(&l->engine_cv, &l->mu, &ts) == ETIMEDOUT) break;
    l->wakeups = 0;
    pthread_mutex_unlock(&l->mu);
}

void live_engine_sampling(live_t *l, int32_t id, bk_sample_t *sp) {
    const live_seq_t *s = live_seq_by_id(l, id);
    if (!s) return;
    const live_req_t *r = s->r;
    sp->temperature = r->temperature;
    sp->top_p = r->top_p;
    sp->top_k = 0;
    /* choice i of a seeded request: seed + i (vLLM's parallel sampling) */
    if (r->has_seed) sp->seed = r->seed + (uint64_t)s->index;
}

int live_engine_next_ending(live_t *l, int32_t *id, int32_t *state, char *reason,
                            size_t len) {
    pthread_mutex_lock(&l->mu);
    int have = l->n_endings > 0;
    if (have) {
        live_ending_t e = l->endings[0];
        memmove(l->endings, l->endings + 1, sizeof e * (size_t)(l->n_endings - 1));
        l->n_endings--;
        *id = e.id;
        *state = e.state;
        snprintf(reason, len, "%s", e.reason);
    }
    pthread_mutex_unlock(&l->mu);
    return have;
}

void live_engine_final(live_t *l, int32_t id, int32_t state, const char *reason,
                       int32_t prompt_tokens, int32_t generated) {
    live_seq_t *s = live_seq_by_id(l, id);
    if (!s) return;
    pthread_mutex_lock(&l->mu);
    l->stats.prompt_tokens += prompt_tokens;
    l->stats.generation_tokens += generated;
    if (l->n_log == l->log_cap) {
        int64_t cap = l->log_cap ? l->log_cap * 2 : 1024;
        live_logged_t *v = realloc(l->log, sizeof *v * (size_t)cap);
        if (v) {
            l->log = v;
            l->log_cap = cap;
        }
    }
    if (l->n_log < l->log_cap)
        l->log[l->n_log++] = (live_logged_t){ s->r->received - l->t0, prompt_tokens, generated,
                                              s->r->max_tokens };
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
    live_out_end(l, s, err[0] ? "" : s->ended ? "stop" : "length", err[0] ? err : NULL,
                 prompt_tokens, generated);
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
    while (l->q_head) { /* the choices the engine never took */
        live_req_t *r = l->q_head;
        l->q_head = r->next;
        int32_t from = r->popped, n = r->n;
        r->popped = n;
        for (int32_t i = from; i < n; i++) live_out_end(l, &r->seqs[i], "", err, 0, 0);
    }
    l->q_tail = NULL;
    for (int64_t i = 0; i < l->by_cap; i++)
        if (l->by_id[i]) live_out_end(l, l->by_id[i], "", err, 0, 0);
    pthread_mutex_unlock(&l->mu);
}

static int by_arrival(const void *a, const void *b) {
    double x = ((const live_logged_t *)a)->arrival_s, y = ((const live_logged_t *)b)->arrival_s;
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

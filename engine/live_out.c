/* live_out: the channels of engine/live.h: a step's tokens decoded, checked for EOS and
 * stop strings, released in whole characters, queued one piece per token (with its
 * log-probabilities when asked), and read back by the HTTP threads (live_next, live_read).
 * The shared state is engine/live_internal.h's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/live_internal.h"
#include "policies/sched.h"

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

/* Characters in s as a client counts them: a whole character is one, and so is each byte
 * that is not part of one (it becomes U+FFFD). */
static int64_t utf8_chars(const char *s) {
    const unsigned char *t = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    int64_t c = 0;
    while (i < n) {
        int k = utf8_len(t + i, n - i);
        i += k > 0 ? (size_t)k : 1;
        c++;
    }
    return c;
}

static int rel_put(live_seq_t *s, const char *p, size_t n) {
    if (s->rel_len + n + 1 > s->rel_cap) {
        size_t cap = (s->rel_len + n + 1) * 2 + 32;
        char *v = realloc(s->rel, cap);
        if (!v) return -1;
        s->rel = v;
        s->rel_cap = cap;
    }
    memcpy(s->rel + s->rel_len, p, n);
    s->rel_len += n;
    s->rel[s->rel_len] = '\0';
    return 0;
}

/* Moves text[sent..upto) into s->rel in whole, valid characters: a character cut short at
 * upto waits unless final (then it, like any invalid byte, becomes U+FFFD). */
static void release(live_seq_t *s, size_t upto, int final) {
    const unsigned char *t = (const unsigned char *)s->text;
    size_t i = s->sent;
    s->rel_len = 0;
    if (s->rel) s->rel[0] = '\0';
    while (i < upto) {
        int n = utf8_len(t + i, upto - i);
        if (n == 0 && !final) break;
        if (n <= 0) {
            rel_put(s, "\xEF\xBF\xBD", 3);
            i++;
            continue;
        }
        /* control characters other than tab and newline are dropped, as generate does */
        if (!(n == 1 && t[i] < 0x20 && t[i] != '\n' && t[i] != '\t'))
            rel_put(s, s->text + i, (size_t)n);
        i += (size_t)n;
    }
    s->sent = i;
}

static int text_append(live_seq_t *s, const char *p) {
    size_t n = strlen(p);
    if (s->text_len + n + 1 > s->text_cap) {
        size_t cap = (s->text_len + n + 1) * 2 + 64;
        char *v = realloc(s->text, cap);
        if (!v) return -1;
        s->text = v;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, p, n + 1);
    s->text_len += n;
    return 0;
}

/* ------------------------------------------------------------------ pieces */

/* A piece's strings, gathered into one allocation: offsets first (the buffer moves as it
 * grows), pointers once it is complete. */
typedef struct {
    char *b;
    size_t len, cap;
    int oom;
} blob_t;

static size_t blob_put(blob_t *x, const char *s) {
    size_t n = s ? strlen(s) : 0, at = x->len;
    if (x->len + n + 1 > x->cap) {
        size_t cap = (x->len + n + 1) * 2 + 64;
        char *v = realloc(x->b, cap);
        if (!v) {
            x->oom = 1;
            return 0;
        }
        x->b = v;
        x->cap = cap;
    }
    if (n) memcpy(x->b + at, s, n);
    x->b[at + n] = '\0';
    x->len += n + 1;
    return at;
}

/* Queues a piece on r (mutex held): text (released), and for a token its id, own text and
 * log-probabilities (alt_text: the alternatives' texts, n_top of them). nd: the node to
 * use (an end's, allocated at submission so that an end always arrives), or NULL. Out of
 * memory: a token's piece is dropped, an end is queued without its text. */
static void queue_piece(live_req_t *r, live_node_t *nd, const live_piece_t *p, const char *text,
                        const char *tok_text, const char *const *alt_text) {
    static const char empty[] = "";
    if (!nd && !(nd = calloc(1, sizeof *nd))) return;
    blob_t x = { 0 };
    size_t o_text = blob_put(&x, text), o_tok = blob_put(&x, tok_text), o_alt[LIVE_MAX_LOGPROBS];
    for (int32_t j = 0; j < p->n_top; j++) o_alt[j] = blob_put(&x, alt_text[j]);
    if (x.oom) {
        free(x.b);
        x.b = NULL;
        if (!p->end) {
            free(nd);
            return;
        }
    }
    nd->next = NULL;
    nd->p = *p;
    nd->p.mem_ = x.b;
    nd->p.text = x.b ? x.b + o_text : empty;
    nd->p.token_text = x.b ? x.b + o_tok : empty;
    for (int32_t j = 0; j < p->n_top; j++) nd->p.top[j].text = x.b ? x.b + o_alt[j] : empty;
    if (r->tail) r->tail->next = nd;
    else r->head = nd;
    r->tail = nd;
    if (p->end) r->ends++;
    pthread_cond_broadcast(&r->cv);
}

void live_piece_clear(live_piece_t *p) {
    free(p->mem_);
    memset(p, 0, sizeof *p);
}

void live_out_free(live_req_t *r) {
    while (r->head) {
        live_node_t *nd = r->head;
        r->head = nd->next;
        free(nd->p.mem_);
        free(nd);
    }
    for (int32_t i = 0; r->seqs && i < r->n; i++) {
        free(r->seqs[i].text);
        free(r->seqs[i].rel);
        free(r->seqs[i].end_node);
    }
}

void live_out_end(live_t *l, live_seq_t *s, const char *finish, const char *error,
                  int32_t prompt_tokens, int32_t completion_tokens) {
    live_req_t *r = s->r;
    live_piece_t p = { .index = s->index, .end = 1, .token = -1 };
    s->rel_len = 0;
    if (s->text) release(s, s->text_len, 1);
    p.st = (live_status_t){ .done = 1, .prompt_tokens = prompt_tokens,
                            .completion_tokens = completion_tokens };
    snprintf(p.st.finish_reason, sizeof p.st.finish_reason, "%s", finish);
    snprintf(p.st.error, sizeof p.st.error, "%s", error ? error : "");
    s->final = 1;
    live_node_t *nd = s->end_node;
    s->end_node = NULL;
    queue_piece(r, nd, &p, s->rel_len ? s->rel : "", "", NULL);
    l->stats.in_flight--;
    if (l->stats.in_flight == 0) pthread_cond_broadcast(&l->idle_cv);
    if (s->id >= 0 && s->id < l->by_cap && l->by_id[s->id] == s) l->by_id[s->id] = NULL;
    live_req_unref(r);
}

/* ------------------------------------------------------------------ the engine thread */

/* The first stop string in text from byte `from` on: its offset, or -1. */
static int64_t find_stop(const live_req_t *r, const live_seq_t *s, size_t from) {
    int64_t best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        if (!r->stop[i][0]) continue;
        const char *hit = strstr(s->text + from, r->stop[i]);
        if (hit && (best < 0 || hit - s->text < best)) best = hit - s->text;
    }
    return best;
}

int live_engine_logprobs(live_t *l, int32_t id) {
    const live_seq_t *s = live_seq_by_id(l, id);
    return s && s->r->logprobs;
}

/* The log-probabilities of token `tok` at this position from its row into p, with the
 * alternatives' texts (decoded after prev, malloc'd: the caller frees them) into alt.
 * Mutex held (the decoder's buffer). */
static void piece_logprobs(live_t *l, const live_req_t *r, const float *row, int32_t vocab,
                           int32_t prev, int32_t tok, live_piece_t *p, char **alt) {
    logprob_alt_t top[LIVE_MAX_LOGPROBS];
    p->has_logprob = 1;
    p->n_top = logprob_row(row, vocab, tok, r->top_logprobs, &p->logprob, top);
    for (int32_t j = 0; j < p->n_top; j++) {
        p->top[j].id = top[j].id;
        p->top[j].logprob = top[j].logprob;
        alt[j] = strdup(l->tok ? tok_decode(l->tok, prev, top[j].id) : "");
    }
}

/* One token of a choice that has not ended (mutex held): 1 when it ends the choice. */
static int emit_one(live_t *l, live_seq_t *s, int32_t tok, const float *row, int32_t vocab) {
    live_req_t *r = s->r;
    if (tok == TOK_EOS) { /* no piece: the choice's end stands for it */
        s->ended = 1;
        live_push_ending(l, s->id, SCHED_FINISHED, "stop: eos");
        return 1;
    }
    live_piece_t p = { .index = s->index, .token = tok, .text_offset = s->chars };
    char *alt[LIVE_MAX_LOGPROBS] = { 0 };
    if (row && r->logprobs && vocab > 0) piece_logprobs(l, r, row, vocab, s->prev, tok, &p, alt);
    size_t before = s->text_len;
    if (l->tok && text_append(s, tok_decode(l->tok, s->prev, tok)) != 0) {
        for (int32_t j = 0; j < p.n_top; j++) free(alt[j]);
        return 0; /* out of memory: the token goes without text */
    }
    s->prev = tok;
    char *own = strdup(s->text ? s->text + before : "");
    s->chars += utf8_chars(own ? own : "");
    if (r->n_stop > 0 && s->text) {
        /* a stop string may straddle the new piece: look from where one could begin */
        int64_t at = find_stop(r, s, before > r->stop_hold ? before - r->stop_hold : 0);
        if (at >= 0) {
            s->text_len = (size_t)at;
            s->text[at] = '\0';
            s->ended = 1;
            live_push_ending(l, s->id, SCHED_FINISHED, "stop: stop string");
        }
    }
    size_t upto = s->text_len;
    if (!s->ended) upto = upto > r->stop_hold ? upto - r->stop_hold : 0;
    if (upto < s->sent) upto = s->sent;
    s->rel_len = 0;
    if (s->text) release(s, upto, 0);
    queue_piece(r, NULL, &p, s->rel_len ? s->rel : "", own ? own : "",
                (const char *const *)alt);
    free(own);
    for (int32_t j = 0; j < p.n_top; j++) free(alt[j]);
    return s->ended;
}

int32_t live_engine_emit_logits(live_t *l, int32_t id, const int32_t *toks, int32_t n,
                                const float *rows, int32_t vocab) {
    live_seq_t *s = live_seq_by_id(l, id);
    if (!s) return n;
    pthread_mutex_lock(&l->mu);
    int32_t kept = n;
    for (int32_t i = 0; i < n && !s->ended; i++)
        if (emit_one(l, s, toks[i], rows ? rows + (size_t)i * (size_t)vocab : NULL, vocab))
            kept = i + 1;
    pthread_mutex_unlock(&l->mu);
    return kept;
}

int32_t live_engine_emit(live_t *l, int32_t id, const int32_t *toks, int32_t n) {
    return live_engine_emit_logits(l, id, toks, n, NULL, 0);
}

/* ------------------------------------------------------------------ HTTP threads */

static live_node_t *pop_node(live_req_t *r) {
    live_node_t *nd = r->head;
    r->head = nd->next;
    if (!r->head) r->tail = NULL;
    r->head_off = 0;
    if (nd->p.end) r->ends_read++;
    return nd;
}

int live_next(live_req_t *q, live_piece_t *out, double timeout_s) {
    live_t *l = q->l;
    struct timespec ts = live_deadline(timeout_s);
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&l->mu);
    int rc = 0;
    /* no wait at all for a timeout of 0: a condition wait whose deadline has passed still
     * joins the waiters, and made the engine's broadcasts slow enough to delay a stream's
     * first event by 3 ms */
    while (timeout_s > 0 && !q->head && q->ends_read < q->n)
        if (pthread_cond_timedwait(&q->cv, &l->mu, &ts) == ETIMEDOUT) break;
    if (q->head) {
        live_node_t *nd = pop_node(q);
        *out = nd->p;
        free(nd);
        rc = 1;
    } else if (q->ends_read >= q->n) {
        rc = -1;
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int live_read(live_req_t *q, char *buf, size_t cap, size_t *n, live_status_t *st,
              double timeout_s) {
    live_t *l = q->l;
    struct timespec ts = live_deadline(timeout_s);
    size_t len = 0;
    int rc = 0;
    buf[0] = '\0';
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (q->head && cap > 1) {
            live_piece_t *p = &q->head->p;
            const char *t = p->text + q->head_off;
            size_t k = strlen(t), room = cap - 1 - len;
            if (k > room) { /* only whole characters: the channel holds valid UTF-8 */
                k = room;
                while (k > 0 && ((unsigned char)t[k] & 0xC0) == 0x80) k--;
            }
            memcpy(buf + len, t, k);
            len += k;
            buf[len] = '\0';
            q->head_off += k;
            if (t[k] != '\0') break; /* buf is full */
            if (p->end && p->index == 0) q->last = p->st;
            live_node_t *nd = pop_node(q);
            free(nd->p.mem_);
            free(nd);
        }
        if (len > 0 || q->last.done) {
            rc = 1;
            break;
        }
        if (!(timeout_s > 0) || pthread_cond_timedwait(&q->cv, &l->mu, &ts) == ETIMEDOUT)
            break;
    }
    *n = len;
    *st = q->last;
    if (q->head) st->done = 0; /* the end is reported once all text was read */
    pthread_mutex_unlock(&l->mu);
    return rc;
}

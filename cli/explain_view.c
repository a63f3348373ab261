/* explain_view: see explain_view.h. */
#include "cli/explain_view.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { QUEUE_SHOWN = 10 };

/* Appends one formatted line (the newline is added) to b; sets x->oom on failure. */
static void put(explain_rec_t *x, explain_block_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t need = b->len + (size_t)n + 2;
    if (need > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < need) cap *= 2;
        char *t = realloc(b->text, cap);
        if (!t) {
            x->oom = 1;
            return;
        }
        b->text = t;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->text + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    b->text[b->len++] = '\n';
    b->text[b->len] = 0;
}

/* Where lines reported between steps go: the step just executed, else the next one. */
static explain_block_t *here(explain_rec_t *x) {
    return x->cur_open ? &x->cur : &x->pending;
}

static void mark_event(explain_rec_t *x) {
    if (x->cur_open) x->cur_event = 1;
    else x->pending_event = 1;
}

/* Grows the per-id arrays to hold id; 0, or -1 when out of memory. */
static int track(explain_rec_t *x, int32_t id) {
    if (id < x->cap) return 0;
    int32_t cap = id + 1 > 2 * x->cap ? id + 1 : 2 * x->cap;
    int32_t *p = realloc(x->preempt, sizeof *p * (size_t)cap);
    if (p) x->preempt = p;
    unsigned char *s = realloc(x->seen, (size_t)cap);
    if (s) x->seen = s;
    if (!p || !s) return x->oom = 1, -1;
    memset(x->preempt + x->cap, 0, sizeof *p * (size_t)(cap - x->cap));
    memset(x->seen + x->cap, 0, (size_t)(cap - x->cap));
    x->cap = cap;
    return 0;
}

/* The narrow gap line, "... N decode-only steps ...", into buf. */
static void gap_text(char *buf, size_t len, int64_t n) {
    snprintf(buf, len, "... %lld decode-only step%s ...", (long long)n, n == 1 ? "" : "s");
}

static void gap_line(FILE *f, int64_t n, int narrow) {
    char g[64];
    gap_text(g, sizeof g, n);
    if (narrow) fprintf(f, "%s\n", g);
    else fprintf(f, "  ... %lld decode-only step%s (the same batch; nothing else happened) ...\n",
                 (long long)n, n == 1 ? "" : "s");
}

/* The step in progress is complete: show it (print or keep) or count it as quiet. An
 * arrival's own block (counted 0) does not count against max_shown. */
static void close_block(explain_rec_t *x, int counted) {
    x->cur_open = 0;
    if (x->skip_quiet && !x->cur_event) {
        x->quiet++;
        x->cur.len = 0; /* keep the buffer for the next step */
        return;
    }
    x->cur.quiet_before = x->quiet;
    x->quiet = 0;
    x->shown += counted;
    if (x->shown >= x->max_shown) x->full = 1;
    if (x->stream) {
        if (x->cur.quiet_before) gap_line(x->stream, x->cur.quiet_before, x->narrow);
        if (x->cur.len) fputs(x->cur.text, x->stream);
        x->cur.len = 0;
        return;
    }
    if (x->n_blocks == x->cap_blocks) {
        int64_t cap = x->cap_blocks ? 2 * x->cap_blocks : 64;
        explain_block_t *nb = realloc(x->blocks, sizeof *nb * (size_t)cap);
        if (!nb) {
            x->oom = 1;
            return;
        }
        x->blocks = nb;
        x->cap_blocks = cap;
    }
    x->blocks[x->n_blocks++] = x->cur; /* the kept block takes the buffer */
    memset(&x->cur, 0, sizeof x->cur);
}

/* In the narrow form an arrival before the step is a block of its own at its time, so
 * that the side-by-side view shows it beside what the other policy was doing then. */
static void arrival_block(explain_rec_t *x, const sched_req_t *r) {
    explain_block_t keep = x->cur;
    memset(&x->cur, 0, sizeof x->cur);
    x->cur_open = 1;
    x->cur_event = 1;
    x->cur.start_s = x->cur.end_s = r->arrival_s;
    x->cur.step = -1;
    put(x, &x->cur, " + r%d arrives %.3fs (P%d, out %d)", r->id, r->arrival_s,
        r->prompt_tokens, r->true_output_tokens);
    close_block(x, 0);
    free(x->cur.text); /* NULL when kept */
    x->cur = keep;
    x->cur_open = 0;
}

static void announce(explain_rec_t *x, const sched_req_t *r, double before, int after) {
    if (track(x, r->id) || x->seen[r->id]) return;
    if (after ? r->arrival_s <= before : r->arrival_s > before) return;
    x->seen[r->id] = 1;
    if (x->narrow && !after) {
        arrival_block(x, r);
        return;
    }
    x->cur_event = 1;
    char routed[48] = "";
    /* A request first shows up in the queue (or, disaggregated, the running list) of the
     * replica the router sent it to. */
    if (x->cluster) snprintf(routed, sizeof routed, ", routed to replica %d", (int)x->cur_replica);
    if (x->narrow)
        put(x, &x->cur, " + r%d arrives %.3fs (P%d, out %d)", r->id, r->arrival_s,
            r->prompt_tokens, r->true_output_tokens);
    else
        put(x, &x->cur, "  t=%.4f s  r%d arrives: prompt %d tokens, wants %d output tokens%s%s",
            r->arrival_s, r->id, r->prompt_tokens, r->true_output_tokens, routed,
            after ? " (during the step)" : "");
}

static int cmp_arrival(const void *a, const void *b) {
    const sched_req_t *x = *(const sched_req_t *const *)a, *y = *(const sched_req_t *const *)b;
    if (x->arrival_s != y->arrival_s) return x->arrival_s < y->arrival_s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Arrivals not yet shown, in arrival order (a policy may reorder its queue): those before
 * the step start first, then those during it. */
static void arrivals(explain_rec_t *x, const sched_view_t *v, double start, int after) {
    int32_t n = 0, want = v->n_running + v->n_waiting;
    if (want > x->cap_arr) {
        const sched_req_t **a = realloc(x->arr, sizeof *a * (size_t)want);
        if (!a) {
            x->oom = 1;
            return;
        }
        x->arr = a;
        x->cap_arr = want;
    }
    for (int32_t i = 0; i < v->n_running; i++) x->arr[n++] = v->running[i];
    for (int32_t i = 0; i < v->n_waiting; i++) x->arr[n++] = v->waiting[i];
    qsort(x->arr, (size_t)n, sizeof *x->arr, cmp_arrival);
    for (int32_t i = 0; i < n; i++) announce(x, x->arr[i], start, after);
}

static void entry_line(explain_rec_t *x, const sched_entry_t *e, const int32_t *accepted,
                       int32_t i) {
    const sched_req_t *r = e->req;
    char what[160], then[96] = "";
    if (e->is_decode) {
        if (x->narrow) {
            if (e->num_spec > 0)
                snprintf(then, sizeof then, " +%d drafts, %d ok", e->num_spec,
                         accepted ? accepted[i] : 0);
            put(x, &x->cur, "  r%d decode %d/%d%s", r->id, r->generated + 1,
                r->true_output_tokens, then);
            return;
        }
        snprintf(what, sizeof what, "decode    output token %d of %d", r->generated + 1,
                 r->true_output_tokens);
        if (e->num_spec > 0)
            snprintf(then, sizeof then, "  +%d drafts verified, %d accepted", e->num_spec,
                     accepted ? accepted[i] : 0);
    } else {
        int32_t known = r->prompt_tokens + r->generated;
        x->cur_event = 1; /* prompt tokens: an admission, a chunk or a recompute */
        if (x->narrow) {
            put(x, &x->cur, "  r%d %s %d..%d/%d", r->id, r->generated ? "recompute" : "prefill",
                e->start, e->start + e->num_tokens - 1, known);
            return;
        }
        snprintf(what, sizeof what, "%s positions %d..%d of %d", r->generated ? "recompute"
                 : "prefill  ", e->start, e->start + e->num_tokens - 1, known);
        if (e->sample)
            snprintf(then, sizeof then, "  -> %s", r->generated ? "next output token"
                     : "first output token");
        else
            snprintf(then, sizeof then, "  (%d prompt tokens left)",
                     known - e->start - e->num_tokens);
    }
    put(x, &x->cur, "    r%-4d %-38s %5d tok  %4d KV blocks%s", r->id, what,
        e->num_tokens + e->num_spec, e->num_blocks, then);
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Marks the step eventful when its set of requests differs from the previous step's. */
static void composition(explain_rec_t *x, const sched_plan_t *p) {
    if (p->n > x->cap_batch) {
        int32_t cap = p->n > 2 * x->cap_batch ? p->n : 2 * x->cap_batch;
        int32_t *a = realloc(x->batch, sizeof *a * (size_t)cap);
        if (a) x->batch = a;
        int32_t *b = realloc(x->prev_batch, sizeof *b * (size_t)cap);
        if (b) x->prev_batch = b;
        if (!a || !b) {
            x->oom = 1;
            return;
        }
        x->cap_batch = cap;
    }
    for (int32_t i = 0; i < p->n; i++) x->batch[i] = p->entries[i].req->id;
    qsort(x->batch, (size_t)p->n, sizeof *x->batch, cmp_id);
    if (p->n != x->n_prev || memcmp(x->batch, x->prev_batch, sizeof *x->batch * (size_t)p->n))
        x->cur_event = 1;
    int32_t *t = x->prev_batch;
    x->prev_batch = x->batch;
    x->batch = t;
    x->n_prev = p->n;
}

static void header(explain_rec_t *x, const sim_step_info_t *si) {
    const sched_plan_t *p = si->plan;
    int mixed = p->prefill_tokens > 0 && p->decode_tokens > 0;
    char pad[32] = "";
    if (x->narrow) {
        if (p->pad_tokens) snprintf(pad, sizeof pad, "+%dpad", p->pad_tokens);
        put(x, &x->cur, "#%lld %.4fs %.2fms %dp+%dd%s%s", (long long)p->step, si->start_s,
            si->dur_s * 1e3, p->prefill_tokens, p->decode_tokens, pad, mixed ? " mixed" : "");
        return;
    }
    if (p->pad_tokens) snprintf(pad, sizeof pad, " + %d padding", p->pad_tokens);
    char rep[24] = "";
    if (x->cluster) snprintf(rep, sizeof rep, "replica %d  ", (int)si->replica);
    put(x, &x->cur, "step %lld  %st=%.4f s  took %.2f ms  %d tokens = %d prefill + %d decode%s"
        "  (%d seq%s)%s", (long long)p->step, rep, si->start_s, si->dur_s * 1e3, p->num_tokens,
        p->prefill_tokens, p->decode_tokens, pad, p->n, p->n == 1 ? "" : "s",
        mixed ? "   <- mixed: prefill and decodes in one batch" : "");
}

/* Preemptions are decided while the policy builds the plan: the victims are back in the
 * queue with a higher count than we last saw. */
static void preemptions(explain_rec_t *x, const sched_view_t *v) {
    for (int32_t i = 0; i < v->n_waiting; i++) {
        const sched_req_t *r = v->waiting[i];
        if (track(x, r->id) || r->preemptions <= x->preempt[r->id]) continue;
        x->preemptions += r->preemptions - x->preempt[r->id];
        x->preempt[r->id] = r->preemptions;
        x->cur_event = 1;
        if (x->narrow)
            put(x, &x->cur, " ! r%d preempted: KV freed", r->id);
        else
            put(x, &x->cur, "    r%-4d PREEMPTED to make room for this step: its KV blocks "
                "were freed; it waits in the queue to recompute", r->id);
    }
}

static void kv_line(explain_rec_t *x, const sim_step_info_t *si) {
    const sched_view_t *v = si->view;
    if (x->narrow) {
        put(x, &x->cur, " KV %d/%d run %d queue %d", si->kv_used, si->kv_total, v->n_running,
            v->n_waiting);
        return;
    }
    int32_t idle = 0;
    for (int32_t i = 0; i < v->n_running; i++) idle += v->running[i]->scheduled == 0;
    char queue[256] = "";
    size_t n = 0;
    for (int32_t i = 0; i < v->n_waiting && i < QUEUE_SHOWN; i++)
        n += (size_t)snprintf(queue + n, sizeof queue - n, "%s r%d", i ? "" : ":",
                              v->waiting[i]->id);
    if (v->n_waiting > QUEUE_SHOWN)
        snprintf(queue + n, sizeof queue - n, " ... (+%d)", v->n_waiting - QUEUE_SHOWN);
    put(x, &x->cur, "  KV %d/%d blocks in use (%.1f%%)  running %d%s  queue %d%s", si->kv_used,
        si->kv_total, si->kv_total ? 100.0 * si->kv_used / si->kv_total : 0.0, v->n_running,
        idle ? " (some not in this step)" : "", v->n_waiting, queue);
}

int explain_on_step(void *ud, const sim_step_info_t *si) {
    explain_rec_t *x = ud;
    if (x->cur_open) close_block(x, 1);
    if (x->oom) return 1;
    if (x->full) return x->stop_when_full;
    x->steps++;
    x->cur_replica = si->replica;
    if (x->narrow) arrivals(x, si->view, si->start_s, 0);
    x->cur_open = 1;
    x->cur_event = x->pending_event;
    x->cur.start_s = si->start_s;
    x->cur.end_s = si->start_s + si->dur_s;
    x->cur.step = si->plan->step;
    x->cur.len = 0;
    if (x->pending.len) put(x, &x->cur, "%.*s", (int)x->pending.len - 1, x->pending.text);
    x->pending.len = 0;
    x->pending_event = 0;
    arrivals(x, si->view, si->start_s, 0);
    header(x, si);
    preemptions(x, si->view);
    for (int32_t i = 0; i < si->plan->n; i++)
        entry_line(x, &si->plan->entries[i], si->accepted, i);
    arrivals(x, si->view, si->start_s, 1);
    kv_line(x, si);
    composition(x, si->plan);
    return x->oom;
}

int explain_on_final(void *ud, const sched_req_t *r, const char *reason) {
    explain_rec_t *x = ud;
    if (x->full) return 0;
    if (r->state == SCHED_FINISHED) {
        x->finished++;
        mark_event(x);
        double ttft = (r->first_token_s - r->arrival_s) * 1e3;
        double e2e = (r->finish_s - r->arrival_s) * 1e3;
        if (x->narrow)
            put(x, here(x), " = r%d done: TTFT %.0fms E2E %.0fms", r->id, ttft, e2e);
        else
            put(x, here(x), "    r%-4d FINISHED: %d tokens, TTFT %.1f ms, end-to-end %.1f ms",
                r->id, r->generated, ttft, e2e);
    } else if (r->state == SCHED_REJECTED) {
        x->rejected++;
        mark_event(x);
        if (track(x, r->id) == 0) x->seen[r->id] = 1;
        if (x->narrow)
            put(x, here(x), " x r%d rejected: %s", r->id, reason ? reason : "");
        else
            put(x, here(x), "  t=%.4f s  r%d REJECTED: %s", r->arrival_s, r->id,
                reason ? reason : "");
    }
    return x->oom;
}

void explain_rec_finish(explain_rec_t *x) {
    if (x->cur_open) close_block(x, 1);
    if (x->pending.len && !x->full) { /* rejections after the last step: a block of their own */
        double t = x->n_blocks ? x->blocks[x->n_blocks - 1].end_s : 0;
        x->cur_open = 1;
        x->cur_event = 1;
        x->cur.start_s = x->cur.end_s = t;
        x->cur.step = -1;
        x->cur.len = 0;
        put(x, &x->cur, "%.*s", (int)x->pending.len - 1, x->pending.text);
        x->pending.len = 0;
        close_block(x, 1);
    }
    if (x->stream && x->quiet) gap_line(x->stream, x->quiet, x->narrow);
}

void explain_rec_free(explain_rec_t *x) {
    for (int64_t i = 0; i < x->n_blocks; i++) free(x->blocks[i].text);
    free(x->blocks);
    free(x->cur.text);
    free(x->pending.text);
    free(x->preempt);
    free(x->seen);
    free(x->batch);
    free(x->prev_batch);
    free(x->arr);
    memset(x, 0, sizeof *x);
}

/* One column's lines for a row: the gap line, then the block's text; NULL b: none, or
 * only the note that the column's last step is still running. */
typedef struct {
    const explain_block_t *b;
    const char *next;       /* the next line of b->text */
    int gap;                /* the gap line is still to print */
    char note[EXPLAIN_COL + 1]; /* printed first when not empty */
} column_t;

static void column_start(column_t *c, const explain_block_t *b) {
    c->b = b;
    c->next = b ? b->text : NULL;
    c->gap = b && b->quiet_before > 0;
    c->note[0] = 0;
}

/* Writes the column's next line, cut and padded to EXPLAIN_COL when pad; 0 when none. */
static int column_line(FILE *f, column_t *c, int pad) {
    char line[EXPLAIN_COL + 1];
    int n = 0;
    if (c->note[0]) {
        n = snprintf(line, sizeof line, "%s", c->note);
        c->note[0] = 0;
    } else if (c->gap) {
        c->gap = 0;
        gap_text(line, sizeof line, c->b->quiet_before);
        n = (int)strlen(line);
    } else if (c->next && *c->next) {
        const char *e = strchr(c->next, '\n');
        size_t len = e ? (size_t)(e - c->next) : strlen(c->next);
        n = len > EXPLAIN_COL ? EXPLAIN_COL : (int)len;
        memcpy(line, c->next, (size_t)n);
        if (len > EXPLAIN_COL) line[EXPLAIN_COL - 1] = '~'; /* cut: the narrow form is
                                                           * sized to fit, long ids aside */
        c->next = e ? e + 1 : c->next + len;
    } else {
        if (pad) fprintf(f, "%-*s", EXPLAIN_COL, "");
        return 0;
    }
    if (n > EXPLAIN_COL) n = EXPLAIN_COL;
    line[n] = 0;
    fprintf(f, pad ? "%-*s" : "%.*s", EXPLAIN_COL, line);
    return 1;
}

/* A row of the side-by-side view: blocks a and b (either may be NULL). A column left empty
 * while its last shown step (busy) is still running when the row's block starts says so,
 * so that a long step on one side reads as such beside the other's short ones. */
static void row(FILE *f, const explain_block_t *a, const explain_block_t *b,
                const explain_block_t *busy_a, const explain_block_t *busy_b) {
    column_t ca, cb;
    column_start(&ca, a);
    column_start(&cb, b);
    if (!a && b && busy_a && b->start_s < busy_a->end_s)
        snprintf(ca.note, sizeof ca.note, "  (#%lld still running)", (long long)busy_a->step);
    if (!b && a && busy_b && a->start_s < busy_b->end_s)
        snprintf(cb.note, sizeof cb.note, "  (#%lld still running)", (long long)busy_b->step);
    for (;;) {
        int more_a = ca.gap || ca.note[0] || (ca.next && *ca.next);
        int more_b = cb.gap || cb.note[0] || (cb.next && *cb.next);
        if (!more_a && !more_b) break;
        column_line(f, &ca, 1);
        fputs(" | ", f);
        column_line(f, &cb, 0);
        fputc('\n', f);
    }
}

void explain_print_side_by_side(FILE *f, const explain_rec_t *a, const explain_rec_t *b) {
    int64_t i = 0, j = 0;
    const explain_block_t *busy_a = NULL, *busy_b = NULL; /* last steps printed */
    for (;;) {
        const explain_block_t *x = i < a->n_blocks ? &a->blocks[i] : NULL;
        const explain_block_t *y = j < b->n_blocks ? &b->blocks[j] : NULL;
        /* a full side that ran out has nothing more to show against the other */
        if ((!x && a->full) || (!y && b->full) || (!x && !y)) break;
        if (x && y && (x->start_s == y->start_s ||
                       (x->start_s < y->end_s && y->start_s < x->end_s))) {
            row(f, x, y, busy_a, busy_b);
            i++, j++;
        } else if (x && (!y || x->start_s <= y->start_s)) {
            row(f, x, NULL, busy_a, busy_b);
            i++;
        } else {
            row(f, NULL, y, busy_a, busy_b);
            j++;
        }
        if (x && i > 0 && &a->blocks[i - 1] == x && x->step >= 0) busy_a = x;
        if (y && j > 0 && &b->blocks[j - 1] == y && y->step >= 0) busy_b = y;
    }
    /* steps left out at the end of a run that was printed to its end */
    int qa = i == a->n_blocks && a->quiet, qb = j == b->n_blocks && b->quiet;
    if (qa || qb) {
        char l[EXPLAIN_COL + 1] = "", r[EXPLAIN_COL + 1] = "";
        if (qa) gap_text(l, sizeof l, a->quiet);
        if (qb) gap_text(r, sizeof r, b->quiet);
        fprintf(f, "%-*s | %s\n", EXPLAIN_COL, l, r);
    }
}

/* sched: see sched.h (disaggregation's hand-offs are in sched_transfer.c, the request
 * store in sched_store.c; the state they share is in sched_internal.h). Requests live in a chunked pool (views never move),
 * indexed by id in an open-addressing table; the waiting queue and the running list hold
 * pointers into it. Queue surgery decided while a plan is built (admissions, preemptions,
 * policy rejections) is deferred to the end of sched_step so that the policy's indexes
 * stay stable during its call. */
#include "policies/sched.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/sched_internal.h"
#include "policies/kv_tier.h"

/* ------------------------------------------------------------------ small helpers */

const char *sched_state_name(int32_t st) {
    switch (st) {
    case SCHED_WAITING: return "waiting";
    case SCHED_RUNNING: return "running";
    case SCHED_PREEMPTED: return "preempted";
    case SCHED_FINISHED: return "finished";
    case SCHED_REJECTED: return "rejected";
    case SCHED_ABORTED: return "aborted";
    case SCHED_TRANSFER: return "transfer";
    default: return "unknown";
    }
}

void sched_set_error(sched_t *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
}

const char *sched_errmsg(const sched_t *s) { return s->err; }
const sched_config_t *sched_config(const sched_t *s) { return &s->cfg; }

/* ------------------------------------------------------------------ lifecycle */

sched_t *sched_new(const sched_config_t *cfg, const sched_policy_t *policy, const char **err) {
    const char *why = NULL;
    sched_t *s = NULL;
    if (cfg->block_size < 1) why = "block_size must be >= 1";
    else if (cfg->num_blocks < 1) why = "the KV cache has no blocks (num_blocks < 1)";
    else if (cfg->max_tokens < 1) why = "max_tokens must be >= 1";
    else if (cfg->max_seqs < 1) why = "max_seqs must be >= 1";
    else if (cfg->max_model_len < 1) why = "max_model_len must be >= 1";
    else if (!(cfg->watermark >= 0 && cfg->watermark < 1)) why = "watermark must be in [0, 1)";
    else if (cfg->window_tokens < 0 || !(cfg->window_share >= 0 && cfg->window_share <= 1))
        why = "window_tokens must be >= 0 and window_share in [0, 1]";
    else if (cfg->window_tokens > 0 && cfg->window_share > 0 && cfg->prefix_caching)
        why = "prefix caching with sliding-window block accounting is not modelled";
    else if (!policy || !policy->schedule) why = "no policy schedule hook";
    if (why) goto fail;
    why = "out of memory";
    s = calloc(1, sizeof *s);
    if (!s) goto fail;
    s->last_step_s = NAN;
    s->cfg = *cfg;
    s->policy = *policy;
    s->kv = kv_new(cfg->num_blocks, cfg->block_size);
    if (!s->kv || sched_map_grow(s) || (cfg->prefix_caching && kv_enable_cache(s->kv))) goto fail;
    rng_seed(&s->rng, cfg->seed);
    s->view.block_size = cfg->block_size;
    s->view.num_blocks = cfg->num_blocks;
    s->view.watermark_blocks = (int32_t)(cfg->watermark * cfg->num_blocks);
    s->view.max_tokens = cfg->max_tokens;
    s->view.max_seqs = cfg->max_seqs;
    s->view.wake_at = INFINITY;
    s->view.free_blocks = cfg->num_blocks;
    if (err) *err = NULL;
    return s;
fail:
    sched_free(s);
    if (err) *err = why;
    return NULL;
}

void sched_free(sched_t *s) {
    if (!s) return;
    for (chunk_t *c = s->chunks, *next; c; c = next) {
        next = c->next;
        for (int i = 0; i < POOL_CHUNK; i++) {
            free(c->slots[i].blocks);
            if (c->slots[i].prefix) prefix_clear(c->slots[i].prefix);
            free(c->slots[i].prefix);
        }
        free(c);
    }
    kv_free(s->kv);
    free(s->tier_of);
    free(s->tier_keys);
    free(s->tier_ids);
    free(s->map);
    free(s->waiting.v);
    free(s->running.v);
    free(s->transit.v);
    free(s->entries);
    free(s->pads);
    free(s->scratch);
    free(s->gone);
    free(s->est_seqs);
    free(s);
}

void sched_set_sink(sched_t *s, sched_sink_fn fn, void *ud) {
    s->sink = fn;
    s->sink_ud = ud;
}

void sched_view_sync(sched_t *s) {
    s->view.waiting = (const sched_req_t *const *)(s->waiting.v ? s->waiting.v + s->waiting.head : NULL);
    s->view.n_waiting = s->waiting.n;
    s->view.running = (const sched_req_t *const *)(s->running.v ? s->running.v + s->running.head : NULL);
    s->view.n_running = s->running.n;
    s->view.free_blocks = kv_num_free(s->kv);
}

const sched_view_t *sched_view(const sched_t *s) { return &s->view; }

/* A request reached a final state: report it once. Removal from the lists and recycling
 * happen in compact(), after the current call. */
static void compact_lists_and_recycle(sched_t *s);

void sched_finalize(sched_t *s, slot_t *x, int32_t state, const char *reason) {
    if (x->pub.num_blocks && kv_release(s->kv, x->blocks, x->pub.num_blocks) != 0) {
        /* Cannot happen unless the block tables are corrupt; keep going, but say so. */
        fprintf(stderr, "twinserve: internal error: bad KV release for request %d\n", x->pub.id);
    }
    x->pub.num_blocks = 0;
    x->pub.state = state;
    x->leaving = 1;
    s->num_unfinished--;
    if (s->sink) s->sink(s->sink_ud, &x->pub, reason);
}

static void reject(sched_t *s, slot_t *x, const char *reason) {
    sched_finalize(s, x, SCHED_REJECTED, reason);
}

/* Vidur's trace loader: a request longer than the context loses the excess from prompt and
 * output in proportion (each cut rounded up), each keeping at least one token. */
void sched_clip_lengths(int32_t *prompt, int32_t *output, int32_t ctx) {
    int64_t p = *prompt, o = *output, total = p + o, diff = total - ctx;
    if (p < 1 || o < 1 || diff <= 0) return;
    p -= (diff * p + total - 1) / total;
    o -= (diff * o + total - 1) / total;
    *prompt = p < 1 ? 1 : (int32_t)p;
    *output = o < 1 ? 1 : (int32_t)o;
}

/* A request that is not running may only take blocks beyond the watermark
 * (sched_can_allocate), so that is the most one request can ever be given. */
int sched_can_ever_hold(const sched_t *s, int64_t prompt, int64_t out, char *why, size_t len) {
    int64_t need = prompt + out;
    int64_t blocks = sched_blocks_for(s, need);
    int32_t most = s->cfg.num_blocks - s->view.watermark_blocks;
    if (prompt < 1)
        snprintf(why, len, "empty prompt (%lld tokens)", (long long)prompt);
    else if (need > s->cfg.max_model_len)
        snprintf(why, len, "prompt + output = %lld tokens exceeds the context length %d",
                 (long long)need, s->cfg.max_model_len);
    else if (blocks > most)
        snprintf(why, len, "needs %lld KV blocks but one request can have at most %d "
                 "(a cache of %d minus the watermark of %d)", (long long)blocks, most,
                 s->cfg.num_blocks, s->view.watermark_blocks);
    else
        return 1;
    return 0;
}

static void clip_to_context(sched_new_req_t *r, int32_t ctx) {
    sched_clip_lengths(&r->prompt_tokens, &r->output_tokens, ctx);
    if (r->hash_block > 0 && (int64_t)r->n_hash * r->hash_block > r->prompt_tokens)
        r->n_hash = r->prompt_tokens / r->hash_block; /* the hashes of blocks still there */
}

int sched_add(sched_t *s, const sched_new_req_t *r, double now) {
    s->view.now = now;
    sched_new_req_t clipped;
    if (s->cfg.clip_to_context) {
        clipped = *r;
        clip_to_context(&clipped, s->cfg.max_model_len);
        r = &clipped;
    }
    if (sched_map_get(s, r->id)) {
        sched_set_error(s, "duplicate request id %d", r->id);
        return -1;
    }
    /* Room in the queue first, so that a failure leaves no half-added request behind. */
    if (sched_queue_reserve(&s->waiting, 0, 1)) goto oom;
    slot_t *x = sched_slot_get(s);
    if (!x) goto oom;
    sched_req_t *q = &x->pub;
    q->id = r->id;
    if (sched_map_put(s, x)) {
        x->next_free = s->free_slots;
        s->free_slots = x;
        goto oom;
    }
    q->state = SCHED_WAITING;
    q->arrival_s = r->arrival_s;
    q->prompt_tokens = r->prompt_tokens;
    /* The true length is where EOS comes; a limit given with the request (its max_tokens),
     * else the run's, ends it sooner, as a server stops at max_tokens. */
    int32_t cap = r->max_output_tokens > 0 ? r->max_output_tokens : s->cfg.max_output_tokens;
    int32_t out = cap > 0 && r->output_tokens > cap ? cap : r->output_tokens;
    /* A server knows only the limit, which is never more than the context left. */
    int64_t left = (int64_t)s->cfg.max_model_len - r->prompt_tokens;
    int64_t limit = cap > 0 && cap < left ? cap : left;
    limit = limit < 0 ? 0 : limit > INT32_MAX ? INT32_MAX : limit;
    q->true_output_tokens = out;
    q->output_tokens = s->cfg.oracle_lengths ? out : (int32_t)limit;
    q->predicted_output_tokens = r->predicted_output_tokens > 0 ? r->predicted_output_tokens : -1;
    q->priority = r->priority;
    q->deadline = r->deadline_s > 0 ? r->deadline_s : -1;
    if (r->tenant) snprintf(q->tenant_name, sizeof q->tenant_name, "%s", r->tenant);
    q->first_scheduled_s = q->first_token_s = q->finish_s = -1;
    s->num_unfinished++;

    x->handoff = r->handoff != 0;
    /* Requests that can never run are rejected here, with the reason recorded. These
     * checks use the true length (a trace row that no server could have produced), and no
     * policy sees it. */
    char why[200] = "";
    if (r->output_tokens < 1)
        snprintf(why, sizeof why, "no output tokens requested (%d)", r->output_tokens);
    else
        sched_can_ever_hold(s, r->prompt_tokens, out, why, sizeof why);
    if (why[0]) {
        reject(s, x, why);
        sched_slot_put(s, x); /* never queued */
        sched_view_sync(s);   /* the queue_reserve above may have moved the waiting list */
        return 0;
    }
    /* With caching on every request keys its blocks, hashed or not: its own blocks (the
     * prompt's tail, generated tokens) let it skip what is still cached after a preemption. */
    if (s->cfg.prefix_caching &&
        (!(x->prefix = calloc(1, sizeof *x->prefix)) ||
         prefix_set(x->prefix, r->id, r->hash_ids, r->n_hash, r->hash_block, r->prompt_tokens,
                    s->cfg.block_size) != 0)) {
        sched_finalize(s, x, SCHED_REJECTED, "out of memory for its prefix hashes");
        sched_slot_put(s, x);
        sched_view_sync(s);
        return 0;
    }
    s->waiting.v[s->waiting.head + s->waiting.n++] = x; /* reserved above */
    sched_view_sync(s);
    if (s->policy.on_arrival && s->policy.on_arrival(s->policy.ud, s, q) != 0) return -1;
    return 0;
oom:
    sched_set_error(s, "out of memory adding request %d", r->id);
    return -1;
}

/* ------------------------------------------------------------------ compaction */

static int keep_waiting(const slot_t *x) {
    return x->pub.state == SCHED_WAITING || x->pub.state == SCHED_PREEMPTED;
}

/* Applies the queue moves decided since the last call: admitted requests join the running
 * list in plan order, preempted ones go to the head of the queue (keeping their order),
 * final ones leave and are recycled. */
static void compact_lists_and_recycle(sched_t *s) {
    if (!s->need_compact) {
        sched_view_sync(s);
        return;
    }
    queue_t *R = &s->running, *W = &s->waiting;
    int32_t w = 0, npre = 0; /* scratch holds every preemption: sched_plan_preempt grew it */
    for (int32_t i = 0; i < s->n_gone; i++) sched_slot_put(s, s->gone[i]);
    s->n_gone = 0;
    for (int32_t i = 0; i < R->n; i++) {
        slot_t *x = sched_queue_at(R, i);
        if (x->pub.state == SCHED_RUNNING) R->v[R->head + w++] = x;
        else if (x->pub.state == SCHED_PREEMPTED) s->scratch[npre++] = x;
        else if (x->pub.state == SCHED_TRANSFER) sched_queue_push_back(&s->transit, x); /* reserved */
        else sched_slot_put(s, x);
    }
    R->n = w;

    /* Admissions are usually a prefix of the queue (FCFS): pop those in O(k) and scan the
     * rest only when some members left from further back. */
    int32_t left = s->wait_out;
    while (left > 0 && W->n > 0 && !keep_waiting(sched_queue_at(W, 0))) {
        slot_t *x = sched_queue_at(W, 0);
        if (x->leaving) sched_slot_put(s, x);
        W->head++;
        W->n--;
        left--;
    }
    if (left > 0) {
        w = 0;
        for (int32_t i = 0; i < W->n; i++) {
            slot_t *x = sched_queue_at(W, i);
            if (keep_waiting(x)) W->v[W->head + w++] = x;
            else if (x->leaving) sched_slot_put(s, x);
        }
        W->n = w;
    }
    s->wait_out = 0;

    if (npre && sched_queue_reserve(W, npre, 0) == 0) {
        for (int32_t i = npre - 1; i >= 0; i--) {
            s->scratch[i]->preempted_now = 0;
            W->v[--W->head] = s->scratch[i];
            W->n++;
        }
    }
    for (int32_t i = 0; i < s->plan.n; i++) {
        slot_t *x = (slot_t *)s->entries[i].req;
        if (!x->admitted_now) continue;
        x->admitted_now = 0;
        if (x->pub.state == SCHED_RUNNING) sched_queue_push_back(R, x);
    }
    s->need_compact = 0;
    sched_view_sync(s);
}

void sched_compact(sched_t *s) {
    s->need_compact = 1;
    compact_lists_and_recycle(s);
}

/* ------------------------------------------------------------------ the step */

int sched_step(sched_t *s, double now, const sched_plan_t **out) {
    s->view.now = now;
    if (s->view.wake_at <= now) s->view.wake_at = INFINITY;
    s->plan = (sched_plan_t){ .step = -1 };
    s->view.plan_tokens = s->view.plan_seqs = 0;
    s->admitted = 0;
    /* The queue moves this step can make (every waiting request admitted, every running one
     * preempted) get their room now, so the compaction after the policy cannot fail. */
    if (sched_queue_reserve(&s->running, 0, s->waiting.n) ||
        sched_queue_reserve(&s->waiting, s->running.n, 0)) {
        sched_set_error(s, "out of memory before step %lld", (long long)s->steps);
        return -1;
    }
    sched_view_sync(s);
    s->in_step = 1;
    int rc = s->policy.schedule(s->policy.ud, s, now);
    s->in_step = 0;
    s->plan.entries = s->entries;
    s->plan.pads = s->pads;
    s->need_compact = 1;
    compact_lists_and_recycle(s);
    if (rc != 0) return -1;
    if (s->plan.n == 0 && s->plan.n_pads > 0) {
        /* Padding is the shape of a batch of real requests; alone it is a step that can
         * never make progress (a policy bug that would otherwise spin forever). */
        sched_set_error(s, "illegal plan: %d padding tokens but no request (pad only next to "
                        "scheduled requests)", s->plan.pad_tokens);
        return -1;
    }
    int empty = s->plan.n == 0 && s->plan.n_pads == 0;
    if (!empty) {
        s->plan.step = s->steps++;
        s->step_now = now;
    }
    int changed = s->plan.num_preempted > 0 || s->plan.num_rejected > 0;
    s->stalled = empty && !changed && (s->waiting.n + s->running.n) > 0 &&
                 isinf(s->view.wake_at);
    *out = &s->plan;
    return 0;
}

static int plan_guard(sched_t *s, const char *what) {
    if (s->in_step) return 0;
    sched_set_error(s, "%s called outside schedule()", what);
    return -1;
}

static slot_t *plan_lookup(sched_t *s, int32_t id, const char *what) {
    slot_t *x = sched_map_get(s, id);
    if (!x) {
        sched_set_error(s, "illegal plan: %s of unknown request id %d (not waiting or running: "
                        "finished, rejected, or not arrived yet)", what, id);
        return NULL;
    }
    if (x->pub.state >= SCHED_FINISHED) {
        sched_set_error(s, "illegal plan: %s of request %d, which is %s", what, id,
                        sched_state_name(x->pub.state));
        return NULL;
    }
    return x;
}

int sched_grow(void **v, int32_t *cap, int32_t need, size_t size) {
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    void *p = realloc(*v, size * (size_t)c);
    if (!p) return -1;
    *v = p;
    *cap = c;
    return 0;
}

/* id < 0: padding. Messages are formatted only on failure: this runs for every entry. */
static int budget_check(sched_t *s, int64_t tokens, int32_t seqs, int32_t id) {
    char what[48] = "pad";
    int tok = s->view.plan_tokens + tokens > s->cfg.max_tokens;
    int seq = s->view.plan_seqs + seqs > s->cfg.max_seqs;
    if (!tok && !seq) return 0;
    if (id >= 0) snprintf(what, sizeof what, "schedule request %d", id);
    if (tok)
        sched_set_error(s, "illegal plan: %s: token budget exceeded (%d already planned + %lld > "
                        "max_tokens %d)", what, s->view.plan_tokens, (long long)tokens,
                        s->cfg.max_tokens);
    else
        sched_set_error(s, "illegal plan: %s: sequence limit exceeded (%d already planned, "
                        "max_seqs %d)", what, s->view.plan_seqs, s->cfg.max_seqs);
    return -1;
}

int sched_plan_schedule(sched_t *s, int32_t id, int32_t n, int32_t k) {
    if (plan_guard(s, "schedule")) return -1;
    slot_t *x = plan_lookup(s, id, "schedule");
    if (!x) return -1;
    sched_req_t *q = &x->pub;
    int32_t rem = sched_req_remaining(q);
    if (x->in_plan) {
        sched_set_error(s, "illegal plan: request %d is already in this step's plan", id);
        return -1;
    }
    if (x->preempted_now) {
        sched_set_error(s, "illegal plan: request %d was preempted in this step; it can run "
                        "again from the next step", id);
        return -1;
    }
    if (n < 1 || k < 0 || k > s->cfg.max_tokens) {
        sched_set_error(s, "illegal plan: schedule request %d with %d tokens and %d drafts "
                        "(need tokens >= 1, 0 <= drafts <= max_tokens)", id, n, k);
        return -1;
    }
    if (n > rem) {
        sched_set_error(s, "illegal plan: request %d has %d tokens left to compute, the plan "
                        "asks for %d", id, rem, n);
        return -1;
    }
    if (k > 0 && !(rem == 1 && q->generated >= 1)) {
        sched_set_error(s, "illegal plan: drafts (k=%d) are only for a decoding request; "
                        "request %d still has %d prompt tokens to compute", k, id, rem);
        return -1;
    }
    /* max_seqs bounds the running batch, as vLLM's max_num_seqs: a running request that
     * sits out this step still holds its slot, so admission counts running requests, not
     * only the planned ones (every step then stays within the limit too). */
    if (q->state != SCHED_RUNNING && sched_running_seqs(s) >= s->cfg.max_seqs) {
        sched_set_error(s, "illegal plan: schedule request %d: sequence limit reached (%d "
                        "requests running, max_seqs %d; running requests count, planned or "
                        "not)", id, sched_running_seqs(s), s->cfg.max_seqs);
        return -1;
    }
    /* Prefix cache: a request starting from nothing takes its cached leading blocks
     * (looked up first, taken only once everything below has been checked). */
    int32_t bs = s->cfg.block_size, hits = 0, idle = 0, tier_hits = 0, held_more = 0;
    if (x->prefix && q->computed == 0 && q->num_blocks == 0) {
        int32_t most = (rem - 1) / bs; /* leave a token to compute: the logits need it */
        if (sched_grow((void **)&x->blocks, &x->blocks_cap, most + 1, sizeof(int32_t))) goto oom;
        hits = prefix_match(x->prefix, s->kv, most, x->blocks, &idle);
        /* Taking an idle cached block uses up a free one. Take fewer hits rather than fail:
         * with none the call needs exactly what sched_can_allocate checked. */
        for (; hits > 0; hits--) {
            int32_t nh = n < rem - hits * bs ? n : rem - hits * bs;
            if (sched_blocks_for(s, hits * bs + nh + k) - hits + idle <= kv_num_free(s->kv))
                break;
            idle -= kv_cache_is_idle(s->kv, x->blocks[hits - 1]);
        }
        /* then the blocks after them that a tier below HBM holds (and HBM blocks between
         * them): reloaded into fresh blocks instead of computed (kv_tier.h), as many as fit */
        if (s->tiers && hits < most) {
            if (sched_grow((void **)&s->tier_of, &s->tier_cap, most, 1)) goto oom;
            uint64_t *keys = realloc(s->tier_keys, sizeof *keys * (size_t)s->tier_cap);
            if (keys) s->tier_keys = keys;
            int32_t *ids = keys ? realloc(s->tier_ids, sizeof *ids * (size_t)s->tier_cap) : NULL;
            if (ids) s->tier_ids = ids;
            if (!keys || !ids) goto oom;
            tier_hits = prefix_match_tiers(x->prefix, s->kv, s->tiers, hits, most, s->tier_of,
                                           keys, ids);
            for (; tier_hits > 0; tier_hits--) {
                int32_t c = (hits + tier_hits) * bs, more = 0, more_idle = 0;
                for (int32_t j = 0; j < tier_hits; j++)
                    if (s->tier_of[j] < 0) {
                        more++;
                        more_idle += kv_cache_is_idle(s->kv, ids[j]);
                    }
                int32_t nh = n < rem - c ? n : rem - c;
                if (sched_blocks_for(s, (int64_t)c + nh + k) - hits - more + idle + more_idle <=
                    kv_num_free(s->kv)) {
                    held_more = more;
                    idle += more_idle;
                    break;
                }
            }
            if (sched_grow((void **)&x->blocks, &x->blocks_cap, hits + tier_hits + 1,
                           sizeof(int32_t)))
                goto oom;
        }
        /* cached and reloaded tokens cost no compute */
        if (n > rem - (hits + tier_hits) * bs) n = rem - (hits + tier_hits) * bs;
    }
    if (budget_check(s, (int64_t)n + k, 1, id)) return -1;
    /* n <= remaining and k <= max_tokens (checked above): the sum fits in int32. */
    const int32_t cached = hits + tier_hits;
    int32_t base = cached ? cached * bs : q->computed;
    /* blocks the request holds or takes as they are; the rest are fresh, the reloaded
     * ones among them */
    int32_t have = cached ? hits + held_more : q->num_blocks;
    int32_t want = sched_blocks_for(s, (int64_t)base + n + k);
    int32_t need = want - have;
    if (need + idle > kv_num_free(s->kv)) {
        sched_set_error(s, "illegal plan: out of KV blocks: request %d needs %d more blocks, "
                        "%d are free (check can_allocate, or preempt first)", id, need + idle,
                        kv_num_free(s->kv));
        return -1;
    }
    if (sched_grow((void **)&x->blocks, &x->blocks_cap, want, sizeof(int32_t)) ||
        sched_grow((void **)&s->entries, &s->entries_cap, s->plan.n + 1, sizeof(sched_entry_t)))
        goto oom;
    if (cached) {
        for (int32_t j = 0; j < hits; j++) kv_cache_acquire(s->kv, x->blocks[j]);
        prefix_take(x->prefix, hits);
        q->computed = cached * bs;
        q->num_blocks = hits;
        /* The prompt's share served by the cache: first admission only (a recompute that
         * finds its own blocks again saves work too, but is not prompt served twice). */
        if (q->first_scheduled_s < 0) {
            q->cached_tokens = cached * bs;
            q->reloaded_tokens = (tier_hits - held_more) * bs;
        }
        rem -= cached * bs;
    }
    if (tier_hits) {
        /* positions hits.. of the run: HBM's blocks taken first (so that no allocation
         * evicts them), then a fresh block for each reloaded one, keyed into HBM's cache
         * again and counted in its tier and in the plan for the executor to price */
        for (int32_t j = 0; j < tier_hits; j++)
            if (s->tier_of[j] < 0) {
                x->blocks[hits + j] = s->tier_ids[j];
                kv_cache_acquire(s->kv, s->tier_ids[j]);
            }
        for (int32_t j = 0; j < tier_hits; j++)
            if (s->tier_of[j] >= 0) {
                kv_alloc(s->kv, 1, x->blocks + hits + j);
                kv_tiers_hit(s->tiers, s->tier_of[j], s->tier_keys[j]);
                s->plan.reload_blocks[s->tier_of[j]]++;
            }
        prefix_publish(x->prefix, s->kv, x->blocks, cached * bs);
        q->num_blocks = cached;
        need -= tier_hits - held_more;
    }
    if (need > 0) kv_alloc(s->kv, need, x->blocks + q->num_blocks);
    int is_decode = rem == 1 && q->generated >= 1;
    s->entries[s->plan.n++] = (sched_entry_t){
        .req_id = id, .req = q, .start = q->computed, .num_tokens = n, .num_spec = k,
        .sample = n == rem, .is_decode = is_decode, .blocks = x->blocks, .num_blocks = want,
    };
    q->num_blocks = want > q->num_blocks ? want : q->num_blocks;
    q->scheduled = n;
    q->spec = k;
    x->in_plan = 1;
    if (q->state != SCHED_RUNNING) {
        q->state = SCHED_RUNNING;
        x->admitted_now = 1;
        s->wait_out++;
        s->admitted++;
    }
    if (q->first_scheduled_s < 0) q->first_scheduled_s = s->view.now;
    s->plan.num_tokens += n + k;
    if (is_decode) s->plan.decode_tokens += n + k;
    else s->plan.prefill_tokens += n;
    s->view.plan_tokens += n + k;
    s->view.plan_seqs++;
    s->view.free_blocks = kv_num_free(s->kv);
    return 0;
oom:
    sched_set_error(s, "out of memory scheduling request %d", id);
    return -1;
}

int sched_plan_preempt(sched_t *s, int32_t id) {
    if (plan_guard(s, "preempt")) return -1;
    slot_t *x = plan_lookup(s, id, "preempt");
    if (!x) return -1;
    if (x->pub.state != SCHED_RUNNING || x->admitted_now) {
        sched_set_error(s, "illegal plan: preempt of request %d, which is %s (only running "
                        "requests hold KV)", id,
                        x->admitted_now ? "being admitted in this step"
                                        : sched_state_name(x->pub.state));
        return -1;
    }
    if (x->in_plan) {
        sched_set_error(s, "illegal plan: request %d is in this step's plan; preempt it before "
                        "scheduling it", id);
        return -1;
    }
    /* Room to move it to the queue at the end of the step, reserved now so that the
     * compaction itself cannot fail. */
    if (sched_grow((void **)&s->scratch, &s->scratch_cap, s->plan.num_preempted + 1, sizeof(slot_t *))) {
        sched_set_error(s, "out of memory preempting request %d", id);
        return -1;
    }
    kv_release(s->kv, x->blocks, x->pub.num_blocks); /* keyed blocks stay cached, idle */
    if (x->prefix) prefix_reset(x->prefix);
    x->pub.num_blocks = 0;
    x->pub.computed = 0;
    x->pub.preemptions++;
    x->pub.state = SCHED_PREEMPTED;
    x->preempted_now = 1;
    s->total_preemptions++;
    s->plan.num_preempted++;
    s->view.free_blocks = kv_num_free(s->kv);
    return 0;
}

int sched_plan_reject(sched_t *s, int32_t id, const char *reason) {
    if (plan_guard(s, "reject")) return -1;
    slot_t *x = plan_lookup(s, id, "reject");
    if (!x) return -1;
    if (x->pub.state == SCHED_RUNNING) {
        sched_set_error(s, "illegal plan: reject of request %d, which is running (preempt it "
                        "first)", id);
        return -1;
    }
    char why[256];
    snprintf(why, sizeof why, "rejected by policy: %s", reason && *reason ? reason : "no reason given");
    /* out of s:waiting() within the same call: a policy that looks at the queue again does
     * not meet it (and cannot reject or schedule it twice) */
    queue_t *W = &s->waiting;
    int32_t at = -1;
    for (int32_t i = 0; i < W->n && at < 0; i++)
        if (sched_queue_at(W, i) == x) at = i;
    if (at >= 0 && sched_grow((void **)&s->gone, &s->gone_cap, s->n_gone + 1, sizeof *s->gone)) {
        sched_set_error(s, "out of memory rejecting request %d", id);
        return -1;
    }
    sched_finalize(s, x, SCHED_REJECTED, why);
    if (at >= 0) {
        memmove(&W->v[W->head + at], &W->v[W->head + at + 1],
                sizeof *W->v * (size_t)(W->n - at - 1));
        W->n--;
        s->view.n_waiting = W->n;
        s->gone[s->n_gone++] = x;
        s->need_compact = 1;
    } else {
        s->wait_out++;
    }
    s->plan.num_rejected++;
    return 0;
}

int sched_plan_pad(sched_t *s, int32_t n, int32_t ctx) {
    if (plan_guard(s, "pad")) return -1;
    if (n < 1 || ctx < 0) {
        sched_set_error(s, "illegal plan: pad with %d tokens at context %d (need tokens >= 1, "
                        "context >= 0)", n, ctx);
        return -1;
    }
    /* Padding runs n throwaway tokens at positions ctx .. ctx+n-1; past the context length
     * no executor could run them (the simulator would cost them, the engine clamp them). */
    if ((int64_t)ctx + n > s->cfg.max_model_len) {
        sched_set_error(s, "illegal plan: pad with %d tokens at context %d runs past the "
                        "context length %d", n, ctx, s->cfg.max_model_len);
        return -1;
    }
    /* Padding fills slots of the batch's shape; it costs tokens but is not a sequence. */
    if (budget_check(s, n, 0, -1)) return -1;
    if (sched_grow((void **)&s->pads, &s->pads_cap, s->plan.n_pads + 1, sizeof(sched_pad_t))) {
        sched_set_error(s, "out of memory padding the plan");
        return -1;
    }
    s->pads[s->plan.n_pads++] = (sched_pad_t){ .num_tokens = n, .ctx = ctx };
    s->plan.num_tokens += n;
    s->plan.pad_tokens += n;
    s->view.plan_tokens += n;
    return 0;
}

/* t == now means "call me again at this instant" (the executor bounds such loops). */
void sched_wake_at(sched_t *s, double t) {
    if (t >= s->view.now && t < s->view.wake_at) s->view.wake_at = t;
}

/* ------------------------------------------------------------------ commit */

int sched_commit(sched_t *s, const sched_plan_t *plan, const int32_t *accepted, double now) {
    int rc = 0;
    s->view.now = now;
    sched_cost_observe(s, plan->prefill_tokens, plan->decode_tokens, now - s->step_now);
    /* room for every entry to be handed off, so that the compaction cannot fail */
    if (sched_queue_reserve(&s->transit, 0, plan->n)) {
        sched_set_error(s, "out of memory committing step %lld", (long long)plan->step);
        return -1;
    }
    for (int32_t i = 0; i < plan->n; i++) {
        const sched_entry_t *e = &plan->entries[i];
        slot_t *x = (slot_t *)e->req;
        sched_req_t *q = &x->pub;
        x->in_plan = 0;
        q->scheduled = q->spec = 0;
        if (q->state != SCHED_RUNNING) continue; /* aborted meanwhile */
        q->computed += e->num_tokens;
        if (x->prefix) prefix_publish(x->prefix, s->kv, x->blocks, q->computed);
        if (!e->sample) continue;
        int32_t a = accepted ? accepted[i] : 0;
        if (a < 0 || a > e->num_spec) {
            sched_set_error(s, "executor reported %d accepted drafts of %d for request %d", a,
                            e->num_spec, q->id);
            rc = -1;
            a = 0;
        }
        int32_t emit = sched_req_emit(q, a);
        /* The accepted drafts are now cached; the newly sampled token is not yet. */
        q->computed += emit - 1;
        q->spec_proposed += e->num_spec;
        q->spec_accepted += emit - 1;
        if (q->generated == 0) q->first_token_s = now;
        q->generated += emit;
        int32_t keep = sched_blocks_for(s, (int64_t)q->computed + 1);
        if (keep < q->num_blocks) { /* blocks held only for rejected drafts */
            kv_release(s->kv, x->blocks + keep, q->num_blocks - keep);
            q->num_blocks = keep;
        }
        if (q->generated >= q->true_output_tokens) {
            q->finish_s = now;
            sched_finalize(s, x, SCHED_FINISHED, NULL);
            if (s->policy.on_finish && s->policy.on_finish(s->policy.ud, s, q) != 0) rc = -1;
        } else if (x->handoff) { /* prefilled: its blocks stay until sched_release */
            q->state = SCHED_TRANSFER;
            if (s->handoff_fn) s->handoff_fn(s->handoff_ud, q);
            if (s->policy.on_finish && s->policy.on_finish(s->policy.ud, s, q) != 0) rc = -1;
        }
    }
    s->need_compact = 1;
    compact_lists_and_recycle(s);
    return rc;
}

void sched_abort_all(sched_t *s, const char *reason) {
    while (s->transit.n > 0) { /* not in the lists below: ended and recycled here */
        slot_t *x = sched_queue_at(&s->transit, --s->transit.n);
        sched_finalize(s, x, SCHED_ABORTED, reason);
        sched_slot_put(s, x);
    }
    s->reserved = 0;
    queue_t *lists[2] = { &s->running, &s->waiting };
    for (int l = 0; l < 2; l++)
        for (int32_t i = 0; i < lists[l]->n; i++) {
            slot_t *x = sched_queue_at(lists[l], i);
            if (x->pub.state < SCHED_FINISHED) {
                sched_finalize(s, x, SCHED_ABORTED, reason);
                if (l == 1) s->wait_out++;
            }
        }
    s->need_compact = 1;
    compact_lists_and_recycle(s);
}

/* ------------------------------------------------------------------ queries */

const int32_t *sched_req_blocks(const sched_t *s, int32_t id, int32_t *n) {
    const slot_t *x = sched_map_get(s, id);
    *n = x ? x->pub.num_blocks : 0;
    return x ? x->blocks : NULL;
}

int32_t sched_kv_refcount(const sched_t *s, int32_t block) { return kv_refcount(s->kv, block); }

const sched_req_t *sched_find(const sched_t *s, int32_t id) {
    slot_t *x = sched_map_get(s, id);
    return x && x->pub.state != SCHED_TRANSFER ? &x->pub : NULL;
}

/* 64-bit: n comes from policy code and may be anything. Saturates at INT32_MAX. */
static int32_t blocks_needed(const sched_t *s, const slot_t *x, int64_t n) {
    int64_t tokens = (int64_t)x->pub.computed + (n > 0 ? n : 0);
    int64_t need = (int64_t)sched_blocks_for(s, tokens) - x->pub.num_blocks;
    return need <= 0 ? 0 : need > INT32_MAX ? INT32_MAX : (int32_t)need;
}

int32_t sched_blocks_needed(const sched_t *s, int32_t id, int32_t n) {
    const slot_t *x = sched_map_get(s, id);
    return x ? blocks_needed(s, x, n) : -1;
}

int sched_can_allocate(const sched_t *s, int32_t id, int32_t n) {
    const slot_t *x = sched_map_get(s, id);
    if (!x || x->pub.state >= SCHED_FINISHED) return 0;
    int32_t reserve = x->pub.state == SCHED_RUNNING ? 0 : s->view.watermark_blocks;
    return blocks_needed(s, x, n) <= kv_num_free(s->kv) - reserve;
}

int sched_set_tiers(sched_t *s, struct kv_tiers *tiers) {
    if (tiers && !s->cfg.prefix_caching) {
        sched_set_error(s, "KV tiers below HBM hold prefix-cache blocks: they need prefix "
                        "caching on");
        return -1;
    }
    s->tiers = tiers;
    kv_set_tiers(s->kv, tiers);
    return 0;
}

int32_t sched_prefix_hit(const sched_t *s, int32_t id) {
    const slot_t *x = sched_map_get(s, id);
    if (!x || !x->prefix || x->pub.state >= SCHED_FINISHED || x->pub.computed != 0 ||
        x->pub.num_blocks != 0 || x->in_plan)
        return 0;
    int32_t bs = s->cfg.block_size, idle;
    /* As sched_plan_schedule looks: at most all but the last token (the logits need it). */
    return bs * prefix_match(x->prefix, s->kv, (sched_req_remaining(&x->pub) - 1) / bs, NULL,
                             &idle);
}

double sched_random(sched_t *s) { return rng_uniform(&s->rng); }
/* Inside a step the running list still holds this step's preemptions and lacks its
 * admissions (they move at the end of the step). */
int32_t sched_running_seqs(const sched_t *s) {
    return s->reserved +
           (s->in_step ? s->running.n - s->plan.num_preempted + s->admitted : s->running.n);
}
int32_t sched_num_unfinished(const sched_t *s) { return s->num_unfinished; }
int32_t sched_kv_used(const sched_t *s) { return kv_num_used(s->kv); }
int32_t sched_kv_total(const sched_t *s) { return kv_num_blocks(s->kv); }
const struct kv *sched_kv(const sched_t *s) { return s->kv; }
int sched_stalled(const sched_t *s) { return s->stalled; }
double sched_wakeup(const sched_t *s) { return s->view.wake_at; }
int64_t sched_total_preemptions(const sched_t *s) { return s->total_preemptions; }

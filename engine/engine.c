/* engine: see engine.h. */
#include "engine/engine.h"
#include "engine/engine_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "engine/backend.h"
#include "engine/draft.h"
#include "engine/forward.h"
#include "engine/live.h"
#include "engine/model.h"
#include "engine/spec.h"
#include "policies/replay.h"
#include "traces/rng.h"
#include "traces/json.h"
#include "traces/recorder.h"

/* An idle wait sleeps until this long before its end and spins the rest on the clock:
 * nanosleep wakes 30-65 us late in this VM even with a timer slack of 1 ns (75-120 us with
 * the default 50 us), varying from wait to wait, and an arrival seen late adds that to its
 * TTFT. */
#define ENGINE_WAKE_EARLY_S 200e-6
/* The untimed warm-up pass: at most this many tokens (a prompt of one sequence). */
#define ENGINE_WARMUP_TOKENS 512

void engine_opts_defaults(engine_opts_t *o) {
    memset(o, 0, sizeof *o);
    o->trace_opts.rate_scale = 1.0;
    o->backend = "cpu";
    o->db_path = "twinserve.db";
    o->top_p = 1.0f;
    o->block_size = 16;
    o->max_tokens = 2048;
    o->max_seqs = 64;
    o->watermark = 0.01;
    o->version = "dev";
}

void engine_prompt_tokens(uint64_t seed, int32_t id, int32_t vocab, int32_t *out, int32_t n) {
    rng_t r;
    rng_seed3(&r, seed, (uint64_t)(uint32_t)id, 0x70726f6d7074ULL /* "prompt" */);
    uint64_t span = vocab > 3 ? (uint64_t)(vocab - 3) : 1;
    for (int32_t i = 0; i < n; i++) out[i] = 3 + (int32_t)(rng_u64(&r) % span);
}

void engine_prompt_tokens_hashed(uint64_t seed, int32_t id, const int64_t *hash_ids,
                                 int32_t n_hash, int32_t hash_block, int32_t vocab,
                                 int32_t *out, int32_t n) {
    /* the request's own tokens first, so that its unshared tail is as without hashes */
    engine_prompt_tokens(seed, id, vocab, out, n);
    if (hash_block <= 0) return;
    uint64_t span = vocab > 3 ? (uint64_t)(vocab - 3) : 1;
    for (int32_t h = 0; h < n_hash && (int64_t)h * hash_block < n; h++) {
        rng_t r;
        rng_seed3(&r, seed, (uint64_t)hash_ids[h], 0x707265666978ULL /* "prefix" */);
        int64_t end = (int64_t)(h + 1) * hash_block;
        if (end > n) end = n;
        for (int64_t i = (int64_t)h * hash_block; i < end; i++)
            out[i] = 3 + (int32_t)(rng_u64(&r) % span);
    }
}

static double now_s(const engine_t *e) { return replay_wall() - e->t0; }

/* ------------------------------------------------------------------ requests */

static ereq_t *req_get(engine_t *e, int32_t id) {
    return id >= 0 && id < e->reqs_cap ? e->reqs[id] : NULL;
}

static int req_reserve(engine_t *e, ereq_t *x, int64_t n, int32_t id) {
    if (n <= x->cap) return 0;
    int64_t cap = n + n / 2 + 8;
    int32_t *t = realloc(x->toks, sizeof *t * (size_t)cap);
    if (!t) return FAIL(e, "out of memory (tokens of request %d)", id);
    x->toks = t;
    x->cap = (int32_t)cap;
    return 0;
}

/* Before the core sees the request: a request it will reject at arrival (an empty or too
 * long one) gets no tokens. */
static int req_new(engine_t *e, const trace_req_t *q) {
    if (q->id < 0) return FAIL(e, "trace request id %d is negative", q->id);
    if (q->id >= e->reqs_cap) {
        int64_t cap = e->reqs_cap ? e->reqs_cap : 1024;
        while (cap <= q->id) cap *= 2;
        ereq_t **v = realloc(e->reqs, sizeof *v * (size_t)cap);
        if (!v) return FAIL(e, "out of memory (request table)");
        memset(v + e->reqs_cap, 0, sizeof *v * (size_t)(cap - e->reqs_cap));
        e->reqs = v;
        e->reqs_cap = cap;
    }
    ereq_t *x = calloc(1, sizeof *x);
    if (!x) return FAIL(e, "out of memory (request %d)", q->id);
    e->reqs[q->id] = x;
    /* The output stops at the request's limit, as the core ends it (sched_add). */
    int32_t cap = q->max_output_tokens > 0 ? q->max_output_tokens : e->o->max_output_tokens;
    int32_t prompt = q->prompt_tokens, out = q->output_tokens;
    if (e->o->clip_to_context) sched_clip_lengths(&prompt, &out, e->max_model_len); /* as the core */
    int64_t total = (int64_t)prompt + (cap > 0 && out > cap ? cap : out);
    if (prompt > 0 && total <= e->max_model_len) {
        if (req_reserve(e, x, total + 1, q->id)) return -1;
        /* with or without the cache, so that caching cannot change an output */
        engine_prompt_tokens_hashed(e->o->seed, q->id, q->hash_ids, q->n_hash, q->hash_block,
                                    e->vocab, x->toks, prompt);
        x->n_prompt = prompt;
    }
    return 0;
}

static void req_final(void *ud, const sched_req_t *r, const char *reason) {
    engine_t *e = ud;
    if (e->o->live)
        live_engine_final(e->o->live, r->id, r->state, reason, r->prompt_tokens, r->generated);
    ereq_t *x = req_get(e, r->id);
    if (!x) return;
    free(x->toks);
    free(x);
    e->reqs[r->id] = NULL;
    if (e->draft) draft_forget(e->draft, r->id);
}

/* ------------------------------------------------------------------ one step */

static int reserve_seqs(engine_t *e, int32_t n_seqs, int64_t n_bt, int32_t n_entries) {
    if (n_seqs + 1 > e->seq_cap || !e->seq_start) {
        int32_t cap = n_seqs + 1 > e->seq_cap ? (n_seqs + 1) * 2 : e->seq_cap;
        if (engine_grow_i32(e, &e->seq_start, cap + 1) || engine_grow_i32(e, &e->seq_len, cap) ||
            engine_grow_i32(e, &e->bt_start, cap + 1))
            return -1;
        e->seq_cap = cap;
    }
    if (n_bt > e->bt_cap || !e->block_table) {
        int64_t cap = n_bt > e->bt_cap ? n_bt * 2 : e->bt_cap;
        if (engine_grow_i32(e, &e->block_table, cap)) return -1;
        e->bt_cap = cap;
    }
    if (n_entries > e->entry_cap || !e->accepted) {
        int32_t cap = n_entries > e->entry_cap ? n_entries * 2 : e->entry_cap;
        if (engine_grow_i32(e, &e->accepted, cap) || engine_grow_i32(e, &e->drafts_at, cap)) return -1;
        e->entry_cap = cap;
    }
    return 0;
}

static bk_sample_t sample_params(const engine_t *e, int32_t id, int32_t idx) {
    /* The request's stream: (seed, id) mixed once; the sampler adds the output index. */
    rng_t r;
    rng_seed3(&r, e->o->seed, (uint64_t)(uint32_t)id, 0x73616d706c65ULL /* "sample" */);
    bk_sample_t sp = { .temperature = e->o->temperature, .top_k = e->o->top_k,
                       .top_p = e->o->top_p, .seed = rng_u64(&r), .idx = idx };
    if (e->o->live) live_engine_sampling(e->o->live, id, &sp); /* a live request's own */
    return sp;
}

/* Lays out the plan as a ragged batch: each entry's known tokens, then its drafts; then
 * static batching's padding as throwaway sequences over the scratch blocks. */
static int build_batch(engine_t *e, const sched_plan_t *p, bk_batch_t *b) {
    int64_t n_bt = 0;
    for (int32_t i = 0; i < p->n; i++) n_bt += p->entries[i].num_blocks;
    n_bt += (int64_t)p->n_pads * e->scratch_n;
    if (reserve_seqs(e, p->n + p->n_pads, n_bt, p->n)) return -1;
    if (p->num_tokens > e->o->max_tokens)
        return FAIL(e, "step %lld has %d tokens, more than --max-tokens %d",
                    (long long)p->step, p->num_tokens, e->o->max_tokens);
    int32_t t = 0, s = 0, ns = 0;
    int64_t bt = 0;
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *en = &p->entries[i];
        ereq_t *x = req_get(e, en->req_id);
        int32_t known = en->req->prompt_tokens + en->req->generated;
        int32_t k = en->sample ? en->num_spec : 0;
        if (!x || !x->toks || en->start + en->num_tokens > known)
            return FAIL(e, "internal: request %d scheduled with no tokens to compute",
                        en->req_id);
        if (req_reserve(e, x, (int64_t)known + k + 1, en->req_id)) return -1;
        if (k > 0 && !e->draft) spec_propose_ngram(x->toks, known, k, x->toks + known);
        e->seq_start[s] = t;
        e->bt_start[s] = (int32_t)bt;
        for (int32_t j = 0; j < en->num_tokens + k; j++, t++) {
            e->tokens[t] = x->toks[en->start + j];
            e->pos[t] = en->start + j;
        }
        e->seq_len[s] = en->start + en->num_tokens + k;
        memcpy(e->block_table + bt, en->blocks, sizeof(int32_t) * (size_t)en->num_blocks);
        bt += en->num_blocks;
        e->drafts_at[i] = -1;
        if (en->sample) {
            e->drafts_at[i] = ns;
            for (int32_t j = 0; j <= k; j++) {
                if (ns >= e->max_sample)
                    return FAIL(e, "step %lld samples more than %d rows (the logits buffer "
                                "for this vocabulary); lower --max-seqs or the policy's k",
                                (long long)p->step, e->max_sample);
                e->sample_rows[ns] = t - 1 - k + j;
                e->sample[ns++] = sample_params(e, en->req_id, en->req->generated + j);
            }
        }
        s++;
    }
    for (int32_t i = 0; i < p->n_pads; i++) {
        const sched_pad_t *pd = &p->pads[i];
        /* The core refuses padding past the context (sched_plan_pad), the same limit. */
        if ((int64_t)pd->ctx + pd->num_tokens > e->max_model_len)
            return FAIL(e, "step %lld: padding of %d tokens at context %d exceeds the context "
                        "length %d", (long long)p->step, pd->num_tokens, pd->ctx,
                        e->max_model_len);
        int32_t ctx = pd->ctx;
        e->seq_start[s] = t;
        e->bt_start[s] = (int32_t)bt;
        for (int32_t j = 0; j < pd->num_tokens; j++, t++) {
            e->tokens[t] = 0;
            e->pos[t] = ctx + j;
            /* Padded decode slots still produce logits (discarded), as in a static batch. */
            if (pd->ctx > 0 && ns < e->max_sample) {
                e->sample_rows[ns] = t;
                e->sample[ns++] = (bk_sample_t){ .temperature = 0, .top_p = 1 };
            }
        }
        e->seq_len[s] = ctx + pd->num_tokens;
        memcpy(e->block_table + bt, e->scratch_table, sizeof(int32_t) * (size_t)e->scratch_n);
        bt += e->scratch_n;
        s++;
    }
    e->seq_start[s] = t;
    e->bt_start[s] = (int32_t)bt;
    *b = (bk_batch_t){
        .n_tokens = t, .n_seqs = s, .tokens = e->tokens, .pos = e->pos,
        .seq_start = e->seq_start, .seq_len = e->seq_len, .bt_start = e->bt_start,
        .block_table = e->block_table, .n_sample = ns, .sample_rows = e->sample_rows,
        .sample = e->sample,
    };
    return 0;
}

/* s:step_cost with --policy-cost: the file's pass and host time of the shape. */
static double policy_estimate(void *ud, const sched_shape_t *seqs, int32_t n) {
    const cost_model_t *m = ud;
    cost_features_t f = {0};
    for (int32_t i = 0; i < n; i++)
        cost_features_add(&f, seqs[i].n_new, seqs[i].ctx, seqs[i].n_sampled);
    return cost_pass_time(m, &f) + cost_host_time(m, &f);
}

/* The target's logits rows [row0, row0 + n) on the host in e->lp_rows: the distributions
 * the emitted tokens were drawn from (a live request's log-probabilities). */
static int logits_rows(engine_t *e, int32_t row0, int32_t n) {
    size_t need = (size_t)n * (size_t)e->vocab;
    if (need > e->lp_cap) {
        float *p = realloc(e->lp_rows, sizeof *p * need);
        if (!p) return FAIL(e, "out of memory (logits of %d rows for log-probabilities)", n);
        e->lp_rows = p, e->lp_cap = need;
    }
    if (fwd_logits_rows(e->fwd, row0, n, e->lp_rows))
        return FAIL(e, "log-probabilities: %s", fwd_errmsg(e->fwd));
    return 0;
}

/* Appends each sampled entry's emitted tokens (the sampled token, after accepted drafts)
 * and records them; fills e->accepted for sched_commit. */
static int take_tokens(engine_t *e, const sched_plan_t *p, double t_end) {
    for (int32_t i = 0; i < p->n; i++) {
        const sched_entry_t *en = &p->entries[i];
        e->accepted[i] = 0;
        if (!en->sample) continue;
        ereq_t *x = req_get(e, en->req_id);
        int32_t known = en->req->prompt_tokens + en->req->generated;
        int32_t k = en->num_spec;
        const int32_t *sampled = e->ids + e->drafts_at[i];
        int32_t a = e->draft && k > 0
                        ? draft_verify(e->draft, i, e->fwd, e->drafts_at[i], sampled,
                                       e->sample + e->drafts_at[i], &sampled)
                        : spec_accept(x->toks + known, sampled, k);
        if (a < 0) return FAIL(e, "step %lld: %s", (long long)p->step, draft_errmsg(e->draft));
        if (k > 0) spec_curve_add(&e->curve, k, a);
        int32_t emit = sched_req_emit(en->req, a);
        e->spec_proposed += k;
        e->spec_accepted += emit - 1;
        /* a live request that ended inside the step keeps its tokens through the ending */
        int32_t keep = emit;
        if (e->o->live && live_engine_logprobs(e->o->live, en->req_id)) {
            if (logits_rows(e, e->drafts_at[i], emit)) return -1;
            keep = live_engine_emit_logits(e->o->live, en->req_id, sampled, emit, e->lp_rows,
                                           e->vocab);
        } else if (e->o->live) {
            keep = live_engine_emit(e->o->live, en->req_id, sampled, emit);
        }
        e->accepted[i] = keep < emit ? keep - 1 : a;
        emit = keep;
        for (int32_t j = 0; j < emit; j++) {
            x->toks[known + j] = sampled[j];
            if (!e->o->save_tokens) continue;
            rec_token_t tk = { .req_id = en->req_id, .idx = en->req->generated + j,
                               .token_id = sampled[j], .t_s = t_end };
            if (rec_token(e->rp.rec, e->rp.run_id, &tk) != 0)
                return FAIL(e, "recording tokens of request %d: %s", en->req_id,
                            rec_errmsg(e->rp.rec));
        }
    }
    return 0;
}

/* draft_plan's view of the engine's requests (draft.h). */
static int32_t *draft_tokens(void *ud, int32_t id, int64_t room) {
    engine_t *e = ud;
    ereq_t *x = req_get(e, id);
    if (!x || !x->toks) {
        FAIL(e, "internal: request %d has no tokens", id);
        return NULL;
    }
    return req_reserve(e, x, room, id) ? NULL : x->toks;
}

static bk_sample_t draft_sample(void *ud, int32_t id, int32_t idx) {
    return sample_params(ud, id, idx);
}

static int run_step(engine_t *e, const sched_plan_t *p, double sched_s) {
    bk_batch_t b;
    cost_features_t feat;
    /* the step's time covers the draft's passes too, as the simulator's cost does */
    double start = now_s(e);
    draft_src_t src = { e, draft_tokens, draft_sample };
    if (e->draft && draft_plan(e->draft, p, &src) != 0)
        return e->rp.failed ? -1 : FAIL(e, "step %lld: %s", (long long)p->step,
                                         draft_errmsg(e->draft));
    if (build_batch(e, p, &b)) return -1;
    fwd_batch_features(&b, &feat);
    if (fwd_step(e->fwd, &b, e->ids) != 0)
        return FAIL(e, "step %lld: %s", (long long)p->step, fwd_errmsg(e->fwd));
    double end = now_s(e);
    double host_s = start - e->ready_s;
    e->ready_s = end;
    double w0 = replay_wall();
    if (take_tokens(e, p, end)) return -1;
    if (sched_commit(e->rp.sched, p, e->accepted, end) != 0)
        return FAIL(e, "%s", sched_errmsg(e->rp.sched));
    double commit_s = replay_wall() - w0;
    rec_step_t st = {
        .step = p->step, .start_s = start, .dur_s = end - start,
        .prefill_tokens = p->prefill_tokens, .decode_tokens = p->decode_tokens,
        .pad_tokens = p->pad_tokens, .num_seqs = p->n, .num_preempted = p->num_preempted,
        .sched_s = sched_s + commit_s,
        .tokens = feat.tokens, .pass_seqs = feat.seqs, .sampled = feat.sampled,
        .kv_tokens = feat.kv_tokens, .attn_pairs = feat.attn_pairs, .host_s = host_s,
    };
    e->steps++;
    e->step_s += end - start;
    e->sched_s += sched_s + commit_s;
    return replay_record_step(&e->rp, &st);
}

/* ------------------------------------------------------------------ the loop */

/* Waits until run time t: on the clock (the default), or asleep but for the last
 * ENGINE_WAKE_EARLY_S on the clock (idle_sleep). An interrupt ends the wait early, so that
 * a signal during a long gap between arrivals is answered at once. */
static void sleep_until(const engine_t *e, double t) {
    const volatile sig_atomic_t *stop = e->o->interrupt;
    double d = t - ENGINE_WAKE_EARLY_S - now_s(e);
    if (d > 0 && e->o->idle_sleep) {
        struct timespec ts = { .tv_sec = (time_t)d, .tv_nsec = (long)((d - floor(d)) * 1e9) };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !(stop && *stop)) {
        }
    }
    while (now_s(e) < t && !(stop && *stop)) {
    }
}

/* One untimed pass before the clock starts, so that the first timed steps do not pay for
 * first touches (activation and scratch pages, the sampled rows' logits), cold code and
 * caches, and threads that slept through setup: a prompt of up to ENGINE_WARMUP_TOKENS
 * tokens over padding's scratch blocks, sampling up to max_seqs rows. Its outputs are
 * thrown away; the KV it leaves in the scratch blocks is finite, and only padding, whose
 * outputs are thrown away too, reads those blocks. */
static int warm_up(engine_t *e) {
    int32_t n = e->o->max_tokens < e->max_model_len ? e->o->max_tokens : e->max_model_len;
    if (n > ENGINE_WARMUP_TOKENS) n = ENGINE_WARMUP_TOKENS;
    if (fwd_warm_up(e->fwd, e->scratch_table, e->scratch_n, n, e->o->max_seqs) != 0)
        return FAIL(e, "warm-up pass: %s", fwd_errmsg(e->fwd));
    if (e->draft && draft_warm_up(e->draft, e->scratch_table, e->scratch_n, n) != 0)
        return FAIL(e, "warm-up pass: %s", draft_errmsg(e->draft));
    return 0;
}

static int add_request(engine_t *e, trace_req_t *q, double now) {
    if (req_new(e, q)) return -1;
    /* Prompts are synthetic ids, not the trace's texts: the hashes hold only where the
     * prompt was made from them (prefix caching). */
    if (!e->o->prefix_caching) q->n_hash = 0;
    e->hashed_requests += q->n_hash > 0;
    return replay_add(&e->rp, q, e->o->prefix_caching ? q->hash_block : 0, now);
}

/* Live requests (engine/live.h), at a step boundary: the arrivals submitted since the last
 * one, with their prompts (arrival = when the server received them), then the endings
 * asked for (EOS, stop strings, clients gone). */
static int take_live(engine_t *e, double now) {
    live_t *l = e->o->live;
    live_arrival_t a;
    while (live_engine_pop(l, &a) > 0) {
        trace_req_t q = { .id = a.id, .arrival_s = a.received - e->t0,
                          .prompt_tokens = a.n_prompt, .output_tokens = a.max_tokens,
                          .max_output_tokens = a.max_tokens };
        if (q.arrival_s > now) q.arrival_s = now;
        if (req_new(e, &q)) return -1;
        ereq_t *x = req_get(e, a.id);
        if (x->toks) memcpy(x->toks, a.prompt, sizeof(int32_t) * (size_t)a.n_prompt);
        /* with the cache, the prompt's own blocks name its content (out of memory: none) */
        int64_t *hash = NULL;
        if (e->o->prefix_caching &&
            (hash = malloc(sizeof *hash * (size_t)(a.n_prompt / e->o->block_size + 1)))) {
            q.n_hash = live_prompt_hashes(a.prompt, a.n_prompt, e->o->block_size, hash);
            q.hash_ids = hash;
            q.hash_block = e->o->block_size;
            e->hashed_requests += q.n_hash > 0;
        }
        int rc = replay_add(&e->rp, &q, q.hash_block, now);
        free(hash);
        if (rc) return -1;
    }
    int32_t id, state;
    char reason[64];
    while (live_engine_next_ending(l, &id, &state, reason, sizeof reason) > 0)
        if (sched_finish_early(e->rp.sched, id, state, reason, now) < 0)
            return FAIL(e, "%s", sched_errmsg(e->rp.sched));
    const sched_view_t *v = sched_view(e->rp.sched);
    live_engine_stats(l, v->n_waiting, v->n_running, sched_kv_used(e->rp.sched), e->steps);
    return 0;
}

static int run_loop(engine_t *e) {
    trace_req_t next;
    live_t *live = e->o->live;
    int have = live ? 0 : replay_next(&e->rp, &next);
    if (have < 0) return -1;
    if (warm_up(e)) return -1;
    e->t0 = replay_wall();
    if (live) {
        live_engine_offer_logprobs(live); /* every backend hands its logits rows over */
        live_engine_ready(live, e->t0, e->max_model_len, e->num_blocks);
    }
    for (;;) {
        double now = now_s(e);
        while (have > 0 && next.arrival_s <= now) {
            if (add_request(e, &next, now)) return -1;
            have = replay_next(&e->rp, &next);
            if (have < 0) return -1;
        }
        if (live && take_live(e, now)) return -1;
        int idle = sched_num_unfinished(e->rp.sched) == 0;
        /* a server stopped with nothing in flight has simply ended */
        if (live && idle && e->o->interrupt && *e->o->interrupt) break;
        /* a step boundary (or the end of an idle wait): nothing in flight; the requests
         * that have arrived are recorded as aborted */
        if (replay_interrupted(&e->rp, now)) return -1;
        if (have == 0 && idle && !live) break;
        if (live && idle && !isfinite(sched_wakeup(e->rp.sched))) {
            live_engine_wait(live, 0.1); /* the interrupt flag is polled at this pace */
            continue;
        }
        const sched_plan_t *p;
        double w0 = replay_wall();
        if (sched_step(e->rp.sched, now, &p) != 0) return FAIL(e, "%s", sched_errmsg(e->rp.sched));
        double sched_s = replay_wall() - w0;
        if (p->n > 0 || p->n_pads > 0) {
            if (run_step(e, p, sched_s) || replay_after_step(&e->rp, p)) return -1;
            if (e->o->progress) replay_progress(&e->rp, "engine", now_s(e), e->steps, 0);
            continue;
        }
        if (replay_after_idle(&e->rp)) return -1;
        if (p->num_rejected > 0 || p->num_preempted > 0) continue;
        double wake = sched_wakeup(e->rp.sched);
        double until = have > 0 ? next.arrival_s : INFINITY;
        if (wake < until) until = wake;
        if (live) { /* an arrival may come at any time: wait for it, or until the wake-up */
            live_engine_wait(live, fmin(until - now, 0.1));
            e->ready_s = now_s(e);
            continue;
        }
        if (!isfinite(until)) {
            if (sched_num_unfinished(e->rp.sched) == 0) break;
            return replay_stalled(&e->rp, now);
        }
        sleep_until(e, until);
        e->ready_s = now_s(e);
    }
    if (e->o->progress) replay_progress(&e->rp, "engine", now_s(e), e->steps, 1);
    return 0;
}

/* ------------------------------------------------------------------ entry point */

/* The run's per-position acceptance (spec.h) into its config's "spec_curve", for
 * `calibrate` to print with the alpha it implies. */
static void record_curve(engine_t *e) {
    if (e->curve.n == 0 || e->rp.run_id < 0) return;
    char buf[SPEC_CURVE_JSON_MAX];
    spec_curve_json(&e->curve, buf);
    if (rec_run_config_set(e->rp.rec, e->rp.run_id, "spec_curve", buf) != 0 && !e->rp.failed)
        replay_fail(&e->rp, "%s", rec_errmsg(e->rp.rec));
}

int engine_run(const engine_opts_t *o, engine_result_t *res, char *err, size_t errlen) {
    engine_t e = { .o = o };
    memset(res, 0, sizeof *res);
    res->run_id = -1;
    char trace_desc[1200], hw_desc[128] = "", *config = NULL;
    int rc = replay_init(&e.rp, o->db_path);
    e.rp.on_final = req_final;
    e.rp.final_ud = &e;
    if (rc != 0) goto done;

    char base[1024] = "serve: live requests"; /* no trace: the clients' own prompts */
    if (!o->live) replay_describe_trace(o->trace_path, &o->trace_opts, base, sizeof base);
    snprintf(trace_desc, sizeof trace_desc, "%s; engine: %s%s", base,
             o->live ? "the clients' prompts" : "synthetic prompts",
             o->prefix_caching ? ", prefix caching" : "");
    snprintf(hw_desc, sizeof hw_desc, "%s", o->backend ? o->backend : "cpu");
    rec_run_info_t early = {
        .name = o->run_name, .kind = o->live ? "serve" : "engine", .policy = o->policy_path,
        .params = "{}",
        .trace = trace_desc, .model = o->model, .hardware = hw_desc, .seed = o->seed,
        .version = o->version,
    };
    e.rp.early_info = &early;
    e.rp.interrupt = o->interrupt;
    int setup_rc = replay_load_policy(&e.rp, o->policy_path, o->sets, o->n_sets, &o->limits);
    char draft[256];
    if (setup_rc == 0 && !(o->draft && strcmp(o->draft, "ngram")) &&
        replay_param_str(&e.rp, "draft", draft, sizeof draft) == 1)
        fprintf(stderr, "twinserve engine: note: the policy's draft model '%s' is simulated; the "
                        "engine proposes drafts with its n-gram proposer (engine --draft FILE|dummy:PRESET runs a "
                        "draft model)\n", draft);
    if (setup_rc == 0) setup_rc = engine_setup(&e, hw_desc, sizeof hw_desc);
    if (setup_rc == 0) {
        sched_config_t cfg = {
            .num_blocks = e.num_blocks, .block_size = o->block_size, .watermark = o->watermark,
            .max_tokens = o->max_tokens, .max_seqs = o->max_seqs,
            .max_model_len = e.max_model_len, .seed = o->seed,
            .max_output_tokens = o->max_output_tokens, .oracle_lengths = o->oracle_lengths,
            .clip_to_context = o->clip_to_context, .prefix_caching = o->prefix_caching,
        };
        setup_rc = replay_start_sched(&e.rp, &cfg);
        if (setup_rc == 0 && e.policy_cost)
            sched_set_cost_fn(e.rp.sched, policy_estimate, e.policy_cost);
    }
    if (setup_rc == 0 && !o->live)
        setup_rc = replay_open_trace(&e.rp, o->trace_path, &o->trace_opts);
    /* A configuration that cannot run records nothing (engine.h): the caller says why. */
    if (setup_rc != 0) {
        res->setup_failed = 1;
        goto done;
    }
    /* Ctrl-C while the model loaded: nothing ran, nothing is recorded. */
    if (replay_not_started(&e.rp)) goto done;
    if (o->progress && !o->live) replay_count_trace(&e.rp, o->trace_path, &o->trace_opts);

    /* Everything a replay of this run needs (validate: the simulator on the same workload,
     * or the engine again with --repeat). */
    if (!(config = engine_config_json(&e))) {
        replay_fail(&e.rp, "out of memory (run config)");
        goto done;
    }
    rec_run_info_t info = early;
    info.params = lhost_params_json_for(e.rp.host, "engine"); /* sim-only params had no effect */
    info.model = e.model_source[0] ? e.model_source : o->model;
    info.config = config;
    if (replay_begin(&e.rp, &info) != 0) goto done;
    res->run_id = e.rp.run_id;
    /* Idle waits end on time: nanosleep's default timer slack (50 us) would add to the
     * TTFT of every request that arrives at an idle engine. Restored after the run. */
    int slack = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    /* Cores kept awake through idle waits: a halted vCPU comes back slow for tens of
     * ms (engine.h, idle_sleep), which the simulator cannot know of. */
    int warm = !o->idle_sleep && e.bk->keep_warm;
    if (warm) e.bk->keep_warm(e.bk, 1);
    run_loop(&e);
    if (o->prefix_caching && e.hashed_requests == 0 && !e.rp.failed)
        fprintf(stderr, "twinserve engine: note: this trace names no shared prefixes (Mooncake "
                        "hash_ids, or a plain trace's prefix_group,prefix_tokens columns): "
                        "--prefix-caching only spares preempted requests their recompute\n");
    if (warm) e.bk->keep_warm(e.bk, 0);
    record_curve(&e);
    if (slack > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)slack, 0, 0, 0);
    replay_finish(&e.rp);
    /* the clients of requests still open learn why (their rows were written above) */
    if (o->live) live_engine_close(o->live, e.rp.failed ? e.rp.err : "the server stopped");
    res->requests = e.rp.requests;
    res->skipped = e.rp.trace ? trace_skipped(e.rp.trace) : 0;
    res->steps = e.steps;
    res->num_blocks = e.num_blocks;
    res->wall_s = replay_wall() - e.rp.wall0;
    res->step_s = e.step_s;
    res->sched_s = e.sched_s;
    res->spec_proposed = e.spec_proposed;
    res->spec_accepted = e.spec_accepted;
    if (!e.rp.failed) {
        char m[256];
        res->have_summary = summary_load(rec_db(e.rp.rec), e.rp.run_id, &res->summary, m,
                                         sizeof m) == 0;
    }
done:
    res->interrupted = e.rp.interrupted;
    if (e.rp.failed) snprintf(err, errlen, "%s", e.rp.err);
    rc = e.rp.failed ? -1 : 0;
    replay_close(&e.rp); /* aborted requests' tokens are freed through req_final first */
    for (int64_t i = 0; i < e.reqs_cap; i++)
        if (e.reqs[i]) {
            free(e.reqs[i]->toks);
            free(e.reqs[i]);
        }
    free(e.reqs);
    fwd_free(e.fwd);
    draft_free(e.draft);
    if (e.bk) e.bk->destroy(e.bk);
    model_free(e.model);
    free(e.tokens), free(e.pos), free(e.seq_start), free(e.seq_len), free(e.bt_start);
    free(e.block_table), free(e.sample_rows), free(e.ids), free(e.sample), free(e.lp_rows);
    cost_free(e.policy_cost);
    free(e.scratch_table), free(e.accepted), free(e.drafts_at);
    free(config);
    return rc;
}

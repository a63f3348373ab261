/* sched: the scheduler core shared by the engine and the simulator (one object per replica).
 *
 * The cycle, called identically by both executors (vLLM v1 style):
 *     sched_add(s, &req, now)                  an arrival
 *     sched_step(s, now, &plan)                the policy proposes the next batch, the core checks it
 *     ... the executor runs the plan ...       engine: a forward pass; sim: a cost model
 *     sched_commit(s, plan, accepted, now)     tokens emitted, finishes, timestamps, KV freed
 *
 * There is no prefill or decode phase here. Each request has `computed` tokens (KV in cache)
 * chasing its known tokens (prompt + generated). A plan entry computes `num_tokens` of them
 * (a whole prompt, a chunk, the one decode token, or a recompute after preemption) and may
 * append `num_spec` draft tokens to verify. When an entry reaches the end of the known tokens,
 * a token is sampled: 1 + accepted drafts are emitted.
 *
 * Invariants:
 *  - The core never reads a clock: time is an argument. Its only randomness is the seeded
 *    stream behind sched_random(). Same requests + policy + seed => same decisions.
 *  - Every plan passes through the sched_plan_* calls, which validate each proposal (unknown,
 *    finished or duplicate requests, counts, token and sequence budgets, KV capacity) and
 *    refuse it with a message; nothing is silently fixed. A refused call changes nothing.
 *  - KV blocks are allocated when a request is scheduled and freed when it finishes, is
 *    preempted (recompute, as vLLM) or rejected. Capacity is a number of blocks given by the
 *    executor; kv_used never exceeds it.
 *  - A request that can never fit (context length, KV capacity, empty prompt) is rejected at
 *    arrival with a reason; the run goes on.
 *  - Each request reaches exactly one final state (finished, rejected, or aborted by
 *    sched_abort_all; or ended early by sched_finish_early) and is then reported once
 *    through the sink.
 *  - Prefix caching (optional): when a request with prompt hashes is admitted with nothing
 *    computed, the longest run of its leading full prompt blocks found in the cache is
 *    taken instead of computed (at least one token is always left to compute, for the
 *    logits). The plan entry then computes min(n, what is left): cached tokens are free.
 *    Idle cached blocks use up free blocks when taken: the core takes fewer hits rather
 *    than refuse a call that sched_can_allocate allowed.
 *    Blocks a request computes are published to the cache as they become full: prompt
 *    and generated tokens alike, so a preempted request recomputes only evicted blocks.
 *  - Output lengths: a request ends when it has true_output_tokens (the trace's length,
 *    clipped to its limit), as EOS would end it. Policies see output_tokens, the limit,
 *    unless the config asks for the oracle; the true length never reaches them otherwise.
 *  - Disaggregation (prefill/decode replicas, each its own sched_t; the executor moves
 *    the KV between them). A request added with `handoff` set is prefilled here and, at the
 *    commit that emits its first token (unless that token ends it), handed off instead of
 *    finished: it leaves the running list, the policy's on_finish sees it (state
 *    SCHED_TRANSFER), the handoff hook is called, and its blocks stay held (they count
 *    against this replica's KV) until sched_release. The decode side takes it with
 *    sched_add_transfer, which reserves its blocks (prompt + the first token) before the
 *    transfer starts, all or nothing, leaving the watermark free as any admission: 1 when
 *    they are not free now (back-pressure: nothing changed, try again after a step), never
 *    an overflow. The reserved request is in no list (policies do not see it) until
 *    sched_transfer_done puts it at the end of the running list: a running decode whose
 *    first token was emitted on the prefill replica (first_token_s and cached_tokens kept),
 *    without an on_arrival call. Preempted there, it recomputes prompt and generated tokens
 *    on the decode replica, as any preemption. A request in transit counts as unfinished on
 *    both replicas; sched_abort_all ends it on each (the executor releases the prefill
 *    side's copy first when the decode side owns the request).
 *
 * Ownership: sched_new copies the config; the policy hooks' user data is borrowed for the
 * scheduler's lifetime. A sched_req_t view is owned by the core and valid until the request
 * is reported through the sink and the current sched_step/sched_commit call returns; the
 * plan returned by sched_step is owned by the core and valid until the next sched_step. */
#ifndef TWIN_SCHED_H
#define TWIN_SCHED_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of a tenant name, NUL included (equal to the trace's TRACE_TENANT_MAX). */
#define SCHED_TENANT_MAX 32

typedef enum {
    SCHED_WAITING = 0,   /* in the queue, never scheduled or waiting for its first step */
    SCHED_RUNNING = 1,   /* admitted: holds KV blocks */
    SCHED_PREEMPTED = 2, /* back in the queue after its KV was freed; will recompute */
    SCHED_FINISHED = 3,
    SCHED_REJECTED = 4,
    SCHED_ABORTED = 5,   /* the run failed before the request finished */
    SCHED_TRANSFER = 6   /* disaggregation: KV in transit (handed off, or reserved) */
} sched_state_t;

/* The read-only view of a request that policies see. This exact layout is declared to the
 * LuaJIT FFI (policies/prelude.lua): change both together (tests/test_lua_host.c checks). */
typedef struct sched_req {
    int32_t id;
    int32_t state;             /* sched_state_t */
    double arrival_s;
    int32_t prompt_tokens;
    int32_t output_tokens;     /* the output length policies may know: the request's limit
                                * (its max_tokens, see sched_add), or under oracle_lengths
                                * the true length */
    int32_t generated;         /* output tokens emitted so far */
    int32_t computed;          /* tokens whose K/V are in the cache */
    int32_t num_blocks;        /* KV blocks held */
    int32_t preemptions;
    int32_t scheduled;         /* tokens in the plan being built (0: not in it) */
    int32_t spec;              /* drafts in the plan being built */
    int32_t spec_proposed;
    int32_t spec_accepted;
    int32_t cached_tokens;     /* prompt tokens taken from the prefix cache at admission */
    int32_t reloaded_tokens;   /* of which reloaded from a tier below HBM (kv_tier.h) */
    int32_t predicted_output_tokens; /* a predictor's guess from the trace; -1: none */
    int32_t priority;          /* the trace's; lower = more urgent; 0 by default */
    double first_scheduled_s;  /* -1 until first scheduled */
    double first_token_s;      /* -1 until the first output token */
    double finish_s;           /* -1 until finished */
    /* More per-request metadata from the trace (traces/trace.h), for policies and records
     * (the core never uses it, nor priority above): Lua reads tenant_name as r.tenant (nil
     * when empty) and deadline as r.deadline_s (nil when none). Both keep the FFI's size a
     * multiple of 8, so that it ends exactly where the C-only tail begins. */
    double deadline;           /* seconds after arrival_s to finish by; -1: none */
    char tenant_name[SCHED_TENANT_MAX]; /* NUL-terminated; "" when none */
    /* C only, past the end of the FFI's declaration, so no policy can read it: the true
     * output length, where EOS comes (the trace's, clipped to the request's limit).
     * The core ends requests and executors clip speculative tokens with it. */
    int32_t true_output_tokens;
} sched_req_t;

/* Known tokens not yet in the cache: the prompt at first, 1 while decoding. */
static inline int32_t sched_req_remaining(const sched_req_t *r) {
    return r->prompt_tokens + r->generated - r->computed;
}

/* The tokens a sampled entry of r emits in a step that accepted `accepted` drafts: the
 * sampled token after them, capped at the true output still owed (EOS ends the step's
 * tokens there, whatever the policy drafted past it). sched_commit counts with it,
 * and so do executors that record the tokens before the commit. */
static inline int32_t sched_req_emit(const sched_req_t *r, int32_t accepted) {
    int32_t emit = 1 + accepted, left = r->true_output_tokens - r->generated;
    return emit < left ? emit : left;
}

typedef struct {
    int32_t id;
    double arrival_s;
    int32_t prompt_tokens;
    int32_t output_tokens;     /* the true length (the trace's) */
    int32_t max_output_tokens; /* the request's own limit (max_tokens); 0: none given */
    int32_t predicted_output_tokens; /* a length predictor's guess; 0: none */
    int32_t priority;          /* lower = more urgent; 0: the default */
    double deadline_s;         /* seconds after arrival to finish by; <= 0: none */
    const char *tenant;        /* copied (cut to SCHED_TENANT_MAX - 1 bytes); NULL: none */
    /* Optional, for the prefix cache: hashes of consecutive hash_block-token blocks of the
     * prompt, each covering its whole prefix (Mooncake's hash_ids). Copied. */
    const int64_t *hash_ids;
    int32_t n_hash;
    int32_t hash_block;
    int32_t handoff;           /* 1: prefill only, handed off after its first token */
} sched_new_req_t;

typedef struct {
    int32_t num_blocks;    /* KV capacity from the executor */
    int32_t block_size;    /* tokens per block (16) */
    double watermark;      /* fraction of blocks kept free when admitting new work (0.01) */
    int32_t max_tokens;    /* hard per-step token budget: the executor's activation size */
    int32_t max_seqs;      /* hard limit on running sequences (vLLM's max_num_seqs): admission
                            * counts running requests, planned or not */
    int32_t max_model_len; /* context length: prompt + output beyond it is rejected */
    int clip_to_context;   /* instead, clip such a request's prompt and output to it in
                            * proportion, as Vidur loads traces (same load as its runs) */
    uint64_t seed;
    int prefix_caching;    /* reuse KV blocks of equal prompt prefixes (needs hash_ids) */
    /* What policies see as output_tokens. A real server knows a request's max_tokens, not
     * how long the answer will be: the limit is the request's own max_output_tokens, else
     * max_output_tokens here (> 0: --max-output-tokens), else the context left after the
     * prompt; never more than the context left. oracle_lengths shows the true length
     * instead (a research oracle, recorded in the run's config). */
    int32_t max_output_tokens;
    int oracle_lengths;
    /* Sliding-window layers (vLLM's hybrid allocator; 0: none): window_share of a token's
     * KV (the window layers' share of the layers) is only kept for the last window_tokens
     * positions, plus the block the window straddles. A block holds block_size tokens of
     * every layer, so a sequence of n tokens holds
     *     ceil(n / bs) - floor(window_share x max(0, ceil(n / bs) - ceil(window / bs) - 1))
     * blocks (sched_blocks_for): the window layers' blocks that left the window are
     * counted freed. The block ids then do not map to token positions, which only an
     * executor that stores K/V would need (the simulator's; the engine runs no windows),
     * and prefix caching is refused with it. */
    int32_t window_tokens;
    double window_share;
} sched_config_t;

typedef struct {
    int32_t req_id;
    const sched_req_t *req; /* see ownership above */
    int32_t start;         /* first position computed (= req->computed before the step) */
    int32_t num_tokens;    /* known tokens computed this step */
    int32_t num_spec;      /* draft tokens appended for verification */
    int32_t sample;        /* 1 when the entry reaches the end of the known tokens */
    int32_t is_decode;     /* 1 when it computes the last sampled token (not a prompt) */
    const int32_t *blocks; /* the request's block table after allocation */
    int32_t num_blocks;
} sched_entry_t;

typedef struct {
    int32_t num_tokens;    /* padding tokens (static batching keeps finished slots) */
    int32_t ctx;           /* their context length, for costing */
} sched_pad_t;

typedef struct {
    const sched_entry_t *entries;
    int32_t n;
    const sched_pad_t *pads;
    int32_t n_pads;
    int32_t num_tokens;     /* all tokens of the step: entries + drafts + padding */
    int32_t prefill_tokens;
    int32_t decode_tokens;  /* decode entries count 1 + num_spec */
    int32_t pad_tokens;
    int32_t num_preempted;  /* preemptions made while building this plan */
    int32_t num_rejected;   /* requests the policy rejected while building it */
    int64_t step;           /* 0-based index of non-empty plans */
    /* Prefix hits found in the KV tiers below HBM (kv_tier.h; sched_set_tiers): blocks the
     * step reloads from each tier before (or, where the tier overlaps, while) it runs */
    int32_t reload_blocks[4];
} sched_plan_t;

typedef struct sched sched_t;

/* The policy: hooks return 0, or -1 after sched_set_error(). schedule builds the plan with
 * the sched_plan_* calls. on_arrival/on_finish may be NULL. */
typedef struct {
    int (*schedule)(void *ud, sched_t *s, double now);
    int (*on_arrival)(void *ud, sched_t *s, const sched_req_t *r);
    int (*on_finish)(void *ud, sched_t *s, const sched_req_t *r);
    void *ud;
    const char *name;      /* for messages: the policy file */
} sched_policy_t;

/* Called once per request when it reaches a final state; reason is NULL when finished. */
typedef void (*sched_sink_fn)(void *ud, const sched_req_t *r, const char *reason);

/* NULL when out of memory or the config is invalid (then *err, if given, says why). */
sched_t *sched_new(const sched_config_t *cfg, const sched_policy_t *policy, const char **err);
void sched_free(sched_t *s);
void sched_set_sink(sched_t *s, sched_sink_fn fn, void *ud);
const sched_config_t *sched_config(const sched_t *s);

/* The last error; never NULL ("" when none). */
const char *sched_errmsg(const sched_t *s);
void sched_set_error(sched_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* clip_to_context's arithmetic, for executors that prepare a request before the core sees
 * it: prompt + output past ctx lose the excess in proportion, as Vidur's trace loader. */
void sched_clip_lengths(int32_t *prompt, int32_t *output, int32_t ctx);

/* An arrival. Returns 0 (the request may have been rejected: see the sink) or -1 on a policy
 * error in on_arrival or a duplicate id. */
int sched_add(sched_t *s, const sched_new_req_t *r, double now);

/* Asks the policy for the next plan. 0 with *plan set (possibly empty), or -1 on a policy
 * error (sched_errmsg names the policy and line). */
int sched_step(sched_t *s, double now, const sched_plan_t **plan);
/* The KV tiers below HBM (policies/kv_tier.h; not owned, outliving s; NULL: none): blocks the
 * prefix cache evicts are written there, and a request's prefix found there is reloaded
 * (plan.reload_blocks) instead of computed. Needs prefix_caching. 0, or -1 (sched_errmsg). */
struct kv_tiers;
int sched_set_tiers(sched_t *s, struct kv_tiers *tiers);

/* Applies a finished step at time now. accepted[i] is the number of drafts accepted for
 * entry i (NULL when the plan has none). 0, or -1 on a policy error in on_finish or an
 * inconsistent result. */
int sched_commit(sched_t *s, const sched_plan_t *plan, const int32_t *accepted, double now);

/* Ends every request not in a final state with status aborted (the run failed). */
void sched_abort_all(sched_t *s, const char *reason);

/* Ends one waiting, preempted or running request now, before its length is reached: a
 * live server's EOS or stop string (state SCHED_FINISHED: finish_s = now, and its true
 * length becomes what it generated, at least 1) or its client gone (SCHED_ABORTED). Its KV
 * is freed, it is reported once through the sink with reason, the policy's on_finish sees
 * it, and it leaves the lists at once. Only between steps: not inside the schedule hook,
 * and not for a request of a plan not yet committed. 0 ended; 1 no such live request
 * (already final, or unknown: nothing changed); -1 with the message (a bad state, one of
 * the above, a request in transit, or on_finish failed after the request ended). */
int sched_finish_early(sched_t *s, int32_t id, int32_t state, const char *reason, double now);

/* --- disaggregation (see the invariants above) --------------------------------------- */
/* Called once per handed-off request, inside sched_commit; r stays valid until
 * sched_release. The executor starts the transfer after the commit returns. */
typedef void (*sched_handoff_fn)(void *ud, const sched_req_t *r);
void sched_set_handoff(sched_t *s, sched_handoff_fn fn, void *ud);
/* 1 when a request of prompt + output tokens could ever run here (context length, KV
 * capacity less the watermark: the checks sched_add rejects with); else 0 and why. */
int sched_can_ever_hold(const sched_t *s, int64_t prompt, int64_t output, char *why,
                        size_t len);
/* The decode side: reserves from's blocks (from: a handed-off request of another sched_t,
 * state SCHED_TRANSFER, copied). 0 reserved, 1 not enough free blocks now (nothing
 * changed), -1 with the message (a duplicate id, a request that can never fit here:
 * check sched_can_ever_hold at arrival, out of memory). */
int sched_add_transfer(sched_t *s, const sched_req_t *from, double now);
/* The transfer of a reserved request ended: it joins the running list. 0, or -1. */
int sched_transfer_done(sched_t *s, int32_t id, double now);
/* The prefill side: frees a handed-off request's blocks and forgets it. 0, or -1. */
int sched_release(sched_t *s, int32_t id);
/* Requests in transit here (handed off, or reserved and not yet arrived). */
int32_t sched_num_transit(const sched_t *s);

/* --- plan building, for policies (only inside the schedule hook) --------------------- */
int sched_plan_schedule(sched_t *s, int32_t id, int32_t num_tokens, int32_t num_spec);
int sched_plan_preempt(sched_t *s, int32_t id);
int sched_plan_reject(sched_t *s, int32_t id, const char *reason);
int sched_plan_pad(sched_t *s, int32_t num_tokens, int32_t ctx);
void sched_wake_at(sched_t *s, double t);

/* --- queries ------------------------------------------------------------------------ */
/* A waiting or running request (NULL once final or in transit: it has left this
 * replica's policy; the handoff hook's view stays valid until sched_release). */
const sched_req_t *sched_find(const sched_t *s, int32_t id);
/* A live request's block table (*n = its num_blocks), or NULL for an unknown id. Borrowed:
 * valid until the request is next scheduled, preempted or finished. With prefix caching,
 * leading blocks may be shared with other requests (kv refcounts > 1). */
const int32_t *sched_req_blocks(const sched_t *s, int32_t id, int32_t *n);
int32_t sched_kv_refcount(const sched_t *s, int32_t block);
/* New blocks a request needs to hold n more tokens beyond its computed ones. */
int32_t sched_blocks_needed(const sched_t *s, int32_t id, int32_t n);
/* 1 if n more tokens fit now; requests not yet running must also leave the watermark free. */
int sched_can_allocate(const sched_t *s, int32_t id, int32_t n);
/* With prefix caching: the tokens scheduling this request now would take from the cache
 * instead of computing (its leading full blocks found there, all but its last token at
 * most; 0 unless it has computed nothing). A step's budget is owed only the rest,
 * sched_req_remaining - this, as vLLM's scheduler counts num_new_tokens after its cache
 * lookup. Memory short of the idle hits can make the core take fewer (see above). Pure. */
int32_t sched_prefix_hit(const sched_t *s, int32_t id);
double sched_random(sched_t *s);
/* Requests running now, counting this step's admissions and not its preemptions, and
 * transfers reserved here (they arrive running): what max_seqs bounds. */
int32_t sched_running_seqs(const sched_t *s);

/* The live state, read directly by the Lua FFI views. Arrays hold borrowed pointers,
 * valid until the state changes (a step, a commit or an arrival). */
typedef struct {
    double now;
    const sched_req_t *const *waiting; /* queue order: preempted first, then FCFS */
    int32_t n_waiting;
    const sched_req_t *const *running; /* admission order */
    int32_t n_running;
    int32_t num_blocks;
    int32_t free_blocks;
    int32_t block_size;
    int32_t watermark_blocks;
    int32_t max_tokens;
    int32_t max_seqs;
    int32_t plan_tokens;   /* in the plan being built */
    int32_t plan_seqs;
    double wake_at;        /* +inf when none requested */
} sched_view_t;

const sched_view_t *sched_view(const sched_t *s);

int32_t sched_num_unfinished(const sched_t *s); /* waiting + running + preempted */
int32_t sched_kv_used(const sched_t *s);
int32_t sched_kv_total(const sched_t *s);
/* The KV cache itself, read-only: a cluster's router looks up what a replica's prefix cache
 * would serve a request not yet added (policies/router.h). */
struct kv;
const struct kv *sched_kv(const sched_t *s);
/* Waiting or running requests exist, the last plan was empty and changed nothing (no
 * preemption, no rejection), and no wake-up is pending: only a new arrival can move this
 * replica. With no arrival left, a policy bug. An empty plan that did change something
 * should be followed by another sched_step at the same instant. */
int sched_stalled(const sched_t *s);
double sched_wakeup(const sched_t *s);  /* +inf when none */
int64_t sched_total_preemptions(const sched_t *s);

const char *sched_state_name(int32_t state);

/* ---- what a step will cost (sched_cost.c; s:step_cost and s:last_step in Lua) --------
 * For policies that must predict (SLO-aware admission): the executor's own estimate when
 * it gave one (sched_set_cost_fn: the simulator's cost model and serving profile), else a
 * least-squares fit over the last SCHED_COST_WINDOW committed steps of this scheduler,
 *     t = a + b x prefill tokens + c x decode tokens      (a, b, c >= 0)
 * (the engine's case: measured steps), NAN until SCHED_COST_MIN_STEPS have been seen. A
 * step's duration is from its sched_step's now to its sched_commit's now. */
#define SCHED_COST_WINDOW 64
#define SCHED_COST_MIN_STEPS 3
typedef struct {
    int32_t n_new;      /* tokens computed (>= 1) */
    int32_t ctx;        /* tokens already cached before them */
    int32_t n_sampled;  /* positions sampled (0 for a prompt chunk that is not the last) */
} sched_shape_t;
typedef double (*sched_cost_fn)(void *ud, const sched_shape_t *seqs, int32_t n);
enum { SCHED_COST_NONE = 0, SCHED_COST_EXECUTOR, SCHED_COST_RECENT };
void sched_set_cost_fn(sched_t *s, sched_cost_fn fn, void *ud);
/* seconds for a step of these sequences, or NAN; *source (may be NULL) SCHED_COST_* */
double sched_estimate(const sched_t *s, const sched_shape_t *seqs, int32_t n, int *source);
/* the same for the plan being built (its entries and pads so far) with extra[0..n_extra)
 * added (a request a policy thinks of admitting); extra may be NULL */
double sched_estimate_plan(const sched_t *s, const sched_shape_t *extra, int32_t n_extra,
                           int *source);
/* the last committed step's duration, seconds; NAN before the first */
double sched_last_step_s(const sched_t *s);

#endif

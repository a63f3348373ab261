/* router: a cluster's Lua router, which picks the replica for each arriving request.
 *
 * A router file returns { route = function(c, r) ... end, params = {...} } and optionally
 * route_decode(c, r), which picks the decode replica of a disaggregated cluster when route
 * gives one replica (called right after route; the simulator checks the roles:
 * sim/sim_route.c). It runs in the policies' sandbox
 * with their limits and watchdog (lua_host.h: the same host, loaded as a router); --set
 * router.KEY=VALUE overrides its params as --set does a policy's. route returns
 *   - a replica index (1-based), optionally a second one (the decode replica),
 *   - nil or false and a reason: the request is rejected with that reason,
 *   - "hold": the request waits at the router until a replica finishes a step.
 * Anything else (an index out of range, no decision) is an error naming the router file
 * and the line of route, and fails the run.
 *
 * The view c (router_view_t, filled by the executor before each call) is read-only:
 * per replica the queue length, running requests, free and total KV blocks, outstanding
 * prompt tokens (not yet prefilled) and decode tokens (the context of requests past their
 * prefill: what each decode step re-reads), its role and group; c:prefix_hit(i, r), the
 * prompt tokens replica i's prefix cache would serve the request now (looked up without
 * changing the cache); c.n, c.now, c.held (requests held at the router); and c:random(),
 * seeded by the run's seed. The request r
 * is what policies see: its limit, never its true output length.
 *
 * Invariants: router_replica_t and the head of router_view_t are declared to the LuaJIT
 * FFI in policies/prelude.lua: change both together. The C-only tail follows `rep`.
 *
 * Ownership: router_open returns an object even on failure (NULL only when out of
 * memory); router_close it. The view is the caller's and must outlive the router's calls. */
#ifndef TWIN_ROUTER_H
#define TWIN_ROUTER_H

#include <stddef.h>
#include <stdint.h>

#include "policies/lua_host.h"
#include "policies/prefix.h"
#include "traces/rng.h"
#include "policies/sched.h"

typedef enum { ROUTER_MIXED = 0, ROUTER_PREFILL = 1, ROUTER_DECODE = 2 } router_role_t;

typedef struct {
    int32_t waiting, running, free_blocks, total_blocks;
    double prompt_tokens, decode_tokens;
    int32_t role;              /* router_role_t */
    int32_t group;             /* 0-based group index (--cluster), 0 with --replicas */
} router_replica_t;

typedef struct router_view {
    double now;
    int32_t n;
    int32_t n_held;            /* requests held at the router */
    const router_replica_t *rep;
    /* C only, past the FFI's declaration */
    sched_t *const *scheds;    /* [n]: for prefix_hit */
    rng_t rng;
    /* the request being routed: its hashes, for prefix_hit (prefix keys built lazily) */
    int32_t req_id, prompt_tokens;
    const int64_t *hash;
    int32_t n_hash, hash_block;
    prefix_t prefix;
    int32_t prefix_bs;         /* block size prefix was keyed for; 0: not keyed yet */
} router_view_t;

typedef enum { ROUTER_ROUTED = 0, ROUTER_REJECT = 1, ROUTER_HOLD = 2 } router_verdict_t;

typedef struct {
    router_verdict_t verdict;
    int32_t replica;           /* 0-based; ROUTER_ROUTED */
    int32_t decode;            /* 0-based second replica, -1 when route gave one */
    char reason[256];          /* ROUTER_REJECT */
} router_decision_t;

typedef struct router router_t;

/* sets: "KEY=VALUE" (the --set router. prefix already taken off). */
router_t *router_open(const char *path, const char *const *sets, int n_sets,
                      const lhost_limits_t *lim);
const char *router_errmsg(const router_t *rt);  /* NULL when no error happened */
/* 1 when the error is the command line's (a missing file, a bad --set): a usage error. */
int router_usage_error(const router_t *rt);
int router_has_route_decode(router_t *rt);
/* Seeds the view's RNG and binds it; call once before routing. */
int router_attach(router_t *rt, router_view_t *v, uint64_t seed);
/* Calls route (decode = 0) or route_decode (decode = 1) for request r (the view's request
 * fields set by router_view_request). 0, or -1 with the message on the router. */
int router_route(router_t *rt, int decode, const sched_req_t *r, router_decision_t *d);
/* Sets the request the next calls are about (its prefix keys are rebuilt lazily). */
void router_view_request(router_view_t *v, int32_t id, int32_t prompt_tokens,
                         const int64_t *hash, int32_t n_hash, int32_t hash_block);
void router_view_free(router_view_t *v);
/* The effective params, JSON; owned by the router. */
const char *router_params_json(router_t *rt);
const char *router_path(const router_t *rt);
void router_close(router_t *rt);

/* Exported for the FFI (prelude.lua): 0-based replica i. */
int32_t router_prefix_hit(router_view_t *v, int32_t i);
double router_random(router_view_t *v);

#endif

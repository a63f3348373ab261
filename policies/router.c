/* router: see router.h. The Lua side (host.load_router, host.route, the view c) is in
 * policies/prelude.lua; this file marshals the calls and the prefix look-ups. */
#include "policies/router.h"

#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policies/kv.h"

struct router {
    lhost_t *h;
    router_view_t *v;
    char err[8192];
    int has_err, usage;
};

static void set_err(router_t *rt, const char *msg, int usage) {
    snprintf(rt->err, sizeof rt->err, "%s", msg);
    rt->has_err = 1;
    rt->usage = usage;
}

router_t *router_open(const char *path, const char *const *sets, int n_sets,
                      const lhost_limits_t *lim) {
    router_t *rt = calloc(1, sizeof *rt);
    if (!rt) return NULL;
    rt->h = lhost_open_router(path, lim);
    if (!rt->h) {
        set_err(rt, "out of memory loading the router", 0);
        return rt;
    }
    if (lhost_errmsg(rt->h)) {
        set_err(rt, lhost_errmsg(rt->h), lhost_status(rt->h) != LHOST_EPOLICY);
        return rt;
    }
    for (int i = 0; i < n_sets; i++)
        if (lhost_set(rt->h, sets[i]) != 0) {
            set_err(rt, lhost_errmsg(rt->h), 1);
            return rt;
        }
    return rt;
}

const char *router_errmsg(const router_t *rt) { return rt->has_err ? rt->err : NULL; }
int router_usage_error(const router_t *rt) { return rt->has_err && rt->usage; }
const char *router_path(const router_t *rt) { return rt->h ? lhost_path(rt->h) : "?"; }

int router_has_route_decode(router_t *rt) {
    lua_State *L = lhost_lua(rt->h);
    lua_pushstring(L, "route_decode");
    if (lhost_call(rt->h, "has", 1, 1, "has") != 0) return 0;
    int yes = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return yes;
}

int router_attach(router_t *rt, router_view_t *v, uint64_t seed) {
    char what[1200];
    rng_seed3(&v->rng, seed, 0x726f75746572ULL /* "router" */, 0);
    rt->v = v;
    snprintf(what, sizeof what, "%s: attaching the cluster view", lhost_path(rt->h));
    lua_pushlightuserdata(lhost_lua(rt->h), v);
    if (lhost_call(rt->h, "attach_router", 1, 0, what) != 0) {
        set_err(rt, lhost_errmsg(rt->h), 0);
        return -1;
    }
    return 0;
}

int router_route(router_t *rt, int decode, const sched_req_t *r, router_decision_t *d) {
    lua_State *L = lhost_lua(rt->h);
    const char *fname = decode ? "route_decode" : "route";
    char what[1200];
    snprintf(what, sizeof what, "%s: error in %s() for request %d", lhost_path(rt->h), fname,
             r->id);
    int top = lua_gettop(L);
    lua_pushlightuserdata(L, (void *)r);
    lua_pushstring(L, fname);
    if (lhost_call(rt->h, "route", 2, 3, what) != 0) {
        set_err(rt, lhost_errmsg(rt->h), 0);
        return -1;
    }
    memset(d, 0, sizeof *d);
    d->verdict = (router_verdict_t)lua_tointeger(L, -3);
    if (d->verdict == ROUTER_ROUTED) {
        d->replica = (int32_t)lua_tointeger(L, -2) - 1;
        d->decode = (int32_t)lua_tointeger(L, -1) - 1;
    } else if (d->verdict == ROUTER_REJECT) {
        const char *why = lua_tostring(L, -2);
        snprintf(d->reason, sizeof d->reason, "%s", why ? why : "rejected by the router");
    }
    lua_settop(L, top);
    return 0;
}

void router_view_request(router_view_t *v, int32_t id, int32_t prompt_tokens,
                         const int64_t *hash, int32_t n_hash, int32_t hash_block) {
    v->req_id = id;
    v->prompt_tokens = prompt_tokens;
    v->hash = hash;
    v->n_hash = n_hash;
    v->hash_block = hash_block;
    v->prefix_bs = 0;
}

int32_t router_prefix_hit(router_view_t *v, int32_t i) {
    if (i < 0 || i >= v->n || !v->scheds[i] || v->n_hash <= 0) return 0;
    const sched_config_t *cfg = sched_config(v->scheds[i]);
    if (!cfg->prefix_caching) return 0;
    int32_t bs = cfg->block_size;
    if (v->prefix_bs != bs) { /* keyed once per request and block size */
        prefix_clear(&v->prefix);
        if (prefix_set(&v->prefix, v->req_id, v->hash, v->n_hash, v->hash_block,
                       v->prompt_tokens, bs) != 0)
            return 0;
        v->prefix_bs = bs;
    }
    int32_t idle;
    /* as sched_prefix_hit: at most all but the last prompt token (the logits need it) */
    return bs * prefix_match(&v->prefix, sched_kv(v->scheds[i]), (v->prompt_tokens - 1) / bs,
                             NULL, &idle);
}

double router_random(router_view_t *v) { return rng_uniform(&v->rng); }

void router_view_free(router_view_t *v) {
    prefix_clear(&v->prefix);
    v->prefix_bs = 0;
}

const char *router_params_json(router_t *rt) {
    return rt->h && !rt->has_err ? lhost_params_json(rt->h) : "{}";
}

void router_close(router_t *rt) {
    if (!rt) return;
    lhost_close(rt->h);
    free(rt);
}

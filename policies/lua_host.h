/* lua_host: runs a Lua policy file (LuaJIT) as the scheduler core's policy.
 *
 * A policy file returns a table: schedule(s) (required, called once per step), optional
 * on_arrival(s, r), on_finish(s, r), init(s), and `params` defaults that --set key=value
 * overrides (the default's type decides how the value is read: number, boolean, string).
 * See policies/prelude.lua for the `s` API and docs/policies.md for the guide.
 *
 * Sandbox: policy code sees only safe libraries (no io, os, ffi, require, load, dofile,
 * debug, jit, package, coroutine); requests are read-only FFI references. Limits per policy
 * call: a time limit and a memory cap, checked every few thousand interpreted instructions
 * with a clean Lua error and traceback. JIT-compiled loops never run hooks, so a watchdog
 * thread also watches each call: past twice the time limit (or the memory cap in resident
 * memory) it calls the abort callback (the runner marks the run failed and commits what was
 * recorded) and ends the process with exit status 3, since a compiled loop cannot be
 * interrupted safely.
 *
 * Errors: every failure leaves a message on the host (lhost_errmsg) that names the policy
 * file and, for Lua errors, the line and a traceback, and a status (lhost_status) that says
 * whose mistake it is: the command line's (a policy file that cannot be read, a --set that
 * is unknown, mistyped or outside the param's declared range: a usage error, to be refused
 * before anything is recorded) or the policy code's.
 *
 * Params: `params = { chunk = 512 }` declares a param by its default, or by a spec,
 * `chunk = { 512, int = true, min = 1 }` (fields int, min, max, oneof, only; see
 * prelude.lua): the host checks the default at load and every --set value against it.
 *
 * Ownership: lhost_open returns an object even on failure (NULL only when out of memory);
 * always lhost_close it. The sched_t given to lhost_attach is borrowed and must outlive
 * the hooks' use. */
#ifndef TWIN_LUA_HOST_H
#define TWIN_LUA_HOST_H

#include <stddef.h>

#include "policies/sched.h"

typedef struct lhost lhost_t;

typedef enum {
    LHOST_OK = 0,
    LHOST_EFILE,   /* the policy file cannot be opened or read (usage) */
    LHOST_EPARAM,  /* a --set: malformed, unknown key, wrong type, out of its range (usage) */
    LHOST_EPOLICY, /* the policy's code: syntax, load error, bad param spec, error in a call */
} lhost_status_t;

typedef struct {
    double time_limit_s;   /* per policy call (default 2 s; the policy load gets 5x) */
    double mem_limit_mb;   /* Lua heap cap (default 256 MB) */
    /* Called by the watchdog before it ends the process (see above); may be NULL. Given
     * here so that it also covers the policy file's own top-level code. It runs on the
     * watchdog's thread while the main thread is still inside the hook call, which may
     * reach the caller's code through the scheduler (the sink, on a policy's s:reject):
     * the callback must exclude that itself (the simulator holds a lock it never releases)
     * and may only use a recorder in asynchronous mode. */
    void (*abort_fn)(void *ud, const char *msg);
    void *abort_ud;
} lhost_limits_t;

/* Loads and runs the policy file in a fresh sandbox. lim may be NULL (defaults). */
lhost_t *lhost_open(const char *path, const lhost_limits_t *lim);
const char *lhost_errmsg(const lhost_t *h); /* NULL when no error happened */
/* Why lhost_errmsg is set (LHOST_OK when it is not). EFILE and EPARAM are usage errors. */
lhost_status_t lhost_status(const lhost_t *h);
const char *lhost_path(const lhost_t *h);

/* "key=value" (from --set). 0, or -1 with a message naming the policy file and the param
 * (malformed, unknown key, wrong type, outside the param's spec) and status LHOST_EPARAM. */
int lhost_set(lhost_t *h, const char *assignment);

/* Fills the core's policy hooks (ud = h). */
void lhost_policy(lhost_t *h, sched_policy_t *out);
/* Binds the scheduler the hooks will drive and runs the policy's init(s), if any. */
int lhost_attach(lhost_t *h, sched_t *s);

/* The effective params as a JSON object, keys sorted; owned by h, valid until the next call. */
const char *lhost_params_json(lhost_t *h);
/* As lhost_params_json, for a run on executor ("sim" or "engine"): params declared for
 * another executor only (spec field only = "sim") are left out, as they had no effect. */
const char *lhost_params_json_for(lhost_t *h, const char *executor);
/* 1 and *out set if the param exists and is a number; 0 if absent; -1 if another type. */
int lhost_param_num(lhost_t *h, const char *key, double *out);
/* 1 and buf filled if it exists and is a string; 0 if absent; -1 if another type. */
int lhost_param_str(lhost_t *h, const char *key, char *buf, size_t len);

void lhost_close(lhost_t *h);

/* ---- for the router host (policies/router.h), which shares this sandbox and its limits */

struct lua_State;
/* Loads a router file (a table with route(c, r), policies/router.h) in the same sandbox,
 * with the same limits and watchdog; messages call it a router. */
lhost_t *lhost_open_router(const char *path, const lhost_limits_t *lim);
struct lua_State *lhost_lua(lhost_t *h);
/* Calls the prelude's host[fname] with the nargs values pushed on lhost_lua(h), under the
 * per-call limits, leaving nres results: 0, or -1 with the message (naming `what`, with
 * the Lua error's line and traceback) on the host. */
int lhost_call(lhost_t *h, const char *fname, int nargs, int nres, const char *what);

#endif

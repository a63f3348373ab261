/* lua_host: see lua_host.h. The Lua-side glue is policies/prelude.lua, compiled in as
 * lhost_prelude_lua[]; this file owns the state, the limits and the watchdog. */
#include "policies/lua_host.h"

#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "traces/json.h"

extern const char lhost_prelude_lua[];

enum { HOOK_EVERY = 4096 };

struct lhost {
    lua_State *L;
    char *path;
    const char *noun;      /* "policy" or "router": what messages call the file */
    char err[8192];
    int has_err;
    lhost_status_t status; /* why has_err is set: the user's input or the policy's code */
    int ref_host;          /* registry: the table prelude.lua returned */
    lhost_limits_t lim;
    double deadline;       /* monotonic seconds; only meaningful while in_call */
    double cur_limit;
    int in_call;
    char *json;

    pthread_t wd;
    int wd_started;
    atomic_int wd_stop;
    atomic_llong call_start_ns; /* 0 when no hook call runs */
    atomic_llong call_hard_ns;
    void (*abort_fn)(void *ud, const char *msg);
    void *abort_ud;
};

/* The hook has no user data slot in the Lua 5.1 API: the host of the call in progress. */
static _Thread_local lhost_t *tl_current;

static long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Every error is the policy's (LHOST_EPOLICY) unless the caller says otherwise afterwards. */
__attribute__((format(printf, 2, 3))) static void set_err(lhost_t *h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    h->has_err = 1;
    h->status = LHOST_EPOLICY;
}

const char *lhost_errmsg(const lhost_t *h) { return h->has_err ? h->err : NULL; }
lhost_status_t lhost_status(const lhost_t *h) { return h->has_err ? h->status : LHOST_OK; }
const char *lhost_path(const lhost_t *h) { return h->path; }

/* ------------------------------------------------------------------ limits */

static void count_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lhost_t *h = tl_current;
    if (!h || !h->in_call) return;
    if ((double)mono_ns() * 1e-9 > h->deadline)
        luaL_error(L, "time limit exceeded: the policy ran for more than %.3g s in one call "
                      "(an endless loop?)", h->cur_limit);
    if (lua_gc(L, LUA_GCCOUNT, 0) > h->lim.mem_limit_mb * 1024) {
        lua_gc(L, LUA_GCCOLLECT, 0);
        if (lua_gc(L, LUA_GCCOUNT, 0) > h->lim.mem_limit_mb * 1024)
            luaL_error(L, "memory cap exceeded: the policy holds more than %.0f MB",
                       h->lim.mem_limit_mb);
    }
}

static long rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static void *watchdog(void *arg) {
    lhost_t *h = arg;
    long long seen = 0;
    long base_rss = 0;
    char msg[1024];
    while (!atomic_load(&h->wd_stop)) {
        struct timespec nap = { 0, 20 * 1000 * 1000 };
        nanosleep(&nap, NULL);
        long long start = atomic_load(&h->call_start_ns);
        if (!start) continue;
        if (start != seen) { /* a new call: its memory baseline */
            seen = start;
            base_rss = rss_bytes();
            continue;
        }
        const char *why = NULL;
        if (mono_ns() - start > atomic_load(&h->call_hard_ns))
            why = "ran past twice its time limit inside JIT-compiled code, where the limit "
                  "cannot stop it with a traceback (an endless loop?)";
        else if (rss_bytes() - base_rss > (long)(h->lim.mem_limit_mb * 1048576.0) + (64L << 20))
            why = "grew the process past its memory cap inside JIT-compiled code";
        if (!why) continue;
        snprintf(msg, sizeof msg, "%s %s: a %s call %s; the run is stopped", h->noun, h->path,
                 h->noun, why);
        if (h->abort_fn) h->abort_fn(h->abort_ud, msg);
        fprintf(stderr, "twinserve: %s\n", msg);
        fflush(stderr);
        _exit(3);
    }
    return NULL;
}

static int msgh(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

/* Calls host[fname] with the nargs values on the stack; limits apply. 0 or -1 (h->err). */
static int host_call(lhost_t *h, const char *fname, int nargs, int nres, double limit,
                     const char *what) {
    lua_State *L = h->L;
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, msgh);
    lua_rawgeti(L, LUA_REGISTRYINDEX, h->ref_host);
    lua_getfield(L, -1, fname);
    lua_remove(L, -2);
    lua_insert(L, base + 1); /* fn below the args */
    lua_insert(L, base + 1); /* msgh below fn */
    lhost_t *saved = tl_current;
    tl_current = h;
    h->in_call = 1;
    h->cur_limit = limit;
    long long t0 = mono_ns();
    h->deadline = (double)t0 * 1e-9 + limit;
    atomic_store(&h->call_hard_ns, (long long)(2 * limit * 1e9) + 500000000LL);
    atomic_store(&h->call_start_ns, t0);
    int rc = lua_pcall(L, nargs, nres, base + 1);
    atomic_store(&h->call_start_ns, 0);
    h->in_call = 0;
    tl_current = saved;
    lua_remove(L, base + 1); /* msgh */
    if (rc != 0) {
        const char *m = lua_tostring(L, -1);
        set_err(h, "%s %s\n%s", h->noun, what, m ? m : "(no message)");
        lua_settop(L, base);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ open / close */

static char *read_file(const char *path, size_t *len, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (!f) {
        snprintf(err, errlen, "cannot open policy '%s': %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) != 0) goto fail;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto fail;
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) goto fail;
    buf[n] = 0;
    *len = (size_t)n;
    fclose(f);
    return buf;
fail:
    snprintf(err, errlen, "cannot read policy '%s': %s", path, strerror(errno));
    free(buf);
    fclose(f);
    return NULL;
}

/* loader: the prelude's entry point that checks what the file returned (host.load for a
 * policy, host.load_router for a router); the sandbox, limits and watchdog are the same. */
static lhost_t *open_as(const char *path, const lhost_limits_t *lim, const char *loader,
                        const char *noun) {
    lhost_t *h = calloc(1, sizeof *h);
    char *src = NULL;
    size_t len = 0;
    if (!h) return NULL;
    h->ref_host = LUA_NOREF;
    h->noun = noun;
    h->lim.time_limit_s = lim && lim->time_limit_s > 0 ? lim->time_limit_s : 2.0;
    h->lim.mem_limit_mb = lim && lim->mem_limit_mb > 0 ? lim->mem_limit_mb : 256.0;
    if (lim) {
        h->abort_fn = lim->abort_fn;
        h->abort_ud = lim->abort_ud;
    }
    h->path = strdup(path ? path : "(null)");
    h->L = luaL_newstate();
    if (!h->path || !h->L) {
        set_err(h, "out of memory starting LuaJIT");
        goto done;
    }
    lua_State *L = h->L;
    luaL_openlibs(L);
    if (luaL_loadbuffer(L, lhost_prelude_lua, strlen(lhost_prelude_lua), "=prelude") != 0 ||
        lua_pcall(L, 0, 1, 0) != 0) {
        set_err(h, "internal error in the policy prelude: %s", lua_tostring(L, -1));
        goto done;
    }
    h->ref_host = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_sethook(L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
    if (pthread_create(&h->wd, NULL, watchdog, h) == 0) h->wd_started = 1;

    src = read_file(h->path, &len, h->err, sizeof h->err);
    if (!src) {
        h->has_err = 1;
        h->status = LHOST_EFILE;
        goto done;
    }
    /* "@path" makes Lua name the file in messages: "policies/x.lua:12: ..." */
    char chunkname[1024];
    snprintf(chunkname, sizeof chunkname, "@%s", h->path);
    /* Text only: LuaJIT does not verify bytecode, so a precompiled chunk could do anything. */
    if (len > 0 && src[0] == 0x1b) {
        set_err(h, "%s: precompiled (binary) %s are not accepted: give the Lua source",
                h->path, strcmp(noun, "router") ? "policies" : "routers");
        goto done;
    }
    if (luaL_loadbufferx(L, src, len, chunkname, "t") != 0) {
        set_err(h, "%s syntax error: %s", noun, lua_tostring(L, -1));
        lua_pop(L, 1);
        goto done;
    }
    lua_pushstring(L, h->path);
    char what[1200];
    snprintf(what, sizeof what, "%s: error while loading", h->path);
    if (host_call(h, loader, 2, 1, 5 * h->lim.time_limit_s, what) != 0) goto done;
    if (lua_isstring(L, -1)) set_err(h, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
done:
    free(src);
    return h;
}

lhost_t *lhost_open(const char *path, const lhost_limits_t *lim) {
    return open_as(path, lim, "load", "policy");
}

lhost_t *lhost_open_router(const char *path, const lhost_limits_t *lim) {
    return open_as(path, lim, "load_router", "router");
}

lua_State *lhost_lua(lhost_t *h) { return h->L; }

int lhost_call(lhost_t *h, const char *fname, int nargs, int nres, const char *what) {
    return host_call(h, fname, nargs, nres, h->lim.time_limit_s, what);
}

void lhost_close(lhost_t *h) {
    if (!h) return;
    if (h->wd_started) {
        atomic_store(&h->wd_stop, 1);
        pthread_join(h->wd, NULL);
    }
    if (h->L) lua_close(h->L);
    free(h->path);
    free(h->json);
    free(h);
}

/* ------------------------------------------------------------------ params */

int lhost_set(lhost_t *h, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment) {
        set_err(h, "%s: --set '%s': expected key=value", h->path, assignment);
        h->status = LHOST_EPARAM;
        return -1;
    }
    lua_State *L = h->L;
    lua_pushlstring(L, assignment, (size_t)(eq - assignment));
    lua_pushstring(L, eq + 1);
    if (host_call(h, "set", 2, 1, h->lim.time_limit_s, "--set") != 0) return -1;
    int rc = 0;
    if (lua_isstring(L, -1)) {
        set_err(h, "%s: --set %s: %s", h->path, assignment, lua_tostring(L, -1));
        h->status = LHOST_EPARAM;
        rc = -1;
    }
    lua_pop(L, 1);
    return rc;
}

/* Pushes params[key]; the caller pops. */
static int push_param(lhost_t *h, const char *key) {
    lua_pushstring(h->L, key);
    return host_call(h, "param", 1, 1, h->lim.time_limit_s, "param");
}

int lhost_param_num(lhost_t *h, const char *key, double *out) {
    if (push_param(h, key) != 0) return -1;
    int t = lua_type(h->L, -1), rc = t == LUA_TNIL ? 0 : t == LUA_TNUMBER ? 1 : -1;
    if (rc == 1) *out = lua_tonumber(h->L, -1);
    lua_pop(h->L, 1);
    return rc;
}

int lhost_param_str(lhost_t *h, const char *key, char *buf, size_t len) {
    if (push_param(h, key) != 0) return -1;
    int t = lua_type(h->L, -1), rc = t == LUA_TNIL ? 0 : t == LUA_TSTRING ? 1 : -1;
    if (rc == 1) snprintf(buf, len, "%s", lua_tostring(h->L, -1));
    lua_pop(h->L, 1);
    return rc;
}

const char *lhost_params_json(lhost_t *h) { return lhost_params_json_for(h, NULL); }

const char *lhost_params_json_for(lhost_t *h, const char *executor) {
    lua_State *L = h->L;
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f) return "{}";
    fputc('{', f);
    if (executor) lua_pushstring(L, executor);
    else lua_pushnil(L);
    if (host_call(h, "param_names", 1, 1, h->lim.time_limit_s, "params") == 0) {
        int cnt = (int)lua_objlen(L, -1);
        for (int i = 1; i <= cnt; i++) {
            lua_rawgeti(L, -1, i);
            const char *key = lua_tostring(L, -1);
            if (i > 1) fputc(',', f);
            json_write_str(f, key ? key : "?");
            fputc(':', f);
            if (push_param(h, key ? key : "") == 0) {
                int t = lua_type(L, -1);
                if (t == LUA_TNUMBER) fprintf(f, "%.17g", lua_tonumber(L, -1));
                else if (t == LUA_TBOOLEAN) fputs(lua_toboolean(L, -1) ? "true" : "false", f);
                else if (t == LUA_TSTRING) json_write_str(f, lua_tostring(L, -1));
                else fputs("null", f);
                lua_pop(L, 1);
            } else {
                fputs("null", f);
            }
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    fputc('}', f);
    fclose(f);
    free(h->json);
    h->json = buf;
    return h->json;
}

/* ------------------------------------------------------------------ hooks */

static int hook_err(lhost_t *h, sched_t *s) {
    sched_set_error(s, "%s", h->err);
    return -1;
}

static int hook_schedule(void *ud, sched_t *s, double now) {
    (void)now;
    lhost_t *h = ud;
    char what[1200];
    snprintf(what, sizeof what, "%s: error in schedule()", h->path);
    return host_call(h, "schedule", 0, 0, h->lim.time_limit_s, what) ? hook_err(h, s) : 0;
}

static int hook_req(lhost_t *h, sched_t *s, const char *fname, const sched_req_t *r) {
    char what[1200];
    snprintf(what, sizeof what, "%s: error in %s() for request %d", h->path, fname, r->id);
    lua_pushlightuserdata(h->L, (void *)r);
    return host_call(h, fname, 1, 0, h->lim.time_limit_s, what) ? hook_err(h, s) : 0;
}

static int hook_arrival(void *ud, sched_t *s, const sched_req_t *r) {
    return hook_req(ud, s, "on_arrival", r);
}

static int hook_finish(void *ud, sched_t *s, const sched_req_t *r) {
    return hook_req(ud, s, "on_finish", r);
}

static int host_has(lhost_t *h, const char *name) {
    lua_pushstring(h->L, name);
    if (host_call(h, "has", 1, 1, h->lim.time_limit_s, "has") != 0) return 0;
    int yes = lua_toboolean(h->L, -1);
    lua_pop(h->L, 1);
    return yes;
}

void lhost_policy(lhost_t *h, sched_policy_t *out) {
    memset(out, 0, sizeof *out);
    out->schedule = hook_schedule;
    out->ud = h;
    out->name = h->path;
    if (h->has_err) return;
    if (host_has(h, "on_arrival")) out->on_arrival = hook_arrival;
    if (host_has(h, "on_finish")) out->on_finish = hook_finish;
}

int lhost_attach(lhost_t *h, sched_t *s) {
    lua_pushlightuserdata(h->L, s);
    char what[1200];
    snprintf(what, sizeof what, "%s: error in init()", h->path);
    return host_call(h, "attach", 1, 0, h->lim.time_limit_s, what);
}

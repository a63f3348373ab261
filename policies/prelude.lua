-- prelude.lua: the trusted glue between the C scheduler core and sandboxed policy scripts.
--
-- Compiled into the binary (build/gen/prelude_lua.c) and run once per policy host with the
-- full standard library. It declares the core's structs to the LuaJIT FFI, builds the `s`
-- object that policies call, and the sandbox environment policy files run in. Nothing
-- defined here is reachable from policy code except through the closures in `s`.
--
-- Why FFI views: reading request fields straight from the C structs costs ~0.6 us per step
-- for 256 requests once JIT-compiled; building Lua tables each step costs ~40 us. Requests
-- reach policies as `const struct sched_req &` references: fields read, writes fail ("attempt
-- to write to constant location"), and references allow no pointer arithmetic or indexing,
-- so a policy cannot reach memory it was not given.

local ffi = require("ffi")
local C = ffi.C
local traceback = debug.traceback

ffi.cdef [[
typedef struct sched_req {
    int32_t id; int32_t state; double arrival_s;
    int32_t prompt_tokens; int32_t output_tokens; int32_t generated; int32_t computed;
    int32_t num_blocks; int32_t preemptions; int32_t scheduled; int32_t spec;
    int32_t spec_proposed; int32_t spec_accepted; int32_t cached_tokens; int32_t reloaded_tokens;
    int32_t predicted;
    int32_t priority;
    double first_scheduled_s; double first_token_s; double finish_s;
    double deadline; char tenant_name[32];
} sched_req_t;
typedef struct {
    double now;
    const sched_req_t *const *waiting; int32_t n_waiting;
    const sched_req_t *const *running; int32_t n_running;
    int32_t num_blocks; int32_t free_blocks; int32_t block_size; int32_t watermark_blocks;
    int32_t max_tokens; int32_t max_seqs; int32_t plan_tokens; int32_t plan_seqs;
    double wake_at;
} sched_view_t;
typedef struct sched sched_t;
const sched_view_t *sched_view(const sched_t *s);
const char *sched_errmsg(const sched_t *s);
int sched_plan_schedule(sched_t *s, int32_t id, int32_t n, int32_t k);
int sched_plan_preempt(sched_t *s, int32_t id);
int sched_plan_reject(sched_t *s, int32_t id, const char *reason);
int sched_plan_pad(sched_t *s, int32_t n, int32_t ctx);
void sched_wake_at(sched_t *s, double t);
int32_t sched_blocks_needed(const sched_t *s, int32_t id, int32_t n);
int sched_can_allocate(const sched_t *s, int32_t id, int32_t n);
int32_t sched_prefix_hit(const sched_t *s, int32_t id);
int32_t sched_running_seqs(const sched_t *s);
double sched_random(sched_t *s);
const sched_req_t *sched_find(const sched_t *s, int32_t id);
typedef struct { int32_t n_new; int32_t ctx; int32_t n_sampled; } sched_shape_t;
double sched_estimate(const sched_t *s, const sched_shape_t *seqs, int32_t n, int *source);
double sched_estimate_plan(const sched_t *s, const sched_shape_t *extra, int32_t n, int *source);
double sched_last_step_s(const sched_t *s);
typedef struct {
    int32_t waiting; int32_t running; int32_t free_blocks; int32_t total_blocks;
    double prompt_tokens; double decode_tokens;
    int32_t role; int32_t group;
} router_replica_t;
typedef struct {
    double now; int32_t n; int32_t n_held;
    const router_replica_t *rep;
} router_view_t;
int32_t router_prefix_hit(router_view_t *v, int32_t i);
double router_random(router_view_t *v);
]]

local PTR = ffi.typeof("const sched_req_t *")
local SCHED = ffi.typeof("sched_t *")
-- Locals, captured before any policy runs: policies can change their own library tables
-- (string is shared with string values' methods), never these.
local floor, type, error, tostring = math.floor, type, error, tostring
local smatch, srep = string.match, string.rep
local ffistring = ffi.string

local STATES = { [0] = "waiting", "running", "preempted", "finished", "rejected", "aborted",
                 "transfer" }

-- The C struct goes on past finish_s with the true output length, which is deliberately
-- not declared here: policies see output_tokens, the request's limit, unless the run asks
-- for --oracle-lengths (the core then puts the true length in output_tokens).
local REQ_METHODS = {
    -- known tokens not yet in the KV cache: the prompt at first, 1 while decoding
    remaining = function(r) return r.prompt_tokens + r.generated - r.computed end,
    is_decoding = function(r)
        return r.generated >= 1 and r.prompt_tokens + r.generated - r.computed == 1
    end,
    is_running = function(r) return r.state == 1 end,
    state_name = function(r) return STATES[r.state] end,
}

ffi.metatype("sched_req_t", {
    __index = function(r, k)
        local m = REQ_METHODS[k]
        if m ~= nil then return m end
        -- a length predictor's guess from the trace's predicted_output_tokens column; nil
        -- when the trace has none
        if k == "predicted_output_tokens" then
            local p = r.predicted
            if p >= 0 then return p end
            return nil
        end
        -- per-request metadata from the trace's optional tenant and deadline_s columns
        -- (r.priority is a plain field): nil when the trace gives none
        if k == "tenant" then
            local name = r.tenant_name
            if name[0] ~= 0 then return ffistring(name) end
            return nil
        end
        if k == "deadline_s" then
            local d = r.deadline
            if d > 0 then return d end
            return nil
        end
        -- as the FFI says it for a table __index: a misspelt field stays an error
        if type(k) == "string" then
            error("'struct sched_req' has no member named '" .. k .. "'", 2)
        end
        error("'struct sched_req' cannot be indexed with '" .. type(k) .. "'", 2)
    end,
    __tostring = function(r)
        return "request " .. r.id .. " (" .. STATES[r.state] .. ", prompt " .. r.prompt_tokens ..
            ", generated " .. r.generated .. "/" .. r.output_tokens .. ", computed " .. r.computed .. ")"
    end,
})

-- ------------------------------------------------------------------ the `s` object

local host = {}       -- returned to C: entry points called from lua_host.c
local policy          -- the table the policy file returned
local S, V            -- sched_t * and its live view, once attached
local s = {}          -- what policies see

local function reqid(r, fname)
    local t = type(r)
    if t == "number" then
        if r ~= floor(r) or r < -2147483648 or r > 2147483647 then
            error(fname .. ": request id must be a 32-bit integer, got " .. r, 3)
        end
        return r
    elseif t == "cdata" then
        return r.id
    end
    error(fname .. ": expected a request or a request id, got " .. t, 3)
end

-- The core takes int32: anything else would be silently wrapped by the FFI conversion.
local function int_arg(v, fname, what)
    if type(v) ~= "number" or v ~= floor(v) or v < -2147483648 or v > 2147483647 then
        error(fname .. ": " .. what .. " must be a 32-bit integer, got " .. tostring(v), 3)
    end
    return v
end

local function fail() error(ffistring(C.sched_errmsg(S)), 3) end

function s.waiting(_, i)
    i = int_arg(i, "waiting", "index")
    if i < 1 or i > V.n_waiting then return nil end
    return V.waiting[i - 1][0]
end
function s.running(_, i)
    i = int_arg(i, "running", "index")
    if i < 1 or i > V.n_running then return nil end
    return V.running[i - 1][0]
end
function s.num_waiting() return V.n_waiting end
function s.num_running() return V.n_running end
function s.free_blocks() return V.free_blocks end
function s.budget() return V.max_tokens - V.plan_tokens end
function s.seqs_left() return V.max_seqs - V.plan_seqs end
function s.planned_tokens() return V.plan_tokens end
function s.planned_seqs() return V.plan_seqs end
function s.running_seqs() return C.sched_running_seqs(S) end
function s.time() return V.now end

function s.find(_, id)
    local p = C.sched_find(S, reqid(id, "find"))
    if p == nil then return nil end
    return p[0]
end

-- schedule(r [, n [, k]]): compute n of r's remaining tokens (default: all of them) and
-- verify k draft tokens (default 0).
function s.schedule(_, r, n, k)
    local id = reqid(r, "schedule")
    if n == nil then
        if type(r) ~= "cdata" then error("schedule: give a token count with a request id", 2) end
        n = r.prompt_tokens + r.generated - r.computed
    end
    n = int_arg(n, "schedule", "token count")
    k = k == nil and 0 or int_arg(k, "schedule", "draft count")
    if C.sched_plan_schedule(S, id, n, k) ~= 0 then fail() end
end

function s.preempt(_, r)
    if C.sched_plan_preempt(S, reqid(r, "preempt")) ~= 0 then fail() end
end

function s.reject(_, r, reason)
    if C.sched_plan_reject(S, reqid(r, "reject"), reason ~= nil and tostring(reason) or nil) ~= 0 then
        fail()
    end
end

function s.pad(_, n, ctx)
    n = int_arg(n, "pad", "token count")
    ctx = int_arg(ctx or 0, "pad", "context")
    if C.sched_plan_pad(S, n, ctx) ~= 0 then fail() end
end

function s.wake_at(_, t)
    if type(t) ~= "number" or t ~= t then error("wake_at: time must be a number", 2) end
    C.sched_wake_at(S, t)
end

function s.blocks_needed(_, r, n)
    return C.sched_blocks_needed(S, reqid(r, "blocks_needed"), int_arg(n, "blocks_needed", "token count"))
end

function s.can_allocate(_, r, n)
    local id = reqid(r, "can_allocate")
    if n == nil then
        if type(r) ~= "cdata" then error("can_allocate: give a token count with a request id", 2) end
        n = r.prompt_tokens + r.generated - r.computed
    end
    return C.sched_can_allocate(S, id, int_arg(n, "can_allocate", "token count")) ~= 0
end

-- prefix_hit(r): tokens of r that scheduling it now takes from the prefix cache (0 without
-- --prefix-caching, or once it has computed anything); its step costs the rest.
function s.prefix_hit(_, r) return C.sched_prefix_hit(S, reqid(r, "prefix_hit")) end

function s.random() return C.sched_random(S) end

-- step_cost([extra]): what this step would take, in seconds, and where the figure comes from
-- ("executor": the simulator's cost model and serving profile; "recent steps": a fit over
-- this scheduler's last steps, the engine's case), or nil when there is none yet: the plan
-- built so far in this call, with `extra` sequences added when given, a list of {n = tokens
-- to compute, ctx = tokens cached before them, sampled = positions sampled (default 1)}:
-- s:step_cost{{n = r:remaining() - s:prefix_hit(r), ctx = r.computed + s:prefix_hit(r)}} is
-- this step with r's prefill in it. Before anything is scheduled it prices a shape alone.
local SHAPE = ffi.typeof("sched_shape_t[?]")
local SOURCE = ffi.typeof("int[1]")
local SOURCES = { [1] = "executor", [2] = "recent steps" }
function s.step_cost(_, extra)
    local src = SOURCE()
    local n, v = 0, nil
    if extra ~= nil then
        if type(extra) ~= "table" then
            error("step_cost: give a list of {n = tokens, ctx = cached tokens} (or nothing, for the plan so far)", 2)
        end
        n = #extra
        v = SHAPE(n > 0 and n or 1)
        for i = 1, n do
            local q = extra[i]
            if type(q) ~= "table" then error("step_cost: sequence " .. i .. " is not a table", 2) end
            local nn = int_arg(q.n, "step_cost", "sequence " .. i .. "'s n")
            if nn < 1 then error("step_cost: sequence " .. i .. "'s n must be >= 1", 2) end
            v[i - 1].n_new = nn
            v[i - 1].ctx = int_arg(q.ctx or 0, "step_cost", "sequence " .. i .. "'s ctx")
            v[i - 1].n_sampled = int_arg(q.sampled or 1, "step_cost", "sequence " .. i .. "'s sampled")
        end
    end
    local t = C.sched_estimate_plan(S, v, n, src)
    if t ~= t then return nil end
    return t, SOURCES[src[0]]
end

-- last_step(): how long the last step took (seconds), or nil before the first.
function s.last_step()
    local t = C.sched_last_step_s(S)
    if t ~= t then return nil end
    return t
end

s.WAITING, s.RUNNING, s.PREEMPTED, s.FINISHED, s.REJECTED = 0, 1, 2, 3, 4
s.ABORTED, s.TRANSFER = 5, 6 -- TRANSFER: handed off to a decode replica (on_finish sees it)

-- ------------------------------------------------------------------ the sandbox

local BLOCKED = {
    io = true, os = true, ffi = true, require = true, load = true, loadstring = true,
    loadfile = true, dofile = true, debug = true, jit = true, package = true, module = true,
    collectgarbage = true, setfenv = true, getfenv = true, newproxy = true, coroutine = true,
    gcinfo = true,
}

local function copy(t)
    local c = {}
    for k, v in pairs(t) do c[k] = v end
    return c
end

local MAX_STRING = 16 * 1024 * 1024

local safe_string = copy(string)
safe_string.dump = nil
safe_string.rep = function(str, n, sep)
    local len = (#tostring(str) + #tostring(sep or "")) * (tonumber(n) or 0)
    if len > MAX_STRING then error("string.rep: result over 16 MB", 2) end
    return srep(str, n, sep)
end

local RVIEW           -- a router's router_view_t *, once attached (see the router below)
local safe_math = copy(math)
safe_math.random = function(m, n)
    if not S and not RVIEW then
        error("math.random: only inside schedule/on_arrival/on_finish (or a router's route)", 2)
    end
    local u = S and C.sched_random(S) or C.router_random(RVIEW)
    if m == nil then return u end
    if n == nil then m, n = 1, m end
    return m + floor(u * (n - m + 1))
end
safe_math.randomseed = function() error("math.randomseed: the run's --seed seeds policies", 2) end

local make_env

-- import("name") loads policies/lib/name.lua (next to the policy file) into the same
-- sandbox: shared building blocks without giving policies `require` or file access.
local function make_import(env, path)
    local dir = smatch(path, "^(.*)/[^/]*$") or "."
    local cache = {}
    return function(name)
        if type(name) ~= "string" or not smatch(name, "^[%w_]+$") then
            error("import: a library name is letters, digits and _ (got " .. tostring(name) .. ")", 2)
        end
        if cache[name] == nil then
            local file = dir .. "/lib/" .. name .. ".lua"
            local chunk, err = loadfile(file, "t") -- text only: LuaJIT does not verify bytecode
            if not chunk then error("import: " .. err, 2) end
            setfenv(chunk, env)
            cache[name] = chunk()
        end
        return cache[name]
    end
end

make_env = function(path)
    local env = {}
    for _, k in ipairs { "assert", "error", "ipairs", "next", "pairs", "pcall", "select",
        "tonumber", "tostring", "type", "unpack", "xpcall", "rawequal", "rawget", "rawset",
        "setmetatable", "getmetatable" } do
        env[k] = _G[k]
    end
    env.math, env.string, env.table, env.bit = safe_math, safe_string, copy(table), copy(bit)
    env.print = function(...)
        local n, parts = select("#", ...), {}
        for i = 1, n do parts[i] = tostring((select(i, ...))) end
        io.stderr:write("[", path, "] ", table.concat(parts, "\t"), "\n")
    end
    env._G = env
    env.import = make_import(env, path)
    return setmetatable(env, {
        __index = function(_, k)
            if BLOCKED[k] then
                error("'" .. tostring(k) .. "' is not available to policies (sandbox: no io, os, " ..
                    "ffi, require, load, dofile, debug, jit or package)", 2)
            end
        end,
    })
end

-- ------------------------------------------------------------------ params and their specs
--
-- A param is declared either by its default (`chunk = 512`: its type is the default's) or
-- by a spec, a table whose first item is the default and whose fields constrain what
-- --set may give it (and the default itself, checked at load):
--   int = true        a whole number
--   min = a, max = b  bounds, inclusive
--   oneof = {...}     the allowed values (strings, usually)
--   only = "sim"      the param steers one executor only ("sim": the simulator's model of
--                     the run, such as speculative.lua's alpha and draft): it is left out of
--                     the params another executor records, where it had no effect
-- At load the spec is taken out of `params`, which then holds plain values: a policy reads
-- s.params.chunk as 512 whichever way it was declared. Specs live here, out of the
-- policy's reach, so a policy cannot loosen them after load.

local specs = {}      -- param name -> spec, for the params that have one
local SPEC_FIELDS = {
    [1] = true, int = true, min = true, max = true, oneof = true, only = true,
}
local EXECUTORS = { sim = true, engine = true }

local function fits_spec(spec, v)
    if spec.oneof then
        for _, x in ipairs(spec.oneof) do if x == v then return true end end
        return false
    end
    if type(v) ~= "number" then return true end
    if spec.int and (v ~= floor(v) or v == math.huge or v == -math.huge) then return false end
    if spec.min and v < spec.min then return false end
    if spec.max and v > spec.max then return false end
    return true
end

-- "a positive integer", "a number in [0, 1]", "one of fcfs, sjf": what fits_spec accepts.
local function describe_spec(spec)
    if spec.oneof then
        local names = {}
        for i, x in ipairs(spec.oneof) do names[i] = tostring(x) end
        return "one of " .. table.concat(names, ", ")
    end
    local lo, hi = spec.min, spec.max
    local kind = spec.int and "integer" or "number"
    if hi == nil and lo == 1 and spec.int then return "a positive integer" end
    if hi == nil and lo == 0 then return "a non-negative " .. kind end
    local a = spec.int and "an " or "a "
    if lo and hi then return a .. kind .. " in [" .. lo .. ", " .. hi .. "]" end
    if lo then return a .. kind .. " >= " .. lo end
    if hi then return a .. kind .. " <= " .. hi end
    return a .. kind
end

-- Replaces each spec in params by its default, after checking the spec is well formed and
-- the default fits it. Returns an error string or nil.
local function take_specs(params)
    local names = {}
    for k in pairs(params) do names[#names + 1] = k end
    table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(names) do
        local spec = params[k]
        if type(spec) == "table" then
            local what = "param " .. tostring(k) .. ": "
            for f in pairs(spec) do
                if not SPEC_FIELDS[f] then
                    return what .. "unknown spec field '" .. tostring(f) .. "' (a spec is " ..
                        "{ default, int = true, min = a, max = b, oneof = {...}, only = \"sim\" })"
                end
            end
            local d = spec[1]
            local t = type(d)
            if t ~= "number" and t ~= "boolean" and t ~= "string" then
                return what .. "a spec's first item is the default, a number, boolean or " ..
                    "string (got " .. t .. ")"
            end
            if (spec.int or spec.min ~= nil or spec.max ~= nil) and t ~= "number" then
                return what .. "int, min and max apply to numbers; the default is a " .. t
            end
            for _, f in ipairs { "min", "max" } do
                if spec[f] ~= nil and (type(spec[f]) ~= "number" or spec[f] ~= spec[f]) then
                    return what .. f .. " must be a number"
                end
            end
            if spec.oneof ~= nil then
                if type(spec.oneof) ~= "table" or #spec.oneof == 0 then
                    return what .. "oneof must be a non-empty list of values"
                end
                for _, x in ipairs(spec.oneof) do
                    if type(x) ~= t then
                        return what .. "oneof's values must be of the default's type (" .. t .. ")"
                    end
                end
            end
            if spec.only ~= nil and not EXECUTORS[spec.only] then
                return what .. "only must be \"sim\" or \"engine\", got " .. tostring(spec.only)
            end
            if not fits_spec(spec, d) then
                return what .. "the default " .. tostring(d) .. " is not " ..
                    describe_spec(spec)
            end
            -- a copy: the policy's own table stays its to change, the checks do not
            specs[k] = copy(spec)
            if spec.oneof then specs[k].oneof = copy(spec.oneof) end
            params[k] = d
        end
    end
    return nil
end

-- Runs a policy's or router's chunk in a fresh sandbox and checks the table it returns: a
-- table, with entry (its one required function), every optional hook a function, params a
-- table of defaults whose specs are taken. Returns the table, or nil and an error string.
local function load_table(chunk, path, what, entry, hooks)
    local smt = getmetatable("")
    smt.__index = safe_string -- method calls on strings see the safe library
    smt.__metatable = false   -- and getmetatable("") cannot reach the metatable itself
    setfenv(chunk, make_env(path))
    local p = chunk()
    if type(p) ~= "table" then
        return nil, path .. ": a " .. what .. " must return a table with a " .. entry ..
            " function (got " .. type(p) .. ")"
    end
    local fname = entry:match("^[%w_]+")
    if type(p[fname]) ~= "function" then
        return nil, path .. ": the " .. what .. " table has no " .. entry .. " function"
    end
    for _, name in ipairs(hooks) do
        if p[name] ~= nil and type(p[name]) ~= "function" then
            return nil, path .. ": '" .. name .. "' must be a function"
        end
    end
    if p.params ~= nil and type(p.params) ~= "table" then
        return nil, path .. ": 'params' must be a table of defaults"
    end
    p.params = p.params or {}
    local err = take_specs(p.params)
    if err then return nil, path .. ": " .. err end
    return p
end

-- Runs the policy chunk in a fresh sandbox; returns an error string or nil.
function host.load(chunk, path)
    local p, err = load_table(chunk, path, "policy", "schedule(s)",
                              { "on_arrival", "on_finish", "init" })
    if not p then return err end
    policy = p
    s.params = p.params
    return nil
end

-- --set key=value: the default's type decides how the text is read.
function host.set(key, text)
    local params = policy.params
    local old = params[key]
    if old == nil then
        local names = {}
        for k in pairs(params) do names[#names + 1] = tostring(k) end
        table.sort(names)
        return "unknown param '" .. key .. "'; this policy's params: " ..
            (#names > 0 and table.concat(names, ", ") or "(none)")
    end
    local t, v = type(old), text
    if t == "number" then
        v = tonumber(text)
        -- LuaJIT reads "nan" as NaN, which no comparison in a policy would handle
        if v == nil or v ~= v then
            return "param '" .. key .. "' is a number, got '" .. text .. "'"
        end
    elseif t == "boolean" then
        if text == "true" or text == "1" then v = true
        elseif text == "false" or text == "0" then v = false
        else return "param '" .. key .. "' is a boolean (true/false), got '" .. text .. "'" end
    end
    local spec = specs[key]
    if spec and not fits_spec(spec, v) then
        return "param " .. key .. " must be " .. describe_spec(spec) .. ", got " .. text
    end
    params[key] = v
    return nil
end

function host.param(key) return policy.params[key] end

-- The params an executor records: all of them (executor nil), or those not declared for
-- another executor only.
function host.param_names(executor)
    local names = {}
    for k in pairs(policy.params) do
        local only = specs[k] and specs[k].only
        if executor == nil or only == nil or only == executor then names[#names + 1] = k end
    end
    table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
    return names
end

function host.attach(ptr)
    S = ffi.cast(SCHED, ptr)
    V = C.sched_view(S)
    s.block_size, s.num_blocks = V.block_size, V.num_blocks
    s.max_tokens, s.max_seqs, s.watermark_blocks = V.max_tokens, V.max_seqs, V.watermark_blocks
    if policy.init then policy.init(s) end
end

function host.schedule()
    s.now = V.now
    policy.schedule(s)
end

function host.on_arrival(ptr)
    s.now = V.now
    policy.on_arrival(s, ffi.cast(PTR, ptr)[0])
end
function host.on_finish(ptr)
    s.now = V.now
    policy.on_finish(s, ffi.cast(PTR, ptr)[0])
end
function host.has(name) return policy[name] ~= nil end

-- ------------------------------------------------------------------ routers
--
-- A router file returns { route = function(c, r) ... end, params = {...} } (and optionally
-- route_decode(c, r), which picks a disaggregated cluster's decode replica); it
-- runs in the same sandbox with the same limits. c is a read-only view of the cluster
-- (policies/router.h): c.n replicas, c.now, c.held (requests held at the router),
-- c.params, per-replica accessors taking a 1-based index, c:prefix_hit(i, r), c:random().
-- r is the arriving request as policies see it (its limit, never its true length).

local ROUTER_VIEW = ffi.typeof("router_view_t *")
local ROLES = { [0] = "mixed", "prefill", "decode" }
local c = {}
local route_line = "?"

local function rep_of(i, fname)
    if type(i) ~= "number" or i ~= floor(i) or i < 1 or i > RVIEW.n then
        error(fname .. ": replica index must be an integer in 1.." .. RVIEW.n .. ", got " ..
            tostring(i), 3)
    end
    return RVIEW.rep[i - 1]
end
function c.waiting(_, i) return rep_of(i, "waiting").waiting end
function c.running(_, i) return rep_of(i, "running").running end
function c.free_blocks(_, i) return rep_of(i, "free_blocks").free_blocks end
function c.total_blocks(_, i) return rep_of(i, "total_blocks").total_blocks end
function c.prompt_tokens(_, i) return rep_of(i, "prompt_tokens").prompt_tokens end
function c.decode_tokens(_, i) return rep_of(i, "decode_tokens").decode_tokens end
function c.load(_, i)
    local x = rep_of(i, "load")
    return x.prompt_tokens + x.decode_tokens
end
function c.role(_, i) return ROLES[rep_of(i, "role").role] end
function c.group(_, i) return rep_of(i, "group").group + 1 end
-- prefix_hit(i, r): prompt tokens replica i's prefix cache holds for the request being
-- routed (looked up, not taken: the cache is unchanged)
function c.prefix_hit(_, i, r)
    rep_of(i, "prefix_hit")
    return C.router_prefix_hit(RVIEW, i - 1)
end
function c.random() return C.router_random(RVIEW) end

-- Runs the router chunk in a fresh sandbox; returns an error string or nil.
function host.load_router(chunk, path)
    local p, err = load_table(chunk, path, "router", "route(c, r)", { "route_decode" })
    if not p then return err end
    policy = p
    c.params = p.params
    route_line = path .. ":" .. debug.getinfo(p.route, "S").linedefined
    return nil
end

function host.attach_router(ptr)
    RVIEW = ffi.cast(ROUTER_VIEW, ptr)
    c.n = RVIEW.n
end

-- A replica index from route's result: an integer in 1..n, else an error at route's line.
local function replica_index(v, fname)
    if type(v) ~= "number" or v ~= floor(v) or v < 1 or v > RVIEW.n then
        error(route_line .. ": " .. fname .. " returned replica " .. tostring(v) ..
            ", but the cluster has replicas 1.." .. RVIEW.n, 0)
    end
    return v
end

-- To C: (0, replica, decode replica or 0) routed, (1, reason) rejected, (2) held.
function host.route(ptr, fname)
    c.now, c.held = RVIEW.now, RVIEW.n_held
    local a, b = policy[fname](c, ffi.cast(PTR, ptr)[0])
    if a == "hold" then return 2 end
    if a == nil or a == false then
        if b == nil then
            error(route_line .. ": " .. fname .. " returned no decision (a replica index, " ..
                "nil or false with a reason to reject, or \"hold\")", 0)
        end
        return 1, tostring(b)
    end
    a = replica_index(a, fname)
    if b ~= nil then return 0, a, replica_index(b, fname) end
    return 0, a, 0
end

host.traceback = traceback
return host

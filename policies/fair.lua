-- fair.lua: continuous batching with fair sharing between tenants: the Virtual Token
-- Counter (VTC) of Sheng et al., "Fairness in Serving Large Language Models" (OSDI 2024).
--
-- A request's tenant is r.tenant from the trace's optional `tenant` column; requests
-- without one share the tenant "". Each tenant has a counter of the service it received,
-- in weighted tokens: w_in per prompt token when a request is first scheduled, w_out per
-- output token (the paper weighs outputs twice, for their decode cost). Each step:
--   1. running requests decode as in continuous.lua (oldest first; the newest is
--      preempted when KV runs out), and every decode is charged to its tenant;
--   2. admission repeatedly takes the oldest waiting request of the tenant with the
--      SMALLEST counter (ties: by name) and charges its prompt at once, so the next pick
--      sees it; it stops at the first request that does not fit, as continuous.lua stops
--      at the head of its FCFS queue.
-- A tenant that floods the queue therefore gets no more than the others once its counter
-- is ahead: backlogged tenants receive about equal weighted tokens, whatever their rates.
-- As in VTC, a tenant that arrives to find none of its requests queued or running has its
-- counter lifted to the smallest counter among the tenants that are, so an idle spell
-- banks no credit to spend later in a burst.

local batching = import("batching")

local counter = {} -- tenant name -> weighted tokens served so far

local function tenant(r) return r.tenant or "" end

local function charge(t, tokens) counter[t] = (counter[t] or 0) + tokens end

-- Tenants with a request queued or running, other than request `except`.
local function backlogged(s, except)
    local set = {}
    for i = 1, s:num_waiting() do
        local r = s:waiting(i)
        if r.id ~= except then set[tenant(r)] = true end
    end
    for i = 1, s:num_running() do
        local r = s:running(i)
        if r.id ~= except then set[tenant(r)] = true end
    end
    return set
end

local function admit_fairly(s, budget, seqs, step_budget, p)
    -- each tenant's waiting requests in queue order (preempted ones first, then FCFS)
    local queues, names = {}, {}
    for i = 1, s:num_waiting() do
        local r = s:waiting(i)
        local t = tenant(r)
        if not queues[t] then
            queues[t] = { head = 1 }
            names[#names + 1] = t
        end
        local q = queues[t]
        q[#q + 1] = r
    end
    -- seqs bounds the running batch, as the core does (vLLM's max_num_seqs)
    while budget > 0 and s:running_seqs() < seqs do
        local best
        for _, t in ipairs(names) do
            local q = queues[t]
            if q.head <= #q then
                local c, cb = counter[t] or 0, best and (counter[best] or 0)
                if not best or c < cb or (c == cb and t < best) then best = t end
            end
        end
        if not best then break end
        local q = queues[best]
        local r = q[q.head]
        -- the prompt is charged once, at first admission; a recompute after a preemption
        -- is the server's cost, not more service to the tenant
        local first = r.first_scheduled_s < 0
        local left, n = batching.admit_one(s, r, budget, false, step_budget)
        if not left then break end
        if n > 0 and first then charge(best, p.w_in * r.prompt_tokens) end
        budget = left
        q.head = q.head + 1
    end
end

return {
    params = {
        max_seqs = { 256, int = true, min = 1 },    -- sequences per step (max_num_seqs)
        max_tokens = { 8192, int = true, min = 1 }, -- tokens per step (max_num_batched_tokens)
        -- service per prompt token and per output token (VTC's default weights)
        w_in = { 1, min = 0 },
        w_out = { 2, min = 0 },
    },

    on_arrival = function(s, r)
        local t = tenant(r)
        local active = backlogged(s, r.id)
        if active[t] then return end
        local low
        for name in pairs(active) do
            local c = counter[name] or 0
            if not low or c < low then low = c end
        end
        if low and low > (counter[t] or 0) then counter[t] = low end
    end,

    schedule = function(s)
        local p = s.params
        local step_budget = math.min(p.max_tokens, s.max_tokens)
        local seqs = math.min(p.max_seqs, s.max_seqs)
        local budget, preempted = batching.decode_running(s, step_budget, seqs)
        for i = 1, s:num_running() do
            local r = s:running(i)
            if r.scheduled > 0 and r:is_decoding() then charge(tenant(r), p.w_out) end
        end
        budget = batching.prefill_running(s, budget, seqs) -- only chunked recomputes
        if preempted == 0 then admit_fairly(s, budget, seqs, step_budget, p) end
    end,
}

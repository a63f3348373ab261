-- priority.lua: continuous batching that serves the most urgent requests first, as vLLM's
-- --scheduling-policy priority does.
--
-- A request's urgency is r.priority from the trace's optional `priority` column: LOWER is
-- more urgent (as Unix nice and vLLM), 0 when the trace has none, so on a trace without
-- priorities this is continuous.lua's FCFS. Each step:
--   1. running requests decode one token, most urgent first; when one needs a KV block
--      and none is free, the LEAST urgent running request (the newest among equals) is
--      preempted, so memory pressure never costs an urgent request its progress;
--   2. with `preempt` on, when the most urgent waiting request cannot be admitted (no KV
--      for its prompt, or no sequence slot left), running requests of strictly lower
--      urgency are preempted, least urgent first, until it fits (only when evicting all of
--      them would make room: a preemption that admits nobody only wastes work);
--   3. waiting requests are admitted by (priority, arrival) with their WHOLE prompt while
--      the budget, the sequence limit and the KV cache allow. Admission stops at the first
--      that does not fit, so no less urgent request overtakes a blocked more urgent one.
-- Without `preempt` an urgent arrival waits for a running request to finish, but jumps
-- the whole queue; with it, it waits for nothing but a step.

local batching = import("batching")

-- More urgent first: lower priority value, then earlier arrival, then lower id (the
-- trace order), so the order is total and runs are deterministic.
local function before(a, b)
    if a.priority ~= b.priority then return a.priority < b.priority end
    if a.arrival_s ~= b.arrival_s then return a.arrival_s < b.arrival_s end
    return a.id < b.id
end

local function sorted(s, n, get)
    local list = {}
    for i = 1, n do list[i] = get(s, i) end
    table.sort(list, before)
    return list
end

-- Step 1. Returns the budget left and the number of preemptions.
local function decode_by_urgency(s, budget, seqs, gone)
    local run = sorted(s, s:num_running(), s.running)
    local last, preempted = #run, 0
    for i = 1, #run do
        if i > last then break end
        local r = run[i]
        if r:is_decoding() then
            while not s:can_allocate(r, 1) and last > i do
                s:preempt(run[last]) -- the least urgent, never scheduled in this plan yet
                gone[run[last].id] = true
                last, preempted = last - 1, preempted + 1
            end
            if not s:can_allocate(r, 1) then
                s:preempt(r) -- alone and still too big: back to the queue until memory frees
                return budget, preempted + 1
            end
            if budget < 1 or s:planned_seqs() >= seqs then return budget, preempted end
            s:schedule(r, 1)
            budget = budget - 1
        end
    end
    return budget, preempted
end

-- Step 2: make room for the most urgent waiting request w, whose admission costs n tokens.
local function make_room(s, w, n, seqs, gone)
    local run = sorted(s, s:num_running(), s.running)
    local victims, freed = {}, 0
    for i = #run, 1, -1 do
        local r = run[i]
        if r.priority <= w.priority then break end -- only strictly less urgent ones
        victims[#victims + 1] = r
        freed = freed + r.num_blocks
    end
    if #victims == 0 then return 0 end
    -- Blocks shared through the prefix cache may free less than counted: then the loop
    -- below stops once the victims run out, and admission simply waits.
    if s:blocks_needed(w, n) > s:free_blocks() - s.watermark_blocks + freed then return 0 end
    local k = 0
    while k < #victims and (not s:can_allocate(w, n) or s:num_running() >= seqs) do
        k = k + 1
        s:preempt(victims[k])
        gone[victims[k].id] = true
    end
    return k
end

-- Step 3.
-- A request preempted in this plan may not run in it (the core refuses): the queue stops
-- there, as it would at any request that does not fit.
local function admit_by_urgency(s, budget, seqs, step_budget, gone)
    local queue = sorted(s, s:num_waiting(), s.waiting)
    for _, r in ipairs(queue) do
        -- seqs bounds the running batch, as the core does (vLLM's max_num_seqs)
        if budget <= 0 or s:running_seqs() >= seqs or gone[r.id] then break end
        local left = batching.admit_one(s, r, budget, false, step_budget)
        if not left then break end
        budget = left
    end
    return budget
end

return {
    params = {
        max_seqs = { 256, int = true, min = 1 },    -- sequences per step (max_num_seqs)
        max_tokens = { 8192, int = true, min = 1 }, -- tokens per step (max_num_batched_tokens)
        preempt = false,   -- preempt less urgent running requests for an urgent arrival
    },

    schedule = function(s)
        local step_budget = math.min(s.params.max_tokens, s.max_tokens)
        local seqs = math.min(s.params.max_seqs, s.max_seqs)
        local made, gone = 0, {}
        if s.params.preempt and s:num_waiting() > 0 then
            local w = sorted(s, s:num_waiting(), s.waiting)[1]
            local n = w:remaining() - s:prefix_hit(w)
            if n <= step_budget and (not s:can_allocate(w, n) or s:num_running() >= seqs) then
                made = make_room(s, w, n, seqs, gone)
            end
        end
        local budget, preempted = decode_by_urgency(s, step_budget, seqs, gone)
        budget = batching.prefill_running(s, budget, seqs) -- only chunked recomputes
        -- short of memory while decoding: admit nobody new (as vLLM); room made on purpose
        -- for an urgent request is admission's to use
        if preempted == 0 or made > 0 then admit_by_urgency(s, budget, seqs, step_budget, gone) end
    end,
}

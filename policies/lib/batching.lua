-- lib/batching.lua: building blocks shared by the shipped policies (import "batching").
--
-- decode_running(s, budget, seqs, drafts)
--   Schedules one decode step for every running request that is decoding, oldest first.
--   When a request needs a KV block and none is free, the NEWEST running request is
--   preempted (vLLM's recompute preemption: its blocks are freed and it recomputes later),
--   so the oldest requests keep making progress. drafts(r) (optional) gives the number of
--   speculative tokens to verify for r. Returns the token budget left.
--
-- prefill_running(s, budget, seqs)
--   Continues the prompts of running requests that are part-way through (chunked prefill),
--   oldest first, each with as many tokens as the budget allows. Returns the budget left.
--
-- admit(s, budget, seqs, chunked, step_budget)
--   Admits waiting requests in arrival order (FCFS; preempted requests are at the head of
--   the queue). chunked = false: whole prompts only, stop at the first that does not fit,
--   and reject a prompt larger than step_budget (it could never run); chunked = true: the
--   last admitted request may get a partial chunk. Returns the budget left.

local M = {}

local function preempt_newest_until_fits(s, r, n, last, i)
    while not s:can_allocate(r, n) and last > i do
        s:preempt(s:running(last))
        last = last - 1
    end
    return last
end

function M.decode_running(s, budget, seqs, drafts)
    local last = s:num_running()
    local i = 1
    while i <= last do
        local r = s:running(i)
        if r:is_decoding() then
            local k = drafts and drafts(r) or 0
            local n = 1 + k
            last = preempt_newest_until_fits(s, r, n, last, i)
            if not s:can_allocate(r, n) then
                s:preempt(r) -- alone and still too big: back to the queue until memory frees
                return budget
            end
            if n > budget or s:planned_seqs() >= seqs then return budget end
            s:schedule(r, 1, k)
            budget = budget - n
        end
        i = i + 1
    end
    return budget
end

function M.prefill_running(s, budget, seqs)
    for i = 1, s:num_running() do
        if budget <= 0 or s:planned_seqs() >= seqs then break end
        local r = s:running(i)
        if r.scheduled == 0 and r.state == s.RUNNING and not r:is_decoding() then
            local n = math.min(r:remaining(), budget)
            if s:can_allocate(r, n) then
                s:schedule(r, n)
                budget = budget - n
            end
        end
    end
    return budget
end

function M.admit(s, budget, seqs, chunked, step_budget)
    for j = 1, s:num_waiting() do
        if budget <= 0 or s:planned_seqs() >= seqs then break end
        local r = s:waiting(j)
        local n = r:remaining()
        if chunked then
            n = math.min(n, budget)
        elseif n > step_budget then
            -- can never run as one piece: reject with the reason instead of stalling forever
            s:reject(r, "prompt of " .. n .. " tokens exceeds the step budget of " ..
                step_budget .. " tokens (use a chunked policy)")
            n = 0
        end
        if n > 0 then
            if n > budget or not s:can_allocate(r, n) then break end
            s:schedule(r, n)
            budget = budget - n
        end
    end
    return budget
end

return M

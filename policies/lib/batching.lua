-- lib/batching.lua: building blocks shared by the shipped policies (import "batching").
--
-- decode_running(s, budget, seqs, drafts)
--   Schedules one decode step for every running request that is decoding, oldest first.
--   When a request needs a KV block and none is free, the NEWEST running request is
--   preempted (vLLM's recompute preemption: its blocks are freed and it recomputes later),
--   so the oldest requests keep making progress; it stops (budget or sequences spent)
--   before preempting for a request it could not run. drafts(r) (optional) gives the number of
--   speculative tokens to verify for r; they are dropped, not paid for with a preemption,
--   when only the drafts lack KV. Returns the token budget left and the number of requests
--   it preempted: a policy should not admit new requests in a step that had to preempt
--   (memory is short; vLLM skips the waiting queue then), or it would churn.
--
-- prefill_running(s, budget, seqs)
--   Continues the prompts of running requests that are part-way through (chunked prefill),
--   oldest first, each with as many tokens as the budget allows. Returns the budget left.
--
-- admit(s, budget, seqs, chunked, step_budget)
--   Admits waiting requests in arrival order (FCFS; preempted requests are at the head of
--   the queue). chunked = false: whole prompts only, stop at the first that does not fit,
--   and reject a new prompt larger than step_budget (it could never run); a preempted
--   request that outgrew the step is recomputed in chunks. chunked = true: the last
--   admitted request may get a partial chunk. With prefix caching, a request's tokens
--   found in the cache (s:prefix_hit) cost no budget: a prompt is judged, charged and
--   scheduled by its uncached tokens only. Returns the budget left.

local M = {}

local function preempt_newest_until_fits(s, r, n, last, i)
    local preempted = 0
    while not s:can_allocate(r, n) and last > i do
        s:preempt(s:running(last))
        last = last - 1
        preempted = preempted + 1
    end
    return last, preempted
end

function M.decode_running(s, budget, seqs, drafts)
    local last = s:num_running()
    local i, preempted = 1, 0
    while i <= last do
        local r = s:running(i)
        if r:is_decoding() then
            local k = drafts and drafts(r) or 0
            -- Short of KV for the drafts but not for the token itself: drop the drafts
            -- rather than preempt someone just to verify guesses (as vLLM does).
            if k > 0 and not s:can_allocate(r, 1 + k) and s:can_allocate(r, 1) then k = 0 end
            local n = 1 + k
            -- Out of budget or sequences: stop BEFORE making room, or someone would be
            -- preempted for a request this step then does not run.
            if n > budget or s:planned_seqs() >= seqs then return budget, preempted end
            local p
            last, p = preempt_newest_until_fits(s, r, n, last, i)
            preempted = preempted + p
            if not s:can_allocate(r, n) then
                s:preempt(r) -- alone and still too big: back to the queue until memory frees
                return budget, preempted + 1
            end
            s:schedule(r, 1, k)
            budget = budget - n
        end
        i = i + 1
    end
    return budget, preempted
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

-- Admits waiting request r into this step, as vLLM's scheduler does: only its uncached
-- tokens cost budget (vLLM's num_new_tokens), so a long but mostly cached prompt fits a
-- step. Returns the budget left and the tokens scheduled (0: rejected, or nothing to do),
-- or nil when r does not fit, where a FCFS queue stops.
function M.admit_one(s, r, budget, chunked, step_budget)
    local hit = s:prefix_hit(r)
    local n = r:remaining() - hit
    if chunked then
        n = math.min(n, budget)
    elseif n > step_budget then
        if r.generated == 0 then
            -- a prompt that can never run as one piece: reject it with the reason instead
            -- of stalling the queue forever
            local what = hit > 0 and (n .. " uncached tokens (" .. hit .. " cached)")
                or (n .. " tokens")
            s:reject(r, "prompt of " .. what .. " exceeds the step budget of " ..
                step_budget .. " tokens (use a chunked policy)")
            return budget, 0
        end
        -- a preempted request whose prompt + generated tokens outgrew one step: recompute
        -- it in chunks (prefill_running continues it), never drop work
        n = math.min(n, budget)
    end
    if n <= 0 then return budget, 0 end
    if n > budget or not s:can_allocate(r, n) then return nil end
    s:schedule(r, n)
    return budget - n, n
end

function M.admit(s, budget, seqs, chunked, step_budget)
    local j = 1
    while j <= s:num_waiting() do
        -- seqs bounds the running batch (vLLM's max_num_seqs): a running request left out
        -- of this step still holds its slot
        if budget <= 0 or s:running_seqs() >= seqs then break end
        local r = s:waiting(j)
        local left = M.admit_one(s, r, budget, chunked, step_budget)
        if not left then break end
        budget = left
        -- a rejected request left the queue at once: the next one is at j now
        if r.state ~= s.REJECTED then j = j + 1 end
    end
    return budget
end

return M

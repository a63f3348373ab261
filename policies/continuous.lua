-- continuous.lua: continuous (iteration-level) batching, as in Orca (Yu et al., OSDI 2022)
-- and vLLM (Kwon et al., SOSP 2023).
--
-- The batch is rebuilt at every step instead of once per batch:
--   1. every running request decodes one token, oldest first; if one needs a new KV block
--      and none is free, the NEWEST running request is preempted (its blocks are freed and
--      it recomputes later, vLLM's default), so older requests keep making progress;
--   2. waiting requests are admitted in arrival order (FCFS) with their WHOLE prompt while
--      the step's token budget, the sequence limit and the KV cache allow. Admission stops
--      at the first request that does not fit, so nobody is overtaken. (A preempted request
--      whose prompt + generated tokens outgrew the step budget is recomputed in chunks.)
-- A long prompt therefore makes every decode in its step wait for it: compare with
-- chunked_prefill.lua, which bounds that stall.

local batching = import("batching")

return {
    params = {
        -- { default, int = true, min = 1 }: the core refuses a --set outside it at load
        max_seqs = { 256, int = true, min = 1 },    -- sequences per step (max_num_seqs)
        max_tokens = { 8192, int = true, min = 1 }, -- tokens per step (max_num_batched_tokens)
    },

    schedule = function(s)
        local step_budget = math.min(s.params.max_tokens, s.max_tokens)
        local seqs = math.min(s.params.max_seqs, s.max_seqs)
        local budget, preempted = batching.decode_running(s, step_budget, seqs)
        budget = batching.prefill_running(s, budget, seqs) -- only chunked recomputes
        -- memory is short when someone had to be preempted: admit nobody new (as vLLM)
        if preempted == 0 then batching.admit(s, budget, seqs, false, step_budget) end
    end,
}

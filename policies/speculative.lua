-- speculative.lua: continuous batching with speculative decoding (Leviathan et al., ICML
-- 2023; Chen et al., 2023).
--
-- A small draft model proposes k tokens for each decoding request; the target model then
-- verifies all k + 1 positions in ONE forward pass. Drafts are accepted left to right until
-- the first mismatch, and the target always contributes one token of its own, so a step
-- emits between 1 and k + 1 tokens per request. With a per-token acceptance rate alpha,
-- the expected number of tokens per step is (1 - alpha^(k+1)) / (1 - alpha).
--
-- Decoding is memory-bound, so verifying k + 1 tokens costs about as much as decoding 1:
-- at low load TPOT falls. At high load the drafts eat the step's token budget and the
-- draft passes add latency: speculation helps less, or hurts.
--
-- In the simulator a step costs k passes of the `draft` model plus the target's
-- verification pass, and acceptances are drawn with probability `alpha` from the run's
-- seed. The engine runs a real draft model.

local batching = import("batching")

return {
    params = {
        k = 4,                   -- draft tokens per decoding request per step
        alpha = 0.7,             -- per-token acceptance probability (simulator)
        draft = "llama-3.2-1b",  -- the draft model (a model preset)
        max_seqs = 256,
        max_tokens = 8192,
    },

    schedule = function(s)
        local p = s.params
        local step_budget = math.min(p.max_tokens, s.max_tokens)
        local seqs = math.min(p.max_seqs, s.max_seqs)
        -- No point drafting past the limit: the last token it allows needs no drafts.
        -- (r.output_tokens is the request's limit, not where its answer ends: near the
        -- true end the drafts run past it and the executor keeps only the tokens before
        -- EOS, as a real server does.)
        local function drafts(r)
            return math.max(0, math.min(p.k, r.output_tokens - r.generated - 1))
        end
        local budget, preempted = batching.decode_running(s, step_budget, seqs, drafts)
        budget = batching.prefill_running(s, budget, seqs) -- only chunked recomputes
        if preempted == 0 then batching.admit(s, budget, seqs, false, step_budget) end
    end,
}

-- speculative.lua: continuous batching with speculative decoding (Leviathan et al., ICML
-- 2023; Chen et al., 2023).
--
-- A cheap proposer (a small draft model, or n-grams of the request's own tokens) guesses
-- k tokens for each decoding request; the target model then verifies all k + 1 positions
-- in ONE forward pass. Drafts are accepted left to right until
-- the first mismatch, and the target always contributes one token of its own, so a step
-- emits between 1 and k + 1 tokens per request. With a per-token acceptance rate alpha,
-- the expected number of tokens per step is (1 - alpha^(k+1)) / (1 - alpha).
--
-- Decoding is memory-bound, so verifying k + 1 tokens costs about as much as decoding 1:
-- at low load TPOT falls. At high load the drafts eat the step's token budget and the
-- draft passes add latency: speculation helps less, or hurts.
--
-- Who proposes the drafts depends on the executor; this file only decides how many:
--   * the simulator models a draft MODEL: a step costs k passes of the `draft` preset plus
--     the target's verification pass, and each draft is accepted with probability `alpha`
--     (drawn from the run's seed);
--   * the engine runs a real draft model given as `engine --draft FILE|dummy:PRESET`
--     (engine/draft.c): the same work per step (the draft's catch-up and k passes, then
--     the target's verification), its KV in the request's own blocks, and speculative
--     sampling decides acceptance; without --draft (or with --draft ngram) it proposes
--     with an n-gram (prompt-lookup) proposer over the request's own tokens
--     (engine/spec.c). `alpha` and `draft` have no effect there, so an engine run leaves
--     them out of its recorded params (they are declared only = "sim"); its config records
--     "proposer" ("draft" or "ngram") and the acceptance per draft position, from which
--     `twinserve calibrate` prints the alpha to set here.
-- Either way `report` shows the acceptance rate (spec_accepted / spec_proposed) and the
-- mean tokens per decoding request-step.

local batching = import("batching")

return {
    params = {
        k = { 4, int = true, min = 0 },   -- draft tokens per decoding request per step
        -- the simulator's per-token acceptance probability, and its draft model (a preset)
        alpha = { 0.7, min = 0, max = 1, only = "sim" },
        draft = { "llama-3.2-1b", only = "sim" },
        max_seqs = { 256, int = true, min = 1 },
        max_tokens = { 8192, int = true, min = 1 },
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

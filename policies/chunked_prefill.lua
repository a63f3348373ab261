-- chunked_prefill.lua: stall-free batching with chunked prefills, as in Sarathi-Serve
-- (Agrawal et al., OSDI 2024).
--
-- Every step has a fixed token budget (`chunk`). Decodes go in first, so a running request
-- is never stalled behind someone else's prompt; prompts then fill what is left of the
-- budget in chunks: first the prompts already part-way through, then new requests in
-- arrival order. A 4,000-token prompt under a 512-token budget takes about 8 steps, each
-- shared with every ongoing decode. The price: a prompt's K/V is re-read on every chunk,
-- and its time to first token grows a little; the gain: decode steps keep a bounded
-- duration (tail TBT/TPOT) however long the arriving prompts are.

local batching = import("batching")

return {
    params = {
        chunk = { 512, int = true, min = 1 },    -- the step's budget: decodes + prefill chunks
        max_seqs = { 256, int = true, min = 1 }, -- sequences per step
    },

    schedule = function(s)
        local budget = math.min(s.params.chunk, s.max_tokens)
        local seqs = math.min(s.params.max_seqs, s.max_seqs)
        local preempted
        budget, preempted = batching.decode_running(s, budget, seqs)
        budget = batching.prefill_running(s, budget, seqs)
        if preempted == 0 then batching.admit(s, budget, seqs, true) end
    end,
}

-- static.lua: static (request-level) batching, as in early serving systems such as
-- FasterTransformer and Hugging Face generate() behind a request queue.
--
-- A batch is formed from up to `batch` waiting requests (or fewer once the oldest has
-- waited `timeout_s` seconds). The batch then runs to completion as one unit:
--   * one prefill step for all members, prompts padded to the longest one;
--   * decode steps until EVERY member is done. A member that finishes early keeps its slot
--     (padding), so every step costs the full batch, and nobody new is admitted meanwhile.
-- Each batch reserves KV for its members' limits up front (r.output_tokens: a request's
-- max_tokens, or the context left after its prompt; the server cannot know how long an
-- answer will be), as FasterTransformer allocates for the maximum length, so it never runs
-- out of memory mid-batch (and never preempts). Reservations for limits far above the
-- real outputs are what keeps static batches small. Compare its TTFT with continuous.lua:
-- a request that arrives just after a batch started waits for the whole batch.

local batch_ids = nil   -- ids of the current batch's members, in order
local final_ctx = {}    -- id -> context a finished member's padding runs at

local function blocks_for(s, tokens) return math.ceil(tokens / s.block_size) end

local function form_batch(s, p)
    local size = math.min(p.batch, s.max_seqs)
    local members, reserve, maxp = {}, 0, 0
    local free = s:free_blocks() - s.watermark_blocks
    for j = 1, s:num_waiting() do
        if #members >= size then break end
        local r = s:waiting(j)
        local need = blocks_for(s, r.prompt_tokens + r.output_tokens)
        local longest = math.max(maxp, r.prompt_tokens)
        -- the padded prefill is (members x longest prompt) tokens in one step
        if reserve + need > free or (#members + 1) * longest > s.max_tokens then break end
        members[#members + 1] = r
        reserve, maxp = reserve + need, longest
    end
    if #members == 0 then
        -- Between batches nothing holds KV, so the oldest request can never fit: say why.
        local r = s:waiting(1)
        s:reject(r, "needs " .. blocks_for(s, r.prompt_tokens + r.output_tokens) ..
            " KV blocks and a " .. r.prompt_tokens .. "-token prefill; a batch has " .. free ..
            " blocks and " .. s.max_tokens .. " tokens per step")
        return
    end
    batch_ids = {}
    for i, r in ipairs(members) do
        batch_ids[i] = r.id
        s:schedule(r) -- the whole prompt
        if r.prompt_tokens < maxp then s:pad(maxp - r.prompt_tokens, 0) end
    end
end

return {
    params = {
        batch = { 8, int = true, min = 1 }, -- requests per batch
        -- start a partial batch once the oldest has waited this long
        timeout_s = { 1.0, min = 0 },
    },

    on_finish = function(s, r)
        -- where its next decode would run, but never at the limit's last position: a slot
        -- that used the whole context would pad past it, which the core refuses
        -- (prompt + output_tokens never exceeds the context)
        final_ctx[r.id] = r.prompt_tokens + math.min(r.generated, r.output_tokens - 1)
    end,

    schedule = function(s)
        local p = s.params
        if batch_ids then
            local live = false
            for _, id in ipairs(batch_ids) do
                if s:find(id) then live = true break end
            end
            if live then
                for _, id in ipairs(batch_ids) do
                    local r = s:find(id)
                    if r then
                        s:schedule(r) -- its next token
                    else
                        s:pad(1, final_ctx[id]) -- a finished member keeps its slot
                    end
                end
                return
            end
            for _, id in ipairs(batch_ids) do final_ctx[id] = nil end
            batch_ids = nil -- the batch is done: form the next one below
        end
        local n = s:num_waiting()
        if n == 0 then return end
        local deadline = s:waiting(1).arrival_s + p.timeout_s
        if n >= math.min(p.batch, s.max_seqs) or s.now >= deadline then
            form_batch(s, p)
        else
            s:wake_at(deadline)
        end
    end,
}

-- prefix_affinity: the replica whose prefix cache holds most of the request's prompt,
-- balanced against load, as llm-d's scheduler scores endpoints: a weighted sum of scorers,
-- each in [0, 1]:
--   prefix  c:prefix_hit(i, r) / prompt tokens  (the cached fraction of the prompt)
--   load    1 - load(i) / max load over the replicas  (outstanding tokens, c:load)
--   kv      free KV blocks / total  (room to admit it)
-- The highest score wins; ties go to the lower index. With prefix_weight 0 it is a
-- least-loaded router; a large prefix_weight sends every shared prefix to one replica.
-- In a disaggregated cluster route scores the prefill replicas (where the prefix cache
-- saves work) and route_decode the decode ones (load and free KV only).
local function pick(c, r, decode)
    local p = c.params
    local max_load = 0
    for i = 1, c.n do
        if (c:role(i) == "decode") == decode then max_load = math.max(max_load, c:load(i)) end
    end
    local best, best_score = nil, -math.huge
    for i = 1, c.n do
        if (c:role(i) == "decode") == decode then
            local score = decode and 0 or
                p.prefix_weight * c:prefix_hit(i, r) / math.max(r.prompt_tokens, 1)
            if max_load > 0 then score = score + p.load_weight * (1 - c:load(i) / max_load)
            else score = score + p.load_weight end
            score = score + p.kv_weight * c:free_blocks(i) / math.max(c:total_blocks(i), 1)
            if score > best_score then best, best_score = i, score end
        end
    end
    return best
end

return {
    params = {
        prefix_weight = { 2, min = 0 },
        load_weight = { 1, min = 0 },
        kv_weight = { 1, min = 0 },
    },
    route = function(c, r) return pick(c, r, false) end,
    route_decode = function(c, r) return pick(c, r, true) end,
}

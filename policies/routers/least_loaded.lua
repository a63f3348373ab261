-- least_loaded: the replica with the fewest outstanding tokens, c:load(i): prompt tokens
-- not yet prefilled plus the context of its decoding requests (what a decode step
-- re-reads; on a decode replica also the prompts routed to it whose KV has not landed).
-- Ties go to the shorter queue, then to the lower index. In a disaggregated cluster
-- route picks among the prefill replicas and route_decode among the decode ones.
local function pick(c, decode)
    local best, best_load, best_q = nil, math.huge, math.huge
    for i = 1, c.n do
        if (c:role(i) == "decode") == decode then
            local load, q = c:load(i), c:waiting(i)
            if load < best_load or (load == best_load and q < best_q) then
                best, best_load, best_q = i, load, q
            end
        end
    end
    return best
end

return {
    route = function(c, r) return pick(c, false) end,
    route_decode = function(c, r) return pick(c, true) end,
}

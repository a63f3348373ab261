-- power_of_two: two replicas drawn at random (c:random(), seeded by --seed), the request
-- to the less loaded of the two (Mitzenmacher's power of two choices): nearly
-- least-loaded balance while looking at two replicas only. In a disaggregated cluster
-- route draws among the prefill replicas and route_decode among the decode ones.
local function pick(c, decode)
    local cand = {}
    for i = 1, c.n do
        if (c:role(i) == "decode") == decode then cand[#cand + 1] = i end
    end
    local k = math.min(c.params.choices, #cand)
    local best, best_load = nil, math.huge
    for _ = 1, k do
        local i = cand[1 + math.floor(c:random() * #cand)]
        local load = c:load(i)
        if load < best_load then best, best_load = i, load end
    end
    return best
end

return {
    params = { choices = { 2, int = true, min = 1 } },
    route = function(c, r) return pick(c, false) end,
    route_decode = function(c, r) return pick(c, true) end,
}

-- power_of_two: two replicas drawn at random (c:random(), seeded by --seed), the request
-- to the less loaded of the two (Mitzenmacher's power of two choices): nearly
-- least-loaded balance while looking at two replicas only.
return {
    params = { choices = { 2, int = true, min = 1 } },
    route = function(c, r)
        local k = math.min(c.params.choices, c.n)
        local best, best_load = nil, math.huge
        for _ = 1, k do
            local i = 1 + math.floor(c:random() * c.n)
            local load = c:load(i)
            if load < best_load then best, best_load = i, load end
        end
        return best
    end,
}

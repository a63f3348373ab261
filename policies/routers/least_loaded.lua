-- least_loaded: the replica with the fewest outstanding tokens, c:load(i): prompt tokens
-- not yet prefilled plus the context of its decoding requests (what a decode step
-- re-reads). Ties go to the shorter queue, then to the lower index.
return {
    route = function(c, r)
        local best, best_load, best_q = 1, math.huge, math.huge
        for i = 1, c.n do
            local load, q = c:load(i), c:waiting(i)
            if load < best_load or (load == best_load and q < best_q) then
                best, best_load, best_q = i, load, q
            end
        end
        return best
    end,
}

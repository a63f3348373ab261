-- round_robin: each request to the next replica in turn (the built-in default's order).
-- See policies/router.h and docs/cluster.md for the router API.
local last = 0

return {
    route = function(c, r)
        last = last % c.n + 1
        return last
    end,
}

-- round_robin: each request to the next replica in turn (the built-in default's order).
-- In a disaggregated cluster, route takes the next prefill replica and route_decode the
-- next decode replica, each in its own turn (as the built-in default).
-- See policies/router.h and docs/cluster.md for the router API.
local last, last_decode = 0, 0

-- the next replica after `from` whose role is (decode) or is not (prefill, mixed) decode
local function next_of(c, from, decode)
    repeat from = from % c.n + 1 until (c:role(from) == "decode") == decode
    return from
end

return {
    route = function(c, r)
        last = next_of(c, last, false)
        return last
    end,
    route_decode = function(c, r)
        last_decode = next_of(c, last_decode, true)
        return last_decode
    end,
}

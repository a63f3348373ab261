-- slo_admission.lua: continuous batching that sheds what it cannot serve in time; an example
-- of a policy that predicts, with s:step_cost (docs/policies.md, "Policies that predict").
--
-- Each step, running requests decode first (as continuous.lua). Then, in arrival order, a
-- waiting request is admitted only when its first token can still meet the TTFT SLO:
--     waited so far + the step that would prefill it (the plan so far with its prefill,
--     priced by s:step_cost)  <=  ttft_slo.
-- One that cannot is rejected with the figures ("shed: ..."), rather than served late while
-- everyone behind it waits longer still; with shed = false it is only left waiting. With
-- tpot_slo > 0, a request is also not admitted when the step with its prefill would take
-- longer than tpot_slo: the decodes sharing that step would stall past their SLO (it
-- waits for a lighter step, it is not shed). Until the executor gives an estimate (the
-- engine's first few steps), it admits as continuous batching does.

local batching = import("batching")

return {
    params = {
        max_seqs = { 256, int = true, min = 1 },
        max_tokens = { 8192, int = true, min = 1 },
        ttft_slo = { 2.0, min = 0.001 },   -- seconds from arrival to the first token
        tpot_slo = { 0.0, min = 0 },       -- seconds per step a decode may wait (0: none)
        shed = { true },                   -- reject what cannot meet ttft_slo (false: wait)
    },

    schedule = function(s)
        local p = s.params
        local step_budget = math.min(p.max_tokens, s.max_tokens)
        local seqs = math.min(p.max_seqs, s.max_seqs)
        local budget, preempted = batching.decode_running(s, step_budget, seqs)
        budget = batching.prefill_running(s, budget, seqs)
        if preempted > 0 then return end
        local now = s:time()
        local j = 1
        while j <= s:num_waiting() do
            if budget <= 0 or s:running_seqs() >= seqs then break end
            local r = s:waiting(j)
            local hit = s:prefix_hit(r)
            local n = r:remaining() - hit
            local t = n > 0 and s:step_cost { { n = n, ctx = r.computed + hit } } or nil
            local waited = now - r.arrival_s
            if t and p.shed and waited + t > p.ttft_slo then
                s:reject(r, string.format("shed: its first token at %.3f s (waited %.3f s, the "
                    .. "step %.3f s) would miss ttft_slo=%g s", waited + t, waited, t, p.ttft_slo))
                -- it left the queue: the next one is at j now
            elseif t and p.tpot_slo > 0 and t > p.tpot_slo and s:planned_seqs() > 0 then
                break -- the decodes of this step would stall past tpot_slo: wait
            else
                local left = batching.admit_one(s, r, budget, false, step_budget)
                if not left then break end -- FCFS: nobody overtakes
                budget = left
                if r.state ~= s.REJECTED then j = j + 1 end
            end
        end
    end,
}

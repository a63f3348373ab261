-- vllm.lua: vLLM v1's scheduler (Scheduler.schedule(), FCFS policy, vLLM 0.15), step for
-- step, on twinserve's core. docs/policies.md ("vllm.lua: vLLM v1's scheduler") compares it
-- with chunked_prefill.lua and gives the measured difference.
--
-- Source read (github.com/vllm-project/vllm, the stored copies; the code is reimplemented
-- here, none of it copied):
--   S = vllm/v1/core/sched/scheduler.py       @ b4622cf924bc72504aed99e486062d6633fde39e
--       (another copy, @ 00024d314514900f361ad072af6931e403b7f589, adds a pause state and
--       an opt-in deterministic_prefix_caching split; the loops below are unchanged)
--   K = vllm/v1/core/kv_cache_manager.py      @ ace980e6de0540f49b0c63248437a1a7807590c1
--   Q = vllm/v1/core/sched/request_queue.py   @ 0097c7ed191ad98928976a47ae63ab625a5d112f
--   C = vllm/config/scheduler.py              @ 1f8758d584e8f599219d75adf658e182ed809a43
--   A = vllm/v1/core/sched/async_scheduler.py @ 7ab8a61c80128fbc7a671dfbf41e74b5c9118ba5
-- The store has no v0.15.0 tag to match these against. They are of about that time or
-- later (Q already has an SJF queue that C's SchedulerPolicy, C:22, does not list yet); the
-- loops cited below have kept this shape through the v1 releases before them.
--
-- One step, as schedule() builds it (S:321-896):
--   token budget = max_num_batched_tokens                            S:102, S:340
--   1. RUNNING requests, in running-list order (admission order)     S:350-353
--      n = known tokens - computed                                   S:371-375
--      n = min(n, long_prefill_token_threshold) when it is > 0       S:376-377
--      n = min(n, budget)                                            S:378
--      n = min(n, max_model_len - 1 - computed)                      S:382-384
--      n == 0: skip the request (continue)                           S:409-425
--      allocate KV; while that fails, preempt the LAST request of    S:429-473
--        the running list (FCFS: running.pop(), S:467): its blocks
--        are freed, computed = 0, it goes to the HEAD of the waiting
--        queue (S:898-918, Q:94-96 appendleft); when the request
--        preempts itself it stops (S:471-473)
--      not allocated: the running loop ends (break)                  S:475-477
--      else schedule it, budget -= n                                 S:479-485
--   2. WAITING requests, only if nothing was preempted in this step  S:533
--      while the queue is not empty and budget > 0                   S:534
--      stop when the running list holds max_num_seqs                 S:535-536
--      head of the queue (FCFS: preempted requests first, Q:77-130)  S:538
--      prefix-cache hit when nothing is computed (at most all but    S:597-602, K:164-204
--        the last token, K:189): those tokens cost no budget
--      n = known tokens - hit                                        S:652
--      n = min(n, long_prefill_token_threshold) when it is > 0       S:653-655
--      chunked prefill off and n > budget: stop (break)              S:659-665
--      n = min(n, budget)                                            S:667
--      allocate KV, or stop (break)                                  S:713-731
--      it joins the END of the running list, budget -= n             S:763, S:780-781
--   No per-request minimum, no "prefills first" mode, no padding, no watermark:
--   allocate_slots refuses only when the new blocks exceed the free ones (K:336-338; free
--   counts evictable cached blocks, as the core's free_blocks does).
--
-- Defaults (C): max_num_batched_tokens 2048 (C:42, C:48), max_num_seqs 128 (C:43, C:55),
-- long_prefill_token_threshold 0 (C:72), enable_chunked_prefill True (C:76), policy "fcfs"
-- (C:114); EngineArgs picks its own budget per usage context and GPU (not read here), so
-- this policy defaults to the executor's --max-tokens/--max-seqs instead. vLLM refuses to
-- start with max_num_batched_tokens < max_model_len without chunked prefill (C:256-268)
-- and with max_num_batched_tokens < max_num_seqs (C:270-275): init() refuses the second;
-- the first it cannot see (policies are not told max_model_len), so a prompt that could
-- never fit a step without chunking is rejected with that reason (vLLM would not have
-- started). max_num_partial_prefills (C:62) only sets a default threshold; schedule()
-- never reads it.
--
-- Where twinserve differs from vLLM, and why (docs/policies.md has the table):
--   * The watermark. The core keeps --watermark (default 0.01) of the blocks free when
--     s:can_allocate is asked about a request that is not running; vLLM v1 keeps none
--     (K:336). This policy tests s:blocks_needed(r, n) <= s:free_blocks() itself, which is
--     exactly allocate_slots' test, and s:schedule does not apply the watermark, so it is
--     ignored here. The core still rejects AT ARRIVAL a request needing more than the
--     cache minus the watermark: run with --watermark 0 for vLLM's limit there too.
--   * max_model_len - 1 - computed (S:382-384, "necessary when using spec decoding") never
--     binds: the core caps every request's output at the context left (prompt + output <=
--     --max-model-len), and a step computes at most prompt + generated tokens, of which the
--     last output token is never computed, so computed + n <= max_model_len - 1 already.
--     Policies are not told max_model_len; the cap would be a no-op.
--   * n == 0 (S:409-425) cannot happen: a running request has >= 1 token to compute, the
--     loop runs only while budget > 0, and PP, encoder budgets and mamba alignment do not
--     exist here.
--   * Async scheduling (vLLM's default since 0.14; C:145 leaves it to VllmConfig, and
--     C:167-176 then picks AsyncScheduler): the scheduler plans step N+1 while N runs,
--     counting N's tokens as placeholders (A:18-35) and skipping a request whose
--     placeholders already reach its max_tokens (S:355-369). That lag is the executor's
--     to model (the simulator's serving model), not the policy's: the policy sees
--     committed state, as the synchronous Scheduler does, with no placeholders to count.
--   * The preemption victim. FCFS pops the running list's last request. Requests before
--     the current one are the only ones already scheduled in this step, so that victim is
--     never one of them and the core's rule (no preempting a request already in the plan)
--     never binds. The priority policy (S:442-465) picks the least urgent request, which
--     may already be scheduled (its tokens go back to the budget, S:451): the core cannot
--     take an entry out of a plan, so --scheduling-policy priority is NOT modelled here
--     (priority.lua is continuous batching by urgency).
--   * Prefix caching (--prefix-caching). vLLM counts cached blocks that are evictable
--     (nobody holds them) as blocks to allocate and refuses the admission when they do not
--     fit; the core instead takes fewer hits and computes the same n tokens from earlier.
--     Policies cannot tell idle hits from held ones, so this differs only when the cache
--     holds the hit blocks idle and memory is within those blocks of full.
--   * Not modelled (absent from twinserve or irrelevant to a text-only decoder): KV
--     connectors and P/D transfers, encoder inputs, structured-output FSM waits, LoRA
--     limits, streaming inputs, mamba alignment, pipeline parallelism, speculative tokens
--     (no drafts are scheduled), the pause state and SJF queues of later copies.

local limits = { tokens = 0, seqs = 0 } -- this replica's effective limits, set by init(s)

-- allocate_slots' check (K:336): n more tokens need no more blocks than are free now.
local function fits(s, r, n) return s:blocks_needed(r, n) <= s:free_blocks() end

return {
    params = {
        -- 0: the executor's s.max_tokens (--max-tokens) / s.max_seqs (--max-seqs)
        max_num_batched_tokens = { 0, int = true, min = 0 },
        max_num_seqs = { 0, int = true, min = 0 },
        long_prefill_token_threshold = { 0, int = true, min = 0 }, -- 0: no cap
        chunked_prefill = true,
    },

    init = function(s)
        local p = s.params
        local tokens = p.max_num_batched_tokens > 0 and p.max_num_batched_tokens or s.max_tokens
        local seqs = p.max_num_seqs > 0 and p.max_num_seqs or s.max_seqs
        if tokens > s.max_tokens then
            error("max_num_batched_tokens=" .. tokens .. " exceeds the executor's step budget of " ..
                s.max_tokens .. " tokens (raise --max-tokens)", 0)
        end
        if seqs > s.max_seqs then
            error("max_num_seqs=" .. seqs .. " exceeds the executor's limit of " .. s.max_seqs ..
                " running requests (raise --max-seqs)", 0)
        end
        if tokens < seqs then -- vLLM refuses this configuration (C:270-275)
            error("max_num_batched_tokens (" .. tokens .. ") must be >= max_num_seqs (" .. seqs ..
                "), as vLLM requires (set max_num_seqs or --max-seqs lower)", 0)
        end
        limits.tokens, limits.seqs = tokens, seqs
    end,

    schedule = function(s)
        local threshold = s.params.long_prefill_token_threshold
        local budget = limits.tokens

        -- 1. RUNNING requests, in running-list order. running(1..last) is vLLM's running
        -- list: preempting its last request shortens it.
        local last, preempted = s:num_running(), 0
        local i = 1
        while i <= last and budget > 0 do
            local r = s:running(i)
            local n = r:remaining()
            if threshold > 0 and n > threshold then n = threshold end
            if n > budget then n = budget end
            while not fits(s, r, n) do
                s:preempt(s:running(last)) -- the newest; never scheduled yet in this step
                last, preempted = last - 1, preempted + 1
                if last < i then break end -- it was r itself: nothing left to preempt
            end
            if last < i then break end -- r could not be scheduled: the running loop ends
            s:schedule(r, n)
            budget = budget - n
            i = i + 1
        end

        -- 2. WAITING requests, only if nothing was preempted in this step. The queue is
        -- vLLM's FCFS queue: preempted requests at its head, then arrivals in order.
        if preempted > 0 then return end
        local chunked = s.params.chunked_prefill
        local j = 1
        while j <= s:num_waiting() do
            if budget <= 0 or s:running_seqs() >= limits.seqs then break end
            local r = s:waiting(j)
            j = j + 1
            local n = r:remaining() - s:prefix_hit(r) -- cached tokens cost no budget
            if threshold > 0 and n > threshold then n = threshold end
            if not chunked and n > budget then
                if n <= limits.tokens then break end -- S:659-665: wait for a freer step
                -- Never fits a step: vLLM would not have started with this budget (C:256-268)
                s:reject(r, n .. " uncached tokens exceed max_num_batched_tokens=" ..
                    limits.tokens .. " with chunked_prefill=false (vLLM refuses to start " ..
                    "with max_num_batched_tokens < max_model_len unless prefills are chunked)")
                j = j - 1 -- it left the queue (as vLLM pops it): the next one is at j
            else
                if n > budget then n = budget end
                if not fits(s, r, n) then break end
                s:schedule(r, n)
                budget = budget - n
            end
        end
    end,
}

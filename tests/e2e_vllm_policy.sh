#!/usr/bin/env bash
# e2e_vllm_policy.sh: policies/vllm.lua (vLLM v1's Scheduler.schedule(), FCFS) through the
# command line, on small synthetic traces (tests/test_vllm_policy.c checks each step's plan
# against vLLM's loops entry by entry; this checks what a user sees):
#
#  1. explain: a running request's prompt chunk takes the budget before a waiting request
#     is admitted; a long prompt goes in chunks of the budget.
#  2. long_prefill_token_threshold caps every prefill chunk; chunked_prefill=false never
#     splits a prompt; max_num_batched_tokens bounds every step, max_num_seqs every batch.
#  3. Under KV pressure (a small --kv-blocks) requests are preempted, and no request is
#     admitted for the first time in a step that preempted (vLLM skips its waiting queue).
#  4. Bad --set values are refused before anything runs (exit status 2, nothing recorded);
#     limits beyond the executor's fail at init with a message saying what to change.
#  5. With the Azure conversation trace (SKIP when absent): vllm.lua and chunked_prefill.lua
#     at the same budget both replay it to a done run (the comparison in docs/policies.md).
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary. Prints
# "ok NAME" per passing check and "FAIL: NAME: reasons" per failing one.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_vllm_policy

VP=$POL/vllm.lua
AZURE=$DATA/traces/AzureLLMInferenceTrace_conv.csv

want_done() {
    db_ok "$1" || return
    want_sql "$1" "select status || '|' || ifnull(error, '') from runs" "done|"
    want_sql "$1" "select count(*) from requests where status not in ('finished', 'rejected')" 0
}

# ------------------------------------------------------------------ 1. explain

printf 'arrival_s,prompt_tokens,output_tokens\n0,10,20\n0,200,5\n0,10,5\n' >"$T/three.csv"
begin "explain: running requests get their tokens first; a long prompt is chunked by the budget"
run explain "$BIN" explain --trace "$T/three.csv" --policy "$VP" --serving none --start 0 --steps 6 --max-seqs 8 \
    --set max_num_batched_tokens=64
want_rc 0
# step 0: r0 whole, r1 the rest of 64; steps 1-2: r0's decode, then r1 takes the other 63
# tokens while r2 waits; step 3: r1's last 20, then r2 is admitted
want_out_re 'step 0 .* 64 tokens = 64 prefill \+ 0 decode  \(2 seqs\)'
want_out_re 'r1 +prefill +positions 0\.\.53 of 200 +54 tok'
want_out_re 'step 1 .* 64 tokens = 63 prefill \+ 1 decode  \(2 seqs\)'
want_out_re 'r1 +prefill +positions 54\.\.116 of 200 +63 tok'
want_out_re 'step 2 .* 64 tokens = 63 prefill \+ 1 decode  \(2 seqs\)'
want_out_re 'queue 1: r2'
want_out_re 'step 3 .* 31 tokens = 30 prefill \+ 1 decode  \(3 seqs\)'
want_out_re 'r2 +prefill +positions 0\.\.9 of 10 +10 tok'
# r2 is never in a step before step 3
awk '/^step 3 /{exit} /^    r2 /{found=1} END{exit found}' "$T/explain.out" || bad " r2 ran before step 3"
end

# ------------------------------------------------------------------ 2. caps

"$BIN" trace gen --n 300 --rate 50 --prompt lognormal:600:0.8:3000 --output lognormal:200:0.8:1000 \
    --seed 3 --out "$T/syn.csv" >/dev/null || { echo "FAIL: trace gen"; exit 1; }

# chunk sizes per prefill line of explain's output ("NNN tok")
chunks() { awk '$2 == "prefill" { for (i = 1; i < NF; i++) if ($(i + 1) == "tok") print $i }' "$1"; }

begin "long_prefill_token_threshold=256 caps every prefill chunk (budget 1024)"
run thr "$BIN" explain --trace "$T/syn.csv" --policy "$VP" --serving none --start 0 --limit 30 --steps 200 \
    --set long_prefill_token_threshold=256 --set max_num_batched_tokens=1024
want_rc 0
[ "$(chunks "$T/thr.out" | wc -l)" -gt 20 ] || bad " fewer than 20 prefill lines"
[ "$(chunks "$T/thr.out" | sort -n | tail -n 1)" = 256 ] || bad " largest chunk is $(chunks "$T/thr.out" | sort -n | tail -n 1), not 256"
end

begin "chunked_prefill=false never splits a prompt"
run whole "$BIN" explain --trace "$T/syn.csv" --policy "$VP" --serving none --start 0 --limit 30 --steps 200 \
    --set chunked_prefill=false --set max_num_batched_tokens=4096
want_rc 0
[ "$(grep -c ' prefill ' "$T/whole.out")" -gt 20 ] || bad " fewer than 20 prefill lines"
grep -q 'prompt tokens left' "$T/whole.out" && bad " a prompt went in chunks"
grep -q 'REJECTED' "$T/whole.out" && bad " a prompt that fits the budget was rejected"
# the same requests with chunking on (the default) do go in chunks
run split "$BIN" explain --trace "$T/syn.csv" --policy "$VP" --serving none --start 0 --limit 30 --steps 200 \
    --set max_num_batched_tokens=4096
grep -q 'prompt tokens left' "$T/split.out" || bad " with chunked prefill on, no prompt was chunked"
end

printf 'arrival_s,prompt_tokens,output_tokens\n0,10,3\n0,100,2\n0,5,2\n0,300,2\n' >"$T/nochunk.csv"
begin "chunked_prefill=false: a prompt over the budget left stops admission; one over the whole budget is rejected"
run stop "$BIN" explain --trace "$T/nochunk.csv" --policy "$VP" --serving none --start 0 --steps 8 --max-seqs 8 \
    --set chunked_prefill=false --set max_num_batched_tokens=100
want_rc 0
# r1's 100 tokens do not fit the 90 (then 99) that r0 leaves: r2 (5 tokens) waits behind it
want_out_re 'step 0 .* 10 tokens = 10 prefill \+ 0 decode  \(1 seq\)'
want_out_re 'step 1 .* 1 tokens = 0 prefill \+ 1 decode  \(1 seq\)'
want_out_re 'r1 +prefill +positions 0\.\.99 of 100 +100 tok'
want_out_re 'r3 REJECTED: rejected by policy: 300 uncached tokens exceed max_num_batched_tokens=100 with chunked_prefill=false'
awk '/^    r1 +prefill/{exit} /^    r2 /{found=1} END{exit found}' "$T/stop.out" || bad " r2 ran before r1"
end

begin "max_num_batched_tokens bounds every step, max_num_seqs every batch"
run caps "$BIN" sim -q --trace "$T/syn.csv" --policy "$VP" --db "$T/caps.db" \
    --set max_num_batched_tokens=1000 --set max_num_seqs=6
want_rc 0
want_done "$T/caps.db"
want_sql "$T/caps.db" "select max(prefill_tokens + decode_tokens) from steps" 1000
want_sql "$T/caps.db" "select max(num_seqs) from steps" 6
want_sql "$T/caps.db" "select params from runs" \
    '{"chunked_prefill":true,"long_prefill_token_threshold":0,"max_num_batched_tokens":1000,"max_num_seqs":6}'
end

# ------------------------------------------------------------------ 3. KV pressure

begin "KV pressure: preemptions, and no first admission in a step that preempted"
run kv "$BIN" sim -q --trace "$T/syn.csv" --policy "$VP" --db "$T/kv.db" --kv-blocks 400 \
    --max-tokens 2048 --max-seqs 64 --max-model-len 4096
want_rc 0
want_done "$T/kv.db"
want_sql "$T/kv.db" "select count(*) > 10 from steps where num_preempted > 0" 1
want_sql "$T/kv.db" "select sum(preemptions) = (select sum(num_preempted) from steps) from requests" 1
# every request's first scheduling is some step's start (the join is meaningful) ...
want_sql "$T/kv.db" "select count(distinct r.req_id) = (select count(*) from requests) from requests r
    join steps st on st.run_id = r.run_id and abs(st.start_s - r.first_scheduled_s) < 1e-9" 1
# ... and never a step that preempted
want_sql "$T/kv.db" "select count(*) from requests r join steps st on st.run_id = r.run_id
    and abs(st.start_s - r.first_scheduled_s) < 1e-9 where st.num_preempted > 0" 0
end

# ------------------------------------------------------------------ 4. params

for bad in max_num_batched_tokens=-1 max_num_seqs=1.5 long_prefill_token_threshold=-2 \
    chunked_prefill=maybe; do
    begin "--set $bad is refused before anything runs"
    run badset "$BIN" sim -q --trace "$T/syn.csv" --policy "$VP" --db "$T/bad.db" --set "$bad"
    want_rc 2
    want_err "$VP" "${bad%%=*}"
    [ -f "$T/bad.db" ] && bad " a database was created"
    end
done

begin "limits beyond the executor's fail at init, nothing recorded"
run beyond "$BIN" sim -q --trace "$T/syn.csv" --policy "$VP" --db "$T/beyond.db" \
    --max-tokens 2048 --set max_num_batched_tokens=4096
want_rc 2
want_err "max_num_batched_tokens=4096 exceeds the executor's step budget of 2048 tokens (raise --max-tokens)"
[ -f "$T/beyond.db" ] && bad " a database was created"
run under "$BIN" sim -q --trace "$T/syn.csv" --policy "$VP" --db "$T/beyond.db" \
    --max-tokens 64 --max-seqs 128
want_rc 2
want_err "max_num_batched_tokens (64) must be >= max_num_seqs (128)"
end

# ------------------------------------------------------------------ 5. the Azure trace

if [ ! -f "$AZURE" ]; then
    echo "SKIP: vllm.lua on the Azure trace: $AZURE not found (set TWIN_DATA)"
else
    # docs/policies.md's comparison, on the first 2,000 requests at 4x the rate
    begin "Azure conv: vllm.lua and chunked_prefill.lua (chunk=2048) both done"
    for p in vllm chunked_prefill; do
        set_chunk=()
        [ "$p" = chunked_prefill ] && set_chunk=(--set chunk=2048)
        run "az_$p" "$BIN" sim -q --trace "$AZURE" --policy "$POL/$p.lua" "${set_chunk[@]}" \
            --model llama-2-7b --hw h100 --max-tokens 2048 --max-seqs 128 --max-model-len 4096 \
            --clip-to-context --limit 2000 --rate-scale 4 --db "$T/az.db" --name "$p"
        want_rc 0
    done
    want_sql "$T/az.db" "select group_concat(status, ',') from (select status from runs order by id)" "done,done"
    want_sql "$T/az.db" "select count(*) from requests where status != 'finished'" 0
    want_sql "$T/az.db" "select max(prefill_tokens + decode_tokens) <= 2048 from steps" 1
    end
fi

e2e_finish e2e_vllm_policy

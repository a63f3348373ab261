#!/usr/bin/env bash
# e2e_policies.sh: end-to-end tests of what the docs promise about policies.
#
#  1. The README's example policy (the ```lua block of README.md, extracted as a user would
#     copy it) runs the README's own replay (Azure conv, llama-3-8b on h100) to a `done` run:
#     the whole trace, and a window under KV pressure (a small --gpu-util, a high
#     --rate-scale) with prompts longer than its budget, where it must chunk and preempt.
#  2. Params are checked at load: a shipped policy's declared params refuse a --set outside
#     their range, and so does a user policy's spec; the message names the policy file and
#     the param, the exit status is 2 (a usage error) and no run is recorded. The watchdog
#     says "policy call".
#  3. Speculative decoding is said consistently: an engine run records no simulator-only
#     params (alpha, draft) and its n-gram proposer; report and compare show the acceptance
#     rate and tokens per step.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary; the Azure
# trace is read from ${TWIN_DATA:-../shared/data}; checks that need it print SKIP when it is
# absent. Prints "ok NAME" per passing check and "FAIL: NAME: reasons" per failing one.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_policies

AZURE=$DATA/traces/AzureLLMInferenceTrace_conv.csv
sim() { run "$1" "$BIN" sim -q "${@:2}"; }

# want_done DB: the one run is done, every request finished or rejected, none aborted.
want_done() {
    db_ok "$1" || return
    want_sql "$1" "select status || '|' || ifnull(error, '') from runs" "done|"
    want_sql "$1" "select count(*) from requests where status not in ('finished', 'rejected')" 0
}

# ------------------------------------------------------------------ 1. README's policy

awk '/^```lua/ { f = 1; next } /^```/ { f = 0 } f' README.md >"$T/readme.lua"
begin "README has exactly one lua block, a policy with a schedule function"
[ "$(grep -c '^```lua' README.md)" = 1 ] || bad " README has $(grep -c '^```lua' README.md) lua blocks"
grep -q 'schedule = function(s)' "$T/readme.lua" || bad " the block has no schedule function"
end

if [ ! -f "$AZURE" ]; then
    echo "SKIP: README policy on the Azure trace: $AZURE not found (set TWIN_DATA)"
else
    # The tour's sim command (README.md) with the README's policy.
    readme_sim() { sim "$1" --trace "$AZURE" --policy "$T/readme.lua" --model llama-3-8b --hw h100 \
        --db "$T/$1.db" "${@:2}"; }

    begin "README policy, README command, whole trace: done, every request accounted for"
    readme_sim whole
    want_rc 0
    want_done "$T/whole.db"
    n=$(awk 'END { print NR - 1 }' "$AZURE") # the file ends without a newline
    want_sql "$T/whole.db" "select count(*) from requests" "$n"
    # Only what can never run is rejected (by the core, at arrival): a handful over the
    # context, not the long prompts the old example stalled on.
    want_sql "$T/whole.db" "select count(*) * 1000 < $n from requests where status = 'rejected'" 1
    want_sql "$T/whole.db" "select count(*) > 0 from requests where status = 'finished'
        and prompt_tokens > 4096" 1
    end

    # 0.23 of an h100 leaves ~700 KV blocks beside llama-3-8b's weights: 1000 requests at 8x
    # the rate overflow it, and 10 of them have prompts over the policy's 4096-token budget.
    begin "README policy under KV pressure with long prompts: done, preempts and chunks"
    readme_sim pressure --limit 1000 --gpu-util 0.23 --rate-scale 8
    want_rc 0
    want_done "$T/pressure.db"
    want_sql "$T/pressure.db" "select count(*) from requests" 1000
    want_sql "$T/pressure.db" "select count(*) > 0 from requests where preemptions > 0" 1
    want_sql "$T/pressure.db" "select count(*) > 0 from requests where status = 'finished'
        and prompt_tokens > 4096" 1
    want_sql "$T/pressure.db" "select count(*) > 0 from steps where num_preempted > 0" 1
    # prompts over the budget finished, yet no step went over it: they went in chunks
    want_sql "$T/pressure.db" "select max(prefill_tokens + decode_tokens) <= 4096 from steps" 1
    end

    begin "README policy, executor budget below the policy's (--max-tokens 2048): done"
    readme_sim small_exec --limit 500 --gpu-util 0.23 --rate-scale 4 --max-tokens 2048
    want_rc 0
    want_done "$T/small_exec.db"
    want_sql "$T/small_exec.db" "select count(*) from requests where status = 'finished'" 500
    want_sql "$T/small_exec.db" "select max(prefill_tokens + decode_tokens) <= 2048 from steps" 1
    end
fi

# ------------------------------------------------------------------ 2. params are checked

awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens";
             for (i = 0; i < 20; i++) printf "%.3f,%d,%d\n", i * 0.1, 50 + i, 20 }' >"$T/small.csv"
cat >"$T/spec.lua" <<'EOF'
return {
    params = { order = { "fcfs", oneof = { "fcfs", "lifo" } }, share = { 0.5, min = 0, max = 1 } },
    schedule = function(s) end,
}
EOF

# want_usage_error NAME: exit 2, and nothing recorded (no database, or one without runs).
want_usage_error() {
    want_rc 2
    if [ -f "$T/$1.db" ]; then want_sql "$T/$1.db" "select count(*) from runs" 0; fi
}

while IFS='|' read -r file set msg; do
    name=param_$(basename "$file" .lua)_${set%%=*}
    begin "--set $set on $(basename "$file"): refused at load, exit 2, no run"
    sim "$name" --trace "$T/small.csv" --policy "$file" --set "$set" --db "$T/$name.db"
    want_usage_error "$name"
    want_err "$file: --set $set: $msg"
    end
done <<EOF
$POL/chunked_prefill.lua|chunk=0|param chunk must be a positive integer, got 0
$POL/chunked_prefill.lua|chunk=64.5|param chunk must be a positive integer, got 64.5
$POL/continuous.lua|max_seqs=0|param max_seqs must be a positive integer, got 0
$POL/speculative.lua|k=-1|param k must be a non-negative integer, got -1
$POL/speculative.lua|alpha=1.5|param alpha must be a number in [0, 1], got 1.5
$POL/static.lua|batch=2.5|param batch must be a positive integer, got 2.5
$POL/fair.lua|w_in=-1|param w_in must be a non-negative number, got -1
$POL/priority.lua|preempt=maybe|param 'preempt' is a boolean (true/false), got 'maybe'
$POL/continuous.lua|chunk=512|unknown param 'chunk'; this policy's params: max_seqs, max_tokens
$T/spec.lua|order=random|param order must be one of fcfs, lifo, got random
$T/spec.lua|share=2|param share must be a number in [0, 1], got 2
EOF

# docs/policies.md's spec example is a fragment of a policy table: wrapped into one, it
# loads, and the core holds --set to what it declares.
awk '/^```lua/ { n++; f = 1; next } /^```/ { f = 0 } f { print > (dir "/doc" n ".lua") }' \
    dir="$T" docs/policies.md
spec_doc=$(grep -l '^params = {' "$T"/doc*.lua 2>/dev/null | head -n 1)
begin "docs/policies.md's param spec example loads and is enforced"
if [ -z "$spec_doc" ]; then
    bad " docs/policies.md has no lua block starting 'params = {'"
else
    { echo "return {"; sed 's/^}$/},/' "$spec_doc"; echo "schedule = function(s) end }"; } >"$T/docspec.lua"
    sim docspec_bad --trace "$T/small.csv" --policy "$T/docspec.lua" --set chunk=0 --db "$T/docspec.db"
    want_usage_error docspec
    want_err "param chunk must be a positive integer, got 0"
    sim docspec_order --trace "$T/small.csv" --policy "$T/docspec.lua" --set order=lifo --db "$T/docspec.db"
    want_usage_error docspec
    want_err "param order must be one of fcfs, sjf, got lifo"
fi
end

# The watchdog speaks of policy calls (the user writes policies, not hooks). A loop the JIT
# compiles is stopped by the watchdog (exit 3); should the interpreter's time limit catch it
# first (exit 1), the message is the time limit's.
cat >"$T/loop.lua" <<'EOF'
return { schedule = function(s) while true do end end }
EOF
begin "a policy stuck in compiled code: the watchdog names a policy call, not a hook call"
sim loop --trace "$T/small.csv" --policy "$T/loop.lua" --db "$T/loop.db" --policy-time-limit 0.2
want_rc 1 3
if [ "$rc" -eq 3 ]; then want_err "policy $T/loop.lua: a policy call ran past twice its time limit"
else want_err "time limit exceeded"; fi
grep -q 'hook call' "$T/loop.err" && bad " the message says 'hook call'"
end

begin "in-range --set values run: chunk=1 on chunked_prefill.lua, done"
sim chunk1 --trace "$T/small.csv" --policy "$POL/chunked_prefill.lua" --set chunk=1 --db "$T/chunk1.db"
want_rc 0
want_done "$T/chunk1.db"
want_sql "$T/chunk1.db" "select json_extract(params, '$.chunk') from runs" 1
end

# ------------------------------------------------------------------ 3. speculative decoding

# The simulator models a draft model (alpha, draft); the engine proposes n-gram drafts and
# records neither. report shows both kinds' acceptance and tokens per step, compare compares.
begin "speculative on the engine: params without alpha and draft, proposer ngram, spec line"
run spec_eng "$BIN" engine -q --trace "$T/small.csv" --policy "$POL/speculative.lua" --set k=3 \
    --model dummy:stories260k --db "$T/spec.db" --name eng
want_rc 0
want_sql "$T/spec.db" "select params from runs where name = 'eng'" \
    '{"k":3,"max_seqs":256,"max_tokens":8192}'
want_sql "$T/spec.db" "select json_extract(config, '$.proposer') from runs where name = 'eng'" ngram
run spec_eng_report "$BIN" report "$T/spec.db" --run eng
want_rc 0
want_out_re '^spec      acceptance [0-9.]+% \([0-9]+ of [0-9]+ drafts\), [0-9.]+ tokens per request-step'
end

begin "speculative in the simulator: alpha and draft recorded; report and compare show spec"
sim spec_a --trace "$T/small.csv" --policy "$POL/speculative.lua" --db "$T/spec.db" --name sa
want_rc 0
sim spec_b --trace "$T/small.csv" --policy "$POL/speculative.lua" --set alpha=0.3 \
    --db "$T/spec.db" --name sb
want_rc 0
want_sql "$T/spec.db" "select json_extract(params, '$.alpha') || '|' ||
    json_extract(params, '$.draft') from runs where name = 'sb'" "0.3|llama-3.2-1b"
run spec_report "$BIN" report "$T/spec.db" --run sb --json
want_rc 0
want_out '"speculative": {"proposed": '
run spec_cmp "$BIN" compare "$T/spec.db" --runs sa,sb
want_rc 0
want_out_re '^spec accept +[0-9.]+% +[0-9.]+%'
want_out_re '^tokens/step +[0-9.]+ +[0-9.]+'
end

begin "no drafts, no spec line (continuous.lua)"
sim nospec --trace "$T/small.csv" --policy "$POL/continuous.lua" --db "$T/nospec.db"
run nospec_report "$BIN" report "$T/nospec.db"
want_rc 0
grep -q '^spec ' "$T/nospec_report.out" && bad " a spec line for a run without drafts"
end

e2e_finish e2e_policies

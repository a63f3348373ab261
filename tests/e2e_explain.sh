#!/usr/bin/env bash
# e2e_explain.sh: end-to-end tests of `twinserve explain`, the step-by-step teaching view.
#
# Chunked prefill shows a step that mixes a prompt chunk with decodes; continuous batching
# shows a request arriving during a step and joining the running batch; a small KV cache
# shows preemptions and recomputes; --steps stops the run; no database is left behind;
# bad input gets a clear message and a non-zero exit.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_explain

"$BIN" trace gen --n 10 --rate 20 --prompt uniform:300:900 --output uniform:3:8 --seed 2 \
    --out "$T/tiny.csv" >/dev/null
"$BIN" trace gen --n 8 --rate 100 --prompt fixed:300 --output fixed:300 --seed 3 \
    --out "$T/long.csv" >/dev/null
mkdir -p "$T/cwd" "$T/tmp"
# explain runs in an empty folder with its own TMPDIR, to see that it leaves nothing behind;
# on the bare GPU (--serving none), whose steps the known answers below are: vLLM's async
# scheduler would put an arrival two steps later
exr() {
    local name=$1
    shift
    run "$name" env -C "$T/cwd" TMPDIR="$T/tmp" "$BIN" explain "$@" --serving none
}

begin "chunked prefill: a step mixes a prompt chunk with decodes"
exr chunked --trace "$T/tiny.csv" --policy "$POL/chunked_prefill.lua" --set chunk=256 --steps 12
want_rc 0
want_out "<- mixed: prefill and decodes in one batch" "stopped (--steps) after 12 steps"
# Inside one mixed step: a prefill entry that is a chunk (prompt tokens left) and a decode.
awk '/^step /{m = /mixed/; c = 0; d = 0}
     m && /prefill +positions/ && /prompt tokens left/ {c = 1}
     m && /decode +output token/ {d = 1}
     c && d {found = 1}
     END {exit !found}' "$T/chunked.out" || bad " no step with both a prefill chunk and a decode"
[ "$(grep -c '^step ' "$T/chunked.out")" -eq 12 ] || bad " expected 12 steps printed"
grep -qE '^step 3 .* 256 tokens = 255 prefill \+ 1 decode' "$T/chunked.out" ||
    bad " step 3 should be 255 prefill + 1 decode under chunk=256"
end

begin "continuous batching: a request arrives during a step and joins the next batch"
exr cont --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --steps 8
want_rc 0
want_out "r1 arrives: prompt 812 tokens, wants 3 output tokens (during the step)"
awk '/^step 1 /{s = 1; next} /^step /{s = 0}
     s && /r0 +decode/ {d = 1} s && /r1 +prefill +positions 0\.\.811 of 812/ {p = 1}
     END {exit !(d && p)}' "$T/cont.out" || bad " step 1 should decode r0 and prefill r1"
want_out "FINISHED: 3 tokens"
end

begin "a small KV cache: preemptions, then recomputes"
exr pre --trace "$T/long.csv" --policy "$POL/continuous.lua" --gpu-util 0.19 --steps 400
want_rc 0
want_out "PREEMPTED to make room for this step" "recompute positions 0.."
want_out_re "KV 1[0-9][0-9]/126 blocks in use"
end

begin "a whole small run: done, every request finished, no database left behind"
exr all --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --steps 100000
want_rc 0
want_out_re "^done after [0-9]+ steps: 10 finished, 0 rejected"
want_out "(up to 12 requests)"
[ "$(grep -c 'FINISHED' "$T/all.out")" -eq 10 ] || bad " expected 10 FINISHED lines"
[ -z "$(ls -A "$T/cwd")" ] || bad " explain left files in the working folder: $(ls "$T/cwd")"
[ -z "$(ls -A "$T/tmp")" ] || bad " explain left files in TMPDIR: $(ls "$T/tmp")"
end

begin "--limit 0 replays the whole trace, and the header says so"
exr nolimit --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --limit 0 --steps 1
want_rc 0
want_out "(all requests)"
grep -q "all 0 requests" "$T/nolimit.out" && bad " the header says 'all 0 requests'"
end

begin "--db keeps the records"
exr keep --trace "$T/tiny.csv" --policy "$POL/static.lua" --db "$T/keep.db" --steps 100000
want_rc 0
want_out "records: run 1 in $T/keep.db"
db_ok "$T/keep.db" && want_sql "$T/keep.db" "select count(*) from requests where status='finished'" 10
end

begin "bad input: missing options, bad numbers, a missing trace"
exr noargs --policy "$POL/continuous.lua"
want_rc 2
want_err "--trace and --policy are required"
exr badsteps --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --steps 0
want_rc 2
want_err "bad value '0' for --steps"
exr badset --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --tp x
want_rc 2
want_err "bad value 'x' for --tp"
exr notrace --trace "$T/nope.csv" --policy "$POL/continuous.lua"
want_rc 2
want_err "nope.csv"
exr badpol --trace "$T/tiny.csv" --policy "$T/nope.lua"
want_rc 2
want_err "nope.lua"
exr badkey --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --set nope=1 --db "$T/badkey.db"
want_rc 2
want_err "unknown param 'nope'"
[ -e "$T/badkey.db" ] && [ "$(sql "$T/badkey.db" "select count(*) from runs")" != 0 ] &&
    bad " a usage mistake recorded a run"
# a malformed row is a bad trace, not a usage mistake: status 1 (the window scan meets it)
{ echo "arrival_s,prompt_tokens,output_tokens"; echo "0,100,5"; echo "0.1,x,5"; } >"$T/bad.csv"
exr badrow --trace "$T/bad.csv" --policy "$POL/continuous.lua"
want_rc 1
want_err "bad.csv:3"
end

# A trace that starts sparse (one request every 5 s) and has a burst at 60 s.
{
    echo "arrival_s,prompt_tokens,output_tokens"
    for i in 0 1 2 3 4 5 6 7 8 9; do echo "$((i * 5)),200,20"; done
    echo "60.0,400,30"; echo "60.01,300,30"; echo "60.02,500,30"; echo "60.05,200,30"
    echo "90,200,20"
} >"$T/burst.csv"

begin "by default the busiest window: the burst, said on the header line"
exr win --trace "$T/burst.csv" --policy "$POL/continuous.lua" --limit 4 --steps 100000
want_rc 0
want_out "window: the busiest 4 requests of the trace's first 600 s (its requests 10..13,"
want_out "arriving within 0.050 s from t=60.000 s"
want_out "r0 arrives: prompt 400 tokens" "r3 arrives: prompt 200 tokens"
want_out_re "^step [0-9]+ .*\(4 seqs\)"
want_out_re "^done after [0-9]+ steps: 4 finished, 0 rejected"
end

begin "--start 0 replays the trace's first requests instead"
exr win0 --trace "$T/burst.csv" --policy "$POL/continuous.lua" --limit 4 --start 0 --steps 100000
want_rc 0
grep -q "window:" "$T/win0.out" && bad " a window line although --start was given"
want_out "r0 arrives: prompt 200 tokens, wants 20 output tokens"
grep -qE '\((2|3|4) seqs\)' "$T/win0.out" && bad " requests 5 s apart should never share a step"
end

begin "--skip-quiet: only eventful steps, and the left-out ones are counted"
exr quiet --trace "$T/long.csv" --policy "$POL/continuous.lua" --skip-quiet --steps 100000
want_rc 0
want_out "decode-only steps (the same batch; nothing else happened) ..."
total=$(sed -nE 's/^done after ([0-9]+) steps \(([0-9]+) shown\).*/\1/p' "$T/quiet.out")
shown=$(sed -nE 's/^done after ([0-9]+) steps \(([0-9]+) shown\).*/\2/p' "$T/quiet.out")
gaps=$(sed -nE 's/^  \.\.\. ([0-9]+) decode-only steps? .*/\1/p' "$T/quiet.out" |
       awk '{n += $1} END {print n + 0}')
[ -n "$total" ] && [ "$(grep -c '^step ' "$T/quiet.out")" = "$shown" ] ||
    bad " the closing line should count the steps shown"
[ -n "$total" ] && [ $((shown + ${gaps:-0})) -eq "$total" ] ||
    bad " shown ($shown) + left out (${gaps:-0}) != steps ($total)"
# A shown decode-only step with no event of its own is there because its batch changed,
# which only a shown step can do (a finish, an admission): so no gap comes right before it.
awk 'function check() { if (q && gap && !ev) bad = 1 }
     /^step / { check(); q = / = 0 prefill/; gap = prev ~ /decode-only/; ev = 0 }
     /arrives|FINISHED|REJECTED|PREEMPTED/ { ev = 1 }
     { prev = $0 }
     END { check(); exit bad }' "$T/quiet.out" ||
    bad " a decode-only step without events was shown after left-out steps"
"$BIN" explain --trace "$T/long.csv" --policy "$POL/continuous.lua" --steps 100000 \
    >"$T/loud.out" 2>&1
[ "$(grep -c FINISHED "$T/loud.out")" = "$(grep -c FINISHED "$T/quiet.out")" ] ||
    bad " --skip-quiet dropped a finish"
[ "$(grep -c arrives "$T/loud.out")" = "$(grep -c arrives "$T/quiet.out")" ] ||
    bad " --skip-quiet dropped an arrival"
end

begin "--events-only is --skip-quiet, and --steps counts shown steps"
exr ev --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --events-only --steps 3
want_rc 0
want_out_re "^stopped \(--steps\) after [0-9]+ steps \(3 shown\)"
[ "$(grep -c '^step ' "$T/ev.out")" -eq 3 ] || bad " expected 3 steps printed"
end

begin "a cluster: each step names its replica, each arrival the replica it was routed to"
exr clu --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --replicas 2 --steps 400 --limit 0
want_rc 0
want_out "each step names its replica"
# round robin: the 10 requests alternate, r0 to replica 0, r1 to replica 1, ...
[ "$(grep -cE 'r[02468] arrives: .*routed to replica 0' "$T/clu.out")" -eq 5 ] ||
    bad " the even requests were not all shown routed to replica 0"
[ "$(grep -cE 'r[13579] arrives: .*routed to replica 1' "$T/clu.out")" -eq 5 ] ||
    bad " the odd requests were not all shown routed to replica 1"
grep -qE '^step [0-9]+  replica 1  t=' "$T/clu.out" || bad " no step of replica 1"
grep -qE '^step [0-9]+  replica 0  t=' "$T/clu.out" || bad " no step of replica 0"
exr clucmp --trace "$T/tiny.csv" --policy "$POL/continuous.lua" --replicas 2 --compare "$POL/static.lua"
want_rc 2
want_err "explain a cluster (--replicas, --cluster) without it"
end

begin "--compare: static vs continuous side by side on the same requests, in 80 columns"
exr cmp --trace "$T/tiny.csv" --policy "$POL/static.lua" --compare "$POL/continuous.lua" \
    --steps 10
want_rc 0
want_out "A: static.lua" "| B: continuous.lua" "(--steps: 10 steps shown per run"
want_out_re "^all 10 requests, each run to its end: finished A 10, B 10"
awk '/^-+\+-+$/ {t = 1} t && length($0) > 80 {exit 1}' "$T/cmp.out" ||
    bad " a line of the side-by-side view or the closing lines is wider than 80 columns"
# both columns see the same arrivals
left=$(grep -oE '^ \+ r[0-9]+ arrives [0-9.]+s \(P[0-9]+, out [0-9]+\)' "$T/cmp.out" | sort -u)
right=$(grep -oE '\| +\+ r[0-9]+ arrives [0-9.]+s \(P[0-9]+, out [0-9]+\)' "$T/cmp.out" |
        sed -E 's/^\| +/ /' | sort -u)
[ -n "$left" ] && [ "$left" = "$right" ] || bad " the two columns show different arrivals"
# static batching waits for its batch; continuous batching starts at once: B's TTFT is lower
ratio=$(sed -nE 's/^  TTFT mean: .*\(B\/A ([0-9.]+)\).*/\1/p' "$T/cmp.out")
[ -n "$ratio" ] && awk -v r="$ratio" 'BEGIN {exit !(r < 1)}' || bad " TTFT B/A '$ratio' not < 1"
want_out_re "^  TPOT mean: A [0-9.]+ ms, B [0-9.]+ ms"
end

begin "--compare --set: KEY=V for both, a.KEY / b.KEY for one, a clear hint otherwise"
exr cmpset --trace "$T/tiny.csv" --policy "$POL/continuous.lua" \
    --compare "$POL/chunked_prefill.lua" --set b.chunk=256 --set max_seqs=64 --steps 6
want_rc 0
want_out "params: A max_seqs=64;  B chunk=256 max_seqs=64" "A: continuous.lua"
want_out_re "\| #[0-9]+ [0-9.]+s [0-9.]+ms 256p\+0d"
# continuous batching's 625-token prefill outlasts chunked prefill's first two steps
want_out_re "^  \(#0 still running\) +\| #1 [0-9.]+s [0-9.]+ms 256p\+0d"
exr cmpbad --trace "$T/tiny.csv" --policy "$POL/continuous.lua" \
    --compare "$POL/chunked_prefill.lua" --set chunk=256
want_rc 2
want_err "A: " "unknown param 'chunk'" "--set a.KEY=V or b.KEY=V sets one"
exr cmpdb --trace "$T/tiny.csv" --policy "$POL/static.lua" --compare "$POL/continuous.lua" \
    --db "$T/cmp.db" --name duo
want_rc 0
want_out "records: runs 1 (A) and 2 (B) in $T/cmp.db"
want_sql "$T/cmp.db" "select group_concat(name || ':' || status, ' ') from runs" "duo-a:done duo-b:done"
end

if [ -f "$DATA/traces/AzureLLMInferenceTrace_conv.csv" ]; then
    begin "Azure conversation trace: the default window batches requests"
    exr azure --trace "$(cd "$DATA" && pwd)/traces/AzureLLMInferenceTrace_conv.csv" \
        --policy "$POL/chunked_prefill.lua" --set chunk=256
    want_rc 0
    want_out "(its requests 1093..1104,"
    want_out_re "^step [0-9]+ .*\((4|5|6|7|8|9|1[0-9]) seqs\)   <- mixed"
    end
else
    echo "SKIP: Azure conversation trace not found under $DATA/traces"
fi

e2e_finish e2e_explain

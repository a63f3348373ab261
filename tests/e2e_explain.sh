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
# explain runs in an empty folder with its own TMPDIR, to see that it leaves nothing behind.
exr() { local name=$1; shift; run "$name" env -C "$T/cwd" TMPDIR="$T/tmp" "$BIN" explain "$@"; }

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
want_rc 1
want_err "nope.csv"
exr badpol --trace "$T/tiny.csv" --policy "$T/nope.lua"
want_rc 1
want_err "nope.lua"
end

e2e_finish e2e_explain

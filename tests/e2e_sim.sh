#!/usr/bin/env bash
# e2e_sim.sh: end-to-end tests of `twinserve sim`.
#
# Bad input must give a clear message (FILE:LINE for trace rows, POLICY:LINE for policy
# errors) and a non-zero exit (1 = the run failed, 2 = usage error; the policy watchdog may
# end the process with 3), never a crash or a hang, and the database must stay valid with
# the run marked 'failed' and the requests recorded before the failure still there. What
# cannot run at all (a missing file, a policy that does not load, an unknown preset, bad
# options, a trace with no request) is a usage error that records no run.
# Good runs: the four shipped policies on a synthetic trace, --set, real BurstGPT and
# Mooncake traces, and the same seed giving identical request rows.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary; real data
# is read from ${TWIN_DATA:-../shared/data}; checks that need it print SKIP when it is absent.
# Prints "ok NAME" per passing check and "FAIL: NAME: reasons" plus the command's output
# per failing one; exits non-zero if any check failed.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_sim

# want_failed DB [TEXT...]: the database is valid, holds one run, marked failed, with an
# error that contains every TEXT.
want_failed() {
    local db=$1 s err
    shift
    db_ok "$db" || return
    want_sql "$db" "select count(*) from runs" 1
    want_sql "$db" "select status from runs" failed
    err=$(sql "$db" "select error from runs")
    [ -n "$err" ] || bad " the failed run has an empty error"
    for s in "$@"; do
        case $err in *"$s"*) ;; *) bad " the run's error lacks '$s'" ;; esac
    done
}
# want_done DB NAME N: run NAME is done, with N requests, each finished or rejected.
want_done() {
    local db=$1 name=$2 n=$3 id
    [ -f "$db" ] || { bad " database $db was not created"; return; }
    id=$(sql "$db" "select id from runs where name='$name'")
    [ -n "$id" ] || { bad " no run named $name"; return; }
    want_sql "$db" "select status || '|' || ifnull(error, '') from runs where id=$id" "done|"
    want_sql "$db" "select count(*) from requests where run_id=$id" "$n"
    want_sql "$db" "select count(*) from requests where run_id=$id and
        status not in ('finished', 'rejected')" 0
    want_sql "$db" "select count(*) from requests where run_id=$id and status='finished' and
        (finish_s is null or first_token_s is null or generated_tokens != output_tokens)" 0
    want_sql "$db" "select count(*) > 0 from requests where run_id=$id and status='finished'" 1
    want_sql "$db" "select count(*) > 0 from steps where run_id=$id" 1
}
# want_partial DB N: requests 0..N-1 recorded (some finished, the rest with a final status,
# unfinished ones 'aborted' with a reason), none beyond.
want_partial() {
    local db=$1 n=$2
    [ -f "$db" ] || return
    want_sql "$db" "select count(*) || '|' || ifnull(min(req_id), -1) || '|' || ifnull(max(req_id), -1)
        from requests" "$n|0|$((n - 1))"
    want_sql "$db" "select count(*) > 0 from requests where status='finished'" 1
    want_sql "$db" "select count(*) > 0 from requests where status='aborted'" 1
    want_sql "$db" "select count(*) from requests where status='aborted' and
        (reason is null or reason = '')" 0
    want_sql "$db" "select count(*) from requests where status='finished' and finish_s is null" 0
}
# want_no_run DB: a usage error: exit 2 and no run recorded (the file may exist, empty).
want_no_run() {
    want_rc 2
    [ -f "$1" ] && want_sql "$1" "select count(*) from runs" 0
    want_err "nothing was run or recorded"
}
sim() { run "$1" "$BIN" sim -q "${@:2}"; }

# ------------------------------------------------------------------ inputs

# A plain trace: 200 requests, one every 0.2 s; enough in flight that a failure at row 50
# finds some requests finished and some still running.
awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens";
             for (i = 0; i < 200; i++) printf "%.6f,%d,%d\n", i * 0.2, 100 + (i * 37) % 400, 100 + (i * 53) % 200 }' \
    >"$T/plain.csv"
# The same requests in the Azure format (TIMESTAMP,ContextTokens,GeneratedTokens).
awk 'BEGIN { print "TIMESTAMP,ContextTokens,GeneratedTokens";
             for (i = 0; i < 200; i++) { t = i * 0.2;
                 printf "2023-11-16 18:%02d:%010.7f,%d,%d\n", 15 + int(t / 60), t - 60 * int(t / 60),
                        100 + (i * 37) % 400, 100 + (i * 53) % 200 } }' >"$T/azure.csv"
# And as Mooncake JSON lines (timestamp in ms).
awk 'BEGIN { for (i = 0; i < 60; i++)
                 printf "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d, \"hash_ids\": [%d]}\n",
                        i * 200, 100 + (i * 37) % 400, 100 + (i * 53) % 200, i }' >"$T/mooncake.jsonl"
# replace_line FILE LINE TEXT OUT
replace_line() { awk -v n="$2" -v t="$3" 'NR == n { print t; next } { print }' "$1" >"$4"; }
cp -r "$POL/lib" "$T/lib" # import("batching") looks next to the policy file
CONT=$POL/continuous.lua

# ------------------------------------------------------------------ 1. malformed trace rows
# Line 51 is data row 50: requests 0..48 arrive first.

row50=$(sed -n 51p "$T/plain.csv")
IFS=, read -r a50 p50 o50 <<<"$row50"
for c in "nonnumber:$a50,abc,$o50" "fields:$a50,$p50" "fields4:$a50,$p50,$o50,7" "negative:$a50,$p50,-5"; do
    kind=${c%%:*}
    replace_line "$T/plain.csv" 51 "${c#*:}" "$T/bad_$kind.csv"
    begin "plain trace, malformed row 50 ($kind): FILE:51, run failed, rows before kept"
    sim "plain_$kind" --trace "$T/bad_$kind.csv" --policy "$CONT" --db "$T/plain_$kind.db"
    want_rc 1
    want_err "$T/bad_$kind.csv:51"
    want_failed "$T/plain_$kind.db" "bad_$kind.csv:51"
    want_partial "$T/plain_$kind.db" 49
    end
done

IFS=, read -r a50 p50 o50 <<<"$(sed -n 51p "$T/azure.csv")"
for c in "nonnumber:$a50,xyz,$o50" "fields:$a50,$p50" "negative:$a50,$p50,-4" "timestamp:yesterday,$p50,$o50"; do
    kind=${c%%:*}
    replace_line "$T/azure.csv" 51 "${c#*:}" "$T/azbad_$kind.csv"
    begin "azure trace, malformed row 50 ($kind): FILE:51, run failed, rows before kept"
    sim "azure_$kind" --trace "$T/azbad_$kind.csv" --policy "$CONT" --db "$T/azure_$kind.db"
    want_rc 1
    want_err "$T/azbad_$kind.csv:51"
    want_failed "$T/azure_$kind.db" "azbad_$kind.csv:51"
    want_partial "$T/azure_$kind.db" 49
    end
done

replace_line "$T/mooncake.jsonl" 31 '{"timestamp": 6000, "input_length": "many", "output_length": 5}' "$T/mcbad.jsonl"
begin "mooncake trace, malformed line 31: FILE:31, run failed"
sim mc_bad --trace "$T/mcbad.jsonl" --policy "$CONT" --db "$T/mc_bad.db"
want_rc 1
want_err "$T/mcbad.jsonl:31"
want_failed "$T/mc_bad.db" "mcbad.jsonl:31"
want_partial "$T/mc_bad.db" 30
end

# ------------------------------------------------------------------ 2. truncated files

{ head -n 60 "$T/plain.csv"; printf '12.000000,24'; } >"$T/trunc.csv"
begin "plain trace cut mid-row on its last line: FILE:61, run failed"
sim trunc --trace "$T/trunc.csv" --policy "$CONT" --db "$T/trunc.db"
want_rc 1
want_err "$T/trunc.csv:61"
want_failed "$T/trunc.db" "trunc.csv:61"
want_partial "$T/trunc.db" 59
end

{ head -n 60 "$T/azure.csv"; printf '2023-11-16 18:15:1'; } >"$T/trunc_az.csv"
begin "azure trace cut mid-timestamp on its last line: FILE:61, run failed"
sim trunc_az --trace "$T/trunc_az.csv" --policy "$CONT" --db "$T/trunc_az.db"
want_rc 1
want_err "$T/trunc_az.csv:61"
want_failed "$T/trunc_az.db" "trunc_az.csv:61"
end

{ head -n 30 "$T/mooncake.jsonl"; sed -n 31p "$T/mooncake.jsonl" | head -c 40; } >"$T/trunc.jsonl"
begin "mooncake JSONL line cut in the middle: FILE:31, run failed"
sim trunc_mc --trace "$T/trunc.jsonl" --policy "$CONT" --db "$T/trunc_mc.db"
want_rc 1
want_err "$T/trunc.jsonl:31"
want_failed "$T/trunc_mc.db" "trunc.jsonl:31"
want_partial "$T/trunc_mc.db" 30
end

{ head -n 30 "$T/mooncake.jsonl"; sed -n 31p "$T/mooncake.jsonl" | head -c 40; echo; sed -n '32,40p' "$T/mooncake.jsonl"; } >"$T/cut.jsonl"
begin "mooncake JSONL with a line cut in the middle of the file: FILE:31"
sim cut_mc --trace "$T/cut.jsonl" --policy "$CONT" --db "$T/cut_mc.db"
want_rc 1
want_err "$T/cut.jsonl:31"
want_failed "$T/cut_mc.db" "cut.jsonl:31"
end

# ------------------------------------------------------------------ 3. empty / missing file

: >"$T/empty.csv"
begin "empty (0-byte) trace: message names the file, usage error, no run"
sim empty --trace "$T/empty.csv" --policy "$CONT" --db "$T/empty.db"
want_no_run "$T/empty.db"
want_err "$T/empty.csv"
want_err_re '[Ee]mpty'
end

begin "missing trace file: message names the file, usage error, no run"
sim missing --trace "$T/no_such_trace.csv" --policy "$CONT" --db "$T/missing.db"
want_no_run "$T/missing.db"
want_err "$T/no_such_trace.csv"
want_err_re '[Nn]o such file|not found|cannot open|does not exist'
end

# ------------------------------------------------------------------ 4-8. broken policies

# policy NAME: writes stdin to $T/NAME.lua
policy() { cat >"$T/$1.lua"; }

policy syntax <<'EOF'
return {
    schedule = function(s)
        local x = = 1
    end,
}
EOF
begin "policy syntax error: POLICY:3, usage error, no run"
sim syntax --trace "$T/plain.csv" --policy "$T/syntax.lua" --db "$T/syntax.db"
want_no_run "$T/syntax.db"
want_err "$T/syntax.lua:3:"
end

policy runtime <<'EOF'
local function helper(t)
    return t.field.sub
end
return {
    schedule = function(s)
        local v = helper({})
        return v
    end,
}
EOF
begin "policy runtime error in schedule(): POLICY:2 and a stack traceback, run failed"
sim runtime --trace "$T/plain.csv" --policy "$T/runtime.lua" --db "$T/runtime.db"
want_rc 1
want_err "$T/runtime.lua:2:" "stack traceback" "$T/runtime.lua:6:"
want_failed "$T/runtime.db" "$T/runtime.lua:2:" "stack traceback"
end

policy on_finish_err <<'EOF'
local batching = import("batching")
return {
    on_finish = function(s, r)
        local t = nil
        return t.x
    end,
    schedule = function(s)
        local budget = batching.decode_running(s, s.max_tokens, s.max_seqs)
        batching.admit(s, budget, s.max_seqs, false, s.max_tokens)
    end,
}
EOF
begin "policy runtime error in on_finish(): POLICY:5 and a traceback, finished rows kept"
sim on_finish_err --trace "$T/plain.csv" --policy "$T/on_finish_err.lua" --db "$T/on_finish_err.db"
want_rc 1
want_err "$T/on_finish_err.lua:5:" "stack traceback"
want_failed "$T/on_finish_err.db" "$T/on_finish_err.lua:5:"
want_sql "$T/on_finish_err.db" "select count(*) > 0 from requests" 1
end

policy loop <<'EOF'
return {
    schedule = function(s)
        while true do end
    end,
}
EOF
begin "endless loop in schedule() (JIT-compiled): exit 1 or 3 within seconds, run failed"
t0=$SECONDS
sim loop --trace "$T/plain.csv" --policy "$T/loop.lua" --db "$T/loop.db" --policy-time-limit 0.3
want_rc 1 3
want_err "$T/loop.lua"
want_err_re 'time limit|ran past'
[ $((SECONDS - t0)) -le 10 ] || bad " took $((SECONDS - t0)) s with a 0.3 s limit"
want_failed "$T/loop.db"
grep -qE 'time limit|ran past' <<<"$(sql "$T/loop.db" "select error from runs")" ||
    bad " the run's error mentions neither 'time limit' nor 'ran past'"
end

policy loop_calls <<'EOF'
return {
    schedule = function(s)
        local n = 0
        while true do n = n + s:num_waiting() + #tostring(n) end
    end,
}
EOF
begin "endless loop calling s:num_waiting(): exit 1 or 3, time limit message, run failed"
sim loop_calls --trace "$T/plain.csv" --policy "$T/loop_calls.lua" --db "$T/loop_calls.db" --policy-time-limit 0.3
want_rc 1 3
want_err_re 'time limit|ran past'
want_failed "$T/loop_calls.db"
end

policy loop_late <<'EOF'
local batching = import("batching")
return {
    schedule = function(s)
        if s.now > 5 then while true do end end
        local budget = batching.decode_running(s, s.max_tokens, s.max_seqs)
        batching.admit(s, budget, s.max_seqs, false, s.max_tokens)
    end,
}
EOF
begin "endless loop after 5 s of simulated time: run failed, finished requests kept"
sim loop_late --trace "$T/plain.csv" --policy "$T/loop_late.lua" --db "$T/loop_late.db" --policy-time-limit 0.3
want_rc 1 3
want_err_re 'time limit|ran past'
want_failed "$T/loop_late.db"
want_sql "$T/loop_late.db" "select count(*) > 0 from requests where status='finished' and finish_s <= 5.0" 1
# every request that arrived has exactly one row: the in-flight ones 'aborted' by the watchdog
want_sql "$T/loop_late.db" "select count(*) = count(distinct req_id) and count(*) = max(req_id) + 1 and sum(status = 'aborted') > 0 from requests" 1
end

policy loop_top <<'EOF'
while true do end
return { schedule = function(s) end }
EOF
begin "endless loop at a policy's top level: exit 1 or 3, no hang, run recorded as failed"
sim loop_top --trace "$T/plain.csv" --policy "$T/loop_top.lua" --db "$T/loop_top.db" --policy-time-limit 0.3
want_rc 1 3
want_err "$T/loop_top.lua"
want_err_re 'time limit|ran past'
want_failed "$T/loop_top.db"
end

policy loop_init <<'EOF'
return {
    init = function(s) while true do end end,
    schedule = function(s) end,
}
EOF
begin "endless loop in a policy's init(): exit 1 or 3, no hang, run recorded as failed"
sim loop_init --trace "$T/plain.csv" --policy "$T/loop_init.lua" --db "$T/loop_init.db" --policy-time-limit 0.3
want_rc 1 3
want_err "$T/loop_init.lua"
want_err_re 'time limit|ran past'
want_failed "$T/loop_init.db"
end

for lib in io os ffi require load debug; do
    printf 'local x = %s\nreturn { schedule = function(s) end }\n' "$lib" >"$T/sandbox_top_$lib.lua"
    printf 'return {\n    schedule = function(s)\n        local x = %s\n    end,\n}\n' "$lib" >"$T/sandbox_in_$lib.lua"
    for where in top in; do
        p=$T/sandbox_${where}_$lib.lua
        line=1
        [ $where = in ] && line=3
        begin "policy touching '$lib' ($([ $where = top ] && echo 'top level' || echo 'in schedule()')): sandbox message, POLICY:$line"
        sim "sandbox_${where}_$lib" --trace "$T/plain.csv" --policy "$p" --db "$T/sandbox_${where}_$lib.db"
        want_err "'$lib' is not available to policies" "$p:$line:"
        if [ $where = top ]; then # the policy does not load: nothing runs
            want_no_run "$T/sandbox_${where}_$lib.db"
        else
            want_rc 1
            want_failed "$T/sandbox_${where}_$lib.db" "'$lib' is not available to policies"
        fi
        end
    done
done

policy io_call <<'EOF'
return {
    schedule = function(s)
        io.open("/tmp/twinserve-e2e-should-not-exist", "w")
    end,
}
EOF
begin "policy calling io.open: refused, no file written"
sim io_call --trace "$T/plain.csv" --policy "$T/io_call.lua" --db "$T/io_call.db"
want_rc 1
want_err "'io' is not available to policies" "$T/io_call.lua:3:"
[ -e /tmp/twinserve-e2e-should-not-exist ] && bad " the policy created a file"
want_failed "$T/io_call.db"
end

printf 'return { params = { a = 1 } }\n' >"$T/noschedule.lua"
printf 'return 42\n' >"$T/notable.lua"
printf 'return { schedule = "soon" }\n' >"$T/schedstring.lua"
for p in noschedule notable schedstring; do
    begin "policy without a schedule function ($p): message names the file, no run"
    sim "$p" --trace "$T/plain.csv" --policy "$T/$p.lua" --db "$T/$p.db"
    want_no_run "$T/$p.db"
    want_err "$T/$p.lua" "schedule"
    end
done

# ------------------------------------------------------------------ 9. illegal plans

policy too_many <<'EOF'
return {
    schedule = function(s)
        if s:num_waiting() > 0 then
            local r = s:waiting(1)
            s:schedule(r, r:remaining() + 5)
        end
    end,
}
EOF
policy finished_id <<'EOF'
local batching = import("batching")
local done = false
return {
    on_finish = function(s, r) if r.id == 0 then done = true end end,
    schedule = function(s)
        if done then
            s:schedule(0, 1)
        end
        local budget = batching.decode_running(s, s.max_tokens, s.max_seqs)
        batching.admit(s, budget, s.max_seqs, false, s.max_tokens)
    end,
}
EOF
policy over_budget <<'EOF'
return {
    schedule = function(s)
        for i = 1, s:num_waiting() do
            local r = s:waiting(i)
            s:schedule(r)
        end
    end,
}
EOF
policy negative <<'EOF'
return {
    schedule = function(s)
        if s:num_waiting() > 0 then
            s:schedule(s:waiting(1), -3)
        end
    end,
}
EOF
policy unknown_id <<'EOF'
return {
    schedule = function(s)
        s:schedule(987654, 1)
    end,
}
EOF
for c in "too_many:5:" "finished_id:7:" "over_budget:5:--max-tokens 16" "negative:4:" "unknown_id:3:"; do
    IFS=: read -r p line extra <<<"$c"
    begin "illegal plan ($p): 'illegal plan' and POLICY:$line, run failed"
    # shellcheck disable=SC2086 # $extra is a list of options
    sim "$p" --trace "$T/plain.csv" --policy "$T/$p.lua" --db "$T/$p.db" $extra
    want_rc 1
    want_err "illegal plan" "$T/$p.lua:$line:"
    want_failed "$T/$p.db" "illegal plan" "$T/$p.lua:$line:"
    end
done
begin "illegal plan on a finished request: requests finished before are recorded"
want_sql "$T/finished_id.db" "select status from requests where req_id = 0" finished
want_sql "$T/finished_id.db" "select count(*) > 0 from requests where status = 'aborted'" 1
end

# ------------------------------------------------------------------ 10. bad database paths

for db in /nonexistent/dir/x.db /etc/passwd/x.db "$T"; do
    begin "unusable database path $db: exit 1, message names it"
    sim "db_$(basename "$db")" --trace "$T/plain.csv" --policy "$CONT" --db "$db"
    want_rc 1
    want_err "$db"
    end
done

cp "$T/plain.csv" "$T/not_a_db.db"
begin "database path that is a text file: exit 1, message, file untouched"
sim db_text --trace "$T/plain.csv" --policy "$CONT" --db "$T/not_a_db.db"
want_rc 1
want_err "$T/not_a_db.db"
cmp -s "$T/plain.csv" "$T/not_a_db.db" || bad " the text file was modified"
end

if [ "$(id -u)" != 0 ]; then
    mkdir "$T/ro" && chmod 555 "$T/ro"
    begin "database in a read-only directory: exit 1, message"
    sim db_ro --trace "$T/plain.csv" --policy "$CONT" --db "$T/ro/x.db"
    want_rc 1
    want_err "$T/ro/x.db"
    end
fi

# ------------------------------------------------------------------ 11. bad options

# want_bad_option: a usage error, checked before the run would begin: exit 2, no run.
want_bad_option() { want_no_run "$1"; }
begin "unknown --model: names the model, exit 2, no run"
sim bad_model --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_model.db" --model no-such-model
want_bad_option "$T/bad_model.db"
want_err "no-such-model"
end

begin "unknown --hw: names the hardware, exit 2, no run"
sim bad_hw --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_hw.db" --hw no-such-gpu
want_bad_option "$T/bad_hw.db"
want_err "no-such-gpu"
end

begin "unknown --set key: names the key and lists the params"
sim bad_set --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_set.db" --set no_such_param=3
want_bad_option "$T/bad_set.db"
want_err "no_such_param" "max_seqs"
end

begin "--set with a value of the wrong type: names the param and the value"
sim bad_set_type --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_set_type.db" --set max_seqs=lots
want_bad_option "$T/bad_set_type.db"
want_err "max_seqs" "lots"
end

begin "--set without '=': message"
sim bad_set_eq --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_set_eq.db" --set max_seqs
want_bad_option "$T/bad_set_eq.db"
want_err "max_seqs"
end

begin "--rate-scale abc: usage error, exit 2, no run recorded"
sim bad_rate --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_rate.db" --rate-scale abc
want_rc 2
want_err "abc" "rate-scale"
[ -f "$T/bad_rate.db" ] && bad " a database was created for a usage error"
end

begin "--limit -5: usage error, exit 2"
sim bad_limit --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_limit.db" --limit -5
want_rc 2
want_err "limit"
end

begin "missing --trace: usage error, exit 2"
sim no_trace --policy "$CONT" --db "$T/no_trace.db"
want_rc 2
want_err "--trace"
[ -f "$T/no_trace.db" ] && bad " a database was created for a usage error"
end

begin "missing --policy: usage error, exit 2"
sim no_policy --trace "$T/plain.csv" --db "$T/no_policy.db"
want_rc 2
want_err "--policy"
end

begin "unknown option: usage error, exit 2"
sim bad_opt --trace "$T/plain.csv" --policy "$CONT" --db "$T/bad_opt.db" --frobnicate
want_rc 2
want_err "frobnicate"
end

begin "missing policy file: exit 2, names the file, no run"
sim no_policy_file --trace "$T/plain.csv" --policy "$T/no_such_policy.lua" --db "$T/no_policy_file.db"
want_no_run "$T/no_policy_file.db"
want_err "$T/no_such_policy.lua"
end

# ------------------------------------------------------------------ 12. duplicate --name

begin "duplicate --name: second run fails with a message, first run intact"
sim dup1 --trace "$T/plain.csv" --policy "$CONT" --db "$T/dup.db" --name twin-dup
[ "$rc" -eq 0 ] || bad " the first run exited $rc"
sim dup2 --trace "$T/plain.csv" --policy "$POL/static.lua" --db "$T/dup.db" --name twin-dup
want_rc 1
want_err "twin-dup"
want_err_re 'exist|already|unique|taken'
db_ok "$T/dup.db"
want_sql "$T/dup.db" "select count(*) from runs" 1
want_sql "$T/dup.db" "select policy from runs" "$CONT"
want_done "$T/dup.db" twin-dup 200
end

# ------------------------------------------------------------------ 13. stalls

printf 'return {\n    schedule = function(s) end,\n}\n' >"$T/stall.lua"
begin "policy that never schedules nor wakes: run ends with 'stalled', requests aborted"
sim stall --trace "$T/plain.csv" --policy "$T/stall.lua" --db "$T/stall.db"
want_rc 1
want_err "stalled" "$T/stall.lua"
want_failed "$T/stall.db" "stalled"
want_sql "$T/stall.db" "select count(*) from requests" 200
want_sql "$T/stall.db" "select count(*) from requests where status = 'finished'" 0
want_sql "$T/stall.db" "select count(*) > 0 from requests where status = 'aborted'" 1
end

printf 'return {\n    schedule = function(s) s:wake_at(s.now + 1) end,\n}\n' >"$T/wake_flood.lua"
begin "policy that only ever asks to be woken later: the run ends (no hang), failed"
sim wake_flood --trace "$T/plain.csv" --policy "$T/wake_flood.lua" --db "$T/wake_flood.db"
want_rc 1
want_err "$T/wake_flood.lua"
want_failed "$T/wake_flood.db"
end

# ------------------------------------------------------------------ good runs

run gen "$BIN" trace gen --n 200 --rate 5 --seed 1 --out "$T/syn.csv"
begin "trace gen --n 200 --rate 5 --seed 1 for the good runs"
want_rc 0
[ "$(wc -l <"$T/syn.csv")" -eq 201 ] || bad " $T/syn.csv has $(wc -l <"$T/syn.csv") lines, expected 201"
end

for p in static continuous chunked_prefill speculative; do
    begin "policies/$p.lua on 200 synthetic requests: exit 0, done, 200 final rows"
    sim "good_$p" --trace "$T/syn.csv" --policy "$POL/$p.lua" --db "$T/good.db" --name "$p" --seed 1
    want_rc 0
    [ -s "$T/good_$p.out" ] && bad " -q printed to stdout"
    db_ok "$T/good.db"
    want_done "$T/good.db" "$p" 200
    end
done

begin "runs with different policies in one database keep their rows apart"
want_sql "$T/good.db" "select count(*) || '|' || count(distinct policy) from runs" "4|4"
want_sql "$T/good.db" "select count(*) from (select run_id from requests group by run_id having count(*) = 200)" 4
end

begin "--set chunk=256 on chunked_prefill: recorded in params"
sim set256 --trace "$T/syn.csv" --policy "$POL/chunked_prefill.lua" --db "$T/good.db" --name cp256 --set chunk=256
want_rc 0
want_sql "$T/good.db" "select json_extract(params, '\$.chunk') from runs where name='cp256'" 256
want_sql "$T/good.db" "select json_extract(params, '\$.chunk') from runs where name='chunked_prefill'" 512
want_done "$T/good.db" cp256 200
want_sql "$T/good.db" "select max(prefill_tokens + decode_tokens) <= 256 from steps
    where run_id = (select id from runs where name='cp256')" 1
end

begin "speculative: drafts proposed and some accepted"
want_sql "$T/good.db" "select sum(spec_proposed) > 0 and sum(spec_accepted) > 0 and
    sum(spec_accepted) <= sum(spec_proposed) from requests
    where run_id = (select id from runs where name='speculative')" 1
end

begin "the same seed gives identical request and step rows (speculative, seed 7, twice)"
sim det_a --trace "$T/syn.csv" --policy "$POL/speculative.lua" --db "$T/det.db" --name a --seed 7
want_rc 0
sim det_b --trace "$T/syn.csv" --policy "$POL/speculative.lua" --db "$T/det.db" --name b --seed 7
want_rc 0
sim det_c --trace "$T/syn.csv" --policy "$POL/speculative.lua" --db "$T/det.db" --name c --seed 8
want_rc 0
reqq="select req_id, arrival_s, prompt_tokens, output_tokens, generated_tokens, first_scheduled_s,
    first_token_s, finish_s, ttft_s, tpot_s, e2e_s, queue_s, preemptions, spec_proposed,
    spec_accepted, status, ifnull(reason, '') from requests where run_id = (select id from runs where name = '%s')"
stepq="select step, start_s, dur_s, prefill_tokens, decode_tokens, pad_tokens, num_seqs, kv_used,
    kv_total, num_waiting, num_preempted from steps where run_id = (select id from runs where name = '%s')"
# shellcheck disable=SC2059 # the queries are the format strings
{
    want_sql "$T/det.db" "select count(*) from ($(printf "$reqq" a) except $(printf "$reqq" b))" 0
    want_sql "$T/det.db" "select count(*) from ($(printf "$reqq" b) except $(printf "$reqq" a))" 0
    want_sql "$T/det.db" "select count(*) from ($(printf "$stepq" a) except $(printf "$stepq" b))" 0
    want_sql "$T/det.db" "select (select count(*) from steps where run_id = 1) = (select count(*) from steps where run_id = 2)" 1
    want_sql "$T/det.db" "select count(*) > 0 from ($(printf "$reqq" a) except $(printf "$reqq" c))" 1
}
want_sql "$T/det.db" "select count(*) from requests where run_id = 1" 200
end

trace_run() { # NAME FILE: run continuous on FILE --limit 300
    local name=$1 f=$2
    if [ ! -f "$f" ]; then
        echo "SKIP: $name: $f not found (set TWIN_DATA)"
        return
    fi
    begin "$name (--limit 300) under continuous: exit 0, done, 300 requests"
    sim "$name" --trace "$f" --policy "$CONT" --db "$T/real.db" --name "$name" --limit 300
    want_rc 0
    db_ok "$T/real.db"
    want_done "$T/real.db" "$name" 300
    end
}
trace_run burstgpt1 "$DATA/traces/BurstGPT_1_first400.csv"
trace_run burstgpt3 "$DATA/traces/BurstGPT_3_first400.csv"
trace_run mooncake_conv "$DATA/traces/mooncake_conversation_trace.jsonl"
trace_run mooncake_syn "$DATA/traces/mooncake_synthetic_trace.jsonl"
trace_run azure_conv "$DATA/traces/AzureLLMInferenceTrace_conv.csv"

# ------------------------------------------------------------------ rejections move the run on
# A plan that only rejects changes the state: the simulator asks the policy again at the same
# instant instead of waiting for an arrival that will never come.

printf 'arrival_s,prompt_tokens,output_tokens\n0,10,5\n0,10,5\n0,10,5\n' >"$T/three.csv"
policy reject_all <<'EOF'
return { schedule = function(s)
    if s:num_waiting() > 0 then s:reject(s:waiting(1), "no room for you") end
end }
EOF
begin "a policy that rejects one request per call: every request rejected with its reason, done"
sim reject_all --trace "$T/three.csv" --policy "$T/reject_all.lua" --db "$T/reject.db"
want_rc 0
want_sql "$T/reject.db" "select status from runs" done
want_sql "$T/reject.db" "select count(*) from requests where status='rejected' and reason='rejected by policy: no room for you'" 3
end

printf 'arrival_s,prompt_tokens,output_tokens\n0,30,5\n0,10,5\n' >"$T/two.csv"
begin "static batching under --max-tokens 16: the too-long prompt is rejected with a reason, the other finishes"
sim static_small --trace "$T/two.csv" --policy "$POL/static.lua" --db "$T/static_small.db" --max-tokens 16
want_rc 0
want_sql "$T/static_small.db" "select status from requests where req_id=0" rejected
want_sql "$T/static_small.db" "select reason like '%30-token prefill%16 tokens per step%' from requests where req_id=0" 1
want_sql "$T/static_small.db" "select status from requests where req_id=1" finished
end

begin "static batching under --max-seqs 1: batches of one, both finish"
sim static_seq1 --trace "$T/two.csv" --policy "$POL/static.lua" --db "$T/static_seq1.db" --max-seqs 1
want_rc 0
want_sql "$T/static_seq1.db" "select count(*) from requests where status='finished'" 2
want_sql "$T/static_seq1.db" "select max(num_seqs) from steps" 1
end

# ------------------------------------------------------------------ prefix caching

printf '{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}\n{"timestamp": 10000, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}\n' >"$T/pc.jsonl"
begin "--prefix-caching on a Mooncake-style trace: the repeated prompt is served from the cache"
sim prefix --trace "$T/pc.jsonl" --policy "$CONT" --db "$T/prefix.db" --prefix-caching
want_rc 0
want_sql "$T/prefix.db" "select group_concat(cached_tokens) from requests order by req_id" "0,1088"
want_sql "$T/prefix.db" "select json_extract(config, '\$.prefix_caching') from runs" 1
end

begin "--prefix-caching on a trace without prefixes: runs, and says what it can still do"
sim prefix_nohash --trace "$T/three.csv" --policy "$CONT" --db "$T/prefix_nohash.db" --prefix-caching
want_rc 0
want_err "names no shared prefixes"
want_sql "$T/prefix_nohash.db" "select sum(cached_tokens) from requests" 0
end

begin "--prefix-caching with a block size that does not divide 512: blocks inside the hashed prefix hit"
sim prefix_bs --trace "$T/pc.jsonl" --policy "$CONT" --db "$T/prefix_bs.db" --prefix-caching --block-size 48
want_rc 0
want_sql "$T/prefix_bs.db" "select group_concat(cached_tokens) from requests order by req_id" "0,1056"
end

printf 'arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n0,1100,5,sys,1000\n10,1200,5,sys,1000\n20,1100,5,,\n' >"$T/pg.csv"
begin "--prefix-caching on a plain trace's shared-prefix group; the report says caching was on"
sim prefix_group --trace "$T/pg.csv" --policy "$CONT" --db "$T/prefix_group.db" --prefix-caching
want_rc 0
want_sql "$T/prefix_group.db" "select group_concat(cached_tokens) from requests order by req_id" "0,992,0"
run pg_report "$BIN" report "$T/prefix_group.db"
want_out "prefix    caching on: 992 of 3400 prompt tokens"
end

begin "trace gen --shared-prefix writes the group columns that sim reuses"
run pgen "$BIN" trace gen --n 50 --rate 1 --shared-prefix 2:1024 --prompt fixed:64 --output fixed:4 --out "$T/gen_pg.csv"
want_rc 0
sim prefix_gen --trace "$T/gen_pg.csv" --policy "$CONT" --db "$T/prefix_gen.db" --prefix-caching
want_rc 0
want_sql "$T/prefix_gen.db" "select count(*) from requests where cached_tokens = 1024" 48
run pgen_report "$BIN" report "$T/prefix_gen.db"
want_out "prefix    caching on"
sim prefix_gen_off --trace "$T/gen_pg.csv" --policy "$CONT" --db "$T/prefix_gen_off.db"
want_rc 0
run pgen_off_report "$BIN" report "$T/prefix_gen_off.db"
want_out "prefix    caching off"
end

# ------------------------------------------------------------------ client-side metrics

begin "--client-token -1: usage error naming the option, exit 2, no run recorded"
sim client_neg --trace "$T/three.csv" --policy "$CONT" --db "$T/client_neg.db" --client-token -1
want_rc 2
want_err "bad value '-1' for --client-token"
[ -f "$T/client_neg.db" ] && want_sql "$T/client_neg.db" "select count(*) from runs" 0
end

begin "client-side terms: the config and report say which side, TTFT grows by the terms"
# the client terms given, not a serving profile's: the bare GPU (--serving none)
sim client_srv --trace "$T/three.csv" --policy "$CONT" --db "$T/client.db" --name srv \
    --serving none
want_rc 0
sim client_cli --trace "$T/three.csv" --policy "$CONT" --db "$T/client.db" --name cli \
    --serving none --client-request 0.01 --client-prompt-token 1e-3 --client-token 2e-3
want_rc 0
want_sql "$T/client.db" "select group_concat(m) from (select json_extract(config,
    '\$.metrics') as m from runs order by id)" "server,client"
want_sql "$T/client.db" "select json_extract(config, '\$.client_prompt_token_s') from runs
    where name='cli'" 0.001
# the front end hands the three on at 20, 40 and 60 ms (10 ms + 10 x 1 ms each, in turn);
# each first token reaches the client 2 ms after its step
want_sql "$T/client.db" "select round(first_scheduled_s, 9) from requests where run_id=2 and
    req_id=0" 0.02
want_sql "$T/client.db" "select min(first_scheduled_s >= 0.02 * (req_id + 1) - 1e-9) from
    requests where run_id=2" 1
want_sql "$T/client.db" "select min(round(c.ttft_s - c.first_scheduled_s, 9) > 0.002) from
    requests c where c.run_id=2" 1
run client_report "$BIN" report "$T/client.db" --run cli
want_rc 0
want_out "metrics   client-side: front end 10 ms per request + 1 ms per prompt token before"
run client_report_srv "$BIN" report "$T/client.db" --run srv
want_out "metrics   server-side"
end

begin output_lengths_are_limits # issue #12: policies see max_tokens, not the true length
printf 'arrival_s,prompt_tokens,output_tokens,max_output_tokens,predicted_output_tokens\n0,100,7,,9\n0.5,50,30,20,\n' \
    >"$T/len.csv"
cat >"$T/len.lua" <<'LUA'
local batching = import("batching")
return { schedule = function(s)
    for i = 1, s:num_waiting() do
        local r = s:waiting(i)
        print("saw", r.id, r.output_tokens, tostring(r.predicted_output_tokens))
    end
    local b = batching.decode_running(s, 8192, 256)
    batching.admit(s, b, 256, false, 8192)
end }
LUA
mkdir -p "$T/lib" && cp "$POL/lib/batching.lua" "$T/lib/"
run len_limit "$BIN" sim --trace "$T/len.csv" --policy "$T/len.lua" --model llama-2-7b \
    --max-model-len 1024 --db "$T/len.db" --name lim
want_rc 0
# no oracle: the context left (1024 - 100), and the trace's own cap for the second
grep -qF $'saw\t0\t924\t9' "$T/len_limit.err" || bad " request 0 was not shown its limit 924 and prediction 9"
grep -qF $'saw\t1\t20\tnil' "$T/len_limit.err" || bad " request 1 was not shown its trace cap 20"
grep -qF $'saw\t0\t7' "$T/len_limit.err" && bad " the true length reached the policy"
run len_oracle "$BIN" sim --trace "$T/len.csv" --policy "$T/len.lua" --model llama-2-7b \
    --max-model-len 1024 --db "$T/len.db" --name orc --oracle-lengths
want_rc 0
grep -qF $'saw\t0\t7\t9' "$T/len_oracle.err" || bad " --oracle-lengths did not show the true length"
grep -qF $'saw\t1\t20\tnil' "$T/len_oracle.err" || bad " the oracle did not stop at the trace cap"
run len_cap "$BIN" sim --trace "$T/len.csv" --policy "$T/len.lua" --model llama-2-7b \
    --max-model-len 1024 --db "$T/len.db" --name cap --max-output-tokens 5
want_rc 0
grep -qF $'saw\t0\t5\t9' "$T/len_cap.err" || bad " --max-output-tokens was not the limit"
# the second request stops at its cap of 20; the first at --max-output-tokens 5
want_sql "$T/len.db" "select group_concat(x) from (select output_tokens || '/' ||
    generated_tokens as x from requests where run_id=3 order by req_id)" "5/5,20/20"
want_sql "$T/len.db" "select group_concat(o) from (select json_extract(config,
    '\$.oracle_lengths') as o from runs order by id)" "0,1,0"
run len_report "$BIN" report "$T/len.db" --run orc
want_out "lengths   oracle: the policy saw true output lengths (--oracle-lengths)"
run len_report2 "$BIN" report "$T/len.db" --run cap
want_out "lengths   the policy saw limits, not true lengths: the trace's max_tokens, else 5"
end

e2e_finish e2e_sim

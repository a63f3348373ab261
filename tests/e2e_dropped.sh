#!/usr/bin/env bash
# e2e_dropped.sh: what a run did not serve, and runs that cannot start (issue #13 items 4
# and 5). Every summary (sim, engine, report) counts rejected and aborted requests by
# reason with their share of the trace, and past 5% puts the hint on a WARNING line of its
# own; an empty trace, or a --start/--duration window that holds no request, is a usage
# error and records no run (it would be a 'done' run of 0 requests that compares as
# perfect); usage mistakes (unknown --set key, missing files, unknown presets) exit 2 and
# record no run either.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_dropped
CONT=$POL/continuous.lua

# 40 requests, 1 s apart; every 10th (4 of 40, 10%) is over llama-2-7b's 4096 tokens.
awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens";
             for (i = 0; i < 40; i++) printf "%d,%d,%d\n", i, i % 10 == 0 ? 4000 : 200, 200 }' >"$T/long10.csv"
# 50 requests, 1 over the context (2%).
awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens";
             for (i = 0; i < 50; i++) printf "%d,%d,%d\n", i, i == 7 ? 5000 : 200, 20 }' >"$T/long2.csv"
printf 'arrival_s,prompt_tokens,output_tokens\n' >"$T/header.csv"

# want_no_run DB: exit 2, no run recorded, and a database the command created is gone again
want_no_run() {
    want_rc 2
    want_err "nothing was run or recorded"
    [ -e "$1" ] && bad " $1 was left behind"
    [ -e "$1-wal" ] || [ -e "$1-shm" ] || [ -e "$1-journal" ] && bad " a side file of $1 was left"
    return 0
}

begin "sim: 10% over the context: rejected with its share, and a WARNING naming model, context and options"
run big "$BIN" sim --trace "$T/long10.csv" --policy "$CONT" --db "$T/d.db" --name big
want_rc 0
want_out "rejected  4 (10.0%) prompt + output longer than the context" \
    "WARNING   10.0% of the trace is over llama-2-7b's 4096-token context: --max-model-len, --clip-to-context or another model"
end

begin "report: the same lines"
run report_big "$BIN" report "$T/d.db" --run big
want_rc 0
want_out "rejected  4 (10.0%) prompt + output longer than the context" \
    "WARNING   10.0% of the trace is over llama-2-7b's 4096-token context"
end

begin "sim: 2% over the context: the hint stays on the line, no WARNING"
run small "$BIN" sim --trace "$T/long2.csv" --policy "$CONT" --db "$T/d.db" --name small
want_rc 0
want_out "rejected  1 (2.0%) prompt + output longer than the context (--max-model-len N, or --clip-to-context to run them clipped)"
grep -q WARNING "$T/small.out" && bad " a WARNING for 2%"
end

begin "engine: the same lines (stories260k's 512-token context)"
run eng "$BIN" engine --trace "$T/long2.csv" --policy "$CONT" --model dummy:stories260k \
    --max-output 8 --rate-scale 100 --db "$T/e.db"
want_rc 0
want_out "rejected  1 (2.0%) prompt + output longer than the context"
end

begin "a trace with a header and no request: usage error, no run"
run empty "$BIN" sim -q --trace "$T/header.csv" --policy "$CONT" --db "$T/empty.db"
want_no_run "$T/empty.db"
want_err "$T/header.csv: the trace holds no request"
end

begin "--start past the trace's end: usage error naming the window, no run"
run past "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/past.db" --start 1000
want_no_run "$T/past.db"
want_err "no request to replay in the window --start 1000 s"
end

begin "a --start/--duration window between two requests: usage error, no run"
run gap "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/gap.db" --start 3.2 --duration 0.5
want_no_run "$T/gap.db"
want_err "no request to replay in the window --start 3.2 s, --duration 0.5 s"
end

begin "engine: --start past the end: usage error, no run"
run eng_past "$BIN" engine -q --trace "$T/long2.csv" --policy "$CONT" --model dummy:stories260k \
    --start 1000 --db "$T/epast.db"
want_no_run "$T/epast.db"
want_err "no request to replay"
end

begin "usage mistakes record no run: unknown --set key, a bad param value, unknown model and hardware, missing files"
run u_set "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/u.db" --set nope=1
want_no_run "$T/u.db"
want_err "nope"
run u_value "$BIN" sim -q --trace "$T/long2.csv" --policy "$POL/chunked_prefill.lua" --db "$T/u.db" --set chunk=0
want_no_run "$T/u.db"
want_err "chunk"
run u_model "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/u.db" --model nope-7b
want_no_run "$T/u.db"
run u_hw "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/u.db" --hw a100
want_no_run "$T/u.db"
want_err "a100"
run u_trace "$BIN" sim -q --trace "$T/none.csv" --policy "$CONT" --db "$T/u.db"
want_no_run "$T/u.db"
run u_policy "$BIN" sim -q --trace "$T/long2.csv" --policy "$T/none.lua" --db "$T/u.db"
want_no_run "$T/u.db"
run u_eng_set "$BIN" engine -q --trace "$T/long2.csv" --policy "$CONT" --model dummy:stories260k \
    --set nope=1 --db "$T/u.db"
want_no_run "$T/u.db"
run u_eng_model "$BIN" engine -q --trace "$T/long2.csv" --policy "$CONT" --model "$T/none.bin" --db "$T/u.db"
want_no_run "$T/u.db"
run u_repeat "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/u.db" --repeat 2 --hw a100
want_rc 2
[ -e "$T/u.db" ] && bad " u.db was left behind by --repeat"
# A database that already held runs keeps them, and gets no new one.
run k_first "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/k.db" --name first
want_rc 0
run k_bad "$BIN" sim -q --trace "$T/long2.csv" --policy "$CONT" --db "$T/k.db" --hw a100
want_rc 2
want_sql "$T/k.db" "select group_concat(name) from runs" first
end

begin "a cluster's router refusing requests: counted as the router's, with its share"
cat >"$T/odd.lua" <<'LUA'
return { route = function(c, r) if r.id % 2 == 1 then return nil, "odd ids go elsewhere" end return 1 end }
LUA
run router "$BIN" sim --trace "$T/long2.csv" --policy "$CONT" --db "$T/r.db" --replicas 2 \
    --router "$T/odd.lua"
want_rc 0
want_out "rejected  25 (50.0%) refused by the router" \
    "WARNING   50.0% of the trace was rejected (refused by the router)"
want_sql "$T/r.db" "select count(*) from requests where replica is null and reason like 'router: odd%'" 25
run router_json "$BIN" report "$T/r.db" --json
want_out '"router": 25'
end

e2e_finish e2e_dropped

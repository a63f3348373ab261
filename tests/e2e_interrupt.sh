#!/usr/bin/env bash
# e2e_interrupt.sh: Ctrl-C and SIGTERM (issue #13 item 1). An interrupted sim, engine,
# --repeat experiment or sweep stops at the next step, records its run as failed with
# "interrupted by SIGINT at t=..." (SIGTERM likewise), marks its unfinished requests aborted
# with that reason, leaves a valid database and exits 130 (143); a second signal ends the
# process at once; a signal the parent ignored stays ignored; `runs`, `report` and `compare`
# flag or refuse a run that is not done.
#
# Not timed: each command is signalled once its run row is in the database (or, for a
# sweep, once it has said it started), on a trace far longer than the test can wait for,
# so the run cannot end on its own first. Commands are started with job control (set -m)
# so that SIGINT is not ignored as it is for a script's background jobs.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_interrupt

# A million requests, 100 per second for 10000 s: hours of simulation, never reached.
awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens";
             for (i = 0; i < 1000000; i++) printf "%.2f,%d,%d\n", i * 0.01, 100 + i % 300, 50 + i % 100 }' \
    >"$T/long.csv"
printf 'arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.1,200,10\n0.5,50,30\n' >"$T/short.csv"
CONT=$POL/continuous.lua

# start NAME CMD...: runs CMD in the background (its own process group), stdout/stderr to
# $T/NAME.out/.err; sets pid and last.
start() {
    last=$1
    shift
    set -m
    "$@" >"$T/$last.out" 2>"$T/$last.err" &
    pid=$!
    set +m
}
# wait_sql DB QUERY EXPECTED: polls until QUERY gives EXPECTED (the run has started);
# gives up after $LIMIT s, which fails the check.
wait_sql() {
    local i
    for ((i = 0; i < LIMIT * 20; i++)); do
        [ "$(sql "$1" "$2" 2>/dev/null)" = "$3" ] && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    bad " [$2] never gave '$3' (the command did not start, or ended: $(head -c 300 "$T/$last.err"))"
    return 1
}
# finish: waits for the background command (at most $LIMIT s after the signal); sets rc.
finish() {
    local i
    for ((i = 0; i < LIMIT * 20; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        bad " still running ${LIMIT}s after the signal"
    fi
    wait "$pid"
    rc=$?
}
# want_interrupted DB RUN SIGNAME: RUN failed, interrupted by SIGNAME, its unfinished
# requests aborted with that reason, the database valid.
want_interrupted() {
    local db=$1 name=$2 sig=$3
    db_ok "$db" || return
    want_sql "$db" "select status from runs where name='$name'" failed
    want_sql "$db" "select error like 'interrupted by $sig at t=% s' from runs where name='$name'" 1
    want_sql "$db" "select count(*) > 0 from requests r join runs u on u.id = r.run_id
        where u.name='$name' and r.status='aborted'" 1
    want_sql "$db" "select count(*) from requests r join runs u on u.id = r.run_id
        where u.name='$name' and r.status='aborted' and r.reason not like 'interrupted by $sig at t=%'" 0
}

# ------------------------------------------------------------------ sim

for sig in INT TERM; do
    code=$((128 + $(kill -l $sig)))
    begin "sim: SIG$sig after the run started: exit $code, run failed 'interrupted by SIG$sig', requests aborted"
    start sim_$sig "$BIN" sim -q --trace "$T/long.csv" --policy "$CONT" --db "$T/sim_$sig.db" --name long
    wait_sql "$T/sim_$sig.db" "select count(*) from runs" 1 && kill -$sig "$pid"
    finish
    [ "$rc" -eq "$code" ] || bad " exit status $rc, expected $code"
    want_err "interrupted by SIG$sig at t=" "marked failed"
    want_interrupted "$T/sim_$sig.db" long "SIG$sig"
    end
done

begin "runs, report and compare flag or refuse the interrupted run"
run short "$BIN" sim -q --trace "$T/short.csv" --policy "$CONT" --db "$T/sim_INT.db" --name short
want_rc 0
run runs "$BIN" runs "$T/sim_INT.db"
want_rc 0
want_out_re "^long +continuous +failed .*interrupted by SIGINT at t="
want_out_re "^short +continuous +done "
run report "$BIN" report "$T/sim_INT.db" --run long
want_rc 0
head -n 1 "$T/report.out" | grep -q "^WARNING   run 'long' is failed, not done: interrupted by SIGINT" ||
    bad " the report's first line is not the warning: $(head -n 1 "$T/report.out")"
want_out_re "^aborted +[0-9]+ \([0-9.]+%\) unfinished when the run was interrupted"
run cmp_refused "$BIN" compare "$T/sim_INT.db" --runs short,long
want_rc 1
want_err "run 'long' is failed, not done: interrupted by SIGINT" "--include-failed"
[ -s "$T/cmp_refused.out" ] && bad " compare printed a comparison"
run cmp_forced "$BIN" compare "$T/sim_INT.db" --runs short,long --include-failed
want_rc 0
want_out "failed"
end

# ------------------------------------------------------------------ a second signal

# schedule() spins for seconds (allowed by the time limit): both signals land inside it, so
# the first one's flag is still unpolled when the second one arrives.
cat >"$T/slow.lua" <<'LUA'
return { schedule = function(s)
    local x = 0
    for i = 1, 4e9 do x = x + i % 7 end
    return x
end }
LUA
begin "a second signal ends the process at once; the database stays valid"
start twice "$BIN" sim -q --trace "$T/long.csv" --policy "$T/slow.lua" --db "$T/twice.db" \
    --policy-time-limit 600
wait_sql "$T/twice.db" "select count(*) from runs" 1 && { kill -INT "$pid"; kill -TERM "$pid"; }
finish
# killed by a signal's default action, the run not recorded as ended; which of the two
# signals kills depends on the order the kernel delivers two pending ones in
[ "$rc" -eq 130 ] || [ "$rc" -eq 143 ] || bad " exit status $rc, expected 130 or 143"
db_ok "$T/twice.db"
want_sql "$T/twice.db" "select status from runs" running
end

begin "a SIGINT the parent ignored stays ignored (a script's background job); SIGTERM still stops it"
"$BIN" sim -q --trace "$T/long.csv" --policy "$CONT" --db "$T/ign.db" >"$T/ign.out" 2>"$T/ign.err" &
pid=$!
last=ign
wait_sql "$T/ign.db" "select count(*) from runs" 1 && { kill -INT "$pid"; kill -TERM "$pid"; }
finish
[ "$rc" -eq 143 ] || bad " exit status $rc, expected 143"
want_interrupted "$T/ign.db" "$(sql "$T/ign.db" "select name from runs")" SIGTERM
end

# ------------------------------------------------------------------ experiments and sweeps

begin "sim --repeat 3: SIGINT in the first run stops the experiment; the other runs are not run"
start rep "$BIN" sim -q --trace "$T/long.csv" --policy "$CONT" --db "$T/rep.db" --repeat 3 --name exp
wait_sql "$T/rep.db" "select count(*) from runs" 1 && kill -INT "$pid"
finish
[ "$rc" -eq 130 ] || bad " exit status $rc, expected 130"
want_err "runs exp-r1..exp-r2 not run"
want_interrupted "$T/rep.db" exp-r0 SIGINT
want_sql "$T/rep.db" "select count(*) from runs" 1
run short_rep "$BIN" sim -q --trace "$T/short.csv" --policy "$CONT" --db "$T/rep.db" --name short
run cmp_exp "$BIN" compare "$T/rep.db" --runs short,exp
want_rc 1
want_err "run 'exp-r0' of experiment 'exp' is failed, not done"
end

begin "sweep: SIGINT to the process group stops the running point; the rest are not run"
start sweep "$BIN" sweep -q --trace "$T/long.csv" --policy "$CONT" --rates 50,100,200 \
    --db "$T/sweep.db" --name sw
for ((i = 0; i < LIMIT * 20; i++)); do
    grep -q "^sweep sw" "$T/sweep.out" 2>/dev/null && break
    sleep 0.05
done
kill -INT -- -"$pid"
finish
[ "$rc" -eq 130 ] || bad " exit status $rc, expected 130"
want_err "interrupted by SIGINT"
db_ok "$T/sweep.db"
want_sql "$T/sweep.db" "select count(*) from runs where status != 'failed' or error not like 'interrupted by SIGINT%'" 0
end

begin "explain --db: SIGINT ends the run recorded as failed, exit 130"
start expl "$BIN" explain --trace "$T/long.csv" --policy "$CONT" --limit 1000000 \
    --steps 100000000 --db "$T/expl.db" --name expl
wait_sql "$T/expl.db" "select count(*) from runs" 1 && kill -INT "$pid"
finish
[ "$rc" -eq 130 ] || bad " exit status $rc, expected 130"
want_interrupted "$T/expl.db" expl SIGINT
end

# ------------------------------------------------------------------ engine

begin "engine: SIGINT after the run started: exit 130, run failed, requests aborted"
# 100000 requests a second: more than the engine serves, so some are always unfinished
start eng "$BIN" engine -q --trace "$T/long.csv" --policy "$CONT" --model dummy:stories260k \
    --max-prompt 64 --max-output 8 --rate-scale 1000 --db "$T/eng.db" --name eng
wait_sql "$T/eng.db" "select count(*) from runs" 1 && kill -INT "$pid"
finish
[ "$rc" -eq 130 ] || bad " exit status $rc, expected 130"
want_interrupted "$T/eng.db" eng SIGINT
end

e2e_finish e2e_interrupt

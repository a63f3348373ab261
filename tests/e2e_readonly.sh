#!/usr/bin/env bash
# e2e_readonly.sh: databases that their reader cannot write (issue #13 item 2).
#
# A finished database is one plain file (rollback journal, no -wal/-shm beside it); runs,
# report, compare, plot and validate read it as a file and in a directory the reader cannot
# write, and create nothing beside it; a file still in WAL mode (an older database, a
# crashed writer) is read too, with a note when rows in its -wal cannot be seen; a reader
# works while a simulation writes into the same file.
#
# Read-only must be real: root ignores file modes, so as root the readers run as nobody
# (setpriv or runuser); the checks that need it print SKIP when neither can switch users.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_readonly
chmod 755 "$T" # the reader below may be another user

# side_files DIR: bad when DIR holds SQLite's -wal, -shm or -journal files.
side_files() {
    local f
    for f in "$1"/*-wal "$1"/*-shm "$1"/*-journal; do
        [ -e "$f" ] && bad " $f was left behind"
    done
}

# The reader: this user when file modes bind it, else nobody.
AS=()
if [ "$(id -u)" -eq 0 ]; then
    if setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
        AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    elif runuser -u nobody -- true 2>/dev/null; then
        AS=(runuser -u nobody --)
    else
        AS=(none)
    fi
fi
mkdir -p "$T/probe" && chmod 555 "$T/probe"
# mktemp -d makes the scratch folder 0700: the other user must be able to enter it
[ ${#AS[@]} -gt 0 ] && chmod 755 "$T"
can_ro=1 why=""
if [ "${AS[0]:-}" = none ]; then
    can_ro=0 why="running as root without setpriv or runuser"
elif ! "${AS[@]}" env "$BIN" --help >/dev/null 2>&1; then
    can_ro=0 why="the reader ${AS[*]} cannot run $BIN (a folder above it is closed to other users)"
elif ! "${AS[@]}" test -r "$T/probe" 2>/dev/null; then
    can_ro=0 why="the reader ${AS[*]} cannot enter $T (a folder above it is closed to other users)"
elif "${AS[@]}" touch "$T/probe/x" 2>/dev/null; then
    can_ro=0 why="a 555 directory is writable for the reader"
fi
# as_reader NAME CMD...: run, as the reader.
as_reader() { local n=$1; shift; run "$n" "${AS[@]}" "$@"; }

# Two simulated runs and a dummy-weights engine run (what validate replays), written by this
# user; the reader's copies are made from it.
"$BIN" trace gen --n 30 --rate 40 --prompt lognormal:60:0.6 --output lognormal:12:0.5 \
    --seed 3 --out "$T/t.csv" >/dev/null
chmod 644 "$T/t.csv"
mkdir "$T/w"
run sim_a "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/w/runs.db" --name a
run sim_b "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/static.lua" --db "$T/w/runs.db" --name b
run eng "$BIN" engine -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --model dummy:stories260k \
    --threads 1 --db "$T/w/runs.db" --name eng

begin "a finished database is one plain file: rollback journal, nothing beside it"
want_rc 0
side_files "$T/w"
want_sql "$T/w/runs.db" "PRAGMA journal_mode" delete
want_sql "$T/w/runs.db" "SELECT group_concat(name || ':' || status) FROM runs" "a:done,b:done,eng:done"
end

mkdir -p "$T/plots" && chmod 777 "$T/plots"
# readers LAYOUT DB: every reader on DB, as the reader, nothing left beside it.
readers() {
    local where=$1 db=$2 dir
    dir=$(dirname "$db")
    begin "$where: runs, report, compare and plot read it and create nothing"
    as_reader "runs_$where" "$BIN" runs "$db"
    want_rc 0
    want_out "eng"
    as_reader "report_$where" "$BIN" report "$db" --run a
    want_rc 0
    want_out "TTFT"
    as_reader "compare_$where" "$BIN" compare "$db" --runs a,b
    want_rc 0
    as_reader "plot_$where" "$BIN" plot "$db" --runs a,b --out "$T/plots/$where"
    want_rc 0
    side_files "$dir"
    end

    begin "$where: validate replays in a temporary copy, says so, and removes it"
    mkdir -p "$T/tmp_$where" && chmod 777 "$T/tmp_$where"
    as_reader "validate_$where" env TMPDIR="$T/tmp_$where" "$BIN" validate --db "$db" --run eng --hw h100
    want_rc 0
    want_out "validate: engine run eng"
    want_err "is read-only: the replay is recorded in a temporary copy"
    side_files "$dir"
    [ -z "$(ls -A "$T/tmp_$where")" ] || bad " the temporary copy was left: $(ls "$T/tmp_$where")"
    want_sql "$db" "SELECT count(*) FROM runs" 3
    end
}

if [ $can_ro -eq 0 ]; then
    echo "SKIP: read-only databases: $why"
else
    # a read-only file in a directory the reader can write
    mkdir "$T/rofile" && cp "$T/w/runs.db" "$T/rofile/" && chmod 444 "$T/rofile/runs.db"
    chmod 777 "$T/rofile"
    readers rofile "$T/rofile/runs.db"

    # a readable file in a directory nobody but root may write
    mkdir "$T/rodir" && cp "$T/w/runs.db" "$T/rodir/" && chmod 644 "$T/rodir/runs.db"
    chmod 555 "$T/rodir"
    readers rodir "$T/rodir/runs.db"

    begin "a database still in WAL mode (written before the switch back) in a read-only directory"
    mkdir "$T/walro" && cp "$T/w/runs.db" "$T/walro/"
    want_sql "$T/walro/runs.db" "PRAGMA journal_mode=WAL" wal
    chmod 555 "$T/walro"
    as_reader walro "$BIN" runs "$T/walro/runs.db"
    want_rc 0
    want_out "eng"
    [ -s "$T/walro.err" ] && bad " a note where nothing is missed: $(cat "$T/walro.err")"
    side_files "$T/walro"
    end

    begin "a crashed writer's -wal without its -shm in a read-only directory: read, and said"
    mkdir "$T/crash" && cp "$T/w/runs.db" "$T/crash/"
    # a writer killed after committing into the WAL (the sqlite3 shell kills itself)
    (sqlite3 "$T/crash/runs.db" "PRAGMA journal_mode=WAL" \
        "UPDATE runs SET name = 'renamed' WHERE name = 'a'" ".shell kill -9 \$PPID"; true) >/dev/null 2>&1
    [ -s "$T/crash/runs.db-wal" ] || bad " the set-up left no -wal"
    rm -f "$T/crash/runs.db-shm"
    chmod 555 "$T/crash"
    as_reader crash "$BIN" runs "$T/crash/runs.db"
    want_rc 0
    want_out "eng"
    want_err "note: $T/crash/runs.db is in WAL mode" "without $T/crash/runs.db-wal" "may be missing"
    end
fi

begin "a reader while a simulation writes into the same file, then nothing left beside it"
mkdir "$T/live" && cp "$T/w/runs.db" "$T/live/" && mkfifo "$T/live/trace.fifo"
# The simulation reads its trace from a FIFO, so it stays mid-run until the FIFO closes.
timeout -k 5 "$LIMIT" "$BIN" sim -q --trace "$T/live/trace.fifo" --policy "$POL/continuous.lua" \
    --db "$T/live/runs.db" --name live >"$T/live_sim.out" 2>"$T/live_sim.err" &
pid=$!
exec 3>"$T/live/trace.fifo"
head -n 20 "$T/t.csv" >&3
for _ in $(seq 1 100); do # until the run is recorded as running (bounded)
    "$BIN" runs "$T/live/runs.db" 2>/dev/null | grep -q '^live .* running' && break
    sleep 0.1
done
run live_runs "$BIN" runs "$T/live/runs.db"
want_rc 0
want_out_re '^live +continuous +running'
run live_report "$BIN" report "$T/live/runs.db" --run a
want_rc 0
want_out "TTFT"
tail -n +21 "$T/t.csv" >&3
exec 3>&-
wait $pid
rc=$?
last=live_sim
want_rc 0
want_sql "$T/live/runs.db" "SELECT runs.status || ':' || count(*) FROM runs JOIN requests ON run_id = id WHERE name = 'live'" "done:30"
rm -f "$T/live/trace.fifo"
side_files "$T/live"
want_sql "$T/live/runs.db" "PRAGMA journal_mode" delete
end

e2e_finish e2e_readonly

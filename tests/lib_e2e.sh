# lib_e2e.sh: helpers shared by the end-to-end scripts (sourced, not run; run_all.sh runs
# only tests/e2e_*.sh). A check is `begin NAME`, commands through `run`, assertions that
# call `bad` with a reason, then `end`, which prints "ok NAME" or "FAIL: NAME: reasons" with
# the last command's output. e2e_setup NAME makes the temp dir $T (removed on exit).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
BIN=${TWIN_BIN:-$PWD/build/twinserve}
DATA=${TWIN_DATA:-../shared/data}
POL=$PWD/policies
LIMIT=25 # seconds any single command may run before it counts as a hang

e2e_setup() {
    if [ ! -x "$BIN" ]; then echo "FAIL: twinserve binary not found at $BIN (set TWIN_BIN)"; exit 1; fi
    if ! command -v sqlite3 >/dev/null 2>&1; then echo "FAIL: the sqlite3 CLI is required"; exit 1; fi
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 1
    # read-only folders made by a test must not stop the clean-up
    trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
    T=$tmp
}

npass=0 nfail=0
rc=0 last=none cname='' cerr=()

# run NAME CMD...: runs CMD under a time limit; stdout/stderr go to $T/NAME.out/.err.
run() {
    last=$1
    shift
    timeout -k 5 "$LIMIT" "$@" >"$T/$last.out" 2>"$T/$last.err"
    rc=$?
}
begin() { cname=$1; cerr=(); }
bad() { cerr+=("$*"); }
end() {
    if [ ${#cerr[@]} -eq 0 ]; then
        echo "ok $cname"
        npass=$((npass + 1))
    else
        local IFS=';'
        echo "FAIL: $cname:${cerr[*]}"
        echo "  command output (exit $rc; last command '$last'):"
        cat "$T/$last.out" "$T/$last.err" 2>/dev/null | head -n 40 | sed 's/^/    | /'
        nfail=$((nfail + 1))
    fi
}
# no_crash: no signal, no hang, no sanitizer report.
no_crash() {
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then bad " hung (killed after ${LIMIT}s)"
    elif [ "$rc" -ge 128 ]; then bad " killed by signal $((rc - 128))"; fi
    if grep -qE 'Segmentation fault|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|core dumped|Assertion .* failed' \
        "$T/$last.err" "$T/$last.out" 2>/dev/null; then
        bad " crash or sanitizer report in the output"
    fi
}
# want_rc CODE...: the exit status is one of CODEs (and no crash).
want_rc() {
    no_crash
    local c
    for c in "$@"; do [ "$rc" -eq "$c" ] && return 0; done
    bad " exit status $rc, expected $*"
}
# want_err TEXT... / want_out TEXT...: stderr / stdout contains every TEXT (fixed strings).
want_err() { local s; for s in "$@"; do grep -qF -- "$s" "$T/$last.err" || bad " stderr lacks '$s'"; done; }
want_out() { local s; for s in "$@"; do grep -qF -- "$s" "$T/$last.out" || bad " stdout lacks '$s'"; done; }
want_err_re() { grep -qE -- "$1" "$T/$last.err" || bad " stderr does not match /$1/"; }
want_out_re() { grep -qE -- "$1" "$T/$last.out" || bad " stdout does not match /$1/"; }
# sql DB QUERY: never creates DB (the sqlite3 CLI would).
sql() {
    if [ -f "$1" ]; then sqlite3 -batch -noheader "$1" "$2" 2>&1; else echo "(no database $1)"; fi
}
# want_sql DB QUERY EXPECTED
want_sql() {
    local got
    got=$(sql "$1" "$2")
    [ "$got" = "$3" ] || bad " [$(tr -s ' \n' ' ' <<<"$2")] gave '$got', expected '$3'"
}
db_ok() {
    [ -f "$1" ] || { bad " database $1 was not created"; return 1; }
    want_sql "$1" "PRAGMA integrity_check" ok
}
# e2e_finish NAME: the script's closing line and exit status.
e2e_finish() {
    echo "$1: $npass passed, $nfail failed"
    [ "$nfail" -eq 0 ]
}

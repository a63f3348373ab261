#!/usr/bin/env bash
# Runs every Check suite under BUILD/tests, then the end-to-end scripts tests/e2e_*.sh.
# Counts individual checks (Check's "Checks: N, Failures: F, Errors: E" lines; the e2e
# scripts' "ok ..." and "FAIL: ..." lines), prints one closing line "N passed, N failed" and
# exits non-zero when anything failed, including a suite that died without reporting.
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
case $build in /*) export TWIN_BIN="$build/twinserve" ;; *) export TWIN_BIN="$PWD/$build/twinserve" ;; esac
pass=0; fail=0; failed=()
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E '^(SKIP|[0-9]+%: Checks|.*:[EF]:)' | sed "s|^|[$name] |"
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+%: Checks' | tail -n 1)
    if [ -n "$line" ]; then
        n=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
        f=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
        e=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
        pass=$((pass + n - f - e)); fail=$((fail + f + e))
    fi
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
        [ -z "$line" ] && fail=$((fail + 1))
        failed+=("$name")
    fi
done
for t in tests/e2e_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    out=$(bash "$t" 2>&1); rc=$?
    ok=$(printf '%s\n' "$out" | grep -c '^ok ')
    bad=$(printf '%s\n' "$out" | grep -c '^FAIL')
    pass=$((pass + ok)); fail=$((fail + bad))
    printf '%s\n' "$out" | grep -E '^(SKIP|FAIL)' | sed "s|^|[$name] |"
    echo "[$name] $ok checks passed, $bad failed"
    if [ $rc -ne 0 ]; then
        [ "$bad" -eq 0 ] && fail=$((fail + 1))
        failed+=("$name"); printf '%s\n' "$out" | tail -n 20 | sed "s|^|[$name] |"
    fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ] && [ ${#failed[@]} -eq 0 ]

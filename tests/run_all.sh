#!/usr/bin/env bash
# Runs every Check suite under BUILD/tests, then the end-to-end scripts tests/e2e_*.sh.
# Prints one closing line "N passed, N failed" and exits non-zero on any failure.
set -u
build=${1:-build}
cd "$(dirname "$0")/.."
export TWIN_BIN="$PWD/$build/twinserve"
pass=0; fail=0; failed=()
for t in "$build"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    if out=$("$t" 2>&1); then
        pass=$((pass + 1))
    else
        fail=$((fail + 1)); failed+=("$name")
    fi
    # Check prints "NN%: Checks: N, Failures: N, Errors: N"; keep it and any SKIP lines.
    printf '%s\n' "$out" | grep -E '^(SKIP|[0-9]+%: Checks|.*:[EF]:)' | sed "s|^|[$name] |"
done
for t in tests/e2e_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    if out=$(bash "$t" 2>&1); then
        pass=$((pass + 1)); printf '%s\n' "$out" | grep -E '^(SKIP|ok|PASS)' | sed "s|^|[$name] |"
    else
        fail=$((fail + 1)); failed+=("$name"); printf '%s\n' "$out" | tail -n 30 | sed "s|^|[$name] |"
    fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed suites: ${failed[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]

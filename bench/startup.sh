#!/usr/bin/env bash
# bench/startup.sh: what a command pays at start for the libraries it links (issue #16
# item 4: with cuBLAS and cudart linked, `sim` on a 4-request trace took 0.12 s and 226 MB
# where a build without CUDA took 0.03 s and 7.5 MB). Runs `sim` on a 4-request trace with
# each binary given, alternating binaries run by run, under /usr/bin/time -v (peak
# resident memory) and bash's clock (wall time, the whole command: start, run, exit), and
# prints the median of each (and every run's figures).
#
#   usage: bash bench/startup.sh RUNS BIN [BIN...]     e.g. 7 old/twinserve build/twinserve
set -u
cd "$(dirname "$0")/.." || exit 2
[ $# -ge 2 ] && [ "$1" -gt 0 ] 2>/dev/null || { echo "usage: bash bench/startup.sh RUNS BIN [BIN...]" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "startup.sh: /usr/bin/time (GNU time) is required" >&2; exit 2; }
runs=$1
shift
t=$(mktemp -d) || exit 2
trap 'rm -rf "$t"' EXIT
printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n0.004,30,12\n' >"$t/trace.csv"
for ((r = 0; r < runs; r++)); do
    i=0
    for b in "$@"; do
        t0=$EPOCHREALTIME
        /usr/bin/time -v "$b" sim -q --trace "$t/trace.csv" --policy policies/continuous.lua \
            --model llama-2-7b --db "$t/r.db" >/dev/null 2>"$t/time" || { cat "$t/time" >&2; exit 1; }
        t1=$EPOCHREALTIME
        rm -f "$t/r.db"*
        # EPOCHREALTIME (bash 5) to the microsecond: time -v rounds its wall time to 10 ms
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
        rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$t/time")
        echo "$wall $rss" >>"$t/b$i"
        i=$((i + 1))
    done
done
# median: the middle value of a column (the lower middle of an even count)
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
i=0
for b in "$@"; do
    w=$(cut -d' ' -f1 "$t/b$i" | median)
    m=$(cut -d' ' -f2 "$t/b$i" | median)
    printf '%s: wall median %s s (runs: %s), peak RSS median %.1f MB (runs: %s)\n' "$b" "$w" \
        "$(cut -d' ' -f1 "$t/b$i" | tr '\n' ' ' | sed 's/ $//')" "$(awk -v m="$m" 'BEGIN {print m / 1024}')" \
        "$(cut -d' ' -f2 "$t/b$i" | awk '{printf "%s%.1f", (NR > 1 ? " " : ""), $1 / 1024}')"
    i=$((i + 1))
done

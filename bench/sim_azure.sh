#!/usr/bin/env bash
# Simulator speed: the full Azure conversation trace (19,366 requests) on llama-2-7b /
# a100-80g under continuous batching, all records written to a fresh SQLite file.
# Runs it N times (default 5) and prints the median wall time, peak memory, records written
# and the speed-up over Vidur's 51 s for the same replay on this machine (issue #2).
#
#   usage: bash bench/sim_azure.sh [BIN] [N]        (make bench)
set -eu
bin=${1:-build/twinserve}
n=${2:-5}
cd "$(dirname "$0")/.."
trace=${TWIN_DATA:-../shared/data}/traces/AzureLLMInferenceTrace_conv.csv
[ -f "$trace" ] || { echo "SKIP: $trace not found (see make data)"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
walls=(); rss=()
for i in $(seq 1 "$n"); do
    db=$out/run$i.db
    /usr/bin/time -f '%e %M' -o "$out/time$i" "$bin" sim --trace "$trace" \
        --policy policies/continuous.lua --model llama-2-7b --hw a100-80g --db "$db" -q
    read -r w m < "$out/time$i"
    walls+=("$w"); rss+=("$m")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
mw=$(median "${walls[@]}"); mr=$(median "${rss[@]}")
db=$out/run1.db
reqs=$(sqlite3 "$db" "select count(*) from requests")
steps=$(sqlite3 "$db" "select count(*) from steps")
status=$(sqlite3 "$db" "select status from runs")
sched_us=$(sqlite3 "$db" "select sched_s*1e6 from steps order by sched_s limit 1 offset (select count(*)/2 from steps)")
echo "Azure conv replay, llama-2-7b / a100-80g, continuous batching; $n runs"
echo "  wall times (s):     ${walls[*]}"
echo "  median wall:        $mw s   (target < 0.5 s; Vidur: 51 s -> speed-up $(awk -v w="$mw" 'BEGIN{printf "%.0fx", 51/w}'))"
echo "  median peak RSS:    $(awk -v m="$mr" 'BEGIN{printf "%.1f MB", m/1024}')   (target < 100 MB)"
echo "  records:            $reqs requests + $steps steps (run status: $status)"
echo "  steps per second:   $(awk -v s="$steps" -v w="$mw" 'BEGIN{printf "%.0f", s/w}')"
echo "  scheduler per step: median $(printf '%.2f' "$sched_us") us (policy call + core validation + commit)"

#!/usr/bin/env bash
# Cluster simulation speed (issue #14, docs/cluster.md), each case run N times (default 3;
# medians quoted), all records (requests and steps rows) written to a fresh SQLite file:
#  1. the Mooncake conversation trace with arrivals x16 on 16 replicas of mistral-7b / h100
#     (continuous batching, prefix caching, the prefix_affinity router): target < 5 s;
#  2. a 1,000,000-request synthetic trace (400 req/s, lognormal prompts ~550 and outputs
#     ~110 tokens) on 64 replicas of llama-2-7b / a100-80g, round robin: target < 2 min
#     and peak RSS < 1 GB.
# Prints each run's wall time and peak RSS (/usr/bin/time -v) with the machine's load, then
# the medians, the records and simulated requests per second at the median wall time.
#
#   usage: bash bench/cluster.sh [BIN] [N]
set -eu
bin=$(realpath "${1:-build/twinserve}")
n=${2:-3}
cd "$(dirname "$0")/.."
moon=${TWIN_DATA:-../shared/data}/traces/mooncake_conversation_trace.jsonl
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# run NAME ARGS...: N timed sim runs (the database rewritten each time); prints their figures
run() {
    local name=$1 db=$out/$1.db walls=() rsss=()
    shift
    for r in $(seq 1 "$n"); do
        rm -f "$db"
        /usr/bin/time -v -o "$out/$name.time" "$bin" sim -q --db "$db" --name "$name" "$@"
        walls+=("$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, a, ":"); s = 0;
                   for (i = 1; i <= n; i++) s = s * 60 + a[i]; print s}' "$out/$name.time")")
        rsss+=("$(awk -F': ' '/Maximum resident/ {printf "%.0f", $2 / 1024}' "$out/$name.time")")
        echo "  run $r: wall ${walls[-1]} s, peak RSS ${rsss[-1]} MB (load $(cut -d' ' -f1 /proc/loadavg))"
    done
    local wall rss reqs steps status
    wall=$(printf '%s\n' "${walls[@]}" | median)
    rss=$(printf '%s\n' "${rsss[@]}" | median)
    reqs=$(sqlite3 "$db" "select count(*) from requests")
    steps=$(sqlite3 "$db" "select count(*) from steps")
    status=$(sqlite3 "$db" "select status from runs")
    echo "  median of $n: wall $wall s, peak RSS $rss MB; $reqs requests + $steps steps recorded (run $status)"
    echo "  simulated requests per second: $(awk -v r="$reqs" -v w="$wall" 'BEGIN{printf "%.0f", r/w}')"
}

echo "1. Mooncake conversation, arrivals x16, 16 x mistral-7b/h100, prefix_affinity (target < 5 s)"
if [ -f "$moon" ]; then
    run moon16 --trace "$moon" --rate-scale 16 --replicas 16 --model mistral-7b --hw h100 \
        --policy policies/continuous.lua --prefix-caching \
        --router policies/routers/prefix_affinity.lua
    sqlite3 "$out/moon16.db" "select '  cluster prefix-cache hit rate: ' ||
        round(100.0 * sum(cached_tokens) / sum(prompt_tokens), 1) || '% of prompt tokens'
        from requests"
else
    echo "  SKIP: $moon not found (see make data)"
fi

echo "2. 1,000,000 synthetic requests at 400 req/s, 64 x llama-2-7b/a100-80g, round robin (target < 120 s, < 1 GB)"
"$bin" trace gen --n 1000000 --rate 400 --seed 11 --prompt lognormal:400:0.8 \
    --output lognormal:80:0.8 --out "$out/1m.csv" >/dev/null
run syn1m --trace "$out/1m.csv" --replicas 64 --policy policies/continuous.lua

#!/usr/bin/env bash
# Engine replay: the scheduler's own share of the step time (issue #4: under 2%), on the CPU
# engine, for a slice of the Azure conversation trace replayed on dummy:smollm2-135m (fp32,
# prompts clipped to 256 tokens, outputs to 32) and on stories260K under continuous
# batching and chunked prefill. Runs each N times (default 3) and prints medians: step time,
# scheduler time per step (policy call + core validation + commit) and its share, and the
# output throughput.
#
#   usage: bash bench/engine_replay.sh [BIN] [N]        (make bench)
set -eu
bin=${1:-build/twinserve}
n=${2:-3}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
trace=$data/traces/AzureLLMInferenceTrace_conv.csv
[ -f "$trace" ] || { echo "SKIP: $trace not found (see make data)"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

echo "Engine replay, CPU backend ($(nproc) cores), Azure conv trace slice (32 requests on smollm2, 200 on stories260K); $n runs each, medians"
printf '  %-20s %-16s %6s %10s %12s %9s %12s\n' model policy steps "step ms" "sched us" "sched %" "out tok/s"
bench() { # MODEL POLICY LIMIT RATE EXTRA...
    local model=$1 policy=$2 limit=$3 rate=$4; shift 4
    local st=() sc=() sh=() tp=() steps=0
    for i in $(seq 1 "$n"); do
        local db=$out/$RANDOM$i.db
        "$bin" engine --trace "$trace" --policy "policies/$policy.lua" --model "$model" \
            --limit "$limit" --rate-scale "$rate" --max-prompt 256 --max-output 32 --db "$db" -q "$@"
        read -r s1 s2 s3 s4 < <(sqlite3 -separator ' ' "$db" \
            "select count(*), 1e3*avg(dur_s), 1e6*avg(sched_s), 100*sum(sched_s)/sum(dur_s) from steps")
        steps=$s1; st+=("$s2"); sc+=("$s3"); sh+=("$s4")
        tp+=("$(sqlite3 "$db" "select sum(generated_tokens)/(max(finish_s)-min(arrival_s)) from requests where status='finished'")")
    done
    printf '  %-20s %-16s %6d %10.2f %12.1f %9.3f %12.0f\n' "${model##*/}" "$policy" "$steps" \
        "$(median "${st[@]}")" "$(median "${sc[@]}")" "$(median "${sh[@]}")" "$(median "${tp[@]}")"
}
bench dummy:smollm2-135m continuous 32 50
bench dummy:smollm2-135m chunked_prefill 32 50
if [ -f "$data/models/stories260K.bin" ]; then
    bench "$data/models/stories260K.bin" continuous 200 20
    bench "$data/models/stories260K.bin" chunked_prefill 200 20 --set chunk=64
fi
echo "  (sched %: scheduler time / forward-pass time, summed over steps; target < 2%)"

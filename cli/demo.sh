#!/usr/bin/env bash
# `make demo`: replays one trace under the four shipped policies in the simulator, prints a
# comparison table and an A/B verdict, then replays a slice of it on the real engine (CPU)
# under three policies. Uses the real Azure conversation trace and the stories260K model
# when the shared data is there, else a synthetic trace of the same shape made by
# `twinserve trace gen` and seeded dummy weights in stories260K's shape.
set -eu
bin=${1:-build/twinserve}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
out=$(dirname "$bin")   # the build folder the binary is in
db=$out/demo.db
rm -f "$db" "$db-wal" "$db-shm"
trace=$data/traces/AzureLLMInferenceTrace_conv.csv
if [ -f "$trace" ]; then
    echo "trace: $trace (Azure LLM inference 2023, conversation: 19,366 requests, 58 min)"
    limit=()
else
    trace=$out/demo-trace.csv
    echo "trace: shared data not found; synthetic Azure-conv-like trace $trace"
    "$bin" trace gen --n 4000 --rate 5.5 --arrival gamma:1.5 --prompt lognormal:1020:0.8 \
        --output lognormal:129:0.9 --seed 1 --out "$trace"
    limit=()
fi
echo "model llama-2-7b on one A100-80GB (roofline cost model); records in $db"
echo
for p in static continuous chunked_prefill speculative; do
    printf '  %-16s ' "$p"
    "$bin" sim --trace "$trace" --policy "policies/$p.lua" --db "$db" --name "$p" -q ${limit[@]+"${limit[@]}"}
    echo done
done
echo
"$bin" runs "$db"
echo
# What a run dropped, and why, as every summary (sim, engine, report) says it.
dropped() { "$bin" report "$1" --run "$2" | grep -E '^(requests|rejected|aborted|WARNING|clipped) |^ {9}[0-9]'; }
echo "What the continuous run dropped (twinserve report $db --run continuous):"
dropped "$db" continuous
echo
echo "A/B: is chunked prefill better than continuous batching on this trace?"
"$bin" compare "$db" --runs continuous,chunked_prefill | sed -n '1,40p'
echo

model=$data/models/stories260K.bin
[ -f "$model" ] || model=dummy:stories260k
edb=$out/demo-engine.db
rm -f "$edb" "$edb-wal" "$edb-shm"
echo "The same policies on the real engine: model $model on the CPU, the first 120"
echo "requests at 10x the trace's rate, prompts clipped to 256 tokens and outputs to 48."
for p in static continuous chunked_prefill; do
    printf '  %-16s ' "$p"
    set_chunk=()
    [ "$p" = chunked_prefill ] && set_chunk=(--set chunk=128)
    "$bin" engine --trace "$trace" --policy "policies/$p.lua" --model "$model" --db "$edb" \
        --name "$p" --limit 120 --rate-scale 10 --max-prompt 256 --max-output 48 \
        ${set_chunk[@]+"${set_chunk[@]}"} -q
    echo done
done
echo
"$bin" runs "$edb"
echo "What the engine's continuous run dropped:"
dropped "$edb" continuous
echo
echo "Explore: twinserve report $db --run continuous --slo ttft=2,tpot=0.1;"
echo "         twinserve plot $db --runs continuous,chunked_prefill --out $out/plots;"
echo "         twinserve explain --trace $trace --policy policies/chunked_prefill.lua --limit 6"

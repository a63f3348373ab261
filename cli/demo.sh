#!/usr/bin/env bash
# `make demo`: replays one trace under the four shipped policies in the simulator and
# prints a comparison table. Uses the real Azure conversation trace when the shared data is
# there, else a synthetic trace of the same shape made by `twinserve trace gen`.
set -eu
bin=${1:-build/twinserve}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
db=build/demo.db
rm -f "$db" "$db-wal" "$db-shm"
trace=$data/traces/AzureLLMInferenceTrace_conv.csv
if [ -f "$trace" ]; then
    echo "trace: $trace (Azure LLM inference 2023, conversation: 19,366 requests, 58 min)"
    limit=()
else
    trace=build/demo-trace.csv
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
echo "Explore: sqlite3 $db 'select name, status from runs'; twinserve sim --help"

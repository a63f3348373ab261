#!/usr/bin/env bash
# bench/engine_knee.sh: the CPU engine near its knee, and what the prediction band says
# there (issue #27). 300 requests of the Azure code trace from 600 s, prompts clipped to 256
# tokens and outputs to 64, at 4x the trace's rate on stories260K with continuous batching
# (bench/fidelity.sh's limits: 64 sequences, 512 tokens a step, 2048 KV blocks), from a
# fresh `profile` + `calibrate`:
#
#  1. the engine runs the slice (real time), validated with --repeat (its own spread) and
#     --band (the cost file's cross-validated error);
#  2. the table: measured p50/p99 TTFT, E2E and TPOT beside the prediction, the engine's
#     spread, the band, and the knee verdict (mean E2E moving > 3x the step time).
#
#   usage: bash bench/engine_knee.sh [BIN] [OUTDIR]    env: KNEE_REPEAT (2), KNEE_SCALE (4)
# Takes ~5 min on 2 cores; keep the machine otherwise idle (a build during it is model
# error). Needs ../shared/data (or TWIN_DATA); prints SKIP without it.
set -u
bin=${1:-build/twinserve}
out=${2:-/tmp/twin-engine-knee}
cd "$(dirname "$0")/.." || exit 2
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
data=${TWIN_DATA:-../shared/data}
model=$data/models/stories260K.bin
trace=$data/traces/AzureLLMInferenceTrace_code.csv
[ -f "$model" ] && [ -f "$trace" ] || { echo "SKIP: $data not found (set TWIN_DATA)"; exit 0; }
mkdir -p "$out"
db=$out/knee.db
rm -f "$db" "$db"-journal
slice="--start 600 --limit 300 --max-prompt 256 --max-output 64"
limits="--max-seqs 64 --max-tokens 512 --kv-blocks 2048"
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

log "profile + calibrate (stories260K)"
"$bin" profile --model "$model" --threads 2 --out "$out/prof.csv" -q || exit 1
"$bin" calibrate --profile "$out/prof.csv" --out "$out/s.cost" > "$out/calibrate.txt" || exit 1
grep -E '^cv_median_err|^fit_median_err' "$out/s.cost"
log "engine at ${KNEE_SCALE:-4}x"
# shellcheck disable=SC2086
"$bin" engine -q --trace "$trace" --policy policies/continuous.lua --model "$model" --threads 2 \
    $limits $slice --rate-scale "${KNEE_SCALE:-4}" --db "$db" --name knee || exit 1
log "validate --repeat ${KNEE_REPEAT:-2} --band"
"$bin" validate --db "$db" --run knee --cost "$out/s.cost" --repeat "${KNEE_REPEAT:-2}" --band \
    > "$out/validate.txt" || exit 1
cat "$out/validate.txt"

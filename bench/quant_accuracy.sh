#!/usr/bin/env bash
# What the CPU backend's stored-type products cost in accuracy on a real model (issue #16):
# stories260K written by `twinserve quantize` in F16, BF16, Q8_0 and Q4_0, each compared with
# the .bin on 256 positions of the .bin's greedy text (build/bench/quant_accuracy: mean KL
# of the next-token distributions and argmax agreement, for the dequantised weights with
# fp32 activations, and for the products as the engine runs them); last, the .bin against
# itself with an f16 KV cache (--kv-type f16).
#
#   usage: bash bench/quant_accuracy.sh [BUILD (build)] [N (256)]
set -eu
build=${1:-build}
n=${2:-256}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
ref=$data/models/stories260K.bin
[ -f "$ref" ] || { echo "quant_accuracy.sh: $ref not found (set TWIN_DATA)" >&2; exit 1; }
make -s BUILD="$build" "$build/twinserve" "$build/bench/quant_accuracy"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for t in f16 bf16 q8_0 q4_0; do
    "$build/twinserve" quantize "$ref" "$out/s_$t.gguf" --type "$t" >/dev/null
    "$build/bench/quant_accuracy" "$ref" "$out/s_$t.gguf" "$n"
done
# the f16 KV cache (--kv-type f16) alone: the .bin against itself with K and V in halves
"$build/bench/quant_accuracy" "$ref" "$ref" "$n" 0 f16

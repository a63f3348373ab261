#!/usr/bin/env bash
# bench/moe_fidelity.sh: the simulator against the engine on a small mixture of experts, beside
# the same shape made dense (issue #29, item 6). For each of the two shapes (6 layers, d_model
# 512, fp32 on the CPU backend; the MoE one 8 experts of 512, top 2, its first layer dense and
# a shared expert of 512; the dense one d_ff 1024 in every layer), in alternation:
#   profile (default grid) -> calibrate -> engine on 120 requests of the Azure code trace from
#   600 s at 0.5x (prompts clipped to 256, outputs to 32) -> validate with the cost file;
# then one line per shape: the profile fit's cross-validated median error, the per-step
# forward-pass median error on the engine's own steps, and validate's headline MAPE.
#
#   usage: bash bench/moe_fidelity.sh [BIN] [OUTDIR]    env: MOE_ROUNDS (1)
# ~3 min a round on 2 cores; keep the machine otherwise idle. Needs ../shared/data (or TWIN_DATA).
set -u
bin=${1:-build/twinserve}
out=${2:-/tmp/twin-moe-fidelity}
cd "$(dirname "$0")/.." || exit 2
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
data=${TWIN_DATA:-../shared/data}
trace=$data/traces/AzureLLMInferenceTrace_code.csv
[ -f "$trace" ] || { echo "SKIP: $trace not found (set TWIN_DATA)"; exit 0; }
mkdir -p "$out"
common="n_layers = 6
d_model = 512
n_heads = 8
n_kv_heads = 4
d_ff = 1024
vocab = 2048
max_seq = 2048
tied_embeddings = 1
dtype_bytes = 4"
printf 'name = tiny-moe\n%s\nn_experts = 8\nexperts_per_tok = 2\nmoe_d_ff = 512\nn_dense_layers = 1\nshared_d_ff = 512\n' \
    "$common" >"$out/moe.model"
printf 'name = tiny-dense\n%s\n' "$common" >"$out/dense.model"
rounds=${MOE_ROUNDS:-1}
echo "shape  round  profile cv median  per-step median  headline MAPE"
for r in $(seq 1 "$rounds"); do
    for s in moe dense; do
        rm -f "$out/$s.db"
        "$bin" profile --model "dummy:$out/$s.model" --out "$out/$s.csv" -q >/dev/null 2>&1 || exit 1
        cv=$("$bin" calibrate --profile "$out/$s.csv" --out "$out/$s.cost" 2>&1 |
             sed -n 's/^fit: .*cross-validated median \([0-9.]*%\).*/\1/p')
        "$bin" engine -q --trace "$trace" --model "dummy:$out/$s.model" \
            --policy policies/continuous.lua --limit 120 --start 600 --rate-scale 0.5 \
            --max-prompt 256 --max-output 32 --kv-blocks 2048 --max-seqs 64 --max-tokens 512 \
            --db "$out/$s.db" --name "$s" >/dev/null 2>&1 || exit 1
        v=$("$bin" validate --db "$out/$s.db" --run "$s" --cost "$out/$s.cost" 2>&1)
        step=$(awk '$1 == "forward" && $2 == "pass" { print $6 }' <<<"$v")
        mape=$(sed -n 's/^MAPE \([0-9.]*%\).*/\1/p' <<<"$v")
        printf '%-6s %5d  %17s  %15s  %13s\n' "$s" "$r" "$cv" "$step" "$mape"
    done
done

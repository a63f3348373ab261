#!/usr/bin/env bash
# sim/costs/regen.sh: rebuilds the shipped GPU calibrations (sim/costs/MODEL.HW.tpN.cost)
# from Vidur's published profiles with `twinserve calibrate --vidur`, for every built-in
# model and hardware preset pair the profiles cover. The Makefile embeds these files in the
# binary; `sim` uses one when its model, --hw and --tp match and no --cost is given.
#
#   usage: bash sim/costs/regen.sh [BIN]     (needs ../shared/data, or TWIN_DATA)
# SOURCE_DATE_EPOCH pins fitted_at, so a rerun on the same data rewrites identical files.
set -eu
cd "$(dirname "$0")/../.."
bin=${1:-build/twinserve}
data=${TWIN_DATA:-../shared/data}
vidur=$data/profiles/vidur
[ -d "$vidur/compute" ] || { echo "regen.sh: $vidur not found (set TWIN_DATA)" >&2; exit 1; }
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1764547200}   # 2025-12-01
pairs="llama-2-7b:a100-80g llama-2-7b:h100 llama-2-70b:a100-80g llama-2-70b:h100
       llama-3-8b:a100-80g llama-3-70b:a100-80g codellama-34b:a100-80g codellama-34b:h100
       internlm-20b:a100-80g internlm-20b:h100 qwen-72b:a100-80g qwen-72b:h100"
for pair in $pairs; do
    model=${pair%%:*} hw=${pair#*:}
    for tp in 1 2 4 8; do
        out=sim/costs/$model.$hw.tp$tp.cost
        "$bin" calibrate -q --vidur "$vidur" --model "$model" --hw "$hw" --tp "$tp" --out "$out"
        printf '%-40s cv %s\n' "$out" "$(sed -n 's/^cv_median_err = \(.*\)/\1/p' "$out")"
    done
done
# the per-operator rates (sim/gpu_ops.h) that price models Vidur did not profile
for hw in h100 a100-80g; do
    out=sim/costs/$hw.ops
    "$bin" calibrate -q --vidur "$vidur" --ops --hw "$hw" --out "$out"
    echo "$out"
done

#!/usr/bin/env bash
# bench/arch_steps.sh: the step times of the 2026 architectures on the roofline (issue #29),
# the table docs/models.md shows: decode at batch 1 and 64 after 4,096 cached tokens, and a
# 2,048-token prefill, for
#   deepseek-v3 (latent attention, 256 experts + 1 shared) in fp8 (W8A8) with fp8 KV on
#     8 x h200, as it ships: tensor-parallel experts (tp=8), expert parallelism (tp=8,ep=8)
#     and data-parallel attention with expert parallelism (tp=1,dp=8,ep=8)
#   qwen3-30b-a3b (128 experts) in bf16 on 1 x h100
#   llama-3.1-405b in fp8 (W8A8) on 8 x h100 (tp 8), and in bf16 on 16 x h100 over two
#     nodes: tp=16 (all-reduces over the network) against tp=8,pp=2 (a stage a node)
#   gpt-oss-120b (windows, 128 experts) in mxfp4 (W4A16) on 1 x h100, as it ships (its
#     attention is bf16 in the checkpoint; here every layer matrix is mxfp4)
# fp8 products run at the FP8 tensor peak, mxfp4 ones dequantised at the bf16 peak. These
# rest on the shapes and the datasheets alone: no profile of these models exists in the
# data. The FLOPs and bytes are one GPU's; the step time is the replica's (a pipeline's
# stages included).
#
#   usage: bash bench/arch_steps.sh [BIN]        (a few seconds; no data needed)
set -u
bin=${1:-build/twinserve}
cd "$(dirname "$0")/.." || exit 2
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
[ -x "$bin" ] || { echo "no binary $bin (make first)" >&2; exit 2; }
row() {   # MODEL HW PARALLEL WEIGHTS KV LABEL
    local out
    out=$("$bin" roofline --model "$1" --hw "$2" --parallel "$3" --weight-format "$4" \
        --kv-dtype "$5" --ctx 4096) || {
        echo "roofline --model $1 failed" >&2; exit 1; }
    local b1 b64 pre
    b1=$(awk '$1 == "decode" && $2 == "B=1" { print $(NF-2) }' <<<"$out")
    b64=$(awk '$1 == "decode" && $2 == "B=64" { print $(NF-2) }' <<<"$out")
    pre=$(awk '$1 == "prefill" && $2 == "2048" { print $(NF-2) }' <<<"$out")
    printf '| %-48s | %10s | %11s | %12s |\n' "$6" "$b1 ms" "$b64 ms" "$pre ms"
}
echo "| model, devices                                   | decode B=1 | decode B=64 | prefill 2048 |"
echo "|--------------------------------------------------|-----------:|------------:|-------------:|"
row deepseek-v3 h200 tp=8 fp8 fp8 "deepseek-v3 fp8, fp8 KV, 8 x h200, tp=8"
row deepseek-v3 h200 tp=8,ep=8 fp8 fp8 "deepseek-v3 fp8, fp8 KV, 8 x h200, tp=8,ep=8"
row deepseek-v3 h200 tp=1,dp=8,ep=8 fp8 fp8 "deepseek-v3 fp8, fp8 KV, 8 x h200, dp=8,ep=8"
row qwen3-30b-a3b h100 tp=1 bf16 bf16 "qwen3-30b-a3b bf16, 1 x h100"
row llama-3.1-405b h100 tp=8 fp8 bf16 "llama-3.1-405b fp8, 8 x h100, tp=8"
row llama-3.1-405b h100 tp=16 bf16 bf16 "llama-3.1-405b bf16, 16 x h100, tp=16"
row llama-3.1-405b h100 tp=8,pp=2 bf16 bf16 "llama-3.1-405b bf16, 16 x h100, tp=8,pp=2"
row gpt-oss-120b h100 tp=1 mxfp4 bf16 "gpt-oss-120b mxfp4, 1 x h100"

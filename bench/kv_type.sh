#!/usr/bin/env bash
# bench/kv_type.sh: what the CPU's f16 KV cache (--kv-type f16) buys in decode speed, against
# the f32 cache, on the smollm2-135m-shaped dummy in Q4_0, Q8_0 and F32 (the copies
# bench/engine_cpu.sh writes), at a short and a long context. The two KV types alternate
# run by run (the VM's bandwidth moves by 2x over seconds); per (type, context, batch) it
# prints the median tok/s of each and the median and range of the per-round ratio
# f16/f32, beside the KV share of the bytes a step reads.
#
#   usage: bash bench/kv_type.sh [BIN (build/twinserve)] [N rounds (5)] [CTXS ("128 1024")]
set -eu
bin=${1:-build/twinserve}
n=${2:-5}
ctxs=${3:-128 1024}
cd "$(dirname "$0")/.."
. bench/lib_models.sh
types="q4_0 q8_0 f32"
smollm2_copies "$bin" $types
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$n"); do
    for t in $types; do
        for c in $ctxs; do
            # which KV type goes first alternates by round
            for k in $([ $((i % 2)) = 1 ] && echo "f32 f16" || echo "f16 f32"); do
                "$bin" bench --model "$models/smollm2-135m_$t.gguf" --batch 1,8 --ctx "$c" \
                    --steps 16 --kv-type "$k" --json > "$out/$t.$c.$k.$i.json"
            done
        done
    done
done
python3 - "$out" "$n" "$types" "$ctxs" <<'PY'
import json, statistics as st, sys
out, n, types, ctxs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def load(t, c, k, i):
    return json.load(open(f"{out}/{t}.{c}.{k}.{i}.json"))
print(f"twinserve bench, smollm2-135m-shaped dummy, f16 against f32 KV cache, {n} rounds "
      f"alternating; medians (ratio: median [min-max] of the per-round f16/f32)")
print(f"{'type':>5} {'ctx':>5} {'batch':>5} {'KV%read':>7} {'f32 tok/s':>10} {'f16 tok/s':>10} "
      f"{'f16/f32':>22}")
for t in types:
    for c in ctxs:
        for bi, b in enumerate((1, 8)):
            a = [load(t, c, "f32", i)["results"][bi] for i in range(1, n + 1)]
            h = [load(t, c, "f16", i)["results"][bi] for i in range(1, n + 1)]
            w = load(t, c, "f32", 1)["weight_bytes"]
            kv = st.median((r["read_bytes_per_step"] - w) / r["read_bytes_per_step"] for r in a)
            ra = [y["tok_per_s"] / x["tok_per_s"] for x, y in zip(a, h)]
            print(f"{t:>5} {c:>5} {b:>5} {100 * kv:6.1f}% "
                  f"{st.median(x['tok_per_s'] for x in a):10.1f} "
                  f"{st.median(x['tok_per_s'] for x in h):10.1f} "
                  f"{st.median(ra):8.3f} [{min(ra):.3f}-{max(ra):.3f}]")
PY

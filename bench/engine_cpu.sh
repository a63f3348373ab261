#!/usr/bin/env bash
# Engine (CPU) throughput per weight type against the machine's roofs (issues #4 and #16).
#
# The same model in five types: `twinserve quantize` writes dummy:smollm2-135m (seed 1,
# ~135M params) as GGUF in F32, F16, BF16, Q8_0 and Q4_0 (kept in MODELS, default
# $TMPDIR/twin_engine_cpu, made once: ~1.3 GB). Then N rounds (default 3); each round runs
# `twinserve bench` once per type, in an order that rotates every round (so that no type
# always runs first or last on a shared machine): decode at batch 1, 8 and 32 (context 128,
# 16 steps), then a 512-token prefill (median of 2 after a warm-up). Printed per type,
# medians over the rounds: bytes per weight as the products read them, the weights' MB,
# the measured read bandwidth and the memory roof at batch 1 (bandwidth / weight bytes),
# decode tok/s at each batch size, batch 1 as a fraction of its own type's roof (b1/roof:
# against the roof measured once before the run; b1/pair: against read passes beside each
# quarter of the run, which see the same phase of a shared machine's load), and prefill
# tok/s; then each type's tok/s over F32's in the same round (median and range of the
# rounds: the comparison the targets ask for, less exposed to the machine's phases).
# With --weights f32 (any extra option is passed to bench) every type runs dequantised at
# load: the fp32 path.
# Targets (issue #16): batch 1 at >= 80% of its type's roof; prefill and batched decode no
# slower than F32.
#
#   usage: bash bench/engine_cpu.sh [BIN] [N] [extra bench options...]
set -eu
bin=${1:-build/twinserve}
n=${2:-3}
shift $(( $# > 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
. bench/lib_models.sh
types="f32 f16 bf16 q8_0 q4_0"
smollm2_copies "$bin" $types
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
extra=("$@")
set -- $types
for i in $(seq 1 "$n"); do
    for j in $(seq 0 $(($# - 1))); do
        k=$(( (i + j) % $# + 1 ))
        t=${!k}
        m="$models/smollm2-135m_$t.gguf"
        "$bin" bench --model "$m" --batch 1,8,32 --ctx 128 --steps 16 --json "${extra[@]}" \
            > "$out/$t.$i.json"
        "$bin" bench --model "$m" --prefill 512 --steps 2 --json "${extra[@]}" > "$out/$t.$i.pf.json"
    done
done
python3 - "$out" "$n" "$types" <<'PY'
import json, statistics, sys
d, n, types = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
med = statistics.median
r0 = json.load(open(f"{d}/{types[0]}.1.json"))
print(f"twinserve bench, smollm2-135m-shaped dummy ({r0['params']/1e6:.1f}M params) in each type, "
      f"backend {r0['backend']}, {r0['threads']} threads, context {r0['ctx']}, {r0['steps']} "
      f"steps, prefill 512; medians of {n} rounds, types alternating")
print(f"{'type':>5} {'B/weight':>8} {'MB':>6} {'read_GB/s':>9} {'roof_b1':>8} {'b1':>7} "
      f"{'b1/roof':>7} {'b1/pair':>7} {'b8':>7} {'b32':>7} {'prefill':>8}   b1 per round")
for t in types:
    rs = [json.load(open(f"{d}/{t}.{i}.json")) for i in range(1, n + 1)]
    res = lambda b: [next(x for x in r['results'] if x['batch'] == b) for r in rs]
    b1 = [x['tok_per_s'] for x in res(1)]
    print(f"{rs[0]['weight_type']:>5} {med(r['bytes_per_weight'] for r in rs):8.3f} "
          f"{med(r['weight_bytes'] for r in rs)/1e6:6.0f} {med(r['mem_bw_gbs'] for r in rs):9.1f} "
          f"{med(r['mem_roof_tok_per_s_batch1'] for r in rs):8.1f} {med(b1):7.1f} "
          f"{100*med(x['frac_mem_roof'] for x in res(1)):6.1f}% "
          f"{100*med(x['frac_mem_roof_paired'] for x in res(1)):6.1f}% "
          f"{med(x['tok_per_s'] for x in res(8)):7.1f} {med(x['tok_per_s'] for x in res(32)):7.1f} "
          f"{med(json.load(open(f'{d}/{t}.{i}.pf.json'))['prefill']['tok_per_s'] for i in range(1, n + 1)):8.1f}"
          f"   " + " ".join(f"{x:.1f}" for x in b1))
# Against F32 round by round (the types of a round run within a minute of each other, so
# a ratio sees one phase of a shared machine's load, where the medians above mix phases)
tok = lambda t, i, b: next(x['tok_per_s'] for x in json.load(open(f"{d}/{t}.{i}.json"))['results']
                           if x['batch'] == b)
pf = lambda i, t: json.load(open(f"{d}/{t}.{i}.pf.json"))['prefill']['tok_per_s']
print(f"\nagainst {types[0].upper()}, the same round: median ratio [min-max] of {n} rounds")
print(f"{'type':>5} {'b1':>18} {'b8':>18} {'b32':>18} {'prefill':>18}")
for t in types[1:]:
    cols = []
    for f in (lambda i, u: tok(u, i, 1), lambda i, u: tok(u, i, 8), lambda i, u: tok(u, i, 32), pf):
        r = [f(i, t) / f(i, types[0]) for i in range(1, n + 1)]
        cols.append(f"{med(r):5.2f} [{min(r):.2f}-{max(r):.2f}]")
    print(f"{t.upper():>5} " + " ".join(f"{c:>18}" for c in cols))
PY

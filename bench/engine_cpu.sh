#!/usr/bin/env bash
# Engine (CPU) decode throughput against the machine's roofs (issue #4): runs
# `twinserve bench` N times (default 5) on dummy:smollm2-135m (fp32, ~0.54 GB of weights)
# and prints the median of each figure: the measured memory read bandwidth and sgemm rate
# (the roofs, measured by each run itself), and per batch size the decode tokens/s, the
# weight-read bandwidth it implies and its fractions of the memory and compute roofs.
# Targets: batch 1 at >= 70% of the memory roof; batch 32 at >= 60% of the compute roof.
#
#   usage: bash bench/engine_cpu.sh [BIN] [N] [extra bench options...]
set -eu
bin=${1:-build/twinserve}
n=${2:-5}
shift $(( $# > 2 ? 2 : $# ))
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for i in $(seq 1 "$n"); do
    "$bin" bench --model dummy:smollm2-135m --batch 1,8,16,32 --ctx 128 --steps 16 --json "$@" \
        > "$out/run$i.json"
done
python3 - "$out" "$n" <<'PY'
import json, statistics, sys, glob
runs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/run*.json"))]
med = statistics.median
r0 = runs[0]
print(f"twinserve bench, {r0['model']} ({r0['weight_bytes']/1e6:.0f} MB fp32 weights, "
      f"{r0['params']/1e6:.1f}M params), backend {r0['backend']}, {r0['threads']} threads, "
      f"context {r0['ctx']}, {r0['steps']} steps; medians of {len(runs)} runs")
bw = [r['mem_bw_gbs'] for r in runs]; gf = [r['sgemm_gflops'] for r in runs]
print(f"  memory read bandwidth  {med(bw):7.1f} GB/s      runs: " + " ".join(f"{x:.1f}" for x in bw))
print(f"  sgemm rate             {med(gf):7.1f} GFLOP/s  runs: " + " ".join(f"{x:.1f}" for x in gf))
print(f"  memory roof (batch 1)  {med(r['mem_roof_tok_per_s_batch1'] for r in runs):7.1f} tok/s"
      f"   compute roof {med(r['compute_roof_tok_per_s'] for r in runs):.1f} tok/s")
print(f"  {'batch':>5} {'tok/s':>9} {'step_ms':>8} {'weight_GB/s':>11} {'of_mem_roof':>11} "
      f"{'of_compute_roof':>15}   tok/s per run")
for i, row in enumerate(r0['results']):
    rs = [r['results'][i] for r in runs]
    print(f"  {row['batch']:5d} {med(x['tok_per_s'] for x in rs):9.1f} "
          f"{med(x['step_ms'] for x in rs):8.2f} {med(x['weight_gbs'] for x in rs):11.2f} "
          f"{100*med(x['frac_mem_roof'] for x in rs):10.1f}% "
          f"{100*med(x['frac_compute_roof'] for x in rs):14.1f}%   "
          + " ".join(f"{x['tok_per_s']:.1f}" for x in rs))
PY

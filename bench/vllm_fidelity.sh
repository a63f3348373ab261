#!/usr/bin/env bash
# bench/vllm_fidelity.sh: the vLLM twin held against real vLLM runs on H100 (issue #27).
#
#  1. Imports every experiment folder of shared/data/vllm-h100 (import --inference-perf):
#     Llama-2-7B at TP 1 and Mixtral-8x7B at TP 2, four workloads each.
#  2. Fits the serving profile to all of them the way the shipped one was fitted
#     (calibrate --serving, --skip-warmup 10), with leave-one-experiment-out: each run's
#     fold is the whole search on the other runs, its profile kept (--loo-dir).
#  3. Validates every run with its held-out profile (the run never seen by the fit) and a
#     prediction band of the profile's own held-out step error (--band); the overloaded runs
#     (client timeouts: censored latencies; never fitted to) with the full fit. Then the
#     same replays with --serving none (the bare GPU) and with the roofline, for contrast,
#     and with the shipped profile (what a user gets: in sample).
#  4. The table per stage: mean TTFT and E2E, p99 TTFT and E2E, TPOT and ITL (the client's
#     definitions) errors, the stage MAPE, the band's verdict; the issue's targets (means
#     within 10%, p99 within 15%, stage MAPE <= 10%, no predicted collapse where vLLM held)
#     counted; the contrasts' MAPE beside; and the warm-up left in, for honesty.
#
#   usage: bash bench/vllm_fidelity.sh [BIN] [OUTDIR]
#   env:   VF_JOBS (2) replays in parallel; VF_SKIP (10) warm-up seconds left out
# Takes ~40 min on 2 cores (the leave-one-out search is 6 fits of ~160 replays). Needs
# ../shared/data (or TWIN_DATA); prints SKIP without it.
set -u
bin=${1:-build/twinserve}
out=${2:-/tmp/twin-vllm-fidelity}
cd "$(dirname "$0")/.." || exit 2
case $bin in /*) ;; *) bin=$PWD/$bin ;; esac
data=${TWIN_DATA:-../shared/data}/vllm-h100
jobs=${VF_JOBS:-2}
skip=${VF_SKIP:-10}
[ -d "$data" ] || { echo "SKIP: $data not found (set TWIN_DATA)"; exit 0; }
mkdir -p "$out"
db=$out/runs.db
rm -f "$db" "$db"-journal
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# the throwaway replays' databases: memory-backed where there is one
[ -z "${TMPDIR:-}" ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm

for d in "$data"/*/; do
    [ -f "$d/replay.json" ] || continue
    name=$(basename "$d" | sed 's/^[0-9]*-[0-9]*-//')      # the date off: llama-2-7b-tp1-codegen
    "$bin" import --db "$db" --inference-perf "$d" --hw h100 --name "$name" >/dev/null || exit 1
done
runs=$(sqlite3 "$db" "SELECT name FROM runs WHERE kind = 'measured' ORDER BY id")
log "imported: $(echo $runs)"

log "calibrate --serving --loo (the shipped method)"
"$bin" calibrate --serving --db "$db" -j "$jobs" --skip-warmup "$skip" \
    --loo-dir "$out/loo" --out "$out/vllm.serving" > "$out/calibrate.txt" || exit 1
sed -n '1,/^--- /p' "$out/calibrate.txt" | sed '$d'

for r in $runs; do
    prof=$out/loo/$r.serving
    [ -f "$prof" ] || prof=$out/vllm.serving        # overloaded: never fitted to
    log "validate $r (held out, with its band)"
    "$bin" validate --db "$db" --run "$r" --serving "$prof" --band --skip-warmup "$skip" \
        --json -q > "$out/$r.loo.json" || exit 1
    "$bin" validate --db "$db" --run "$r" --skip-warmup "$skip" --json -q \
        > "$out/$r.shipped.json" || exit 1
    "$bin" validate --db "$db" --run "$r" --serving none --skip-warmup "$skip" \
        --json -q > "$out/$r.none.json" || exit 1
    "$bin" validate --db "$db" --run "$r" --roofline --skip-warmup "$skip" \
        --json -q > "$out/$r.roof.json" || exit 1
    "$bin" validate --db "$db" --run "$r" --serving "$prof" --json -q \
        > "$out/$r.warm.json" || exit 1
done

python3 - "$out" $runs <<'PY'
import json, os, sys
out, runs = sys.argv[1], sys.argv[2:]
def load(r, kind):
    return json.load(open(os.path.join(out, "%s.%s.json" % (r, kind))))
def met(stage, name):
    for m in stage["metrics"]:
        if m["name"] == name:
            return m
    return None
def pct(x):
    return "%+6.1f%%" % (100 * x) if x is not None else "     -"
cols = ("TTFT mean", "E2E mean", "TTFT p99", "E2E p99", "TPOT mean (ip)", "ITL p75 (ip)")
print("\nheld out (each run predicted by the fit on the others), warm-up %s s left out; "
      "[band] in/OUT per metric" % os.environ.get("VF_SKIP", "10"))
print("%-34s %-6s " % ("run", "stage") + " ".join("%15s" % c for c in cols) +
      " %8s %8s %8s %8s %7s" % ("MAPE", "shipped", "none", "roofline", "band"))
ok = {"mean": [], "p99": [], "mape": [], "collapse": []}
band_in = band_n = 0
apart = []
for r in runs:
    v = load(r, "loo")
    others = {k: load(r, k) for k in ("shipped", "none", "roof")}
    for i, g in enumerate(v["stages"]):
        if g["overloaded"]:
            apart.append((r, g))
            continue
        cells = []
        for c in cols:
            m = met(g, c)
            if m is None:
                cells.append("%15s" % "-")
                continue
            tag = "" if "inside" not in m else (" in" if m["inside"] else " OUT")
            cells.append("%15s" % (pct(m["error"]) + tag))
            if c in ("TTFT mean", "E2E mean"):
                ok["mean"].append(abs(m["error"]) <= 0.10)
            if c in ("TTFT p99", "E2E p99"):
                ok["p99"].append(abs(m["error"]) <= 0.15)
        ok["mape"].append(g["mape"] <= 0.10)
        ok["collapse"].append(g["failed_predicted"] == 0)
        n_in = sum(1 for m in g["metrics"] if m.get("inside"))
        band_in += n_in
        band_n += len(g["metrics"])
        contrast = [others[k]["stages"][i]["mape"] for k in ("shipped", "none", "roof")]
        print("%-34s %-6d " % (r, g["stage"]) + " ".join(cells) + " %7.2f%% " % (100 * g["mape"]) +
              " ".join("%7.1f%%" % (100 * x) for x in contrast) + " %3d/%-3d" % (n_in, len(g["metrics"])))
print()
for k, label in (("mean", "mean TTFT and E2E within 10%"), ("p99", "p99 TTFT and E2E within 15%"),
                 ("mape", "stage MAPE <= 10%"), ("collapse", "no predicted collapse where vLLM held")):
    print("  %-40s %d of %d" % (label, sum(ok[k]), len(ok[k])))
b = json.load(open(os.path.join(out, runs[0] + ".loo.json"))).get("band", {})
print("  %-40s %d of %d stage metrics (width +-%.1f%%: %s)" % (
    "band coverage (measured inside)", band_in, band_n, 100 * b.get("err", float("nan")),
    b.get("source", "?")))
print("\noverloaded stages, reported apart (latencies censored by the client's 300 s timeout):")
for r, g in apart:
    e2e, itl = met(g, "E2E mean"), met(g, "ITL p75 (ip)")
    print("  %-34s stage %d: %d of %d failed measured, %d predicted; mean E2E %s, ITL p75 %s" % (
        r, g["stage"], g["failed_measured"], g["count"], g["failed_predicted"],
        pct(e2e["error"]) if e2e else "-", pct(itl["error"]) if itl else "-"))
print("\nthe warm-up left in (stage MAPE held out, all requests):")
for r in runs:
    w, v = load(r, "warm"), load(r, "loo")
    print("  %-34s " % r + "  ".join("stage %d %6.2f%% (vs %.2f%%)" % (g["stage"], 100 * g["mape"],
          100 * h["mape"]) for g, h in zip(w["stages"], v["stages"]) if not g["overloaded"]))
PY

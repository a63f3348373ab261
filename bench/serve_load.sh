#!/usr/bin/env bash
# Server throughput and TTFT of `twinserve serve` on stories260K over 127.0.0.1 (issue #15
# item 3), measured by bench/serve_load.mjs (node 20): CONC concurrent streaming clients
# send completions back to back (max_tokens 128, temperature 0.8, prompt "Once upon a
# time") for DUR seconds; every answer is checked as well-formed (the script fails if any
# is not). Each concurrency runs N times (default 2) in an order that goes up then down
# (1 4 16 16 4 1 ...), so that no level always runs first on a shared machine; printed per
# concurrency: the median over its runs of output tokens/s, requests/s, and client-side
# TTFT p50/p90 and E2E p50 (ms). The server runs with --threads 1 (one core for the
# engine, the other for the clients, on a 2-core machine).
#
#   usage: bash bench/serve_load.sh [BIN] [N] [DUR] [CONC...]
set -eu
bin=${1:-build/twinserve}
n=${2:-2}
dur=${3:-5}
shift $(( $# > 3 ? 3 : $# ))
concs=${*:-1 4 16}
cd "$(dirname "$0")/.."
model=${TWIN_DATA:-../shared/data}/models/stories260K.bin
[ -f "$model" ] || { echo "serve_load: $model not found (set TWIN_DATA)" >&2; exit 1; }
out=$(mktemp -d "${TMPDIR:-/tmp}/serve_load.XXXXXX")
"$bin" serve --model "$model" --port 0 --threads 1 --db "$out/serve.db" >"$out/server.out" 2>"$out/server.err" &
spid=$!
trap 'kill "$spid" 2>/dev/null; wait "$spid" 2>/dev/null; rm -rf "$out"' EXIT
url=''
for _ in $(seq 200); do
    port=$(grep -o 'http://127.0.0.1:[0-9]*' "$out/server.err" 2>/dev/null | cut -d: -f3 || true)
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then
        url=http://127.0.0.1:$port
        break
    fi
    sleep 0.1
done
[ -n "$url" ] || { echo "serve_load: the server did not start: $(cat "$out/server.err")" >&2; exit 1; }
order=()
for ((r = 0; r < n; r++)); do
    if ((r % 2 == 0)); then order+=($concs); else order+=($(printf '%s\n' $concs | tac)); fi
done
for c in "${order[@]}"; do
    node bench/serve_load.mjs --url "$url" --concurrency "$c" --duration "$dur" \
        --max-tokens 128 >>"$out/runs.jsonl"
done
python3 - "$out/runs.jsonl" "$n" "$dur" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"twinserve serve, stories260K, --threads 1, {sys.argv[2]} runs of {sys.argv[3]} s per "
      "concurrency (medians); client-side times")
print(f"{'clients':>7} {'out tok/s':>10} {'req/s':>7} {'TTFT p50':>9} {'TTFT p90':>9} "
      f"{'E2E p50':>8} {'answers':>8}")
for c in sorted({r["concurrency"] for r in runs}):
    rs = [r for r in runs if r["concurrency"] == c]
    med = lambda f: statistics.median(f(r) for r in rs)
    print(f"{c:>7} {med(lambda r: r['tokens_per_s']):>10.0f} {med(lambda r: r['requests_per_s']):>7.1f} "
          f"{med(lambda r: r['ttft_ms']['p50']):>7.1f}ms {med(lambda r: r['ttft_ms']['p90']):>7.1f}ms "
          f"{med(lambda r: r['e2e_ms']['p50']):>6.0f}ms {sum(r['complete'] for r in rs):>8}")
EOF

#!/usr/bin/env bash
# The engine's noise floor: N identical replays (same trace slice, policy, seed) of the Azure
# code trace on the CPU engine, for dummy:smollm2-135m and stories260K, their runs
# alternated, and per model the p50 and p99 of TTFT, TPOT and E2E of each run with their
# spread over the runs, (max - min) / median; plus each run's median step time (steps.dur_s),
# the median time of its small decode-only steps (at most 2 sequences: how fast the machine
# was during that run, apart from batching), and the p50 / p99 of steps.host_s (the CPU-side
# time before each pass), with their spread. The simulator is validated against such runs,
# so this spread is the resolution of any sim-vs-engine comparison.
#
#   usage: bash bench/engine_noise.sh [BIN[:BIN2...]] [N]     (N defaults to 5)
#          NOISE_KEEP=DIR keeps every run's database in DIR, for a closer look
#
# With several binaries (colon-separated: an old and a new build), every round runs each
# model on each binary in turn, so old and new see the same minutes of a shared machine;
# the figures are then given per binary.
#
# The slices. The code trace is very bursty (10-second windows hold 0 to 300 requests), so
# each model replays a stretch that starts where requests do, at a rate that loads it to
# about half of what it can serve: saturated (every request at once) smollm2 serves 4.4
# requests/s and stories260K 106/s on this machine, and the "busy" column below (host plus
# pass time over the run's span) comes out at 42-55%. Loaded enough that queueing shows in
# TTFT and E2E as in a real replay; not more, because in a burst the queue then feeds on
# itself and the replay turns bistable (below). Prompts and outputs are clipped so that a
# run takes 30-60 s on 2 cores: long enough for hundreds of requests and a thousand steps
# or more, short enough for 2 x N runs in one quiet stretch of a shared machine.
#   smollm2: prefill costs 0.6-1 ms per token here (fp32, 2 threads): prompts clipped to
#     128 tokens, outputs to 16 (the trace's median output is 13); 150 requests from
#     t = 1320 s at the trace's rate (4.3 requests/s on average), a 35 s span after 5-15 s
#     of setup. --max-tokens 512 caps a step at 4 prompts (about 0.4 s): with the default
#     2048, a burst admitted at once made 1-s steps that every later arrival waited for, and
#     whether that happened depended on a few ms of timing: identical runs gave mean TTFTs
#     of 188 and 418 ms. With the cap, 205-208 ms.
#   stories260K: its context is 512 tokens: prompts clipped to 256, outputs to 64; 2000
#     requests from t = 1680 s at 15x (50 requests/s), a 41 s span.
set -eu
bins=${1:-build/twinserve}
n=${2:-5}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
trace=$data/traces/AzureLLMInferenceTrace_code.csv
[ -f "$trace" ] || { echo "SKIP: $trace not found (see make data)"; exit 0; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
keep=${NOISE_KEEP:-}   # a folder to keep each run's database in (NAME-BIN-ROUND.db)
IFS=: read -r -a binv <<<"$bins"
for b in "${binv[@]}"; do [ -x "$b" ] || { echo "no such binary: $b" >&2; exit 2; }; done

# name|model|start s|limit|rate scale|max prompt|max output|engine options
models=("smollm2|dummy:smollm2-135m|1320|150|1.0|128|16|--max-tokens 512")
stories=$data/models/stories260K.bin
[ -f "$stories" ] && models+=("stories260K|$stories|1680|2000|15|256|64|") ||
    echo "SKIP: $stories not found: smollm2 only"

machine() { # the load and the busiest processes, so a noisy machine shows in the output
    echo "  $(uptime | sed 's/^ *//')"
    ps -eo pcpu,etime,args --sort=-pcpu | sed -n '2,4p' | cut -c1-100 | sed 's/^/    /'
}
loadavg() { cut -d' ' -f1 /proc/loadavg; }

# Nearest-rank percentile of a column over a table's rows of run 1 (each database holds one
# run), NULLs left out: pct DB TABLE EXPR WHERE Q
pct() {
    sqlite3 "$1" "SELECT $3 FROM $2 WHERE $4 AND $3 IS NOT NULL ORDER BY $3 LIMIT 1 OFFSET
                  (SELECT CAST($5 * (COUNT(*) - 1) AS INT) FROM $2 WHERE $4 AND $3 IS NOT NULL)"
}

# One run: appends a line of figures (ms; host_s in us) to $out/NAME.BINIDX
run_one() { # NAME MODEL START LIMIT RATE PROMPT OUTPUT OPTIONS BINIDX ROUND
    local name=$1 model=$2 start=$3 limit=$4 rate=$5 mp=$6 mo=$7 opts=$8 bi=$9 round=${10}
    local db=$out/$name-$bi-$round.db l0 l1 fin="status = 'finished'"
    l0=$(loadavg)
    "${binv[$bi]}" engine --trace "$trace" --policy policies/continuous.lua --model "$model" \
        --start "$start" --limit "$limit" --rate-scale "$rate" --max-prompt "$mp" --max-output "$mo" \
        $opts --seed 1 --db "$db" -q
    l1=$(loadavg)
    local row=("$round" "$l0" "$l1")
    row+=("$(sqlite3 "$db" "SELECT printf('%.0f', 100 * SUM(dur_s + host_s) / MAX(start_s + dur_s))
                             FROM steps")")
    for col in ttft_s tpot_s e2e_s; do
        for q in 0.5 0.99; do row+=("$(pct "$db" requests "1e3 * $col" "$fin" "$q")"); done
    done
    row+=("$(pct "$db" steps "1e3 * dur_s" 1 0.5)")
    row+=("$(pct "$db" steps "1e3 * dur_s" "prefill_tokens = 0 AND num_seqs <= 2" 0.5)")
    row+=("$(pct "$db" steps "1e6 * host_s" 1 0.5)" "$(pct "$db" steps "1e6 * host_s" 1 0.99)")
    row+=("$(sqlite3 "$db" "SELECT COUNT(*) FROM steps")" "$(sqlite3 "$db" "SELECT wall_s FROM runs")")
    echo "${row[*]}" >>"$out/$name.$bi"
    if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$db" "$keep/"; fi
}

echo "Engine noise floor: CPU engine ($(nproc) cores), Azure code trace, continuous batching, seed 1; $n rounds"
echo "before:"
machine
for round in $(seq 1 "$n"); do
    for m in "${models[@]}"; do
        IFS='|' read -r name model start limit rate mp mo opts <<<"$m"
        for bi in "${!binv[@]}"; do
            run_one "$name" "$model" "$start" "$limit" "$rate" "$mp" "$mo" "$opts" "$bi" "$round"
        done
    done
done
echo "after:"
machine

# Fields 5-14 of a run line are the figures whose median and spread are reported.
summary='
function med(a, k,   t, i, j, x) {   # median of a[1..k]
    for (i = 1; i <= k; i++) t[i] = a[i]
    for (i = 2; i <= k; i++) { x = t[i]; for (j = i - 1; j >= 1 && t[j] > x; j--) t[j + 1] = t[j]; t[j + 1] = x }
    return k % 2 ? t[(k + 1) / 2] : (t[k / 2] + t[k / 2 + 1]) / 2
}
{
    printf "  %5d %5.2f %5.2f %4s%%", $1, $2, $3, $4
    for (c = 5; c <= 14; c++) { v[c, NR] = $c; printf " %8.2f", $c }
    printf " %6d %6.1f\n", $15, $16
}
END {
    printf "  %-23s", "median"
    for (c = 5; c <= 14; c++) { for (r = 1; r <= NR; r++) a[r] = v[c, r]; m[c] = med(a, NR); printf " %8.2f", m[c] }
    printf "\n  %-23s", "spread (max-min)/med"
    for (c = 5; c <= 14; c++) {
        lo = hi = v[c, 1]
        for (r = 2; r <= NR; r++) { if (v[c, r] < lo) lo = v[c, r]; if (v[c, r] > hi) hi = v[c, r] }
        printf " %7.1f%%", (m[c] > 0 ? 100 * (hi - lo) / m[c] : 0)   # ( ): not a redirection
    }
    printf "\n"
}'
for m in "${models[@]}"; do
    IFS='|' read -r name model start limit rate mp mo opts <<<"$m"
    for bi in "${!binv[@]}"; do
        echo
        echo "$name: $model, $limit requests from t = $start s at ${rate}x, prompts <= $mp, outputs <= $mo tokens${opts:+, $opts}; ${binv[$bi]}"
        printf '  %5s %5s %5s %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %6s %6s\n' run load0 \
            load1 busy TTFT50 TTFT99 TPOT50 TPOT99 E2E50 E2E99 step50 dec50 host50 host99 steps wall
        awk "$summary" "$out/$name.$bi"
    done
done
echo
echo "(ms, host50/host99 in us; dec50: median decode-only step of at most 2 sequences; load0/load1:"
echo " 1-minute load average before/after the run; busy: host + pass time over the run's span; wall:"
echo " the whole command, setup included)"

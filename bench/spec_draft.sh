#!/usr/bin/env bash
# Draft-model speculative decoding on the engine (issue #15 item 1): stories260K as the
# target, its own Q8_0 and Q4_0 copies (`twinserve quantize`), itself, and the n-gram
# proposer as drafts, against plain continuous batching; greedy and sampled (temperature
# 0.8). N rounds, the sides alternated (their order rotates each round), medians quoted.
#
#   usage: bash bench/spec_draft.sh [BIN] [N]     (N defaults to 3)
#
# Workload: 16 requests, one every 0.2 s (low load: mostly one request decoding at a time,
# where speculation is meant to help), prompts of 48 tokens, 160 output tokens; CPU
# backend, 1 thread; speculative.lua with k = 4.
#
# Per side: acceptance (accepted / proposed drafts), the pooled alpha of the per-position
# curve (calibrate's), tokens per verification, steps, mean step time (draft passes
# included), p50 TPOT and the speed-up in p50 TPOT over plain decoding. Check, printed:
# the greedy outputs of every side are identical token for token to plain decoding's.
set -eu
bin=${1:-build/twinserve}
n=${2:-3}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
model=$data/models/stories260K.bin
[ -f "$model" ] || { echo "SKIP: $model not found (see make data)"; exit 0; }
[ -x "$bin" ] || { echo "no such binary: $bin" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

sides=(plain ngram self)
for t in q8_0 q4_0; do
    if "$bin" quantize "$model" "$out/$t.gguf" --type "$t" >/dev/null 2>&1; then
        sides+=("$t")
    else
        echo "note: no $t draft (twinserve quantize failed or is missing)"
    fi
done
{
    echo "arrival_s,prompt_tokens,output_tokens"
    for i in $(seq 0 15); do echo "$(awk "BEGIN{print $i * 0.2}"),48,160"; done
} >"$out/trace.csv"

run_one() { # SIDE TEMPERATURE ROUND
    local db=$out/$1-$2-$3.db args=(--policy policies/speculative.lua --set k=4)
    case $1 in
    plain) args=(--policy policies/continuous.lua) ;;
    ngram) args+=(--draft ngram) ;;
    self) args+=(--draft "$model") ;;
    *) args+=(--draft "$out/$1.gguf") ;;
    esac
    "$bin" engine --trace "$out/trace.csv" --model "$model" "${args[@]}" --threads 1 \
        --temperature "$2" --top-p 0.95 --seed 1 --save-tokens --db "$db" -q 2>/dev/null
    sqlite3 -separator ' ' "$db" "
        SELECT printf('%.3f', coalesce(1.0 * SUM(spec_accepted) / NULLIF(SUM(spec_proposed), 0), 0)),
               (SELECT printf('%.3f', coalesce((SELECT SUM(a.value) FROM json_each(config,
                    '\$.spec_curve.accepted') a) * 1.0 / NULLIF((SELECT SUM(r.value) FROM
                    json_each(config, '\$.spec_curve.reached') r), 0), 0)) FROM runs),
               (SELECT printf('%.2f', 1 + coalesce((SELECT SUM(a.value) FROM json_each(config,
                    '\$.spec_curve.accepted') a) * 1.0 / json_extract(config,
                    '\$.spec_curve.proposed[0]'), 0)) FROM runs),
               (SELECT COUNT(*) FROM steps),
               (SELECT printf('%.3f', 1e3 * AVG(dur_s)) FROM steps),
               (SELECT printf('%.3f', 1e3 * tpot_s) FROM requests WHERE tpot_s IS NOT NULL
                  ORDER BY tpot_s LIMIT 1 OFFSET (SELECT (COUNT(*) - 1) / 2 FROM requests
                                                  WHERE tpot_s IS NOT NULL))
        FROM requests" >>"$out/$1-$2"
}

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "draft speculation on the engine: stories260K, 16 requests at 5/s, k = 4, $n rounds"
echo "  columns: acceptance, alpha, tokens/verification, steps, mean step ms, p50 TPOT ms, speed-up"
for temp in 0 0.8; do
    for r in $(seq 1 "$n"); do
        # rotate the order each round, so no side always runs first (or after the same one)
        k=${#sides[@]}
        for i in $(seq 0 $((k - 1))); do run_one "${sides[$(((i + r) % k))]}" "$temp" "$r"; done
    done
    echo "temperature $temp (load $(cut -d' ' -f1 /proc/loadavg)):"
    base=$(cut -d' ' -f6 "$out/plain-$temp" | median)
    for s in "${sides[@]}"; do
        line=""
        for c in 1 2 3 4 5 6; do line+="$(cut -d' ' -f$c "$out/$s-$temp" | median) "; done
        tpot=$(cut -d' ' -f6 "$out/$s-$temp" | median)
        printf '  %-6s %s x%.2f\n' "$s" "$line" "$(awk "BEGIN{print $base / $tpot}")"
    done
done
same=yes
for s in "${sides[@]}"; do
    d=$(sqlite3 "$out/$s-0-1.db" "ATTACH '$out/plain-0-1.db' AS p;
        SELECT COUNT(*) FROM (SELECT req_id, idx, token_id FROM tokens EXCEPT
                              SELECT req_id, idx, token_id FROM p.tokens)")
    [ "$d" = 0 ] || { same=no; echo "  $s: $d greedy tokens differ from plain decoding"; }
done
echo "greedy outputs identical to plain decoding on every side: $same"

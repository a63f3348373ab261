#!/usr/bin/env bash
# Prefix caching on the engine, on a slice of the Mooncake conversation trace (its hash_ids
# name each 512-token block of a prompt by its whole prefix): the same slice replayed with
# and without --prefix-caching, N rounds, the two sides alternated, medians quoted.
#
#   usage: bash bench/prefix_mooncake.sh [BIN] [N]     (N defaults to 3)
#
# Model: dummy:bench/mini-8k.model (4 layers, d_model 128, 8k context, fp32) on the CPU
# backend, 1 thread. Slice: the trace's first 60 requests at their own times, prompts
# clipped to 2048 tokens (4 hash blocks; the clip keeps the leading ids) and outputs to 32,
# continuous batching with a 4096-token step budget, 4096 KV blocks. The engine saturates
# on it (about 2,700 prompt tokens/s here against ~5,800/s offered), so TTFT is mostly
# queueing and shows the capacity caching frees.
#
# Per run: cached prompt tokens, prefill tokens computed (steps.prefill_tokens), summed
# step time, mean and p50 TTFT, makespan. Checks, printed: the engine's cached tokens equal
# the simulator's on the same slice, policy and KV pool; the greedy outputs of round 1 are
# identical token for token with and without caching.
set -eu
bin=${1:-build/twinserve}
n=${2:-3}
cd "$(dirname "$0")/.."
data=${TWIN_DATA:-../shared/data}
trace=$data/traces/mooncake_conversation_trace.jsonl
[ -f "$trace" ] || { echo "SKIP: $trace not found (see make data)"; exit 0; }
[ -x "$bin" ] || { echo "no such binary: $bin" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
slice=(--trace "$trace" --policy policies/continuous.lua --limit 60 --max-prompt 2048
       --max-output 32 --max-tokens 4096 --kv-blocks 4096 --seed 1)
model=bench/mini-8k.model

"$bin" sim "${slice[@]}" --model "$model" --prefix-caching --db "$out/sim.db" -q
sim_cached=$(sqlite3 "$out/sim.db" "SELECT SUM(cached_tokens) FROM requests")

# One engine run into $out/SIDE-ROUND.db; appends its figures to $out/SIDE
run_one() { # SIDE(off|on) ROUND
    local db=$out/$1-$2.db flag=
    [ "$1" = on ] && flag=--prefix-caching
    "$bin" engine "${slice[@]}" --model "dummy:$model" --threads 1 --save-tokens $flag \
        --db "$db" -q
    sqlite3 -separator ' ' "$db" "
        SELECT (SELECT SUM(cached_tokens) FROM requests),
               (SELECT SUM(prompt_tokens) FROM requests),
               (SELECT SUM(prefill_tokens) FROM steps),
               (SELECT printf('%.2f', SUM(dur_s)) FROM steps),
               (SELECT printf('%.2f', AVG(ttft_s)) FROM requests WHERE status = 'finished'),
               (SELECT printf('%.2f', ttft_s) FROM requests WHERE status = 'finished'
                  ORDER BY ttft_s LIMIT 1 OFFSET (SELECT (COUNT(*) - 1) / 2 FROM requests
                                                  WHERE status = 'finished')),
               (SELECT printf('%.2f', MAX(start_s + dur_s)) FROM steps)" >>"$out/$1"
    echo "  round $2 $1: $(tail -1 "$out/$1")  (load $(cut -d' ' -f1 /proc/loadavg))"
}

echo "prefix caching on the engine: Mooncake conversation, first 60 requests, $n rounds"
echo "  columns: cached, prompt tokens, prefill computed, step s, mean TTFT s, p50 TTFT s, makespan s"
for r in $(seq 1 "$n"); do
    if [ $((r % 2)) -eq 1 ]; then run_one off "$r"; run_one on "$r"
    else run_one on "$r"; run_one off "$r"; fi
done

median() { # FILE COLUMN
    cut -d' ' -f"$2" "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
echo
printf '%-22s %12s %12s %8s\n' "median of $n" "no caching" "caching" "ratio"
cols=("cached tokens|1" "prefill computed|3" "summed step time s|4" "mean TTFT s|5"
      "p50 TTFT s|6" "makespan s|7")
for c in "${cols[@]}"; do
    a=$(median "$out/off" "${c#*|}")
    b=$(median "$out/on" "${c#*|}")
    printf '%-22s %12s %12s %8s\n' "${c%|*}" "$a" "$b" \
        "$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "-" }')"
done
eng_cached=$(median "$out/on" 1)
echo
echo "cached tokens: engine $eng_cached, simulator $sim_cached" \
     "($( [ "$eng_cached" = "$sim_cached" ] && echo equal || echo DIFFERENT))"
same=$(sqlite3 "$out/on-1.db" "ATTACH '$out/off-1.db' AS o;
    SELECT COUNT(*) || ' ' || SUM(a.token_id = b.token_id) FROM tokens a
    JOIN o.tokens b ON a.req_id = b.req_id AND a.idx = b.idx")
echo "greedy outputs, round 1: ${same#* } of ${same% *} tokens identical with and without caching"

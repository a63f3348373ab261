#!/usr/bin/env bash
# The prefill/decode disaggregation study of docs/cluster.md (issue #14 item 3): the Azure
# code trace (8,819 requests, mean prompt 2,048 and output 28 tokens) on llama-3-8b / h100,
# 6 GPUs (one replica each) as 6 mixed replicas (chunked prefill) or split 3:3, 2:4 and 4:2
# prefill:decode (chunked prefill on both sides; 50 GB/s links, 20 us latency, one per
# prefill->decode pair), each at arrivals x8 and x12 (the mixed cluster's capacity is near
# x12: its TTFT p99 passes a second there). Prints one table row per run: TTFT and TPOT
# p99, SLO attainment and goodput (requests finished within TTFT <= 1 s and TPOT <= 20 ms,
# per second of makespan), goodput (2) under a decode-bound SLO (TTFT <= 5 s, TPOT <= 12
# ms), and the mean KV transfer (hand-off to landing); writes the figure
# docs/img/disagg_code.png with gnuplot (skipped without it).
#
#   usage: bash bench/disagg_study.sh [BIN] [OUT_DIR]
set -eu
bin=$(realpath "${1:-build/twinserve}")
cd "$(dirname "$0")/.."
trace=${TWIN_DATA:-../shared/data}/traces/AzureLLMInferenceTrace_code.csv
out=${2:-$(mktemp -d)}
mkdir -p "$out"
db=$out/disagg.db
rm -f "$db"
slo=ttft=1,tpot=20ms
slo2=ttft=5,tpot=12ms   # a decode-bound SLO: tokens streamed fast, a slower first one
common=(--trace "$trace" --model llama-3-8b --hw h100 --policy policies/chunked_prefill.lua)

# cluster P D: a cluster file with P prefill and D decode replicas
cluster() {
    printf '[cluster]\nlink_latency_s = 0.00002\nlink_bandwidth_gbps = 50\nlinks = pair\n'
    printf '[group prefill]\ncount = %d\nrole = prefill\n[group decode]\ncount = %d\nrole = decode\n' \
        "$1" "$2"
}

printf '%-10s %5s %12s %12s %11s %14s %14s %12s\n' config rate "TTFT p99" "TPOT p99" attainment \
    "goodput req/s" "goodput (2)" "KV transfer"
: >"$out/table.dat"
for rate in 8 12; do
    for cfg in mixed 3:3 2:4 4:2; do
        name="${cfg/:/p}d-x$rate"
        if [ "$cfg" = mixed ]; then
            "$bin" sim -q --db "$db" --name "$name" "${common[@]}" --rate-scale "$rate" --replicas 6
        else
            cluster "${cfg%:*}" "${cfg#*:}" >"$out/$cfg.conf"
            "$bin" sim -q --db "$db" --name "$name" "${common[@]}" --rate-scale "$rate" \
                --cluster "$out/$cfg.conf"
        fi
        j=$("$bin" report "$db" --run "$name" --json --slo "$slo")
        xfer=$(sqlite3 "$db" "select case when count(kv_transfer_s) > 0
                              then printf('%.2f ms', 1e3 * avg(kv_transfer_s)) else '-' end
                              from requests r join runs u on u.id = r.run_id where u.name = '$name'")
        read -r ttft tpot att good < <(jq -r '[.ttft_s.p99, .tpot_s.p99, .slo.attainment,
                                                .slo.goodput_req_per_s] | @tsv' <<<"$j")
        good2=$("$bin" report "$db" --run "$name" --json --slo "$slo2" |
                jq -r '.slo.goodput_req_per_s')
        printf '%-10s %5s %9.0f ms %9.2f ms %10.1f%% %14.2f %14.2f %12s\n' "$cfg" "x$rate" \
            "$(awk -v v="$ttft" 'BEGIN{print 1e3 * v}')" "$(awk -v v="$tpot" 'BEGIN{print 1e3 * v}')" \
            "$(awk -v v="$att" 'BEGIN{print 100 * v}')" "$good" "$good2" "$xfer"
        echo "$cfg $rate $ttft $tpot $att $good $good2" >>"$out/table.dat"
    done
done

command -v gnuplot >/dev/null || { echo "gnuplot not found: no figure"; exit 0; }
mkdir -p docs/img
gnuplot <<GP
set terminal pngcairo size 1500,420 font ",10"
set output "docs/img/disagg_code.png"
set multiplot layout 1,4 title "Azure code trace, llama-3-8b / h100, 6 GPUs: mixed (chunked prefill) vs prefill:decode splits"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.9
set key below horizontal
set grid ytics
set yrange [0:*]
set ylabel "TTFT p99 (s)"
plot "< awk '\$2==8' $out/table.dat" using 3:xtic(1) title "x8", \
     "< awk '\$2==12' $out/table.dat" using 3 title "x12"
set ylabel "TPOT p99 (ms)"
plot "< awk '\$2==8' $out/table.dat" using (\$4*1e3):xtic(1) title "x8", \
     "< awk '\$2==12' $out/table.dat" using (\$4*1e3) title "x12"
set ylabel "goodput (req/s, TTFT <= 1 s and TPOT <= 20 ms)"
plot "< awk '\$2==8' $out/table.dat" using 6:xtic(1) title "x8", \
     "< awk '\$2==12' $out/table.dat" using 6 title "x12"
set ylabel "goodput (req/s, TTFT <= 5 s and TPOT <= 12 ms)"
plot "< awk '\$2==8' $out/table.dat" using 7:xtic(1) title "x8", \
     "< awk '\$2==12' $out/table.dat" using 7 title "x12"
unset multiplot
GP
echo "figure: docs/img/disagg_code.png"

#!/usr/bin/env bash
# e2e_cluster.sh: end-to-end tests of the simulated cluster (docs/cluster.md).
#
#  1. One replica is today's simulator: the same trace with no flag and with --replicas 1
#     gives identical requests and steps rows.
#  2. Round robin over N replicas at N times the rate gives the one-replica latencies
#     within sampling error (two traces from the same distributions); the shipped
#     round_robin.lua routes exactly as the built-in default.
#  3. Every shipped router runs a cluster to a done run; prefix_affinity raises the
#     cluster's prefix-cache hit rate over round robin on the Mooncake conversation trace
#     (SKIP when absent); both rates and the unlimited-cache bound are printed.
#  4. Records (schema 6): one replicas row per replica, requests and steps name their
#     replica (a router's rejection none); report prints a per-replica breakdown for a
#     cluster only, and its header says how many replicas; plot writes the per-replica
#     load figure (a heatmap and the spread across replicas past 4 of them); compare of
#     cluster runs adds the prefix hit rate and the load imbalance (4.00 when one of 4
#     replicas holds everything), and a single-replica compare neither.
#  5. --cluster FILE: groups with their own model, hardware, tp and params, the router
#     from the file; bad files (an unknown key, a role without replicas, a bad links
#     value) exit 2 naming file:line and record nothing.
#  6. A router's decisions: a reason rejects (recorded as "router: REASON"), "hold" waits
#     for a step to end; bad routers fail the run naming the router file and route's line
#     (an unknown replica, no decision, holding with nothing in flight), and usage
#     mistakes (a missing router, an unknown --set router.KEY, --router without
#     --replicas) exit 2 and record nothing.
#  7. Prefill/decode disaggregation: one request by hand (TTFT = the prefill step;
#     kv_transfer_s = latency + KV bytes / bandwidth; the decode steps on the decode
#     replica from the landing on), transfers queued FIFO on a link (per pair, or shared);
#     back-pressure from a small decode pool with consistent records (outputs complete,
#     KV never over any cache, report per role); routers giving an unknown, missing or
#     wrong-role replica fail the run naming the router; a decode pool too small for a
#     request rejects it at arrival with the reason.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_cluster

RT=$POL/routers
MOON=$DATA/traces/mooncake_conversation_trace.jsonl
sim() { run "$1" "$BIN" sim -q "${@:2}"; }

"$BIN" trace gen --n 1500 --rate 3 --seed 3 --prompt lognormal:400:0.8 \
    --output lognormal:80:0.8 --out "$T/one.csv" >/dev/null || exit 1
"$BIN" trace gen --n 6000 --rate 12 --seed 4 --prompt lognormal:400:0.8 \
    --output lognormal:80:0.8 --out "$T/four.csv" >/dev/null || exit 1
ROWS_REQ="req_id, arrival_s, prompt_tokens, output_tokens, generated_tokens, first_scheduled_s,
          first_token_s, finish_s, preemptions, cached_tokens, status, ifnull(reason, '')"
ROWS_STEP="step, start_s, dur_s, prefill_tokens, decode_tokens, num_seqs, kv_used, kv_total,
           num_waiting, num_preempted, tokens, kv_tokens, host_s"
# differ DB A B COLUMNS TABLE: rows of run A not in run B and the other way round
differ() {
    sql "$1" "select count(*) from (select * from (select $4 from $5 where run_id = $2 except
              select $4 from $5 where run_id = $3) union all select * from (select $4 from $5
              where run_id = $3 except select $4 from $5 where run_id = $2))"
}

begin "one replica: --replicas 1 gives the records of no flag"
D=$T/one.db
sim plain --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name plain
want_rc 0
sim rep1 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name rep1 --replicas 1
want_rc 0
want_sql "$D" "select count(*) from requests where run_id = 1" 1500
[ "$(differ "$D" 1 2 "$ROWS_REQ" requests)" = 0 ] || bad " requests rows differ"
[ "$(differ "$D" 1 2 "$ROWS_STEP" steps)" = 0 ] || bad " steps rows differ"
[ "$(sql "$D" "select count(*) from steps where run_id = 1")" -gt 100 ] || bad " too few steps"
want_sql "$D" "select count(*) from requests where replica is not 0" 0
want_sql "$D" "select count(*) from steps where replica is not 0" 0
want_sql "$D" "select run_id || ' ' || replica || ' ' || role from replicas" "1 0 mixed
2 0 mixed"
end

# mean TTFT and TPOT of a run's finished requests
lat() {
    sql "$1" "select avg(first_token_s - arrival_s) || ' ' ||
              avg((finish_s - first_token_s) / (generated_tokens - 1)) from requests
              where run_id = $2 and status = 'finished' and generated_tokens > 1"
}
begin "round robin: 4 replicas at 4x the rate keep the one-replica latencies"
D=$T/rr.db
sim rr1 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name one
sim rr4 --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$D" --name four --replicas 4
want_rc 0
read -r t1 p1 <<<"$(lat "$D" 1)"
read -r t4 p4 <<<"$(lat "$D" 2)"
echo "  one replica: TTFT ${t1}s TPOT ${p1}s; 4 replicas, 4x rate: TTFT ${t4}s TPOT ${p4}s"
# different samples of the same load: within 15% (TTFT) and 10% (TPOT); a cluster that
# sent everything to one replica would be 4x over capacity and far off
awk -v a="$t1" -v b="$t4" 'BEGIN { exit !(b > 0.85 * a && b < 1.15 * a) }' || bad " TTFT $t4 vs $t1"
awk -v a="$p1" -v b="$p4" 'BEGIN { exit !(b > 0.9 * a && b < 1.1 * a) }' || bad " TPOT $p4 vs $p1"
want_sql "$D" "select status from runs where id = 2" done
sim rrlua --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$D" --name lua \
    --replicas 4 --router "$RT/round_robin.lua"
want_rc 0
[ "$(differ "$D" 2 3 "$ROWS_REQ" requests)" = 0 ] || bad " round_robin.lua differs from the built-in"
end

begin "every shipped router runs a cluster to a done run"
D=$T/routers.db
for r in round_robin least_loaded power_of_two prefix_affinity; do
    sim "r_$r" --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$D" --name "$r" \
        --replicas 4 --router "$RT/$r.lua" --limit 2000
    want_rc 0
done
want_sql "$D" "select group_concat(status) from runs" "done,done,done,done"
want_sql "$D" "select count(*) from requests where status = 'aborted'" 0
want_sql "$D" "select count(*) from requests" 8000
sim p2seed --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$D" --name p2b \
    --replicas 4 --router "$RT/power_of_two.lua" --limit 2000 --seed 9 --set router.choices=2
want_rc 0
want_sql "$D" "select json_extract(config, '$.router_params.choices') from runs where name = 'p2b'" 2
end

begin "prefix_affinity raises the cluster's cache hit rate over round robin (Mooncake)"
if [ ! -f "$MOON" ]; then
    echo "SKIP: $MOON absent"
else
    D=$T/moon.db
    for r in round_robin prefix_affinity; do
        sim "m_$r" --trace "$MOON" --policy "$POL/continuous.lua" --db "$D" --name "$r" \
            --model mistral-7b --hw h100 --replicas 8 --rate-scale 8 --limit 4000 \
            --prefix-caching --router "$RT/$r.lua"
        want_rc 0
    done
    hit() { sql "$D" "select round(1.0 * sum(cached_tokens) / sum(prompt_tokens), 4) from
                      requests r join runs u on u.id = r.run_id where u.name = '$1'"; }
    h_rr=$(hit round_robin) h_pa=$(hit prefix_affinity)
    # the bound: every hashed block seen before is a hit (an unlimited cache), counted from
    # the trace's hash ids, not the simulator, over the same requests (the first 4000)
    bound=$(head -n 4000 "$MOON" | python3 -c '
import json, sys
seen, hit, tot = set(), 0, 0
for line in sys.stdin:
    d = json.loads(line); k = 0
    for h in d["hash_ids"]:
        if h not in seen: break
        k += 1
    hit += min(k * 512, (d["input_length"] - 1) // 16 * 16); tot += d["input_length"]
    seen.update(d["hash_ids"])
print(round(hit / tot, 4))' 2>/dev/null)
    echo "  prefix-cache hit rate: round robin $h_rr, prefix_affinity $h_pa, unlimited-cache bound ${bound:-?}"
    awk -v a="$h_rr" -v b="$h_pa" 'BEGIN { exit !(b > a) }' || bad " prefix_affinity $h_pa <= round robin $h_rr"
    [ -z "$bound" ] || awk -v a="$h_pa" -v b="$bound" 'BEGIN { exit !(a <= b) }' ||
        bad " hit rate $h_pa above the bound $bound"
fi
end

begin "compare of cluster runs: prefix hit and load imbalance rows (one replica holding all reads 4)"
D=$T/cmp.db
printf 'return { route = function(c, r) return 1 end }\n' >"$T/one_replica.lua"
head -n 301 "$T/one.csv" >"$T/cmp.csv"
for r in round_robin one_replica; do
    rf=$RT/$r.lua
    [ "$r" = one_replica ] && rf=$T/one_replica.lua
    sim "c_$r" --trace "$T/cmp.csv" --policy "$POL/continuous.lua" --db "$D" --name "$r" \
        --replicas 4 --router "$rf"
    want_rc 0
done
sim c_single --trace "$T/cmp.csv" --policy "$POL/continuous.lua" --db "$D" --name single
run cmp "$BIN" compare "$D" --runs round_robin,one_replica --json
want_rc 0
python3 - "$T/cmp.out" >"$T/cmp.check" 2>&1 <<'EOF2' || bad " $(cat "$T/cmp.check")"
import json, sys
m = json.load(open(sys.argv[1]))["metrics"]
bal, hit = m["load_imbalance"], m["prefix_hit_rate"]
assert 1 <= bal["a"] < 1.5, bal          # round robin: near even
assert abs(bal["b"] - 4) < 1e-9, bal     # one of 4 replicas holds everything
assert bal["higher_is_better"] is False, bal
assert hit["a"] == 0 and hit["b"] == 0, hit  # no shared prefixes, no caching
EOF2
run cmpt "$BIN" compare "$D" --runs round_robin,one_replica
grep -qE '^imbalance +1\.[0-9]+ +4\.00 ' "$T/cmpt.out" || bad " no imbalance row: $(grep -i imbal "$T/cmpt.out")"
run cmp1 "$BIN" compare "$D" --runs single,single
grep -qE '^(imbalance|prefix hit)' "$T/cmp1.out" && bad " cluster rows for single-replica runs"
end

begin "records: replicas, replica columns, report and plot per replica"
D=$T/routers.db
want_sql "$D" "select count(*) from replicas r join runs u on u.id = r.run_id
               where u.name = 'least_loaded'" 4
want_sql "$D" "select group_concat(distinct replica) from (select replica from requests r
               join runs u on u.id = r.run_id where u.name = 'least_loaded' order by replica)" "0,1,2,3"
want_sql "$D" "select count(distinct replica) from steps s join runs u on u.id = s.run_id
               where u.name = 'least_loaded'" 4
# step numbers stay unique within the run and count every replica's steps
want_sql "$D" "select count(*) = max(step) + 1 from steps s join runs u on u.id = s.run_id
               where u.name = 'least_loaded'" 1
run rep "$BIN" report "$D" --run least_loaded
want_rc 0
want_out "replicas  4 (requests each served" "cache hit"
# the header says it is a cluster, how many replicas and which router (issue #28)
want_out_re "^cluster   4 replicas, router .*/least_loaded.lua: the figures below are the whole cluster's$"
[ "$(grep -cE '^ +[0-3] mixed +[0-9]+' "$T/rep.out")" = 4 ] || bad " not 4 replica rows"
run repj "$BIN" report "$D" --run least_loaded --json
want_rc 0
python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert len(d["replicas"]) == 4
assert sum(x["requests"] for x in d["replicas"]) == 2000' "$T/repj.out" || bad " JSON replicas"
run rep1 "$BIN" report "$T/one.db" --run plain
want_rc 0
grep -q '^replicas' "$T/rep1.out" && bad " a one-replica run got a per-replica table"
grep -q '^cluster' "$T/rep1.out" && bad " a one-replica run's header says cluster"
run plot "$BIN" plot "$D" --runs least_loaded --out "$T/plots"
[ -f "$T/plots/replicas_least_loaded.gp" ] || bad " no replicas_least_loaded figure"
[ "$(grep -c '^# replica' "$T/plots/replicas_least_loaded.dat")" = 4 ] || bad " not 4 replica blocks"
grep -q "with image" "$T/plots/replicas_least_loaded.gp" && bad " 4 replicas drawn as a heatmap"
end

begin "16 replicas: report's header counts them; plot draws a heatmap and the spread"
sim r16 --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$T/r16.db" --name r16 \
    --replicas 16 --rate-scale 4 --limit 2000
want_rc 0
run rep16 "$BIN" report "$T/r16.db"
want_rc 0
want_out "cluster   16 replicas, router (round robin)"
# the figure's scripts are written with or without gnuplot (exit 1 without it)
run plot16 "$BIN" plot "$T/r16.db" --runs r16 --out "$T/p16" --format png
g=$T/p16/replicas_r16.gp
[ -f "$g" ] || bad " no replicas_r16.gp"
grep -q 'index 0 using 1:2:3 with image' "$g" || bad " no heatmap in replicas_r16.gp"
grep -q 'with filledcurves' "$g" || bad " no least-to-most band"
grep -q 'set ytics ("0" 0, "1" 1,' "$g" || bad " the replicas are not labelled one by one"
# block 0: 16 replicas x 300 bins; block 1: 300 bins of least <= mean <= most
awk '/^# across/ { b = 1; next } /^#/ || NF == 0 { next }
     !b { n0++; r[$2] = 1 } b { n1++; if (!($2 <= $3 + 1e-3 && $3 <= $4 + 1e-3)) bad++ }
     END { m = 0; for (k in r) m++
           if (n0 != 16 * 300 || m != 16 || n1 != 300 || bad) {
               print n0 " grid rows, " m " replicas, " n1 " spread rows, " bad + 0 " out of order"; exit 1 } }' \
    "$T/p16/replicas_r16_bins.dat" >"$T/p16.cmp" || bad " replicas_r16_bins.dat: $(cat "$T/p16.cmp")"
end

cat >"$T/reject.lua" <<'L'
return { route = function(c, r)
    if r.prompt_tokens > 600 then return nil, "prompt over 600" end
    return r.id % c.n + 1
end }
L
cat >"$T/hold.lua" <<'L'
-- holds while every replica runs something: requests wait at the router
return { route = function(c, r)
    for i = 1, c.n do if c:running(i) == 0 and c:waiting(i) == 0 then return i end end
    return "hold"
end }
L
cat >"$T/range.lua" <<'L'
return {
    route = function(c, r)
        return c.n + 1
    end,
}
L
cat >"$T/none.lua" <<'L'
return { route = function(c, r) end }
L
cat >"$T/always_hold.lua" <<'L'
return { route = function(c, r) return "hold" end }
L

begin "a router's reasons reject, 'hold' waits for a step to end"
D=$T/dec.db
sim rej --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name rej --replicas 3 \
    --router "$T/reject.lua" --limit 300
want_rc 0
n_big=$(sql "$D" "select count(*) from requests where prompt_tokens > 600")
[ "$n_big" -gt 0 ] || bad " no prompt over 600 in the sample"
want_sql "$D" "select count(*) from requests where reason = 'router: prompt over 600'
               and replica is null" "$n_big"
sim hold --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name hold --replicas 2 \
    --router "$T/hold.lua" --limit 300
want_rc 0
want_sql "$D" "select status from runs where name = 'hold'" done
want_sql "$D" "select count(*) from requests r join runs u on u.id = r.run_id
               where u.name = 'hold' and r.status in ('finished', 'rejected')" 300
# held requests are scheduled later than they arrived
[ "$(sql "$D" "select count(*) from requests r join runs u on u.id = r.run_id
              where u.name = 'hold' and first_scheduled_s > arrival_s + 0.05")" -gt 0 ] ||
    bad " nothing waited at the router"
end

begin "bad routers fail the run naming the router and its line"
D=$T/bad.db
sim range --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name range --replicas 2 \
    --router "$T/range.lua" --limit 50
want_rc 1
want_err "$T/range.lua:2: route returned replica 3, but the cluster has replicas 1..2"
want_sql "$D" "select status from runs where name = 'range'" failed
sim none --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name none --replicas 2 \
    --router "$T/none.lua" --limit 50
want_rc 1
want_err "$T/none.lua:1: route returned no decision"
want_sql "$D" "select status from runs where name = 'none'" failed
sim ahold --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --name ahold \
    --replicas 2 --router "$T/always_hold.lua" --limit 50
want_rc 1
want_err "held 50 requests"
want_sql "$D" "select count(*) from runs where status = 'failed'" 3
end

begin "router usage mistakes exit 2 and record nothing"
D=$T/usage.db
sim missing --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --replicas 2 \
    --router "$T/nope.lua"
want_rc 2
want_err "nope.lua"
sim badset --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --replicas 2 \
    --router "$RT/power_of_two.lua" --set router.banana=1
want_rc 2
want_err "unknown param 'banana'"
sim norep --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" \
    --router "$RT/round_robin.lua"
want_rc 2
want_err "--router needs --replicas"
[ -f "$D" ] && bad " a database was left behind"
end

begin "--cluster: groups of their own, the file's router"
D=$T/cl.db
cat >"$T/two.conf" <<L
# two groups behind the least-loaded router
[cluster]
router = $RT/least_loaded.lua

[group fast]
count = 2
model = llama-3-8b
hw = h100

[group slow]
count = 1
model = llama-2-13b
tp = 2
set.max_seqs = 64
L
sim cl --trace "$T/four.csv" --policy "$POL/continuous.lua" --db "$D" --name cl \
    --cluster "$T/two.conf" --limit 2000
want_rc 0
want_sql "$D" "select group_concat(replica || ':' || group_name || ':' || model || ':' ||
               hardware || ':' || json_extract(params, '$.max_seqs'), ' ') from replicas" \
    "0:fast:llama-3-8b:h100 x1:256 1:fast:llama-3-8b:h100 x1:256 2:slow:llama-2-13b:a100-80g x2:64"
want_sql "$D" "select json_extract(config, '$.replicas') || ' ' ||
               (json_extract(config, '$.router') like '%least_loaded.lua') from runs" "3 1"
# the slower replica gets fewer requests from a least-loaded router
[ "$(sql "$D" "select (select count(*) from requests where replica = 2) <
               (select count(*) from requests where replica = 0)")" = 1 ] ||
    bad " the slow replica was not given less"
end

begin "bad cluster files exit 2 naming file and line, and record nothing"
D=$T/clbad.db
printf '[cluster]\nrouter = x.lua\nbandwidth = 3\n[group a]\ncount = 2\n' >"$T/bad1.conf"
sim cb1 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --cluster "$T/bad1.conf"
want_rc 2
want_err "$T/bad1.conf:3: unknown key 'bandwidth' in [cluster]"
printf '[group a]\ncount = 2\n\n[group p]\ncount = 1\nrole = prefill\n' >"$T/bad2.conf"
sim cb2 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --cluster "$T/bad2.conf"
want_rc 2
want_err "$T/bad2.conf:4: group 'p' has role prefill, but no group has role decode"
printf '[cluster]\nlinks = ring\n[group p]\ncount = 1\nrole = prefill\n' >"$T/bad3.conf"
sim cb3 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --cluster "$T/bad3.conf"
want_rc 2
want_err "$T/bad3.conf:2: links must be pair (one link per prefill->decode pair) or shared"
sim cb4 --trace "$T/one.csv" --policy "$POL/continuous.lua" --db "$D" --cluster "$T/two.conf" \
    --replicas 2
want_rc 2
want_err "--replicas and --cluster: give one of them"
[ -f "$D" ] && bad " a database was left behind"
end


# --- prefill/decode disaggregation (item 3)
PD="[cluster]\nlink_latency_s = 0.001\nlink_bandwidth_gbps = 10\n"
PD1="$PD[group p]\ncount = 1\nrole = prefill\n[group d]\ncount = 1\nrole = decode\n"
# the bare GPU (--serving none): the known answers below are its steps, not vLLM's front end
LLAMA=(--model llama-3-8b --hw h100 --policy "$POL/continuous.lua" --serving none)
# near A B: |A - B| < 1e-9
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d < 1e-9 && d > -1e-9) }'; }

begin "disaggregation: one request by hand (TTFT = the prefill step, transfer = latency + bytes / bandwidth)"
D=$T/pd.db
printf "$PD1" >"$T/pd1.conf"
printf 'arrival_s,prompt_tokens,output_tokens\n0,1000,5\n' >"$T/pd1.csv"
sim pd1 --trace "$T/pd1.csv" "${LLAMA[@]}" --db "$D" --name pd1 --cluster "$T/pd1.conf"
want_rc 0
want_sql "$D" "select replica || ' ' || prefill_replica || ' ' || status || ' ' || generated_tokens
               from requests where run_id = 1" "1 0 finished 5"
# llama-3-8b: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131072 bytes per token
near "$(sql "$D" "select kv_transfer_s from requests where run_id = 1")" \
    "$(awk 'BEGIN { print 0.001 + 1000 * 131072 / 10e9 }')" || bad " kv_transfer_s is not 0.001 + 1000 x 131072 / 10e9"
want_sql "$D" "select count(*) from steps where run_id = 1 and replica = 0" 1
want_sql "$D" "select prefill_tokens from steps where run_id = 1 and replica = 0" 1000
near "$(sql "$D" "select ttft_s from requests where run_id = 1")" \
    "$(sql "$D" "select start_s + dur_s from steps where run_id = 1 and replica = 0")" ||
    bad " TTFT is not the end of the prefill step"
# 4 decode steps on the decode replica, the first once the KV has landed
want_sql "$D" "select count(*) || ' ' || sum(decode_tokens) || ' ' || sum(prefill_tokens) from steps
               where run_id = 1 and replica = 1" "4 4 0"
near "$(sql "$D" "select min(start_s) from steps where run_id = 1 and replica = 1")" \
    "$(sql "$D" "select first_token_s + kv_transfer_s from requests where run_id = 1")" ||
    bad " decoding did not start when the transfer ended"
want_sql "$D" "select group_concat(role, ' ') from (select role from replicas where run_id = 1
               order by replica)" "prefill decode"
# two requests prefilled together queue on their one link (FIFO); a shared link is one queue
printf 'arrival_s,prompt_tokens,output_tokens\n0,1000,5\n0,1000,5\n' >"$T/pd2.csv"
sim pd2 --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name pd2 --cluster "$T/pd1.conf"
want_rc 0
near "$(sql "$D" "select max(kv_transfer_s) - 2 * min(kv_transfer_s) from requests where run_id = 2")" 0 ||
    bad " the second transfer did not wait for the first"
printf "$PD[group p]\ncount = 2\nrole = prefill\n[group d]\ncount = 2\nrole = decode\n" >"$T/pd22.conf"
sim pair --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name pair --cluster "$T/pd22.conf"
want_rc 0
near "$(sql "$D" "select max(kv_transfer_s) - min(kv_transfer_s) from requests where run_id = 3")" 0 ||
    bad " separate pairs' links queued"
printf "$PD\nlinks = shared\n[group p]\ncount = 2\nrole = prefill\n[group d]\ncount = 2\nrole = decode\n" \
    >"$T/shared.conf"
sim shared --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name shared --cluster "$T/shared.conf"
want_rc 0
near "$(sql "$D" "select max(kv_transfer_s) - 2 * min(kv_transfer_s) from requests where run_id = 4")" 0 ||
    bad " a shared link did not queue"
end

begin "disaggregation: back-pressure from a small decode pool, records consistent"
D=$T/bp.db
printf "$PD[group p]\ncount = 1\nrole = prefill\n[group d]\ncount = 2\nrole = decode\nkv_blocks = 300\n" \
    >"$T/bp.conf"
"$BIN" trace gen --n 300 --rate 20 --seed 3 --prompt lognormal:800:0.8 --output lognormal:80:0.8 \
    --out "$T/bp.csv" >/dev/null || bad " trace gen"
sim bp --trace "$T/bp.csv" "${LLAMA[@]}" --db "$D" --name bp --cluster "$T/bp.conf"
want_rc 0
want_sql "$D" "select status from runs" done
# every finished request has its output; each was prefilled on 0 and decoded on 1 or 2
want_sql "$D" "select count(*) from requests where status = 'finished' and
               (generated_tokens != output_tokens or prefill_replica != 0 or replica not in (1, 2)
                or kv_transfer_s is null)" 0
[ "$(sql "$D" "select count(*) from requests where status = 'finished'")" -gt 250 ] ||
    bad " too few finished"
# the KV never exceeds any replica's cache
want_sql "$D" "select count(*) from steps where kv_used > kv_total" 0
want_sql "$D" "select count(distinct kv_total) from steps where replica > 0" 1
# back-pressure: some transfers waited for decode room well beyond their link time
[ "$(sql "$D" "select count(*) from requests where kv_transfer_s >
              0.001 + prompt_tokens * 131072 / 10e9 + 0.5")" -gt 10 ] || bad " no back-pressure seen"
# requests no decode replica could ever hold are rejected at arrival, saying why
want_sql "$D" "select count(*) from requests where status = 'rejected' and replica is null and
               reason like 'no decode replica can ever hold it: needs % KV blocks%'" 4
run report "$BIN" report "$D"
want_rc 0
want_out_re "0 prefill +295 +295"
want_out_re "1 decode +148 +148 +[0-9]+ +[0-9.]+% +[0-9.]+% +- +-$"
# the shipped round_robin.lua takes prefill and decode replicas in turn, as the default
sim bprr --trace "$T/bp.csv" "${LLAMA[@]}" --db "$D" --name bprr --cluster "$T/bp.conf" \
    --router "$RT/round_robin.lua"
want_rc 0
[ "$(differ "$D" 1 2 "$ROWS_REQ, replica, prefill_replica, kv_transfer_s" requests)" = 0 ] ||
    bad " round_robin.lua routes otherwise than the default"
for r in least_loaded power_of_two prefix_affinity; do
    sim "bp_$r" --trace "$T/bp.csv" "${LLAMA[@]}" --db "$D" --name "bp_$r" --cluster "$T/bp.conf" \
        --router "$RT/$r.lua"
    want_rc 0
done
want_sql "$D" "select count(*) from runs where status = 'done'" 5
end

begin "disaggregation: bad routers and pools fail or reject naming why"
D=$T/pdbad.db
printf 'return { route = function(c, r) return 1, 5 end }\n' >"$T/pd_range.lua"
printf 'return { route = function(c, r) return 1 end }\n' >"$T/pd_one.lua"
printf 'return { route = function(c, r) return 2, 2 end }\n' >"$T/pd_role.lua"
printf 'return {\n  route = function(c, r) return 1 end,\n  route_decode = function(c, r) return 2 end,\n}\n' \
    >"$T/pd_hook.lua"
sim prange --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name prange --cluster "$T/pd1.conf" \
    --router "$T/pd_range.lua"
want_rc 1
want_err "$T/pd_range.lua:1: route returned replica 5, but the cluster has replicas 1..2"
sim pone --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name pone --cluster "$T/pd1.conf" \
    --router "$T/pd_one.lua"
want_rc 1
want_err "route() for request 0 gave no decode replica"
sim prole --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name prole --cluster "$T/pd1.conf" \
    --router "$T/pd_role.lua"
want_rc 1
want_err "route() for request 0 returned replica 2, a decode replica: route() picks a prefill replica"
want_sql "$D" "select group_concat(status, ' ') from runs" "failed failed failed"
want_sql "$D" "select count(*) from requests where status != 'aborted'" 0
sim phook --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name phook --cluster "$T/pd1.conf" \
    --router "$T/pd_hook.lua"
want_rc 0
want_sql "$D" "select count(*) from requests r join runs u on u.id = r.run_id where u.name = 'phook'
               and replica = 1 and prefill_replica = 0 and r.status = 'finished'" 2
# a decode pool too small for any request: each is rejected at arrival with the reason
printf "${PD1}kv_blocks = 10\n" >"$T/tiny.conf"
sim ptiny --trace "$T/pd2.csv" "${LLAMA[@]}" --db "$D" --name ptiny --cluster "$T/tiny.conf"
want_rc 0
want_sql "$D" "select count(*) from requests r join runs u on u.id = r.run_id where u.name = 'ptiny'
               and r.status = 'rejected' and replica is null and reason like
               'no decode replica can ever hold it: needs 63 KV blocks but one request can have at most 10 %'" 2
end
begin "disaggregation: a prefill replica's policy sees the hand-off in on_finish as state 'transfer'"
mkdir -p "$T/pol" && ln -sfn "$POL/lib" "$T/pol/lib" # import() looks beside the policy
cat >"$T/pol/seen.lua" <<'LUA'
local batching = import("batching")
return {
    on_finish = function(s, r)
        if r:state_name() ~= "transfer" and r:state_name() ~= "finished" then
            error("on_finish saw state " .. tostring(r:state_name()))
        end
        if r.state == s.TRANSFER and r:state_name() ~= "transfer" then error("s.TRANSFER") end
    end,
    schedule = function(s)
        local budget, preempted = batching.decode_running(s, s.max_tokens, s.max_seqs)
        budget = batching.prefill_running(s, budget, s.max_seqs)
        if preempted == 0 then batching.admit(s, budget, s.max_seqs, false, s.max_tokens) end
    end,
}
LUA
printf "$PD1" >"$T/pdseen.conf"
run seen "$BIN" sim -q --trace "$T/pd1.csv" --model llama-3-8b --hw h100 --policy "$T/pol/seen.lua" \
    --cluster "$T/pdseen.conf" --db "$T/seen.db"
want_rc 0
want_sql "$T/seen.db" "select status || ' ' || prefill_replica || ' ' || replica from requests" "finished 0 1"
if command -v gnuplot >/dev/null 2>&1; then
    # plot's per-replica load: the prefill replica holds the request until its KV lands
    # (first token + kv_transfer_s), the decode replica from then until it finishes
    run seenplot "$BIN" plot "$T/seen.db" --runs 1 --out "$T/seenplot"
    want_rc 0
    land=$(sqlite3 "$T/seen.db" "select first_token_s + kv_transfer_s from requests")
    fin=$(sqlite3 "$T/seen.db" "select finish_s from requests")
    dat=$(ls "$T"/seenplot/replicas_*.dat)
    awk -v land="$land" -v fin="$fin" '
        function near(a, b) { return a - b < 1e-6 && b - a < 1e-6 }
        /^# replica/ { r = $3; k[r] = 0; next }
        NF == 2 { k[r]++; t[r, k[r]] = $1; h[r, k[r]] = $2 }
        END { ok = k[0] == 3 && near(t[0, 3], land) && h[0, 2] == 1 && h[0, 3] == 0 &&
                   k[1] == 3 && near(t[1, 2], land) && h[1, 2] == 1 &&
                   near(t[1, 3], fin) && h[1, 3] == 0
              if (!ok) { print "the prefill replica should hold it until " land \
                         ", the decode replica from then until " fin; exit 1 } }' \
        "$dat" >"$T/seenplot.cmp" || bad " replicas .dat: $(cat "$T/seenplot.cmp")"
    grep -qF '"replica 0 (prefill)"' "${dat%.dat}.gp" && grep -qF '"replica 1 (decode)"' "${dat%.dat}.gp" ||
        bad " the figure's key does not name the replicas' roles"
else
    echo "SKIP: gnuplot not found: the disaggregated per-replica load figure not checked"
fi
end

e2e_finish e2e_cluster

#!/usr/bin/env bash
# e2e_vllm_twin.sh: the vLLM twin end to end on the real vLLM runs on H100
# (${TWIN_DATA:-../shared/data}/vllm-h100; prints SKIP and passes without them).
#
#  1. validate replays a measured run with vLLM's flags and the shipped serving profile:
#     the config names it, the KV capacity is vLLM's within 2% (7,462 blocks for
#     Llama-2-7B at TP 1, 27,510 for Mixtral-8x7B at TP 2), and the per-stage table holds
#     the client's TPOT and ITL; the shipped profile (fitted to these runs) keeps mean E2E
#     within 10% on the stages it held (a regression guard: the replay is deterministic).
#  2. --serving none (the bare GPU) is recorded as such and predicts another run.
#  3. validate --band: the two sides recorded, each metric marked in or OUT, the coverage.
#  4. calibrate --serving on one run and one term writes a profile sim reads back.
#  5. sim --band and sweep --capacity --band report ranges.
#  6. Bad input: an unknown profile lists the built-in ones; a --band width out of range;
#     --band with --repeat or --emit-jobs; calibrate --serving on a database with no staged
#     run.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_vllm_twin
LIMIT=240   # a replay of 9,000 real requests with their tokens, and a fit of ~40 replays
VH=$DATA/vllm-h100
COD=$VH/20260217-155451-llama-2-7b-tp1-codegen
MIX=$VH/20260218-120914-mixtral-8x7b-v0-1-tp2-codegen
if [ ! -d "$COD" ] || [ ! -d "$MIX" ]; then
    echo "SKIP: $VH not found (set TWIN_DATA to the shared data folder): the vLLM twin not tested on real data"
    exit 0
fi
DB=$T/runs.db
L=llama-2-7b-tp1-codegen
M=mixtral-8x7b-v0-1-tp2-codegen
"$BIN" import --db "$DB" --inference-perf "$COD" --hw h100 --name "$L" >/dev/null || exit 1
"$BIN" import --db "$DB" --inference-perf "$MIX" --hw h100 --name "$M" >/dev/null || exit 1
cfg() { sql "$DB" "select json_extract(config, '$2') from runs where name = '$1'"; }
# within REL of WANT
near_rel() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { d = a / b - 1; exit !(d <= r && d >= -r) }'; }
# the stage metric's error (a fraction) from validate's JSON
stage_err() {
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))
print([m for m in v["stages"][int(sys.argv[2])]["metrics"] if m["name"] == sys.argv[3]][0]["error"])' "$@"
}

begin "validate: vLLM's flags, the shipped profile, vLLM's KV capacity, the client's TPOT and ITL"
run vl "$BIN" validate --db "$DB" --run "$L" --name vl --json
want_rc 0
[ "$(cfg vl '$.serving.name')" = vllm ] || bad " the replay's config does not name the vllm profile"
[ "$(cfg vl '$.max_tokens') $(cfg vl '$.max_seqs') $(cfg vl '$.max_model_len')" = "2048 128 4096" ] ||
    bad " the replay does not run with the server's flags"
near_rel "$(cfg vl '$.num_blocks')" 7462 0.02 || bad " KV blocks $(cfg vl '$.num_blocks'), vLLM 7462"
python3 - "$T/vl.out" <<'PY' || bad " the stage table lacks the client's TPOT and ITL"
import json, sys
v = json.load(open(sys.argv[1]))
names = [m["name"] for m in v["stages"][0]["metrics"]]
assert len(v["stages"]) == 2 and "TPOT mean (ip)" in names and "ITL p75 (ip)" in names, names
PY
for s in 0 1; do
    e=$(stage_err "$T/vl.out" $s "E2E mean")
    near_rel "$(awk -v e="$e" 'BEGIN { print 1 + e }')" 1 0.10 || bad " stage $s mean E2E off by $e"
done
run vm "$BIN" validate --db "$DB" --run "$M" --name vm --no-itl --json
want_rc 0
near_rel "$(cfg vm '$.num_blocks')" 27510 0.02 || bad " KV blocks $(cfg vm '$.num_blocks'), vLLM 27510"
case $(cfg vm '$.calibration') in synthesized:mixtral-8x7b.h100.tp2*) ;;
    *) bad " Mixtral's cost is not synthesized from the operator rates: $(cfg vm '$.calibration')" ;; esac
e=$(stage_err "$T/vm.out" 1 "E2E mean")
near_rel "$(awk -v e="$e" 'BEGIN { print 1 + e }')" 1 0.10 || bad " Mixtral stage 1 mean E2E off by $e"
end

begin "--serving none: the bare GPU, recorded"
run vn "$BIN" validate --db "$DB" --run "$L" --name vn --serving none --no-itl
want_rc 0
want_out "serving none"
[ "$(cfg vn '$.serving.name')" = none ] || bad " the config does not say none"
[ "$(sql "$DB" "select count(*) from requests a join requests b using (req_id) where
       a.run_id = (select id from runs where name = 'vn') and
       b.run_id = (select id from runs where name = 'vl') and a.e2e_s != b.e2e_s")" -gt 0 ] ||
    bad " --serving none predicted the same latencies as vllm"
end

begin "validate --band: the sides recorded, in or OUT per metric, the coverage"
run vb "$BIN" validate --db "$DB" --run "$L" --name vb --band=0.05 --no-itl
want_rc 0
want_out "band: every step's time -5.0% .. +5.0%" "measured inside the band:" "vb-band-lo"
want_out_re ' (in|OUT) *$'
want_sql "$DB" "select count(*) from runs where name in ('vb-band-lo', 'vb-band-hi')" 2
want_sql "$DB" "select json_extract(config, '$.cost_scale') from runs where name = 'vb-band-hi'" 1.05
end

begin "calibrate --serving: one run, one term, a profile sim reads back"
run cal "$BIN" calibrate --serving --db "$DB" --runs "$L" --fit request_s --out "$T/fit.serving" -j 2
want_rc 0
want_out "stage MAPE per run" "request_s" "wrote $T/fit.serving"
grep -q '^request_s = ' "$T/fit.serving" || bad " the profile lacks request_s"
grep -q '^fit_mape = ' "$T/fit.serving" || bad " the profile lacks fit_mape"
printf 'arrival_s,prompt_tokens,output_tokens\n0,100,5\n' >"$T/one.csv"
run simfit "$BIN" sim --trace "$T/one.csv" --policy "$POL/vllm.lua" --model llama-2-7b --hw h100 \
    --db "$T/s.db" --serving "$T/fit.serving"
want_rc 0
want_out "serving   vllm"
end

begin "sim --band and sweep --capacity --band: ranges"
"$BIN" trace gen --n 300 --rate 4 --seed 5 --prompt lognormal:500:0.6 --output lognormal:120:0.5 \
    --out "$T/t.csv" >/dev/null
run sb "$BIN" sim --trace "$T/t.csv" --policy "$POL/vllm.lua" --model llama-2-7b --hw h100 \
    --db "$T/s.db" --name sb --band
want_rc 0
want_out "band      step time" "sb-band-lo" "E2E mean"
want_out_re "(not at a knee|at a knee)"
run cb "$BIN" sweep --trace "$T/t.csv" --policy "$POL/vllm.lua" --model llama-2-7b --hw h100 \
    --db "$T/c.db" --capacity --slo ttft=0.5,tpot=0.05 --band=0.1 -q
want_rc 0
want_out_re "^capacity band: [0-9.]+ \.\. [0-9.]+ req/s with every step's time \+10\.0% \.\. -10\.0%"
end

begin "bad input: an unknown profile, a bad width, nothing to fit"
run bp "$BIN" sim --trace "$T/one.csv" --policy "$POL/vllm.lua" --db "$T/bad.db" --serving sglang
want_rc 2
want_err "unknown serving profile 'sglang'; built-in profiles: vllm, none"
run bw "$BIN" validate --db "$DB" --run "$L" --band=2
want_rc 2
want_err "bad value '2' for --band"
run br "$BIN" sim --trace "$T/one.csv" --policy "$POL/vllm.lua" --db "$T/bad.db" --band --repeat 2
want_rc 2
want_err "--band works without --repeat"
run bj "$BIN" sweep --trace "$T/one.csv" --policy "$POL/vllm.lua" --db "$T/bad.db" --rates 1 \
    --band --emit-jobs "$T/jobs"
want_rc 2
want_err "--band runs here, without --repeat or --emit-jobs"
[ ! -e "$T/bad.db" ] || bad " a refused command left a database"
"$BIN" sim -q --trace "$T/one.csv" --policy "$POL/vllm.lua" --db "$T/plain.db" >/dev/null
run nf "$BIN" calibrate --serving --db "$T/plain.db" --out "$T/x.serving"
want_rc 1
want_err "has no measured run with load stages"
[ ! -e "$T/x.serving" ] || bad " a profile was written"
end

e2e_finish e2e_vllm_twin

#!/usr/bin/env bash
# e2e_fidelity.sh: end-to-end tests of the fidelity loop: profile -> calibrate -> cost file
# -> sim --cost -> validate, on dummy:stories260k (a quick grid; no data needed), and the
# bad input each command must refuse with a clear message and a non-zero exit, changing
# nothing already recorded.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_fidelity

M=dummy:stories260k
DB=$T/runs.db
"$BIN" trace gen --n 40 --rate 200 --prompt lognormal:60:0.6 --output lognormal:12:0.5 \
    --seed 3 --out "$T/t.csv" >/dev/null
"$BIN" profile --model $M --out "$T/p.csv" --threads 2 --reps 3 -q \
    --host-policy "$POL/continuous.lua" >/dev/null 2>&1

begin "calibrate: a cost file from a profile, with its report"
run cal "$BIN" calibrate --profile "$T/p.csv" --out "$T/c.cost"
want_rc 0
want_out "forward-pass points from profile $T/p.csv" "cross-validated median" "gemm(rows)" \
    "host (CPU-side time before each pass)" "extrapolation: fitted up to" "wrote $T/c.cost"
[ "$(grep -c '^format = 1$' "$T/c.cost")" = 1 ] || bad " no format line in the cost file"
grep -q '^kind = linear$' "$T/c.cost" || bad " not a linear cost file"
grep -q '^n_layers = 5$' "$T/c.cost" || bad " the cost file lacks the model's shape"
end

begin "calibrate --json: one object with the cross-validated errors"
run calj "$BIN" calibrate --profile "$T/p.csv" --out "$T/c2.cost" --json
want_rc 0
python3 -c "import json,sys; j=json.load(open('$T/calj.out')); assert j['cost']['model']=='linear'; assert j['cv_median_err'] >= 0; assert j['points'] > 20" ||
    bad " the JSON is not what it should be"
end

begin "sim --cost: the cost file's model, recorded in the run"
run sim "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --cost "$T/c.cost" \
    --kv-blocks 400 --db "$DB" --name simc
want_rc 0
want_sql "$DB" "SELECT json_extract(config, '\$.cost.model'), model, hardware LIKE 'cost file: %' FROM runs WHERE name = 'simc'" "linear|dummy:stories260k|1"
want_sql "$DB" "SELECT count(*) > 0, sum(host_s > 0) = count(*) FROM steps WHERE run_id = (SELECT id FROM runs WHERE name = 'simc')" "1|1"
end

begin "engine -> validate: the engine run replayed with the cost file, recorded"
run eng "$BIN" engine -q --trace "$T/t.csv" --policy "$POL/chunked_prefill.lua" --set chunk=64 \
    --model $M --threads 2 --kv-blocks 400 --db "$DB" --name eng --save-tokens
want_rc 0
run val "$BIN" validate --db "$DB" --run eng --cost "$T/c.cost" --plot "$T/plots"
want_rc 0
want_out "validate: engine run eng" "TTFT p50" "TPOT p99" "ITL p50" "E2E p99" "forward pass" \
    "host time" "MAPE"
want_sql "$DB" "SELECT kind, status, json_extract(config, '\$.validate.of') = (SELECT id FROM runs WHERE name = 'eng'), json_extract(config, '\$.kv_blocks_given') FROM runs WHERE name = 'validate-eng'" "sim|done|1|1"
if command -v gnuplot >/dev/null 2>&1; then
    for f in cdf_ttft cdf_tpot cdf_e2e; do [ -s "$T/plots/$f.png" ] || bad " no $f.png"; done
fi
run rep "$BIN" report "$DB" --run validate-eng
want_rc 0
end

begin "validate --json and --repeat: the engine's spread beside the errors"
run valj "$BIN" validate --db "$DB" --run eng --cost "$T/c.cost" --repeat 1 --json
want_rc 0
python3 -c "
import json
j = json.load(open('$T/valj.out'))
assert j['measured_runs'] == 2, j['measured_runs']
m = {x['name']: x for x in j['metrics']}
assert m['TTFT p50']['spread'] is not None and m['TTFT p50']['measured_min'] <= m['TTFT p50']['measured_max']
assert j['steps']['pass']['n'] > 0 and j['mape'] >= 0
" || bad " the JSON lacks the repeat's spread"
want_sql "$DB" "SELECT count(*) FROM runs WHERE name = 'eng-rep1' AND kind = 'engine' AND status = 'done'" 1
end

begin "calibrate --db: a cost file from the engine run's own steps"
run cald "$BIN" calibrate --db "$DB" --run eng --out "$T/d.cost"
want_rc 0
want_out "forward-pass points from engine run eng"
end

# ---------------------------------------------------------------- bad input
runs_before=$(sql "$DB" "SELECT count(*) FROM runs")

begin "calibrate: a damaged profile names the file and line"
head -n 30 "$T/p.csv" >"$T/bad.csv"
sed -n '31p' "$T/p.csv" | cut -d, -f1-9 >>"$T/bad.csv"
run badp "$BIN" calibrate --profile "$T/bad.csv" --out "$T/x.cost"
want_rc 1
want_err_re "bad.csv:31: "
[ -f "$T/x.cost" ] && bad " a cost file was written"
end

begin "calibrate: too few points are refused with the reason"
{ echo "# twinserve profile 1"; echo "tokens,seqs,sampled,kv_tokens,attn_pairs,median_s"
  echo "8,8,8,100,100,0.001"; echo "16,1,1,16,136,0.002"; } >"$T/few.csv"
run few "$BIN" calibrate --profile "$T/few.csv" --out "$T/x.cost" --model stories260k
want_rc 1
want_err "too few for a fit"
end

begin "calibrate: a profile without the model's shape asks for --model"
{ echo "# twinserve profile 1"; echo "tokens,seqs,sampled,kv_tokens,attn_pairs,median_s"
  for i in 1 2 4 8 16 32 64 128 256; do echo "$i,1,1,$i,$((i * (i + 1) / 2)),0.00$i"; done; } >"$T/noshape.csv"
run noshape "$BIN" calibrate --profile "$T/noshape.csv" --out "$T/x.cost"
want_rc 1
want_err "does not say the model's shape: give it with --model"
end

begin "calibrate: usage errors"
run u1 "$BIN" calibrate --out "$T/x.cost"
want_rc 2
want_err "give one input"
run u2 "$BIN" calibrate --profile "$T/p.csv"
want_rc 2
want_err "--out COST is required"
run u3 "$BIN" calibrate --profile "$T/p.csv" --out "$T/x.cost" --folds 1
want_rc 2
want_err "bad value '1' for --folds"
end

begin "sim --cost: a cost file with an unknown key or an impossible value names the key (a usage error: exit 2, no run)"
sed 's/^step_s = /step_z = /' "$T/c.cost" >"$T/u.cost"
run ck1 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --cost "$T/u.cost" --kv-blocks 400 --db "$DB"
want_rc 2
want_err "unknown key 'step_z'"
sed 's/^kv_token_s = .*/kv_token_s = -1/' "$T/c.cost" >"$T/n.cost"
run ck2 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --cost "$T/n.cost" --kv-blocks 400 --db "$DB"
want_rc 2
want_err "kv_token_s must be a finite number >= 0"
run ck3 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --cost "$T/c.cost" --db "$DB"
want_rc 2
want_err "give its KV capacity with --kv-blocks"
run ck4 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --cost "$T/c.cost" --kv-blocks 400 --model llama-3-8b --db "$DB"
want_rc 2
want_err "does not have the shape the cost file"
end

begin "validate: refuses a sim run, a missing cost model and a gone trace"
run v1 "$BIN" validate --db "$DB" --run simc --cost "$T/c.cost"
want_rc 1
want_err "is a sim run"
run v2 "$BIN" validate --db "$DB" --run eng
want_rc 1
want_err "give the cost model"
run v3 "$BIN" validate --db "$DB" --run eng --cost "$T/c.cost" --hw h100
want_rc 2
cp "$T/t.csv" "$T/t2.csv"
"$BIN" engine -q --trace "$T/t2.csv" --policy "$POL/continuous.lua" --model $M --threads 2 \
    --kv-blocks 400 --db "$DB" --name gone --limit 5
rm -f "$T/t2.csv"
runs_before=$(sql "$DB" "SELECT count(*) FROM runs")
run v4 "$BIN" validate --db "$DB" --run gone --cost "$T/c.cost"
want_rc 1
want_err "which is gone"
want_sql "$DB" "SELECT count(*) FROM runs" "$runs_before"
end

e2e_finish e2e_fidelity

#!/usr/bin/env bash
# e2e_repeat.sh: repeats that mean something and policies that predict (issue #28, items 1
# and 2), end to end:
#  1. sim --repeat N of a trace replay says its runs are copies; compare counts them as one
#     run and gives its throughput no interval.
#  2. sim --repeat windows:N[:LEN] replays N windows of the trace (config experiment.window);
#     compare pairs two such experiments by run; bad window specs are refused.
#  3. validate --repeat N of a vLLM benchmark import (regenerated arrivals) replays N more
#     arrival seeds and shows the predictions' range; with recorded arrivals it is refused.
#  4. policies/slo_admission.lua sheds what would miss its TTFT SLO, and report says why;
#     the engine's s:step_cost is a fit of its recent steps, or with --policy-cost FILE
#     that calibration's figure (source "executor"), recorded in the run's config.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_repeat
DB=$T/r.db
"$BIN" trace gen --n 600 --rate 4 --seed 2 --prompt lognormal:600:0.6 --output lognormal:120:0.5 \
    --out "$T/t.csv" >/dev/null || exit 1

begin "seed repeats of a trace replay are copies, said so and counted as one run"
run seeds "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name sa --repeat 3
want_rc 0
want_err "NOTE the 3 runs of experiment sa are identical" "--repeat windows:3"
run seeds2 "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/chunked_prefill.lua" --db "$DB" --name sb \
    --repeat 3
run cmp "$BIN" compare "$DB" --runs sa,sb
want_rc 0
want_out "3 runs, copies counted as one" "runs are copies"
want_out_re "^requests/s .* n/a \(one value per run\)"
end

begin "windows: N runs over N windows of the trace, paired by run in compare"
run wa "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name wa \
    --repeat windows:3
want_rc 0
want_out "experiment wa: 3 runs over windows of"
run wb "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/static.lua" --db "$DB" --name wb \
    --repeat windows:3
want_rc 0
want_sql "$DB" "select count(distinct json_extract(config, '\$.experiment.window.start_s'))
    from runs where name like 'wa-r%'" 3
want_sql "$DB" "select sum((select count(*) from requests q where q.run_id = runs.id)) from runs
    where name like 'wa-r%'" 600
run cmpw "$BIN" compare "$DB" --runs wa,wb
want_rc 0
want_out "paired by run: run k of A and of B replayed the same requests"
run bad1 "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/bad.db" \
    --repeat windows:1
want_rc 2
want_err "windows:N needs N, a whole number in 2.."
run bad2 "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/bad.db" \
    --repeat windows:3:-5
want_rc 2
want_err "LEN '-5' must be seconds > 0"
[ ! -e "$T/bad.db" ] || bad " a refused --repeat left a database"
end

begin "validate --repeat: the arrival seeds' range beside a regenerated benchmark's errors"
run imp "$BIN" import --db "$DB" --vllm "$PWD/tests/data/vllm_result.json" --name bench \
    --model llama-3-8b --hw h100
want_rc 0
run vs "$BIN" validate --db "$DB" --run bench --policy "$POL/continuous.lua" --seed 5 --repeat 3
want_rc 0
want_out "over the arrival seeds" "arrival seeds: 4 replays of the regenerated arrivals"
want_sql "$DB" "select count(*) from runs where name like 'validate-bench-seed%'" 3
printf 'arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,10,0.05,0.3\n0.5,80,5,0.04,0.2\n' \
    >"$T/m.csv"
"$BIN" import --db "$DB" --csv "$T/m.csv" --name csvrun --model llama-2-7b --hw h100 >/dev/null
run vr "$BIN" validate --db "$DB" --run csvrun --policy "$POL/continuous.lua" --repeat 2
want_rc 1
want_err "its arrivals are recorded: nothing in its replay is drawn at random"
end

begin "a policy that predicts: slo_admission sheds, and report says why"
"$BIN" trace gen --n 300 --rate 10 --seed 3 --prompt lognormal:1500:0.5 \
    --output lognormal:300:0.5 --out "$T/hot.csv" >/dev/null
run shed "$BIN" sim -q --trace "$T/hot.csv" --policy "$POL/slo_admission.lua" --set ttft_slo=1 \
    --db "$DB" --name shed
want_rc 0
run rep "$BIN" report "$DB" --run shed
want_rc 0
want_out_re "other reasons: [0-9]+ 'rejected by policy: shed' \(e\.g\. 'rejected by policy: shed: its first token at"
[ "$(sql "$DB" "select count(*) from requests where run_id = (select id from runs where
      name = 'shed') and reason like 'rejected by policy: shed:%'")" -gt 10 ] ||
    bad " fewer than 10 requests shed"
end

begin "the engine's s:step_cost: a fit of its recent steps, or its calibration with --policy-cost"
# a policy that schedules as continuous batching and checks the source and the figure
# (import finds lib/ beside the policy)
ln -s "$POL/lib" "$T/lib"
cat >"$T/probe.lua" <<'EOF2'
local batching = import("batching")
return {
    params = { want = { "recent steps" }, lo = { 0.0 }, hi = { 1e9 } },
    schedule = function(s)
        local t, src = s:step_cost { { n = 32, ctx = 0 } }
        if t then
            assert(src == s.params.want, "source " .. tostring(src))
            assert(t >= s.params.lo and t <= s.params.hi, "estimate " .. t)
        end
        local budget = batching.decode_running(s, s.max_tokens, s.max_seqs)
        batching.admit(s, budget, s.max_seqs, false, s.max_tokens)
    end,
}
EOF2
"$BIN" trace gen --n 12 --rate 50 --seed 1 --prompt uniform:8:40 --output uniform:4:12 \
    --out "$T/small.csv" >/dev/null
run erec "$BIN" engine -q --trace "$T/small.csv" --policy "$T/probe.lua" --model dummy:stories260k \
    --db "$T/e.db" --name erec --kv-blocks 64
want_rc 0
# a linear cost file: 0.25 s a step, nothing else, so the estimate is 0.25 s whatever the shape
cat >"$T/flat.cost" <<'EOF2'
format = 1
kind = linear
fitted_for = a test: a flat 0.25 s a step
name = flat
n_layers = 5
d_model = 64
n_heads = 8
n_kv_heads = 4
head_dim = 8
d_ff = 172
vocab = 512
max_seq = 512
tied_embeddings = 1
dtype_bytes = 4
step_s = 0.25
seq_s = 0
sampled_s = 0
kv_token_s = 0
attn_pair_s = 0
layer_params = 226560
lm_params = 32768
gemm_rows = 1
gemm_s_per_param = 0
EOF2
run ecal "$BIN" engine -q --trace "$T/small.csv" --policy "$T/probe.lua" --model dummy:stories260k \
    --db "$T/e.db" --name ecal --kv-blocks 64 --policy-cost "$T/flat.cost" \
    --set want=executor --set lo=0.2499 --set hi=0.2501
want_rc 0
[ "$(sql "$T/e.db" "select json_extract(config, '$.policy_cost') like '%flat.cost' from runs where name = 'ecal'")" = 1 ] ||
    bad " the run's config lacks policy_cost"
# the checks can fail: a bound the figure does not meet fails the run at the policy's line
run ewrong "$BIN" engine -q --trace "$T/small.csv" --policy "$T/probe.lua" --model dummy:stories260k \
    --db "$T/e.db" --name ewrong --kv-blocks 64 --policy-cost "$T/flat.cost" --set want=executor --set lo=0.3
want_rc 1
want_err "probe.lua:8: estimate 0.25"
run ewrong2 "$BIN" engine -q --trace "$T/small.csv" --policy "$T/probe.lua" --model dummy:stories260k \
    --db "$T/e.db" --name ewrong2 --kv-blocks 64 --set hi=0
want_rc 1
want_err "probe.lua:8: estimate"
run ebad "$BIN" engine -q --trace "$T/small.csv" --policy "$T/probe.lua" --model dummy:stories260k \
    --db "$T/e.db" --name ebad --policy-cost "$T/none.cost"
want_rc 2
want_err "--policy-cost: "
end

e2e_finish e2e_repeat

#!/usr/bin/env bash
# e2e_import.sh: end-to-end tests of `twinserve import` (analysis/import.h) and of the commands
# that read its measured runs: report (text and JSON), compare, plot, validate, runs.
#
# Good input: the hand-made fixtures in tests/data (a per-request CSV, the same requests on
# one clock, a vLLM benchmark result). Bad input: a bad cell (FILE:LINE:COLUMN), a vLLM
# result missing a key (named), usage errors (exit 2); each records nothing. validate on a
# measured run: the CSV's requests replayed exactly, the vLLM result's arrivals regenerated
# ("compares distributions"), --repeat and a missing --policy refused, and the replay options
# refused for an engine-like (simulated) run.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_import
if ! command -v python3 >/dev/null 2>&1; then echo "FAIL: python3 is required"; exit 1; fi

DB=$T/runs.db
CSV=$PWD/tests/data/measured.csv
VLLM=$PWD/tests/data/vllm_result.json

# ------------------------------------------------------------------ import
begin "import a CSV: a measured run with its requests and token times, no steps"
run csv "$BIN" import --db "$DB" --csv "$CSV" --model llama-3-8b --hw h100 --note "e2e"
want_rc 0
want_out "run measured-measured (id 1) in $DB: 5 requests (4 finished, 1 failed), 8 token times, arrivals recorded"
db_ok "$DB"
want_sql "$DB" "select kind, status, trace from runs" "measured|done|$CSV"
want_sql "$DB" "select count(*), sum(status = 'rejected') from requests" "5|1"
want_sql "$DB" "select count(*) from steps" 0
want_sql "$DB" "select json_extract(config, '\$.note') from runs" e2e
end

begin "import a vLLM result: arrivals unknown, throughput over the benchmark's duration"
run vllm "$BIN" import --db "$DB" --vllm "$VLLM" --name bench --model llama-3-8b --hw h100
want_rc 0
want_out "run bench (id 2)" "arrivals unknown" "2.500 s measured"
run report "$BIN" report "$DB" --run bench
want_rc 0
want_out "bench (id 2): measured, done" "1.60 req/s, 5.6 output tok/s, 45.6 total tok/s" \
    "(the benchmark's duration: the measurement has no arrival times)" \
    "steps     none: a measured run records requests"
want_out_re "TTFT +4 +92.50 ms"
end

begin "report --json on a measured run"
run json "$BIN" report "$DB" --run measured-measured --json
want_rc 0
got=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ok = (d["run"]["kind"] == "measured" and d["completed"] == 4 and d["rejected"] == 1
      and d["steps"] == 0 and abs(d["makespan_s"] - 2.3) < 1e-9
      and abs(d["ttft_s"]["mean"] - 0.0575) < 1e-9 and d["itl_s"]["n"] == 5
      and d["kv_utilisation"]["steps"] == 0)
print("ok" if ok else d)' "$T/json.out" 2>&1)
[ "$got" = ok ] || bad " json: $got"
end

begin "runs lists measured runs"
run runs "$BIN" runs "$DB"
want_rc 0
want_out "measured-measured" "bench"
end

begin "compare two measured runs"
run compare "$BIN" compare "$DB" --runs measured-measured,bench
want_rc 0
want_out "TTFT" "independent resampling"
end

if command -v gnuplot >/dev/null 2>&1; then
    begin "plot measured runs: CDFs, no timelines"
    run plot "$BIN" plot "$DB" --runs measured-measured,bench --out "$T/plots"
    want_rc 0
    want_err "has no steps: no timeline"
    [ -f "$T/plots/cdf_ttft.png" ] || bad " no cdf_ttft.png"
    ls "$T/plots"/timeline_* >/dev/null 2>&1 && bad " a timeline for a run without steps"
    end
else
    echo "SKIP: gnuplot not found: plot of measured runs not tested"
fi

# ------------------------------------------------------------------ validate
begin "validate a CSV run: the measured requests replayed exactly"
run val_csv "$BIN" validate --db "$DB" --run measured-measured --policy "$POL/continuous.lua"
want_rc 0
want_out "validate: measured run measured-measured (id 1) against simulated run validate-measured-measured" \
    "roofline on h100" "replay: the measured requests exactly" "per step: none" "MAPE"
grep -q "^queue" "$T/val_csv.out" && bad " a queue row for a measured run"
want_sql "$DB" "select group_concat(arrival_s || '/' || prompt_tokens, ' ') from requests where run_id = (select id from runs where name = 'validate-measured-measured')" \
    "0.0/12 0.5/30 1.0/7 2.0/20"
end

begin "validate a vLLM run: arrivals regenerated, distributions compared"
run val_vllm "$BIN" validate --db "$DB" --run bench --policy "$POL/continuous.lua" --seed 5 --json
want_rc 0
got=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ok = d["run_kind"] == "measured" and d["replay"].startswith("compares distributions (arrivals regenerated)") and "seed 5" in d["replay"]
print("ok" if ok else d["replay"])' "$T/val_vllm.out" 2>&1)
[ "$got" = ok ] || bad " json: $got"
end

begin "validate refuses --repeat with recorded arrivals, and a missing --policy, for a measured run"
CSVRUN=$(sql "$DB" "select name from runs where kind = 'measured' and json_extract(config,
    '\$.arrivals') = 'recorded' order by id limit 1")
n=$(sql "$DB" "select count(*) from runs")
run val_rep "$BIN" validate --db "$DB" --run "$CSVRUN" --policy "$POL/continuous.lua" --repeat 1
want_rc 1
want_err "is a measured run (imported from $CSV): --repeat reruns our engine"
want_err "its arrivals are recorded"
run val_nopol "$BIN" validate --db "$DB" --run bench
want_rc 1
want_err "give the policy to replay its requests with, --policy FILE"
want_sql "$DB" "select count(*) from runs" "$n"
end

begin "validate refuses the replay options for a run that is not measured"
run val_sim "$BIN" validate --db "$DB" --run validate-measured-measured --policy "$POL/continuous.lua" --hw h100
want_rc 1
want_err "run 'validate-measured-measured' is a sim run: --policy, --set, --model, --tp, --seed and the limits are for measured runs"
end

# ------------------------------------------------------------------ bad input
begin "a bad CSV cell names file, line and column, and records nothing"
printf 'arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,2,0.1,0.2\n1,10,2,abc,0.2\n' >"$T/bad.csv"
run bad_csv "$BIN" import --db "$T/none.db" --csv "$T/bad.csv"
want_rc 1
want_err "twinserve import: $T/bad.csv:3:4: column 'ttft_s': 'abc' is not a number"
[ -e "$T/none.db" ] && bad " a database was created"
end

begin "a vLLM result of another shape is refused with the missing key"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); del d["itls"]; json.dump(d, open(sys.argv[2], "w"))' "$VLLM" "$T/noitls.json"
run bad_vllm "$BIN" import --db "$DB" --vllm "$T/noitls.json"
want_rc 1
want_err "$T/noitls.json: not a vLLM serving benchmark result saved with --save-result --save-detailed: key 'itls' is missing"
want_sql "$DB" "select count(*) from runs where trace like '%noitls%'" 0
end

begin "usage errors exit 2"
run u1 "$BIN" import --db "$DB"
want_rc 2
want_err "give one file, --csv FILE or --vllm FILE"
run u2 "$BIN" import --csv "$CSV"
want_rc 2
want_err "--db DB is required"
run u3 "$BIN" import --db "$DB" --csv "$CSV" --vllm "$VLLM"
want_rc 2
run u4 "$BIN" import --db "$DB" --csv "$CSV" --tp 0
want_rc 2
want_err "bad value '0' for --tp"
run u5 "$BIN" import --db "$DB" --csv "$CSV" --name measured-measured
want_rc 1
want_err "run name 'measured-measured' already exists"
end

e2e_finish e2e_import

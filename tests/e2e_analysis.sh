#!/usr/bin/env bash
# e2e_analysis.sh: end-to-end tests of `twinserve report` and `twinserve compare`, and of the
# SQL views (analysis/views.sql) in the databases the simulator writes.
#
# Good input: a generated trace replayed by two policies (one with --save-tokens) into one
# database and by one of them into a second database; report as text and as JSON (parsed by
# python3's json.load, percentiles checked against the requests table), compare within and
# across databases. Bad input: a database without our tables, a file that is not a
# database, a missing file, an unknown run, a run with no requests, bad --slo and bad compare
# options: a clear message naming the thing and a non-zero exit, never a crash.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_analysis
if ! command -v python3 >/dev/null 2>&1; then echo "FAIL: python3 is required"; exit 1; fi

DB=$T/runs.db
DB2=$T/other.db
"$BIN" trace gen --n 300 --rate 4 --seed 3 --prompt lognormal:400:0.8 \
    --output lognormal:100:0.8 --out "$T/trace.csv" >/dev/null 2>&1
"$BIN" sim -q --trace "$T/trace.csv" --policy "$POL/continuous.lua" --db "$DB" --name cont \
    --save-tokens >/dev/null 2>&1
"$BIN" sim -q --trace "$T/trace.csv" --policy "$POL/static.lua" --db "$DB" --name static \
    >/dev/null 2>&1
"$BIN" sim -q --trace "$T/trace.csv" --policy "$POL/chunked_prefill.lua" --db "$DB2" \
    --name chunked >/dev/null 2>&1

# json_check FILE PYTHON: runs PYTHON with d = json.load(FILE); it prints "ok" or a reason.
json_check() {
    local got
    got=$(python3 - "$1" "$2" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[2])
EOF
)
    [ "$got" = ok ] || bad " json check: $got"
}

# ------------------------------------------------------------------ report

begin "report: text with ITL, KV utilisation, batch size and SLO attainment"
run rep_text "$BIN" report "$DB" --run cont --slo ttft=0.5,tpot=50ms
want_rc 0
want_out "run       cont (id 1)" "TTFT" "TPOT" "E2E" "queue" "ITL" "KV used" "batch" \
    "attainment" "goodput"
end

begin "report --json parses and nests the distributions"
run rep_json "$BIN" report "$DB" --run cont --slo ttft=0.5,e2e=20 --json
want_rc 0
json_check "$T/rep_json.out" '
for k in ("ttft_s", "tpot_s", "e2e_s", "queue_s", "itl_s"):
    assert set(("mean", "p50", "p90", "p95", "p99")) <= set(d[k]), k
    assert d[k]["p50"] <= d[k]["p99"], k
assert d["itl_s"]["n"] > 0
assert d["requests"] == 300 and d["completed"] + d["rejected"] + d["aborted"] == 300
assert d["throughput"]["requests_per_s"] > 0 and d["makespan_s"] > 0
assert d["slo"]["tpot_s"] is None and 0 <= d["slo"]["attainment"] <= 1
assert abs(d["slo"]["goodput_req_per_s"] - d["slo"]["met"] / d["makespan_s"]) < 1e-9
print("ok")'
end

begin "report --json percentiles equal numpy-linear ones from the requests table"
sql "$DB" "select ttft_s from requests where run_id = 1 and ttft_s is not null" >"$T/ttft.txt"
json_check "$T/rep_json.out" '
xs = sorted(float(v) for v in open(sys.argv[1].replace("rep_json.out", "ttft.txt")))
def pct(p):
    r = p / 100 * (len(xs) - 1); lo = int(r); hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (r - lo) * (xs[hi] - xs[lo])
for p in (50, 90, 95, 99):
    assert abs(d["ttft_s"]["p%d" % p] - pct(p)) < 1e-9, p
assert abs(d["ttft_s"]["mean"] - sum(xs) / len(xs)) < 1e-9
print("ok")'
end

begin "report: latest run by default, run by id, no ITL without tokens, null in JSON"
run rep_latest "$BIN" report "$DB" --json
want_rc 0
json_check "$T/rep_latest.out" '
assert d["run"]["name"] == "static" and d["itl_s"]["n"] == 0 and d["itl_s"]["p50"] is None
assert d["slo"] is None
print("ok")'
run rep_id "$BIN" report "$DB" --run 1
want_rc 0
want_out "cont (id 1)"
end

begin "report --help states the percentile method"
run rep_help "$BIN" report --help
want_rc 0
want_out "numpy" "time-weighted" "goodput"
end

# ------------------------------------------------------------------ compare

begin "compare: static vs continuous on one trace: paired, continuous better"
run cmp_text "$BIN" compare "$DB" --runs static,cont --resamples 500
want_rc 0
want_out "paired by request" "500 resamples, seed 20240611" "TTFT mean" "better"
want_out_re "TTFT mean .* better$"
end

begin "compare --json across two databases, seeded and reproducible"
run cmp_json "$BIN" compare "$DB" --runs cont,chunked --db2 "$DB2" --json --seed 9 \
    --resamples 300
want_rc 0
json_check "$T/cmp_json.out" '
assert d["paired"] is True and d["bootstrap"]["seed"] == 9 and d["bootstrap"]["resamples"] == 300
assert d["b"]["run"] == "chunked" and d["b"]["db"].endswith("other.db")
for k, m in d["metrics"].items():
    assert m["verdict"] in ("better", "worse", "no significant difference",
                            "no meaningful difference", "n/a"), k
    if m["ci_lo"] is not None:
        assert m["ci_lo"] <= m["ci_hi"], k
assert d["metrics"]["out_tok_per_s"]["ci_lo"] is None
print("ok")'
cp "$T/cmp_json.out" "$T/cmp_json1.out"
run cmp_json2 "$BIN" compare "$DB" --runs cont,chunked --db2 "$DB2" --json --seed 9 \
    --resamples 300
cmp -s "$T/cmp_json1.out" "$T/cmp_json2.out" || bad " the same seed gave different output"
end

begin "sim --repeat: two experiments of the speculative policy, compared by name"
run rep_a "$BIN" sim --trace "$T/trace.csv" --policy "$POL/speculative.lua" --db "$T/exp.db" \
    --name spa --repeat 4
want_rc 0
want_out "spa-r0 (id 1, seed 0)" "spa-r3 (id 4, seed 3)" "experiment spa: 4 runs"
run rep_b "$BIN" sim -q --trace "$T/trace.csv" --policy "$POL/speculative.lua" \
    --db "$T/exp.db" --name spb --repeat 10,11,12,13
want_rc 0
want_sql "$T/exp.db" "select json_extract(config, '$.experiment.seed') from runs where name = 'spb-r2'" 12
want_sql "$T/exp.db" "select json_extract(config, '$.experiment.of') from runs where name = 'spa-r1'" 4
run rep_cmp "$BIN" compare "$T/exp.db" --runs spa,spb --resamples 300 --slo ttft=1,tpot=0.05 --json
want_rc 0
json_check "$T/rep_cmp.out" '
assert d["a"]["experiment"] == "spa" and d["a"]["runs"] == 4 and d["bootstrap"]["hierarchical"]
assert d["a"]["rejected"] + d["a"]["completed"] + d["a"]["aborted"] == d["a"]["requests"]
for k, m in d["metrics"].items():
    if not m["higher_is_better"]:
        assert m["verdict"] in ("no significant difference", "no meaningful difference"), k
assert d["metrics"]["slo_attainment"]["ci_lo"] is not None
print("ok")'
run rep_bad "$BIN" sim --trace "$T/trace.csv" --policy "$POL/speculative.lua" --db "$T/exp.db" \
    --name spa --repeat 2
want_rc 2
want_err "already holds an experiment or run named 'spa'"
run rep_bad2 "$BIN" sim --trace "$T/trace.csv" --policy "$POL/speculative.lua" \
    --db "$T/exp.db" --repeat 0
want_rc 2
want_err "N must be a whole number"
end

# ------------------------------------------------------------------ views

begin "views: run_summary and request_metrics agree with report"
want_sql "$DB" "select count(*) from sqlite_master where type = 'view'" 4
want_sql "$DB" "select completed from run_summary where run = 'cont'" \
    "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["completed"])' "$T/rep_json.out")"
got=$(sql "$DB" "select count(*) from request_metrics where run = 'cont' and status = 'finished'
    and ttft_s <= 0.5 and e2e_s <= 20")
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["slo"]["met"])' "$T/rep_json.out")
[ "$got" = "$want" ] || bad " SLO count by SQL $got, report $want"
end

begin "views.sql applies to an existing database, twice"
# A copy with the views dropped stands for a database written before they existed.
cp "$DB" "$T/copy.db"
sqlite3 "$T/copy.db" "drop view request_metrics; drop view run_summary; drop view step_timeline;
    drop view token_gaps"
for d in "$T/copy.db" "$T/copy.db"; do
    out=$(sqlite3 "$d" <analysis/views.sql 2>&1) || bad " views.sql failed on $d: $out"
done
want_sql "$T/copy.db" "select count(*) from run_summary" 2
end

# ------------------------------------------------------------------ bad input

begin "report: database without our tables"
sqlite3 "$T/foreign.db" "create table t(x); insert into t values (1);"
run rep_foreign "$BIN" report "$T/foreign.db"
want_rc 1
want_err "$T/foreign.db: not a twinserve database"
end

begin "report and compare: a file that is not a database"
printf 'arrival_s,prompt_tokens,output_tokens\n0,1,1\n' >"$T/notdb.db"
run rep_notdb "$BIN" report "$T/notdb.db"
want_rc 1
want_err "$T/notdb.db"
want_err_re "not a database|not a twinserve database"
run cmp_notdb "$BIN" compare "$DB" --runs cont,x --db2 "$T/notdb.db"
want_rc 1
want_err "$T/notdb.db"
end

begin "report and compare: missing file (and no file is created)"
run rep_missing "$BIN" report "$T/missing.db"
want_rc 1
want_err "$T/missing.db: no such database"
[ -e "$T/missing.db" ] && bad " report created $T/missing.db"
run cmp_missing "$BIN" compare "$DB" --runs cont,static --db2 "$T/missing2.db"
want_rc 1
want_err "$T/missing2.db: no such database"
end

begin "report and compare: unknown run name lists the runs"
run rep_unknown "$BIN" report "$DB" --run nosuch
want_rc 1
# named by the database's path, not the literal "DB" (issue #28)
want_err "twinserve report: no run named 'nosuch' in $DB; runs: " "cont" "static"
grep -q " in DB" "$T/rep_unknown.err" && bad " the message says 'in DB'"
run cmp_unknown "$BIN" compare "$DB" --runs cont,nosuch
want_rc 1
want_err "no run named 'nosuch'"
run cmp_unknown2 "$BIN" compare "$DB" --runs cont,static --db2 "$DB2"
want_rc 1
want_err "$DB2" "no run named 'static'" "chunked"
end

begin "report and compare: a run with no requests"
# A trace with a header and no rows gives a run with 0 requests (or a failed one): either
# way report and compare must refuse it by name.
printf 'arrival_s,prompt_tokens,output_tokens\n' >"$T/empty.csv"
"$BIN" sim -q --trace "$T/empty.csv" --policy "$POL/continuous.lua" --db "$DB" --name empty \
    >/dev/null 2>&1
if [ "$(sql "$DB" "select count(*) from runs where name = 'empty'")" != 1 ]; then
    sqlite3 "$DB" "insert into runs(name, kind, status) values ('empty', 'sim', 'done')"
fi
run rep_empty "$BIN" report "$DB" --run empty
want_rc 1
want_err "run 'empty' has no requests"
run cmp_empty "$BIN" compare "$DB" --runs cont,empty
want_rc 1
want_err "run 'empty' has no requests"
end

begin "report: bad --slo values name the problem"
for spec in "ttft" "foo=1" "ttft=abc" "ttft=-1" "ttft=0" "ttft=1,ttft=2" "ttft=1,,e2e=2" ""; do
    run rep_slo "$BIN" report "$DB" --slo "$spec"
    want_rc 2
    want_err "--slo"
done
run rep_slo "$BIN" report "$DB" --slo foo=1
want_err "unknown SLO metric 'foo'"
run rep_slo "$BIN" report "$DB" --slo ttft=abc
want_err "ttft=abc"
end

begin "compare: bad options"
run cmp_noruns "$BIN" compare "$DB"
want_rc 2
want_err "--runs"
for r in "cont" "cont,static,x" ",cont" "cont,"; do
    run cmp_runs "$BIN" compare "$DB" --runs "$r"
    want_rc 2
    want_err "exactly two runs"
done
run cmp_seed "$BIN" compare "$DB" --runs cont,static --seed -3
want_rc 2
want_err "--seed"
run cmp_res "$BIN" compare "$DB" --runs cont,static --resamples 0
want_rc 2
want_err "--resamples"
run cmp_opt "$BIN" compare "$DB" --runs cont,static --bogus
want_rc 2
want_err "--bogus"
end

e2e_finish e2e_analysis

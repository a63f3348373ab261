#!/usr/bin/env bash
# e2e_import_ip.sh: end-to-end tests of `twinserve import --inference-perf DIR` (analysis/import.h,
# analysis/import_ip*.c) and `report --by stage` on the real vLLM-H100 experiment folders
# (${TWIN_DATA:-../shared/data}/vllm-h100; the suite prints SKIP and passes without them;
# tests/test_import_ip.c covers the same code on synthetic folders).
#
# Good input: Llama-2-7B general (16,800 requests, none failed, 2 stages) and reasoning
# (4,800 requests, 4,068 failed client timeouts, their prompts imputed): the counts, the stage
# ranges, the prompt cycle and its check (>= 0.95), the config members, outputs of exactly
# output_len, the stage summaries verbatim (against the stage files, with python3), and the
# per-stage report. Bad input: a folder without ground_truth.json, a config.yaml line the YAML
# reader refuses (FILE:LINE); each records nothing. Usage: two sources, --by stage on a run
# without stages.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_import_ip
VH=$DATA/vllm-h100
GEN=$VH/20260217-231439-llama-2-7b-tp1-general
REA=$VH/20260217-170634-llama-2-7b-tp1-reasoning
if [ ! -d "$GEN" ] || [ ! -d "$REA" ]; then
    echo "SKIP: $VH not found (set TWIN_DATA to the shared data folder): import --inference-perf not tested on real data"
    exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then echo "FAIL: python3 is required"; exit 1; fi
GEN=$(cd "$GEN" && pwd -P)
REA=$(cd "$REA" && pwd -P)
DB=$T/runs.db
cfg() { sql "$DB" "select json_extract(config, '$2') from runs where name = '$1'"; }

# ------------------------------------------------------------------ import
begin "import llama-2-7b general: 16800 requests, 2 stages, the prompt cycle checked"
run gen "$BIN" import --db "$DB" --inference-perf "$GEN"
want_rc 0
want_out "run measured-20260217-231439-llama-2-7b-tp1-general (id 1) in $DB: 16800 requests (16800 finished, 0 failed)" \
    "arrivals recorded" "; 2 stages: 8 req/s x 600 s, 20 req/s x 600 s; prompt cycle 100 (check 0." \
    "outputs 248 tokens (ignore_eos); model llama-2-7b (meta-llama/Llama-2-7b-hf, shape checked)" \
    "hardware not recorded (the folder does not name it): validate will need --hw"
db_ok "$DB"
R=measured-20260217-231439-llama-2-7b-tp1-general
want_sql "$DB" "select kind, status, model, hardware is null, trace from runs" "measured|done|llama-2-7b|1|$GEN"
want_sql "$DB" "select count(*), sum(status = 'finished'), sum(output_tokens = 248), sum(prompt_tokens > 0) from requests" \
    "16800|16800|16800|16800"
want_sql "$DB" "select count(*) from steps" 0
want_sql "$DB" "select json_extract(config, '\$.stages[0].first') || ',' || json_extract(config, '\$.stages[0].count') || ',' || json_extract(config, '\$.stages[1].first') || ',' || json_extract(config, '\$.stages[1].count') || ',' || json_extract(config, '\$.stages[1].rate') || ',' || json_extract(config, '\$.stages[1].duration_s') from runs" \
    "0,4800,4800,12000,20,600"
want_sql "$DB" "select json_extract(config, '\$.workload.prompt_cycle'), json_extract(config, '\$.workload.cycle_check') >= 0.95, json_extract(config, '\$.workload.cycle_pairs') from runs" \
    "100|1|16700"
[ "$(cfg $R '$.source.format')" = inference-perf ] || bad " source.format"
[ "$(cfg $R '$.metrics')" = client ] || bad " metrics"
[ "$(cfg $R '$.experiment')" = 20260217-231439-llama-2-7b-tp1-general ] || bad " experiment"
want_sql "$DB" "select json_extract(config, '\$.server.engine'), json_extract(config, '\$.server.model_id'), json_extract(config, '\$.server.tp'), json_extract(config, '\$.server.max_model_len'), json_extract(config, '\$.server.max_num_batched_tokens'), json_extract(config, '\$.server.max_num_seqs'), json_extract(config, '\$.server.block_size'), json_extract(config, '\$.server.kv_blocks') from runs" \
    "vllm|meta-llama/Llama-2-7b-hf|1|4096|2048|128|16|7462"
want_sql "$DB" "select json_extract(config, '\$.client.tool'), json_extract(config, '\$.client.api'), json_extract(config, '\$.client.streaming'), json_extract(config, '\$.client.ignore_eos'), json_extract(config, '\$.client.timeout_s'), json_extract(config, '\$.client.timeout_source') from runs" \
    "inference-perf|completion|1|1|300|aiohttp ClientTimeout default total (request_timeout null)"
want_sql "$DB" "select json_extract(config, '\$.workload.type'), json_extract(config, '\$.workload.num_groups'), json_extract(config, '\$.workload.num_prompts_per_group'), json_extract(config, '\$.workload.system_prompt_len'), json_extract(config, '\$.workload.question_len'), json_extract(config, '\$.workload.output_len'), json_type(config, '\$.imputed_prompts') from runs" \
    "shared_prefix|10|10|100|447|248|"
sqlite3 -batch -noheader "$DB" "select config from runs where id = 1" >"$T/gen_config.json"
got=$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1])); bad = []
names = {"ttft": "time_to_first_token", "e2e": "request_latency", "tpot": "time_per_output_token",
         "itl": "inter_token_latency", "ntpot": "normalized_time_per_output_token"}
stats = {"mean": "mean", "p50": "median", "p75": "p75", "p90": "p90", "p95": "p95", "p99": "p99",
         "p99_9": "p99.9", "max": "max"}
for s in c["stages"]:
    f = json.load(open("%s/stage_%d_lifecycle_metrics.json" % (sys.argv[2], s["stage"])))
    for k, v in names.items():
        for a, b in stats.items():
            if s["summary"][k][a] != f["successes"]["latency"][v][b]: bad.append((s["stage"], k, a))
    for k, v in f["successes"]["throughput"].items():
        if s["summary"]["throughput"][k] != v: bad.append((s["stage"], k))
    if s["summary"]["successes"] != f["successes"]["count"]: bad.append("successes")
print("ok" if not bad else bad[:5])' "$T/gen_config.json" "$GEN" 2>&1)
[ "$got" = ok ] || bad " stage summaries not verbatim: $got"
end

begin "import llama-2-7b reasoning: 4068 client timeouts, their prompts imputed"
run rea "$BIN" import --db "$DB" --inference-perf "$REA" --name reasoning --hw h100 --note e2e
want_rc 0
want_out "run reasoning (id 2) in $DB: 4800 requests (732 finished, 4068 failed)" \
    "; 1 stage: 4 req/s x 1200 s; prompt cycle 100 (check 0." "4068 failed (4068 prompts imputed)"
grep -q "validate will need --hw" "$T/rea.out" && bad " asks for --hw although it was given"
want_sql "$DB" "select count(*), sum(status = 'rejected'), sum(prompt_tokens > 0), sum(output_tokens = 1448) from requests where run_id = 2" \
    "4800|4068|4800|4800"
want_sql "$DB" "select count(*) from requests where run_id = 2 and status = 'rejected' and reason like 'client timeout after 30_._ s (inference-perf has_error)'" 4068
want_sql "$DB" "select hardware, json_extract(config, '\$.hw'), json_extract(config, '\$.note'), json_extract(config, '\$.imputed_prompts.count'), json_extract(config, '\$.imputed_prompts.same_prompt'), json_extract(config, '\$.stages[0].first'), json_extract(config, '\$.stages[0].count'), json_extract(config, '\$.stages[0].summary.failures'), json_extract(config, '\$.workload.cycle_check') >= 0.95 from runs where id = 2" \
    "h100|h100|e2e|4068|4068|0|4800|4068|1"
end

# ------------------------------------------------------------------ report --by stage
begin "report --by stage: our figures per stage beside inference-perf's"
run by "$BIN" report "$DB" --run "$R" --by stage
want_rc 0
want_out "stage   rate  dur_s requests finished  failed ttft_mean" "ip_tpot_mean ip_itl_p75 ip_itl_p90 ip_itl_p99" \
    "(ip_* = inference-perf's own figures for the stage"
# stage means as the stage files give them: TTFT 27.11 / 51.85 ms
want_out_re "^0 +8 +600 +4800 +4800 +0 +27\.11 "
want_out_re "^1 +20 +600 +12000 +12000 +0 +51\.85 "
run by_rea "$BIN" report "$DB" --run reasoning --by stage
want_rc 0
want_out_re "^0 +4 +1200 +4800 +732 +4068 "
end

begin "report --by stage refuses a run without stages, before printing anything"
printf 'arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,2,0.1,0.2\n' >"$T/one.csv"
"$BIN" import --db "$DB" --csv "$T/one.csv" --name plain -q
run by_csv "$BIN" report "$DB" --run plain --by stage
want_rc 1
want_err "run 'plain' records no load stages: they come with \`import --inference-perf\` and with validate's replays of such a run"
[ -s "$T/by_csv.out" ] && bad " printed a report before refusing"
end

# ------------------------------------------------------------------ bad input
begin "a folder without ground_truth.json records nothing"
mkdir -p "$T/broken"
for f in "$GEN"/*; do [ "$(basename "$f")" = ground_truth.json ] || ln -s "$f" "$T/broken/"; done
run bad_gt "$BIN" import --db "$T/none.db" --inference-perf "$T/broken"
want_rc 1
want_err "twinserve import: $T/broken: ground_truth.json is missing"
[ -e "$T/none.db" ] && bad " a database was created"
end

begin "a config.yaml line the YAML reader refuses names FILE:LINE"
ln -s "$GEN/ground_truth.json" "$T/broken/"
rm "$T/broken/config.yaml"
sed 's/^  type: constant$/  type: \&c constant/' "$GEN/config.yaml" >"$T/broken/config.yaml"
n=$(sql "$DB" "select count(*) from runs")
run bad_yaml "$BIN" import --db "$DB" --inference-perf "$T/broken"
want_rc 1
want_err_re "twinserve import: $T/broken/config.yaml:[0-9]+: anchors, aliases and tags \(&, \*, !\) are not supported"
want_sql "$DB" "select count(*) from runs" "$n"
end

begin "usage: one source, and --help names the folder option"
run u1 "$BIN" import --db "$DB" --inference-perf "$GEN" --csv "$T/one.csv"
want_rc 2
want_err "give one file, --csv FILE or --vllm FILE, or one folder, --inference-perf DIR"
run u2 "$BIN" import --help
want_rc 0
want_out "--inference-perf DIR"
run u3 "$BIN" import --db "$DB" --inference-perf "$GEN" --tp 2 --name other
want_rc 1
want_err "--tp 2, but exp-config.yaml says tensor_parallelism 1"
end

e2e_finish e2e_import_ip

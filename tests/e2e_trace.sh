#!/usr/bin/env bash
# e2e_trace.sh: end-to-end tests of the small CLIs: `twinserve trace gen|info`, `runs`,
# `kv`, `roofline`, `presets` and the top-level dispatcher.
#
# trace gen: format, defaults, the --n/--duration/--rate/--arrival/--prompt/--output options
# checked on the generated numbers, same seed = same bytes, --out, bad distributions (exit
# 2 and a message). trace info: on a generated file and on the real traces, against the
# counts and means in ${TWIN_DATA:-../shared/data}/README.md (SKIP when the data is absent),
# and a trace's own prefix reuse (prefix groups by hand; Mooncake's conversation trace).
# runs: the listing after sim runs; a missing DB (exit 1, not created) and a non-twinserve
# file. kv/roofline/presets: known answers for llama-2-70b; error exits.
#
# Run from the repo root (tests/run_all.sh does) with TWIN_BIN set to the binary. Prints
# "ok NAME" per passing check, "FAIL: NAME: reasons" plus the command's output per failing
# one; exits non-zero if any check failed.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_trace

want_no_out() { [ -s "$T/$last.out" ] && bad " unexpected output on stdout"; }
# field FILE KEY: the value after KEY at the start of a line of `trace info` output
field() { awk -v k="$2" '$1 == k { $1 = ""; sub(/^ +/, ""); print; exit }' "$1"; }
# want_awk FILE DESCRIPTION AWK-PROGRAM: the program (over the CSV minus its header, fields
# split on commas) prints "ok", or else the reason.
want_awk() {
    local got
    got=$(awk -F, "NR > 1 { n++ } $3" "$1")
    [ "$got" = ok ] || bad " $2: $got"
}
# in_range X LO HI: LO < X < HI (numbers; false for an empty X)
in_range() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x != "" && x + 0 > lo && x + 0 < hi) }'; }
# median COL FILE: the lower median of a CSV column (header skipped)
median() { tail -n +2 "$2" | cut -d, -f"$1" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] + 0 }'; }
gen() { run "$1" "$BIN" trace gen "${@:2}"; }
HEADER=arrival_s,prompt_tokens,output_tokens

# ------------------------------------------------------------------ trace gen

begin "trace gen with defaults: header + 1000 rows, sorted arrivals from 0, lengths in [1, 32768]"
gen defaults
want_rc 0
[ "$(head -n 1 "$T/defaults.out")" = "$HEADER" ] || bad " header is '$(head -n 1 "$T/defaults.out")'"
want_awk "$T/defaults.out" "rows" '
    NR > 1 && (NF != 3 || $2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/ || $2 < 1 || $3 < 1 || $2 > 32768 ||
               $3 > 32768 || $1 + 0 < prev) { bad = bad " line " NR ": " $0 }
    NR > 1 { prev = $1 + 0 }
    NR == 2 && $1 + 0 != 0 { bad = bad " first arrival " $1 }
    END { print (bad == "" && n == 1000) ? "ok" : "n=" n bad }'
# 1000 Poisson arrivals at rate 1 span ~1000 s; lognormal medians 1000 and 200.
want_awk "$T/defaults.out" "default rate" 'NR > 1 { t = $1 } END { print (t > 850 && t < 1150) ? "ok" : "last arrival " t }'
mp=$(median 2 "$T/defaults.out") mo=$(median 3 "$T/defaults.out")
in_range "$mp" 800 1250 || bad " median prompt $mp, expected ~1000"
in_range "$mo" 160 250 || bad " median output $mo, expected ~200"
end

begin "trace gen: the same seed gives the same bytes, another seed other bytes"
gen seed_a --n 300 --seed 11
cp "$T/seed_a.out" "$T/seed_a.csv"
gen seed_b --n 300 --seed 11
want_rc 0
cmp -s "$T/seed_a.csv" "$T/seed_b.out" || bad " two runs with --seed 11 differ"
gen seed_c --n 300 --seed 12
cmp -s "$T/seed_a.csv" "$T/seed_c.out" && bad " --seed 11 and --seed 12 give the same trace"
gen seed_0 --n 300
cp "$T/seed_0.out" "$T/seed_0.csv"
gen seed_00 --n 300 --seed 0
cmp -s "$T/seed_0.csv" "$T/seed_00.out" || bad " the default seed is not 0"
end

begin "trace gen --out FILE: writes the same bytes as stdout, and says what it wrote"
gen out --n 300 --seed 11 --out "$T/gen_out.csv"
want_rc 0
cmp -s "$T/seed_a.csv" "$T/gen_out.csv" || bad " --out file differs from stdout output"
last_arrival=$(tail -n 1 "$T/gen_out.csv" | awk -F, '{ printf "%.3f", $1 }')
want_out "[trace gen] wrote 300 requests to $T/gen_out.csv: arrivals 0 to $last_arrival s ("
want_out_re "req/s\), mean prompt [0-9]+ and output [0-9]+ tokens\$"
[ "$(wc -l <"$T/out.out")" -eq 1 ] || bad " more than one line on stdout"
end

begin "trace gen --n 10: 10 rows"
gen n10 --n 10 --seed 5
want_rc 0
[ "$(wc -l <"$T/n10.out")" -eq 11 ] || bad " $(wc -l <"$T/n10.out") lines"
end

begin "trace gen --rate 5 --n 2000: mean rate ~5 req/s, exponential gaps (CV ~1)"
gen rate5 --n 2000 --rate 5 --seed 2
want_rc 0
want_awk "$T/rate5.out" "poisson" '
    NR > 2 { g = $1 - prev; s += g; s2 += g * g; m++ } NR > 1 { prev = $1; last = $1 }
    END { mean = s / m; cv = sqrt(s2 / m - mean * mean) / mean; rate = (n - 1) / last;
          print (rate > 4.5 && rate < 5.5 && cv > 0.9 && cv < 1.1) ? "ok" : "rate " rate ", CV " cv }'
end

begin "trace gen --arrival gamma:2: gap CV ~2 at the same mean rate"
gen gamma --n 5000 --rate 5 --arrival gamma:2 --seed 2
want_rc 0
want_awk "$T/gamma.out" "gamma" '
    NR > 2 { g = $1 - prev; s += g; s2 += g * g; m++ } NR > 1 { prev = $1; last = $1 }
    END { mean = s / m; cv = sqrt(s2 / m - mean * mean) / mean; rate = (n - 1) / last;
          print (rate > 4.2 && rate < 5.8 && cv > 1.7 && cv < 2.3) ? "ok" : "rate " rate ", CV " cv }'
end

begin "trace gen --duration 60 --rate 3: arrivals within 60 s, about 180 rows"
gen dur --duration 60 --rate 3 --seed 4
want_rc 0
want_awk "$T/dur.out" "duration" 'NR > 1 { last = $1 } END { print (last <= 60 && n > 130 && n < 230) ? "ok" : n " rows, last " last }'
end

begin "trace gen --prompt fixed:100 --output uniform:5:10"
gen dists --n 500 --prompt fixed:100 --output uniform:5:10 --seed 3
want_rc 0
want_awk "$T/dists.out" "dists" '
    NR > 1 { if ($2 != 100) bad = bad " prompt " $2; if ($3 < 5 || $3 > 10) bad = bad " output " $3; seen[$3] = 1 }
    END { print (bad == "" && seen[5] && seen[10] && n == 500) ? "ok" : "n=" n " seen5=" seen[5] " seen10=" seen[10] bad }'
end

begin "trace gen --prompt lognormal:500:0.5:600: clamped to 600, median ~500"
gen lognorm --n 1000 --prompt lognormal:500:0.5:600 --output lognormal:50:1 --seed 3
want_rc 0
want_awk "$T/lognorm.out" "lognormal" '
    NR > 1 { if ($2 > 600 || $2 < 1) bad = bad " " $2; at += ($2 == 600) }
    END { print (bad == "" && at > 200 && at < 500) ? "ok" : "at max " at bad }'
mp=$(median 2 "$T/lognorm.out")
in_range "$mp" 440 560 || bad " median prompt $mp, expected ~500"
end

AZ=$DATA/traces/AzureLLMInferenceTrace_conv.csv
if [ -f "$AZ" ]; then
    begin "trace gen --prompt/--output trace:AZURE: resampled (prompt, output) pairs of the trace"
    gen resample --n 500 --prompt "trace:$AZ" --output "trace:$AZ" --seed 3
    want_rc 0
    # every generated pair is a row of the source trace
    miss=$(awk -F, '{ sub(/\r$/, "") } FNR == 1 { next } NR == FNR { pair[$2 "," $3] = 1; next } !(($2 "," $3) in pair) { m++ }
                    END { print m + 0 }' "$AZ" "$T/resample.out")
    [ "$miss" = 0 ] || bad " $miss generated pairs are not rows of the trace"
    [ "$(wc -l <"$T/resample.out")" -eq 501 ] || bad " $(wc -l <"$T/resample.out") lines"
    end
else
    echo "SKIP: trace gen trace:PATH: $AZ not found (set TWIN_DATA)"
fi

for c in "--prompt|foo:1" "--prompt|fixed:" "--prompt|lognormal:100" "--prompt|uniform:10:5" \
    "--output|fixed:-3" "--output|fixed:0" "--output|uniform:a:b" "--arrival|gamma:abc" \
    "--arrival|weird" "--n|abc" "--n|0" "--rate|-1" "--seed|abc"; do
    opt=${c%%|*} val=${c#*|}
    begin "trace gen $opt $val: exit 2 with a message naming it, no output file"
    gen bad_dist --n 5 "$opt" "$val" --out "$T/bad_dist.csv"
    want_rc 2
    want_no_out
    want_err "$opt" "$val"
    [ -e "$T/bad_dist.csv" ] && bad " the --out file was created"
    end
done

begin "trace gen --n and --duration together: exit 2"
gen both --n 5 --duration 10
want_rc 2
want_err "--n" "--duration"
end

begin "trace gen --prompt trace:MISSING: exit 1, names the file"
gen bad_trace --n 5 --prompt "trace:$T/no_such.csv"
want_rc 1
want_err "$T/no_such.csv"
end

begin "trace gen --out into a non-directory: exit 1, names the path"
gen bad_out --n 5 --out /etc/passwd/x.csv
want_rc 1
want_err "/etc/passwd/x.csv"
end

# ------------------------------------------------------------------ trace info

gen info_src --n 50 --seed 4 --out "$T/gen50.csv"
begin "trace info on a generated trace: plain, 50 requests, stats match the file"
run info_gen "$BIN" trace info "$T/gen50.csv"
want_rc 0
[ "$(field "$T/info_gen.out" format)" = plain ] || bad " format '$(field "$T/info_gen.out" format)'"
[ "$(field "$T/info_gen.out" requests)" = 50 ] || bad " requests '$(field "$T/info_gen.out" requests)'"
want_out_re '^skipped +0'
# mean and max prompt as computed from the file
exp=$(awk -F, 'NR > 1 { s += $2; if ($2 > m) m = $2; n++ } END { printf "mean %.1f .* max %d", s / n, m }' "$T/gen50.csv")
want_out_re "^prompt +$exp\$"
exp=$(awk -F, 'NR > 1 { last = $1 } END { printf "%.3f s", last }' "$T/gen50.csv")
want_out_re "^duration +$exp"
end

begin "trace info --limit 20 and --rate-scale 2 on a generated trace"
run info_lim "$BIN" trace info "$T/gen50.csv" --limit 20
want_rc 0
[ "$(field "$T/info_lim.out" requests)" = 20 ] || bad " --limit 20: requests '$(field "$T/info_lim.out" requests)'"
d1=$(field "$T/info_gen.out" duration | awk '{ print $1 }')
run info_rs "$BIN" trace info "$T/gen50.csv" --rate-scale 2
want_rc 0
d2=$(field "$T/info_rs.out" duration | awk '{ print $1 }')
awk -v a="$d1" -v b="$d2" 'BEGIN { exit !(b > 0 && (a / b - 2) ^ 2 < 1e-4) }' ||
    bad " --rate-scale 2 duration $d2 is not half of $d1"
end

begin "trace info errors: missing file, malformed row (FILE:LINE), bad --format, no FILE"
run info_missing "$BIN" trace info "$T/no_such.csv"
want_rc 1
want_err "$T/no_such.csv"
{ head -n 20 "$T/gen50.csv"; echo "1e3,abc,4"; } >"$T/bad_row.csv"
run info_bad "$BIN" trace info "$T/bad_row.csv"
want_rc 1
want_err "$T/bad_row.csv:21"
run info_fmt "$BIN" trace info "$T/gen50.csv" --format nope
want_rc 2
want_err "nope"
run info_nofile "$BIN" trace info
want_rc 2
end

# real_info FILE FORMAT REQUESTS SKIPPED PROMPT_MEAN OUTPUT_MEAN DURATION [P50 P99 of prompt]
real_info() {
    local f=$DATA/traces/$1
    if [ ! -f "$f" ]; then
        echo "SKIP: trace info $1: $f not found (set TWIN_DATA)"
        return
    fi
    begin "trace info $1: $3 requests, $4 skipped, means as in the data README"
    run "info_$1" "$BIN" trace info "$f"
    want_rc 0
    local o=$T/info_$1.out
    [ "$(field "$o" format)" = "$2" ] || bad " format '$(field "$o" format)', expected $2"
    [ "$(field "$o" requests)" = "$3" ] || bad " requests '$(field "$o" requests)', expected $3"
    [ "$(field "$o" skipped | awk '{ print $1 }')" = "$4" ] || bad " skipped '$(field "$o" skipped)', expected $4"
    [ "$(field "$o" prompt | awk '{ print $2 }')" = "$5" ] || bad " prompt '$(field "$o" prompt)', expected mean $5"
    [ "$(field "$o" output | awk '{ print $2 }')" = "$6" ] || bad " output '$(field "$o" output)', expected mean $6"
    [ "$(field "$o" duration | awk '{ printf "%.1f", $1 }')" = "$7" ] || bad " duration '$(field "$o" duration)', expected $7 s"
    if [ $# -ge 9 ]; then
        [ "$(field "$o" prompt | awk '{ print $4 " " $6 }')" = "$8 $9" ] ||
            bad " prompt '$(field "$o" prompt)', expected p50 $8 p99 $9"
    fi
    end
}
# Numbers from shared/data/README.md (BurstGPT: without the failed 0-token rows).
real_info AzureLLMInferenceTrace_conv.csv azure 19366 0 1154.7 211.1 3501.7 1020 4142
real_info AzureLLMInferenceTrace_code.csv azure 8819 0 2047.8 27.9 3435.9 1469 7436
real_info BurstGPT_1_first400.csv burstgpt 383 17 543.6 288.8 37269.0 353 1960
real_info BurstGPT_3_first400.csv burstgpt 399 1 618.9 171.3 41453.0
real_info mooncake_conversation_trace.jsonl mooncake 12031 0 12035.1 342.6 3537.0 6909 85401
real_info mooncake_synthetic_trace.jsonl mooncake 3993 0 15325.5 149.1 1022.0 11587 66458

begin "trace info: a trace's own prefix reuse (an unlimited cache's hit rate)"
# plain trace, 10 requests, prefix groups: 0 (300 tokens) 4 times, 1 (200 tokens) 3 times,
# the rest none: 5 of the 7 grouped prompts repeat a group, 3 x 300 + 2 x 200 of 5000 tokens
awk 'BEGIN { print "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens";
             for (i = 0; i < 10; i++) {
                 g = i < 4 ? 0 : i < 7 ? 1 : -1
                 if (g < 0) printf "%d,500,5,,\n", i
                 else printf "%d,500,5,%d,%d\n", i, g, g ? 200 : 300 } }' >"$T/groups.csv"
run info_groups "$BIN" trace info "$T/groups.csv"
want_rc 0
[ "$(field "$T/info_groups.out" reuse)" = "71.4% of the 7 prompt blocks (26.0% of the prompt tokens) repeat an earlier request's prefix: an unlimited prefix cache's hit rate" ] ||
    bad " reuse '$(field "$T/info_groups.out" reuse)'"
run info_nogroups "$BIN" trace info "$T/gen50.csv"
[ "$(field "$T/info_nogroups.out" reuse)" = "- (the trace names no shared prefixes: no hash ids, no prefix groups)" ] ||
    bad " reuse without groups '$(field "$T/info_nogroups.out" reuse)'"
MOON=$DATA/traces/mooncake_conversation_trace.jsonl
if [ -f "$MOON" ]; then
    run info_moon "$BIN" trace info "$MOON"
    want_rc 0
    # issue #28: the Mooncake conversation trace reuses about 37% of its prompt
    field "$T/info_moon.out" reuse | grep -q "^36.6% of the 288500 prompt blocks (37.4% of the prompt tokens)" ||
        bad " Mooncake reuse '$(field "$T/info_moon.out" reuse)', expected 36.6% of blocks, 37.4% of tokens"
else
    echo "SKIP: $MOON absent: the Mooncake prefix reuse not checked"
fi
end

if [ -f "$AZ" ]; then
    begin "trace info --limit 100 on the Azure conv trace: 100 requests"
    run info_az100 "$BIN" trace info "$AZ" --limit 100
    want_rc 0
    [ "$(field "$T/info_az100.out" requests)" = 100 ] || bad " requests '$(field "$T/info_az100.out" requests)'"
    end
fi

# ------------------------------------------------------------------ runs

DB=$T/runs.db
run sim1 "$BIN" sim -q --trace "$T/gen50.csv" --policy "$POL/continuous.lua" --db "$DB" --name alpha
r1=$rc
run sim2 "$BIN" sim -q --trace "$T/gen50.csv" --policy "$POL/chunked_prefill.lua" --db "$DB" --name beta
r2=$rc
begin "runs DB after two sim runs: one line per run with name, policy, status"
[ "$r1$r2" = 00 ] || bad " the sim runs exited $r1 and $r2"
run runs "$BIN" runs "$DB"
want_rc 0
want_out_re '^alpha +continuous +done'
want_out_re '^beta +chunked_prefill +done'
[ "$(grep -cE '^(alpha|beta) ' "$T/runs.out")" -eq 2 ] || bad " expected exactly 2 run lines"
# done/rejected count as in the database
exp=$(sqlite3 -batch -noheader "$DB" 2>/dev/null "select sum(status='finished') || '/' || sum(status='rejected') from requests
        where run_id = (select id from runs where name = 'alpha')")
grep -E '^alpha ' "$T/runs.out" | grep -qF " $exp " || bad " the alpha line lacks done/rejected $exp"
end

begin "runs DB --run beta: only that run; --run by id"
run runs_beta "$BIN" runs "$DB" --run beta
want_rc 0
want_out_re '^beta '
grep -qE '^alpha ' "$T/runs_beta.out" && bad " alpha listed"
run runs_id "$BIN" runs "$DB" --run 1
want_rc 0
want_out_re '^alpha '
grep -qE '^beta ' "$T/runs_id.out" && bad " beta listed for --run 1"
end

begin "runs DB --run nosuch: exit 1, names it"
run runs_nosuch "$BIN" runs "$DB" --run nosuch
want_rc 1
want_err "nosuch"
end

run sim_fail "$BIN" sim -q --trace "$T/bad_row.csv" --policy "$POL/continuous.lua" --db "$DB" --name gamma
begin "runs lists a failed run as failed"
[ "$rc" -eq 1 ] || bad " the failing sim run exited $rc"
run runs_fail "$BIN" runs "$DB" --run gamma
want_rc 0
want_out_re '^gamma +continuous +failed'
end

begin "runs on a missing DB: exit 1, message, the file is not created"
run runs_missing "$BIN" runs "$T/missing.db"
want_rc 1
want_err "$T/missing.db"
[ -e "$T/missing.db" ] && bad " $T/missing.db was created"
end

sqlite3 "$T/other.db" "create table t(a); insert into t values (1);"
cp "$T/other.db" "$T/other.copy"
begin "runs on a non-twinserve SQLite file: exit 1, message, file untouched"
run runs_other "$BIN" runs "$T/other.db"
want_rc 1
want_err "$T/other.db"
cmp -s "$T/other.db" "$T/other.copy" || bad " the file was modified"
sqlite3 -batch -noheader "$T/other.db" ".tables" | grep -qw runs && bad " a runs table was added"
end

: >"$T/zero.db"
begin "runs on an empty file and on a text file: exit 1, message"
run runs_zero "$BIN" runs "$T/zero.db"
want_rc 1
want_err "$T/zero.db"
[ -s "$T/zero.db" ] && bad " the empty file was written to"
run runs_text "$BIN" runs "$T/gen50.csv"
want_rc 1
want_err "$T/gen50.csv"
end

begin "runs without DB: usage error, exit 2"
run runs_none "$BIN" runs
want_rc 2
end

# ------------------------------------------------------------------ kv / roofline / presets

begin "kv --model llama-2-70b --seq 4096: 327,680 B per token, 1,342,177,280 B per sequence"
run kv "$BIN" kv --model llama-2-70b --seq 4096
want_rc 0
want_out "1,342,177,280" "327,680"
end

begin "kv --batch 8 --dtype fp8: halves the bytes per token, 8 sequences"
run kv8 "$BIN" kv --model llama-2-70b --seq 4096 --batch 8 --dtype fp8
want_rc 0
want_out "163,840" "5,368,709,120"
end

begin "kv of latent attention and sliding windows: deepseek-v3 against MHA and GQA-8, gpt-oss-120b's window"
# by hand: 61 layers x (512 latent + 64 rope key) x 2 B = 70,272 B; MHA caches 128 heads x
# (192-wide keys + 128-wide values) x 61 x 2 = 4,997,120 B (71.1x); GQA-8 312,320 B (4.4x)
run kvmla "$BIN" kv --model deepseek-v3 --seq 4096
want_rc 0
want_out "= 61 x (512 + 64) x 2" "= 70,272 B" "would cache 4,997,120 B a token: 71.1x" "312,320 B: 4.4x"
# 18 full layers hold all 4,096 tokens and 18 window layers 128, 2,048 B per token and layer:
# 155,713,536 B against
# 301,989,888 B (48.4% saved); at 128k the saving tends to the window layers' half (50.0%)
run kvswa "$BIN" kv --model gpt-oss-120b --seq 4096
want_rc 0
want_out "at 4,096 tokens: 155,713,536 B a sequence with the window, 301,989,888 B without: 48.4% saved" \
    "at 131,072 tokens: 4,836,556,800 B a sequence with the window, 9,663,676,416 B without: 50.0% saved" \
    "= 155,713,536 B"
end

begin "latent attention and shared experts are priced, windows free blocks, parallel specs recorded or refused"
"$BIN" trace gen --n 20 --rate 2 --seed 1 --out "$T/few.csv" >/dev/null
# deepseek-v3 in bf16 (1.34 TB) does not fit on 8 H200s; with fp8 weights and KV it does
run simmla "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model deepseek-v3 \
    --hw h200 --tp 8 --db "$T/mla.db"
want_rc 2
want_err "deepseek-v3 does not fit on 8 x h200"
cat >"$T/ds8.model" <<'EOF2'
name = deepseek-v3-fp8
n_layers = 61
d_model = 7168
n_heads = 128
n_kv_heads = 128
head_dim = 192
d_ff = 18432
vocab = 129280
max_seq = 163840
dtype_bytes = 1
n_experts = 256
experts_per_tok = 8
moe_d_ff = 2048
n_dense_layers = 3
shared_d_ff = 2048
kv_lora_rank = 512
q_lora_rank = 1536
qk_nope_head_dim = 128
qk_rope_head_dim = 64
v_head_dim = 128
EOF2
run simmla8 "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model "$T/ds8.model" \
    --hw h200 --tp 8 --db "$T/mla.db"
want_rc 0
# the latent (61 x 576 x 1 B = 35,136 B a token) is whole on each device: the KV pool is
# what 126 GiB requested leaves after an eighth of the 671 GB of weights, some 50 GB a device
kvgb=$(sql "$T/mla.db" "select round(json_extract(config, '$.num_blocks') * 16 * 35136 / 1e9) from runs")
awk -v g="$kvgb" 'BEGIN { exit !(g >= 35 && g <= 60) }' || bad " KV pool of ${kvgb} GB a device"
[ "$(sql "$T/mla.db" "select count(*) from requests where status = 'finished'")" = 20 ] ||
    bad " not every request finished"
# the same with the format options on the built-in shape, recorded in the run's config
run simfmt "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model deepseek-v3 \
    --weight-format fp8 --kv-dtype fp8 --hw h200 --tp 8 --db "$T/fmt.db"
want_rc 0
[ "$(sql "$T/fmt.db" "select json_extract(config, '$.weight_format') || ' ' ||
      json_extract(config, '$.kv_dtype_bytes') from runs")" = "fp8 1" ] || bad " the config lacks the format"
run simmx "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model gpt-oss-120b \
    --weight-format mxfp4 --hw h100 --db "$T/fmt.db"
want_rc 0
run simbadfmt "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model gpt-oss-120b \
    --weight-format fp6 --db "$T/fmt.db"
want_rc 2
want_err "bad value 'fp6' for --weight-format (bf16, fp8, int4, mxfp4, nvfp4, q8_0 or q4_0)"
run roofmla "$BIN" roofline --model deepseek-v3 --hw h200
want_rc 0
want_out "tokens/s <= bandwidth / weight bytes" "decode B=64"
# windows free their blocks (no warning); with prefix caching the capacity is counted in full
run simswa "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model gpt-oss-20b \
    --hw h100 --db "$T/swa.db"
want_rc 0
grep -q "sliding window" "$T/simswa.err" && bad " a window warning without prefix caching"
run simswapc "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model gpt-oss-20b \
    --hw h100 --prefix-caching --db "$T/swa.db"
want_rc 0
want_err "gpt-oss-20b's 128-token sliding window (12 of its 24 layers): the KV capacity counts every layer at the whole context with --prefix-caching"
# parallelism beyond tp: recorded, and refused with the reason
run simpar "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --model deepseek-v3 \
    --weight-format fp8 --kv-dtype fp8 --hw h200 --parallel tp=1,dp=8,ep=8 --db "$T/par.db"
want_rc 0
[ "$(sql "$T/par.db" "select json_extract(config, '$.parallel') || ' ' ||
      json_extract(config, '$.gpus') || ' ' || hardware from runs")" = \
  "tp=1,dp=8,ep=8,pp=1 8 h200 x8 (tp=1,dp=8,ep=8,pp=1)" ] || bad " the config lacks the split"
run simbadpar "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" \
    --model deepseek-v3 --weight-format fp8 --hw h200 --parallel tp=8,dp=2 --db "$T/par.db"
want_rc 2
want_err "dp 2 needs expert parallelism over its ranks: ep=16"
run simbadkey "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" \
    --model deepseek-v3 --parallel tp=8,xp=2 --db "$T/par.db"
want_rc 2
want_err "unknown key 'xp' (keys: tp, dp, ep, pp, mb, sched)"
run simtppar "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" \
    --model deepseek-v3 --tp 4 --parallel tp=8 --db "$T/par.db"
want_rc 2
want_err "--tp 4 and --parallel tp=8 disagree"
# KV tiers below HBM: refused without prefix caching or out of order; on Mooncake's
# conversation trace with a small HBM cache, evicted prefix blocks come back from DRAM
run simtier0 "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" \
    --kv-tier dram:256GB --db "$T/tier.db"
want_rc 2
want_err "--kv-tier keeps evicted prefix blocks: it needs --prefix-caching"
run simtier1 "$BIN" sim -q --trace "$T/few.csv" --policy "$POL/continuous.lua" --prefix-caching \
    --kv-tier ssd:1TB --kv-tier dram:1GB --db "$T/tier.db"
want_rc 2
want_err "KV tier 2 (dram): DRAM below SSD"
MOON=$DATA/traces/mooncake_conversation_trace.jsonl
if [ -f "$MOON" ]; then
    run simtier "$BIN" sim --trace "$MOON" --limit 200 --policy "$POL/continuous.lua" \
        --model llama-3-8b --hw h100 --prefix-caching --kv-blocks 600 --kv-tier dram:50GB \
        --db "$T/tier.db"
    want_rc 0
    want_out_re "^kv tiers: dram 50.0 GB a replica \(23841 blocks\): [1-9][0-9]* blocks written, [1-9][0-9]* reloaded"
    [ "$(sql "$T/tier.db" "select json_extract(config, '$.kv_tiers[0]') from runs")" = dram:50GB ] ||
        bad " the run's config lacks its tiers"
fi
run roofpp "$BIN" roofline --model llama-3.1-405b --hw h100 --parallel tp=8,pp=2
want_rc 0
want_out "Parallel tp=8,dp=1,ep=1,pp=2,mb=2,sched=async: 16 GPUs; the fullest stage has 63 of the 126" \
    "the pipeline hands"
run engswa "$BIN" generate --model dummy:gpt-oss-20b -n 1
want_rc 1
want_err "dummy:gpt-oss-20b: a sliding window; the engine runs" "with full attention only"
end

begin "kv errors: unknown model exit 1, missing --seq and bad --seq exit 2"
run kv_model "$BIN" kv --model no-such-model --seq 5
want_rc 1
want_err "no-such-model"
run kv_noseq "$BIN" kv --model llama-2-7b
want_rc 2
want_err "--seq"
run kv_badseq "$BIN" kv --model llama-2-7b --seq abc
want_rc 2
want_err "abc"
end

begin "roofline --model llama-2-70b --bandwidth 2.0e12: ~14.5 tokens/s at batch 1"
run roof "$BIN" roofline --model llama-2-70b --bandwidth 2.0e12
want_rc 0
want_out_re '= 14\.(4[5-9]|5[0-5])[0-9]* tokens/s'
end

begin "roofline --tp 2 doubles the bandwidth bound; a mixture of experts reads its active weights"
run roof2 "$BIN" roofline --model llama-2-70b --bandwidth 2.0e12 --tp 2
want_rc 0
want_out_re '= 2[89]\.[0-9]+ tokens/s'
run roofmoe "$BIN" roofline --model mixtral-8x7b --bandwidth 2.0e12
want_rc 0
# 12.88B active parameters x 2 B = 25.76 GB: 2e12 / 25.76e9 = 77.64 tokens/s
want_out "its active 25.76 GB of the 93.41 GB" "= 77.64 tokens/s"
end

begin "roofline --hw h100: the step-time table"
run roof_hw "$BIN" roofline --model llama-2-7b --hw h100
want_rc 0
want_out "h100"
end

begin "roofline errors: unknown model exit 1, bad --bandwidth exit 2"
run roof_model "$BIN" roofline --model no-such-model
want_rc 1
want_err "no-such-model"
run roof_bw "$BIN" roofline --model llama-2-7b --bandwidth fast
want_rc 2
want_err "fast"
end

begin "presets: lists llama-2-7b, llama-2-70b, a100-80g and h200"
run presets "$BIN" presets
want_rc 0
want_out_re '^ +llama-2-7b +32 +4096'
want_out_re '^ +llama-2-70b +80 +8192'
want_out_re '^ +h200 '
want_out_re '^ +a100-80g '
# the attention kind, the experts (+S: a shared one) and the window
want_out_re '^ +deepseek-v3 +61 +7168 +128/128 +192 +MLA +2048 +256/8\+S +- '
want_out_re '^ +gpt-oss-120b +36 +2880 +64/8 +64 +GQA +2880 +128/4 +128 x18 '
want_out_re '^ +gemma-3-27b .* GQA .* 1024 x52 '
want_out "deepseek-v3: 37.55B of its 671.03B parameters are active per token"
end

begin "top level: --help lists the commands, an unknown command exits 2"
run help "$BIN" --help
want_rc 0
for c in sim trace runs kv roofline presets; do want_out_re "^ +$c "; done
run nocmd "$BIN" frobnicate
want_rc 2
want_err "frobnicate"
run trace_bogus "$BIN" trace bogus
want_rc 2
want_err "bogus"
end

e2e_finish e2e_trace

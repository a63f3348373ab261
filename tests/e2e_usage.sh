#!/usr/bin/env bash
# e2e_usage.sh: the small things a new user meets first (issue #28, item 6):
#  - a mistyped option gets one line with the nearest option, not the whole help;
#  - a bad value names the valid range;
#  - a run's error with a line break stays on its row of `runs`;
#  - a run's trace line names only the limits that were set;
#  - sim warns of a --max-model-len past the model's context and of a --rate-scale that makes
#    the trace one burst;
#  - a failed run can be deleted (`runs --delete`), its name then free again.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_usage
DB=$T/u.db
"$BIN" trace gen --n 300 --rate 4 --seed 2 --out "$T/t.csv" >/dev/null || exit 1

begin "a mistyped option: one line, the nearest option, no help text"
run typo "$BIN" sim --trace "$T/t.csv" --polcy "$POL/continuous.lua"
want_rc 2
want_err "twinserve sim: unknown option '--polcy'; did you mean --policy? (twinserve sim --help lists them)"
[ "$(wc -l <"$T/typo.err")" -eq 1 ] || bad " more than one line on stderr"
run typo2 "$BIN" report "$DB" --sloo ttft=1
want_rc 2
want_err "did you mean --slo?"
run swap "$BIN" sweep --trace "$T/t.csv" --plicy "$POL/continuous.lua" --rtaes 1,2
want_rc 2
want_err "did you mean --policy?"
run swap2 "$BIN" serve --prot 8001
want_rc 2
want_err "unknown option '--prot'; did you mean --port?"
run far "$BIN" compare "$DB" --zzz
want_rc 2
want_err "unknown option '--zzz' (twinserve compare --help lists them)"
run noval "$BIN" sim --trace "$T/t.csv" --policy
want_rc 2
want_err "option '--policy' needs a value"
end

begin "a bad value names what the option takes"
run jz "$BIN" sweep --trace "$T/t.csv" --policy "$POL/continuous.lua" -j 0
want_rc 2
want_err "bad value '0' for -j (a whole number in 1..64)"
run port "$BIN" serve --port 99999
want_rc 2
want_err "bad value '99999' for --port (a whole number in 0..65535)"
run extra "$BIN" compare "$DB" a b
want_rc 2
want_err "unexpected argument 'a' (the runs are named with --runs A,B"
run tp "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --tp 0
want_rc 2
want_err "bad value '0' for --tp (a whole number in 1..1024)"
run util "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --gpu-util 1.5
want_rc 2
want_err "bad value '1.5' for --gpu-util (a number in [0.01, 1])"
run met "$BIN" sim --trace "$T/t.csv" --policy "$POL/continuous.lua" --metrics both
want_rc 2
want_err "bad value 'both' for --metrics (client or server)"
run thr "$BIN" engine --trace "$T/t.csv" --threads -2
want_rc 2
want_err "bad value '-2' for --threads (a whole number in 0..4096)"
end

begin "the trace line names only the limits given; warnings for a context and a rate past sense"
run plain "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name plain
want_rc 0
want_sql "$DB" "select trace from runs where name = 'plain'" "$T/t.csv (rate_scale 1)"
run lim "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name lim \
    --start 10 --limit 50
want_sql "$DB" "select trace from runs where name = 'lim'" "$T/t.csv (rate_scale 1, start 10 s, limit 50)"
run warn "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name warn \
    --max-model-len 9000 --rate-scale 1e8
want_rc 0
want_err "WARNING --max-model-len 9000 is past llama-2-7b's 4096-token context" \
    "WARNING all 300 requests arrive within 1 ms (--rate-scale 1e+08)"
end

begin "runs: an error's line breaks stay on its row; a failed run deleted, its name free again"
printf 'return { schedule = function(s)\n  error("first line\\nsecond line")\nend }\n' >"$T/bad.lua"
run failed "$BIN" sim -q --trace "$T/t.csv" --policy "$T/bad.lua" --db "$DB" --name broken
want_rc 1
run list "$BIN" runs "$DB"
want_rc 0
[ "$(grep -c . "$T/list.out")" -eq 5 ] || bad " the runs table is not one line a run: $(cat "$T/list.out")"
want_out_re "^broken +bad +failed "
run del "$BIN" runs "$DB" --delete broken
want_rc 0
want_out "deleted 1 run from $DB"
want_sql "$DB" "select count(*) from runs where name = 'broken'" 0
run again "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name broken
want_rc 0
run deln "$BIN" runs "$DB" --delete nosuch
want_rc 1
want_err "no run named 'nosuch'"
run delf "$BIN" runs "$DB" --force
want_rc 2
want_err "--force goes with --delete"
end

e2e_finish e2e_usage

#!/usr/bin/env bash
# e2e_jobs.sh: end-to-end tests of `twinserve sweep --emit-jobs` and `twinserve merge`.
#
# The emitted job list, run by GNU parallel from another folder and merged, gives the same
# database as the sweep run here (names, seeds, sweep and experiment tags, requests, steps
# and tokens rows), which report, compare and plot read as the sweep; the Slurm script is
# valid bash with the right array range and runs the line of its task; merge renames a clashing sweep (said on stderr) and refuses another
# schema version, a non-database and a missing file, leaving the output as it was; bad
# input (--capacity with --emit-jobs, a folder that already holds jobs, a --set no job
# could run, a --config-json that is not JSON) gets a clear message and a non-zero exit.
# Without GNU parallel the list runs through bash, with a SKIP line for parallel.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_jobs

"$BIN" trace gen --n 60 --rate 4 --prompt lognormal:400:0.8 --output lognormal:60:0.8 \
    --seed 3 --out "$T/t.csv" >/dev/null
J=$T/jobs
OPTS=(--rates 2,5,9 --repeat 2 --save-tokens --set max_seqs=8 --name S)
have_parallel=1
# moreutils ships another program named parallel: only GNU parallel takes a job list.
parallel --version 2>/dev/null | grep -q "GNU parallel" || {
    have_parallel=0
    echo "SKIP: GNU parallel not found (Debian package 'parallel'): the job list runs through bash"
}

begin "emit: one self-contained sim command per point and seed; nothing run or recorded"
# From inside $T with relative paths: the jobs must not depend on this folder.
run emit bash -c "cd '$T' && '$BIN' sweep --trace t.csv --policy '$POL/continuous.lua' \
    --db m.db ${OPTS[*]} --emit-jobs jobs"
want_rc 0
want_out "sweep S:" "6 jobs (3 rates x 2 seeds)" "parallel -j 4 --joblog $J/joblog < $J/jobs.txt" \
    "sbatch $J/slurm.sh" "merge $T/m.db $J/out/*.db"
[ "$(wc -l <"$J/jobs.txt")" -eq 6 ] || bad " jobs.txt has $(wc -l <"$J/jobs.txt") lines, expected 6"
for f in slurm.sh run.txt; do [ -f "$J/$f" ] || bad " no $f"; done
[ -d "$J/out" ] && [ -d "$J/log" ] || bad " no out/ or log/ folder"
[ -e "$T/m.db" ] && bad " the sweep's database was created, though nothing ran"
line2=$(sed -n 2p "$J/jobs.txt")
for s in "$BIN sim --trace $T/t.csv --policy $POL/continuous.lua --db $J/out/p001.db" \
    "--name S@2rps-r1" "--seed 1" "--config-json" '"experiment":{"name":"S@2rps","index":1' \
    "--save-tokens" "--set max_seqs=8"; do
    grep -qF -- "$s" <<<"$line2" || bad " line 2 lacks '$s': $line2"
done
ls "$J/out" | grep -q . && bad " out/ is not empty"
end

begin "the list run (GNU parallel, else bash) and merged is the database the sweep gives here"
if [ "$have_parallel" -eq 1 ]; then
    run parallel bash -c "cd / && parallel -j 2 --joblog '$J/joblog' < '$J/jobs.txt'"
    want_rc 0
    [ "$(awk 'NR > 1 && $7 == 0' "$J/joblog" | wc -l)" -eq 6 ] || bad " joblog: not 6 jobs exiting 0"
else
    run bash_jobs bash -c "cd / && bash '$J/jobs.txt'"
    want_rc 0
fi
run merge "$BIN" merge "$T/m.db" "$J"/out/*.db
want_rc 0
want_out "merged 6 databases, 6 runs, into $T/m.db"
run here "$BIN" sweep -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/h.db" \
    "${OPTS[@]}" -j 2
want_rc 0
q_runs="select id, name, kind, params, model, hardware, seed, status,
    json_extract(config, '\$.sweep'), json_extract(config, '\$.experiment') from runs order by id"
q_req="select * from requests order by run_id, req_id"
q_steps="select run_id, step, start_s, dur_s, prefill_tokens, decode_tokens, num_seqs, kv_used
    from steps order by run_id, step"
q_tok="select * from tokens order by run_id, req_id, idx"
for q in "$q_runs" "$q_req" "$q_steps" "$q_tok"; do
    a=$(sql "$T/m.db" "$q" | md5sum)
    b=$(sql "$T/h.db" "$q" | md5sum)
    [ "$a" = "$b" ] || bad " merged and here differ on: $(head -c 60 <<<"$q")"
done
want_sql "$T/m.db" "select count(*) from requests" 360
want_sql "$T/m.db" "select group_concat(name, ' ') from (select name from runs order by id)" \
    "S@2rps-r0 S@2rps-r1 S@5rps-r0 S@5rps-r1 S@9rps-r0 S@9rps-r1"
end

begin "the merged runs are the sweep's experiments for compare"
run compare "$BIN" compare "$T/m.db" --runs S@2rps,S@9rps
want_rc 0
want_out "experiment S@2rps: 2 runs" "experiment S@9rps: 2 runs"
end

begin "report reads a merged run; plot draws the merged sweep's latency-rate curve"
run report "$BIN" report "$T/m.db" --run S@9rps-r1
want_rc 0
want_out "S@9rps-r1"
if command -v gnuplot >/dev/null 2>&1; then
    run plot_here "$BIN" plot "$T/h.db" --runs S --out "$T/plots_here" --format png
    want_rc 0
    run plot "$BIN" plot "$T/m.db" --runs S --out "$T/plots" --format png
    want_rc 0
    [ -s "$T/plots/latency_rate.png" ] || bad " no latency_rate.png: the runs were not seen as one sweep"
    grep -q "^# sweep S$" "$T/plots/latency_rate.dat" 2>/dev/null || bad " latency_rate.dat has no sweep S"
    cmp -s "$T/plots/latency_rate.dat" "$T/plots_here/latency_rate.dat" ||
        bad " the merged sweep's curve differs from the sweep's here"
else
    echo "SKIP: gnuplot not found: the merged sweep's plot is not drawn"
fi
end

begin "merge again: the clashing sweep is renamed with its tags, said on stderr"
run again "$BIN" merge "$T/m.db" "$J/out/p000.db" "$J/out/p002.db"
want_rc 0
want_err "sweep 'S' renamed 'S-2'" "S@2rps-r0' -> 'S-2@2rps-r0'"
want_sql "$T/m.db" "select group_concat(name, ' ') from (select name from runs where id > 6 order by id)" \
    "S-2@2rps-r0 S-2@5rps-r0"
want_sql "$T/m.db" "select json_extract(config, '\$.experiment.name') from runs where id = 8" "S-2@5rps"
want_sql "$T/m.db" "select count(*) from runs where json_extract(config, '\$.sweep.name') = 'S'" 6
db_ok "$T/m.db"
end

begin "merge refuses another schema version, a non-database and a missing file"
cp "$J/out/p001.db" "$T/old.db"
sqlite3 "$T/old.db" "update meta set value = '4' where key = 'schema_version'"
echo "this is not a database, only some text long enough to fill a header" >"$T/junk.db"
before=$(sql "$T/m.db" "select count(*) || '/' || (select count(*) from requests) from runs")
run refuse "$BIN" merge "$T/m.db" "$T/old.db" "$T/junk.db" "$T/none.db" "$J/out/p003.db"
want_rc 1
want_err "$T/old.db: schema_version 4 is older than this twinserve" "$T/junk.db: file is not a database" \
    "$T/none.db: no such database file" "3 of 4 inputs not merged"
want_sql "$T/m.db" "select count(*) || '/' || (select count(*) from requests) from runs" \
    "$((${before%/*} + 1))/$((${before#*/} + 60))"
end

begin "merge without inputs is a usage error"
run usage "$BIN" merge "$T/u.db"
want_rc 2
want_err "give the output database and at least one input"
[ -e "$T/u.db" ] && bad " created $T/u.db"
end

begin "the Slurm script: bash, an array of one task per line, task i runs line i + 1"
run emit2 "$BIN" sweep --trace "$T/t.csv" --policy "$POL/continuous.lua" --rates 3,6 \
    --db "$T/s.db" --emit-jobs "$T/sl"
want_rc 0
run syntax bash -n "$T/sl/slurm.sh"
want_rc 0
grep -qx "#SBATCH --array=0-1" "$T/sl/slurm.sh" || bad " no '#SBATCH --array=0-1'"
grep -q "^#SBATCH --output=$T/sl/log/%A_%a.out" "$T/sl/slurm.sh" || bad " no --output into log/"
run task1 env SLURM_ARRAY_TASK_ID=1 bash "$T/sl/slurm.sh"
want_rc 0
want_out "task 1: $BIN sim"
[ -e "$T/sl/out/p000.db" ] && bad " task 1 ran line 1 too"
want_sql "$T/sl/out/p001.db" "select name || ' ' || json_extract(config, '\$.sweep.rate_rps') from runs" \
    "sweep-continuous@6rps 6"
run task9 env SLURM_ARRAY_TASK_ID=9 bash "$T/sl/slurm.sh"
want_rc 2
want_err "has no line 10 (task 9)"
run notask env -u SLURM_ARRAY_TASK_ID bash "$T/sl/slurm.sh"
[ "$rc" -ne 0 ] || bad " ran without SLURM_ARRAY_TASK_ID"
want_err "not in a Slurm array job"
end

begin "sim --config-json: bad JSON and --repeat are usage errors that record nothing"
run badjson "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/cj.db" \
    --config-json '"sweep":{'
want_rc 2
want_err "--config-json '\"sweep\":{' is not JSON object members"
run cjrepeat "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/cj.db" \
    --config-json '"a":1' --repeat 2
want_rc 2
want_err "--config-json works without --repeat"
[ -e "$T/cj.db" ] && bad " created $T/cj.db"
run cjok "$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$T/cj.db" \
    --config-json '"a":{"b":[1,2]}'
want_rc 0
want_sql "$T/cj.db" "select json_extract(config, '\$.a.b[1]') from runs" 2
end

begin "bad input: --capacity cannot be emitted; a folder holding jobs is refused"
run cap "$BIN" sweep --trace "$T/t.csv" --policy "$POL/continuous.lua" --capacity \
    --slo ttft=1 --db "$T/s.db" --emit-jobs "$T/cap"
want_rc 2
want_err "--capacity cannot be emitted as jobs"
[ -e "$T/cap" ] && bad " created $T/cap"
run twice "$BIN" sweep --trace "$T/t.csv" --policy "$POL/continuous.lua" --rates 3 \
    --db "$T/s.db" --emit-jobs "$T/sl"
want_rc 1
want_err "$T/sl already holds a jobs.txt"
[ "$(wc -l <"$T/sl/jobs.txt")" -eq 2 ] || bad " jobs.txt was overwritten"
# A setup no job could run is found by a trial here, before anything is written.
run badset "$BIN" sweep --trace "$T/t.csv" --policy "$POL/continuous.lua" --rates 3,6 \
    --db "$T/s.db" --set no_such_param=1 --emit-jobs "$T/badset"
want_rc 1
want_err "--emit-jobs: the jobs could not run:" "no_such_param"
[ -e "$T/badset" ] && bad " created $T/badset"
end

e2e_finish e2e_jobs

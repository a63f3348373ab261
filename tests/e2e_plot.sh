#!/usr/bin/env bash
# e2e_plot.sh: end-to-end tests of `twinserve plot`.
#
# Real PNG and SVG files (magic bytes, sizes), data files with the expected row counts
# (one CDF row per request with a TTFT, one steps row per step or per non-empty bin),
# per-run figures named after their runs, the ITL figures only for runs recorded with
# --save-tokens (a note otherwise), an experiment's name selecting its runs (one colour, one
# key entry), a sweep's name selecting its runs for the
# latency-vs-rate figure (from 0, with the SLO and the capacity of `sweep --capacity`), a
# 15-run key below the plot, and gnuplot rendering every script without a warning; bad input
# (unknown run, a database without our tables, a missing database, a bad --format, --slo or
# --target, a run with nothing to plot, gnuplot missing from PATH or failing) gets a clear
# message and a non-zero exit. Checks that render need gnuplot and print SKIP without it.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_plot

DB=$T/runs.db
"$BIN" trace gen --n 80 --rate 6 --prompt lognormal:400:0.8 --output lognormal:60:0.8 \
    --seed 5 --out "$T/t.csv" >/dev/null
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name cont
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/static.lua" --db "$DB" --name static \
    --max-seqs 4
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/chunked_prefill.lua" --db "$DB" --name tok \
    --save-tokens
"$BIN" sweep -q --trace "$T/t.csv" --policy "$POL/chunked_prefill.lua" --rates 2,6,12 \
    --db "$DB" --name sw >/dev/null
have_gnuplot=0
command -v gnuplot >/dev/null 2>&1 && have_gnuplot=1

# magic FILE HEX: the file starts with these bytes.
magic() { [ "$(head -c $((${#2} / 2)) "$1" | od -An -tx1 | tr -d ' \n')" = "$2" ]; }
# rows FILE: data rows (not comments, not blank).
rows() { grep -cvE '^(#|$)' "$1"; }
# rows0 FILE: data rows of the first block (up to the first blank line).
rows0() { awk '/^$/ { exit } !/^#/ { n++ } END { print n + 0 }' "$1"; }
# clean_log DIR: gnuplot said nothing (a warning means a figure lost something).
clean_log() { [ ! -s "$1/gnuplot.log" ] || bad " gnuplot.log: $(head -c 300 "$1/gnuplot.log")"; }

begin "two runs: PNG and SVG of every figure, data files with the expected rows"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed: plot rendering not checked"
else
    run plot2 "$BIN" plot "$DB" --runs cont,static --out "$T/p2"
    want_rc 0
    want_out "plot: 6 figures, 12 images in $T/p2"
    want_err "no run saved per-token times" "--save-tokens"
    for fig in cdf_ttft cdf_tpot cdf_e2e timeline_cont timeline_static kv_queue; do
        [ -f "$T/p2/$fig.gp" ] || bad " no $fig.gp"
        magic "$T/p2/$fig.png" 89504e470d0a1a0a || bad " $fig.png is not a PNG"
        [ "$(stat -c %s "$T/p2/$fig.png" 2>/dev/null || echo 0)" -gt 5000 ] || bad " $fig.png too small"
        grep -q '<svg' "$T/p2/$fig.svg" 2>/dev/null || bad " $fig.svg is not an SVG"
        [ "$(stat -c %s "$T/p2/$fig.svg" 2>/dev/null || echo 0)" -gt 5000 ] || bad " $fig.svg too small"
    done
    [ -f "$T/p2/latency_rate.gp" ] && bad " latency_rate drawn for runs that are not a sweep"
    n=$(sql "$DB" "select count(*) from requests r join runs u on u.id=r.run_id
        where u.name in ('cont','static') and ttft_s is not null")
    [ "$(rows "$T/p2/cdf_ttft.dat")" -eq "$n" ] || bad " cdf_ttft.dat has $(rows "$T/p2/cdf_ttft.dat") rows, expected $n"
    n=$(sql "$DB" "select count(*) from requests r join runs u on u.id=r.run_id
        where u.name in ('cont','static') and tpot_s is not null")
    [ "$(rows "$T/p2/cdf_tpot.dat")" -eq "$n" ] || bad " cdf_tpot.dat has $(rows "$T/p2/cdf_tpot.dat") rows, expected $n"
    for name in cont static; do
        n=$(sql "$DB" "select count(*) from steps s join runs u on u.id=s.run_id where u.name='$name'")
        got=$(rows0 "$T/p2/steps_$name.dat")
        if [ "$n" -le 300 ]; then
            [ "$got" -eq "$n" ] || bad " steps_$name.dat has $got rows, expected $n (one per step)"
        else
            [ "$got" -gt 0 ] && [ "$got" -le 300 ] || bad " steps_$name.dat has $got rows, expected 1..300 bins"
        fi
        # block 1: every step's duration, for the upper panel's points
        [ "$(($(rows "$T/p2/steps_$name.dat") - got))" -eq "$n" ] || bad " steps_$name.dat lacks one duration per step"
    done
    # The padding of static batching is drawn; continuous batching has none.
    grep -q '"padding"' "$T/p2/timeline_static.gp" || bad " static's timeline lacks padding"
    grep -q '"padding"' "$T/p2/timeline_cont.gp" && bad " continuous's timeline shows padding"
    grep -q 'title "static" . ": steps over time"' "$T/p2/timeline_static.gp" || bad " the timeline's title does not name its run"
    grep -q 'step duration (ms' "$T/p2/timeline_static.gp" || bad " the timeline lacks the step duration"
    grep -q 'title "cont"' "$T/p2/cdf_ttft.gp" || bad " the CDF's legend does not name the run"
    grep -q 'xlabel "TTFT (ms' "$T/p2/cdf_ttft.gp" || bad " the CDF's x axis lacks its unit"
    [ -f "$T/p2/cdf_itl.gp" ] && bad " cdf_itl drawn without tokens"
    clean_log "$T/p2"
fi
end

begin "a run that never queued, a run of one request: figures without a warning"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed"
else
    "$BIN" sim -q --trace "$T/t.csv" --limit 5 --rate-scale 0.05 --policy "$POL/continuous.lua" \
        --db "$T/idle.db" --name idle
    [ "$(sql "$T/idle.db" "select max(num_waiting) from steps")" = 0 ] || bad " the idle run queued"
    run plotidle "$BIN" plot "$T/idle.db" --runs idle --out "$T/pidle" --format png
    want_rc 0
    clean_log "$T/pidle"
    # one request: every CDF holds a single value
    "$BIN" sim -q --trace "$T/t.csv" --limit 1 --policy "$POL/continuous.lua" --db "$T/idle.db" --name one
    run plotone "$BIN" plot "$T/idle.db" --runs one --out "$T/pone" --format png
    want_rc 0
    clean_log "$T/pone"
fi
end

begin "per-token times: cdf_itl and tbt for the run that saved them, a note for the other"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed"
else
    run plotitl "$BIN" plot "$DB" --runs tok,cont --out "$T/pi" --format png
    want_rc 0
    want_err "run cont saved no per-token times (--save-tokens)"
    magic "$T/pi/cdf_itl.png" 89504e470d0a1a0a || bad " cdf_itl.png is not a PNG"
    magic "$T/pi/tbt_tok.png" 89504e470d0a1a0a || bad " tbt_tok.png is not a PNG"
    [ -f "$T/pi/tbt_cont.gp" ] && bad " tbt drawn for a run without tokens"
    grep -q 'title "tok"' "$T/pi/cdf_itl.gp" || bad " cdf_itl does not name its run"
    grep -q 'title "cont"' "$T/pi/cdf_itl.gp" && bad " cdf_itl has a curve for a run without tokens"
    # one CDF value per gap between distinct token times, as report's ITL counts them
    n=$(sql "$DB" "select count(*) from (select t_s - lag(t_s) over (partition by req_id order by idx) g
        from tokens where run_id = (select id from runs where name='tok')) where g > 0")
    [ "$(rows "$T/pi/cdf_itl.dat")" -eq "$n" ] || [ "$n" -gt 2000 ] ||
        bad " cdf_itl.dat has $(rows "$T/pi/cdf_itl.dat") rows, expected $n"
    clean_log "$T/pi"
fi
end

begin "a sweep's name selects its runs; latency vs rate has one row per rate"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed"
else
    run plotsw "$BIN" plot "$DB" --runs sw --out "$T/psw" --format png
    want_rc 0
    magic "$T/psw/latency_rate.png" 89504e470d0a1a0a || bad " latency_rate.png is not a PNG"
    [ -f "$T/psw/latency_rate.svg" ] && bad " --format png also wrote SVG"
    [ "$(rows "$T/psw/latency_rate.dat")" -eq 3 ] || bad " latency_rate.dat should have 3 rows"
    # a run named again, by its name after its sweep, is drawn once
    run plotdup "$BIN" plot "$DB" --runs sw,sw@6rps,sw --out "$T/pdup" --format png
    want_rc 0
    [ "$(rows "$T/pdup/latency_rate.dat")" -eq 3 ] || bad " a run named twice is drawn twice"
    [ "$(grep -vE '^(#|$)' "$T/psw/latency_rate.dat" | awk '{print $1}' | tr '\n' ' ')" = "2 6 12 " ] ||
        bad " latency_rate.dat rates are not 2 6 12 in order"
    [ -f "$T/psw/timeline_sw_12rps.png" ] || bad " no timeline for the third run of the sweep"
    grep -q 'set xrange \[0:\*\]' "$T/psw/latency_rate.gp" && grep -q 'set yrange \[0:\*\]' "$T/psw/latency_rate.gp" ||
        bad " latency_rate does not start at 0"
    want_err "no --slo given"
    # the user can re-render from the folder
    (cd "$T/psw" && rm -f cdf_ttft.svg && gnuplot -e "fmt='svg'" cdf_ttft.gp) 2>/dev/null
    grep -q '<svg' "$T/psw/cdf_ttft.svg" 2>/dev/null || bad " re-running the script did not render"
fi
end

begin "latency vs rate with --slo: the SLO lines and the capacity sweep --capacity finds"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed"
else
    "$BIN" sweep -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --capacity \
        --slo ttft=0.3,tpot=0.03 --lo 1 --hi 40 --tol 0.2 --db "$T/cap.db" --name cap >"$T/cap.out" 2>&1 ||
        bad " sweep --capacity failed: $(tail -3 "$T/cap.out")"
    cap=$(sed -n 's/^capacity: \([0-9.]*\) req\/s .*/\1/p' "$T/cap.out")
    [ -n "$cap" ] || bad " sweep printed no capacity: $(tail -2 "$T/cap.out")"
    run plotcap "$BIN" plot "$T/cap.db" --runs cap --out "$T/pc" --slo ttft=300ms,tpot=30ms --format png
    want_rc 0
    magic "$T/pc/latency_rate.png" 89504e470d0a1a0a || bad " latency_rate.png is not a PNG"
    grep -q "\"cap: capacity $cap req/s\"" "$T/pc/latency_rate.gp" ||
        bad " the plot's capacity is not sweep's $cap: $(grep -o '"[^"]*capacity[^"]*"' "$T/pc/latency_rate.gp")"
    # the SLOs are named in the panels' titles and the capacity in the key, not inside the
    # plot area, where a label could sit on a curve or an SLO line
    grep -q 'set title "TTFT, SLO 300 ms (red dotted line)"' "$T/pc/latency_rate.gp" &&
        grep -q 'set title "TPOT, SLO 30 ms (red dotted line)"' "$T/pc/latency_rate.gp" ||
        bad " the SLO lines are not named in the panels' titles"
    grep -q '^set label' "$T/pc/latency_rate.gp" && bad " a label inside the plot area"
    clean_log "$T/pc"
    run plote2e "$BIN" plot "$T/cap.db" --runs cap --out "$T/pe2e" --slo e2e=5 --format png
    want_rc 0
    grep -q 'ylabel "E2E (ms)"' "$T/pe2e/latency_rate.gp" || bad " an e2e SLO adds no E2E panel"
fi
end

begin "15 runs: every curve in a key below the plot, rendered without a warning"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed"
else
    "$BIN" sweep -q --trace "$T/t.csv" --policy "$POL/continuous.lua" \
        --rates 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 --db "$T/s15.db" --name fifteen-runs >/dev/null
    run plot15 "$BIN" plot "$T/s15.db" --runs fifteen-runs --out "$T/p15"
    want_rc 0
    want_out "plot: 20 figures, 40 images"
    for fig in cdf_ttft kv_queue; do
        [ "$(grep -c '^    "' "$T/p15/$fig.gp")" -ge 15 ] || bad " $fig.gp has fewer than 15 curves"
        grep -q 'center top horizontal maxcols [2-9]' "$T/p15/$fig.gp" || bad " $fig's key is not below in columns"
    done
    clean_log "$T/p15"
fi
end

begin "an experiment's name selects its runs (as compare): one colour and key entry for them"
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/speculative.lua" --db "$DB" --name spec \
    --repeat 3 >/dev/null 2>&1
run plotexp "$BIN" plot "$DB" --runs spec,cont --out "$T/pexp" --format png
[ $have_gnuplot -eq 1 ] && want_rc 0
for r in spec-r0 spec-r1 spec-r2 cont; do
    [ -f "$T/pexp/timeline_$r.gp" ] || bad " no timeline_$r (the experiment's runs not all found)"
done
[ "$(grep -c 'title "spec (3 runs)"' "$T/pexp/cdf_ttft.gp")" = 1 ] || bad " the experiment's runs are not one key entry"
[ "$(grep -c 'lc 1 dt 1 notitle' "$T/pexp/cdf_ttft.gp")" = 2 ] || bad " the experiment's other runs not in its colour, untitled"
grep -q 'lc 2 dt 1 title "cont"' "$T/pexp/cdf_ttft.gp" || bad " the plain run is not the second colour"
[ $have_gnuplot -eq 1 ] && clean_log "$T/pexp"
end

begin "gnuplot missing from PATH: clear message, exit 1, data and scripts still written"
mkdir -p "$T/emptybin"
run nognu env PATH="$T/emptybin" "$BIN" plot "$DB" --runs cont --out "$T/pno"
want_rc 1
want_err "gnuplot not found" "apt-get install gnuplot-nox" "$T/pno"
[ -f "$T/pno/cdf_ttft.dat" ] && [ -f "$T/pno/cdf_ttft.gp" ] || bad " the data and scripts were not written"
[ -f "$T/pno/cdf_ttft.png" ] && bad " an image appeared without gnuplot"
end

begin "gnuplot failing: the message names the script and shows its log"
run gfail "$BIN" plot "$DB" --runs cont --out "$T/pf" --gnuplot /bin/false
want_rc 1
want_err "gnuplot failed on $T/pf/cdf_ttft.gp" "gnuplot.log"
end

begin "bad input: unknown run, no such database, not our database, bad --format"
run unknown "$BIN" plot "$DB" --runs cont,nosuch --out "$T/px"
want_rc 1
# the message names the database by its path, not "DB"
want_err "no run, experiment or sweep named 'nosuch' in $DB; runs: "
run nodb "$BIN" plot "$T/none.db" --runs cont --out "$T/px"
want_rc 1
want_err "no such database"
[ -f "$T/none.db" ] && bad " plot created the database"
sqlite3 "$T/other.db" "create table t(x); insert into t values (1);"
run other "$BIN" plot "$T/other.db" --runs cont --out "$T/px"
want_rc 1
want_err "not a twinserve database"
run fmt "$BIN" plot "$DB" --runs cont --out "$T/px" --format gif
want_rc 2
want_err "unknown format 'gif'"
run noout "$BIN" plot "$DB" --runs cont
want_rc 2
want_err "--out are required"
run badslo "$BIN" plot "$DB" --runs cont --out "$T/px" --slo ttft
want_rc 2
want_err "--slo"
run badtarget "$BIN" plot "$DB" --runs cont --out "$T/px" --slo ttft=1 --target 90
want_rc 2
want_err "--target '90': want a fraction in (0, 1]"
run targetonly "$BIN" plot "$DB" --runs cont --out "$T/px" --target 0.9
want_rc 2
want_err "--target needs --slo"
end

begin "a run with nothing to plot: clear message"
# a run that recorded nothing (its simulation failed before the first request)
sql "$DB" "insert into runs (name, kind, status, error) values ('empty', 'sim', 'failed', 'test')" >/dev/null
run empty "$BIN" plot "$DB" --runs empty --out "$T/pe"
want_rc 1
want_err "nothing to plot" "run empty has no ttft values"
end

e2e_finish e2e_plot

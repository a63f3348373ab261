#!/usr/bin/env bash
# e2e_plot.sh: end-to-end tests of `twinserve plot`.
#
# Real PNG and SVG files (magic bytes, sizes), data files with the expected row counts
# (one CDF row per request with a TTFT, one steps row per step or per non-empty bin), a
# sweep's name selecting its runs for the latency-vs-rate figure; bad input (unknown run, a
# database without our tables, a missing database, a bad --format, a run with nothing to
# plot, gnuplot missing from PATH or failing) gets a clear message and a non-zero exit.
# Checks that render need gnuplot and print SKIP without it.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_plot

DB=$T/runs.db
"$BIN" trace gen --n 80 --rate 6 --prompt lognormal:400:0.8 --output lognormal:60:0.8 \
    --seed 5 --out "$T/t.csv" >/dev/null
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/continuous.lua" --db "$DB" --name cont
"$BIN" sim -q --trace "$T/t.csv" --policy "$POL/static.lua" --db "$DB" --name static \
    --max-seqs 4
"$BIN" sweep -q --trace "$T/t.csv" --policy "$POL/chunked_prefill.lua" --rates 2,6,12 \
    --db "$DB" --name sw >/dev/null
have_gnuplot=0
command -v gnuplot >/dev/null 2>&1 && have_gnuplot=1

# magic FILE HEX: the file starts with these bytes.
magic() { [ "$(head -c $((${#2} / 2)) "$1" | od -An -tx1 | tr -d ' \n')" = "$2" ]; }
# rows FILE: data rows (not comments, not blank).
rows() { grep -cvE '^(#|$)' "$1"; }

begin "two runs: PNG and SVG of every figure, data files with the expected rows"
if [ $have_gnuplot -eq 0 ]; then
    echo "SKIP: gnuplot not installed: plot rendering not checked"
else
    run plot2 "$BIN" plot "$DB" --runs cont,static --out "$T/p2"
    want_rc 0
    want_out "plot: 6 figures, 12 images in $T/p2"
    for fig in cdf_ttft cdf_tpot cdf_e2e timeline_1 timeline_2 kv_queue; do
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
    for k in 1 2; do
        name=$([ $k -eq 1 ] && echo cont || echo static)
        n=$(sql "$DB" "select count(*) from steps s join runs u on u.id=s.run_id where u.name='$name'")
        got=$(rows "$T/p2/steps_$k.dat")
        if [ "$n" -le 300 ]; then
            [ "$got" -eq "$n" ] || bad " steps_$k.dat has $got rows, expected $n (one per step)"
        else
            [ "$got" -gt 0 ] && [ "$got" -le 300 ] || bad " steps_$k.dat has $got rows, expected 1..300 bins"
        fi
    done
    # The padding of static batching is drawn; continuous batching has none.
    grep -q '"padding"' "$T/p2/timeline_2.gp" || bad " static's timeline lacks padding"
    grep -q '"padding"' "$T/p2/timeline_1.gp" && bad " continuous's timeline shows padding"
    grep -q 'title "cont"' "$T/p2/cdf_ttft.gp" || bad " the CDF's legend does not name the run"
    grep -q 'xlabel "TTFT (ms' "$T/p2/cdf_ttft.gp" || bad " the CDF's x axis lacks its unit"
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
    [ "$(grep -vE '^(#|$)' "$T/psw/latency_rate.dat" | awk '{print $1}' | tr '\n' ' ')" = "2 6 12 " ] ||
        bad " latency_rate.dat rates are not 2 6 12 in order"
    [ -f "$T/psw/timeline_3.png" ] || bad " no timeline for the third run of the sweep"
    # the user can re-render from the folder
    (cd "$T/psw" && rm -f cdf_ttft.svg && gnuplot -e "fmt='svg'" cdf_ttft.gp) 2>/dev/null
    grep -q '<svg' "$T/psw/cdf_ttft.svg" 2>/dev/null || bad " re-running the script did not render"
fi
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
want_err "no run named 'nosuch'"
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
end

begin "a run with nothing to plot: clear message"
"$BIN" sim -q --trace "$T/missing.csv" --policy "$POL/continuous.lua" --db "$DB" --name empty 2>/dev/null
run empty "$BIN" plot "$DB" --runs empty --out "$T/pe"
want_rc 1
want_err "nothing to plot" "run empty has no ttft values"
end

e2e_finish e2e_plot

#!/usr/bin/env bash
# e2e_layers.sh: no include runs from a lower layer to a higher one. The layers, from the
# ground up (README.md, "Where things are"):
#   traces     records, trace readers and writers, and what everything shares: the run
#              summary read back from a database, statistics, the seeded generator
#   policies   the scheduler core and its Lua host
#   sim        the simulator, and the model and hardware descriptions the engine reads too
#   engine     the real engine (engine/cpu, engine/cuda)
#   analysis   report, compare, calibrate, validate, the importers of measured runs
#   cli        the subcommands
# A file may include its own layer's headers and any below. Needs no binary.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
layer() {
    case $1 in
    traces) echo 0 ;; policies) echo 1 ;; sim) echo 2 ;; engine) echo 3 ;;
    analysis) echo 4 ;; cli) echo 5 ;; *) echo -1 ;;
    esac
}
bad=0
scan() {   # ROOT: prints one line per include that runs up the layers under ROOT
    local f dir inc to lf lt
    for dir in traces policies sim engine analysis cli; do
        [ -d "$1/$dir" ] || continue
        lf=$(layer "$dir")
        while IFS= read -r f; do
            while IFS= read -r inc; do
                to=${inc%%/*}
                lt=$(layer "$to")
                [ "$lt" -lt 0 ] && continue            # a system or a generated header
                [ "$lt" -gt "$lf" ] && echo "${f#"$1"/} includes $inc ($dir is below $to)"
            done < <(sed -nE 's/^[[:space:]]*#[[:space:]]*include[[:space:]]+"([^"]+)".*/\1/p' "$f")
        done < <(find "$1/$dir" -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) | sort)
    done
}
name="no include from a lower layer to a higher one (traces < policies < sim < engine < analysis < cli)"
found=$(scan "$PWD")
if [ -z "$found" ]; then
    echo "ok $name"
else
    echo "FAIL: $name: $(grep -c . <<<"$found") includes run up the layers"
    sed 's/^/    | /' <<<"$found"
    bad=1
fi
# the check itself can fail: a planted include up the layers is found, one down is not
tmp=$(mktemp -d "${TMPDIR:-/tmp}/e2e_layers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/traces" "$tmp/engine/cpu"
printf '#include "traces/rng.h"\n#include <stdio.h>\n  #include "analysis/report.h"\n' > "$tmp/traces/planted.c"
printf '#include "sim/cost.h"\n#include "engine/forward.h"\n' > "$tmp/engine/cpu/fine.c"
got=$(scan "$tmp")
if [ "$got" = "traces/planted.c includes analysis/report.h (traces is below analysis)" ]; then
    echo "ok the layer check finds a planted include up the layers, and only it"
else
    echo "FAIL: the layer check on a planted tree gave: ${got:-nothing}"
    bad=1
fi
exit $bad

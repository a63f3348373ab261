#!/usr/bin/env bash
# bench/gpu.sh: the CUDA backend's check on a GPU machine (issues #5, #17), one command
# sized to finish within 8 minutes on one H200, that brings back what it measured. Run
# from anywhere; it works in the repository root (a fresh copy of the tree is fine: it
# builds what it needs itself). docs/benchmarks.md gives the exact device command.
#
#   usage: bash bench/gpu.sh OUTDIR [--logs DIR]
#          bash bench/gpu.sh --fetch-deps      (the same as bash bench/gpu_prep.sh)
#
# What comes back: OUTDIR receives two files and nothing else, kept up to date after every
# step, so that they are there whatever stops the run: summary.txt (one page: each step's
# status and time, each figure with its roof and target; also printed last on stdout) and
# gpu-logs.tar.gz (every log, JSON result and fidelity file; any file over 8 MiB is left
# out and named in the summary). Full logs go to DIR (default: a new folder in $TMPDIR).
#
# What travels: bash bench/gpu_prep.sh fills .gpu-carry/ (git-ignored) with the C
# libraries' packages and the test models. When pkg-config does not find the libraries
# here, the packages are unpacked into $TMPDIR/twinserve-gpu-deps and used from there
# (bench/gpu_deps.sh); the tests read the models there (TWIN_DATA=.gpu-carry).
#
# Steps, in this order, each under its own `timeout` and all under one deadline
# (GPU_BENCH_BUDGET_S, default 450 s; a step is cut to the time left, and not started
# with under 20 s left), so that a hang costs one step, not the run:
#  1. preflight: stops the run at once, saying why, when make, a C compiler, nvcc, or
#     cuBLAS/cudart (as the Makefile finds them) is missing, or the C libraries are found
#     neither here nor among the carried packages;
#  2. build: make -k BUILD=build-gpu all plus the two test binaries the GPU runs; stops
#     the run when the build left the CUDA backend (libtwinserve_cuda.so) out;
#  3. the backend's kernel tests: test_backend_cuda;
#  4. the benchmarks (twinserve bench --backend cuda --json, each measuring its own roofs):
#     decode of dummy:llama-3-8b in bf16 at batch 1, 64, 256 (1k context), the same batch 1
#     on cuBLAS alone, a 4096-token prefill, batch-1 decode of dummy:llama-3.2-1b in fp32;
#  5. the longer tests: the engine suite on the GPU in fp32 (test_engine), e2e_cuda.sh;
#  6. fidelity: profile -> calibrate -> engine run -> validate (docs/fidelity.md).
# What needs no GPU is not run here (test_cuda_plan, the emulator tests: `make check`).
#
# No silent passes: on a machine where nvidia-smi sees a GPU, a test that skips (a SKIP
# line, or "skipped") is a FAILURE. Where it sees none, every step after the build says
# it did not run for that reason (a dry run: the build still runs, unless
# GPU_SKIP_BUILD=1 reuses the build already in the build folder).
#
# Exit status: 0 every step passed and both targets are met; 1 a step failed, a target
# was missed, or the run was stopped; 2 bad usage; 3 no GPU seen (a dry run).
#
# Environment: GPU_BUILD_DIR (build-gpu), GPU_BENCH_BUDGET_S (450), GPU_SKIP_BUILD (0),
# GPU_DEPS_ROOT (where the carried packages are unpacked; $TMPDIR/twinserve-gpu-deps,
# outside the tree, so that a later call does not carry them back),
# GPU_MAKE_ARGS (extra make arguments), GPU_ONLY (a list of step names: only those run
# after the build, e.g. a second call that repeats one step; the others are recorded as
# not run), TWIN_DATA (the models' folder; default .gpu-carry when it holds them, else
# ../shared/data).
set -u
cd "$(dirname "$0")/.." || exit 2
root=$PWD

usage() {
    echo "usage: bash bench/gpu.sh OUTDIR [--logs DIR]   (or --fetch-deps)${1:+: $1}" >&2
    exit 2
}
[ "${1:-}" = "--fetch-deps" ] && exec bash bench/gpu_prep.sh
out='' logs=''
while [ $# -gt 0 ]; do
    case $1 in
        --logs) [ $# -ge 2 ] && [ -n "$2" ] || usage "--logs needs a folder"; logs=$2; shift 2 ;;
        -*) usage "unknown option $1" ;;
        *) [ -z "$out" ] && [ -n "$1" ] || usage; out=$1; shift ;;
    esac
done
[ -n "$out" ] || usage
mkdir -p "$out" || usage "cannot make $out"
out=$(cd "$out" && pwd)
if [ -z "$logs" ]; then
    logs=$(mktemp -d "${TMPDIR:-/tmp}/gpu-logs.XXXXXX") || exit 2
fi
mkdir -p "$logs" || usage "cannot make $logs"
logdir=$(cd "$logs" && pwd)
case "$out/" in "$logdir/"*) usage "OUTDIR must not be inside the logs folder" ;; esac
case "$logdir/" in "$out/"*) usage "the logs folder must not be inside OUTDIR" ;; esac

build=${GPU_BUILD_DIR:-build-gpu}
case $build in /*) bin=$build/twinserve ;; *) bin=$root/$build/twinserve ;; esac
budget=${GPU_BENCH_BUDGET_S:-450}
deadline=$((SECONDS + budget))
steps=$logdir/steps.tsv
: >"$steps"
echo "bench/gpu.sh: logs in $logdir, summary and archive in $out (budget ${budget} s)"

gpu_name=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpu_seen=0
if [ -n "$gpu_name" ]; then gpu_seen=1; else gpu_name="no GPU seen by nvidia-smi"; fi

# pack [final]: summary.txt and gpu-logs.tar.gz in OUTDIR from what the logs hold now;
# each written beside and renamed, so OUTDIR never holds a half-written one for long.
# Sets PRC to the table's verdict (0 pass, 1 fail).
pack() {
    local mode=${1:-partial} big
    big=$(cd "$logdir" && find . -type f -size +8M | sed 's|^\./||' | tr '\n' ' ')
    env -u LD_LIBRARY_PATH python3 "$root/bench/gpu_table.py" "$logdir" "$gpu_name" "$mode" \
        "$big" >"$out/.summary.tmp" 2>"$logdir/summary.err"
    PRC=$?
    if [ ! -s "$out/.summary.tmp" ]; then   # no python3: the steps at least
        { echo "== bench/gpu.sh: $gpu_name (python3 table failed: summary.err) =="
          cut -f1-4 "$steps" | tr '\t' ' '; } >"$out/.summary.tmp"
        PRC=1
    fi
    mv -f "$out/.summary.tmp" "$out/summary.txt"
    local ex=() f
    for f in $big; do ex+=("--exclude=$(basename "$logdir")/$f"); done
    tar -czf "$out/.logs.tmp" -C "$(dirname "$logdir")" "${ex[@]}" "$(basename "$logdir")" 2>/dev/null
    mv -f "$out/.logs.tmp" "$out/gpu-logs.tar.gz"
}
trap 'record stopped FAIL 0 "bench/gpu.sh was stopped (signal)"; pack final; exit 1' TERM INT

# record NAME STATUS SECONDS NOTE, then pack (a step that did not run added nothing to pack;
# finish packs in the end anyway)
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ' | cut -c1-150)" \
        >>"$steps"
    echo "[$(date +%T)] $1: $2 ($3 s) $4"
    [ "$2" = "NOT RUN" ] || pack
}

# not_run REASON STEP...: records each STEP as not run, for REASON
not_run() {
    local why=$1 st=${2:-}
    shift
    for st in "$@"; do echo "not run: $why" >"$logdir/$st.log"; record "$st" "NOT RUN" 0 "$why"; done
}
ALL_STEPS=(build test_backend_cuda decode_bf16 decode_bf16_cublas prefill_bf16 decode_f32
           test_engine_cuda e2e_cuda fidelity)
# stop REASON FROM: the run cannot go on: the steps from FROM on are not run; exit
stop() {
    local why=$1 from=$2 on=0 st rest=()
    for st in "${ALL_STEPS[@]}"; do [ "$st" = "$from" ] && on=1; [ $on = 1 ] && rest+=("$st"); done
    not_run "$why" "${rest[@]}"
    finish
}
finish() {
    pack final
    echo
    cat "$out/summary.txt"
    [ $gpu_seen = 1 ] || exit 3
    exit $PRC
}

# run_step NAME LIMIT STDOUT CMD...: runs CMD under timeout (LIMIT, cut to the time left),
# stdout to STDOUT ("" = the log), stderr to LOGDIR/NAME.log; sets RC and DT. RC 125: not
# run (no time left).
run_step() {
    local name=$1 limit=$2 o=$3
    shift 3
    local left=$((deadline - SECONDS))
    DT=0
    if [ -n "${GPU_ONLY:-}" ] && [[ " $GPU_ONLY " != *" $name "* ]]; then
        RC=125
        echo "not run: not in GPU_ONLY ($GPU_ONLY)" >"$logdir/$name.log"
        return
    fi
    if [ "$left" -lt 20 ]; then
        RC=125
        echo "not run: the ${budget}-second budget is spent" >"$logdir/$name.log"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0=$SECONDS
    if [ -n "$o" ]; then
        timeout -k 10 "$limit" "$@" >"$o" 2>"$logdir/$name.log"
    else
        timeout -k 10 "$limit" "$@" >"$logdir/$name.log" 2>&1
    fi
    RC=$?
    DT=$((SECONDS - t0))
}

# verdict LOG [test]: the status of a finished step from RC and its log. A test that
# skipped anything on a machine with a GPU failed: it proved nothing.
verdict() {
    case $RC in
        0) if [ "${2:-}" = test ] && grep -qiE '^SKIP|skipped' "$1" 2>/dev/null; then
               if [ $gpu_seen = 1 ]; then echo FAIL; else echo SKIP; fi
           else echo PASS; fi ;;
        124 | 137) echo TIMEOUT ;;
        125) echo "NOT RUN" ;;
        *) echo FAIL ;;
    esac
}
# test_note LOG STATUS: the line that explains a test step's status
test_note() {
    local n
    n=$(grep -m1 -iE '^SKIP|skipped|^[0-9]+%: Checks' "$1")
    case $2 in
        "NOT RUN") n=$(head -n 1 "$1") ;;
        FAIL) if [ $RC = 0 ] && grep -qiE '^SKIP|skipped' "$1"; then
                  n="skipped on a machine with a GPU: $n"
              else
                  n="rc $RC; $n $(grep -m1 -E ':[EF]:|^FAIL' "$1")"
              fi ;;
        TIMEOUT) n="killed after its time limit; $n" ;;
    esac
    printf '%s' "$n"
}

# ---- 1. preflight ----------------------------------------------------------------------
pre=$logdir/preflight.log
{
    echo "date: $(date -u '+%F %T UTC')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    for t in make "${CC:-cc}" "${CXX:-g++}" nvcc pkg-config sqlite3 python3 nvidia-smi tar; do
        printf '%-11s %s\n' "$t:" "$(command -v "$t" || echo MISSING)"
    done
    [ $gpu_seen = 1 ] && timeout 20 nvidia-smi \
        --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
} >"$pre" 2>&1
# use_carried: unpacks the carried packages (once) and points pkg-config, the loader and
# PATH's end at them (bench/gpu_deps.sh); sets deps_note
deps_note="system libraries"
carried=0
use_carried() {
    [ $carried = 1 ] && return
    carried=1
    if ls .gpu-carry/deps/*.deb >/dev/null 2>&1; then
        . bench/gpu_deps.sh
        gpu_deps_use .gpu-carry/deps "${GPU_DEPS_ROOT:-${TMPDIR:-/tmp}/twinserve-gpu-deps}" >"$logdir/deps.txt" 2>&1
        deps_note=$(tail -n 1 "$logdir/deps.txt")
    else
        deps_note="C libraries, make or the sqlite3 CLI not found, and no .gpu-carry/deps (bash bench/gpu_prep.sh)"
    fi
}
command -v make >/dev/null || use_carried
missing=()
# (g++ links the CUDA backend's shared object and is nvcc's host compiler)
for t in make "${CC:-cc}" "${CXX:-g++}" timeout tar; do command -v "$t" >/dev/null || missing+=("$t"); done
[ ${#missing[@]} -gt 0 ] && { record preflight FAIL 0 "missing: ${missing[*]}"; stop "preflight: ${missing[*]} missing" build; }
# the Makefile decides where nvcc and the CUDA libraries are, and which C libraries it
# needs: ask it, not a copy of its rules (the C libraries are checked first, so that the
# carried packages are tried, and reported, wherever they are needed)
info=$(make --no-print-directory -s BUILD="$build" cuda-info 2>>"$pre")
echo "make cuda-info: $info" >>"$pre"
field() { sed -n "s/^$1=//p" <<<"$info"; }
pkgs=$(field pkgs)
# (the sqlite3 CLI too: the end-to-end tests read their databases with it)
# shellcheck disable=SC2086
if ! pkg-config --exists $pkgs 2>/dev/null || ! command -v sqlite3 >/dev/null; then
    use_carried
    # shellcheck disable=SC2086
    if ! pkg-config --exists $pkgs 2>>"$pre"; then
        record preflight FAIL 0 "C libraries ($pkgs): $deps_note"
        stop "preflight: the C libraries are missing" build
    fi
fi
echo "C libraries ($pkgs): $deps_note" >>"$pre"
if [ -z "$(field nvcc)" ]; then
    if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
        why="cuBLAS/cudart not found beside nvcc (libcublas.so, libcudart.so; see preflight.log)"
    else
        why="nvcc not found (not on PATH, not in /usr/local/cuda/bin)"
    fi
    record preflight FAIL 0 "$why; GPU: $gpu_name"
    stop "preflight: $why" build
fi
if [ -z "${TWIN_DATA:-}" ]; then
    if [ -f .gpu-carry/models/stories260K.bin ]; then TWIN_DATA=$root/.gpu-carry
    else TWIN_DATA=$root/../shared/data; fi
fi
export TWIN_DATA
models="models in $TWIN_DATA"
[ -f "$TWIN_DATA/models/stories260K.bin" ] ||
    models="NO test models in $TWIN_DATA (bash bench/gpu_prep.sh): the real-model checks will skip"
echo "$models" >>"$pre"
record preflight INFO 0 "GPU: $gpu_name; nvcc $(field nvcc); C libraries: $deps_note; $models"

# ---- 2. build --------------------------------------------------------------------------
tests=(test_backend_cuda test_engine)
if [ "${GPU_SKIP_BUILD:-0}" = 1 ]; then
    echo "GPU_SKIP_BUILD=1: the build in $build is used as it is" >"$logdir/build.log"
    record build SKIP 0 "GPU_SKIP_BUILD=1: using the build already in $build"
    st=SKIP
else
    targets=(all)
    for t in "${tests[@]}"; do targets+=("$build/tests/$t"); done
    # shellcheck disable=SC2086
    run_step build 180 "" make -k -j"$(nproc)" BUILD="$build" ${GPU_MAKE_ARGS:-} "${targets[@]}"
    st=$(verdict "$logdir/build.log")
    note=$(grep -m1 -E 'error|No rule|warning: nvcc' "$logdir/build.log")
    if [ "$st" = PASS ]; then
        note="built:"
        for t in twinserve libtwinserve_cuda.so "${tests[@]/#/tests/}"; do [ -f "$build/$t" ] && note+=" $t"; done
    fi
    record build "$st" "$DT" "$note"
fi
so=$(field so)
if [ -z "$so" ] || [ ! -f "$so" ]; then
    case $st in
        PASS | SKIP) stop "the build left the CUDA backend out (no ${so:-libtwinserve_cuda.so})" test_backend_cuda ;;
        *) stop "the build ended $st without the CUDA backend (see build.log)" test_backend_cuda ;;
    esac
fi
[ -x "$bin" ] || stop "no binary at $bin (see build.log)" test_backend_cuda
[ $gpu_seen = 1 ] || stop "no GPU seen by nvidia-smi (a dry run)" test_backend_cuda

# ---- 3. the kernel tests ---------------------------------------------------------------
# test_step NAME LIMIT CMD...: a test binary or script, with its verdict and note
test_step() {
    local name=$1 limit=$2
    shift 2
    run_step "$name" "$limit" "" "$@"
    local st
    st=$(verdict "$logdir/$name.log" test)
    [ "$st" = PASS ] && grep -q '^FAIL' "$logdir/$name.log" && st=FAIL
    record "$name" "$st" "$DT" "$(test_note "$logdir/$name.log" "$st")"
}
test_step test_backend_cuda 120 "$build/tests/test_backend_cuda"

# ---- 4. the benchmarks -----------------------------------------------------------------
# bench NAME LIMIT ARGS...: twinserve bench --backend cuda ARGS --json > LOGDIR/NAME.json
bench() {
    local name=$1 limit=$2
    shift 2
    run_step "$name" "$limit" "$logdir/$name.json" "$bin" bench --backend cuda --json "$@"
    local st
    st=$(verdict "$logdir/$name.log")
    record "$name" "$st" "$DT" "$(grep -m1 -v '^$' "$logdir/$name.log")"
}
# (a bench's note is its log's first line: the error, or "not run: why")
# 8B bf16: ~16 GB of weights, ~4 ms a batch-1 step, tens of ms at batch 256; 66 steps each.
bench decode_bf16 60 --model dummy:llama-3-8b --dtype bf16 --batch 1,64,256 --ctx 1024 --steps 64
# the same batch-1 decode with every product on cuBLAS (our gemv kernel off): which is faster
TWIN_CUDA_GEMV=0 bench decode_bf16_cublas 30 --model dummy:llama-3-8b --dtype bf16 --batch 1 --ctx 1024 --steps 64
# 4096-token prefill: ~62 TFLOP, ~0.1 s a run at the target; a warm-up and 8 runs.
bench prefill_bf16 45 --model dummy:llama-3-8b --dtype bf16 --prefill 4096 --steps 8
# a smaller model in fp32 (~5 GB of weights), batch 1
bench decode_f32 30 --model dummy:llama-3.2-1b --dtype f32 --batch 1 --ctx 1024 --steps 64

# ---- 5. the longer tests ---------------------------------------------------------------
# The engine suite on the GPU in fp32: every policy's greedy tokens (static with padding,
# continuous, chunked prefill, speculative, preemption) equal each request decoded alone,
# sampling is independent of batching, and the story matches across file formats.
TWIN_TEST_BACKEND=cuda TWIN_TEST_DTYPE=f32 test_step test_engine_cuda 90 "$build/tests/test_engine"
TWIN_BIN=$bin test_step e2e_cuda 60 bash tests/e2e_cuda.sh

# ---- 6. fidelity -----------------------------------------------------------------------
# profile -> calibrate -> engine run -> validate, unchanged from the CPU (docs/fidelity.md),
# on dummy:llama-3.2-1b in bf16 and a synthetic Azure-shaped trace (../shared does not
# travel): the first GPU run measures the simulator's fidelity there too.
fid=$logdir/fidelity
mkdir -p "$fid"
# (timeout runs programs, not shell functions: the steps go into a script of their own)
cat >"$fid/run.sh" <<FID
set -e
"$bin" trace gen --n 300 --rate 12 --prompt lognormal:600:0.9 --output lognormal:80:0.8 \\
    --seed 7 --out "$fid/trace.csv" >&2
"$bin" profile --model dummy:llama-3.2-1b --backend cuda --dtype bf16 --reps 3 \\
    --out "$fid/profile.csv" -q >&2
"$bin" calibrate --profile "$fid/profile.csv" --out "$fid/l1b.cost" >"$fid/calibrate.txt"
"$bin" engine -q --backend cuda --dtype bf16 --model dummy:llama-3.2-1b \\
    --trace "$fid/trace.csv" --policy policies/chunked_prefill.lua --set chunk=512 \\
    --max-prompt 2048 --db "$fid/runs.db" --name gpu-cp >&2
"$bin" validate -q --db "$fid/runs.db" --run gpu-cp --cost "$fid/l1b.cost" >"$fid/validate.txt"
"$bin" validate -q --db "$fid/runs.db" --run gpu-cp --cost "$fid/l1b.cost" --name gpu-cp-json --json
FID
run_step fidelity 90 "$logdir/fidelity.json" bash "$fid/run.sh"
st=$(verdict "$logdir/fidelity.log")
record fidelity "$st" "$DT" "$(grep -m1 -E 'MAPE' "$fid/validate.txt" 2>/dev/null || tail -n 1 "$logdir/fidelity.log")"

finish

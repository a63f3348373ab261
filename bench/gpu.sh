#!/usr/bin/env bash
# bench/gpu.sh: the CUDA backend's check on a GPU machine (issue #5), in one script sized
# to finish within 8 minutes on one H200. Run from anywhere; it works in the repository
# root (a fresh copy of the tree is fine: it builds everything itself).
#
#   usage: bash bench/gpu.sh LOGDIR          full logs into LOGDIR; a short table last
#          bash bench/gpu.sh --fetch-deps    (on a Debian/Ubuntu machine with apt, not the
#                                            GPU one) download the C libraries' .deb files
#                                            into .gpu-deps/ for a machine that lacks them
#
# Steps, each under its own `timeout` and all under one deadline (GPU_BENCH_BUDGET_S,
# default 450 s), each logged to LOGDIR/<step>.log; a failure is recorded, never fatal:
#  1. preflight: tools, the C libraries (pkg-config luajit sqlite3 openblas check; when
#     they are missing and .gpu-deps/*.deb was carried along, those are unpacked into
#     .gpu-deps/root and used from there), nvidia-smi's view of the GPU;
#  2. build: make -k -j16 BUILD=build-gpu all + the CUDA test binaries (the Makefile
#     compiles engine/cuda/ when nvcc is found);
#  3. tests: build-gpu/tests/test_backend_cuda, build-gpu/tests/test_cuda_plan, and
#     tests/e2e_cuda.sh when it exists (PASS, SKIP when they print SKIP and exit 0, FAIL);
#  4. timing (twinserve bench --json, each run measuring its own roofs):
#     decode of dummy:llama-3-8b in bf16 at batch 1, 64, 256 and a 1024-token context;
#     prefill of 4096 tokens of dummy:llama-3-8b in bf16; batch-1 decode of
#     dummy:llama-3.2-1b in fp32;
#  4b. fidelity: a synthetic trace, `profile` of dummy:llama-3.2-1b in bf16, `calibrate`,
#     an engine run under chunked prefill and `validate` against it (docs/fidelity.md);
#  5. the table: each figure with its roof and fraction, the issue's targets beside them
#     (batch 1 >= 80% of the read bandwidth; prefill >= 60% of the bf16 GEMM rate), and
#     each step's PASS/FAIL/SKIP.
# Exit status: 0 when every step passed (or skipped) and both targets are met, 1 otherwise.
set -u

deps_pkgs=(libluajit-5.1-2 libluajit-5.1-dev libluajit-5.1-common libsqlite3-0 libsqlite3-dev
           libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5
           libquadmath0 check libsubunit0 libsubunit-dev)

cd "$(dirname "$0")/.." || exit 2
root=$PWD

if [ "${1:-}" = "--fetch-deps" ]; then
    mkdir -p .gpu-deps && (cd .gpu-deps && apt-get download "${deps_pkgs[@]}") || exit 1
    du -sh .gpu-deps
    echo "carry .gpu-deps with the tree (run's carry: [\".gpu-deps\"])"
    exit 0
fi
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
    echo "usage: bash bench/gpu.sh LOGDIR   (or --fetch-deps)" >&2
    exit 2
fi

mkdir -p "$1" || exit 2
logdir=$(cd "$1" && pwd)
build=${BUILD_DIR:-build-gpu}
bin=$root/$build/twinserve
budget=${GPU_BENCH_BUDGET_S:-450}
deadline=$((SECONDS + budget))
steps=$logdir/steps.tsv
: >"$steps"
echo "bench/gpu.sh: logs in $logdir (budget ${budget} s)"

# record NAME STATUS SECONDS NOTE
record() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ' | cut -c1-150)" \
        >>"$steps"
    echo "[$(date +%T)] $1: $2 ($3 s) $4"
}

# run_step NAME LIMIT STDOUT CMD...: runs CMD under timeout (LIMIT, cut to the time left),
# stdout to STDOUT ("" = the log), stderr to LOGDIR/NAME.log; sets RC and DT. RC 125: not
# run (no time left).
run_step() {
    local name=$1 limit=$2 out=$3
    shift 3
    local left=$((deadline - SECONDS))
    DT=0
    if [ "$left" -lt 20 ]; then
        RC=125
        echo "not run: the ${budget}-second budget is spent" >"$logdir/$name.log"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local t0=$SECONDS
    if [ -n "$out" ]; then
        timeout -k 10 "$limit" "$@" >"$out" 2>"$logdir/$name.log"
    else
        timeout -k 10 "$limit" "$@" >"$logdir/$name.log" 2>&1
    fi
    RC=$?
    DT=$((SECONDS - t0))
}

# status of a finished step from RC (and SKIP lines in its log)
verdict() {
    local log=$1
    case $RC in
        0) if grep -q '^SKIP' "$log" 2>/dev/null; then echo SKIP; else echo PASS; fi ;;
        124 | 137) echo TIMEOUT ;;
        125) echo "NOT RUN" ;;
        *) echo FAIL ;;
    esac
}

# ---- 1. preflight ----------------------------------------------------------------------
pre=$logdir/preflight.log
{
    echo "date: $(date -u '+%F %T UTC')"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
         "$(git status --porcelain 2>/dev/null | grep -c . || true) changed files"
    for t in make gcc nvcc pkg-config python3 nvidia-smi; do
        printf '%-11s %s\n' "$t:" "$(command -v "$t" || echo MISSING)"
    done
    command -v nvcc >/dev/null || ls -l /usr/local/cuda/bin/nvcc 2>&1
    command -v nvidia-smi >/dev/null &&
        timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
            --format=csv 2>&1
} >"$pre" 2>&1
gpu_name=$(timeout 20 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
[ -n "$gpu_name" ] || gpu_name="no GPU seen by nvidia-smi"
deps_note="system libraries"
if ! pkg-config --exists luajit sqlite3 openblas check 2>/dev/null; then
    deps_note="luajit/sqlite3/openblas/check not found by pkg-config"
    if ls .gpu-deps/*.deb >/dev/null 2>&1; then
        r=$root/.gpu-deps/root
        mkdir -p "$r"
        for d in .gpu-deps/*.deb; do dpkg-deb -x "$d" "$r" >>"$pre" 2>&1 || echo "unpack failed: $d" >>"$pre"; done
        lib=$r/usr/lib/x86_64-linux-gnu
        # The Makefile appends its own flags to these; pkg-config's part comes out empty.
        export CFLAGS="-O2 -g -I$r/usr/include/luajit-2.1 -I$r/usr/include -I$r/usr/include/x86_64-linux-gnu/openblas-pthread -pthread"
        export LDFLAGS="-L$lib -L$lib/openblas-pthread"
        export LDLIBS="-lluajit-5.1 -lsqlite3 -lopenblas -lcheck_pic -lsubunit -lrt -lm -pthread"
        export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        deps_note="$deps_note: using the carried .gpu-deps/*.deb"
    else
        deps_note="$deps_note and no .gpu-deps/*.deb carried (bash bench/gpu.sh --fetch-deps)"
    fi
fi
echo "deps: $deps_note" >>"$pre"
record preflight INFO 0 "GPU: $gpu_name; C libraries: $deps_note"

# ---- 2. build --------------------------------------------------------------------------
tests=(test_backend_cuda test_cuda_plan)
targets=(all)
for t in "${tests[@]}" test_engine; do [ -f "tests/$t.c" ] && targets+=("$build/tests/$t"); done
# shellcheck disable=SC2086
run_step build 300 "" make -k -j16 BUILD="$build" ${GPU_MAKE_ARGS:-} "${targets[@]}"
st=$(verdict "$logdir/build.log")
if [ -f "$build/engine/cuda/backend_cuda.o" ]; then cu="CUDA compiled"; else cu="NO CUDA objects (nvcc not found?)"; fi
note="$cu; $(grep -m1 -E 'error|No rule' "$logdir/build.log" 2>/dev/null)"
record build "$st" "$DT" "$note"

# ---- 3. tests --------------------------------------------------------------------------
for t in "${tests[@]}"; do
    if [ ! -x "$build/tests/$t" ]; then
        [ -f "tests/$t.c" ] && why="not built (see build.log)" || why="tests/$t.c does not exist"
        echo "$why" >"$logdir/$t.log"
        record "$t" FAIL 0 "$why"
        continue
    fi
    run_step "$t" 120 "" "$build/tests/$t"
    st=$(verdict "$logdir/$t.log")
    note=$(grep -m1 -E '^SKIP|^[0-9]+%: Checks' "$logdir/$t.log")
    [ "$st" = FAIL ] && note="rc $RC; $note $(grep -m1 -E ':[EF]:' "$logdir/$t.log")"
    record "$t" "$st" "$DT" "$note"
done
# The engine suite on the GPU in fp32: every policy's greedy tokens (static with padding,
# continuous, chunked prefill, speculative, preemption) equal each request decoded alone,
# sampling is independent of batching, and the story matches across file formats.
if [ -x "$build/tests/test_engine" ]; then
    TWIN_TEST_BACKEND=cuda TWIN_TEST_DTYPE=f32 run_step test_engine_cuda 180 "" "$build/tests/test_engine"
    st=$(verdict "$logdir/test_engine_cuda.log")
    note=$(grep -m1 -E '^SKIP|^[0-9]+%: Checks' "$logdir/test_engine_cuda.log")
    [ "$st" = FAIL ] && note="rc $RC; $note $(grep -m1 -E ':[EF]:' "$logdir/test_engine_cuda.log")"
    record test_engine_cuda "$st" "$DT" "$note"
fi
if [ -f tests/e2e_cuda.sh ]; then
    TWIN_BIN=$bin run_step e2e_cuda 120 "" bash tests/e2e_cuda.sh
    st=$(verdict "$logdir/e2e_cuda.log")
    [ "$st" = PASS ] && grep -q '^FAIL' "$logdir/e2e_cuda.log" && st=FAIL
    record e2e_cuda "$st" "$DT" "$(grep -c '^ok ' "$logdir/e2e_cuda.log") ok, $(grep -c '^FAIL' "$logdir/e2e_cuda.log") FAIL"
else
    record e2e_cuda SKIP 0 "tests/e2e_cuda.sh does not exist"
fi

# ---- 4. timing -------------------------------------------------------------------------
# bench NAME LIMIT ARGS...: twinserve bench --backend cuda ARGS --json > LOGDIR/NAME.json
bench() {
    local name=$1 limit=$2
    shift 2
    if [ ! -x "$bin" ]; then
        echo "no binary at $bin (see build.log)" >"$logdir/$name.log"
        RC=1 DT=0
    else
        run_step "$name" "$limit" "$logdir/$name.json" "$bin" bench --backend cuda --json "$@"
    fi
    local st
    st=$(verdict "$logdir/$name.log")
    record "$name" "$st" "$DT" "$(grep -m1 -v '^$' "$logdir/$name.log")"
}
# 8B bf16: ~16 GB of weights, ~4 ms a batch-1 step, tens of ms at batch 256; 66 steps each.
bench decode_bf16 150 --model dummy:llama-3-8b --dtype bf16 --batch 1,64,256 --ctx 1024 --steps 64
# the same batch-1 decode with every product on cuBLAS (our gemv kernel off): which is faster
TWIN_CUDA_GEMV=0 bench decode_bf16_cublas 60 --model dummy:llama-3-8b --dtype bf16 --batch 1 --ctx 1024 --steps 64
# 4096-token prefill: ~60 TFLOP, ~0.1 s a run at the target; a warm-up and 8 runs.
bench prefill_bf16 120 --model dummy:llama-3-8b --dtype bf16 --prefill 4096 --steps 8
# a smaller model in fp32 (~5 GB of weights), batch 1
bench decode_f32 90 --model dummy:llama-3.2-1b --dtype f32 --batch 1 --ctx 1024 --steps 64

# ---- 4b. fidelity -----------------------------------------------------------------------
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
if [ -x "$bin" ]; then
    run_step fidelity 180 "$logdir/fidelity.json" bash "$fid/run.sh"
    st=$(verdict "$logdir/fidelity.log")
    record fidelity "$st" "$DT" "$(grep -m1 -E 'MAPE' "$fid/validate.txt" 2>/dev/null || tail -n 1 "$logdir/fidelity.log")"
else
    record fidelity FAIL 0 "no binary at $bin"
fi

# ---- 5. the table ----------------------------------------------------------------------
table=$logdir/summary.txt
env -u LD_LIBRARY_PATH python3 - "$logdir" "$gpu_name" >"$table" 2>"$logdir/summary.err" <<'PY'
import json, os, sys
d, gpu = sys.argv[1], sys.argv[2]
steps = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "steps.tsv")) if l.strip()]
def load(name):
    try:
        with open(os.path.join(d, name + ".json")) as f:
            return json.load(f)
    except Exception:
        return None
def note(name):
    for s in steps:
        if s[0] == name:
            return (f"{s[1]}: {s[3]}" if len(s) > 3 else s[1])[:110]
    return "not run"
ok = all(s[1] in ("PASS", "SKIP", "INFO") for s in steps)
out = []
p = out.append
p(f"== bench/gpu.sh: {gpu}; logs in {d} ==")
if gpu.startswith("no GPU"):
    p("NO GPU: the CUDA tests and timings cannot run on this machine; no GPU figure below")
p(f"{'step':<18} {'status':<8} {'s':>4}  note")
for s in steps:
    p(f"{s[0]:<18} {s[1]:<8} {s[2]:>4}  {s[3] if len(s) > 3 else ''}")
p("")
p(f"{'figure':<38} {'measured':>14} {'roof':>16} {'fraction':>9}  {'target':<8} verdict")
def row(fig, meas, roof, frac, target="", verdict=""):
    p(f"{fig:<38} {meas:>14} {roof:>16} {frac:>9}  {target:<8} {verdict}")
targets_met = True
def what(r):
    m = r["model"][6:] if r["model"].startswith("dummy:") else os.path.basename(r["model"])
    return m + " " + {"f32": "fp32", "f16": "fp16"}.get(r["weight_type"], r["weight_type"])
dec, pre, f32 = load("decode_bf16"), load("prefill_bf16"), load("decode_f32")
for r in (dec, pre, f32):
    if r:
        row(f"roofs ({what(r)} run)",
            f"{r['mem_bw_gbs']/1e3:.2f} TB/s", "read bandwidth", "", "", "")
        row("", f"{r['gemm_gflops']/1e3:.0f} TFLOP/s", r['gemm_label'], "", "", "")
if dec:
    for x in dec["results"]:
        b = x["batch"]
        if b == 1:
            v1 = x["frac_mem_roof"] >= 0.80
            v2 = x["frac_read_bw"] >= 0.80
            targets_met &= v1
            row(f"decode {what(dec)} b=1 ctx {dec['ctx']}", f"{x['tok_per_s']:.1f} tok/s",
                f"{dec['mem_roof_tok_per_s_batch1']:.1f} tok/s",
                f"{100*x['frac_mem_roof']:.1f}%", ">= 80%", "PASS" if v1 else "FAIL")
            row("  bytes really read per step", f"{x['read_bytes_per_step']/1e9:.2f} GB",
                f"{dec['mem_bw_gbs']/1e3:.2f} TB/s", f"{100*x['frac_read_bw']:.1f}%", ">= 80%",
                "PASS" if v2 else "FAIL")
        else:
            row(f"decode {what(dec)} b={b} ctx {dec['ctx']}", f"{x['tok_per_s']:.0f} tok/s",
                f"{dec['compute_roof_tok_per_s']:.0f} tok/s", f"{100*x['frac_compute_roof']:.1f}%",
                "", f"(compute; bytes read {100*x['frac_read_bw']:.0f}% of bw)")
else:
    targets_met = False
    row("decode llama-3-8b bf16 b=1,64,256", "no result", "", "", ">= 80%", note("decode_bf16"))
cub = load("decode_bf16_cublas")
if cub:
    x = cub["results"][0]
    row("  b=1 with cuBLAS only (no gemv)", f"{x['tok_per_s']:.1f} tok/s",
        f"{cub['mem_roof_tok_per_s_batch1']:.1f} tok/s", f"{100*x['frac_mem_roof']:.1f}%", "", "")
if pre and pre.get("prefill"):
    x = pre["prefill"]
    v = x["frac_gemm_roof"] >= 0.60
    targets_met &= v
    row(f"prefill {what(pre)} {x['tokens']} tokens", f"{x['tok_per_s']:.0f} tok/s",
        f"{pre['gemm_gflops']/1e3:.0f} TFLOP/s", f"{100*x['frac_gemm_roof']:.1f}%", ">= 60%",
        "PASS" if v else "FAIL")
    row(f"  median {x['median_ms']:.1f} ms, best {x['best_ms']:.1f} ms",
        f"{x['tflops']:.0f} TFLOP/s", "(work performed)", "", "", "")
else:
    targets_met = False
    row("prefill llama-3-8b bf16 4096 tokens", "no result", "", "", ">= 60%", note("prefill_bf16"))
if f32:
    x = f32["results"][0]
    row(f"decode {what(f32)} b=1 ctx {f32['ctx']}", f"{x['tok_per_s']:.1f} tok/s",
        f"{f32['mem_roof_tok_per_s_batch1']:.1f} tok/s", f"{100*x['frac_mem_roof']:.1f}%", "", "")
else:
    row("decode llama-3.2-1b fp32 b=1", "no result", "", "", "", note("decode_f32"))
fid = load("fidelity")
if fid:
    st = fid["steps"]["pass"]
    row("fidelity llama-3.2-1b bf16 (validate)", f"MAPE {100*fid['mape']:.1f}%",
        f"step med {100*st['median_abs_error']:.1f}%", f"p90 {100*st['p90_abs_error']:.1f}%",
        "", "(see fidelity/validate.txt)")
else:
    row("fidelity (profile, calibrate, validate)", "no result", "", "", "", note("fidelity"))
p("")
p("fractions: decode b=1 of the measured read bandwidth (weight bytes x tok/s, the issue's "
  "figure; 'bytes really read' leaves out the untied embedding table and adds the KV "
  "cache), b=64/256 of the compute roof, prefill of the measured GEMM rate (median run); "
  "each roof measured in the same run")
p(f"overall: {'PASS' if ok and targets_met else 'FAIL'} (steps {'all passed' if ok else 'not all passed'}, "
  f"targets {'met' if targets_met else 'not met'})")
print("\n".join(out))
sys.exit(0 if ok and targets_met else 1)
PY
prc=$?
if [ -s "$table" ]; then
    echo
    cat "$table"
else
    # python3 failed: the steps at least
    echo
    echo "== bench/gpu.sh: $gpu_name; logs in $logdir (python3 table failed: summary.err) =="
    cut -f1-4 "$steps" | tr '\t' ' '
    prc=1
fi
exit $prc

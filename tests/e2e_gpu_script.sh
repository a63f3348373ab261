#!/usr/bin/env bash
# e2e_gpu_script.sh: bench/gpu.sh, the GPU device check (issue #17), run here without a
# GPU on the build under test (GPU_SKIP_BUILD=1: no second build), with nvidia-smi
# replaced by a stub that sees no GPU, or one that claims a GPU:
#  - a dry run: exit status 3, exactly two files in the output folder (summary.txt and
#    gpu-logs.tar.gz, which holds every step's log), every step says why it did not run,
#    and the table is the last thing on stdout;
#  - no silent passes: where "a GPU" is seen, a CUDA test that skips is a FAILURE;
#  - the no-system-libraries path (pkg-config pointed at nothing; make hidden): the
#    carried packages (bash bench/gpu_prep.sh) are unpacked and used, by gpu.sh's
#    preflight and by a program compiled and run against them; skipped, saying so, when
#    none were carried;
#  - bad usage is refused.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_gpu_script
# shellcheck disable=SC2034  # (read by lib_e2e.sh's run)
LIMIT=120   # a whole gpu.sh run: a dozen steps, each packing the summary and archive

bdir=$(cd "$(dirname "$BIN")" && pwd)
mkdir -p "$T/nogpu" "$T/gpu" "$T/empty"
printf '#!/bin/sh\nexit 9\n' >"$T/nogpu/nvidia-smi"
printf '#!/bin/sh\necho "NVIDIA H200"\n' >"$T/gpu/nvidia-smi"
chmod +x "$T/nogpu/nvidia-smi" "$T/gpu/nvidia-smi"
# as gpu.sh's preflight sees it: the Makefile finds nvcc and the CUDA libraries, and the
# build under test has the CUDA object
so=$(make -s --no-print-directory BUILD="$bdir" cuda-info 2>/dev/null | sed -n 's/^so=//p')
cuda_build=0
[ -n "$so" ] && [ -f "$so" ] && cuda_build=1

# steps_ok: every step in the logs' steps.tsv has a status and a reason
steps_ok() {
    local f=$1/steps.tsv
    [ -s "$f" ] || { bad " no steps.tsv in the archive"; return; }
    awk -F'\t' 'NF < 4 || $2 == "" || $4 == "" {print; bad = 1} END {exit bad}' "$f" >"$T/noreason" ||
        bad " steps without a status or a reason: $(head -n 3 "$T/noreason" | tr '\n' '|')"
}

begin "dry run: exit status 3 (no GPU), two files back, every step says why"
PATH=$T/nogpu:$PATH GPU_SKIP_BUILD=1 GPU_BUILD_DIR=$bdir run dry bash bench/gpu.sh "$T/out" --logs "$T/logs"
want_rc 3
got=$(cd "$T/out" && ls -A | tr '\n' ' ')
[ "$got" = "gpu-logs.tar.gz summary.txt " ] || bad " the output folder holds '$got'"
mkdir -p "$T/x" && tar -xzf "$T/out/gpu-logs.tar.gz" -C "$T/x" || bad " the archive does not unpack"
steps_ok "$T/x/logs"
for s in preflight build test_backend_cuda decode_bf16 prefill_bf16 test_engine_cuda e2e_cuda fidelity; do
    [ -f "$T/x/logs/$s.log" ] || bad " no $s.log in the archive"
done
grep -q "^NO GPU" "$T/out/summary.txt" || bad " the summary does not say NO GPU"
[ "$(tail -n 1 "$T/dry.out")" = "$(tail -n 1 "$T/out/summary.txt")" ] ||
    bad " stdout does not end with the table"
want_out "overall: NO GPU (exit status 3)"
if [ $cuda_build = 1 ]; then
    grep -q "^test_backend_cuda.*NOT RUN.*no GPU seen" "$T/x/logs/steps.tsv" ||
        bad " test_backend_cuda is not 'not run: no GPU'"
else
    # no nvcc here: the preflight stops at once, naming what is missing; or a build made
    # with CUDA=0 where nvcc is: the run stops after the build, saying so
    grep -qE "^preflight	FAIL	.*(nvcc|cuBLAS)|^test_backend_cuda	NOT RUN	.*the build left the CUDA backend out" \
        "$T/x/logs/steps.tsv" || bad " neither the preflight nor the build check stopped the run"
fi
end

begin "a GPU seen: a CUDA test that skips is a failure, not a pass"
PATH=$T/gpu:$PATH GPU_SKIP_BUILD=1 GPU_BUILD_DIR=$bdir GPU_ONLY=test_backend_cuda \
    run seen bash bench/gpu.sh "$T/out2" --logs "$T/logs2"
want_rc 1
if [ $cuda_build = 1 ]; then
    grep -q "^test_backend_cuda	FAIL	.*skipped on a machine with a GPU" "$T/logs2/steps.tsv" ||
        bad " test_backend_cuda's SKIP was not counted as a failure"
    grep -q "^decode_bf16	NOT RUN	.*not in GPU_ONLY" "$T/logs2/steps.tsv" ||
        bad " a step outside GPU_ONLY was not recorded as not run"
else
    grep -qE "^preflight	FAIL|^test_backend_cuda	NOT RUN	.*the build left the CUDA backend out" \
        "$T/logs2/steps.tsv" || bad " neither the preflight nor the build check stopped the run"
fi
want_out "overall: FAIL"
end

begin "bad usage is refused"
run u0 bash bench/gpu.sh
want_rc 2
want_err "usage: bash bench/gpu.sh OUTDIR"
run u1 bash bench/gpu.sh "$T/logs3/out" --logs "$T/logs3"
want_rc 2
want_err "OUTDIR must not be inside the logs folder"
run u2 bash bench/gpu.sh "$T/o4" --bogus
want_rc 2
end

debs=${TWIN_GPU_DEPS:-$PWD/.gpu-carry/deps}
if ls "$debs"/*.deb >/dev/null 2>&1 && command -v dpkg-deb >/dev/null; then
    begin "no system libraries: gpu.sh's preflight unpacks and uses the carried packages"
    PKG_CONFIG_LIBDIR=$T/empty PKG_CONFIG_PATH='' PATH=$T/nogpu:$PATH GPU_SKIP_BUILD=1 \
        GPU_BUILD_DIR=$bdir GPU_DEPS_ROOT=$T/root GPU_ONLY=none \
        run nosys bash bench/gpu.sh "$T/out5" --logs "$T/logs5"
    want_rc 3
    grep -q "C libraries.*using [0-9]* carried packages unpacked in $T/root" "$T/logs5/preflight.log" ||
        bad " the preflight did not use the carried packages: $(grep -m1 'C libraries' "$T/logs5/preflight.log")"
    end

    begin "no make on the machine: the carried make runs the build's queries"
    mkdir -p "$T/bin"
    for f in /usr/bin/* /usr/sbin/* /bin/* /sbin/*; do
        n=${f##*/}
        [ "$n" = make ] || [ -e "$T/bin/$n" ] || ln -s "$f" "$T/bin/$n"
    done
    nv=$(command -v nvcc || true)
    PATH=$T/nogpu:$T/bin${nv:+:${nv%/*}} GPU_SKIP_BUILD=1 GPU_BUILD_DIR=$bdir \
        GPU_DEPS_ROOT=$T/root3 GPU_ONLY=none run nomake bash bench/gpu.sh "$T/out6" --logs "$T/logs6"
    want_rc 3
    grep -q "^make: *MISSING" "$T/logs6/preflight.log" || bad " make was not missing"
    grep -q "^make cuda-info: nvcc=" "$T/logs6/preflight.log" || bad " the carried make did not run"
    grep -q "using [0-9]* carried packages unpacked in $T/root3" "$T/logs6/deps.txt" ||
        bad " the carried packages were not unpacked"
    end

    begin "no system libraries: a program built and run against the carried packages alone"
    pkgs=$(make -s --no-print-directory cuda-info 2>/dev/null | sed -n 's/^pkgs=//p')
    cat >"$T/p.c" <<'EOF'
#include <cblas.h>
#include <check.h>
#include <lauxlib.h>
#include <sqlite3.h>
#include <stdio.h>
int main(void) {
    float a[2] = {1, 2}, b[2] = {3, 4};
    lua_State *L = luaL_newstate();
    printf("lua %s sqlite %s dot %g check %d\n", L ? "ok" : "none", sqlite3_libversion(),
           cblas_sdot(2, a, 1, b, 1), CHECK_MAJOR_VERSION);
    return 0;
}
EOF
    cat >"$T/p.sh" <<EOF
set -e
export PKG_CONFIG_LIBDIR=$T/empty PKG_CONFIG_PATH=
! pkg-config --exists luajit 2>/dev/null || { echo "pkg-config still sees the system's luajit"; exit 1; }
. bench/gpu_deps.sh
gpu_deps_use "$debs" "$T/root2"
cc \$(pkg-config --cflags $pkgs) -o "$T/p" "$T/p.c" \$(pkg-config --libs $pkgs)
"$T/p"
ldd "$T/p" | grep -E 'luajit|sqlite|openblas'
EOF
    run prog bash "$T/p.sh"
    want_rc 0
    want_out "lua ok sqlite 3." "dot 11 check 0"
    want_out_re "libluajit[^ ]* => $T/root2/"
    want_out_re "libsqlite3[^ ]* => $T/root2/"
    end
else
    echo "SKIP: no carried packages in $debs (bash bench/gpu_prep.sh): the no-system-libraries checks skipped"
fi
e2e_finish e2e_gpu_script

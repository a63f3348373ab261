#!/usr/bin/env bash
# e2e_cuda_loader.sh: the CUDA backend is a shared object that `--backend cuda` opens at
# run time (issue #16 item 4; engine/backend.c, engine/cuda/cuda_entry.h). Checked here:
# twinserve links no CUDA library; a missing object, an object that does not load (a
# library it needs is missing), one without the entry point and one built against
# another backend.h are each refused with the path and the reason, exit status 1; and,
# where a private mount namespace can hide the CUDA toolkit (root, unshare), twinserve
# starts and its CPU work runs without any CUDA library while `--backend cuda` names the
# library that is missing. No GPU needed. In a build without CUDA the loader is not
# compiled: the one check there is the build's own message.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_cuda_loader

bdir=$(cd "$(dirname "$BIN")" && pwd)
so=$bdir/libtwinserve_cuda.so
gen=(generate --backend cuda --model dummy:stories260k -n 1)

begin "twinserve links no CUDA library (it starts on a machine without one)"
run ldd ldd "$BIN"
want_rc 0
grep -qiE 'libcudart|libcublas|libcuda\.so' "$T/ldd.out" && bad " ldd lists a CUDA library"
end

if [ ! -f "$so" ]; then
    echo "SKIP: no $so (a build without CUDA): the loader's checks skipped"
    begin "a build without CUDA: --backend cuda says so"
    run nocuda "$BIN" "${gen[@]}"
    want_rc 1
    want_err "no CUDA backend"
    end
    e2e_finish e2e_cuda_loader
    exit $?
fi

begin "the build's object is found; with no GPU the backend itself answers"
run found "$BIN" "${gen[@]}"
# 0 on a GPU machine; else the backend's own "no GPU" (the object loaded), or, where the
# CUDA libraries are not installed, the object named with the library it lacks
if [ "$rc" -ne 0 ]; then
    want_rc 1
    grep -qE "no GPU|cannot load $so: lib(cublas|cudart)" "$T/found.err" ||
        bad " neither the backend's 'no GPU' nor the object's missing library"
fi
end

begin "TWIN_CUDA_LIB naming no file: refused with the path"
TWIN_CUDA_LIB=$T/none/libtwinserve_cuda.so run missing "$BIN" "${gen[@]}"
want_rc 1
want_err "no CUDA backend: TWIN_CUDA_LIB=$T/none/libtwinserve_cuda.so: no such file"
end

begin "an installed copy beside the binary is opened (the build's object hidden)"
mkdir -p "$T/inst"
cp "$BIN" "$T/inst/twinserve"
printf 'int x;\n' >"$T/x.c"
cc -shared -fPIC -o "$T/inst/libtwinserve_cuda.so" "$T/x.c"
run beside "$T/inst/twinserve" "${gen[@]}"
want_rc 1
want_err "$T/inst/libtwinserve_cuda.so has no twin_cuda_api()"
end

if ! command -v cc >/dev/null; then
    echo "SKIP: no C compiler: the fake objects' checks skipped"
else
    # an object that needs a library which is gone: what a machine without cudart sees
    printf 'int twin_fake_dep(void) { return 1; }\n' >"$T/dep.c"
    printf 'int twin_fake_dep(void);\nint f(void) { return twin_fake_dep(); }\n' >"$T/needs.c"
    cc -shared -fPIC -o "$T/libtwinfakedep.so" "$T/dep.c" &&
        cc -shared -fPIC -o "$T/needs.so" "$T/needs.c" -L"$T" -ltwinfakedep
    rm -f "$T/libtwinfakedep.so"
    begin "an object whose library is missing: refused with its path and dlerror"
    TWIN_CUDA_LIB=$T/needs.so run needs "$BIN" "${gen[@]}"
    want_rc 1
    want_err "no CUDA backend: cannot load $T/needs.so: libtwinfakedep.so: cannot open shared object file"
    end

    begin "the engine refuses the same way, exit status 2, no run recorded"
    printf 'arrival_s,prompt_tokens,output_tokens\n0,20,4\n' >"$T/t.csv"
    TWIN_CUDA_LIB=$T/needs.so run eng "$BIN" engine --trace "$T/t.csv" --policy "$POL/continuous.lua" \
        --model dummy:stories260k --backend cuda --db "$T/e.db" -q
    want_rc 2
    want_err "cannot load $T/needs.so"
    [ -e "$T/e.db" ] && bad " e.db was left behind"
    end

    # the entry point of another build: sizes that cannot be this binary's
    cat >"$T/abi.c" <<'EOF'
#include <stddef.h>
typedef struct { int abi; size_t backend_size, opts_size; void *create, *available; } api_t;
static const api_t api = {1, 3, 5, 0, 0};
const api_t *twin_cuda_api(void) { return &api; }
EOF
    cc -shared -fPIC -o "$T/abi.so" "$T/abi.c"
    begin "an object built against another backend.h: refused, nothing called"
    TWIN_CUDA_LIB=$T/abi.so run abi "$BIN" "${gen[@]}"
    want_rc 1
    want_err "$T/abi.so was built from another version of engine/backend.h (abi 1, backend 3 bytes, options 5"
    end
fi

# The CUDA toolkit hidden under an empty folder in a private mount namespace: the machine
# without CUDA libraries that the issue asks for, with this build's own object in place.
home=$(make -s --no-print-directory cuda-info 2>/dev/null | sed -n 's/^home=//p')
home=$(readlink -f "${home:-/usr/local/cuda}")
# (an array, not a function: `run` hands it to timeout, which runs programs)
hide=(unshare -m sh -c 'mount -t tmpfs none "$1" && shift && exec "$@"' hide "$home")
if [ -d "$home" ] && "${hide[@]}" true 2>/dev/null && ! "${hide[@]}" ldd "$so" | grep -q 'libcudart.*=> /'; then
    begin "CUDA libraries hidden: sim, an engine run and a suite on the CPU run as usual"
    printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n0.004,30,12\n' >"$T/s.csv"
    run hsim "${hide[@]}" "$BIN" sim -q --trace "$T/s.csv" --policy "$POL/continuous.lua" --model llama-2-7b \
        --db "$T/s.db"
    want_rc 0
    want_sql "$T/s.db" "SELECT count(*) FROM requests" 4
    run heng "${hide[@]}" "$BIN" engine -q --trace "$T/s.csv" --policy "$POL/continuous.lua" \
        --model dummy:stories260k --db "$T/h.db"
    want_rc 0
    want_sql "$T/h.db" "SELECT status FROM runs" "done"
    if [ -x "$bdir/tests/test_kv" ]; then
        run hkv "${hide[@]}" "$bdir/tests/test_kv"
        want_rc 0
        want_out_re "100%: Checks"
    fi
    end

    begin "CUDA libraries hidden: --backend cuda names the library that is missing"
    run hcuda "${hide[@]}" "$BIN" "${gen[@]}"
    want_rc 1
    want_err "no CUDA backend: cannot load $so: "
    want_err_re "lib(cublas|cudart)[^ ]*: cannot open shared object file"
    end
else
    echo "SKIP: cannot hide the CUDA toolkit ($home) in a private mount namespace (needs root and unshare): those checks skipped"
fi
e2e_finish e2e_cuda_loader

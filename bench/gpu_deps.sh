# shellcheck shell=bash
# bench/gpu_deps.sh: the C libraries for a machine that lacks them (the GPU machine: no
# package registry there). Sourced, not run, by bench/gpu_prep.sh (which downloads the
# packages here), bench/gpu.sh (which uses them there) and tests/e2e_gpu_script.sh.
#
# Why packages, and pkg-config pointed into them: the Makefile asks pkg-config for every
# library's flags (PKGS, CHECK_PKG), so unpacking the .deb files into a folder and
# pointing pkg-config at it (PKG_CONFIG_LIBDIR, with PKG_CONFIG_SYSROOT_DIR so that the
# files' /usr paths land in that folder) builds the unchanged Makefile against them, even
# when the Makefile's list of libraries grows. Nothing is installed: the folder is the
# only thing written, and the environment of this shell the only thing changed.

# Debian/Ubuntu package names (the development machine's distribution): the libraries and
# their headers, what they load at run time, the sqlite3 CLI the end-to-end tests use,
# pkg-config and make (put last on PATH, so a machine's own are preferred).
# shellcheck disable=SC2034  # (used by the scripts that source this)
GPU_DEPS_PKGS=(libluajit-5.1-2 libluajit-5.1-dev libluajit-5.1-common
               libsqlite3-0 libsqlite3-dev sqlite3 libreadline8 readline-common
               libopenblas0-pthread libopenblas-pthread-dev libopenblas0 libgfortran5 libquadmath0
               check libsubunit0 libsubunit-dev
               libmicrohttpd12 libmicrohttpd-dev libjansson4 libjansson-dev
               pkgconf pkgconf-bin libpkgconf3 make)

# gpu_deps_use DEBDIR ROOT: unpacks DEBDIR/*.deb into ROOT (emptied first) and exports
# PKG_CONFIG_LIBDIR, PKG_CONFIG_SYSROOT_DIR, LD_LIBRARY_PATH and PATH for them. Prints what
# it did on one line; returns 1, saying why, when a package does not unpack or pkg-config
# cannot be found even among them.
gpu_deps_use() {
    local debs=$1 r=$2 d n=0
    rm -rf "$r" && mkdir -p "$r" || { echo "cannot make $r"; return 1; }
    r=$(cd "$r" && pwd)
    for d in "$debs"/*.deb; do
        [ -f "$d" ] || continue
        dpkg-deb -x "$d" "$r" || { echo "cannot unpack $d"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -gt 0 ] || { echo "no .deb files in $debs"; return 1; }
    local lib=$r/usr/lib/x86_64-linux-gnu
    # libmicrohttpd.pc lists gnutls under Requires.private, which pkg-config resolves even
    # for --cflags; the library itself is linked against the machine's libgnutls30, so an
    # empty gnutls.pc (no flags) stands in for gnutls's development package and its tree
    # of dependencies.
    if [ -f "$lib/pkgconfig/libmicrohttpd.pc" ] && [ ! -f "$lib/pkgconfig/gnutls.pc" ]; then
        printf 'Name: gnutls\nDescription: stand-in (bench/gpu_deps.sh)\nVersion: 3.7.0\nCflags:\nLibs:\n' \
            >"$lib/pkgconfig/gnutls.pc"
    fi
    export PKG_CONFIG_LIBDIR="$lib/pkgconfig:$lib/openblas-pthread/pkgconfig:$r/usr/share/pkgconfig"
    export PKG_CONFIG_SYSROOT_DIR=$r
    export PKG_CONFIG_PATH=
    export LD_LIBRARY_PATH="$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PATH="$PATH:$r/usr/bin"
    command -v pkg-config >/dev/null || { echo "no pkg-config, not even in $r/usr/bin"; return 1; }
    echo "using $n carried packages unpacked in $r"
}

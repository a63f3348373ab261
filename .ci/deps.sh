#!/usr/bin/env bash
# Installs what twinserve needs on Debian/Ubuntu (`make deps`; also run first by `make test`
# and `make demo`). As root it runs apt-get; otherwise it prints the exact command to run.
set -eu
# parallel: GNU parallel, which runs `sweep --emit-jobs` job lists (tests/e2e_jobs.sh).
# libmicrohttpd-dev, libjansson-dev: `twinserve serve` (HTTP, JSON bodies); curl: e2e_serve.sh.
pkgs=(gcc make pkg-config libluajit-5.1-dev libsqlite3-dev sqlite3 check
      libopenblas-dev gnuplot-nox parallel libmicrohttpd-dev libjansson-dev curl)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# python3: the end-to-end scripts parse --json with it and the CUDA emulator's build
# rewrites kernel sources with it; any python3 on PATH will do (not only Debian's).
command -v python3 >/dev/null 2>&1 || missing+=(python3)
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
    echo "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $cmd >/dev/null
else
    echo "twinserve needs: ${missing[*]}" >&2
    echo "run: sudo apt-get update && sudo $cmd" >&2
    exit 1
fi

#!/usr/bin/env bash
# bench/gpu_prep.sh: the one preparation step before a GPU run (issue #17). It collects
# what the GPU machine lacks into one git-ignored folder, .gpu-carry/, that the device
# command carries along with the tree (docs/benchmarks.md, "GPU (CUDA backend)"):
#   .gpu-carry/deps/*.deb   the C libraries' packages (bench/gpu_deps.sh lists them), from
#                           apt-get download: run it on a Debian/Ubuntu machine with apt;
#   .gpu-carry/models/      the test models (stories260K.bin, tok512.bin, stories260K.gguf)
#                           from ${TWIN_DATA:-../shared/data}/models: ../shared does not
#                           travel, and without them the real-model checks would skip,
#                           which bench/gpu.sh counts as a failure on a GPU.
# bench/gpu.sh finds both there (TWIN_DATA=.gpu-carry). Run from anywhere; idempotent
# (packages already downloaded are kept).
#
#   usage: bash bench/gpu_prep.sh
# Exit status: 0 when both parts are in place and the tree plus the folder fit the 64 MiB
# a device call carries; 1 otherwise, with the reason.
set -u
cd "$(dirname "$0")/.." || exit 1
. bench/gpu_deps.sh
carry=.gpu-carry
data=${TWIN_DATA:-../shared/data}
models=(stories260K.bin tok512.bin stories260K.gguf)
mkdir -p "$carry/deps" "$carry/models" || exit 1
# an unpacked tree left there by an older gpu.sh would travel too
rm -rf "$carry/root"

missing=()
for p in "${GPU_DEPS_PKGS[@]}"; do
    ls "$carry/deps/${p}"_*.deb >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || { echo "gpu_prep: apt-get not found: run this on a Debian/Ubuntu machine" >&2; exit 1; }
    echo "gpu_prep: downloading ${#missing[@]} packages into $carry/deps"
    # apt's sandbox user cannot write into most checkouts; the download itself is the same
    (cd "$carry/deps" && apt-get -o APT::Sandbox::User=root download "${missing[@]}") ||
        { echo "gpu_prep: apt-get download failed (try apt-get update first)" >&2; exit 1; }
fi

for m in "${models[@]}"; do
    if [ ! -f "$data/models/$m" ]; then
        echo "gpu_prep: $data/models/$m not found (set TWIN_DATA to the shared data folder)" >&2
        exit 1
    fi
    cp -f "$data/models/$m" "$carry/models/$m" || exit 1
    chmod u+w "$carry/models/$m"
done

# what a device call sends: the tracked and untracked-not-ignored files, plus the carry
tree=$(git ls-files -z -co --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -n 1 | cut -f1)
extra=$(du -sb "$carry" | cut -f1)
total=$(( (${tree:-0} + extra) / 1048576 ))
echo "gpu_prep: $carry holds $(ls "$carry/deps" | wc -l) packages and ${#models[@]} models," \
     "$((extra / 1048576)) MiB; with the tree $total MiB of the 64 a call carries"
if [ "$total" -ge 64 ]; then
    echo "gpu_prep: too large to carry" >&2
    exit 1
fi
echo "gpu_prep: ready. The device command (docs/benchmarks.md):"
echo "  run(command='bash bench/gpu.sh \"\$OUT\"', carry=['$carry'], timeout_s=560)"

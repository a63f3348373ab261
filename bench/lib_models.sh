# bench/lib_models.sh: sourced by the CPU engine benchmarks (engine_cpu.sh, kv_type.sh).
# smollm2_copies BIN TYPES...: the smollm2-135m-shaped dummy (seed 1) written as GGUF in
# each type by `twinserve quantize`, once, under $MODELS (default $TMPDIR/twin_engine_cpu),
# reused by later runs; sets `models` to that folder. A copy is written to a temporary name
# first, so an interrupted write is never taken for a finished one.
smollm2_copies() {
    local bin=$1 t
    shift
    models=${MODELS:-${TMPDIR:-/tmp}/twin_engine_cpu}
    mkdir -p "$models"
    for t in "$@"; do
        [ -s "$models/smollm2-135m_$t.gguf" ] && continue
        "$bin" quantize dummy:smollm2-135m "$models/smollm2-135m_$t.gguf.tmp" --type "$t" \
            --seed 1 >/dev/null
        mv "$models/smollm2-135m_$t.gguf.tmp" "$models/smollm2-135m_$t.gguf"
    done
}

#!/usr/bin/env bash
# e2e_llamacpp.sh: the GGUF files `twinserve quantize` writes load in the real llama.cpp
# (node-llama-cpp's prebuilt linux-x64 CPU binaries, installed into BUILD/npm-llamacpp; the
# whole script is skipped with a message where npm cannot install them):
#  - stories260K (from the shared data; skipped without it) written in every type (F32, F16,
#    BF16, Q8_0, Q4_0): llama.cpp's greedy
#    continuation of BOS (tests/gguf_llamacpp.mjs) is ours token for token (generate --ids);
#  - a dummy model (no tokenizer of its own) written with the placeholder tokenizer loads in
#    llama.cpp and in our generate, ids only;
#  - the Q8_0 and Q4_0 tensors we write are, byte for byte, what ggml's own quantiser
#    (ggml_quantize_chunk in llama.cpp's libggml-base) makes of the same fp32 weights
#    (tests/ggml_quant_cmp.c, built here against BUILD/libtwinserve.a).
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_llamacpp
LIMIT=120   # llama.cpp's first load reads its CPU variants

BUILDDIR=$(dirname "$BIN")
NPMDIR=$BUILDDIR/npm-llamacpp
NLC=3.22.1
BINS=$NPMDIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
BINM=$DATA/models/stories260K.bin
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "SKIP: node and npm are needed for llama.cpp's prebuilt binaries: interop checks skipped"
    exit 0
fi
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
    echo "SKIP: node-llama-cpp needs node 20 or newer (found $(node --version 2>/dev/null)): interop checks skipped"
    exit 0
fi
if [ ! -f "$BINS/libggml-base.so" ] || [ ! -d "$NPMDIR/node_modules/node-llama-cpp" ]; then
    mkdir -p "$NPMDIR"
    # the library without its optional per-platform packages, then linux-x64's alone;
    # --ignore-scripts: no postinstall download or build
    timeout -k 5 300 npm install --prefix "$NPMDIR" "node-llama-cpp@$NLC" \
        "@node-llama-cpp/linux-x64@$NLC" --omit=optional --ignore-scripts --no-audit --no-fund \
        --silent >"$T/npm.log" 2>&1
fi
if [ ! -f "$BINS/libggml-base.so" ] || [ ! -d "$NPMDIR/node_modules/node-llama-cpp" ]; then
    echo "SKIP: npm could not install node-llama-cpp@$NLC into $NPMDIR (offline?): $(tail -n 2 "$T/npm.log" 2>/dev/null | tr '\n' ' ')"
    exit 0
fi

[ -f "$BINM" ] || echo "SKIP: $BINM not found (set TWIN_DATA): stories260K's greedy tokens against llama.cpp not checked (the dummy model's checks run)"
for t in f32 f16 bf16 q8_0 q4_0; do
    [ -f "$BINM" ] || break
    begin "llama.cpp loads stories260K as $t and its greedy tokens are ours"
    run q_$t "$BIN" quantize "$BINM" "$T/s_$t.gguf" --type $t
    want_rc 0
    run lc_$t node tests/gguf_llamacpp.mjs "$NPMDIR" "$T/s_$t.gguf" 48
    want_rc 0
    theirs=$(sed -n 's/^tokens: //p' "$T/lc_$t.out")
    run ours_$t "$BIN" generate --model "$T/s_$t.gguf" -n 48 --ids
    want_rc 0
    ours=$(sed 's/ *$//' "$T/ours_$t.out")
    [ -n "$theirs" ] || bad " llama.cpp gave no tokens"
    [ "$theirs" = "$ours" ] || bad " llama.cpp: '$theirs'; ours: '$ours'"
    grep -q "^bos: 1$" "$T/lc_$t.out" || bad " llama.cpp's BOS is not 1"
    end
done

begin "a dummy model with the placeholder tokenizer loads in llama.cpp and in our generate (ids)"
run qd "$BIN" quantize dummy:stories260k "$T/d.gguf" --type q8_0 --seed 3
want_rc 0
want_out "tokenizer: a placeholder (ids only: the model has none)"
run lcd node tests/gguf_llamacpp.mjs "$NPMDIR" "$T/d.gguf" 8
want_rc 0
want_out "tokens: "
run oursd "$BIN" generate --model "$T/d.gguf" -n 8
want_rc 0
grep -qE '^[0-9 ]*$' "$T/oursd.out" || bad " generate printed text, not ids"
run oursdp "$BIN" generate --model "$T/d.gguf" -n 8 --prompt "Once"
want_rc 1
want_err "has no tokenizer: a --prompt needs text pieces"
end

begin "our Q8_0 and Q4_0 tensors are the bytes ggml's quantiser makes"
run cc_cmp cc -O1 -std=c11 -D_GNU_SOURCE -I. tests/ggml_quant_cmp.c "$BUILDDIR/libtwinserve.a" \
    -ldl -lm -o "$T/qcmp"
want_rc 0
pairs="d32 d;d32 d4"
if [ -f "$BINM" ]; then
    "$BIN" quantize "$BINM" "$T/s32.gguf" --type f32 >/dev/null 2>&1
    pairs="s32 s_q8_0;s32 s_q4_0;$pairs"
fi
"$BIN" quantize dummy:stories260k "$T/d32.gguf" --type f32 --seed 3 >/dev/null 2>&1
"$BIN" quantize dummy:stories260k "$T/d4.gguf" --type q4_0 --seed 3 >/dev/null 2>&1
IFS=';' read -ra pairlist <<<"$pairs"
for pair in "${pairlist[@]}"; do
    set -- $pair
    run cmp_$2 env LD_LIBRARY_PATH="$BINS" "$T/qcmp" "$BINS/libggml-base.so" "$T/$1.gguf" "$T/$2.gguf"
    want_rc 0
    want_out_re "^compared [1-9][0-9]* tensors \([0-9]+ bytes\): 0 differ$"
done
end
e2e_finish e2e_llamacpp

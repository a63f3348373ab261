#!/usr/bin/env bash
# e2e_quantize.sh: `twinserve quantize` end to end. A dummy model written in every type
# loads and replays a trace on the engine; stories260K (.bin with tok512.bin, and .gguf) written as F32 tells
# exactly the .bin's greedy story, and as Q8_0 and Q4_0 a story that starts like it; bad
# input (no type, an unknown type, a missing model, an unwritable output, OUT = IN) gives a
# message naming it and a non-zero exit, and leaves no output file behind.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_quantize

BINM=$DATA/models/stories260K.bin
GGUF=$DATA/models/stories260K.gguf

printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n' >"$T/small.csv"
for t in f32 f16 bf16 q8_0 q4_0; do
    begin "quantize: a dummy model as $t loads and runs on the engine"
    run q_dummy_$t "$BIN" quantize dummy:stories260k "$T/d_$t.gguf" --type $t --seed 3
    want_rc 0
    want_out "tokenizer: none"
    run eng_dummy_$t "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
        --model "$T/d_$t.gguf" --db "$T/d_$t.db" -q
    want_rc 0
    want_sql "$T/d_$t.db" "select count(*) from requests where status='finished'" 3
    end
done

if [ -f "$BINM" ] && [ -f "$GGUF" ]; then
    run gen_ref "$BIN" generate --model "$BINM" -n 100
    for src in "$BINM" "$GGUF"; do
        begin "quantize: $(basename "$src") as F32 tells the .bin's story exactly"
        run q_f32 "$BIN" quantize "$src" "$T/s_f32.gguf" --type f32
        want_rc 0
        want_out "matrices as F32"
        run gen_f32 "$BIN" generate --model "$T/s_f32.gguf" -n 100
        want_rc 0
        cmp -s "$T/gen_ref.out" "$T/gen_f32.out" || bad " the story differs from the .bin's"
        end
    done
    for t in q8_0 q4_0; do
        begin "quantize: stories260K as $t (tokenizer carried over, ffn_down F16)"
        run q_$t "$BIN" quantize "$BINM" "$T/s_$t.gguf" --type $t
        want_rc 0
        want_out "5 of them F16" "tok512.bin"
        run gen_$t "$BIN" generate --model "$T/s_$t.gguf" -n 40
        want_rc 0
        want_out "Once upon a time, there was a little girl named Lily."
        end
    done
else
    echo "SKIP: $BINM not found: real-model checks skipped"
fi

begin "quantize: bad input is refused with a message"
run no_type "$BIN" quantize dummy:stories260k "$T/x.gguf"
want_rc 2
want_err "--type is required"
run bad_type "$BIN" quantize dummy:stories260k "$T/x.gguf" --type q4_k
want_rc 2
want_err "unknown --type 'q4_k'"
run one_arg "$BIN" quantize dummy:stories260k --type q8_0
want_rc 2
want_err "expected IN and OUT"
run missing "$BIN" quantize "$T/none.bin" "$T/x.gguf" --type q8_0
want_rc 1
want_err "$T/none.bin"
run unwritable "$BIN" quantize dummy:stories260k "$T/no/dir/x.gguf" --type q8_0
want_rc 1
want_err "$T/no/dir/x.gguf: cannot create"
run same "$BIN" quantize "$T/d_f32.gguf" "$T/d_f32.gguf" --type q8_0
want_rc 2
want_err "OUT is IN"
[ -e "$T/x.gguf" ] && bad " a failed run left $T/x.gguf behind"
end

e2e_finish e2e_quantize

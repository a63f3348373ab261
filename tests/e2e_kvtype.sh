#!/usr/bin/env bash
# e2e_kvtype.sh: the CPU's KV cache in IEEE half (--kv-type f16) end to end. Every command
# that builds a backend takes f32 or f16 and refuses anything else by name, and the GPU
# refuses the option (it keeps K and V in its weight type); a block takes half the bytes,
# so the same --kv-mem holds at least twice the blocks, and bench counts half the KV bytes
# a step reads; the run records kv_type and says "f16 KV" in its hardware, and validate's
# engine repeats keep it (and --weights), profile writes it and calibrate's fitted_for
# names it; stories260K (the real .bin) tells its story with an f16 cache; and greedy
# outputs stay identical across policies and batch compositions (continuous, static,
# chunked prefill).
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_kvtype

BINM=$DATA/models/stories260K.bin
printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n0.002,30,12\n0.003,3,24\n' >"$T/mix.csv"

begin "--kv-type: f32 or f16, else a message naming it; the GPU refuses it"
run eng_bad "$BIN" engine --trace "$T/mix.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/bad.db" --kv-type q8_0
want_rc 2
want_err "bad value 'q8_0' for --kv-type"
run gen_bad "$BIN" generate --model dummy:stories260k -n 4 --kv-type half
want_rc 2
want_err "bad value 'half' for --kv-type"
run bench_bad "$BIN" bench --model dummy:stories260k --kv-type F16
want_rc 2
want_err "--kv-type: bad value 'F16'"
run prof_bad "$BIN" profile --model dummy:stories260k --out "$T/p.csv" --kv-type bf16
want_rc 2
want_err "--kv-type"
run eng_cuda "$BIN" engine --trace "$T/mix.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/cuda.db" --backend cuda --kv-type f16
want_rc 2
want_err "--kv-type is a CPU backend option"
end

begin "--kv-type f16: twice the blocks in the same memory, half the KV bytes read, recorded"
for k in f32 f16; do
    run eng_mem_$k "$BIN" engine --trace "$T/mix.csv" --policy "$POL/continuous.lua" \
        --model dummy:stories260k --db "$T/mem.db" --name mem_$k --kv-mem 0.002 --kv-type $k -q
    want_rc 0
    run bench_$k "$BIN" bench --model dummy:stories260k --batch 4 --ctx 64 --steps 2 \
        --kv-type $k --json
    want_rc 0
    want_out "\"kv_type\": \"$k\""
done
n32=$(sql "$T/mem.db" "select json_extract(config, '\$.num_blocks') from runs where name = 'mem_f32'")
n16=$(sql "$T/mem.db" "select json_extract(config, '\$.num_blocks') from runs where name = 'mem_f16'")
[ -n "$n32" ] && [ -n "$n16" ] && [ "$n16" -ge $((2 * n32)) ] && [ "$n16" -le $((2 * n32 + 1)) ] ||
    bad " KV blocks in 2 MB: f32 $n32, f16 $n16 (expected twice)"
want_sql "$T/mem.db" "select hardware || '|' || json_extract(config, '\$.kv_type') from runs where name = 'mem_f16'" "cpu (f32 weights, f16 KV)|f16"
want_sql "$T/mem.db" "select hardware || '|' || json_extract(config, '\$.kv_type') from runs where name = 'mem_f32'" "cpu (f32 weights)|f32"
# validate's engine repeats run as the run did: the same KV type and products
run eng_w "$BIN" engine --trace "$T/mix.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/mem.db" --name w16 --kv-type f16 --weights f32 -q
want_rc 0
run val "$BIN" validate --db "$T/mem.db" --run w16 --hw a100-80g --repeat 1
want_rc 0
want_sql "$T/mem.db" "select json_extract(config, '\$.kv_type') || '|' || json_extract(config, '\$.weights') from runs where name = 'w16-rep1'" "f16|f32"
# profile and calibrate say which KV type measured the costs
run prof16 "$BIN" profile --model dummy:stories260k --out "$T/p16.csv" --grid quick --no-host \
    --kv-type f16 -q
want_rc 0
grep -qx "# kv_type = f16" "$T/p16.csv" || bad " the profile lacks its kv_type line"
run cal16 "$BIN" calibrate --profile "$T/p16.csv" --out "$T/c16.cost"
want_rc 0
grep -q "^fitted_for = dummy:stories260k on cpu (f32 weights, f16 KV)" "$T/c16.cost" ||
    bad " the cost file's fitted_for does not name the f16 KV cache"
# read bytes per step: the weights plus the KV cache attended over (4 sequences near 64
# positions); the f16 run reads the same weights and half the KV bytes
python3 - "$T/bench_f32.out" "$T/bench_f16.out" <<'PY' || bad " bench's KV bytes do not halve"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = a["results"][0]["read_bytes_per_step"], b["results"][0]["read_bytes_per_step"]
kv = ra - a["weight_bytes"]
assert a["weight_bytes"] == b["weight_bytes"] and kv > 0, (ra, rb)
assert abs((rb - b["weight_bytes"]) - kv / 2) <= 1, (ra, rb, kv)
PY
end

if [ -f "$BINM" ]; then
    begin "stories260K with an f16 KV cache: the story, and outputs identical across policies"
    # the .bin's 100-token greedy story, token for token (K and V rounded to halves move
    # its logits by about 1e-3 relative: no argmax changes here)
    run gen32 "$BIN" generate --model "$BINM" -n 100
    run gen16 "$BIN" generate --model "$BINM" -n 100 --kv-type f16
    want_rc 0
    want_out "Once upon a time, there was a little girl named Lily."
    cmp -s "$T/gen32.out" "$T/gen16.out" || bad " the f16-KV story differs from the f32 one"
    for pol in continuous static chunked_prefill; do
        set=()
        [ $pol = chunked_prefill ] && set=(--set chunk=16)
        run eng16_$pol "$BIN" engine --trace "$T/mix.csv" --policy "$POL/$pol.lua" "${set[@]}" \
            --model "$BINM" --kv-type f16 --db "$T/s16.db" --name $pol --save-tokens --threads 2 -q
        want_rc 0
    done
    got=$(sql "$T/s16.db" "select count(distinct run_id) || '|' || count(*) from tokens")
    [ "$got" = "3|240" ] || bad " tokens recorded: '$got' (runs|tokens), expected 3|240"
    toks() {
        sql "$T/s16.db" "select group_concat(x, ' ') from (select req_id || ':' || idx || ':' || token_id as x from tokens join runs on runs.id = tokens.run_id where runs.name = '$1' order by req_id, idx)"
    }
    a=$(toks continuous)
    for r in static chunked_prefill; do
        [ -n "$a" ] && [ "$a" = "$(toks $r)" ] || bad " $r's tokens differ from continuous's"
    done
    end
else
    echo "SKIP: $BINM not found: real-model checks skipped"
fi

e2e_finish e2e_kvtype

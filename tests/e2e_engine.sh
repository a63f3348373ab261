#!/usr/bin/env bash
# e2e_engine.sh: end-to-end tests of `twinserve generate` and `twinserve engine` on the real
# stories260K model (llama2.c .bin and GGUF) and on dummy weights.
#
# Good runs: the greedy story, identical from both file formats; an engine replay recorded
# like a simulator run (report reads it). Bad input: missing, damaged and truncated model
# files, a prompt longer than the context, an unknown backend, bad options: a clear message
# naming the file or request, a non-zero exit (2 and no run recorded when nothing could
# run), never a crash.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_engine

BINM=$DATA/models/stories260K.bin
GGUF=$DATA/models/stories260K.gguf
have_model=1
[ -f "$BINM" ] && [ -f "$GGUF" ] || { have_model=0; echo "SKIP: $BINM not found: real-model checks skipped"; }

printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n0.004,30,12\n0.005,700,4\n' >"$T/small.csv"

if [ $have_model -eq 1 ]; then
    begin "generate: the greedy story from the llama2.c checkpoint"
    run gen_bin "$BIN" generate --model "$BINM" -n 100
    want_rc 0
    want_out "Once upon a time, there was a little girl named Lily."
    want_err "prompt tokens" "tok/s"
    end

    begin "generate: the GGUF file tells the same story"
    run gen_gguf "$BIN" generate --model "$GGUF" -n 100
    want_rc 0
    cmp -s "$T/gen_bin.out" "$T/gen_gguf.out" || bad " the .gguf output differs from the .bin output"
    end

    begin "generate: a prompt is continued"
    run gen_prompt "$BIN" generate --model "$BINM" --prompt "Tom had a dog" -n 30 --temperature 0.8 --top-p 0.9 --seed 3
    want_rc 0
    want_out_re "^Tom had a dog"
    end

    begin "generate: the text ends with its newline before the statistics (one pipe for both)"
    run gen_pipe bash -c '"$0" generate --model "$1" --prompt "Once upon" -n 30 2>&1' "$BIN" "$BINM"
    want_rc 0
    want_out_re '^\[generate\] 3 prompt tokens, 30 generated'
    end

    begin "generate: a prompt longer than the context is refused"
    long=$(printf 'the dog ran %.0s' $(seq 1 400))
    run gen_long "$BIN" generate --model "$BINM" --prompt "$long"
    want_rc 1
    want_err "context"
    end

    begin "generate: truncated and damaged model files name the file"
    head -c 3000 "$BINM" >"$T/trunc.bin"
    run gen_trunc "$BIN" generate --model "$T/trunc.bin"
    want_rc 1
    want_err "$T/trunc.bin"
    head -c 50000 "$GGUF" >"$T/trunc.gguf"
    run gen_trunc_gguf "$BIN" generate --model "$T/trunc.gguf"
    want_rc 1
    want_err "$T/trunc.gguf"
    end

    begin "engine: a replay on stories260K is recorded like a simulator run"
    run eng "$BIN" engine --trace "$T/small.csv" --policy "$POL/chunked_prefill.lua" --set chunk=16 \
        --model "$BINM" --db "$T/e.db" --name eng --save-tokens --threads 2
    want_rc 0
    want_out "finished" "scheduler"
    want_sql "$T/e.db" "select kind || '|' || status from runs" "engine|done"
    want_sql "$T/e.db" "select count(*) from requests where status='finished'" 4
    want_sql "$T/e.db" "select status || '|' || (reason like '%context%') from requests where req_id=4" "rejected|1"
    want_sql "$T/e.db" "select count(*) from tokens" 56
    want_sql "$T/e.db" "select count(*) from tokens where token_id < 0 or token_id >= 512" 0
    want_sql "$T/e.db" "select count(*) = sum(dur_s > 0) from steps" 1
    run eng_runs "$BIN" runs "$T/e.db"
    want_rc 0
    want_out "eng"
    end

    begin "engine: report reads an engine run"
    run eng_report "$BIN" report "$T/e.db" --run eng
    want_rc 0
    want_out "TTFT"
    end

    begin "engine: --max-prompt and --max-output clip the trace to the model"
    run eng_clip "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
        --model "$GGUF" --db "$T/c.db" --max-prompt 32 --max-output 4 -q
    want_rc 0
    want_sql "$T/c.db" "select count(*) from requests where status='finished'" 5
    want_sql "$T/c.db" "select max(prompt_tokens) || '|' || max(generated_tokens) from requests" "32|4"
    end
fi

begin "engine --prefix-caching: equal prefixes are equal tokens; cached blocks skip their compute"
# 12 requests 50 ms apart (each prefill long done before the next arrives), three groups
# with a 48-token (3-block) system prompt: the 9 that follow their group's first hit 48
# tokens each. Greedy outputs must not change with the cache; the simulator on the same
# trace, policy and KV size takes the same hits.
{
    echo "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens"
    for i in $(seq 0 11); do echo "0.$(printf %03d $((i * 50))),$((60 + i * 3)),$((4 + i % 5)),$((i % 3)),48"; done
} >"$T/sp.csv"
for pc in off on; do
    f=""; [ $pc = on ] && f=--prefix-caching
    run eng_pc_$pc "$BIN" engine --trace "$T/sp.csv" --policy "$POL/continuous.lua" \
        --model dummy:stories260k --db "$T/pc_$pc.db" --save-tokens --kv-blocks 64 --threads 1 -q $f
    want_rc 0
done
toks="select group_concat(req_id || ':' || idx || ':' || token_id, ' ') from (select * from tokens order by req_id, idx)"
[ -n "$(sql "$T/pc_on.db" "$toks")" ] && [ "$(sql "$T/pc_on.db" "$toks")" = "$(sql "$T/pc_off.db" "$toks")" ] ||
    bad " greedy outputs differ with --prefix-caching"
want_sql "$T/pc_off.db" "select sum(cached_tokens) from requests" 0
want_sql "$T/pc_on.db" "select sum(cached_tokens) from requests" 432
[ "$(sql "$T/pc_on.db" "select sum(prefill_tokens) from steps")" = "$(( $(sql "$T/pc_off.db" "select sum(prefill_tokens) from steps") - 432 ))" ] ||
    bad " the engine's prefill tokens did not drop by the cached tokens"
want_sql "$T/pc_on.db" "select json_extract(config, '\$.prefix_caching') from runs" 1
run rep_pc "$BIN" report "$T/pc_on.db"
want_rc 0
want_out "caching on: 432 of"
run sim_pc "$BIN" sim --trace "$T/sp.csv" --policy "$POL/continuous.lua" --model stories260k \
    --kv-blocks 64 --prefix-caching --db "$T/pc_sim.db" -q
want_rc 0
want_sql "$T/pc_sim.db" "select sum(cached_tokens) from requests" 432
# validate replays the engine run with the cache it ran with
run val_pc "$BIN" validate --db "$T/pc_on.db" --run 1 --hw a100-80g
want_rc 0
want_sql "$T/pc_on.db" "select json_extract(config, '\$.prefix_caching') || ' ' || (select sum(cached_tokens) from requests q where q.run_id = runs.id) from runs where kind = 'sim'" "1 432"
end

begin "engine --prefix-caching on a trace without prefixes says so"
run eng_pc_none "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/pc_none.db" --prefix-caching -q
want_rc 0
want_err "names no shared prefixes"
end

begin "engine: dummy weights in a preset's shape"
run eng_dummy "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/d.db" -q
want_rc 0
want_sql "$T/d.db" "select model || '|' || status from runs" "dummy:stories260k|done"
end

begin "engine: a damaged model file is refused with the file's name, before any run is recorded"
printf 'not a model at all' >"$T/bad.bin"
run eng_bad "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" --model "$T/bad.bin" --db "$T/b.db"
want_rc 2
want_err "$T/bad.bin" "nothing was run or recorded"
[ -e "$T/b.db" ] && bad " b.db was left behind (no run: the database it created is removed)"
end

begin "engine: an unknown backend and an unknown preset are refused"
run eng_backend "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --backend tpu --db "$T/x.db"
want_rc 2
want_err "tpu"
run eng_preset "$BIN" generate --model dummy:no-such-model
want_rc 1
want_err "no-such-model"
end

begin "engine: the policy watchdog stops a runaway policy; the run and its requests are recorded"
printf 'return { schedule = function(s) local x = 0 while true do x = x + 1 end end }\n' >"$T/spin.lua"
run eng_spin "$BIN" engine --trace "$T/small.csv" --policy "$T/spin.lua" \
    --model dummy:stories260k --db "$T/w.db" --policy-time-limit 0.2 -q
want_rc 3
want_err "spin.lua" "endless loop"
want_sql "$T/w.db" "select kind || '|' || status from runs" "engine|failed"
want_sql "$T/w.db" "select count(*) > 0 and count(*) = sum(status = 'aborted') from requests" 1
end

begin "engine/generate: usage errors"
run eng_nomodel "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua"
want_rc 2
want_err "--model"
run gen_badn "$BIN" generate --model dummy:stories260k -n lots
want_rc 2
want_err "lots"
run gen_missing "$BIN" generate --model "$T/none.bin"
want_rc 1
want_err "$T/none.bin: cannot open model file: No such file or directory"
run gen_dir "$BIN" generate --model "$T"
want_rc 1
want_err "$T: cannot open model file: Is a directory"
run bench_ctx "$BIN" bench --model dummy:stories260k --batch 1 --ctx 1
want_rc 2
want_err "--ctx"
end

begin "--threads 0 means all cores (documented), a negative count is refused"
run thr0 "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --db "$T/t0.db" --threads 0 -q
want_rc 0
want_sql "$T/t0.db" "select count(*) from requests where status='finished'" 4
run thr_help "$BIN" generate --help
want_out "default 0: all cores"
run thr_neg "$BIN" generate --model dummy:stories260k -n 4 --threads -1
want_rc 2
want_err "bad value '-1' for --threads"
end

e2e_finish e2e_engine

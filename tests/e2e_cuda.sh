#!/usr/bin/env bash
# e2e_cuda.sh: `--backend cuda` through the CLI (generate, engine, bench).
#
# Where there is no GPU (or a build without CUDA) every command must say so plainly, exit 1
# and, for the engine, record the run as failed: those checks run everywhere. With a GPU:
# the fp32 greedy story equals the CPU backend's byte for byte, bf16 tells a story too (the
# same one with decode-step graphs off, TWIN_CUDA_GRAPHS=0), an engine replay on the GPU is
# recorded like any run and `report` reads it, --batch-invariant makes bf16 outputs
# independent of the policy, `bench` measures the device's roofs, and a bad --dtype or
# --gpu-util is refused with a message.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_cuda

BINM=$DATA/models/stories260K.bin
printf 'arrival_s,prompt_tokens,output_tokens\n0,20,16\n0.001,45,8\n0.002,9,20\n0.004,30,12\n0.005,700,4\n' >"$T/small.csv"

run probe "$BIN" generate --backend cuda --model dummy:stories260k -n 1
if [ "$rc" -ne 0 ]; then
    echo "SKIP: no usable CUDA backend here ($(tr -d '\n' <"$T/probe.err" | cut -c1-160)): GPU checks skipped"

    begin "cuda unavailable: generate says why and exits 1"
    run gen_nogpu "$BIN" generate --backend cuda --model dummy:stories260k -n 4
    want_rc 1
    want_err_re "(no GPU|no CUDA backend)"
    end

    begin "cuda unavailable: the engine refuses with the reason and records no run"
    run eng_nogpu "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
        --model dummy:stories260k --backend cuda --db "$T/n.db" -q
    want_rc 2
    want_err_re "(no GPU|no CUDA backend)"
    [ -e "$T/n.db" ] && bad " n.db was left behind (no run: the database it created is removed)"
    end

    begin "cuda unavailable: bench says why"
    run bench_nogpu "$BIN" bench --backend cuda --model dummy:stories260k --batch 1 --steps 2
    want_rc 1
    want_err_re "(no GPU|no CUDA backend)"
    end
    e2e_finish e2e_cuda
    exit $?
fi

if [ -f "$BINM" ]; then
    begin "cuda: the fp32 greedy story equals the CPU backend's"
    run story_cpu "$BIN" generate --model "$BINM" -n 200
    want_rc 0
    run story_gpu "$BIN" generate --model "$BINM" -n 200 --backend cuda --dtype f32
    want_rc 0
    want_out "Once upon a time, there was a little girl named Lily."
    cmp -s "$T/story_cpu.out" "$T/story_gpu.out" || bad " the GPU's fp32 story differs from the CPU's"
    end

    begin "cuda: bf16 tells the story's opening"
    run story_bf16 "$BIN" generate --model "$BINM" -n 60 --backend cuda --dtype bf16
    want_rc 0
    want_out "Once upon a time"
    end

    begin "cuda: an engine replay on the GPU is recorded and reported"
    run eng "$BIN" engine --trace "$T/small.csv" --policy "$POL/chunked_prefill.lua" --set chunk=16 \
        --model "$BINM" --backend cuda --dtype f32 --db "$T/e.db" --name gpu --save-tokens -q
    want_rc 0
    want_sql "$T/e.db" "select kind || '|' || status from runs" "engine|done"
    want_sql "$T/e.db" "select count(*) from requests where status='finished'" 4
    want_sql "$T/e.db" "select count(*) from tokens where token_id < 0 or token_id >= 512" 0
    run eng_report "$BIN" report "$T/e.db" --run gpu
    want_rc 0
    want_out "TTFT"
    end
fi

begin "cuda: decode steps as graphs and as plain launches tell the same bf16 story"
run graphs_on "$BIN" generate --model dummy:stories260k -n 40 --backend cuda --dtype bf16
want_rc 0
TWIN_CUDA_GRAPHS=0 run graphs_off "$BIN" generate --model dummy:stories260k -n 40 \
    --backend cuda --dtype bf16
want_rc 0
cmp -s "$T/graphs_on.out" "$T/graphs_off.out" || bad " the story with graphs differs from the one without"
end

begin "cuda: --batch-invariant gives bf16 outputs that do not depend on the policy"
run inv_a "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" --batch-invariant \
    --model dummy:stories260k --backend cuda --dtype bf16 --db "$T/i.db" --name a --save-tokens -q
want_rc 0
run inv_b "$BIN" engine --trace "$T/small.csv" --policy "$POL/chunked_prefill.lua" --set chunk=8 \
    --batch-invariant --model dummy:stories260k --backend cuda --dtype bf16 --db "$T/i.db" \
    --name b --save-tokens -q
want_rc 0
want_sql "$T/i.db" "select count(*) > 0 from tokens" 1
want_sql "$T/i.db" "select count(*) from tokens x join runs rx on rx.id = x.run_id and rx.name = 'a'
    left join (select t.req_id, t.idx, t.token_id from tokens t join runs r on r.id = t.run_id
    and r.name = 'b') y on y.req_id = x.req_id and y.idx = x.idx
    where y.token_id is null or y.token_id != x.token_id" 0
end

begin "cuda: dummy weights generated on the device run the engine (gpu-util sizing)"
run eng_dummy "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:smollm2-135m --backend cuda --gpu-util 0.5 --max-prompt 64 --db "$T/d.db" -q
want_rc 0
want_sql "$T/d.db" "select status from runs" done
end

begin "cuda: bench measures the device's roofs"
run bench "$BIN" bench --backend cuda --model dummy:smollm2-135m --batch 1,8 --steps 8
want_rc 0
want_out "bf16"
end

begin "cuda: a bad --dtype and --gpu-util are refused"
run bad_dtype "$BIN" generate --backend cuda --dtype f8 --model dummy:stories260k -n 2
want_rc 1
want_err "f8"
run bad_util "$BIN" engine --trace "$T/small.csv" --policy "$POL/continuous.lua" \
    --model dummy:stories260k --backend cuda --gpu-util 1.5 --db "$T/u.db"
want_rc 2
want_err "gpu-util"
end

e2e_finish e2e_cuda

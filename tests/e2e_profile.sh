#!/usr/bin/env bash
# e2e_profile.sh: end-to-end tests of `twinserve profile` (quick grids on dummy:stories260k
# and the real stories260K checkpoint).
#
# Good runs: a profile file with the magic line, the model's shape, both roofs, rows of
# every kind with consistent field counts, and host rows when the policy is found (also
# from another directory, beside the binary), a visible "not measured" line when it is not.
# Bad input: usage errors name the option and exit 2; runtime failures (missing model,
# policy or output directory) exit 1 naming the file; a failed or interrupted profile
# leaves neither a file under --out nor a temporary file, and never clobbers an old one.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_profile

M=dummy:stories260k

begin "profile: a quick grid on dummy:stories260k with host rows"
run quick "$BIN" profile --model $M --out "$T/q.csv" --grid quick --reps 2 --threads 2 \
    --host-policy "$POL/continuous.lua"
want_rc 0
want_out "8 points timed" "wrote $T/q.csv" "roofs"
[ -f "$T/q.csv" ] || bad " no profile written"
[ "$(head -n 1 "$T/q.csv")" = "# twinserve profile 1" ] || bad " first line is not the magic"
for k in "# model = $M" "# backend = cpu" "# n_layers = 5" "# dtype_bytes = 4" "# threads = 2" \
         "# warmup = 1" "# reps = 2" "# mem_bw_gbs = " "# gemm_gflops_end = " "# host = measured: " \
         "# command = twinserve profile --model $M"; do
    grep -qF -- "$k" "$T/q.csv" || bad " header lacks '$k'"
done
cols=kind,dec_seqs,dec_ctx,chunk_tokens,chunk_ctx,chunk_sampled,tokens,seqs,sampled
cols=$cols,kv_tokens,attn_pairs,reps,median_s,mean_s,min_s,max_s,p10_s,p90_s
grep -qx "$cols" "$T/q.csv" || bad " no column line"
for k in decode prefill mixed host; do grep -q "^$k," "$T/q.csv" || bad " no $k row"; done
grep -qxF "decode,4,40,0,0,0,4,4,4,164,164,2" <(grep '^decode,4,40,' "$T/q.csv" | cut -d, -f1-12) ||
    bad " the decode of 4 at context 40 is not 4,4,4,164,164"
awk -F, '!/^#/ && NF != 18 { exit 1 }' "$T/q.csv" || bad " a row without 18 fields"
ls "$T" | grep -q '\.tmp-' && bad " a temporary file was left"
end

begin "profile and calibrate of a mixture of experts: the header keeps the experts, the fit prices them"
cat >"$T/moe.model" <<'EOF2'
name = tiny-moe
n_layers = 3
d_model = 128
n_heads = 4
n_kv_heads = 2
d_ff = 256
vocab = 512
max_seq = 512
tied_embeddings = 1
dtype_bytes = 4
n_experts = 4
experts_per_tok = 2
moe_d_ff = 128
n_dense_layers = 1
shared_d_ff = 128
EOF2
run moep "$BIN" profile --model "dummy:$T/moe.model" --out "$T/moe.csv" --grid quick --reps 2 -q
want_rc 0
for k in "# n_experts = 4" "# experts_per_tok = 2" "# moe_d_ff = 128" "# n_dense_layers = 1" \
         "# shared_d_ff = 128"; do
    grep -qxF -- "$k" "$T/moe.csv" || bad " header lacks '$k'"
done
grep -q "^# n_experts" "$T/q.csv" && bad " a dense profile names experts"
run moec "$BIN" calibrate --profile "$T/moe.csv" --out "$T/moe.cost"
want_rc 0
for k in "n_experts = 4" "n_dense_layers = 1" "shared_d_ff = 128"; do
    grep -qxF -- "$k" "$T/moe.cost" || bad " cost file lacks '$k'"
done
# the simulator runs on it (tests/test_fit.c checks that the fit prices the experts)
"$BIN" trace gen --n 20 --rate 5 --seed 1 --prompt uniform:8:100 --output uniform:4:20 \
    --out "$T/tr.csv" >/dev/null
run moes "$BIN" sim -q --trace "$T/tr.csv" --policy "$POL/continuous.lua" --cost "$T/moe.cost" \
    --kv-blocks 256 --db "$T/moe.db"
want_rc 0
end

begin "profile: the default policy is found beside the binary from another directory"
mkdir -p "$T/elsewhere"
run other bash -c "cd '$T/elsewhere' && '$BIN' profile --model $M --out p.csv --grid quick --reps 1 -q"
want_rc 0
grep -q '^host,' "$T/elsewhere/p.csv" || bad " no host rows"
end

begin "profile: without the policy the host phase is skipped, and the file says so"
mkdir -p "$T/lone/bin"
cp "$BIN" "$T/lone/bin/twinserve"
run lone bash -c "cd '$T/lone' && bin/twinserve profile --model $M --out p.csv --grid quick --reps 1"
want_rc 0
want_err "note: no host phase: policies/continuous.lua not found"
grep -q '^# host = not measured: policies/continuous.lua not found' "$T/lone/p.csv" ||
    bad " no '# host = not measured' line"
grep -q '^host,' "$T/lone/p.csv" && bad " host rows without a host phase"
want_out "host: not measured"
run nohost "$BIN" profile --model $M --out "$T/nh.csv" --grid quick --reps 1 --no-host -q
want_rc 0
grep -qx '# host = not measured: --no-host' "$T/nh.csv" || bad " --no-host not in the header"
end

if [ -f "$DATA/models/stories260K.bin" ]; then
    begin "profile: the real stories260K checkpoint's shape in the header"
    run real "$BIN" profile --model "$DATA/models/stories260K.bin" --out "$T/r.csv" --grid quick \
        --reps 1 --no-host -q
    want_rc 0
    for k in "# d_model = 64" "# d_ff = 172" "# n_heads = 8" "# n_kv_heads = 4" "# vocab = 512" \
             "# max_seq = 512" "# tied_embeddings = 1"; do
        grep -qxF -- "$k" "$T/r.csv" || bad " header lacks '$k'"
    done
    end
else
    echo "SKIP: $DATA/models/stories260K.bin not found: the real-model check skipped"
fi

begin "profile: usage errors name the option and exit 2"
run u_model "$BIN" profile --out "$T/x.csv"
want_rc 2
want_err "--model"
run u_out "$BIN" profile --model $M
want_rc 2
want_err "--out"
run u_reps "$BIN" profile --model $M --out "$T/x.csv" --reps 0
want_rc 2
want_err "--reps: bad value '0'"
run u_grid "$BIN" profile --model $M --out "$T/x.csv" --grid huge
want_rc 2
want_err "--grid: bad value 'huge' (default or quick)"
run u_backend "$BIN" profile --model $M --out "$T/x.csv" --backend tpu
want_rc 2
want_err "--backend: bad value 'tpu'"
run u_unknown "$BIN" profile --model $M --out "$T/x.csv" --fast
want_rc 2
want_err "unknown option '--fast'"
run u_missing "$BIN" profile --model $M --out
want_rc 2
want_err "--out: missing value"
run u_both "$BIN" profile --model $M --out "$T/x.csv" --no-host --host-policy "$POL/continuous.lua"
want_rc 2
want_err "--no-host"
[ -e "$T/x.csv" ] && bad " a usage error wrote the output"
end

begin "profile: runtime failures exit 1 naming the file, and leave nothing under --out"
echo "old profile" >"$T/old.csv"
run r_model "$BIN" profile --model "$T/missing.bin" --out "$T/old.csv" --grid quick --no-host
want_rc 1
want_err "$T/missing.bin"
[ "$(cat "$T/old.csv")" = "old profile" ] || bad " the old file was clobbered"
head -c 3000 "$DATA/models/stories260K.bin" >"$T/trunc.bin" 2>/dev/null || head -c 3000 /dev/urandom >"$T/trunc.bin"
run r_trunc "$BIN" profile --model "$T/trunc.bin" --out "$T/t.csv" --grid quick --no-host
want_rc 1
want_err "$T/trunc.bin"
[ -e "$T/t.csv" ] && bad " a failed profile wrote --out"
run r_dir "$BIN" profile --model $M --out "$T/no/such/dir/p.csv" --grid quick --no-host
want_rc 1
want_err "$T/no/such/dir/p.csv"
run r_policy "$BIN" profile --model $M --out "$T/p.csv" --grid quick --host-policy "$T/nope.lua"
want_rc 1
want_err "$T/nope.lua"
printf 'return { schedule = function(s) error("boom") end }\n' >"$T/bad.lua"
run r_badpol "$BIN" profile --model $M --out "$T/p.csv" --grid quick --host-policy "$T/bad.lua"
want_rc 1
want_err "host phase" "boom"
[ -e "$T/p.csv" ] && bad " a failed profile wrote --out"
ls "$T" | grep -q '\.tmp-' && bad " a temporary file was left"
end

begin "profile: an interrupted profile leaves no file and no temporary file"
mkdir -p "$T/int"
"$BIN" profile --model dummy:smollm2-135m --out "$T/int/p.csv" --no-host -q >"$T/int.out" 2>"$T/int.err" &
pid=$!
for _ in $(seq 1 50); do ls "$T/int" | grep -q '\.tmp-' && break; sleep 0.1; done
ls "$T/int" | grep -q '\.tmp-' || bad " no temporary file while it ran"
sleep 0.5
kill -TERM $pid   # a background job ignores SIGINT, which the command leaves ignored
wait $pid
rc=$?
[ $rc -eq 143 ] || bad " exit status $rc after SIGTERM, expected 143"
[ -z "$(ls -A "$T/int")" ] || bad " left behind: $(ls -A "$T/int" | tr '\n' ' ')"
last=int
end

e2e_finish e2e_profile

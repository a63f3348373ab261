#!/usr/bin/env bash
# e2e_draft: `engine --draft` and `generate --draft` from the command line (issue #15 item
# 1): the run's config names the proposer and the draft, calibrate prints the acceptance
# curve and the alpha it implies, validate replays a draft run, bad --draft values get a
# message and exit 2, nothing recorded. On dummy:stories260k weights (no data needed), with the real stories260K and
# its Q8_0 copy where the data is.
source "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_draft

printf 'arrival_s,prompt_tokens,output_tokens\n0,24,40\n0,12,33\n0.01,40,21\n0.02,8,30\n' >"$T/t.csv"
M=dummy:stories260k
SPEC=(--trace "$T/t.csv" --policy "$POL/speculative.lua" --set k=3 --threads 1 --save-tokens)

begin "engine --draft: the draft equal to the target keeps every draft"
run self "$BIN" engine "${SPEC[@]}" --model "$M" --draft "$M" --db "$T/a.db" --name self -q
want_rc 0
db_ok "$T/a.db"
want_sql "$T/a.db" "SELECT json_extract(config, '\$.proposer'), json_extract(config, '\$.draft_spec')
                    FROM runs WHERE name = 'self'" "draft|$M"
want_sql "$T/a.db" "SELECT json_extract(config, '\$.spec_curve.reached') =
                           json_extract(config, '\$.spec_curve.accepted'),
                           json_extract(config, '\$.spec_curve.reached[0]') > 0
                    FROM runs WHERE name = 'self'" "1|1"
end

begin "engine: greedy tokens the same with the draft, with n-grams and without"
run ngram "$BIN" engine "${SPEC[@]}" --model "$M" --draft ngram --db "$T/a.db" --name ngram -q
want_rc 0
run plain "$BIN" engine --trace "$T/t.csv" --policy "$POL/continuous.lua" --threads 1 \
    --save-tokens --model "$M" --db "$T/a.db" --name plain -q
want_rc 0
for r in self ngram; do
    want_sql "$T/a.db" "SELECT count(*) FROM (SELECT req_id, idx, token_id FROM tokens
                        WHERE run_id = (SELECT id FROM runs WHERE name = '$r') EXCEPT
                        SELECT req_id, idx, token_id FROM tokens
                        WHERE run_id = (SELECT id FROM runs WHERE name = 'plain'))" 0
done
want_sql "$T/a.db" "SELECT json_extract(config, '\$.proposer') FROM runs WHERE name = 'ngram'" ngram
end

begin "calibrate prints the acceptance per draft position and alpha"
run cal "$BIN" calibrate --db "$T/a.db" --run self --out "$T/c.cost"
want_rc 0
want_out "speculative acceptance per draft position (proposer draft: $M)" \
    "alpha (every position pooled) 1.000" "--set alpha=1.000"
want_out_re "tokens per verification: [0-9.]+ measured"
run cal_plain "$BIN" calibrate --db "$T/a.db" --run plain --out "$T/c2.cost"
want_rc 0
grep -q "speculative acceptance" "$T/cal_plain.out" && bad " a run without drafts printed a curve"
end

begin "validate replays a draft run with its draft's shape and measured alpha"
run cal0 "$BIN" calibrate --db "$T/a.db" --run plain --out "$T/plain.cost" -q
want_rc 0
run val "$BIN" validate --db "$T/a.db" --run self --cost "$T/plain.cost"
want_rc 0
want_out "replay: speculative with draft model $M: simulated with its shape and the measured alpha 1.000" \
    "per step: none (see the replay line above)"
# alpha 1: the simulator keeps every draft too, so it proposes and keeps what the engine did
spec_of() { echo "(SELECT sum(spec_proposed) || '/' || sum(spec_accepted) FROM requests WHERE run_id = $1)"; }
want_sql "$T/a.db" "SELECT $(spec_of "(SELECT id FROM runs WHERE name = 'self')") =
                           $(spec_of "(SELECT max(id) FROM runs)"),
                           (SELECT sum(spec_proposed) > 0 FROM requests
                            WHERE run_id = (SELECT max(id) FROM runs))" "1|1"
run val_ngram "$BIN" validate --db "$T/a.db" --run ngram --cost "$T/plain.cost"
want_rc 1 2
want_err "is speculative with the n-gram proposer"
end

begin "bad --draft values: a message, exit 2, nothing recorded"
run missing "$BIN" engine "${SPEC[@]}" --model "$M" --draft "$T/none.gguf" --db "$T/b.db" -q
want_rc 2
want_err "--draft" "$T/none.gguf"
run vocab "$BIN" engine "${SPEC[@]}" --model "$M" --draft dummy:smollm2-135m --db "$T/b.db" -q
want_rc 2
want_err "--draft dummy:smollm2-135m: its vocabulary has 49152 ids, the target model's 512"
run empty "$BIN" engine "${SPEC[@]}" --model "$M" --draft "" --db "$T/b.db" -q
want_rc 2
want_err "bad value '' for --draft"
[ ! -f "$T/b.db" ] || want_sql "$T/b.db" "SELECT count(*) FROM runs" 0
run gen_vocab "$BIN" generate --model "$M" -n 5 --draft dummy:smollm2-135m
want_rc 1
want_err "its vocabulary has 49152 ids"
run gen_k "$BIN" generate --model "$M" -n 5 --draft ngram --spec-k 0
want_rc 2
want_err "bad value '0' for --spec-k"
end

S=$DATA/models/stories260K.bin
if [ -f "$S" ]; then
    begin "generate --draft: a Q8_0 copy of stories260K as draft, the same story"
    run plain "$BIN" generate --model "$S" -n 80 --threads 1
    want_rc 0
    cp "$T/plain.out" "$T/story"
    run q8 "$BIN" quantize "$S" "$T/q8.gguf" --type q8_0
    want_rc 0
    run spec "$BIN" generate --model "$S" -n 80 --threads 1 --draft "$T/q8.gguf"
    want_rc 0
    cmp -s "$T/story" "$T/spec.out" || bad " the text differs with the draft"
    want_err_re "speculation \(.*q8.gguf\): [0-9]+ of [0-9]+ drafts accepted"
    end
else
    echo "SKIP: generate with a quantised draft ($S not found)"
fi

e2e_finish e2e_draft

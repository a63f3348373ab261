#!/usr/bin/env bash
# e2e_serve.sh: `twinserve serve` (issue #15 item 3) on stories260K over 127.0.0.1 only:
# curl, streaming and not (greedy text equal to `generate`'s, a stream equal to the whole
# answer, chat, stop strings, seeds), every error case (malformed JSON, unknown fields,
# wrong types, negative max_tokens, a prompt over the context, unknown routes, models and
# methods, a body too large), clients that disconnect (mid-stream, and while queued) with
# their KV freed as /metrics shows, a bounded load (bench/serve_load.mjs: 8 streaming
# clients for 3 s, every answer complete and well-formed), the official `openai` npm
# package (tests/serve_openai.cjs; installed into BUILD/npm-openai, skipped with a message
# when npm cannot install it), and the run as recorded: done after SIGTERM with nothing in
# flight, failed with its requests aborted when stopped mid-request; report reads it.
# Issue #28 item 5: one SSE event per token (events counted: tokens + final + [DONE]),
# token-id prompts, n = 2 (seed + i per choice, streamed by index), logprobs' layout
# (both formats, streamed and not; the raw distribution: a hot request reads as a greedy one),
# and draining at SIGTERM (a request in flight finishes while new connections are refused,
# the run done; the grace period ending and a second signal abort, the run failed; SIGINT
# drains too).
#
# Not timed: every wait polls a condition (the server's port line, /health, /metrics) under
# the $LIMIT bound. Servers listen on a free port (--port 0) and run with job control
# (set -m) so that signals reach them as they reach a foreground command.
. "$(dirname "$0")/lib_e2e.sh"
e2e_setup e2e_serve
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

MODEL=$DATA/models/stories260K.bin

begin serve_usage
run help "$BIN" serve --help
want_rc 0
want_out "/v1/chat/completions" "/metrics" "--port"
run nomodel "$BIN" serve
want_rc 2
want_err "--model is required"
run notok "$BIN" serve --model dummy:llama-3.2-1b
want_rc 2
want_err "has no tokenizer"
run badgrace "$BIN" serve --model dummy:llama-3.2-1b --grace -1
want_rc 2
want_err "bad value '-1' for --grace (seconds, 0 to 86400)"
end

if [ ! -f "$MODEL" ]; then
    echo "SKIP: $MODEL not found (set TWIN_DATA to the shared data folder): serve checks skipped"
    e2e_finish e2e_serve
    exit
fi

begin serve_bad_address
run badhost "$BIN" serve --model "$MODEL" --host nowhere --db "$T/bad.db"
want_rc 2
want_err "--host nowhere is not an IPv4 address"
[ -f "$T/bad.db" ] && bad " a database was created"
end

# serve NAME ARGS...: starts a server (stdout/err in $T/NAME.out/.err), waits for its port
# and for /health to answer 200; sets spid and URL. 1 when it never came up.
serve() {
    local name=$1 i port=''
    shift
    set -m
    "$BIN" serve --model "$MODEL" --port 0 "$@" >"$T/$name.out" 2>"$T/$name.err" &
    spid=$!
    set +m
    pids+=("$spid")
    for ((i = 0; i < LIMIT * 20; i++)); do
        port=$(grep -o 'http://127.0.0.1:[0-9]*' "$T/$name.err" 2>/dev/null | head -n1 | cut -d: -f3)
        if [ -n "$port" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ]; then
            URL=http://127.0.0.1:$port
            return 0
        fi
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.05
    done
    return 1
}
# api NAME METHOD PATH [BODY]: the body to $T/NAME.body, the status to $T/NAME.out.
api() {
    local name=$1 method=$2 path=$3
    run "$name" curl -sS -X "$method" -H 'Content-Type: application/json' ${4+--data-binary "$4"} \
        -o "$T/$name.body" -w '%{http_code}' "$URL$path"
}
status() { cat "$T/$last.out"; }
# jq-like: jget NAME EXPR evaluates EXPR on the JSON body j of NAME.
jget() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$T/$1.body" "$2" 2>&1; }
want_status() { [ "$(status)" = "$1" ] || bad " HTTP $(status), expected $1: $(head -c 300 "$T/$last.body")"; }
# metric NAME: its value in /metrics.
metric() { curl -s "$URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# wait_metric NAME VALUE: polls /metrics until NAME is VALUE (bounded).
wait_metric() {
    local i
    for ((i = 0; i < LIMIT * 20; i++)); do
        [ "$(metric "$1")" = "$2" ] && return 0
        sleep 0.05
    done
    bad " /metrics $1 is $(metric "$1"), expected $2"
}

begin serve_starts
serve main --db "$T/serve.db" || bad " the server did not come up: $(cat "$T/main.err")"
api models GET /v1/models
want_status 200
[ "$(jget models 'j["data"][0]["id"]')" = stories260K.bin ] || bad " models: $(cat "$T/models.body")"
want_sql "$T/serve.db" "SELECT kind, status, trace LIKE 'serve: live requests%' FROM runs" "serve|running|1"
[ "$(metric twinserve_kv_blocks_used)" = 0 ] || bad " KV in use before any request"
end

begin serve_completion_matches_generate
run gen "$BIN" generate --model "$MODEL" --prompt "Once upon a time" -n 30
expect=$(sed 's/^Once upon a time//' "$T/gen.out")
api comp POST /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":0}'
want_status 200
got=$(jget comp 'j["choices"][0]["text"]')
[ "$got" = "$expect" ] || bad " text '$got' differs from generate's '$expect'"
[ "$(jget comp 'j["choices"][0]["finish_reason"], j["object"]')" = "('length', 'text_completion')" ] || bad " $(cat "$T/comp.body")"
[ "$(jget comp 'j["usage"]')" = "{'prompt_tokens': 5, 'completion_tokens': 30, 'total_tokens': 35}" ] || bad " usage $(jget comp 'j["usage"]')"
end

begin serve_stream_equals_whole
run sse curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":30,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
    "$URL/v1/completions"
want_rc 0
python3 - "$T/sse.out" "$got" >"$T/sse.check" 2>&1 <<'EOF' || bad " $(cat "$T/sse.check")"
import json, sys
body, want = open(sys.argv[1]).read(), sys.argv[2]
events = [e for e in body.split("\n\n") if e and not e.startswith(":")]
assert events[-1] == "data: [DONE]", events[-1]
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
assert text == want, (text, want)
assert finishes == ["length"], finishes
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 30, chunks[-1]
EOF
end

begin serve_one_event_per_token
# every generated token is its own event as soon as its step ends: 40 tokens are 40
# events, then the final chunk and [DONE] (a stop string that holds text back changes no
# count: a held-back token's event has empty text)
run ev40 curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stream":true}' "$URL/v1/completions"
run evstop curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":40,"temperature":0,"stream":true,"stop":["zzzz"]}' "$URL/v1/completions"
run evchat curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"messages":[{"role":"user","content":"Tell me about a cat"}],"max_tokens":12,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' "$URL/v1/chat/completions"
want_rc 0
python3 - "$T/ev40.out" "$T/evstop.out" "$T/evchat.out" "$got" >"$T/ev.check" 2>&1 <<'EOF2' || bad " $(cat "$T/ev.check")"
import json, sys
def events(path):
    body = open(path).read()
    return [e[6:] for e in body.split("\n\n") if e.startswith("data: ")]
for path in sys.argv[1:3]:
    ev = events(path)
    assert len(ev) == 40 + 2, (path, len(ev))
    assert ev[-1] == "[DONE]", ev[-1]
    chunks = [json.loads(e) for e in ev[:-1]]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:40]), path
    assert chunks[40]["choices"][0]["finish_reason"] == "length", chunks[40]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text.startswith(sys.argv[4]), (text, sys.argv[4])
ev = events(sys.argv[3])
# the role chunk, 12 tokens, the final chunk, the usage chunk, [DONE]
assert len(ev) == 1 + 12 + 1 + 1 + 1, len(ev)
chunks = [json.loads(e) for e in ev[:-1]]
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, chunks[0]
assert all("content" in c["choices"][0]["delta"] for c in chunks[1:13]), chunks[1:13]
assert chunks[13]["choices"][0]["finish_reason"] == "length" and chunks[14]["usage"]["completion_tokens"] == 12
print(len(ev))
EOF2
end

begin serve_token_id_prompt
# a prompt of token ids goes to the engine as given (no BOS added): [1] is BOS alone, the
# text "" encodes to it too, so both answer the same greedy story
api ids POST /v1/completions '{"prompt":[1],"max_tokens":20,"temperature":0}'
want_status 200
api idsempty POST /v1/completions '{"prompt":"","max_tokens":20,"temperature":0}'
want_status 200
[ "$(jget ids 'j["choices"][0]["text"]')" = "$(jget idsempty 'j["choices"][0]["text"]')" ] || bad " [1] answered $(jget ids 'j["choices"][0]["text"]'), '' $(jget idsempty 'j["choices"][0]["text"]')"
[ "$(jget ids 'j["choices"][0]["text"].startswith("Once upon a time"), j["usage"]["prompt_tokens"]')" = "(True, 1)" ] || bad " $(cat "$T/ids.body")"
api ids3 POST /v1/completions '{"prompt":[[1,400,300,259]],"max_tokens":4,"temperature":0}'
want_status 200
[ "$(jget ids3 'j["usage"]')" = "{'prompt_tokens': 4, 'completion_tokens': 4, 'total_tokens': 8}" ] || bad " $(cat "$T/ids3.body")"
end

begin serve_n_choices
# n = 2: two sequences through the scheduler, indices 0 and 1; a seeded request's choice i
# samples with seed + i, so choice 0 is the n = 1 answer of the same seed
api n1 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":20,"temperature":1,"seed":42}'
api n2 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":20,"temperature":1,"seed":42,"n":2}'
want_status 200
[ "$(jget n2 '[c["index"] for c in j["choices"]], j["usage"]["completion_tokens"], j["usage"]["prompt_tokens"]')" = "([0, 1], 40, 5)" ] || bad " $(cat "$T/n2.body")"
[ "$(jget n2 'j["choices"][0]["text"]')" = "$(jget n1 'j["choices"][0]["text"]')" ] || bad " choice 0 differs from the n=1 answer of seed 42"
[ "$(jget n2 'j["choices"][0]["text"] != j["choices"][1]["text"]')" = True ] || bad " the two choices are the same text"
run n2s curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20,"temperature":1,"seed":42,"n":2,"stream":true}' "$URL/v1/completions"
python3 - "$T/n2s.out" "$T/n2.body" >"$T/n2s.check" 2>&1 <<'EOF2' || bad " $(cat "$T/n2s.check")"
import json, sys
ev = [e[6:] for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ")]
whole = json.load(open(sys.argv[2]))
assert ev[-1] == "[DONE]" and len(ev) == 2 * 20 + 2 + 1, len(ev)
chunks = [json.loads(e) for e in ev[:-1]]
for i in (0, 1):
    mine = [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i]
    assert len(mine) == 21 and mine[-1]["finish_reason"] == "length", (i, len(mine))
    assert "".join(c["text"] for c in mine) == whole["choices"][i]["text"], i
EOF2
api nchat POST /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me about a cat"}],"max_tokens":8,"n":3}'
want_status 200
[ "$(jget nchat '[c["index"] for c in j["choices"]], j["usage"]["completion_tokens"]')" = "([0, 1, 2], 24)" ] || bad " $(cat "$T/nchat.body")"
end

begin serve_logprobs
api lp POST /v1/completions '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":3}'
want_status 200
api lpchat POST /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me about a cat"}],"max_tokens":6,"temperature":0.8,"seed":5,"logprobs":true,"top_logprobs":2}'
want_status 200
# the raw distribution: a hot sampled request reports the greedy one's figures at its first
# position (same prompt, same logits), whatever its temperature
api lphot POST /v1/completions '{"prompt":"Once upon a time","max_tokens":2,"temperature":1.7,"seed":9,"logprobs":3}'
want_status 200
run lps curl -sSN -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":12,"temperature":0,"logprobs":1,"stream":true}' "$URL/v1/completions"
python3 - "$T/lp.body" "$T/lpchat.body" "$T/lps.out" "$T/lphot.body" >"$T/lp.check" 2>&1 <<'EOF2' || bad " $(cat "$T/lp.check")"
import json, math, sys
j = json.load(open(sys.argv[1]))
c = j["choices"][0]
lp = c["logprobs"]
assert set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, lp.keys()
n = j["usage"]["completion_tokens"]
assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"]) == n == 12
assert "".join(lp["tokens"]) == c["text"], (lp["tokens"], c["text"])
off = 0
for i, t in enumerate(lp["tokens"]):
    assert lp["text_offset"][i] == off, (i, lp["text_offset"])
    off += len(t)
    top = lp["top_logprobs"][i]
    assert len(top) in (3, 4) and all(v <= 0 for v in top.values()), top
    assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-5, top
    # greedy: the sampled token is the most likely one
    assert abs(lp["token_logprobs"][i] - max(top.values())) < 1e-6, (i, lp["token_logprobs"][i], top)
ch = json.load(open(sys.argv[2]))
content = ch["choices"][0]["logprobs"]["content"]
assert len(content) == ch["usage"]["completion_tokens"], len(content)
for e in content:
    assert set(e) == {"token", "logprob", "bytes", "top_logprobs"}, e
    assert len(e["top_logprobs"]) == 2 and e["logprob"] <= 0, e
    assert bytes(e["bytes"]).decode("utf-8", "replace") == e["token"] or "\ufffd" in e["token"], e
    assert e["top_logprobs"][0]["logprob"] >= e["top_logprobs"][1]["logprob"], e
ev = [x[6:] for x in open(sys.argv[3]).read().split("\n\n") if x.startswith("data: ")]
chunks = [json.loads(x) for x in ev[:-1]]
assert len(chunks) == 13, len(chunks)
toks = [x["choices"][0]["logprobs"]["tokens"] for x in chunks[:12]]
assert all(len(t) == 1 for t in toks), toks
assert [t[0] for t in toks] == lp["tokens"], (toks, lp["tokens"])
assert chunks[12]["choices"][0]["logprobs"] is None
hot = json.load(open(sys.argv[4]))["choices"][0]["logprobs"]["top_logprobs"][0]
for t, v in lp["top_logprobs"][0].items():
    assert t in hot and abs(hot[t] - v) < 1e-6, (t, v, hot)
EOF2
end

begin serve_chat
api chat POST /v1/chat/completions '{"messages":[{"role":"system","content":"A story."},{"role":"user","content":"Tell me about a cat"}],"max_tokens":12,"temperature":0}'
want_status 200
[ "$(jget chat 'j["object"], j["choices"][0]["message"]["role"], len(j["choices"][0]["message"]["content"]) > 0, j["usage"]["completion_tokens"]')" = "('chat.completion', 'assistant', True, 12)" ] || bad " $(cat "$T/chat.body")"
# the template: "A story.\n\nUser: Tell me about a cat\nAssistant:" encodes to this many tokens
run tmpl "$BIN" generate --model "$MODEL" --prompt $'A story.\n\nUser: Tell me about a cat\nAssistant:' -n 1
n=$(sed -n 's/^\[generate\] \([0-9]*\) prompt tokens.*/\1/p' "$T/tmpl.err")
[ "$(jget chat 'j["usage"]["prompt_tokens"]')" = "$n" ] || bad " prompt tokens $(jget chat 'j["usage"]["prompt_tokens"]') vs the template's '$n'"
end

begin serve_stop_and_seed
api stop POST /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":0,"stop":["Lily","zzz"]}'
want_status 200
[ "$(jget stop 'j["choices"][0]["finish_reason"], "Lily" in j["choices"][0]["text"], j["choices"][0]["text"].endswith("named ")')" = "('stop', False, True)" ] || bad " $(cat "$T/stop.body")"
api s1 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":1,"seed":42}'
api s2 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":1,"seed":42}'
api s3 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":30,"temperature":1,"seed":43}'
want_status 200
[ "$(jget s1 'j["choices"][0]["text"]')" = "$(jget s2 'j["choices"][0]["text"]')" ] || bad " seed 42 twice gave different texts"
[ "$(jget s1 'j["choices"][0]["text"]')" != "$(jget s3 'j["choices"][0]["text"]')" ] || bad " seeds 42 and 43 gave the same text"
end

# err NAME STATUS PARAM TEXT METHOD PATH [BODY]: an OpenAI-style error.
err() {
    local name=$1 code=$2 param=$3 text=$4
    shift 4
    api "$name" "$@"
    want_status "$code"
    [ "$(jget "$name" 'j["error"]["param"]')" = "$param" ] || bad " $name: param $(jget "$name" 'j["error"]["param"]'), expected $param"
    grep -qF -- "$text" "$T/$name.body" || bad " $name: the message lacks '$text': $(cat "$T/$name.body")"
}
begin serve_errors
received=$(metric twinserve_requests_received_total)
err malformed 400 None "malformed JSON" POST /v1/completions '{"prompt": "x",'
err notobject 400 None "must be a JSON object" POST /v1/completions '[1]'
err unknown 400 temprature "unknown field 'temprature'" POST /v1/completions '{"prompt":"x","temprature":0}'
err wrongtype 400 max_tokens "must be an integer" POST /v1/completions '{"prompt":"x","max_tokens":"ten"}'
err negative 400 max_tokens "at least 1 (got -3)" POST /v1/completions '{"prompt":"x","max_tokens":-3}'
err temp 400 temperature "between 0 and 2" POST /v1/completions '{"prompt":"x","temperature":5}'
err noprompt 400 prompt "'prompt' must be a string" POST /v1/completions '{"max_tokens":3}'
err nmany 400 n "'n' must be between 1 and 16 (got 17)" POST /v1/completions '{"prompt":"x","n":17}'
err nzero 400 n "(got 0)" POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"n":0}'
err badid 400 prompt "prompt[2] is 512, not a token id of this model (its vocabulary is 0..511)" POST /v1/completions '{"prompt":[1,400,512]}'
err twoprompts 400 prompt "this server takes one per request" POST /v1/completions '{"prompt":[[1,2],[3]]}'
err lpmany 400 logprobs "between 0 and 20 (got 21)" POST /v1/completions '{"prompt":"x","logprobs":21}'
err toplp 400 top_logprobs "'top_logprobs' needs" POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}'
err stopmany 400 stop "at most 4 strings" POST /v1/completions '{"prompt":"x","stop":["a","b","c","d","e"]}'
err badrole 400 "messages[0]" "role 'robot'" POST /v1/chat/completions '{"messages":[{"role":"robot","content":"x"}]}'
err nomsgs 400 messages "non-empty array" POST /v1/chat/completions '{"messages":[]}'
long=$(python3 -c 'print(" ".join(["once upon a time there was a dog"] * 120))')
err overctx 400 prompt "maximum context length is 512 tokens" POST /v1/completions "{\"prompt\":\"$long\"}"
err overmax 400 max_tokens "max_tokens is 600" POST /v1/completions '{"prompt":"Once","max_tokens":600}'
err model 404 model "does not exist" POST /v1/completions '{"prompt":"x","model":"gpt-9"}'
err route 404 None "no route GET /v2/x" GET /v2/x
err method 405 None "takes POST" GET /v1/completions
python3 -c 'print("{\"prompt\":\"" + "a" * 1100000 + "\"}")' >"$T/big.json"
run big curl -sS -H 'Content-Type: application/json' --data-binary @"$T/big.json" -o "$T/big.body" -w '%{http_code}' "$URL/v1/completions"
want_status 413
# none of these reached the engine, and the server still answers
[ "$(metric twinserve_requests_received_total)" = "$received" ] || bad " received_total $(metric twinserve_requests_received_total), expected $received"
api after POST /v1/completions '{"prompt":"Once upon a time","max_tokens":5,"temperature":0}'
want_status 200
end

begin serve_disconnect_mid_stream
# 12 streaming clients keep the engine busy for hundreds of steps; one more goes away after
# its first text: it is aborted there (not run to its 450 tokens) and its KV freed
loads=()
for i in $(seq 12); do
    curl -sN -o /dev/null -H 'Content-Type: application/json' --data-binary \
        '{"prompt":"Once upon a time","max_tokens":450,"temperature":0.9,"stream":true}' "$URL/v1/completions" &
    loads+=($!)
done
run gone python3 tests/serve_disconnect.py "${URL##*:}" 450
want_rc 0
gone_id=$(sed 's/cmpl-//' "$T/gone.out")
wait_metric twinserve_requests_in_flight 0
wait_metric 'twinserve_requests_ended_total{status="aborted"}' 1
[ "$(metric twinserve_kv_blocks_used)" = 0 ] || bad " KV blocks still used: $(metric twinserve_kv_blocks_used)"
[ "$(metric twinserve_requests_running)" = 0 ] || bad " requests still running"
wait "${loads[@]}"
api alive POST /v1/completions '{"prompt":"Once upon a time","max_tokens":5}'
want_status 200
end

begin serve_load
run load node bench/serve_load.mjs --url "$URL" --concurrency 8 --duration 3 --max-tokens 48
want_rc 0
[ "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["malformed"], r["errors"], r["complete"] == r["requests"] > 8)' "$T/load.out")" = "0 0 True" ] || bad " load: $(cat "$T/load.out")"
wait_metric twinserve_requests_in_flight 0
[ "$(metric twinserve_kv_blocks_used)" = 0 ] || bad " KV blocks still used after the load"
end

begin serve_openai_npm
NPMDIR=$(dirname "$BIN")/npm-openai
if [ ! -d "$NPMDIR/node_modules/openai" ]; then
    mkdir -p "$NPMDIR"
    timeout -k 5 120 npm install --prefix "$NPMDIR" openai@4 --no-audit --no-fund --silent >"$T/npm.log" 2>&1
fi
if [ -d "$NPMDIR/node_modules/openai" ]; then
    run openai node tests/serve_openai.cjs "$NPMDIR" "$URL" stories260K.bin
    want_rc 0
    want_out "openai: 7 checks, 0 failed"
    end
else
    echo "SKIP: npm could not install the openai package into $NPMDIR (offline?): $(tail -n 2 "$T/npm.log" 2>/dev/null | tr '\n' ' ')"
fi

begin serve_stops_done
received=$(metric twinserve_requests_received_total)
kill -TERM "$spid"
run stopmain timeout -k 5 "$LIMIT" tail --pid="$spid" -f /dev/null
wait "$spid"; rc=$?
last=main
want_rc 0
want_out "requests"
want_sql "$T/serve.db" "SELECT status FROM runs" "done"
want_sql "$T/serve.db" "SELECT count(*) FROM requests" "$received"
want_sql "$T/serve.db" "SELECT status, reason FROM requests WHERE req_id = $gone_id" "aborted|client disconnected"
want_sql "$T/serve.db" "SELECT count(*) > 0 FROM requests WHERE status = 'finished' AND reason = 'stop: stop string'" "1"
want_sql "$T/serve.db" "SELECT count(*) FROM requests WHERE status NOT IN ('finished', 'aborted')" "0"
run report "$BIN" report "$T/serve.db"
want_rc 0
want_out "serve: live requests" "by their clients, who went away"
end

begin serve_validate
# the served requests as a plain trace (one row per request, in arrival order), which the
# run's config names: calibrate and validate replay the run from it
trace=$(sed -n 's/^twinserve serve: the served requests are in //p' "$T/main.err")
[ -f "$trace" ] || bad " no trace file named in the server's output"
[ "$(($(wc -l <"$trace") - 1))" = "$received" ] || bad " the trace has $(($(wc -l <"$trace") - 1)) rows, expected $received"
want_sql "$T/serve.db" "SELECT json_extract(config, '\$.trace.path') = '$trace', json_extract(config, '\$.trace.format') FROM runs" "1|plain"
run calib "$BIN" calibrate --db "$T/serve.db" --run 1 --out "$T/serve.cost"
want_rc 0
run validate "$BIN" validate --db "$T/serve.db" --cost "$T/serve.cost"
want_rc 0
want_out "MAPE" "output tok/s"
end

begin serve_prefix_caching
# the same prompt twice: the second takes the first's full blocks from the core's cache
# (all but one token's worth: the last block with the prompt's last token is computed),
# records them as cached_tokens, and answers the same greedy text
serve cached --db "$T/cached.db" --prefix-caching || bad " the server did not come up: $(cat "$T/cached.err")"
body='{"prompt":"Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends. One day she saw a big dog","max_tokens":20,"temperature":0}'
api c1 POST /v1/completions "$body"
api c2 POST /v1/completions "$body"
want_status 200
[ "$(jget c1 'j["choices"][0]["text"]')" = "$(jget c2 'j["choices"][0]["text"]')" ] || bad " the cached request answered differently"
prompt=$(jget c1 'j["usage"]["prompt_tokens"]')
[[ "$prompt" =~ ^[0-9]+$ ]] || { bad " no usage in $(cat "$T/c1.body")"; prompt=0; }
kill -INT "$spid" # SIGINT drains as SIGTERM does
wait "$spid"; rc=$?
last=cached
want_rc 0
want_err "SIGINT: draining"
want_sql "$T/cached.db" "SELECT group_concat(cached_tokens) FROM requests" "0,$(((prompt - 1) / 16 * 16))"
want_sql "$T/cached.db" "SELECT json_extract(config, '\$.prefix_caching') FROM runs" "1"
end

begin serve_disconnect_while_queued
# static batching waits for 2 requests (up to 60 s): a client that leaves while queued
# (streaming or not) is aborted from the queue; two more then form a batch and are answered
serve queued --db "$T/queued.db" --policy "$POL/static.lua" --set batch=2 --set timeout_s=60 \
    || bad " the server did not come up: $(cat "$T/queued.err")"
run leave curl -sSN --max-time 2 -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20,"stream":true}' "$URL/v1/completions"
[ "$rc" = 28 ] || bad " curl exit $rc, expected 28 (its own timeout)"
wait_metric 'twinserve_requests_ended_total{status="aborted"}' 1
wait_metric twinserve_requests_waiting 0
# the same without streaming: the waiting answer notices the closed socket
run leave2 curl -sS --max-time 2 -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20}' "$URL/v1/completions"
[ "$rc" = 28 ] || bad " curl exit $rc, expected 28 (its own timeout)"
wait_metric 'twinserve_requests_ended_total{status="aborted"}' 2
wait_metric twinserve_requests_waiting 0
api pair1 POST /v1/completions '{"prompt":"Once upon a time","max_tokens":8}' &
p1=$!
api pair2 POST /v1/completions '{"prompt":"Once","max_tokens":8}'
wait "$p1"
last=pair2
want_status 200
[ "$(jget pair1 'j["usage"]["completion_tokens"]')" = 8 ] || bad " pair1: $(cat "$T/pair1.body")"
[ "$(metric twinserve_kv_blocks_used)" = 0 ] || bad " KV blocks still used"
end

begin serve_grace_ends
# the queued server again, started with --grace 1: a request waits in the queue (static
# batching, 60 s) when SIGTERM comes; the grace period ends first: the request is aborted,
# its client gets an error event, the run is marked failed and the exit status is 143
kill -TERM "$spid"
wait "$spid"
serve grace --db "$T/grace.db" --policy "$POL/static.lua" --set batch=2 --set timeout_s=60 \
    --grace 1 || bad " the server did not come up: $(cat "$T/grace.err")"
run q1 curl -sSN --max-time "$LIMIT" -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20,"stream":true}' "$URL/v1/completions" &
qcurl=$!
wait_metric twinserve_requests_waiting 1
t0=$(date +%s.%N)
kill -TERM "$spid"
wait "$qcurl"
wait "$spid"; rc=$?
t1=$(date +%s.%N)
last=grace
[ "$rc" = 143 ] || bad " exit status $rc, expected 143 (SIGTERM with a request in flight)"
want_err "the grace period of 1 s ended with 1 requests in flight" "interrupted by SIGTERM"
grep -q '"error"' "$T/q1.out" || bad " the client got no error event: $(cat "$T/q1.out")"
want_sql "$T/grace.db" "SELECT status, error LIKE 'interrupted by SIGTERM%' FROM runs" "failed|1"
want_sql "$T/grace.db" "SELECT status, reason LIKE 'interrupted by SIGTERM%' FROM requests ORDER BY req_id DESC LIMIT 1" "aborted|1"
python3 -c "import sys; d = float(sys.argv[2]) - float(sys.argv[1]); sys.exit(not 0.9 < d < 10)" "$t0" "$t1" \
    || bad " stopped $(python3 -c "import sys; print(float(sys.argv[2]) - float(sys.argv[1]))" "$t0" "$t1") s after SIGTERM, expected the 1 s grace period"
end

begin serve_drains_on_sigterm
# a request in flight at SIGTERM finishes: static batching holds a lone request for 2 s,
# then runs it to its 100 tokens; meanwhile new connections are refused; every token's
# event reaches the client, the server exits 0 and the run is done
serve drain --db "$T/drain.db" --policy "$POL/static.lua" --set batch=2 --set timeout_s=2 \
    || bad " the server did not come up: $(cat "$T/drain.err")"
run d1 curl -sSN --max-time "$LIMIT" -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":100,"temperature":0,"stream":true}' "$URL/v1/completions" &
dcurl=$!
wait_metric twinserve_requests_waiting 1
t0=$(date +%s.%N)
kill -TERM "$spid"
for ((i = 0; i < LIMIT * 20; i++)); do
    grep -q "SIGTERM: draining" "$T/drain.err" && break
    sleep 0.05
done
run refused curl -sS -o /dev/null --max-time 5 -w '%{http_code}' "$URL/health"
[ "$rc" = 7 ] || bad " a new connection while draining: curl exit $rc, HTTP $(cat "$T/refused.out"), expected 7 (refused)"
wait "$dcurl"
wait "$spid"; rc=$?
t1=$(date +%s.%N)
last=drain
want_rc 0
want_err "SIGTERM: draining: new connections refused, 1 requests in flight" "drained: 1 requests in flight finished in"
python3 - "$T/d1.out" >"$T/d1.check" 2>&1 <<'EOF2' || bad " $(cat "$T/d1.check")"
import json, sys
ev = [e[6:] for e in open(sys.argv[1]).read().split("\n\n") if e.startswith("data: ")]
assert len(ev) == 100 + 2 and ev[-1] == "[DONE]", len(ev)
assert json.loads(ev[-2])["choices"][0]["finish_reason"] == "length", ev[-2]
EOF2
want_sql "$T/drain.db" "SELECT status FROM runs" "done"
want_sql "$T/drain.db" "SELECT status, generated_tokens FROM requests" "finished|100"
drain_s=$(sed -n 's/.*drained: 1 requests in flight finished in \([0-9.]*\) s/\1/p' "$T/drain.err")
python3 -c "import sys; sys.exit(not 1.0 < float(sys.argv[1]) < 10)" "${drain_s:-0}" \
    || bad " drained in '$drain_s' s, expected the static batch's 2 s wait"
echo "  drain: the request in flight finished ${drain_s} s after SIGTERM; exit after $(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$t0" "$t1") s"
end

begin serve_second_signal_stops_now
# draining with a request held for 60 s: a second SIGTERM stops at once, as the grace
# period's end would (run failed, request aborted, exit 143)
serve again --db "$T/again.db" --policy "$POL/static.lua" --set batch=2 --set timeout_s=60 \
    || bad " the server did not come up: $(cat "$T/again.err")"
run a1 curl -sSN --max-time "$LIMIT" -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20,"stream":true}' "$URL/v1/completions" &
acurl=$!
wait_metric twinserve_requests_waiting 1
kill -TERM "$spid"
for ((i = 0; i < LIMIT * 20; i++)); do
    grep -q "SIGTERM: draining" "$T/again.err" && break
    sleep 0.05
done
kill -TERM "$spid"
wait "$acurl"
wait "$spid"; rc=$?
last=again
[ "$rc" = 143 ] || bad " exit status $rc, expected 143"
want_err "SIGTERM again: stopping now, 1 requests in flight aborted"
grep -q '"error"' "$T/a1.out" || bad " the client got no error event: $(cat "$T/a1.out")"
want_sql "$T/again.db" "SELECT status, error LIKE 'interrupted by SIGTERM%' FROM runs" "failed|1"
end

e2e_finish e2e_serve

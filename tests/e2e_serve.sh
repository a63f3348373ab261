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
err nmany 400 n "'n' must be 1" POST /v1/completions '{"prompt":"x","n":2}'
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
kill -TERM "$spid"
wait "$spid"; rc=$?
last=cached
want_rc 0
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

begin serve_interrupted_mid_request
# the queued server again: a request waits in the queue when SIGTERM comes; the run is
# marked failed, the request aborted, and its client gets an error event
run q1 curl -sSN --max-time "$LIMIT" -H 'Content-Type: application/json' --data-binary \
    '{"prompt":"Once upon a time","max_tokens":20,"stream":true}' "$URL/v1/completions" &
qcurl=$!
wait_metric twinserve_requests_waiting 1
kill -TERM "$spid"
wait "$qcurl"
wait "$spid"; rc=$?
last=queued
[ "$rc" = 143 ] || bad " exit status $rc, expected 143 (SIGTERM with a request in flight)"
want_err "interrupted by SIGTERM"
grep -q '"error"' "$T/q1.out" || bad " the client got no error event: $(cat "$T/q1.out")"
want_sql "$T/queued.db" "SELECT status, error LIKE 'interrupted by SIGTERM%' FROM runs" "failed|1"
want_sql "$T/queued.db" "SELECT status, reason LIKE 'interrupted by SIGTERM%' FROM requests ORDER BY req_id DESC LIMIT 1" "aborted|1"
end

e2e_finish e2e_serve

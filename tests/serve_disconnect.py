# serve_disconnect.py: a streaming client that goes away mid-answer (tests/e2e_serve.sh):
# sends a streaming completion, reads until the first event with text, then closes the
# socket without reading on. Prints the request's id (from that event). usage:
# python3 tests/serve_disconnect.py PORT MAX_TOKENS
import http.client, json, sys

port, max_tokens = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
c.request("POST", "/v1/completions", body=json.dumps(
    {"prompt": "Once upon a time", "max_tokens": max_tokens, "temperature": 0, "stream": True}),
    headers={"Content-Type": "application/json"})
r = c.getresponse()
if r.status != 200:
    sys.exit(f"HTTP {r.status}")
while True:
    line = r.fp.readline()
    if not line:
        sys.exit("the stream ended before any text")
    if line.startswith(b"data: {"):
        ev = json.loads(line[6:])
        if ev["choices"] and ev["choices"][0]["text"]:
            print(ev["id"])
            break
c.sock.close()
r.close()

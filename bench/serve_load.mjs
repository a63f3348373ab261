// serve_load.mjs: a bounded load on `twinserve serve` (node 20, no packages): CONCURRENCY
// clients each send streaming completions back to back for DURATION seconds (a request
// started before the end runs to its end), and every answer is checked: HTTP 200, every
// event "data: JSON" or the final "data: [DONE]", one choice per chunk with text, exactly
// one finish_reason ("stop" or "length") on the last text chunk, a usage chunk whose
// completion_tokens is within max_tokens, nothing after [DONE].
//
// Prints one JSON line: {concurrency, duration_s, requests, complete, malformed, errors,
// output_tokens, tokens_per_s, requests_per_s, ttft_ms:{p50,p90,p99}, e2e_ms:{p50,p90,p99},
// first_problem}. TTFT is client-side: from sending the request to the first chunk with
// text. Exit status 1 when any answer was malformed or failed, 2 on bad arguments.
//
// usage: node bench/serve_load.mjs --url http://127.0.0.1:PORT --concurrency N
//            --duration S [--max-tokens M] [--prompt TEXT] [--model ID]

const args = Object.fromEntries(
    process.argv.slice(2).reduce((acc, a, i, all) => {
        if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
        return acc;
    }, []));
const url = args.url;
const conc = parseInt(args.concurrency ?? '4', 10);
const duration = parseFloat(args.duration ?? '5');
const maxTokens = parseInt(args['max-tokens'] ?? '64', 10);
const prompt = args.prompt ?? 'Once upon a time';
if (!url || !(conc >= 1) || !(duration > 0) || !(maxTokens >= 1)) {
    console.error('usage: node bench/serve_load.mjs --url URL --concurrency N --duration S ' +
                  '[--max-tokens M] [--prompt TEXT] [--model ID]');
    process.exit(2);
}

let requests = 0, complete = 0, malformed = 0, errors = 0, outTokens = 0, firstProblem = null;
const ttft = [], e2e = [];
const problem = (msg) => { if (!firstProblem) firstProblem = msg; };

// Checks one streamed answer; returns its completion tokens, or throws with the reason.
function check(body) {
    if (!body.endsWith('data: [DONE]\n\n')) throw new Error('the stream does not end with [DONE]');
    const events = body.split('\n\n').filter((e) => e.length > 0);
    let finish = null, usage = null, texts = 0;
    for (const ev of events) {
        if (ev.startsWith(':')) continue; // keep-alive comment
        if (!ev.startsWith('data: ')) throw new Error(`not an event: ${JSON.stringify(ev)}`);
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(`error event: ${j.error.message}`);
        if (j.object !== 'text_completion' || typeof j.id !== 'string')
            throw new Error(`bad chunk ${data}`);
        if (j.usage) { usage = j.usage; continue; }
        if (!Array.isArray(j.choices) || j.choices.length !== 1) throw new Error(`bad choices ${data}`);
        const c = j.choices[0];
        if (typeof c.text !== 'string') throw new Error(`chunk without text ${data}`);
        if (finish !== null) throw new Error('a chunk after the finish_reason');
        if (c.finish_reason !== null) finish = c.finish_reason;
        texts++;
    }
    if (finish !== 'stop' && finish !== 'length') throw new Error(`finish_reason ${finish}`);
    if (!usage || !(usage.completion_tokens >= 1) || usage.completion_tokens > maxTokens)
        throw new Error(`usage ${JSON.stringify(usage)}`);
    if (texts < 1) throw new Error('no text chunk');
    return usage.completion_tokens;
}

async function one() {
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0.8, stream: true,
                               stream_options: { include_usage: true },
                               ...(args.model ? { model: args.model } : {}) }),
    });
    if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
    const dec = new TextDecoder();
    let body = '', first = null;
    for await (const chunk of res.body) {
        body += dec.decode(chunk, { stream: true });
        if (first === null && body.includes('"text":"') && !body.includes('"text":""'))
            first = performance.now();
    }
    const t1 = performance.now();
    const n = check(body);
    ttft.push((first ?? t1) - t0);
    e2e.push(t1 - t0);
    return n;
}

const end = performance.now() + duration * 1000;
const t0 = performance.now();
async function client() {
    while (performance.now() < end) {
        requests++;
        try {
            const n = await one(); // not `outTokens += await`: that reads it before the wait
            outTokens += n;
            complete++;
        } catch (e) {
            if (e instanceof SyntaxError || /stream|chunk|finish|usage|event|choices/.test(e.message)) malformed++;
            else errors++;
            problem(e.message);
        }
    }
}
await Promise.all(Array.from({ length: conc }, client));
const wall = (performance.now() - t0) / 1000;
const pct = (v, p) => {
    if (v.length === 0) return null;
    const s = [...v].sort((a, b) => a - b);
    return +s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))].toFixed(2);
};
console.log(JSON.stringify({
    concurrency: conc, duration_s: +wall.toFixed(3), requests, complete, malformed, errors,
    output_tokens: outTokens, tokens_per_s: +(outTokens / wall).toFixed(1),
    requests_per_s: +(complete / wall).toFixed(2),
    ttft_ms: { p50: pct(ttft, 50), p90: pct(ttft, 90), p99: pct(ttft, 99) },
    e2e_ms: { p50: pct(e2e, 50), p90: pct(e2e, 90), p99: pct(e2e, 99) },
    first_problem: firstProblem,
}));
process.exit(malformed + errors > 0 || complete === 0 ? 1 : 0);

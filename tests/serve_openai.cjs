// serve_openai.cjs: drives `twinserve serve` with the official `openai` npm package
// (tests/e2e_serve.sh installs it into a git-ignored folder and runs this). Prints one line
// per check ("ok NAME" or "FAIL: NAME: why") and "openai: N checks, F failed"; exits 1 when
// any failed.
//
// usage: node tests/serve_openai.cjs NODE_MODULES_PARENT BASE_URL MODEL_ID
const [dir, base, model] = process.argv.slice(2);
const mod = require(require.resolve('openai', { paths: [dir] }));
const OpenAI = mod.default ?? mod.OpenAI ?? mod;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });

let n = 0, failed = 0;
async function check(name, fn) {
    n++;
    try {
        await fn();
        console.log(`ok ${name}`);
    } catch (e) {
        failed++;
        console.log(`FAIL: ${name}: ${e && e.message ? e.message : e}`);
    }
}
function expect(cond, what) { if (!cond) throw new Error(what); }

(async () => {
    let whole = null;
    await check('models.list', async () => {
        const ids = [];
        for await (const m of client.models.list()) ids.push(m.id);
        expect(ids.length === 1 && ids[0] === model, `ids ${JSON.stringify(ids)}`);
    });
    await check('completions.create', async () => {
        const r = await client.completions.create({ model, prompt: 'Once upon a time',
                                                    max_tokens: 20, temperature: 0 });
        whole = r.choices[0].text;
        expect(typeof whole === 'string' && whole.length > 0, 'empty text');
        expect(r.choices[0].finish_reason === 'length', `finish ${r.choices[0].finish_reason}`);
        expect(r.usage.completion_tokens === 20 && r.usage.prompt_tokens === 5,
               `usage ${JSON.stringify(r.usage)}`);
    });
    await check('completions stream = whole', async () => {
        const s = await client.completions.create({ model, prompt: 'Once upon a time',
                                                    max_tokens: 20, temperature: 0, stream: true });
        let text = '', finish = null;
        for await (const c of s) {
            text += c.choices[0].text;
            if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
        }
        expect(text === whole, `streamed ${JSON.stringify(text)} vs ${JSON.stringify(whole)}`);
        expect(finish === 'length', `finish ${finish}`);
    });
    await check('chat.completions.create', async () => {
        const r = await client.chat.completions.create({
            model, max_tokens: 16, temperature: 0, seed: 3,
            messages: [{ role: 'system', content: 'A story.' },
                       { role: 'user', content: 'Tell me about a cat' }] });
        const m = r.choices[0].message;
        expect(m.role === 'assistant' && m.content.length > 0, `message ${JSON.stringify(m)}`);
        expect(r.usage.completion_tokens === 16, `usage ${JSON.stringify(r.usage)}`);
    });
    await check('chat stream with usage', async () => {
        const s = await client.chat.completions.create({
            model, max_tokens: 12, temperature: 0.7, seed: 11, stream: true,
            stream_options: { include_usage: true },
            messages: [{ role: 'user', content: 'Tell me about a dog' }] });
        let text = '', role = null, usage = null;
        for await (const c of s) {
            if (c.usage) usage = c.usage;
            if (!c.choices.length) continue;
            if (c.choices[0].delta.role) role = c.choices[0].delta.role;
            text += c.choices[0].delta.content ?? '';
        }
        expect(role === 'assistant', `role ${role}`);
        expect(text.length > 0, 'no text');
        expect(usage && usage.completion_tokens === 12, `usage ${JSON.stringify(usage)}`);
    });
    await check('stop string', async () => {
        const r = await client.completions.create({ model, prompt: 'Once upon a time',
                                                    max_tokens: 60, temperature: 0,
                                                    stop: ['Lily'] });
        const c = r.choices[0];
        expect(c.finish_reason === 'stop' && !c.text.includes('Lily'),
               `finish ${c.finish_reason} text ${JSON.stringify(c.text)}`);
    });
    await check('400 BadRequestError', async () => {
        try {
            await client.completions.create({ model, prompt: 'x', max_tokens: -5 });
        } catch (e) {
            expect(e.status === 400, `status ${e.status}`);
            expect(/max_tokens/.test(e.message), `message ${e.message}`);
            return;
        }
        throw new Error('no error for max_tokens -5');
    });
    console.log(`openai: ${n} checks, ${failed} failed`);
    process.exit(failed ? 1 : 0);
})();

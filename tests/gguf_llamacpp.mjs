// gguf_llamacpp.mjs: loads a GGUF with the real llama.cpp (node-llama-cpp's prebuilt CPU
// binaries) and prints its greedy continuation of BOS as token ids, one line:
//     node tests/gguf_llamacpp.mjs NPMDIR MODEL.gguf N
// NPMDIR holds node_modules/node-llama-cpp (tests/e2e_quantize.sh installs it). Exit 0 with
// "tokens: ID ID ...", or 1 with llama.cpp's refusal on stderr.
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [dir, modelPath, nArg] = process.argv.slice(2);
const n = Number(nArg || 16);
if (!dir || !modelPath || !(n > 0)) {
    console.error("usage: node gguf_llamacpp.mjs NPMDIR MODEL.gguf N");
    process.exit(2);
}
const lib = await import(pathToFileURL(join(dir, "node_modules/node-llama-cpp/dist/index.js")).href);
try {
    const llama = await lib.getLlama({ gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
    const ctx = await model.createContext({ contextSize: Math.max(64, n + 8), threads: 2 });
    const seq = ctx.getSequence();
    const bos = model.tokens.bos;
    if (bos == null) throw new Error("the model has no BOS token");
    const out = [];
    for await (const t of seq.evaluate([bos], { temperature: 0 })) {
        out.push(t);
        if (out.length >= n) break;
    }
    console.log("bos: " + bos);
    console.log("tokens: " + out.join(" "));
    await ctx.dispose();
    await model.dispose();
    await llama.dispose();
} catch (e) {
    console.error("llama.cpp: " + (e && e.message ? e.message : String(e)));
    process.exit(1);
}

// @ts-check
// node generate.js MODEL_URL PROMPT TOKENS: generates greedily and prints
// {"text": ..., "build": ...} on one line.
import { SipLLM } from 'sipllm';

const [model, prompt, tokens] = process.argv.slice(2);
const llm = await SipLLM.load(model);
let text = '';
for await (const piece of llm.generate(prompt, { maxTokens: Number(tokens), temperature: 0 })) text += piece;
console.log(JSON.stringify({ text, build: llm.stats().build }));
await llm.unload();

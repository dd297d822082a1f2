#!/usr/bin/env node
// What a page pays under a memory budget, through the package (not a test: it
// prints, it asserts nothing). For each model and budget: the working memory
// the engine sets aside (activations, the KV cache), the weights it kept at
// their peak, and the WebAssembly heap (it only grows, so it is also the
// peak) after a 32-token prompt and 32 generated tokens.
//
//   node web/bench/heap-vs-budget.mjs [--threads N] [--ctx N]
//
// Models: the bundled stories260K, and a random-weight Qwen2.5-0.5B-shaped
// Q4_K_M file written by the native CLI (build/native/engine/sipllm, or
// $SIPLLM_CLI) with Qwen3's real vocabulary. Budgets: none, then the working
// memory plus a half and plus a quarter of the file. Served by
// scripts/range-server.mjs, uncapped, with no cache.
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { SipLLM } from '../dist/index.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
};
const threads = Number(option('--threads', '2'));
const contextLength = Number(option('--ctx', '2048'));
const cli = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');
const modelsDir = process.env.SIPLLM_MODELS_DIR ?? join(repoRoot, 'build/native/tests/fixtures/models');

const work = mkdtempSync(join(tmpdir(), 'sipllm-heap-'));
copyFileSync(join(modelsDir, 'stories260K.gguf'), join(work, 'stories260K.gguf'));
execFileSync(cli, ['gen', '--shape', 'qwen2.5-0.5b', '--type', 'Q4_K_M', '--vocab',
                   join(repoRoot, 'build/native/tests/fixtures/vocab/ggml-vocab-qwen3.gguf'),
                   '-o', join(work, 'qwen2.5-0.5b-Q4_K_M.gguf')], { stdio: 'ignore' });

const child = spawn(process.execPath, [join(repoRoot, 'scripts/range-server.mjs'), '--root', work, '--port', '0',
                                       '--exit-on-stdin-close'], { stdio: ['pipe', 'pipe', 'inherit'] });
const serverUrl = JSON.parse(await new Promise((done) => createInterface({ input: child.stdout }).once('line', done))).url;

const mb = (bytes) => (bytes / 1e6).toFixed(1).padStart(7);
const prompt = 'Once upon a time, in a small village at the edge of a great forest, there lived a girl who';
try {
  console.log(`${threads} threads, context ${contextLength}, KV cache f16; MB = 10^6 bytes`);
  console.log('model                        budget  working  weights(peak)  KV   heap  heap-budget');
  for (const file of ['stories260K.gguf', 'qwen2.5-0.5b-Q4_K_M.gguf']) {
    const size = statSync(join(work, file)).size;
    const url = `${serverUrl}/${file}`;
    const options = { threads, cache: false, contextLength };
    const probe = await SipLLM.load(url, { ...options, memoryBudget: 0 });
    const working = probe.stats().loader.workingBytes;
    await probe.unload();
    for (const [label, budget] of [['none', undefined], ['½', working + Math.floor(size / 2)],
                                   ['¼', working + Math.floor(size / 4)]]) {
      const llm = await SipLLM.load(url, budget === undefined ? options : { ...options, memoryBudget: budget });
      for await (const _ of llm.generate(prompt, { maxTokens: 32, temperature: 0 })) { /* drain */ }
      const s = llm.stats();
      const over = budget === undefined ? '' : mb(s.heapBytes - budget);
      console.log(`${basename(file).padEnd(26)} ${label === 'none' ? '   none' : mb(budget)} ${mb(s.loader.workingBytes)} ` +
                  `${mb(s.loader.peakWeightBytes)}      ${mb(s.kvCacheBytes)} ${mb(s.heapBytes)} ${over}` +
                  `   (${label === 'none' ? 'unlimited' : `working + ${label} of the ${(size / 1e6).toFixed(1)} MB file`})`);
      await llm.unload();
    }
  }
} finally {
  child.kill('SIGTERM');
  rmSync(work, { recursive: true, force: true });
}

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
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { SipLLM } from '../dist/index.js';
import { cliPath as cli, option, repoRoot, startServer } from './support.mjs';

const threads = Number(option('--threads', '2'));
const contextLength = Number(option('--ctx', '2048'));
const modelsDir = process.env.SIPLLM_MODELS_DIR ?? join(repoRoot, 'build/native/tests/fixtures/models');

const work = mkdtempSync(join(tmpdir(), 'sipllm-heap-'));
copyFileSync(join(modelsDir, 'stories260K.gguf'), join(work, 'stories260K.gguf'));
execFileSync(cli, ['gen', '--shape', 'qwen2.5-0.5b', '--type', 'Q4_K_M', '--vocab',
                   join(repoRoot, 'build/native/tests/fixtures/vocab/ggml-vocab-qwen3.gguf'),
                   '-o', join(work, 'qwen2.5-0.5b-Q4_K_M.gguf')], { stdio: 'ignore' });

const server = await startServer(work);

const mb = (bytes) => (bytes / 1e6).toFixed(1).padStart(7);
const prompt = 'Once upon a time, in a small village at the edge of a great forest, there lived a girl who';
try {
  console.log(`${threads} threads, context ${contextLength}, KV cache f16; MB = 10^6 bytes`);
  console.log('model                        budget  working  weights(peak)  KV   heap  heap-budget');
  for (const file of ['stories260K.gguf', 'qwen2.5-0.5b-Q4_K_M.gguf']) {
    const size = statSync(join(work, file)).size;
    const url = `${server.url}/${file}`;
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
  server.stop();
  rmSync(work, { recursive: true, force: true });
}

#!/usr/bin/env node
// Figures for streaming under Node through the package (not a test: it
// prints, it asserts nothing).
//
//   node web/bench/stream-figures.mjs [--model FILE.gguf] [--mbps 50] [--threads N]
//
// Without --model it writes a random-weight SmolLM-135M-shaped Q8_0 model
// with the native CLI (build/native/engine/sipllm, or $SIPLLM_CLI). The model
// is served by scripts/range-server.mjs with its bandwidth capped at --mbps.
//   1. Time to first token of a 64-token prompt on a cold load (no cache),
//      from the call to SipLLM.load to the first token, against the time the
//      file takes to cross the capped link.
//   2. The WebAssembly heap after that prompt plus 16 tokens with a memory
//      budget of a quarter of the file, against budget + KV cache.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';

import { SipLLM } from '../dist/index.js';
import { cliPath as cli, option, repoRoot, startServer } from './support.mjs';

const mbps = Number(option('--mbps', '50'));
const threads = Number(option('--threads', '2'));

const work = mkdtempSync(join(tmpdir(), 'sipllm-figures-'));
let model = option('--model', null);
if (model === null) {
  model = join(work, 'smollm-135m-q8_0.gguf');
  execFileSync(cli, ['gen', '--shape', 'smollm-135m', '--type', 'Q8_0', '--vocab',
                     resolve(repoRoot, 'build/native/tests/fixtures/models/llama.cpp-vocab/ggml-vocab-starcoder.gguf'), '-o', model],
               { stdio: 'inherit' });
}
model = resolve(model);
const size = statSync(model).size;

const server = await startServer(dirname(model), ['--mbps', String(mbps)]);
const url = `${server.url}/${basename(model)}`;
const prompt = Array.from({ length: 64 }, (_, i) => 1000 + i);
const mb = (bytes) => (bytes / 1e6).toFixed(1);
try {
  console.log(`model ${basename(model)}: ${mb(size)} MB, served at ${mbps} MB/s, ${threads} threads`);

  const start = performance.now();
  const cold = await SipLLM.load(url, { threads });
  const loaded = performance.now();
  for await (const _ of cold.generate(prompt, { maxTokens: 1, temperature: 0 })) break;
  const firstToken = performance.now();
  const transferMs = size / (mbps * 1e6) * 1e3;
  const g = cold.stats().lastGeneration;
  console.log(`cold load (header)        ${(loaded - start).toFixed(0)} ms`);
  console.log(`time to first token       ${(firstToken - start).toFixed(0)} ms from load() ` +
              `(prefill ${g ? g.promptMs.toFixed(0) : '?'} ms of it)`);
  console.log(`pure transfer time        ${transferMs.toFixed(0)} ms`);
  console.log(`ratio                     ${((firstToken - start) / transferMs).toFixed(2)} (target <= 1.2)`);
  await cold.unload();

  const budget = Math.floor(size / 4);
  const small = await SipLLM.load(url, { threads, memoryBudget: budget });
  for await (const _ of small.generate(prompt, { maxTokens: 16, temperature: 0 })) { /* drain */ }
  const s = small.stats();
  console.log(`budget                    ${mb(budget)} MB (a quarter of the file)`);
  console.log(`weights in memory, peak   ${mb(s.loader.peakWeightBytes)} MB (resident ${mb(s.loader.residentBytes)}, ring ${mb(s.loader.ringBytes)})`);
  console.log(`KV cache                  ${mb(s.kvCacheBytes)} MB`);
  console.log(`WebAssembly heap (peak)   ${mb(s.heapBytes)} MB: ${mb(s.heapBytes - budget - s.kvCacheBytes)} MB above budget + KV`);
  console.log(`decode                    ${s.lastGeneration.decodeTokensPerS.toFixed(1)} tokens/s streaming ` +
              `${s.loader.streamedUnits} of ${s.loader.units.length} units`);
  await small.unload();
} finally {
  server.stop();
  rmSync(work, { recursive: true, force: true });
}

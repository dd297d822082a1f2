#!/usr/bin/env node
// The engine's native build against native llama.cpp, on the same files, the
// same machine, in one run. Prints one Markdown table.
//
//   node scripts/bench/native-peer.mjs [--models LIST] [--types LIST] [--threads LIST]
//        [--prompt-tokens N] [--gen-tokens N] [--runs N] [--json FILE]
//
// SipLLM: `sipllm bench` of the native CLI (build/native, Release,
// -march=native; the kernels it names are printed), ring backend, no
// budget; its decode figure and its second prefill ("prefill again": the
// weights already in memory, as llama.cpp's are in its mapped file) as it
// prints them. Its first prefill, which reads the weights into memory as
// it goes (from the page cache after the first run), is printed beside.
// llama.cpp: the CPU build that node-llama-cpp ships (its prebuilt binary
// for this CPU, picked at run time: AVX2/AVX-512 kernels, llama.cpp's own
// thread pool), installed from npm into build/bench/peer on first use.
// Context 512, batch 512, the given thread count for prompt and generation.
// prefill = prompt tokens / time to evaluate them (best of --runs);
// decode = (generated - 1) / (first .. last generated token), greedy, best of
// --runs. Same prompt length and generated count on both sides. The last
// column puts both prefills in multiply-adds per second in the blocks'
// matrices (a prompt token's count as `sipllm bench` gives it) beside the
// dot product peak it measures with as many threads (the kernels' own 8-bit
// instruction alone: dot_product_peak() in engine.h).
// Models: build/bench-models/SHAPE-TYPE.gguf, written by `npm run bench`
// (or `sipllm gen`) when missing.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { nativeBenchFigures } from './support.mjs';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PEER_VERSION = '3.22.1';

function parse(argv) {
  const o = { models: ['smollm-135m', 'qwen2.5-0.5b'], types: ['Q8_0', 'Q4_0', 'Q4_K_M'], threads: [1, 2],
    promptTokens: 128, genTokens: 32, runs: 2, json: null, engines: ['sipllm', 'llama.cpp'] };
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--models') o.models = value().split(',');
    else if (a === '--types') o.types = value().split(',');
    else if (a === '--threads') o.threads = value().split(',').map(Number);
    else if (a === '--engines') o.engines = value().split(',');
    else if (a === '--prompt-tokens') o.promptTokens = Number(value());
    else if (a === '--gen-tokens') o.genTokens = Number(value());
    else if (a === '--runs') o.runs = Number(value());
    else if (a === '--json') o.json = value();
    else throw new Error(`unknown option ${a}`);
  }
  return o;
}

const cli = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');

async function loadPeer() {
  const dir = join(repoRoot, 'build/bench/peer');
  const entry = join(dir, 'node_modules/node-llama-cpp/dist/index.js');
  if (!existsSync(entry)) {
    mkdirSync(dir, { recursive: true });
    console.error(`installing node-llama-cpp ${PEER_VERSION} into ${dir}`);
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefix', dir, `node-llama-cpp@${PEER_VERSION}`],
      { stdio: 'inherit' });
  }
  return import(pathToFileURL(entry).href);
}

async function llamaCppFigures(llama, model, threads, o) {
  const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
  const context = await m.createContext({ contextSize: 512, batchSize: 512, threads: { ideal: threads, min: threads } });
  const sequence = context.getSequence();
  const words = m.tokenize('The quick brown fox jumps over the lazy dog while the river runs to the sea. ');
  const prompt = [];
  while (prompt.length < o.promptTokens) prompt.push(...words);
  prompt.length = o.promptTokens;
  let best = { prefill: 0, decode: 0 };
  for (let run = 0; run < o.runs; ++run) {
    await sequence.clearHistory();
    let t0 = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(prompt);
    const prefill = o.promptTokens / ((performance.now() - t0) / 1000);
    await sequence.clearHistory();
    let first = 0;
    let count = 0;
    t0 = performance.now();
    for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
      void token;
      if (++count === 1) first = performance.now();
      if (count === o.genTokens) break;
    }
    const decode = (o.genTokens - 1) / ((performance.now() - first) / 1000);
    best = { prefill: Math.max(best.prefill, prefill), decode: Math.max(best.decode, decode) };
  }
  await context.dispose();
  await m.dispose();
  return best;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const rows = [];
  const peer = o.engines.includes('llama.cpp') ? await loadPeer() : null;
  const llama = peer ? await peer.getLlama({ gpu: false, build: 'never', maxThreads: 0 }) : null;
  for (const shape of o.models) {
    for (const type of o.types) {
      const model = join(repoRoot, 'build/bench-models', `${shape}-${type}.gguf`);
      if (!existsSync(model)) throw new Error(`${model} is missing: run npm run bench -- --models ${shape} --types ${type} first`);
      for (const threads of o.threads) {
        const row = { shape, type, threads };
        if (o.engines.includes('sipllm')) row.sipllm = nativeBenchFigures(cli, model, { ...o, threads });
        if (llama) row.llamaCpp = await llamaCppFigures(llama, model, threads, o);
        rows.push(row);
        console.error(JSON.stringify(row));
      }
    }
  }
  const f = (x) => (x ? x.toFixed(1) : '–');
  const ratio = (a, b) => (a && b ? (a / b).toFixed(2) : '–');
  console.log(`\n${cpus()[0]?.model ?? 'CPU'}, ${cpus().length} hardware threads; prompt ${o.promptTokens} tokens, ` +
    `${o.genTokens} generated, best of ${o.runs}; SipLLM's kernels: ${rows.find((r) => r.sipllm?.kernels)?.sipllm.kernels ?? '–'}; ` +
    `llama.cpp: node-llama-cpp ${PEER_VERSION} prebuilt CPU binary\n`);
  console.log('| model | threads | prefill tok/s SipLLM / llama.cpp | × | SipLLM first prefill tok/s | decode tok/s SipLLM / llama.cpp | × | ' +
    'decode weights GB/s (read probe) | prefill G multiply-adds/s SipLLM / llama.cpp (dot product peak) |');
  console.log('|---|--:|--:|--:|--:|--:|--:|--:|--:|');
  for (const r of rows) {
    const s = r.sipllm ?? {};
    const l = r.llamaCpp ?? {};
    // Both sides' prefill in the blocks' matrices, as `sipllm bench` counts a token's multiply-adds.
    const gmacs = (tokS) => f(s.macsPerToken && tokS ? s.macsPerToken * tokS / 1e9 : 0);
    console.log(`| ${r.shape} ${r.type} | ${r.threads} | ${f(s.prefill)} / ${f(l.prefill)} | ${ratio(s.prefill, l.prefill)} | ${f(s.firstPrefill)} | ` +
      `${f(s.decode)} / ${f(l.decode)} | ${ratio(s.decode, l.decode)} | ${f(s.decodeGBps)} (${f(s.readGBps)}) | ` +
      `${gmacs(s.prefill)} / ${gmacs(l.prefill)} (${f(s.peakGmacs)}) |`);
  }
  const out = o.json ?? join(repoRoot, 'build/bench', `native-peer-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, JSON.stringify({ options: o, rows }, null, 2));
  console.error(`figures: ${out}`);
}

main().catch((e) => {
  console.error(e.stack ?? String(e));
  process.exit(1);
});

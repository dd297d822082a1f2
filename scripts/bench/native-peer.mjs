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
// llama.cpp: the CPU build that node-llama-cpp ships, as support.mjs's
// llamaCppFigures() measures it (context 512, batch 512, the given thread
// count; prefill = prompt tokens / time to evaluate them, decode =
// (generated - 1) / (first .. last generated token), greedy, best of
// --runs). Same prompt length and generated count on both sides. The last
// column puts both prefills in multiply-adds per second in the blocks'
// matrices (a prompt token's count as `sipllm bench` gives it) beside the
// dot product peak it measures with as many threads (the kernels' own 8-bit
// instruction alone: dot_product_peak() in engine.h).
// Models: build/bench-models/SHAPE-TYPE.gguf, written by `npm run bench`
// (or `sipllm gen`) when missing.
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join } from 'node:path';

import { LLAMA_CPP_PEER, llamaCppFigures, loadLlamaCpp, nativeBenchFigures, repoRoot } from './support.mjs';

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

async function main() {
  const o = parse(process.argv.slice(2));
  const rows = [];
  const llama = o.engines.includes('llama.cpp') ? await loadLlamaCpp() : null;
  for (const shape of o.models) {
    for (const type of o.types) {
      const model = join(repoRoot, 'build/bench-models', `${shape}-${type}.gguf`);
      if (!existsSync(model)) throw new Error(`${model} is missing: run npm run bench -- --models ${shape} --types ${type} first`);
      for (const threads of o.threads) {
        const row = { shape, type, threads };
        if (o.engines.includes('sipllm')) row.sipllm = nativeBenchFigures(cli, model, { ...o, threads });
        if (llama) row.llamaCpp = await llamaCppFigures(llama, model, { ...o, threads });
        rows.push(row);
        console.error(JSON.stringify(row));
      }
    }
  }
  const f = (x) => (x ? x.toFixed(1) : '–');
  const ratio = (a, b) => (a && b ? (a / b).toFixed(2) : '–');
  console.log(`\n${cpus()[0]?.model ?? 'CPU'}, ${cpus().length} hardware threads; prompt ${o.promptTokens} tokens, ` +
    `${o.genTokens} generated, best of ${o.runs}; SipLLM's kernels: ${rows.find((r) => r.sipllm?.kernels)?.sipllm.kernels ?? '–'}; ` +
    `llama.cpp: ${LLAMA_CPP_PEER} prebuilt CPU binary\n`);
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

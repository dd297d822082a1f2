#!/usr/bin/env node
// SipLLM against wllama (llama.cpp in WebAssembly), in the same headless
// Chromium, on the same files, in one run. Prints one table.
//
//   npm run bench                                  the whole matrix
//   npm run bench -- --quick                       SmolLM-135M Q8_0, 2 threads
//   npm run bench -- --models smollm-135m --types Q4_0,Q4_K_M --threads 2
//   npm run bench -- --mbps 50                     models behind a 50 MB/s link:
//                                                  cold TTFT against transfer time,
//                                                  and where SipLLM's time went
//   npm run bench -- --help                        every option
//
// What it does:
//   1. Writes the random-weight models that are missing (the native CLI's
//      `sipllm gen`, real tokenizer from a vocab GGUF) into build/bench-models.
//   2. Fits a plain English prompt to exactly --prompt-tokens tokens (BOS
//      included) with the engine's tokenizer (`sipllm tokenize`), and lists
//      the tokens neither engine may sample: byte tokens, control tokens and
//      EOS (see gguf-vocab.mjs). Both engines get the same text and the same
//      ban list, greedy sampling, and must generate exactly --gen-tokens.
//   3. Serves the bench page (scripts/bench/page), the sipllm package (web/)
//      and node_modules from one range server, and the models from a second
//      one (another origin, as a CDN would be; capped with --mbps). Both send
//      COOP/COEP, so the page is cross-origin isolated and both engines run
//      their threaded builds.
//   4. For every model, type, thread count and engine: a fresh browser (so
//      nothing is cached: SipLLM runs with cache: false, wllama downloads
//      into an empty profile), load, one cold generation, then --warm-runs
//      warm ones (SipLLM after reset(), wllama with cache_prompt: false).
//      Times are taken in the page with performance.now():
//        load       load() called .. resolved (SipLLM reads the header only;
//                   its weights stream during the first prompt. wllama
//                   downloads the file, loads it and runs its warm-up)
//        cold TTFT  load() called .. first generated piece on the page
//        prefill    prompt tokens / (request .. first piece), best warm run
//                   (two by default: V8 runs WebAssembly on baseline code
//                   first and tiers hot functions up while they run, so the
//                   first runs of either engine are slower)
//        decode     (generated - 1) / (first piece .. last piece), best run
//                   (the cold one included: every weight has arrived by then)
//      Peak memory is the renderer process's peak resident set (VmHWM: the
//      page, its workers and the WebAssembly memory), read from /proc.
//      With --mbps, also per model a fresh browser that only downloads the
//      file (the honest "pure transfer": this browser's own cost per request
//      and per byte included), and for SipLLM's cold run a breakdown from
//      three clocks lined up on the Unix epoch: load()'s phases
//      (stats().load), the model server's request log and the loader's
//      timeline (loader.timelineOriginMs), with the CPU time the renderer,
//      Chromium's network service and the model server (this process) used.
//      With --cold-runs N, SipLLM's runs are repeated N times per row, each
//      in a fresh browser, and the one with the median cold TTFT is reported.
//   5. After each row's browser runs (never beside them: two cores),
//      SipLLM's native build on the same file and threads (`sipllm bench`,
//      best of --warm-runs runs), so that the WebAssembly penalty is in the
//      same report (--no-native skips it); with --llama-cpp, native
//      llama.cpp on it too (support.mjs's llamaCppFigures), so that the
//      browser's figures meet the native peer's measured a minute apart.
//      With --rounds N, the whole matrix N times over: each side's best
//      prefill and best decode count, and the llama.cpp table shows the
//      ratio of every round, as this host's speed drifts between minutes.
//   6. Prints the tables (Markdown) with SipLLM ÷ wllama ratios against the
//      targets, and writes every figure to build/bench/results-*.json.
//
// Needs: web/wasm (scripts/build-wasm.sh; --build runs it; --wasm-dir takes
// another build tree's instead, e.g. build/wasm-threaded/wasm-bindings),
// web/dist (npm run build:web; --build runs it), the native CLI
// (build/native/engine/sipllm or $SIPLLM_CLI; built when missing),
// /usr/bin/chromium (or $CHROMIUM), `npm install` (playwright-core and
// @wllama/wllama are devDependencies of the repository root).
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

import { chromium } from 'playwright-core';

import { startRangeServer } from '../range-server.mjs';
import { readVocab } from './gguf-vocab.mjs';
import {
  CHROMIUM_ARGS, LLAMA_CPP_PEER, browserProcesses, cpuSample, fitPrompt, fmt, llamaCppFigures, loadLlamaCpp,
  nativeBenchFigures, rendererMemoryBytes, repoRoot, run,
  withTimeout,
} from './support.mjs';

const SHAPES = ['smollm-135m', 'qwen2.5-0.5b', 'qwen3-0.6b', 'gemma3-1b', 'llama-3.2-1b', 'qwen3.5-0.8b',
                'qwen3.5-2b', 'lfm2.5-1.2b', 'gemma-4-e2b'];
// The models' own vocabularies where the project carries them
// (tests/fixtures/vocab), so that the output head is as heavy as the real
// model's: 151,936 rows for Qwen3, 128,256 for Llama 3. The Qwen3.5 shapes
// take Qwen3's tokens, which the generator pads with unused ones to
// Qwen3.5's 248,320 (LFM2.5's default vocabulary to its 65,536).
const SHAPE_VOCABS = {
  'qwen3-0.6b': 'qwen3', 'llama-3.2-1b': 'llama3', 'gemma3-1b': 'gemma3', 'qwen3.5-0.8b': 'qwen3', 'qwen3.5-2b': 'qwen3',
  'gemma-4-e2b': 'gemma3',
};
const TYPES = ['Q8_0', 'Q4_0', 'Q4_K_M'];
const TARGETS = { decode: 2.5, prefill: 5, coldTtft: 0.5 };

const USAGE = `usage: npm run bench -- [options]

matrix (comma-separated lists):
  --models LIST        shapes: ${SHAPES.join(', ')} (default: all)
  --types LIST         ${TYPES.join(', ')} (default: all)
  --threads LIST       compute threads (default: 1,2)
  --engines LIST       sipllm, wllama (default: both)
  --sipllm-build B     SipLLM's WebAssembly build: auto, threaded or relaxed
                       (default auto: relaxed where the browser has relaxed SIMD)
  --quick              --models smollm-135m --types Q8_0 --threads 2

workload:
  --prompt-tokens N    prompt length, BOS included (default 128)
  --gen-tokens N       generated tokens, greedy (default 64)
  --warm-runs N        warm generations after the cold one; the best counts
                       (default 2; 0 with --mbps)
  --context N          context length given to both engines (default 512)
  --seed N             sampling seed (default 1; greedy sampling ignores it)
  --no-native          skip SipLLM's native figures on the same files (run
                       after each row's browser runs, with the native CLI's
                       bench)
  --llama-cpp          also native llama.cpp on the same files and threads,
                       after each row's browser runs (node-llama-cpp's
                       prebuilt CPU binary, installed into build/bench/peer on
                       first use)
  --rounds N           measure the whole matrix N times over (default 1):
                       each side's best prefill and decode of all rounds
                       count, and the llama.cpp table lists every round's
                       ratios (the host's speed drifts from minute to minute)

network:
  --mbps X             cap the model server at X MB/s (1 MB = 1e6 bytes): adds
                       cold TTFT against the pure transfer time of the file and
                       against the time the browser takes to download it
                       alone, and a breakdown of SipLLM's cold load (its
                       phases, the server's request log, the loader's
                       timeline, CPU time by process)
  --latency-ms Y       delay every model response's headers by Y ms
  --cold-runs N        load SipLLM cold N times per row (a fresh browser each;
                       default 1): its row reports the run with the median
                       cold TTFT (use an odd N), and the --mbps table all N, as
                       one cold run on a busy machine varies by a tenth or more

setup:
  --build              rebuild the WebAssembly engine (scripts/build-wasm.sh),
                       the package (web/dist) and the native CLI first
  --wasm-dir DIR       serve SipLLM's WebAssembly build from DIR (a build tree's
                       wasm-bindings/, holding sipllm-threaded.{js,wasm,worker.js})
                       instead of web/wasm
  --models-dir DIR     where the generated models live (default build/bench-models)
  --vocab FILE         vocab GGUF for new models (default: the shape's own
                       for qwen3-0.6b, gemma3-1b, llama-3.2-1b and the qwen3.5
                       shapes (Qwen3's), else llama.cpp's
                       llama-spm vocabulary the native build unpacks into
                       build/native/tests/fixtures/models/llama.cpp-vocab)
  --cli FILE           the native CLI (default $SIPLLM_CLI or build/native/engine/sipllm)
  --chromium FILE      the browser (default $CHROMIUM or /usr/bin/chromium)
  --browser-arg ARG    one more browser argument (repeatable), e.g. --js-flags=...
  --timeout S          give up on one engine run after S seconds (default 1200)
  --json FILE          where to write every figure (default build/bench/results-DATE.json)
  --verbose            print the page's console
`;

// ---- Options --------------------------------------------------------------------------

function parseOptions(argv) {
  const o = {
    models: SHAPES, types: TYPES, threads: [1, 2], engines: ['sipllm', 'wllama'],
    promptTokens: 128, genTokens: 64, warmRuns: null, context: 512, seed: 1,
    mbps: 0, latencyMs: 0, coldRuns: 1, build: false, wasmDir: null, sipllmBuild: 'auto',
    modelsDir: join(repoRoot, 'build/bench-models'),
    vocab: null,
    defaultVocab: join(repoRoot, 'build/native/tests/fixtures/models/llama.cpp-vocab/ggml-vocab-llama-spm.gguf'),
    cli: process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm'),
    chromium: process.env.CHROMIUM ?? '/usr/bin/chromium',
    timeoutS: 1200, json: null, verbose: false, browserArgs: [], native: true, llamaCpp: false, rounds: 1,
  };
  const list = (flag, value, allowed) => {
    const items = value.split(',').map((s) => s.trim()).filter(Boolean);
    if (items.length === 0) throw new Error(`${flag} needs at least one value`);
    for (const item of items) {
      if (allowed && !allowed.includes(item)) throw new Error(`${flag}: '${item}' is not one of ${allowed.join(', ')}`);
    }
    return items;
  };
  const count = (flag, value, min) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new Error(`${flag} wants a whole number >= ${min}, got '${value}'`);
    return n;
  };
  for (let i = 0; i < argv.length; ++i) {
    // --flag=value is --flag value.
    const eq = argv[i].startsWith('--') ? argv[i].indexOf('=') : -1;
    const flag = eq > 0 ? argv[i].slice(0, eq) : argv[i];
    const inline = eq > 0 ? argv[i].slice(eq + 1) : null;
    const value = () => {
      if (inline !== null) return inline;
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--models': o.models = list(flag, value(), SHAPES); break;
      case '--types': o.types = list(flag, value(), TYPES); break;
      case '--threads': o.threads = list(flag, value()).map((t) => count(flag, t, 1)); break;
      case '--engines': o.engines = list(flag, value(), ['sipllm', 'wllama']); break;
      case '--sipllm-build': [o.sipllmBuild] = list(flag, value(), ['auto', 'threaded', 'relaxed']); break;
      case '--quick': o.models = ['smollm-135m']; o.types = ['Q8_0']; o.threads = [2]; break;
      case '--prompt-tokens': o.promptTokens = count(flag, value(), 2); break;
      case '--gen-tokens': o.genTokens = count(flag, value(), 2); break;
      case '--warm-runs': o.warmRuns = count(flag, value(), 0); break;
      case '--context': o.context = count(flag, value(), 16); break;
      case '--seed': o.seed = count(flag, value(), 0); break;
      case '--no-native': o.native = false; break;
      case '--llama-cpp': o.llamaCpp = true; break;
      case '--rounds': o.rounds = count(flag, value(), 1); break;
      case '--mbps': {
        const v = value();
        o.mbps = Number(v);
        if (!(o.mbps > 0)) throw new Error(`--mbps wants a number > 0, got '${v}'`);
        break;
      }
      case '--latency-ms': o.latencyMs = count(flag, value(), 0); break;
      case '--cold-runs': o.coldRuns = count(flag, value(), 1); break;
      case '--build': o.build = true; break;
      case '--wasm-dir': o.wasmDir = resolve(value()); break;
      case '--models-dir': o.modelsDir = resolve(value()); break;
      case '--vocab': o.vocab = resolve(value()); break;
      case '--cli': o.cli = resolve(value()); break;
      case '--chromium': o.chromium = value(); break;
      case '--browser-arg': o.browserArgs.push(value()); break;
      case '--timeout': o.timeoutS = count(flag, value(), 1); break;
      case '--json': o.json = resolve(value()); break;
      case '--verbose': o.verbose = true; break;
      case '--help': case '-h': process.stdout.write(USAGE); process.exit(0); break;
      default: throw new Error(`unknown option '${flag}' (see --help)`);
    }
  }
  if (o.warmRuns === null) o.warmRuns = o.mbps > 0 ? 0 : 2;
  if (o.build && o.wasmDir !== null) throw new Error('--build rebuilds web/wasm, which --wasm-dir replaces: pass one of them');
  if (o.context < o.promptTokens + o.genTokens) {
    throw new Error(`--context ${o.context} cannot hold ${o.promptTokens} prompt + ${o.genTokens} generated tokens`);
  }
  return o;
}

// ---- Preparation ----------------------------------------------------------------------

function newestMtime(path) {
  if (!existsSync(path)) return 0;
  const info = statSync(path);
  if (!info.isDirectory()) return info.mtimeMs;
  let newest = 0;
  for (const entry of readdirSync(path)) newest = Math.max(newest, newestMtime(join(path, entry)));
  return newest;
}

function buildCli(o) {
  if (o.cli !== join(repoRoot, 'build/native/engine/sipllm')) {
    throw new Error(`the native CLI ${o.cli} is missing`);
  }
  // The CLI alone: the tests of scripts/build-native.sh are not needed here.
  run('cmake', ['-S', '.', '-B', 'build/native', '-G', 'Ninja', '-DCMAKE_BUILD_TYPE=Release'], 'configuring build/native');
  run('cmake', ['--build', 'build/native', '--target', 'sipllm'], 'building the native CLI');
}

function prepareBuilds(o) {
  if (o.build) {
    run('scripts/build-wasm.sh', [], 'scripts/build-wasm.sh');
    run('npm', ['run', 'build', '--workspace', 'web'], 'building web/dist');
    if (existsSync(o.cli) && o.cli === join(repoRoot, 'build/native/engine/sipllm')) buildCli(o);
  }
  if (!existsSync(o.cli)) buildCli(o);
  if (o.engines.includes('sipllm')) checkSipllmBuild(o);
  const wllamaWasm = join(repoRoot, 'node_modules/@wllama/wllama/esm/wasm/wllama.wasm');
  if (!existsSync(wllamaWasm) || !existsSync(join(repoRoot, 'node_modules/playwright-core'))) {
    throw new Error('node_modules lacks @wllama/wllama or playwright-core: run npm install at the repository root');
  }
  if (!existsSync(o.chromium)) throw new Error(`no browser at ${o.chromium} (set --chromium or $CHROMIUM)`);
}

// The WebAssembly build and the package the page loads.
function checkSipllmBuild(o) {
  if (o.wasmDir !== null) {
    for (const file of ['sipllm-threaded.js', 'sipllm-threaded.wasm', 'sipllm-threaded.worker.js']) {
      if (!existsSync(join(o.wasmDir, file))) throw new Error(`--wasm-dir ${o.wasmDir} has no ${file}`);
    }
  }
  const threadedWasm = join(o.wasmDir ?? join(repoRoot, 'web/wasm'), 'sipllm-threaded.wasm');
  if (!existsSync(threadedWasm)) {
    throw new Error('web/wasm/sipllm-threaded.wasm is missing: run scripts/build-wasm.sh (or pass --build)');
  }
  const sources = Math.max(...['engine/src', 'engine/include', 'wasm-bindings'].map((d) => newestMtime(join(repoRoot, d))));
  if (sources > statSync(threadedWasm).mtimeMs) {
    console.warn(`warning: ${relative(repoRoot, threadedWasm)} is older than engine/ or wasm-bindings/: the figures ` +
                 'are of an earlier build' + (o.wasmDir === null ? ' (pass --build to rebuild it first)' : ''));
  }
  const dist = join(repoRoot, 'web/dist/index.js');
  if (!existsSync(dist)) throw new Error('web/dist is missing: run npm run build:web (or pass --build)');
  if (newestMtime(join(repoRoot, 'web/src')) > statSync(dist).mtimeMs) {
    console.warn('warning: web/dist is older than web/src (pass --build, or run npm run build:web)');
  }
}

// The vocab GGUF a shape's model is written with: --vocab, else the shape's
// own (unpacked from the fixtures once), else the default.
function vocabFor(o, shape) {
  if (o.vocab) return o.vocab;
  const name = SHAPE_VOCABS[shape];
  if (name === undefined) return o.defaultVocab;
  const file = join(o.modelsDir, 'vocab', `ggml-vocab-${name}.gguf`);
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    run('tar', ['-xJf', join(repoRoot, `tests/fixtures/vocab/ggml-vocab-${name}.gguf.tar.xz`), '-C', dirname(file)],
        `unpacking the ${name} vocabulary`);
  }
  return file;
}

function ensureModels(o) {
  mkdirSync(o.modelsDir, { recursive: true });
  const models = [];
  for (const shape of o.models) {
    for (const type of o.types) {
      const path = join(o.modelsDir, `${shape}-${type}.gguf`);
      if (!existsSync(path)) {
        const vocab = vocabFor(o, shape);
        if (!existsSync(vocab)) throw new Error(`the vocab ${vocab} is missing (set --vocab)`);
        run(o.cli, ['gen', '--shape', shape, '--type', type, '--vocab', vocab, '-o', path], `writing ${path}`);
      }
      models.push({ shape, type, path, file: basename(path), bytes: statSync(path).size });
    }
  }
  return models;
}

async function preparePrompts(o, models) {
  const byVocab = new Map();
  for (const model of models) {
    const vocab = await readVocab(model.path);
    let entry = byVocab.get(vocab.fingerprint);
    if (entry === undefined) {
      entry = { prompt: fitPrompt(o.cli, model.path, o.promptTokens), ban: vocab.banned, vocab };
      byVocab.set(vocab.fingerprint, entry);
    }
    model.prompt = entry.prompt;
    model.ban = entry.ban;
    model.vocab = `${vocab.model} ${vocab.size} tokens, ${vocab.banned.length} banned`;
  }
}

// ---- The browser ------------------------------------------------------------------------

const CPU_SAMPLE_MS = 50;

async function runInBrowser(o, pageUrl, modelServer, engine, config, log) {
  const browser = await chromium.launch({ executablePath: o.chromium, args: [...CHROMIUM_ARGS, ...o.browserArgs] });
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    page.on('console', (message) => {
      const line = `  [page ${message.type()}] ${message.text()}`;
      log.push(line);
      if (o.verbose) console.log(line);
    });
    page.on('pageerror', (error) => log.push(`  [page error] ${error.message}`));
    await page.goto(pageUrl);
    await page.waitForFunction(() => globalThis.benchReady === true, null, { timeout: 60_000 });
    const fn = { sipllm: 'benchSipllm', wllama: 'benchWllama', download: 'benchDownload' }[engine];
    modelServer.reset();
    const processes = browserProcesses();
    const cpu = [cpuSample(processes)];
    const sampler = setInterval(() => cpu.push(cpuSample(processes)), CPU_SAMPLE_MS);
    let result;
    try {
      result = await withTimeout(page.evaluate(([name, cfg]) => globalThis[name](cfg), [fn, config]),
                                 o.timeoutS, `${engine} on ${basename(config.url)}`);
    } finally {
      clearInterval(sampler);
    }
    cpu.push(cpuSample(processes));
    result.cpu = cpu;
    result.requests = modelServer.stats.log.filter((e) => e.url.endsWith(basename(config.url)));
    result.rendererMemoryBytes = rendererMemoryBytes();
    result.browserVersion = browser.version();
    return result;
  } finally {
    await browser.close();
  }
}

// ---- Figures ------------------------------------------------------------------------------

function generationFigures(g) {
  if (!g || g.firstMs === null) return null;
  const prefillMs = g.firstMs - g.callMs;
  const decodeMs = g.lastMs - g.firstMs;
  return {
    prefillMs,
    prefillTokS: g.promptTokens / (prefillMs / 1000),
    decodeTokS: g.generatedTokens > 1 && decodeMs > 0 ? (g.generatedTokens - 1) / (decodeMs / 1000) : null,
  };
}

function summarize(result) {
  if (!result || result.error) return { error: result?.error ?? 'no result' };
  const warm = (result.warm ?? []).map(generationFigures).filter(Boolean);
  const best = (key) => (warm.length === 0 ? null : Math.max(...warm.map((w) => w[key] ?? 0)));
  const cold = generationFigures(result.cold);
  return {
    loadMs: result.loadMs,
    coldTtftMs: result.coldTtftMs,
    coldPrefillTokS: cold?.prefillTokS ?? null,
    coldDecodeTokS: cold?.decodeTokS ?? null,
    prefillTokS: best('prefillTokS'),
    // Decode counts the cold run too (every weight has arrived by then);
    // prefill does not (SipLLM's cold prefill waits for the weights to
    // arrive, wllama's ran after its download).
    decodeTokS: Math.max(best('decodeTokS') ?? 0, cold?.decodeTokS ?? 0) || null,
    peakBytes: result.rendererMemoryBytes,
    heapBytes: result.heapBytes ?? null,
    threads: result.threads ?? null,
    promptTokens: result.cold?.promptTokens ?? null,
    generatedTokens: result.cold?.generatedTokens ?? null,
    warmPromptTokens: (result.warm ?? []).map((w) => w.promptTokens),
    warmCachedTokens: (result.warm ?? []).map((w) => w.cachedTokens),
    warmGeneratedTokens: (result.warm ?? []).map((w) => w.generatedTokens),
    text: result.cold?.text ?? '',
    decodeSplit: decodeSplit([result.cold, ...(result.warm ?? [])]),
  };
}

// A row measured in several rounds (--rounds), as one: each side's best
// prefill and best decode of all rounds (as within a round, the best of its
// runs; the decode split of the fastest), the rest (load, cold TTFT, peak,
// text) from its first round that ran; `rounds` keeps every round's figures.
function mergeRounds(rounds) {
  const merged = { ...rounds[0] };
  const best = (side, numbers) => {
    const ran = rounds.map((r) => r[side]).filter((f) => f && !f.error);
    if (ran.length === 0) return;
    merged[side] = { ...ran[0] };
    for (const key of numbers) merged[side][key] = Math.max(...ran.map((f) => f[key] ?? 0)) || null;
    if ('decodeSplit' in ran[0]) {
      merged[side].decodeSplit = ran.reduce((a, b) => ((b.decodeTokS ?? 0) > (a.decodeTokS ?? 0) ? b : a)).decodeSplit;
    }
  };
  best('s', ['prefillTokS', 'decodeTokS']);
  best('w', ['prefillTokS', 'decodeTokS']);
  best('native', ['prefill', 'firstPrefill', 'decode', 'decodeGBps', 'readGBps', 'peakGmacs']);
  best('llamaCpp', ['prefill', 'decode']);
  const figures = (f, prefill, decode) => (f && !f.error ? { prefill: f[prefill], decode: f[decode] } : null);
  merged.rounds = rounds.map((r) => ({
    sipllm: figures(r.s, 'prefillTokS', 'decodeTokS'), wllama: figures(r.w, 'prefillTokS', 'decodeTokS'),
    sipllmNative: figures(r.native, 'prefill', 'decode'), llamaCppNative: figures(r.llamaCpp, 'prefill', 'decode'),
  }));
  return merged;
}

// Where the engine's decode time went per token, in its fastest run: the
// loops its compute threads split (how many, the time in them, of that the
// wait for the last thread's chunks), and the rest, which ran on one thread.
function decodeSplit(runs) {
  const timed = runs.filter((r) => r?.engine?.decodeParallel && r.generatedTokens > 1 && r.engine.decodeMs > 0);
  if (timed.length === 0) return null;
  const best = timed.reduce((a, b) => (b.engine.decodeMs / (b.generatedTokens - 1) < a.engine.decodeMs / (a.generatedTokens - 1) ? b : a));
  const steps = best.generatedTokens - 1;
  const p = best.engine.decodeParallel;
  return {
    msPerToken: best.engine.decodeMs / steps,
    loopsPerToken: p.loops / steps,
    loopMsPerToken: p.loopMs / steps,
    waitMsPerToken: p.waitMs / steps,
    oneThreadMsPerToken: (best.engine.decodeMs - p.loopMs) / steps,
  };
}

const MiB = 1024 * 1024;
const ratio = (a, b) => (a === null || b === null || a === undefined || b === undefined || !(b > 0) ? null : a / b);
const pair = (s, w, digits = 0) => `${fmt(s, digits)} / ${fmt(w, digits)}`;
const tokS = (v) => fmt(v, v !== null && v !== undefined && v < 100 ? 1 : 0);

function commonPrefix(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) ++i;
  return i;
}

function checkRow(o, row, notes) {
  const label = `${row.model.shape} ${row.model.type} ${row.threads}t`;
  for (const [engine, s] of [['SipLLM', row.s], ['wllama', row.w]]) {
    if (!s) continue;
    if (s.error) {
      notes.push(`${label}: ${engine} failed: ${s.error}`);
      continue;
    }
    if (s.threads !== row.threads) notes.push(`${label}: ${engine} ran with ${s.threads} threads, not ${row.threads}`);
    const prompts = [s.promptTokens, ...s.warmPromptTokens];
    if (prompts.some((n) => n !== o.promptTokens)) {
      notes.push(`${label}: ${engine} processed ${prompts.join(', ')} prompt tokens, not ${o.promptTokens}`);
    }
    if (s.warmCachedTokens.some((n) => n !== 0 && n !== null)) {
      notes.push(`${label}: ${engine} reused ${s.warmCachedTokens.join(', ')} cached prompt tokens in the warm runs`);
    }
    const generated = [s.generatedTokens, ...s.warmGeneratedTokens];
    if (generated.some((n) => n !== o.genTokens)) {
      notes.push(`${label}: ${engine} generated ${generated.join(', ')} tokens, not ${o.genTokens}`);
    }
  }
}

// Where a GGUF file's tensor data starts (the size of its header), read
// with the package's own layout reader, the one its early fetch uses.
async function tensorDataStart(path) {
  const { readGgufLayout, NeedMoreBytes } = await import(pathToFileURL(join(repoRoot, 'web/dist/page/gguf-layout.js')).href);
  const size = statSync(path).size;
  for (let length = Math.min(size, 4 << 20); ; length = Math.min(size, 2 * length)) {
    const bytes = new Uint8Array(length);
    const fd = openSync(path, 'r');
    try {
      readSync(fd, bytes, 0, length, 0);
    } finally {
      closeSync(fd);
    }
    try {
      return readGgufLayout(bytes).dataStart;
    } catch (error) {
      if (!(error instanceof NeedMoreBytes) || length === size) throw error;
    }
  }
}

// Where the time of one cold SipLLM load went, from three clocks lined up on
// the Unix epoch: the package's load phases, the model server's request log
// (when each range request came, sent its first byte, ended) and the
// engine's loader timeline (each unit's I/O and compute). Times in ms since
// load() was called. The CPU time of each process kind counts from load() to
// the first token.
function coldBreakdown(result, fileBytes, headerBytes, mbps) {
  if (!result?.loadTimes || !result.coldLoader || !result.cold?.firstMs) return null;
  const t0 = result.calledAtMs;
  const rel = (epochMs) => epochMs - t0;
  const firstToken = rel(result.timeOriginMs + result.cold.firstMs);
  const requests = (result.requests ?? []).filter((r) => r.firstByteMs !== null && r.endMs !== null);
  const loader = result.coldLoader;
  const unitCount = loader.units.length;
  const firstPass = loader.timeline.slice(0, unitCount);
  const at = (ms) => (ms > 0 ? rel(loader.timelineOriginMs + ms) : null);
  const headerRead = rel(result.loadTimes.headerReadAt);
  // The link's busy time: the union of the requests' [first byte, end].
  const spans = requests.map((r) => [rel(r.firstByteMs), rel(r.endMs)]).sort((a, b) => a[0] - b[0]);
  let busy = 0;
  let reach = -Infinity;
  for (const [from, to] of spans) {
    if (to <= reach) continue;
    busy += to - Math.max(from, reach);
    reach = to;
  }
  const firstByte = spans.length ? spans[0][0] : null;
  const lastByte = spans.length ? Math.max(...spans.map((x) => x[1])) : null;
  // When the header's last byte (the one before the tensor data) had
  // arrived, and every byte before it: the latest of the requests that
  // carried a part of it, whoever made them, each one's bytes taken as
  // arriving evenly from its first byte to its end.
  const rangeOf = (r) => (/^bytes=(\d+)-(\d+)$/.exec(r.range ?? '') ?? []).slice(1).map(Number);
  let headerArrived = null;
  for (const r of requests) {
    const [first, last] = rangeOf(r);
    if (!(first < headerBytes)) continue;
    const share = (Math.min(last + 1, headerBytes) - first) / (last + 1 - first);
    const arrived = rel(r.firstByteMs) + share * (rel(r.endMs) - rel(r.firstByteMs));
    headerArrived = Math.max(headerArrived ?? -Infinity, arrived);
  }
  // Compute of the unit k before the last byte of unit k + 2: the prefill
  // keeps up with the download.
  let keptUp = 0;
  let pairs = 0;
  for (let k = 0; k + 2 < firstPass.length; ++k) {
    if (firstPass[k + 2].ioEndMs <= 0) continue;
    pairs += 1;
    if (firstPass[k].computeStartMs < firstPass[k + 2].ioEndMs) keptUp += 1;
  }
  // What receiving the bytes costs the compute on two cores: a block's
  // compute that ended before the last byte against one that started after
  // it (a model's blocks do about the same work; one across it counts in
  // neither).
  const blockMs = { arriving: [], after: [] };
  for (const e of firstPass) {
    if (!/^block \d+$/.test(loader.units[e.unit]?.name ?? '') || !(e.computeEndMs > 0) || lastByte === null) continue;
    if (at(e.computeEndMs) <= lastByte) blockMs.arriving.push(e.computeEndMs - e.computeStartMs);
    else if (at(e.computeStartMs) >= lastByte) blockMs.after.push(e.computeEndMs - e.computeStartMs);
  }
  const mean = (xs) => (xs.length ? xs.reduce((sum, x) => sum + x, 0) / xs.length : null);
  const cpuAt = (ms) => {
    const samples = result.cpu ?? [];
    const epoch = t0 + ms;
    let best = samples[0];
    for (const sample of samples) if (sample.atMs <= epoch) best = sample;
    return best;
  };
  const cpuStart = cpuAt(0);
  const cpuEnd = cpuAt(firstToken);
  const cpu = {};
  for (const kind of ['renderer', 'network', 'browser', 'otherBrowser', 'gpu', 'server']) {
    cpu[kind] = cpuEnd && cpuStart ? cpuEnd[kind] - cpuStart[kind] : null;
  }
  const transferMs = (fileBytes / (mbps * 1e6)) * 1000;
  const afterHeaderTransferMs = ((fileBytes - headerBytes) / (mbps * 1e6)) * 1000;
  return {
    workerStarted: rel(result.loadTimes.workerStartedAt),
    moduleReady: rel(result.loadTimes.moduleReadyAt),
    headerRead,
    loadResolved: result.loadMs,
    firstRequest: requests.length ? Math.min(...requests.map((r) => rel(r.startMs))) : null,
    firstByte,
    lastByte,
    linkBusyMs: busy,
    requests: requests.length,
    headerBytes,
    promptCalled: rel(result.timeOriginMs + result.cold.callMs),
    firstCompute: at(firstPass[0]?.computeStartMs ?? 0),
    lastUnitIoEnd: at(Math.max(...firstPass.map((e) => e.ioEndMs))),
    lastCompute: at(firstPass[firstPass.length - 1]?.computeEndMs ?? 0),
    firstToken,
    keptUp,
    pairs,
    blockComputeMs: { whileArriving: mean(blockMs.arriving), blocksWhileArriving: blockMs.arriving.length,
                      after: mean(blockMs.after), blocksAfter: blockMs.after.length },
    cpuMs: cpu,
    transferMs,
    ttftOverTransfer: firstToken / transferMs,
    headerArrived,
    afterHeaderOverTransfer: headerArrived === null ? null : (firstToken - headerArrived) / afterHeaderTransferMs,
  };
}

function printTables(o, rows, meta) {
  const out = [];
  out.push('');
  out.push(`SipLLM (${meta.sipllmBuild ?? o.sipllmBuild} build${meta.sipllmKernels ? `: ${meta.sipllmKernels}` : ''}) / wllama ${meta.wllamaVersion} in ${meta.browser}, ${meta.cores} cores; ` +
           `${o.promptTokens}-token prompt, ${o.genTokens} greedy tokens, context ${o.context}; ` +
           `models served ${o.mbps > 0 ? `at ${o.mbps} MB/s` : 'uncapped'} from localhost` +
           `${o.latencyMs > 0 ? ` with ${o.latencyMs} ms latency` : ''}; ${meta.date}`);
  out.push('Each cell: SipLLM / wllama; ×: SipLLM ÷ wllama. ' +
           (o.warmRuns > 0
             ? `Prefill: best of ${o.warmRuns} warm run${o.warmRuns === 1 ? '' : 's'}; decode: best of all ${o.warmRuns + 1} runs` +
               (o.rounds > 1 ? `, in each of ${o.rounds} rounds (the best round counts; the rest of a row is its first round's)` : '')
             : 'No warm runs: decode from the cold run, no prefill') +
           '; peak: the renderer process\'s peak RSS (the page\'s own share included: Chromium\'s code and the ' +
           'page, 110-160 MiB before any model); peak − heap: what it held beside the WebAssembly heap.' +
           (o.coldRuns > 1 ? ` SipLLM's cells: its run with the median cold TTFT of ${o.coldRuns}, each in a fresh browser.` : ''));
  const vocabs = [...new Set(rows.map((r) => r.model.vocab))];
  out.push(`Greedy; both engines get the same text and the same banned tokens (byte, control, EOS): ${vocabs.join('; ')}.`);
  out.push('');
  out.push('| model | type | MiB | thr | load ms | cold TTFT ms | × (≤0.5) | prefill tok/s | × (≥5) | ' +
           'decode tok/s | × (≥2.5) | peak MiB | SipLLM peak − heap MiB | prompt tok | gen tok | same text |');
  out.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  const notes = [];
  const tally = { decode: [0, 0], prefill: [0, 0], coldTtft: [0, 0] };
  for (const row of rows) {
    const s = row.s && !row.s.error ? row.s : {};
    const w = row.w && !row.w.error ? row.w : {};
    const ttftRatio = ratio(s.coldTtftMs, w.coldTtftMs);
    const prefillRatio = ratio(s.prefillTokS, w.prefillTokS);
    const decodeRatio = ratio(s.decodeTokS, w.decodeTokS);
    const count = (key, value, met) => {
      if (value === null) return;
      tally[key][1] += 1;
      if (met) tally[key][0] += 1;
    };
    count('coldTtft', ttftRatio, ttftRatio !== null && ttftRatio <= TARGETS.coldTtft);
    count('prefill', prefillRatio, prefillRatio !== null && prefillRatio >= TARGETS.prefill);
    count('decode', decodeRatio, decodeRatio !== null && decodeRatio >= TARGETS.decode);
    let same = '–';
    if (s.text !== undefined && w.text !== undefined) {
      const n = commonPrefix(s.text, w.text);
      same = n === s.text.length && n === w.text.length ? 'yes' : `${n} of ${Math.max(s.text.length, w.text.length)} ch`;
    }
    const cellError = (r) => (r?.error ? 'error' : null);
    out.push(`| ${row.model.shape} | ${row.model.type} | ${fmt(row.model.bytes / MiB)} | ${row.threads} | ` +
             `${cellError(row.s) ?? fmt(s.loadMs)} / ${cellError(row.w) ?? fmt(w.loadMs)} | ` +
             `${pair(s.coldTtftMs, w.coldTtftMs)} | ${fmt(ttftRatio, 2)} | ` +
             `${tokS(s.prefillTokS)} / ${tokS(w.prefillTokS)} | ${fmt(prefillRatio, 1)} | ` +
             `${tokS(s.decodeTokS)} / ${tokS(w.decodeTokS)} | ${fmt(decodeRatio, 2)} | ` +
             `${pair(s.peakBytes / MiB, w.peakBytes / MiB)} | ` +
             `${s.peakBytes && s.heapBytes ? fmt((s.peakBytes - s.heapBytes) / MiB) : '–'} | ${pair(s.promptTokens, w.promptTokens)} | ` +
             `${pair(s.generatedTokens, w.generatedTokens)} | ${same} |`);
    checkRow(o, row, notes);
  }
  out.push('');
  const verdict = (key, text) => {
    const [met, of] = tally[key];
    return `${text}: ${of === 0 ? 'not measured' : `met in ${met} of ${of} rows`}`;
  };
  out.push(`Targets: ${verdict('decode', `decode ≥ ${TARGETS.decode}×`)}; ${verdict('prefill', `prefill ≥ ${TARGETS.prefill}×`)}; ` +
           `${verdict('coldTtft', `cold TTFT ≤ ${TARGETS.coldTtft}× wllama's`)}.`);

  const natives = rows.filter((row) => row.native);
  if (natives.length > 0) {
    out.push('');
    out.push(`SipLLM in ${meta.browser} against its native build on the same files and threads: the WebAssembly ` +
             `penalty. Native: \`sipllm bench\` of build/native (Release, -march=native: ${natives.find((row) => row.native.kernels)?.native.kernels ?? '–'}), ` +
             `${o.promptTokens}-token prompt, ${o.genTokens} greedy tokens, best of ${Math.max(1, o.warmRuns)}` +
             `${o.rounds > 1 ? ` in each of ${o.rounds} rounds` : ''}; ` +
             'its prefill with the weights already in memory, as a warm browser run has them. The last column puts ' +
             'both prefills in multiply-adds per second in the blocks\' matrices beside the native build\'s dot product ' +
             'peak (its 8-bit instruction alone, as many threads); WebAssembly\'s 128-bit one is lower: the kernel ' +
             'benchmark\'s `dot product peak` case in Chromium (scripts/bench-kernels-wasm.sh --relaxed --chromium peak).');
    out.push('');
    out.push('| model | type | thr | prefill tok/s browser / native | × | decode tok/s browser / native | × | ' +
             'prefill G multiply-adds/s browser / native (native dot product peak) |');
    out.push('|---|---|--:|--:|--:|--:|--:|--:|');
    for (const row of natives) {
      const s = row.s && !row.s.error ? row.s : {};
      const n = row.native.error ? {} : row.native;
      const nativeCell = (v) => (row.native.error ? 'error' : tokS(v));
      // A prompt token's multiply-adds in the blocks' matrices, as `sipllm bench` counts them.
      const gmacs = (tokSValue) => (n.macsPerToken && tokSValue ? fmt(n.macsPerToken * tokSValue / 1e9, 1) : '–');
      out.push(`| ${row.model.shape} | ${row.model.type} | ${row.threads} | ${tokS(s.prefillTokS)} / ${nativeCell(n.prefill)} | ` +
               `${fmt(ratio(s.prefillTokS, n.prefill), 2)} | ${tokS(s.decodeTokS)} / ${nativeCell(n.decode)} | ` +
               `${fmt(ratio(s.decodeTokS, n.decode), 2)} | ${gmacs(s.prefillTokS)} / ${gmacs(n.prefill)} ` +
               `(${n.peakGmacs ? fmt(n.peakGmacs, 1) : '–'}) |`);
    }
  }

  const peers = rows.filter((row) => row.llamaCpp);
  if (peers.length > 0) {
    out.push('');
    const each = o.rounds > 1;
    out.push(`SipLLM in ${meta.browser} against native llama.cpp on the same files and threads, measured right after ` +
             `each row's browser runs: ${LLAMA_CPP_PEER}'s prebuilt CPU binary, context 512, batch 512, ` +
             `${o.promptTokens}-token prompt, ${o.genTokens} greedy tokens, best of ${Math.max(1, o.warmRuns)}` +
             (each ? ` in each of ${o.rounds} rounds; the figures are each side's best round, the last columns every ` +
                     'round\'s ratio, both sides measured a minute apart.' : '.'));
    out.push('');
    out.push('| model | type | thr | prefill tok/s browser / llama.cpp | × | decode tok/s browser / llama.cpp | × |' +
             (each ? ' prefill × each round | decode × each round |' : ''));
    out.push(`|---|---|--:|--:|--:|--:|--:|${each ? '--:|--:|' : ''}`);
    const roundRatios = (row, key) => row.rounds
      .map((r) => fmt(ratio(r.sipllm?.[key] ?? null, r.llamaCppNative?.[key] ?? null), 2)).join(' ');
    for (const row of peers) {
      const s = row.s && !row.s.error ? row.s : {};
      const l = row.llamaCpp.error ? {} : row.llamaCpp;
      const peerCell = (v) => (row.llamaCpp.error ? 'error' : tokS(v));
      out.push(`| ${row.model.shape} | ${row.model.type} | ${row.threads} | ${tokS(s.prefillTokS)} / ${peerCell(l.prefill)} | ` +
               `${fmt(ratio(s.prefillTokS, l.prefill), 2)} | ${tokS(s.decodeTokS)} / ${peerCell(l.decode)} | ` +
               `${fmt(ratio(s.decodeTokS, l.decode), 2)} |` +
               (each ? ` ${roundRatios(row, 'prefill')} | ${roundRatios(row, 'decode')} |` : ''));
    }
  }

  if (o.mbps > 0) {
    out.push('');
    out.push(`Cold time to first token behind a ${o.mbps} MB/s link, against the pure transfer time of the file ` +
             '(target for SipLLM: ≤ 1.15× transfer, prefill running while blocks arrive).');
    out.push('');
    out.push('Transfer: the file\'s bytes at the cap; download: the time this browser took to download the file alone ' +
             'over the same link, in the engine\'s request pattern (2 MiB ranges, two at a time), in a fresh browser.');
    const spread = o.coldRuns > 1;
    if (spread) {
      out.push('');
      out.push(`SipLLM's figures are those of the run with the median cold TTFT of ${o.coldRuns}, each in a fresh ` +
               'browser; "runs ÷ transfer" gives all of them, fastest to slowest.');
    }
    out.push('');
    out.push('| model | type | MB | thr | transfer s | download s | SipLLM TTFT s | ÷ transfer | ' +
             `${spread ? 'runs ÷ transfer | ' : ''}÷ download | wllama TTFT s | ÷ transfer | SipLLM ÷ wllama |`);
    out.push(`|---|---|--:|--:|--:|--:|--:|--:|${spread ? '--:|' : ''}--:|--:|--:|--:|`);
    for (const row of rows) {
      const s = row.s && !row.s.error ? row.s : {};
      const w = row.w && !row.w.error ? row.w : {};
      const transferS = row.model.bytes / (o.mbps * 1e6);
      const sS = s.coldTtftMs !== undefined ? s.coldTtftMs / 1000 : null;
      const wS = w.coldTtftMs !== undefined ? w.coldTtftMs / 1000 : null;
      const downloadS = row.download && !row.download.error ? row.download.downloadMs / 1000 : null;
      const runs = spread ? `${(row.coldTtftRuns ?? []).map((ms) => fmt(ratio(ms / 1000, transferS), 2)).join(', ')} | ` : '';
      out.push(`| ${row.model.shape} | ${row.model.type} | ${fmt(row.model.bytes / 1e6)} | ${row.threads} | ` +
               `${fmt(transferS, 2)} | ${fmt(downloadS, 2)} | ${fmt(sS, 2)} | ${fmt(ratio(sS, transferS), 2)} | ${runs}` +
               `${fmt(ratio(sS, downloadS), 2)} | ${fmt(wS, 2)} | ${fmt(ratio(wS, transferS), 2)} | ${fmt(ratio(sS, wS), 2)} |`);
    }
    const breakdowns = rows.filter((row) => row.coldBreakdown);
    if (breakdowns.length > 0) {
      out.push('');
      out.push('Where SipLLM\'s cold time went, in ms from the load() call (page, model server and engine clocks lined up): ' +
               'the engine worker started, its module and thread pool were ready, the header was read; the model ' +
               'server saw the first range request, sent the first and the last byte (link busy: share of that span ' +
               'with a body in flight); the prompt was given; the first unit\'s compute started; the last unit\'s ' +
               'compute ended; the first token reached the page. After header: the time from the header\'s last ' +
               'byte to the first token against the transfer of the bytes after the header. Kept up: units whose compute started before the last ' +
               'byte of the unit two further on. Block ms: a block\'s mean compute time while bytes still arrived ' +
               '(its compute ended before the last byte) and after the last byte, with how many blocks each; on a ' +
               'machine doing nothing else, the difference is what receiving the bytes takes from the compute. ' +
               'CPU: seconds used by the page\'s renderer (engine worker, compute threads), Chromium\'s network ' +
               'service and the model server, from load() to the first token.');
      out.push('');
      out.push('| model | type | thr | worker | module | header | 1st request | 1st byte | last byte | link busy | prompt | ' +
               '1st compute | last compute | 1st token | ÷ transfer | after header ÷ | kept up | block ms arriving / after | ' +
               'CPU s renderer / network / server |');
      out.push('|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
      for (const row of breakdowns) {
        const b = row.coldBreakdown;
        const cpu = (kind) => fmt(b.cpuMs[kind] === null ? null : b.cpuMs[kind] / 1000, 2);
        const blockMs = (m) => `${fmt(m.whileArriving, 1)} (${m.blocksWhileArriving}) / ${fmt(m.after, 1)} (${m.blocksAfter})`;
        out.push(`| ${row.model.shape} | ${row.model.type} | ${row.threads} | ${fmt(b.workerStarted)} | ${fmt(b.moduleReady)} | ` +
                 `${fmt(b.headerRead)} | ${fmt(b.firstRequest)} | ${fmt(b.firstByte)} | ${fmt(b.lastByte)} | ` +
                 `${fmt((100 * b.linkBusyMs) / (b.lastByte - b.firstByte))} % | ${fmt(b.promptCalled)} | ${fmt(b.firstCompute)} | ` +
                 `${fmt(b.lastCompute)} | ${fmt(b.firstToken)} | ${fmt(b.ttftOverTransfer, 2)} | ${fmt(b.afterHeaderOverTransfer, 2)} | ` +
                 `${b.keptUp}/${b.pairs} | ${blockMs(b.blockComputeMs)} | ` +
                 `${cpu('renderer')} / ${cpu('network')} / ${cpu('server')} |`);
      }
    }
  }
  const splits = rows.filter((row) => row.s?.decodeSplit);
  if (splits.length > 0) {
    out.push('');
    out.push('Where SipLLM\'s decode time went, per token, by the engine\'s clocks in its fastest run: the loops its ' +
             'compute threads split (how many, the time in them, of that the wait for the last thread\'s chunks), ' +
             'and the rest, which ran on one thread (sampling, the token\'s way out, loader hand-offs).');
    out.push('');
    out.push('| model | type | thr | ms/token | loops | in loops ms | waiting ms | one thread ms |');
    out.push('|---|---|--:|--:|--:|--:|--:|--:|');
    for (const row of splits) {
      const d = row.s.decodeSplit;
      out.push(`| ${row.model.shape} | ${row.model.type} | ${row.threads} | ${fmt(d.msPerToken, 2)} | ${fmt(d.loopsPerToken)} | ` +
               `${fmt(d.loopMsPerToken, 2)} | ${fmt(d.waitMsPerToken, 2)} | ${fmt(d.oneThreadMsPerToken, 2)} |`);
    }
  }
  if (notes.length > 0) {
    out.push('');
    out.push('Notes:');
    for (const note of notes) out.push(`- ${note}`);
  }
  out.push('');
  console.log(out.join('\n'));
  return out.join('\n');
}

// ---- Main -----------------------------------------------------------------------------------

async function main() {
  let o;
  try {
    o = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`bench: ${error.message}`);
    process.exit(2);
  }
  prepareBuilds(o);
  const models = ensureModels(o);
  await preparePrompts(o, models);

  const pageServer = await startRangeServer({
    mounts: [
      { prefix: '/bench', dir: join(repoRoot, 'scripts/bench/page') },
      { prefix: '/web', dir: join(repoRoot, 'web') },
      { prefix: '/node_modules', dir: join(repoRoot, 'node_modules') },
      ...(o.wasmDir === null ? [] : [{ prefix: '/sipllm-wasm', dir: o.wasmDir }]),
    ],
  });
  const modelServer = await startRangeServer({ root: o.modelsDir, mbps: o.mbps, latencyMs: o.latencyMs });
  const pageUrl = `${pageServer.url}/bench/index.html`;
  const wllamaVersion = JSON.parse(readFileSync(join(repoRoot, 'node_modules/@wllama/wllama/package.json'), 'utf8')).version;
  const meta = { wllamaVersion, browser: 'Chromium', cores: null, date: new Date().toISOString() };

  const log = [];
  const total = o.rounds * models.length * o.threads.length * o.engines.length;
  // One engine run in a fresh browser; a failure becomes the run's error.
  const runOnce = async (engine, config) => {
    try {
      return await runInBrowser(o, pageUrl, modelServer, engine, config, log);
    } catch (error) {
      return { error: error.message.split('\n')[0] };
    }
  };
  // SipLLM's cold runs of a row, each in a fresh browser; the one with the
  // median cold TTFT (of an even count, the faster middle one; failed runs
  // count as the slowest) stands for the row.
  const runSipllm = async (config, label) => {
    const results = [];
    for (let k = 0; k < o.coldRuns; ++k) {
      if (o.coldRuns > 1) process.stdout.write(`${k === 0 ? '' : `${label}: `}cold run ${k + 1} of ${o.coldRuns}: `);
      results.push(await runOnce('sipllm', config));
      if (o.coldRuns > 1) {
        const summary = summarize(results[k]);
        console.log(summary.error ? `error: ${summary.error}` : `cold TTFT ${fmt(summary.coldTtftMs)} ms`);
      }
    }
    if (o.coldRuns > 1) process.stdout.write(`${label}: the median run: `);
    const ttft = (result) => summarize(result).coldTtftMs ?? Infinity;
    const sorted = [...results].sort((a, b) => ttft(a) - ttft(b));
    return { result: sorted[Math.floor((sorted.length - 1) / 2)], coldTtftRuns: sorted.map(ttft) };
  };
  // The native peers of a row, right after its browser runs (never beside
  // them: two cores), so that both sides meet the host in the same minute.
  const llama = o.llamaCpp ? await loadLlamaCpp() : null;
  const measurePeers = async (row) => {
    const figures = { threads: row.threads, promptTokens: o.promptTokens, genTokens: o.genTokens, runs: Math.max(1, o.warmRuns) };
    const name = `${row.model.shape} ${row.model.type} ${row.threads}t`;
    if (o.native && o.engines.includes('sipllm')) {
      process.stdout.write(`${name} sipllm native: `);
      try {
        row.native = nativeBenchFigures(o.cli, row.model.path, figures);
        console.log(`prefill ${tokS(row.native.prefill)} tok/s, decode ${tokS(row.native.decode)} tok/s`);
      } catch (error) {
        row.native = { error: error.message.split('\n')[0] };
        console.log(`error: ${row.native.error}`);
      }
    }
    if (llama) {
      process.stdout.write(`${name} llama.cpp native: `);
      try {
        row.llamaCpp = await llamaCppFigures(llama, row.model.path, figures);
        console.log(`prefill ${tokS(row.llamaCpp.prefill)} tok/s, decode ${tokS(row.llamaCpp.decode)} tok/s`);
      } catch (error) {
        row.llamaCpp = { error: error.message.split('\n')[0] };
        console.log(`error: ${row.llamaCpp.error}`);
      }
    }
  };
  // Behind a capped link: how long this browser takes to download the file
  // alone, in the engine's request pattern (2 MiB ranges, 2 at once).
  const downloadAlone = async (model) => {
    process.stdout.write(`${model.shape} ${model.type}: download alone: `);
    const download = await runOnce('download', { url: `${modelServer.url}/${model.file}`, pieceBytes: 2 << 20, inFlight: 2 });
    console.log(download.error ? `error: ${download.error}` : `${fmt(download.downloadMs)} ms`);
    return download;
  };
  let done = 0;
  // One row of the matrix in one round: each engine in the browser, then
  // the native peers.
  const measureRow = async (model, threads, round, download) => {
    const row = { model, threads, s: null, w: null, raw: {}, download };
    for (const engine of o.engines) {
      done += 1;
      const label = `[${done}/${total}] ${model.shape} ${model.type} ${threads}t ${engine}${o.rounds > 1 ? ` (round ${round + 1})` : ''}`;
      process.stdout.write(`${label}: `);
      const config = {
        url: `${modelServer.url}/${model.file}`, threads, prompt: model.prompt, maxTokens: o.genTokens,
        ban: model.ban, contextLength: o.context, warmRuns: o.warmRuns, seed: o.seed,
        sipllmWasmBase: o.wasmDir === null ? null : '/sipllm-wasm/', sipllmBuild: o.sipllmBuild,
      };
      log.push(label);
      let result;
      if (engine === 'sipllm') {
        const runs = await runSipllm(config, label);
        result = runs.result;
        row.coldTtftRuns = runs.coldTtftRuns;
      } else {
        result = await runOnce(engine, config);
      }
      if (result.browserVersion) meta.browser = `Chromium ${result.browserVersion}`;
      if (result.cores) meta.cores = result.cores;
      if (engine === 'sipllm' && result.build) meta.sipllmBuild = result.build;
      if (engine === 'sipllm' && result.kernels) meta.sipllmKernels = result.kernels;
      if (result.crossOriginIsolated === false) result.error ??= 'the bench page was not cross-origin isolated';
      const summary = summarize(result);
      row.raw[engine] = result;
      if (engine === 'sipllm') {
        row.s = summary;
        if (o.mbps > 0 && !summary.error) row.coldBreakdown = coldBreakdown(result, model.bytes, await tensorDataStart(model.path), o.mbps);
      }
      else row.w = summary;
      console.log(summary.error
        ? `error: ${summary.error}`
        : `load ${fmt(summary.loadMs)} ms, cold TTFT ${fmt(summary.coldTtftMs)} ms, ` +
          `prefill ${tokS(summary.prefillTokS)} tok/s, decode ${tokS(summary.decodeTokS)} tok/s` +
          `${o.warmRuns === 0 ? ' (cold)' : ''}, peak ${fmt(summary.peakBytes / MiB)} MiB` +
          `${result.heapBytes ? ` (WebAssembly heap ${fmt(result.heapBytes / MiB)} MiB)` : ''}, ` +
          `${summary.promptTokens} prompt / ${summary.generatedTokens} generated tokens`);
    }
    await measurePeers(row);
    return row;
  };
  const rounds = [];
  try {
    for (let round = 0; round < o.rounds; ++round) {
      const roundRows = [];
      for (const model of models) {
        const download = o.mbps > 0 && round === 0 ? await downloadAlone(model) : null;
        for (const threads of o.threads) roundRows.push(await measureRow(model, threads, round, download));
      }
      rounds.push(roundRows);
    }
  } finally {
    await pageServer.close();
    await modelServer.close();
  }
  const rows = rounds[0].map((row, i) => mergeRounds(rounds.map((r) => r[i])));

  const table = printTables(o, rows, meta);
  const jsonPath = o.json ?? join(repoRoot, 'build/bench', `results-${meta.date.replace(/[:.]/g, '-')}.json`);
  mkdirSync(dirname(jsonPath), { recursive: true });
  writeFileSync(jsonPath, JSON.stringify({
    options: {
      ...o, modelsDir: relative(repoRoot, o.modelsDir), cli: relative(repoRoot, o.cli), vocab: o.vocab ? relative(repoRoot, o.vocab) : 'per shape',
      wasmDir: o.wasmDir === null ? null : relative(repoRoot, o.wasmDir),
    },
    meta,
    table,
    rows: rows.map((r) => ({
      model: { shape: r.model.shape, type: r.model.type, file: r.model.file, bytes: r.model.bytes, vocab: r.model.vocab },
      threads: r.threads, sipllm: r.s, wllama: r.w, sipllmNative: r.native ?? null, llamaCppNative: r.llamaCpp ?? null,
      coldTtftRuns: r.coldTtftRuns ?? null, rounds: r.rounds,
      coldBreakdown: r.coldBreakdown ?? null, download: r.download ?? null, raw: r.raw,
    })),
    prompt: models[0]?.prompt,
    pageLog: log,
  }, null, 1));
  console.log(`figures: ${relative(process.cwd(), jsonPath)}`);
}

main().catch((error) => {
  console.error(`bench: ${error.message}`);
  process.exit(1);
});

#!/usr/bin/env node
// Models larger than the tab, in Chromium: an 8B model split in parts,
// loaded within a memory budget, first over a capped link, then from the
// persistent cache (OPFS) alone; and a 1B model within a quarter of its size
// against the same model unbudgeted. Prints a table and checks the promises;
// exits 1 when one does not hold.
//
//   npm run bench:large                    the whole run (about 20 minutes)
//   npm run bench:large -- --models llama-3.2-1b
//   npm run bench:large -- --help          every option
//
// Per model and budget, a fresh browser profile on disk (so that OPFS is a
// real disk tier, as in a user's browser, not an in-memory incognito store):
//   1. the OPFS read bandwidth in that page (a file written, then read back
//      through a synchronous access handle in a worker, in unit-sized pieces);
//   2. load 1: SipLLM.load() of the first part's URL with `memoryBudget` and
//      `cache: true`, one greedy generation of --gen-tokens after a
//      --prompt-tokens prompt, unload. The weights stream over the capped link
//      while the prompt runs; units the budget does not keep are read again
//      for every token, from OPFS once fetched;
//   3. load 2: the same in the same page, the model server's log reset in
//      between: every byte must come from OPFS (zero network bytes).
// Tab memory is the renderer process's peak resident set (VmHWM: the page,
// its workers and the WebAssembly memory), read from /proc after each load;
// it must stay within the budget plus --overhead-mb (500 MB by default: the
// page alone, 130-160 MB here, and 240-340 MB beside the budgeted heap, the
// fixed parts demo/e2e/memory-bound.spec.ts lists; measured 367 MB over the
// budget for the 8B set's first load, 453 for the 1B at a quarter, 392 for
// lfm2-8b-a1b at 1.5 GB). Beside it: the page's
// resident set before any model (the browser's own share) and the engine's
// WebAssembly heap (which the budget bounds, with the KV cache and scratch).
// The demo page (its production build) then loads the 8B set through its
// form with the first budget, cache on, in a fresh profile, and completes the
// same prompt greedily: it must generate, within the budget, the text the
// bench page generated (up to where the demo, which bans no token, may stop
// at an end-of-generation token).
// wllama (llama.cpp in WebAssembly) then gets the same split set in a fresh
// browser, for the record: what it did is printed.
//
// Figures: TTFT from the load() call; decode tok/s = (generated - 1) / (first
// .. last piece on the page); bytes/token = the loader's bytes read during
// decode / decode steps; "of OPFS" = decode tok/s against what the measured
// OPFS bandwidth allows for those bytes (OPFS GB/s / bytes per token).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join, relative, resolve } from 'node:path';

import { chromium } from 'playwright-core';

import { startRangeServer } from '../range-server.mjs';
import { readVocab } from './gguf-vocab.mjs';
import { CHROMIUM_ARGS, fitPrompt, fmt, rendererMemoryBytes, repoRoot, run, withTimeout } from './support.mjs';

const MODELS = {
  // Budgets in GB (1e9 bytes); null: no budget.
  'llama-3.1-8b': { parts: 4, budgets: [1.5, 3] },
  'llama-3.2-1b': { parts: 1, budgets: ['quarter', null] },
  // A mixture of experts (4.7 GB at Q4_K_M): more than a WebAssembly heap
  // holds, so budgeted only; its experts stream by the unit.
  'lfm2-8b-a1b': { parts: 1, budgets: [1.5] },
};
const GB = 1e9;
const MB = 1e6;

const USAGE = `usage: npm run bench:large -- [options]
  --models LIST      ${Object.keys(MODELS).join(', ')}
                     (default: llama-3.1-8b, llama-3.2-1b)
  --type T           quantization (default Q4_K_M)
  --engines LIST     sipllm, demo, wllama (default: all; the demo and wllama run the 8B set once)
  --budgets LIST     only these of each model's budgets (GB, 'quarter', 'none')
  --mbps X           the model server's cap in MB/s (default 200)
  --threads N        compute threads (default 2)
  --prompt-tokens N  (default 128)
  --gen-tokens N     greedy, exactly N (default 16)
  --context N        (default 512)
  --overhead-mb N    what the tab may hold beyond the budget (default 500)
  --opfs-mb N        the OPFS bandwidth probe's file (default 1024)
  --models-dir DIR   (default build/bench-models)
  --timeout S        per load (default 1800)
  --json FILE        (default build/bench/large-DATE.json)
`;

function parseOptions(argv) {
  const o = {
    models: ['llama-3.1-8b', 'llama-3.2-1b'], type: 'Q4_K_M', engines: ['sipllm', 'demo', 'wllama'], budgets: null, mbps: 200, threads: 2,
    promptTokens: 128, genTokens: 16, context: 512, overheadMb: 500, opfsMb: 1024,
    modelsDir: join(repoRoot, 'build/bench-models'), timeoutS: 1800, json: null,
    cli: process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm'),
    chromium: process.env.CHROMIUM ?? '/usr/bin/chromium',
  };
  const number = (flag, v) => {
    const n = Number(v);
    if (!(n > 0)) throw new Error(`${flag} wants a number > 0, got '${v}'`);
    return n;
  };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--models':
        o.models = value().split(',');
        for (const m of o.models) if (!(m in MODELS)) throw new Error(`--models: '${m}' is not one of ${Object.keys(MODELS).join(', ')}`);
        break;
      case '--type': o.type = value(); break;
      case '--engines': o.engines = value().split(','); break;
      case '--budgets': o.budgets = value().split(','); break;
      case '--mbps': o.mbps = number(flag, value()); break;
      case '--threads': o.threads = number(flag, value()); break;
      case '--prompt-tokens': o.promptTokens = number(flag, value()); break;
      case '--gen-tokens': o.genTokens = number(flag, value()); break;
      case '--context': o.context = number(flag, value()); break;
      case '--overhead-mb': o.overheadMb = number(flag, value()); break;
      case '--opfs-mb': o.opfsMb = number(flag, value()); break;
      case '--models-dir': o.modelsDir = resolve(value()); break;
      case '--timeout': o.timeoutS = number(flag, value()); break;
      case '--json': o.json = resolve(value()); break;
      case '--help': case '-h': process.stdout.write(USAGE); process.exit(0); break;
      default: throw new Error(`unknown option '${flag}' (see --help)`);
    }
  }
  return o;
}

// The model, written once (`sipllm gen`, the real Llama 3 vocabulary), and
// split into its parts (`sipllm split`) when it has more than one.
function ensureModel(o, shape) {
  const { parts } = MODELS[shape];
  const whole = join(o.modelsDir, `${shape}-${o.type}.gguf`);
  const first = parts === 1 ? whole : join(o.modelsDir, `${shape}-${o.type}-00001-of-${String(parts).padStart(5, '0')}.gguf`);
  if (existsSync(first)) return first;
  const vocab = join(o.modelsDir, 'vocab', 'ggml-vocab-llama3.gguf');
  if (!existsSync(vocab)) {
    mkdirSync(dirname(vocab), { recursive: true });
    run('tar', ['-xJf', join(repoRoot, 'tests/fixtures/vocab/ggml-vocab-llama3.gguf.tar.xz'), '-C', dirname(vocab)],
        'unpacking the Llama 3 vocabulary');
  }
  if (!existsSync(whole)) run(o.cli, ['gen', '--shape', shape, '--type', o.type, '--vocab', vocab, '-o', whole], `writing ${whole}`);
  if (parts > 1) {
    run(o.cli, ['split', '--parts', String(parts), whole, join(o.modelsDir, `${shape}-${o.type}`)], `splitting ${whole}`);
    rmSync(whole);
  }
  return first;
}

function partUrls(baseUrl, first, parts) {
  if (parts === 1) return [`${baseUrl}/${basename(first)}`];
  return Array.from({ length: parts }, (_, i) =>
    `${baseUrl}/${basename(first).replace(/-00001-of-/, `-${String(i + 1).padStart(5, '0')}-of-`)}`);
}

function modelBytes(o, first, parts) {
  return partUrls('', first, parts).reduce((sum, url) => sum + statSync(join(o.modelsDir, basename(url))).size, 0);
}

// One browser with a fresh profile on disk (OPFS on disk, as in a user's
// browser; a context without a profile keeps OPFS in memory, within a small
// quota); `body(page, browserVersion)` runs in its page.
async function withBrowser(o, pageUrl, body, ready = (page) => page.waitForFunction(() => globalThis.benchReady === true, null, { timeout: 60_000 })) {
  const profile = mkdtempSync(join(tmpdir(), 'sipllm-bench-profile-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: o.chromium, args: CHROMIUM_ARGS });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    page.on('pageerror', (error) => console.log(`  [page error] ${error.message}`));
    await page.goto(pageUrl);
    await ready(page);
    // (The user agent string gives only the major version.)
    const browserVersion = execFileSync(o.chromium, ['--version'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split(' built on')[0].trim();
    return await body(page, browserVersion);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}

function evaluate(o, page, fn, config, what) {
  return withTimeout(page.evaluate(([name, cfg]) => globalThis[name](cfg), [fn, config]), o.timeoutS, what);
}

function loadFigures(load, genTokens, networkBytes) {
  const steps = load.run.generatedTokens - 1;
  const decodeMs = load.run.lastMs - load.run.firstMs;
  return {
    ttftS: load.ttftMs / 1000,
    decodeTokS: steps > 0 && decodeMs > 0 ? steps / (decodeMs / 1000) : null,
    bytesPerToken: steps > 0 ? load.decodeBytesRead / steps : null,
    networkBytes,
    fromCacheBytes: load.source?.bytesFromCache ?? null,
    fetchedBytes: load.source?.bytesFetched ?? null,
    generatedTokens: load.run.generatedTokens,
    complete: load.run.generatedTokens === genTokens,
    peakWeightBytes: load.loader.peakWeightBytes,
    workingBytes: load.loader.workingBytes,
    residentUnits: load.loader.residentUnits,
    streamedUnits: load.loader.streamedUnits,
    heapBytes: load.heapBytes,
    build: load.build,
  };
}

async function benchModel(o, servers, model, budget) {
  const bytes = modelBytes(o, model.first, model.parts);
  const memoryBudget = budget === null ? null : budget === 'quarter' ? Math.round(bytes / 4) : budget * GB;
  const url = partUrls(servers.model.url, model.first, model.parts)[0];
  const config = {
    url, threads: o.threads, prompt: model.prompt, maxTokens: o.genTokens, ban: model.ban, contextLength: o.context,
    memoryBudget, seed: 1,
  };
  return withBrowser(o, servers.pageUrl, async (page, browserVersion) => {
    // The page alone, before any model: the browser's own share of the tab.
    const pageBytes = rendererMemoryBytes('VmRSS');
    const opfs = await evaluate(o, page, 'benchOpfsRead', { bytes: o.opfsMb * 1024 * 1024, pieceBytes: 8 << 20, passes: 3 },
                                'the OPFS probe');
    if (opfs.error) throw new Error(`the OPFS probe: ${opfs.error}`);
    const loads = [];
    for (let i = 0; i < 2; ++i) {
      servers.model.reset();
      const startMs = Date.now();
      const result = await evaluate(o, page, 'benchBudgeted', config, `load ${i + 1} of ${model.shape}`);
      if (result.error) throw new Error(`load ${i + 1}: ${result.error}`);
      const { log } = servers.model.stats;
      const networkBytes = log.reduce((sum, e) => sum + e.bytes, 0);
      // A load from the cache keeps its requests, so that the check names them.
      const requests = i === 0 ? undefined : log.map(({ url, range, status, bytes, startMs: at }) => ({
        url, range, status, bytes, afterMs: Math.round(at - startMs),
      }));
      loads.push({ ...loadFigures(result, o.genTokens, networkBytes), peakTabBytes: rendererMemoryBytes(), raw: result, requests });
    }
    return { shape: model.shape, parts: model.parts, bytes, memoryBudget, opfs, loads, pageBytes, browserVersion };
  });
}

async function benchWllama(o, servers, model) {
  servers.model.reset();
  // (wllama keeps what it downloads in OPFS, even with useCache: false.)
  return withBrowser(o, servers.pageUrl, async (page) => {
    const result = await evaluate(o, page, 'benchWllamaSplit', {
      url: partUrls(servers.model.url, model.first, model.parts)[0], threads: o.threads, prompt: model.prompt, maxTokens: o.genTokens, ban: model.ban, contextLength: o.context, seed: 1,
    }, `wllama on ${model.shape}`).catch((error) => ({ error: error.message.split('\n')[0] }));
    return { ...result, networkBytes: servers.model.stats.bytes, peakTabBytes: rendererMemoryBytes() };
  });
}

// The demo's production build (vite build), in a folder of its own.
function buildDemo() {
  const outDir = mkdtempSync(join(tmpdir(), 'sipllm-bench-demo-'));
  run(join(repoRoot, 'demo/node_modules/.bin/vite'), ['build', join(repoRoot, 'demo'), '--outDir', outDir, '--emptyOutDir',
                                                        '--logLevel', 'warn'], 'building the demo');
  return outDir;
}

// The demo page's settled counts (#status data-loads / data-requests) and state.
async function demoStatus(page) {
  return page.locator('#status').evaluate((el) => ({
    loads: Number(el.dataset.loads ?? 0), requests: Number(el.dataset.requests ?? 0), state: el.dataset.state,
  }));
}

async function demoSettle(o, page, what, act) {
  const before = (await demoStatus(page))[what];
  await act();
  await page.waitForFunction(([kind, n]) => Number(document.querySelector('#status').dataset[kind] ?? 0) > n,
                             [what, before], { timeout: o.timeoutS * 1000, polling: 500 });
  return demoStatus(page);
}

// The 8B set through the demo's form: budget, greedy, URL, Load; then the
// prompt in completion mode.
async function benchDemo(o, demoUrl, servers, model, budgetGb) {
  const url = partUrls(servers.model.url, model.first, model.parts)[0];
  servers.model.reset();
  const ready = (page) => page.waitForFunction(() => Number(document.querySelector('#status')?.dataset.loads ?? 0) > 0,
                                               null, { timeout: 120_000 });
  return withBrowser(o, demoUrl, async (page) => {
    const fields = { 'memory-budget': budgetGb * 1000, threads: o.threads, 'context-length': o.context, temperature: 0,
                     'max-tokens': o.genTokens };
    for (const [id, value] of Object.entries(fields)) await page.locator(`#${id}`).fill(String(value));
    const started = Date.now();
    const loaded = await demoSettle(o, page, 'loads', async () => {
      await page.locator('#model-url').fill(url);
      await page.locator('input[name=source][value=url]').check();
      await page.locator('#load').click();
    });
    const error = async () => (await page.locator('#error').innerText()).trim();
    if (loaded.state !== 'ready') return { error: `the load ended '${loaded.state}': ${await error()}` };
    const loadMs = Date.now() - started;
    const done = await demoSettle(o, page, 'requests', async () => {
      await page.locator('#mode-completion').click();
      await page.locator('#prompt').fill(model.prompt);
      await page.locator('#generate').click();
    });
    if (done.state !== 'done') return { error: `the completion ended '${done.state}': ${await error()}` };
    const text = (await page.locator('#output .generated').textContent()) ?? '';
    const stats = await page.evaluate(() => globalThis.sipllmDemo.stats());
    return {
      budget: budgetGb * GB, loadMs, text, stats, networkBytes: servers.model.stats.bytes, peakTabBytes: rendererMemoryBytes(),
    };
  }, ready);
}

// A load's requests as "FILE bytes=A-B (pages P-Q of 1 MiB) at +T ms", one a line.
function describeRequests(requests = []) {
  const page = 1 << 20;
  return requests.map(({ url, range, status, bytes, afterMs }) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(range ?? '');
    const pages = m === null ? '' : ` (pages ${Math.floor(Number(m[1]) / page)}-${Math.floor(Number(m[2]) / page)})`;
    return `\n      ${basename(url)} ${range ?? 'whole'}${pages}: ${status}, ${bytes} bytes, at +${afterMs} ms`;
  }).join('');
}

function report(o, results, wllama, demo) {
  const lines = [];
  const budgetText = (r) => (r.memoryBudget === null ? 'none' : `${fmt(r.memoryBudget / GB, 2)} GB`);
  lines.push(`| model | budget | load | TTFT s | decode tok/s | streamed MB/token | OPFS GB/s | of OPFS | network MB | from cache MB | WebAssembly heap MB | page alone MB | tab peak MB | over budget MB |`);
  lines.push('|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|');
  const failures = [];
  for (const r of results) {
    if (r.error) {
      lines.push(`| ${r.shape} | ${budgetText(r)} | error: ${r.error} |||||||||||`);
      failures.push(`${r.shape} at ${budgetText(r)}: ${r.error}`);
      continue;
    }
    r.loads.forEach((l, i) => {
      const allowed = l.bytesPerToken > 0 ? r.opfs.readGBps * 1e9 / l.bytesPerToken : null;
      l.ofOpfs = allowed === null || l.decodeTokS === null ? null : l.decodeTokS / allowed;
      lines.push(`| ${r.shape} ${o.type}${r.parts > 1 ? ` (${r.parts} parts)` : ''} | ${budgetText(r)} | ${i === 0 ? `network ${o.mbps} MB/s` : 'OPFS'} | ` +
                 `${fmt(l.ttftS, 1)} | ${fmt(l.decodeTokS, 2)} | ${fmt(l.bytesPerToken / MB)} | ${fmt(r.opfs.readGBps, 2)} | ` +
                 `${l.ofOpfs === null ? '–' : `${fmt(100 * l.ofOpfs)} %`} | ${fmt(l.networkBytes / MB)} | ${fmt(l.fromCacheBytes / MB)} | ` +
                 `${fmt(l.heapBytes / MB)} | ${fmt(r.pageBytes / MB)} | ${fmt(l.peakTabBytes / MB)} | ` +
                 `${r.memoryBudget === null ? '–' : fmt((l.peakTabBytes - r.memoryBudget) / MB)} |`);
      const where = `${r.shape} at ${budgetText(r)}, load ${i + 1}`;
      if (!l.complete) failures.push(`${where}: generated ${l.generatedTokens} of ${o.genTokens} tokens`);
      if (r.memoryBudget !== null && l.peakWeightBytes > r.memoryBudget) {
        failures.push(`${where}: the loader held ${fmt(l.peakWeightBytes / MB)} MB of weights, over the budget`);
      }
      if (r.memoryBudget !== null && l.peakTabBytes > r.memoryBudget + o.overheadMb * MB) {
        failures.push(`${where}: the tab peaked at ${fmt(l.peakTabBytes / MB)} MB, over the budget + ${o.overheadMb} MB`);
      }
      if (i > 0 && l.networkBytes !== 0) {
        // Whether the load before stopped caching (a write that failed: a quota, a full disk) tells a cache
        // that lacks what was used from one that was asked for what no load had used.
        const before = r.loads[i - 1].raw.source;
        const caching = before?.caching === false ? `; load ${i} stopped caching: ${before.cacheError}` : '';
        failures.push(`${where}: ${l.networkBytes} bytes came over the network, not from OPFS${caching}: ` +
                      describeRequests(l.requests));
      }
    });
  }
  if (demo) {
    lines.push('');
    const where = 'the demo';
    if (demo.error) {
      lines.push(`The demo page on the ${demo.shape} split set: ${demo.error}`);
      failures.push(`${where}: ${demo.error}`);
    } else {
      const g = demo.stats.lastGeneration;
      const pageText = results.find((r) => r.shape === demo.shape && r.memoryBudget === demo.budget)?.loads?.[0]?.raw?.run?.text;
      const sameText = pageText === undefined ? null : pageText.startsWith(demo.text) && demo.text.length > 0;
      lines.push(`The demo page (production build) on the same ${demo.shape} split set, budget ${fmt(demo.budget / GB, 2)} GB, ` +
                 `cache on, ${demo.stats.threads} threads, ${demo.stats.build} build: loaded (header) in ${fmt(demo.loadMs / 1000, 1)} s; ` +
                 `${g.generatedTokens} tokens, TTFT ${fmt(g.ttftMs / 1000, 1)} s, decode ${fmt(g.decodeTokensPerS ?? 0, 2)} tok/s; ` +
                 `weights ${fmt(demo.stats.loader.peakWeightBytes / MB)} MB at most; WebAssembly heap ${fmt(demo.stats.heapBytes / MB)} MB; ` +
                 `tab peak ${fmt(demo.peakTabBytes / MB)} MB; ${fmt(demo.networkBytes / MB)} MB downloaded; ` +
                 (sameText === null ? 'no bench-page run at this budget to compare the text with.'
                   : sameText ? "the bench page's text." : "NOT the bench page's text."));
      if (g.generatedTokens < 1) failures.push(`${where}: generated nothing`);
      if (demo.stats.loader.peakWeightBytes > demo.budget) failures.push(`${where}: the loader held more weights than the budget`);
      if (demo.peakTabBytes > demo.budget + o.overheadMb * MB) {
        failures.push(`${where}: the tab peaked at ${fmt(demo.peakTabBytes / MB)} MB, over the budget + ${o.overheadMb} MB`);
      }
      if (sameText === false) failures.push(`${where}: its text is not the bench page's`);
    }
  }
  if (wllama) {
    lines.push('');
    lines.push(`wllama ${wllama.version ?? ''} on the same ${wllama.shape} split set (${wllama.parts} parts), ${o.threads} threads: ` +
               (wllama.error
                 ? `failed after ${fmt((wllama.failedAfterMs ?? 0) / 1000, 1)} s: ${wllama.error}`
                 : `TTFT ${fmt(wllama.ttftMs / 1000, 1)} s, ${wllama.run?.generatedTokens} tokens`) +
               `; ${fmt(wllama.networkBytes / MB)} MB downloaded; tab peak ${fmt(wllama.peakTabBytes / MB)} MB`);
  }
  return { text: lines.join('\n'), failures };
}

async function main() {
  let o;
  try {
    o = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`bench:large: ${error.message}`);
    process.exit(2);
  }
  for (const [path, what] of [[o.cli, 'the native CLI (scripts/build-native.sh)'],
    [join(repoRoot, 'web/wasm/sipllm-threaded.wasm'), 'the WebAssembly build (scripts/build-wasm.sh)'],
    [join(repoRoot, 'web/dist/index.js'), 'the package (npm run build:web)'], [o.chromium, 'Chromium']]) {
    if (!existsSync(path)) throw new Error(`${what} is missing: ${path}`);
  }
  mkdirSync(o.modelsDir, { recursive: true });
  const models = [];
  for (const shape of o.models) {
    const first = ensureModel(o, shape);
    const vocab = await readVocab(first);
    models.push({ shape, first, parts: MODELS[shape].parts, prompt: fitPrompt(o.cli, first, o.promptTokens), ban: vocab.banned });
  }

  const pageServer = await startRangeServer({
    mounts: [
      { prefix: '/bench', dir: join(repoRoot, 'scripts/bench/page') },
      { prefix: '/web', dir: join(repoRoot, 'web') },
      { prefix: '/node_modules', dir: join(repoRoot, 'node_modules') },
    ],
  });
  const modelServer = await startRangeServer({ root: o.modelsDir, mbps: o.mbps });
  const servers = { pageUrl: `${pageServer.url}/bench/index.html`, model: modelServer };
  const results = [];
  let wllama = null;
  let demo = null;
  const demoDir = o.engines.includes('demo') && models.some((m) => m.parts > 1) ? buildDemo() : null;
  const demoServer = demoDir === null ? null : await startRangeServer({ root: demoDir });
  const wanted = (budget) => o.budgets === null || o.budgets.includes(String(budget ?? 'none'));
  try {
    for (const model of models) {
      for (const budget of o.engines.includes('sipllm') ? MODELS[model.shape].budgets.filter(wanted) : []) {
        process.stdout.write(`${model.shape}, budget ${budget ?? 'none'}: `);
        let result;
        try {
          result = await benchModel(o, servers, model, budget);
        } catch (error) {
          result = { shape: model.shape, memoryBudget: null, error: error.message.split('\n')[0] };
        }
        console.log(result.error ?? result.loads.map((l) => `TTFT ${fmt(l.ttftS, 1)} s, decode ${fmt(l.decodeTokS, 2)} tok/s`).join('; '));
        results.push(result);
      }
      if (demoServer !== null && model.parts > 1 && demo === null) {
        const budget = MODELS[model.shape].budgets.filter(wanted)[0] ?? MODELS[model.shape].budgets[0];
        process.stdout.write(`the demo on ${model.shape}, budget ${budget}: `);
        demo = { shape: model.shape, ...await benchDemo(o, `${demoServer.url}/`, servers, model, budget)
          .catch((error) => ({ error: error.message.split('\n')[0] })) };
        console.log(demo.error ?? `${demo.stats.lastGeneration.generatedTokens} tokens`);
      }
      if (o.engines.includes('wllama') && model.parts > 1 && wllama === null) {
        process.stdout.write(`wllama on ${model.shape}: `);
        wllama = { shape: model.shape, parts: model.parts, ...await benchWllama(o, servers, model) };
        console.log(wllama.error ?? 'done');
      }
    }
  } finally {
    await pageServer.close();
    await modelServer.close();
    await demoServer?.close();
    if (demoDir !== null) rmSync(demoDir, { recursive: true, force: true });
  }

  const { text, failures } = report(o, results, wllama, demo);
  console.log(`\n${text}\n`);
  console.log(`${results.find((r) => r.browserVersion)?.browserVersion ?? 'Chromium'}, SipLLM ${results[0]?.loads?.[0]?.build ?? ''} build, ` +
              `${o.threads} threads, ${o.promptTokens}-token prompt, ${o.genTokens} tokens greedy, context ${o.context}, ` +
              `models served at ${o.mbps} MB/s, cache: true (OPFS), a fresh browser profile on disk per row.`);
  const jsonPath = o.json ?? join(repoRoot, 'build/bench', `large-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  mkdirSync(dirname(jsonPath), { recursive: true });
  writeFileSync(jsonPath, JSON.stringify({ options: o, results, demo, wllama, table: text, failures }, null, 1));
  console.log(`figures: ${relative(process.cwd(), jsonPath)}`);
  if (failures.length > 0) {
    console.error(`bench:large: ${failures.length} check(s) failed:\n  ${failures.join('\n  ')}`);
    process.exit(1);
  }
}

main().catch((error) => {
  console.error(`bench:large: ${error.message}`);
  process.exit(1);
});

#!/usr/bin/env node
// A soak: a seeded random mix of requests against several models loaded at
// once, under Node and in Chromium, for a number of requests or minutes.
// Every greedy text is checked against the native CLI's; a request that
// misses its deadline is a stall and gets a report file.
//
//   npm run soak -- --requests 300                  Node, then Chromium's threaded and relaxed builds
//   npm run soak -- --minutes 60 --where chromium --builds relaxed
//   npm run soak -- --requests 2000 --where node --busy   beside a CPU burner on every core
//   npm run soak -- --help                          every option
//
// The models (page/soak.mjs draws the requests): stories260K (llama) with
// the cache on; the qwen3 Q8_0 arch fixture in a memory budget that streams
// its blocks for every token; the gemma3 Q4_K_M one streamed too, from the
// cache; the lfm2 Q4_K_M one (convolution layers) as it comes. All are
// served by scripts/range-server.mjs (real range requests) and loaded by URL.
// The cache is a temporary directory under Node, OPFS in Chromium (a fresh
// profile on disk per build).
//
// The budget (--requests or --minutes) is shared evenly by the runs: Node
// (the build the package picks there, or --node-build) and each Chromium
// build, each in its own cross-origin isolated page.
//
// Prints a progress line a minute and the counts at the end: requests by
// kind, stalls, wrong outputs, unexpected errors (expected ones, an
// AbortError after an abort or a request refused by an unloaded model, are
// counted by kind), requests per second, and the memory (the process's RSS
// under Node, the renderer's resident set in Chromium) averaged over the first
// and the last 1000 requests (a tenth of a run under 10 000), and over each
// twentieth of the run, to judge whether it stays flat. Writes the summary to
// --out and one JSON report per stall, wrong output or unexpected error beside
// it. Exits 1 when there was any.
//
// Needs: web/dist (cd web && npx tsc -p tsconfig.json), web/wasm, the native
// CLI and its fixtures (scripts/build-native.sh), /usr/bin/chromium.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { register } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, join, resolve } from 'node:path';

import { chromium } from 'playwright-core';

import { CHROMIUM_ARGS, rendererMemoryBytes, repoRoot } from '../bench/support.mjs';
import { GRAMMAR_TOKENS, KINDS, TOKENS, soak } from './page/soak.mjs';

register('./ts-hooks.mjs', import.meta.url);
const { RangeServer, cliPath, modelsDir, nativeRun, removeDir, tempDir } = await import('../../web/test/support.ts');

const USAGE = `usage: npm run soak -- [options]
  --requests N          requests in all (default 300 when --minutes is not given)
  --minutes M           run for M minutes in all instead
  --where W             node, chromium or both (default both)
  --builds LIST         Chromium's builds (default threaded,relaxed)
  --node-build B        the build under Node (default auto: the package picks)
  --seed S              the requests' seed (default 1)
  --kinds LIST          only these kinds of request (default all: ${Object.keys(KINDS).join(', ')})
  --concurrency C       requests in flight at once (default 2)
  --deadline-ms D       a request that takes longer is a stall (default 120000)
  --stall-timeout-ms T  load()'s stallTimeoutMs (default: the deadline + 30 s, so that the deadline
                        comes first and its report catches the engine stuck, the dump taken live)
  --stop-on-stall       stop at the first stall (default: reload its model, go on)
  --busy                a CPU burner child process on every core, beside the soak
  --threads N           the engine's threads (default 2)
  --out FILE            the summary (default build/soak/summary-WHERE.json)
  --chromium FILE       the browser (default $CHROMIUM or /usr/bin/chromium)
`;

function parseOptions(argv) {
  const o = {
    requests: null, minutes: null, where: 'both', builds: ['threaded', 'relaxed'], nodeBuild: 'auto', seed: 1, kinds: Object.keys(KINDS),
    concurrency: 2, deadlineMs: 120_000, stallTimeoutMs: null, stopOnStall: false, busy: false, threads: 2, out: null,
    chromium: process.env.CHROMIUM ?? '/usr/bin/chromium',
  };
  const count = (flag, value, min = 1) => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < min) throw new Error(`${flag} wants a number >= ${min}, got '${value}'`);
    return n;
  };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    switch (flag) {
      case '--requests': o.requests = Math.floor(count(flag, value())); break;
      case '--minutes': o.minutes = count(flag, value(), 0.01); break;
      case '--where': o.where = value(); break;
      case '--builds': o.builds = value().split(',').filter(Boolean); break;
      case '--node-build': o.nodeBuild = value(); break;
      case '--seed': o.seed = Math.floor(count(flag, value(), 0)); break;
      case '--kinds': o.kinds = value().split(',').filter(Boolean); break;
      case '--concurrency': o.concurrency = Math.floor(count(flag, value())); break;
      case '--deadline-ms': o.deadlineMs = count(flag, value()); break;
      case '--stall-timeout-ms': o.stallTimeoutMs = count(flag, value(), 0); break;
      case '--stop-on-stall': o.stopOnStall = true; break;
      case '--busy': o.busy = true; break;
      case '--threads': o.threads = Math.floor(count(flag, value())); break;
      case '--out': o.out = value(); break;
      case '--chromium': o.chromium = value(); break;
      case '--help': case '-h': process.stdout.write(USAGE); process.exit(0); break;
      default: throw new Error(`unknown option '${flag}' (see --help)`);
    }
  }
  if (!['node', 'chromium', 'both'].includes(o.where)) throw new Error(`--where wants node, chromium or both, not '${o.where}'`);
  for (const b of o.builds) if (!['threaded', 'relaxed', 'single'].includes(b)) throw new Error(`--builds: unknown build '${b}'`);
  for (const k of o.kinds) if (!(k in KINDS)) throw new Error(`--kinds: unknown kind '${k}' (see --help)`);
  if (o.kinds.length === 0) throw new Error('--kinds needs at least one kind');
  if (o.requests === null && o.minutes === null) o.requests = 300;
  // The package's watchdog after the deadline: the deadline sees a stall
  // first and its report reads the engine's dump while the stalled worker
  // still exists; the watchdog then stops it, and the model goes on.
  o.stallTimeoutMs ??= o.deadlineMs + 30_000;
  o.out = resolve(o.out ?? join(repoRoot, `build/soak/summary-${o.where}.json`));
  return o;
}

const ARCH = join(repoRoot, 'tests/fixtures/arch');
// Served as the model server's /models (stories260K) and its root (the rest).
const MODELS = [
  { name: 'stories260K', file: join(modelsDir, 'stories260K.gguf'), path: '/models/stories260K.gguf', cache: true, stream: false },
  { name: 'qwen3-Q8_0', file: join(ARCH, 'qwen3-Q8_0.gguf'), path: '/qwen3-Q8_0.gguf', cache: false, stream: true },
  { name: 'gemma3-Q4_K_M', file: join(ARCH, 'gemma3-Q4_K_M.gguf'), path: '/gemma3-Q4_K_M.gguf', cache: true, stream: true },
  { name: 'lfm2-Q4_K_M', file: join(ARCH, 'lfm2-Q4_K_M.gguf'), path: '/lfm2-Q4_K_M.gguf', cache: false, stream: false },
];
// All four share stories260K's vocabulary. Each prompt stays well under 64
// tokens: a prompt of 64 or more attends on another path when part of it is
// reused from the KV cache (see the README), and a greedy request does not
// reset first: whatever the cache holds from the requests before, reuse has
// to give the CLI's text.
const PROMPTS = [
  'Once upon a time there was a little robot',
  'Lily saw a big, red ball in the park.',
  'One day, a boy named Tom went to the sea',
  'The cat and the dog',
  'She was very happy because',
];
const SCHEMA = { type: 'object', properties: { name: { type: 'string' }, age: { type: 'integer', minimum: 0 } },
                 required: ['name', 'age'] };
const CONTEXT = 256;

// The native CLI's texts for every prompt and token count the soak asks for
// (greedy; and under the schema), at the same context length.
function expectations() {
  const flags = ['--temp', '0', '--ctx', String(CONTEXT)];
  return MODELS.map((model) => ({
    ...model,
    size: statSync(model.file).size,
    expected: Object.fromEntries(PROMPTS.map((p) => [p, Object.fromEntries(TOKENS.map((n) => [n, nativeRun(model.file, p, n, flags)]))])),
    grammarExpected: Object.fromEntries(PROMPTS.map((p) => [p, nativeRun(model.file, p, GRAMMAR_TOKENS,
                                                                         [...flags, '--json-schema', JSON.stringify(SCHEMA)])])),
  }));
}

const mb = (bytes) => `${(bytes / 1e6).toFixed(0)} MB`;

function printLeg(leg) {
  if (leg.error) {
    console.log(`\n${leg.where} ${leg.build}: did not run to the end: ${leg.error}`);
    return;
  }
  console.log(`\n${leg.where} ${leg.build}: ${leg.requests} requests in ${leg.seconds.toFixed(0)} s ` +
              `(${leg.perSecond.toFixed(2)}/s); stalls ${leg.stalls}, wrong outputs ${leg.wrong}, unexpected errors ${leg.unexpected}`);
  const kinds = Object.entries(leg.done).sort().map(([kind, n]) => `${kind} ${n}${leg.ok[kind] !== n ? ` (ok ${leg.ok[kind] ?? 0})` : ''}`);
  console.log(`  by kind: ${kinds.join(', ')}`);
  const expected = Object.entries(leg.expected).map(([kind, n]) => `${kind} ${n}`);
  console.log(`  expected errors: ${expected.length ? expected.join(', ') : 'none'}`);
  const m = leg.memory;
  console.log(`  memory (${m.what}): first ${m.window} requests ${mb(m.firstMeanBytes)}, last ${m.window} ${mb(m.lastMeanBytes)} ` +
              `(${m.lastMeanBytes >= m.firstMeanBytes ? '+' : ''}${((m.lastMeanBytes / m.firstMeanBytes - 1) * 100).toFixed(1)} %), ` +
              `peak ${mb(m.peakBytes)}`);
  console.log(`  memory by twentieths of the run (MB): ${m.trendBytes.map((b) => (b / 1e6).toFixed(0)).join(' ')}`);
  for (const f of leg.failures) console.log(`  ${f.what} at request ${f.index} (${f.kind}): ${JSON.stringify(f).slice(0, 400)}`);
  for (const path of leg.reports) console.log(`  report: ${path}`);
}

async function main() {
  let o;
  try {
    o = parseOptions(process.argv.slice(2));
  } catch (error) {
    console.error(`soak: ${error.message}`);
    process.exit(2);
  }
  for (const [what, path] of [['the native CLI', cliPath], ['web/dist', join(repoRoot, 'web/dist/index.js')],
                              ['web/wasm', join(repoRoot, 'web/wasm/sipllm-threaded.wasm')], ['the fixtures', MODELS[0].file]]) {
    if (!existsSync(path)) throw new Error(`${what} is missing (${path})`);
  }
  const outDir = dirname(o.out);
  mkdirSync(outDir, { recursive: true });

  const legs = [...(o.where !== 'chromium' ? [{ where: 'node', build: o.nodeBuild }] : []),
                ...(o.where !== 'node' ? o.builds.map((build) => ({ where: 'chromium', build })) : [])];
  console.log(`soak: seed ${o.seed}, ${o.requests !== null ? `${o.requests} requests` : `${o.minutes} minutes`} over ` +
              `${legs.map((l) => `${l.where} ${l.build}`).join(', ')}; concurrency ${o.concurrency}, deadline ${o.deadlineMs} ms` +
              `${o.busy ? ', beside a CPU burner on every core' : ''}`);
  console.log('computing the native CLI\'s texts...');
  const models = expectations();

  const cleanup = [];
  const burners = [];
  const killBurners = () => burners.forEach((child) => child.kill('SIGKILL'));
  process.on('exit', killBurners);
  // Interrupted, too: the burners must not outlive the run.
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(130));
  const modelServer = await RangeServer.start(ARCH, ['--mount', `/models=${modelsDir}`]);
  cleanup.push(() => modelServer.stop());
  if (o.busy) {
    for (let k = 0; k < availableParallelism(); ++k) {
      burners.push(spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
    }
  }

  const writeReport = (name, record) => {
    const path = join(outDir, `${name}.json`);
    writeFileSync(path, JSON.stringify(record, null, 1));
    return path;
  };
  const config = (leg, extra) => ({
    where: leg.where, build: leg.build, seed: o.seed, kinds: o.kinds, deadlineMs: o.deadlineMs, stallTimeoutMs: o.stallTimeoutMs,
    concurrency: o.concurrency, stopOnStall: o.stopOnStall, threads: o.threads, contextLength: CONTEXT,
    requests: o.requests !== null ? Math.ceil(o.requests / legs.length) : null,
    minutes: o.minutes !== null ? o.minutes / legs.length : null,
    prompts: PROMPTS, schema: SCHEMA,
    chatTemplate: readFileSync(join(repoRoot, 'tests/fixtures/vocab/qwen3.chat_template.jinja'), 'utf8'),
    models: models.map((m) => ({ ...m, url: `${modelServer.url}${m.path}` })),
    ...extra,
  });

  const results = [];
  try {
    for (const leg of legs) {
      console.log(`\n${leg.where} ${leg.build}: loading the models`);
      try {
        if (leg.where === 'node') {
          const { SipLLM } = await import('sipllm');
          const cacheDir = tempDir('soak-cache');
          cleanup.push(() => removeDir(cacheDir));
          results.push(await soak(SipLLM, config(leg, { cache: cacheDir, memoryWhat: 'process RSS' }), {
            memory: async () => process.memoryUsage().rss,
            report: async (name, record) => writeReport(name, record),
            progress: (line) => console.log(line),
          }));
        } else {
          results.push(await runInChromium(o, leg, config(leg, { cache: 'soak-cache', memoryWhat: 'renderer RSS' }),
                                           writeReport, cleanup));
        }
      } catch (error) {
        results.push({ ...leg, error: error.message.split('\n')[0], stalls: 0, wrong: 0, unexpected: 0 });
      }
      printLeg(results.at(-1));
    }
  } finally {
    killBurners();
    for (const step of cleanup.reverse()) await step();
  }

  const totals = Object.fromEntries(['requests', 'stalls', 'wrong', 'unexpected'].map((k) => [k, results.reduce((a, r) => a + (r[k] ?? 0), 0)]));
  writeFileSync(o.out, JSON.stringify({ date: new Date().toISOString(), options: o, totals, legs: results }, null, 1));
  console.log(`\ntotal: ${totals.requests} requests; stalls ${totals.stalls}, wrong outputs ${totals.wrong}, ` +
              `unexpected errors ${totals.unexpected}\nsummary: ${o.out}`);
  const failed = totals.stalls + totals.wrong + totals.unexpected > 0 || results.some((r) => r.error);
  // A stalled engine worker may never end: do not wait for it.
  process.exit(failed ? 1 : 0);
}

// One build in a fresh browser with a profile on disk (so that OPFS is a real
// disk store, as a user's), its page cross-origin isolated by the page server.
async function runInChromium(o, leg, config, writeReport, cleanup) {
  const pageServer = await RangeServer.start(join(repoRoot, 'scripts/soak/page'),
                                             ['--mount', `/web=${join(repoRoot, 'web')}`,
                                              '--mount', `/node_modules=${join(repoRoot, 'node_modules')}`]);
  const profile = tempDir('soak-profile');
  const context = await chromium.launchPersistentContext(profile, { executablePath: o.chromium, args: CHROMIUM_ARGS });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    page.on('pageerror', (error) => console.error(`  [page error] ${error.message}`));
    page.on('console', (message) => {
      if (['error', 'warning'].includes(message.type())) console.error(`  [page ${message.type()}] ${message.text()}`);
    });
    await page.exposeFunction('soakMemory', () => rendererMemoryBytes('VmRSS'));
    await page.exposeFunction('soakReport', writeReport);
    await page.exposeFunction('soakProgress', (line) => console.log(line));
    await page.goto(`${pageServer.url}/index.html`);
    await page.waitForFunction(() => globalThis.soakReady === true, null, { timeout: 60_000 });
    if (!(await page.evaluate(() => globalThis.crossOriginIsolated))) throw new Error('the page is not cross-origin isolated');
    return await page.evaluate((c) => globalThis.runSoak({ ...c, wasmBaseUrl: new URL('/web/wasm/', location.href).href }), config);
  } finally {
    // A stalled page may hold the browser: closing it must not hang the run.
    await Promise.race([context.close(), new Promise((done) => setTimeout(done, 30_000))]);
    cleanup.push(() => removeDir(profile));
    await pageServer.stop();
  }
}

main().catch((error) => {
  console.error(`soak: ${error.stack}`);
  process.exit(1);
});

// The HTTP fault matrix: every fault of scripts/range-server.mjs against the
// three clients of the engine (the native CLI, the Node package, a Chromium
// page), with the persistent cache on and off.
//
// A cell sets the server's fault, loads the model through the client and
// generates greedily. It passes when the client ends, within the harness's
// time limit, either with exactly the fault-free text or with a typed error
// whose message names the fault (text streamed before the error must be the
// start of the fault-free text), and when the cache then holds only pages
// equal to the file's. With the cache on, a fault-free load follows with the
// same cache: it must give the text, and the server must send exactly the
// bytes the cache did not keep.
//
// Used by scripts/fault-matrix.mjs (the whole table), and by the reduced
// matrices of the test suites: ctest (the native CLI), web/test (Node) and
// demo/e2e (Chromium). Outcomes, orderings and byte counts are asserted;
// times are only reported.

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

import { startRangeServer } from '../range-server.mjs';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const bundledModel = join(repoRoot, 'demo/public/models/stories260K.gguf');
export const defaultCli = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');

// How every client is set up: small cache pages, so that a fault lands
// inside the file rather than always in its first megabyte; a short read
// timeout, so that a stall ends quickly; a short backoff.
export const SETTINGS = {
  prompt: 'Once upon a time',
  maxTokens: 24,
  threads: 2,
  maxRetries: 4,
  backoffMs: 20,
  readTimeoutMs: 1000,
  cachePageBytes: 64 * 1024,
  // Weight bytes kept in memory; null: all. 0 streams every block for every
  // token (from the cache, or from the network without one), so that faults
  // also land in the middle of a generation.
  memoryBudget: null,
  // A cell that takes longer is a hang: the harness stops it and fails it.
  cellTimeoutMs: 120_000,
};

// What a message must say for each kind of failure, whatever the client.
const GAVE_UP = new RegExp(`gave up after ${SETTINGS.maxRetries + 1} attempts`);
const CUT = /closed|reset|Recv failure|ended after|transfer closed|terminated|network error|request failed/i;

// The faults, each with the outcome it must have: 'text' (the retries absorb
// it), 'error' (a typed NetworkError whose message matches every pattern),
// or 'either' (random faults: whichever the seed gives). `dropsCache`: the
// cache must keep nothing afterwards. `clients` overrides these for a client
// that cannot do better. `ci` marks the reduced matrix the test suites run.
//
// The single-thread build in a browser makes its requests with a synchronous
// XMLHttpRequest, which shows nothing until it ends: it cannot tell a
// trickle from a stall (its limit is the read timeout plus the range at
// 64 kB/s, so a 10 kB/s trickle may run out of it), nor a redirect loop from
// another network error (its message lists the possibilities).
const SYNC_XHR_TIMEOUT = /no complete answer within \d+ ms/;
export const FAULTS = [
  { spec: null, expect: 'text', ci: true, what: 'no fault' },
  { spec: 'drop:p=0.3,seed=7', expect: 'either', error: [CUT, GAVE_UP],
    what: 'connection reset at a random byte, 30% of responses' },
  { spec: 'drop:times=2,seed=7', expect: 'text', ci: true,
    what: 'connection reset at a random byte, twice per range' },
  { spec: 'drop:seed=7', expect: 'error', error: [CUT, GAVE_UP], what: 'connection reset on every response' },
  { spec: 'short:times=2,seed=3', expect: 'text', what: 'body shorter than announced, twice per range' },
  { spec: 'short:seed=3', expect: 'error', error: [CUT, GAVE_UP], what: 'body shorter than announced, always' },
  { spec: '5xx:times=3', expect: 'text', ci: true, what: 'a burst of 500, 502, 503 per range' },
  { spec: '5xx:times=9', expect: 'error', error: [/HTTP 50[023]/, GAVE_UP], what: 'bursts longer than the retries' },
  { spec: '429:after=1', expect: 'text', ci: true, what: '429 with Retry-After: 1, once per range' },
  { spec: '429:after=1,date=1', expect: 'text', what: '429 with Retry-After as an HTTP date' },
  { spec: '429:after=3600', expect: 'error', error: [/HTTP 429/, /asks to wait 3600 s/],
    what: '429 with Retry-After over the cap' },
  { spec: 'ignore-range', expect: 'error', error: [/ignored the Range header/], ci: true,
    what: '200 with the whole file' },
  { spec: 'bad-content-range', expect: 'error', error: [/Content-Range 'bytes \d+-\d+\/\d+' does not match/],
    what: 'Content-Range one byte off' },
  { spec: 'stall:after=1000', expect: 'error', error: [/no bytes for 1 s/, GAVE_UP],
    ci: true, what: 'no bytes after the first 1000, always',
    clients: { 'chromium-single': { error: [SYNC_XHR_TIMEOUT, GAVE_UP] } } },
  { spec: 'stall:times=1,after=1000', expect: 'text', what: 'a stall once per range' },
  { spec: 'trickle:rate=10000,bytes=30000', expect: 'text', ci: true,
    what: 'each response\'s first 30 kB at 10 kB/s (3 s, over the 1 s read timeout)',
    clients: { 'chromium-single': { expect: 'either', error: [SYNC_XHR_TIMEOUT, GAVE_UP] } } },
  { spec: 'replace', expect: 'error', error: [/changed on the server: ETag was "[^"]+", now "[^"]+-replaced"/],
    dropsCache: true, ci: true, what: 'the file replaced after the first response' },
  { spec: 'redirect-loop', expect: 'error', error: [/too many redirects/], ci: true, what: '302 to itself, forever',
    clients: { 'chromium-single': { error: [/a redirect loop/, GAVE_UP] } } },
  { spec: '404', expect: 'error', error: [/HTTP 404/], what: 'not found' },
];

export const CI_FAULTS = FAULTS.filter((f) => f.ci);

export function faultName(fault) {
  return fault.spec ?? 'none';
}

// ---- The server ---------------------------------------------------------------------

// The range server, in this process, serving the model's directory. Its
// server-wide fault is what each cell sets: the model keeps one URL, so a
// fault-free load after a fault finds the cache entry the faulty one left.
export async function startFaultServer(model = bundledModel) {
  const server = await startRangeServer({ root: dirname(model) });
  return {
    url: `${server.url}/${encodeURIComponent(model.slice(dirname(model).length + 1))}`,
    base: server.url,
    setFault: (spec) => server.setFault(spec),
    reset: () => server.reset(),
    stats: () => ({ requests: server.stats.requests, bytes: server.stats.bytes, log: [...server.stats.log] }),
    close: () => server.close(),
  };
}

// ---- The cache, read back ---------------------------------------------------------

// engine/src/io/http/page_cache.h: "sipllm-cache 1 LENGTH\n", then url, size,
// etag, last-modified, page-bytes, pages, end.
export function parseIndex(bytes) {
  const text = Buffer.from(bytes).toString('utf8');
  const length = Number(text.slice(15, 31));
  if (!text.startsWith('sipllm-cache 1 ') || !(length >= 32)) return null;
  const fields = {};
  for (const line of text.slice(32, length).split('\n')) {
    const space = line.indexOf(' ');
    if (space > 0) fields[line.slice(0, space)] = line.slice(space + 1);
  }
  if (fields.pages === undefined) return null;
  return {
    url: fields.url, size: Number(fields.size), etag: fields.etag,
    pageBytes: Number(fields['page-bytes']), pages: [...fields.pages].map((c) => c === '1'),
  };
}

// Checks a cache's files ({name: bytes}) against the model: every page an
// index lists must equal the file's bytes there. Returns the bytes kept and
// the problems found.
export function checkCache(files, model) {
  const problems = [];
  let kept = 0;
  let entries = 0;
  for (const [name, bytes] of Object.entries(files)) {
    if (!name.endsWith('.index')) continue;
    entries += 1;
    const index = parseIndex(bytes);
    if (index === null) {
      problems.push(`${name}: not a readable index`);
      continue;
    }
    if (index.size !== model.length) problems.push(`${name}: size ${index.size}, the file has ${model.length}`);
    const pages = files[name.replace(/\.index$/, '.pages')] ?? new Uint8Array(0);
    index.pages.forEach((stored, p) => {
      if (!stored) return;
      const start = p * index.pageBytes;
      const end = Math.min(start + index.pageBytes, model.length);
      if (pages.length < end || Buffer.compare(pages.subarray(start, end), model.subarray(start, end)) !== 0) {
        problems.push(`${name}: page ${p} (bytes ${start}-${end - 1}) differs from the file`);
      }
      kept += end - start;
    });
  }
  if (entries > 1) problems.push(`${entries} cache entries for one URL`);
  return { kept, entries, problems };
}

function readDirectory(dir) {
  const files = {};
  let names = [];
  try {
    names = readdirSync(dir);
  } catch {
    return files;
  }
  for (const name of names) files[name] = readFileSync(join(dir, name));
  return files;
}

export function tempDir(tag) {
  return mkdtempSync(join(tmpdir(), `sipllm-fault-${tag}-`));
}

// ---- The clients --------------------------------------------------------------------
//
// A client: { name, newCache(), readCache(ref) -> {name: bytes}, dropCache(ref),
// run(url, cacheRef | null) -> { ok, text, error?: {name, kind, message}, ms } }.
// run() never throws for the engine's errors; a run over the time limit
// resolves with { hang: true }.

function withTimeout(promise, ms, onTimeout) {
  let timer;
  const timeout = new Promise((done) => {
    timer = setTimeout(() => done(onTimeout()), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// The native CLI: `sipllm run -m URL`, its text on stdout, its error on stderr
// ("sipllm: KIND error: MESSAGE").
export function nativeClient({ cli = defaultCli, settings = SETTINGS } = {}) {
  return {
    name: 'native',
    newCache: () => tempDir('native'),
    readCache: (dir) => readDirectory(dir),
    dropCache: (dir) => rmSync(dir, { recursive: true, force: true }),
    run: (url, cacheDir) => new Promise((done) => {
      const args = [
        'run', '-m', url, '-p', settings.prompt, '-n', String(settings.maxTokens), '--temp', '0',
        '--threads', String(settings.threads), '--max-retries', String(settings.maxRetries),
        '--backoff-ms', String(settings.backoffMs), '--read-timeout-ms', String(settings.readTimeoutMs),
        '--cache-page-bytes', String(settings.cachePageBytes),
        ...(settings.memoryBudget === null ? [] : ['--budget', String(settings.memoryBudget)]),
        ...(cacheDir === null ? ['--no-cache'] : ['--cache-dir', cacheDir]),
      ];
      const started = performance.now();
      const child = spawn(cli, args, { stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (chunk) => { stdout += chunk; });
      child.stderr.on('data', (chunk) => { stderr += chunk; });
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        done({ hang: true, ok: false, text: '', ms: performance.now() - started });
      }, settings.cellTimeoutMs);
      child.on('error', (error) => {
        clearTimeout(timer);
        done({ ok: false, text: '', ms: 0, error: { name: 'SpawnError', kind: null, message: error.message } });
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        const ms = performance.now() - started;
        const text = stdout.startsWith(settings.prompt) ? stdout.slice(settings.prompt.length) : stdout;
        if (code === 0) {
          done({ ok: true, text: text.replace(/\n$/, ''), ms });
          return;
        }
        const line = stderr.trim().split('\n').find((l) => l.startsWith('sipllm: ')) ?? stderr.trim();
        const typed = /^sipllm: (\S+) error: (.*)$/s.exec(line);
        done({
          ok: false, text, ms,
          error: typed ? { name: 'Error', kind: typed[1], message: typed[2] }
                       : { name: 'Error', kind: null, message: `exit ${code}: ${line}` },
        });
      });
    }),
  };
}

// The options every package client (Node, Chromium) loads with.
export function loadOptions(settings = SETTINGS, build = 'auto') {
  return {
    build,
    threads: settings.threads,
    maxRetries: settings.maxRetries,
    backoffMs: settings.backoffMs,
    readTimeoutMs: settings.readTimeoutMs,
    cachePageBytes: settings.cachePageBytes,
    ...(settings.memoryBudget === null ? {} : { memoryBudget: settings.memoryBudget }),
    warmUpMs: 0,
  };
}

// One load and generation with the package, as page/page.mjs does it in a browser.
export async function runPackage(SipLLM, url, cache, settings = SETTINGS, build = 'auto') {
  let text = '';
  let llm = null;
  const started = performance.now();
  try {
    llm = await SipLLM.load(url, { ...loadOptions(settings, build), cache });
    for await (const piece of llm.generate(settings.prompt, { maxTokens: settings.maxTokens, temperature: 0 })) {
      text += piece;
    }
    return { ok: true, text, ms: performance.now() - started };
  } catch (error) {
    return {
      ok: false, text, ms: performance.now() - started,
      error: { name: error?.name ?? 'Error', kind: error?.kind ?? null, message: error?.message ?? String(error) },
    };
  } finally {
    await llm?.unload().catch(() => {});
  }
}

// The Node package (web/dist), in this process. A hang is reported, but the
// worker it left cannot be stopped from here: runs that must survive one use
// nodeChildClient.
export function nodeClient({ SipLLM, settings = SETTINGS, build = 'auto' }) {
  return {
    name: build === 'single' ? 'node-single' : 'node',
    newCache: () => tempDir('node'),
    readCache: (dir) => readDirectory(dir),
    dropCache: (dir) => rmSync(dir, { recursive: true, force: true }),
    run: (url, cacheDir) => withTimeout(runPackage(SipLLM, url, cacheDir ?? false, settings, build),
                                        settings.cellTimeoutMs,
                                        () => ({ hang: true, ok: false, text: '', ms: settings.cellTimeoutMs })),
  };
}

// The Node package in a child process (node-client.mjs), which is killed
// when it runs over the time limit.
export function nodeChildClient({ settings = SETTINGS, build = 'auto' } = {}) {
  const script = join(repoRoot, 'scripts/fault-matrix/node-client.mjs');
  return {
    name: build === 'single' ? 'node-single' : 'node',
    newCache: () => tempDir('node'),
    readCache: (dir) => readDirectory(dir),
    dropCache: (dir) => rmSync(dir, { recursive: true, force: true }),
    run: (url, cacheDir) => new Promise((done) => {
      const started = performance.now();
      const child = spawn(process.execPath, [script, JSON.stringify({ url, cache: cacheDir ?? false, settings, build })],
                          { stdio: ['ignore', 'pipe', 'inherit'] });
      let stdout = '';
      child.stdout.on('data', (chunk) => { stdout += chunk; });
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        done({ hang: true, ok: false, text: '', ms: performance.now() - started });
      }, settings.cellTimeoutMs);
      child.on('close', (code) => {
        clearTimeout(timer);
        try {
          done(JSON.parse(stdout.trim().split('\n').pop()));
        } catch {
          done({ ok: false, text: '', ms: performance.now() - started,
                 error: { name: 'Error', kind: null, message: `node-client exited with ${code}: ${stdout}` } });
        }
      });
    }),
  };
}

// The page that the Chromium client drives: page/ with the package's dist
// and wasm, served by a range server of its own (never faulted). It sends
// the cross-origin isolation headers: the page runs the threaded build.
export async function startPageServer() {
  const server = await startRangeServer({
    root: join(repoRoot, 'scripts/fault-matrix/page'),
    mounts: [
      { prefix: '/sipllm', dir: join(repoRoot, 'web') },
      { prefix: '/jinja', dir: join(repoRoot, 'node_modules/@huggingface/jinja/dist') },
    ],
  });
  return { url: `${server.url}/index.html`, close: () => server.close() };
}

// Chromium through Playwright: `page` is a Playwright Page (from the test
// runner, or from playwright-core), `pageUrl` the page server's index. The
// page is cross-origin isolated: 'auto' runs the threaded build (fetch on
// the worker's main thread); 'single' the single-thread one (a synchronous
// XMLHttpRequest).
export function chromiumClient({ page, pageUrl, settings = SETTINGS, newPage, build = 'auto' }) {
  let current = page;
  let caches = 0;
  const open = async () => {
    await current.goto(pageUrl);
    await current.waitForFunction(() => document.getElementById('state')?.textContent === 'ready');
  };
  return {
    name: build === 'single' ? 'chromium-single' : 'chromium',
    open,
    page: () => current,
    newCache: () => `fault-matrix-${build}-${++caches}`,
    readCache: async (dir) => {
      const files = await current.evaluate((name) => globalThis.readCache(name), dir);
      return Object.fromEntries(Object.entries(files).map(([name, b64]) => [name, Buffer.from(b64, 'base64')]));
    },
    dropCache: (dir) => current.evaluate((name) => globalThis.dropCache(name), dir),
    run: async (url, cacheDir) => {
      const cell = { url, cache: cacheDir ?? false, load: loadOptions(settings, build), prompt: settings.prompt,
                     maxTokens: settings.maxTokens };
      const result = await withTimeout(current.evaluate((c) => globalThis.runCell(c), cell), settings.cellTimeoutMs,
                                       () => ({ hang: true, ok: false, text: '', ms: settings.cellTimeoutMs }));
      if (result.hang) {
        // The page is stuck: the next cells get a fresh one.
        if (newPage) {
          await current.close().catch(() => {});
          current = await newPage();
          await open();
        }
      }
      return result;
    },
  };
}

// ---- One cell -------------------------------------------------------------------------

// The text the model generates without faults, from the native CLI on the file.
export function expectedText(model = bundledModel, { cli = defaultCli, settings = SETTINGS } = {}) {
  return new Promise((done, fail) => {
    const child = spawn(cli, ['run', '-m', model, '-p', settings.prompt, '-n', String(settings.maxTokens), '--temp', '0',
                              '--threads', String(settings.threads)], { stdio: ['ignore', 'pipe', 'ignore'] });
    let out = '';
    child.stdout.on('data', (chunk) => { out += chunk; });
    child.on('error', fail);
    child.on('close', (code) => {
      if (code !== 0 || !out.startsWith(settings.prompt)) fail(new Error(`${cli} run failed (${code}): ${out}`));
      else done(out.slice(settings.prompt.length).replace(/\n$/, ''));
    });
  });
}

function shorten(text, max = 160) {
  const line = text.replace(/\s+/g, ' ');
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

// Judges one run against the fault's expectation; returns the problems.
function judge(result, fault, expected) {
  if (result.hang) return ['no outcome within the time limit (a hang)'];
  if (result.ok) {
    if (result.text !== expected) return [`different text: ${JSON.stringify(shorten(result.text, 80))}`];
    if (fault.expect === 'error') return ['succeeded, but this fault must end in an error'];
    return [];
  }
  const problems = [];
  if (fault.expect === 'text') problems.push(`failed, but the retries must absorb this fault: ${result.error.message}`);
  if (result.error.kind !== 'network') problems.push(`error kind '${result.error.kind}', not 'network'`);
  for (const pattern of fault.error ?? []) {
    if (!pattern.test(result.error.message)) problems.push(`the message does not match ${pattern}`);
  }
  if (!expected.startsWith(result.text)) {
    problems.push(`text before the error is not the fault-free text's start: ${JSON.stringify(shorten(result.text, 80))}`);
  }
  return problems;
}

// Runs one cell: the faulty load, the cache check, and with the cache on the
// fault-free load that must resume from what was kept.
export async function runCell({ server, client, fault: generic, cache, expected, model }) {
  const fault = { ...generic, ...generic.clients?.[client.name] };
  const cacheRef = cache ? await client.newCache() : null;
  try {
    server.reset();
    server.setFault(fault.spec);
    const result = await client.run(server.url, cacheRef);
    const served = server.stats();
    server.setFault(null);
    const row = {
      fault: faultName(fault), client: client.name, cache, expect: fault.expect,
      outcome: result.hang ? 'hang' : result.ok ? 'text' : 'error',
      message: result.ok || result.hang ? '' : result.error.message,
      ms: result.ms, requests: served.requests, bytes: served.bytes,
      injected: served.log.filter((entry) => entry.fault !== null).length,
      kept: null, resumeBytes: null, problems: judge(result, fault, expected),
    };
    if (fault.spec !== null && fault.expect !== 'either' && row.injected === 0) {
      row.problems.push('the fault never fired: the cell tested nothing');
    }
    if (cache && !result.hang) {
      const check = checkCache(await client.readCache(cacheRef), model);
      row.kept = check.kept;
      row.problems.push(...check.problems);
      if (fault.dropsCache && check.entries > 0) {
        row.problems.push(`the stale cache entry was not deleted (${check.kept} bytes kept)`);
      }
      // The same URL, no fault: only what the cache lacks crosses the network.
      server.reset();
      const again = await client.run(server.url, cacheRef);
      const resumed = server.stats();
      row.resumeBytes = resumed.bytes;
      if (again.hang || !again.ok || again.text !== expected) {
        row.problems.push(`the fault-free load after it did not give the text: ${
          again.hang ? 'a hang' : again.ok ? 'different text' : again.error.message}`);
      } else if (resumed.bytes !== model.length - check.kept) {
        row.problems.push(`the fault-free load after it fetched ${resumed.bytes} bytes, not the ${
          model.length - check.kept} the cache lacked`);
      }
      if (!again.hang) {
        const after = checkCache(await client.readCache(cacheRef), model);
        row.problems.push(...after.problems.map((p) => `after the fault-free load: ${p}`));
        if (again.ok && after.kept !== model.length) {
          row.problems.push(`after the fault-free load the cache keeps ${after.kept} of ${model.length} bytes`);
        }
      }
    }
    row.pass = row.problems.length === 0;
    return row;
  } finally {
    server.setFault(null);
    if (cacheRef !== null) await client.dropCache(cacheRef);
  }
}

// ---- The table ----------------------------------------------------------------------

function seconds(ms) {
  return `${(ms / 1000).toFixed(1)} s`;
}

export function markdownTable(rows) {
  const lines = [
    '| fault | client | cache | outcome | time | requests | bytes sent | kept | resumed with | verdict |',
    '|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const outcome = r.outcome === 'error' ? `error: ${shorten(r.message, 140).replace(/\|/g, '\\|')}` : r.outcome;
    lines.push(`| \`${r.fault}\` | ${r.client} | ${r.cache ? 'on' : 'off'} | ${outcome} | ${seconds(r.ms)} | ` +
               `${r.requests} (${r.injected} faulted) | ${r.bytes} | ${r.kept ?? '–'} | ` +
               `${r.resumeBytes === null ? '–' : `${r.resumeBytes} B`} | ` +
               `${r.pass ? 'pass' : `**FAIL**: ${r.problems.join('; ').replace(/\|/g, '\\|')}`} |`);
  }
  return lines.join('\n');
}

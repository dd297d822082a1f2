// The `sipllm` package as users install it: `npm pack` of web/, installed
// into fresh apps made here from the files in apps/ (a Vite app, a webpack
// app, a plain Node ESM script), each with no configuration beyond what
// web/README.md tells users. Each app type-checks against the shipped types
// (`tsc --noEmit`), loads the bundled model over HTTP range requests from
// scripts/range-server.mjs on another origin, and generates greedily; the
// text must equal the native CLI's. The two web apps are production builds
// run in Debian's Chromium, cross-origin isolated (a threaded build: the
// relaxed SIMD one, which Chromium runs) and not (the single-thread build);
// the Vite app also under its dev server.
//
//   scripts/test-install.sh                          (builds web/dist, then runs this)
//   node --test tests/install/install.test.mjs       (once web/dist and web/wasm are built)
//
// npm installs into the apps from the registry the first time, then from
// SIPLLM_NPM_CACHE (default build/npm-cache) with --prefer-offline.
// SIPLLM_INSTALL_KEEP=1 keeps the apps (their directories are printed).

import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

// Which threaded build this Node picks: the relaxed SIMD one where it
// validates relaxed SIMD (Node 20 does not, without a flag).
import { hasRelaxedSimd } from '../../web/dist/env.js';

const here = dirname(fileURLToPath(import.meta.url));
const repoRoot = resolve(here, '../..');
const cliPath = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');
const npmCache = resolve(process.env.SIPLLM_NPM_CACHE ?? join(repoRoot, 'build/npm-cache'));
const keepApps = process.env.SIPLLM_INSTALL_KEEP === '1';

const MODEL_DIR = join(repoRoot, 'demo/public/models');
const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';
const TOKENS = 48;

// What the package must hold for an app to run without a copy step.
const PACKED_FILES = [
  'package.json', 'README.md', 'dist/index.js', 'dist/index.d.ts', 'dist/worker/worker.js',
  'wasm/package.json', 'wasm/sipllm-single.js', 'wasm/sipllm-single.wasm',
  'wasm/sipllm-threaded.js', 'wasm/sipllm-threaded.wasm', 'wasm/sipllm-threaded.worker.js',
  'wasm/sipllm-relaxed.js', 'wasm/sipllm-relaxed.wasm', 'wasm/sipllm-relaxed.worker.js',
];

const work = mkdtempSync(join(tmpdir(), 'sipllm-install-'));
const stoppers = [];
let tarball;
let modelUrl;
let expected;
let browser;

// The environment of a user's shell: without what npm sets for the script
// that runs these tests (npm_config_local_prefix would make `npm install` in
// an app install into this repository).
const userEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !/^npm_/i.test(name) && name !== 'INIT_CWD'));

function run(command, args, cwd) {
  try {
    return execFileSync(command, args, { cwd, env: userEnv, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    throw new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${error.stdout}\n${error.stderr}`);
  }
}

function npm(args, cwd) {
  return run('npm', [...args, '--cache', npmCache, '--prefer-offline', '--no-audit', '--no-fund'], cwd);
}

// A fresh app: the template's files, its dev dependencies and the packed
// package installed as a user would (`npm install sipllm-x.y.z.tgz`).
function createApp(template) {
  const dir = join(work, template);
  cpSync(join(here, 'apps', template), dir, { recursive: true });
  npm(['install', tarball], dir);
  if (keepApps) process.stdout.write(`# ${template} app: ${dir}\n`);
  return dir;
}

// A long-running command whose stdout line matching `ready` says it serves;
// it is stopped after the tests. Returns the match.
async function startProcess(command, args, cwd, ready) {
  const child = spawn(command, args, { cwd, env: userEnv, stdio: ['pipe', 'pipe', 'inherit'] });
  stoppers.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await exited;
  });
  return new Promise((done, fail) => {
    const lines = createInterface({ input: child.stdout });
    const seen = [];
    lines.on('line', (line) => {
      seen.push(line);
      const match = ready.exec(line.replace(/\x1b\[[0-9;]*m/g, ''));
      if (match !== null) done(match);
    });
    child.once('exit', (code) => fail(new Error(`${command} ${args.join(' ')} exited with ${code}:\n${seen.join('\n')}`)));
  });
}

// scripts/range-server.mjs serving `root`; returns its URL.
async function rangeServer(root, extraArgs = []) {
  const [line] = await startProcess(process.execPath,
                                    [join(repoRoot, 'scripts/range-server.mjs'), '--root', root, '--port', '0',
                                     '--exit-on-stdin-close', ...extraArgs],
                                    repoRoot, /^\{.*"url".*\}$/);
  return JSON.parse(line).url;
}

// `vite [command]` in the app, on a free port; returns its URL.
async function startVite(app, command) {
  const [, url] = await startProcess(process.execPath, [join(app, 'node_modules/vite/bin/vite.js'), ...command,
                                                        '--host', '127.0.0.1', '--port', '0'],
                                     app, /Local:\s+(http:\/\/\S+)/);
  return url;
}

function nativeGreedy(model, prompt, tokens) {
  assert.ok(existsSync(cliPath), `the native CLI ${cliPath} is missing: run scripts/build-native.sh (or set SIPLLM_CLI)`);
  const out = run(cliPath, ['run', '-m', model, '-p', prompt, '-n', String(tokens), '--temp', '0', '--threads', '1'], repoRoot);
  assert.ok(out.startsWith(prompt) && out.endsWith('\n'), `unexpected output from ${cliPath}: ${out}`);
  return out.slice(prompt.length, -1);
}

// Opens the app's page at `appUrl` with the model and prompt in its query;
// returns what the page reports (see apps/*/src).
async function runPage(appUrl) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const messages = [];
  page.on('console', (message) => messages.push(`${message.type()}: ${message.text()}`));
  page.on('pageerror', (error) => messages.push(`pageerror: ${error.message}`));
  try {
    const query = new URLSearchParams({ model: modelUrl, prompt: PROMPT, tokens: String(TOKENS) });
    const response = await page.goto(`${appUrl}?${query}`);
    assert.equal(response?.status(), 200, `${appUrl} did not serve the page`);
    await page.waitForFunction(() => window.sipllmOutcome !== undefined, null, { timeout: 0 });
    const outcome = await page.evaluate(() => window.sipllmOutcome);
    assert.equal(outcome.error, undefined, `the page failed: ${outcome.error}\n${messages.join('\n')}`);
    return { ...outcome, isolated: await page.evaluate(() => globalThis.crossOriginIsolated) };
  } finally {
    await context.close();
  }
}

// The engine's three WebAssembly modules, emitted by the bundler into `dist`.
function assertWasmEmitted(dist) {
  const files = readdirSync(dist, { recursive: true }).map(String);
  assert.equal(files.filter((file) => file.endsWith('.wasm')).length, 3, `dist/ holds:\n${files.join('\n')}`);
}

function assertGenerated(outcome, build) {
  assert.equal(outcome.stats.build, build);
  // The bundler emitted the fetch workers' script and it ran: the threaded
  // builds' range requests went to workers of their own.
  assert.deepEqual(outcome.stats.fetch, { workers: build !== 'single', error: '' });
  assert.equal(outcome.isolated, build !== 'single');
  assert.equal(outcome.text, expected);
}

before(async () => {
  mkdirSync(npmCache, { recursive: true });
  const [packed] = JSON.parse(npm(['pack', '--json', '--pack-destination', work], join(repoRoot, 'web')));
  tarball = join(work, packed.filename);
  const files = packed.files.map((file) => file.path);
  for (const file of PACKED_FILES) assert.ok(files.includes(file), `the package lacks ${file}`);

  modelUrl = `${await rangeServer(MODEL_DIR)}/${MODEL}`;
  expected = nativeGreedy(join(MODEL_DIR, MODEL), PROMPT, TOKENS);
  assert.ok(expected.length > 0);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  for (const stop of stoppers.reverse()) await stop();
  if (!keepApps) rmSync(work, { recursive: true, force: true });
});

describe('a fresh Node ESM script', () => {
  let app;
  before(() => {
    app = createApp('node');
  });

  test('type-checks against the shipped types', () => {
    run('npx', ['tsc', '--noEmit'], app);
  });

  test('generates the native text over range requests, threaded', () => {
    const outcome = JSON.parse(run(process.execPath, ['generate.js', modelUrl, PROMPT, String(TOKENS)], app));
    assert.deepEqual(outcome, { text: expected, build: hasRelaxedSimd() ? 'relaxed' : 'threaded' });
  });
});

describe('a fresh Vite app', () => {
  let app;
  before(() => {
    app = createApp('vite');
  });

  test('type-checks and builds', () => {
    run('npm', ['run', 'build'], app);
    assertWasmEmitted(join(app, 'dist'));
  });

  test('under `vite preview` (cross-origin isolated): the threaded build generates the native text', async () => {
    const url = await startVite(app, ['preview']);
    assertGenerated(await runPage(url), 'relaxed');
  });

  test('served without isolation headers: the single-thread build generates the native text', async () => {
    assertGenerated(await runPage(`${await rangeServer(join(app, 'dist'), ['--no-isolation'])}/`), 'single');
  });

  test('under the dev server `vite` (cross-origin isolated): the threaded build generates the native text', async () => {
    const url = await startVite(app, []);
    assertGenerated(await runPage(url), 'relaxed');
  });
});

describe('a fresh webpack app, production build', () => {
  let app;
  before(() => {
    app = createApp('webpack');
  });

  test('type-checks and builds', () => {
    run('npm', ['run', 'build'], app);
    assertWasmEmitted(join(app, 'dist'));
  });

  test('served cross-origin isolated: the threaded build generates the native text', async () => {
    assertGenerated(await runPage(`${await rangeServer(app)}/`), 'relaxed');
  });

  test('served without isolation headers: the single-thread build generates the native text', async () => {
    assertGenerated(await runPage(`${await rangeServer(app, ['--no-isolation'])}/`), 'single');
  });
});

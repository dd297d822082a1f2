// What the end-to-end tests share: where things are, the native CLI as the
// reference engine, model servers, and the page's controls.

import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { expect } from '@playwright/test';
import type { Page } from '@playwright/test';

export const demoDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = resolve(demoDir, '..');
export const bundledModel = join(demoDir, 'public/models/stories260K.gguf');
// The fixture models, gathered by the native build (tests/CMakeLists.txt).
export const sharedModels = process.env.SIPLLM_MODELS_DIR ?? resolve(repoRoot, 'build/native/tests/fixtures/models');
export const cliPath = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');

// Set by global-setup.ts.
export function demoUrl(path = '/'): string {
  const base = process.env.SIPLLM_DEMO_URL;
  if (base === undefined) throw new Error('SIPLLM_DEMO_URL is unset: the global set-up did not run');
  return new URL(path, base).href;
}

function requireCli(): void {
  if (!existsSync(cliPath)) {
    throw new Error(`the native CLI ${cliPath} is missing: build it with scripts/build-native.sh (or set SIPLLM_CLI)`);
  }
}

// The native engine's greedy continuation of `prompt`: `sipllm run` prints
// the prompt, then the generated text, then a newline.
export function nativeGreedy(model: string, prompt: string, tokens: number): string {
  requireCli();
  const out = execFileSync(cliPath, ['run', '-m', model, '-p', prompt, '-n', String(tokens), '--temp', '0', '--threads', '1'],
                           { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  if (!out.startsWith(prompt) || !out.endsWith('\n')) throw new Error(`unexpected output from ${cliPath}: ${out}`);
  return out.slice(prompt.length, -1);
}

// A random-weight model of a named shape, written by the native CLI.
export function generateModel(dir: string, shape: string, type: string, vocab: string): string {
  requireCli();
  const out = join(dir, `${shape}-${type}-${vocab.replace(/^ggml-vocab-|\.gguf$/g, '')}.gguf`);
  execFileSync(cliPath, ['gen', '--shape', shape, '--type', type, '--vocab', join(sharedModels, 'llama.cpp-vocab', vocab),
                         '-o', out], { stdio: 'ignore' });
  return out;
}

// scripts/range-server.mjs in its own process (Range, CORS, CORP, an
// optional bandwidth cap); it stops when this process ends.
export class RangeServer {
  private constructor(private readonly child: ChildProcess, readonly url: string) {}

  static async start(root: string, extraArgs: string[] = []): Promise<RangeServer> {
    const child = spawn(process.execPath, [join(repoRoot, 'scripts/range-server.mjs'), '--root', root, '--port', '0',
                                           '--exit-on-stdin-close', ...extraArgs],
                        { stdio: ['pipe', 'pipe', 'inherit'] });
    const line = await new Promise<string>((done, fail) => {
      createInterface({ input: child.stdout! }).once('line', done);
      child.once('exit', (code) => fail(new Error(`range-server exited with ${code}`)));
    });
    return new RangeServer(child, (JSON.parse(line) as { url: string }).url);
  }

  async stop(): Promise<void> {
    const exited = new Promise((done) => this.child.once('exit', done));
    this.child.kill('SIGTERM');
    await exited;
  }
}

// A server that answers Range requests correctly but sends no CORS headers:
// a page on another origin may not read what it serves.
export async function startServerWithoutCors(file: string): Promise<{ url: string; close(): Promise<void> }> {
  const bytes = readFileSync(file);
  const server: Server = createServer((req, res) => {
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    if (range === null) {
      res.writeHead(200, { 'Content-Length': bytes.length, 'Accept-Ranges': 'bytes' });
      res.end(bytes);
      return;
    }
    const start = Number(range[1]);
    const end = Math.min(range[2] === '' ? bytes.length - 1 : Number(range[2]), bytes.length - 1);
    res.writeHead(206, { 'Content-Range': `bytes ${start}-${end}/${bytes.length}`, 'Content-Length': end - start + 1 });
    res.end(bytes.subarray(start, end + 1));
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise((done) => {
      server.closeAllConnections();
      server.close(() => done());
    }),
  };
}

// A local port nothing listens on.
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  await new Promise((done) => server.close(done));
  return port;
}

// ---- The page ---------------------------------------------------------------------

type Status = 'idle' | 'loading' | 'ready' | 'generating' | 'done' | 'stopped' | 'failed';

async function settledCount(page: Page, what: 'loads' | 'requests'): Promise<number> {
  return Number((await page.locator('#status').getAttribute(`data-${what}`)) ?? '0');
}

// Runs `act`, then waits until one more load (or request) has settled on the
// page; returns the state it left.
async function settle(page: Page, what: 'loads' | 'requests', act: () => Promise<void>): Promise<Status> {
  const before = await settledCount(page, what);
  await act();
  await expect.poll(() => settledCount(page, what)).toBeGreaterThan(before);
  return (await page.locator('#status').getAttribute('data-state')) as Status;
}

// Opens the demo (which loads the bundled model, or ?model=URL) and waits
// until the model is loaded (or failed to).
export async function openDemo(page: Page, query = ''): Promise<Status> {
  return openDemoAt(page, demoUrl(`/${query}`));
}

// The same, for the demo served from anywhere (a production build).
export async function openDemoAt(page: Page, url: string): Promise<Status> {
  await page.goto(url);
  await expect.poll(() => settledCount(page, 'loads')).toBeGreaterThan(0);
  return (await page.locator('#status').getAttribute('data-state')) as Status;
}

export async function expectReady(page: Page, state: Status): Promise<void> {
  expect(state, await page.locator('#error').innerText()).toBe('ready');
}

// Loads a model by URL through the form.
export async function loadUrl(page: Page, url: string): Promise<Status> {
  return settle(page, 'loads', async () => {
    await page.locator('#model-url').fill(url);
    await page.locator('input[name=source][value=url]').check();
    await page.locator('#load').click();
  });
}

export async function loadBundled(page: Page): Promise<Status> {
  return settle(page, 'loads', async () => {
    await page.locator('input[name=source][value=bundled]').check();
    await page.locator('#load').click();
  });
}

// Unloads the model through the page and waits until the unload has finished
// (its worker has exited), not only until the page has disabled the button.
export async function unload(page: Page): Promise<void> {
  await page.locator('#unload').click();
  await expect(page.locator('#unload')).toBeDisabled();
  await expect(page.locator('#status')).toHaveAttribute('data-state', 'idle');
}

export async function setFields(page: Page, fields: Record<string, string | number>): Promise<void> {
  for (const [id, value] of Object.entries(fields)) await page.locator(`#${id}`).fill(String(value));
}

// Starts generating from `prompt` in completion mode.
export async function startCompletion(page: Page, prompt: string): Promise<void> {
  await page.locator('#mode-completion').click();
  await page.locator('#prompt').fill(prompt);
  await page.locator('#generate').click();
}

// Generates from `prompt` in completion mode; returns the generated text.
export async function complete(page: Page, prompt: string): Promise<string> {
  const state = await settle(page, 'requests', () => startCompletion(page, prompt));
  expect(state, await page.locator('#error').innerText()).toBe('done');
  return (await page.locator('#output .generated').textContent()) ?? '';
}

// Waits until the running request settles.
export async function requestSettled(page: Page, requestsBefore: number): Promise<Status> {
  await expect.poll(() => settledCount(page, 'requests')).toBeGreaterThan(requestsBefore);
  return (await page.locator('#status').getAttribute('data-state')) as Status;
}

export async function requestsSettled(page: Page): Promise<number> {
  return settledCount(page, 'requests');
}

// The engine's statistics, as the page holds them.
export async function pageStats(page: Page): Promise<import('sipllm').Stats> {
  return page.evaluate(() => (globalThis as unknown as { sipllmDemo: { stats(): import('sipllm').Stats } }).sipllmDemo.stats());
}

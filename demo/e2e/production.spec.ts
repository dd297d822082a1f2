// The demo as a production build (`vite build`, as `npm run build
// --workspace demo` makes it) on a plain static server that sends the
// isolation headers and honours Range (scripts/range-server.mjs), with no
// dev server anywhere: the engine worker must come bundled with its imports,
// and the engine's builds and the bundled model must be in the output.

import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { expect, test } from '@playwright/test';
import { build } from 'vite';

import {
  RangeServer, bundledModel, complete, demoDir, expectReady, nativeGreedy, openDemoAt, pageStats, setFields,
} from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 60;

let outDir: string;
let server: RangeServer;
let expected: string;

test.beforeAll(async () => {
  expected = nativeGreedy(bundledModel, PROMPT, TOKENS);
  outDir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-build-'));
  await build({ configFile: join(demoDir, 'vite.config.ts'), build: { outDir, emptyOutDir: true }, logLevel: 'warn' });
  server = await RangeServer.start(outDir);
});

test.afterAll(async () => {
  await server?.stop();
  if (outDir) rmSync(outDir, { recursive: true, force: true });
});

test('the production build generates what the native engine generates', async ({ page }, testInfo) => {
  // The engine worker is its own chunk, bundled with what it imports.
  expect(readdirSync(join(outDir, 'assets')).filter((name) => /^worker-[\w-]+\.js$/.test(name))).toHaveLength(1);
  expect(readdirSync(join(outDir, 'sipllm-wasm')).sort()).toEqual(expect.arrayContaining([
    'sipllm-single.js', 'sipllm-single.wasm', 'sipllm-threaded.js', 'sipllm-threaded.wasm', 'sipllm-threaded.worker.js',
    'sipllm-relaxed.js', 'sipllm-relaxed.wasm', 'sipllm-relaxed.worker.js',
  ]));

  await expectReady(page, await openDemoAt(page, `${server.url}/`));
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
  await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
  expect(await complete(page, PROMPT)).toBe(expected);
  await page.screenshot({ path: testInfo.outputPath('production-build.png'), fullPage: true });
  const stats = await pageStats(page);
  expect(stats.build).toBe('relaxed');
  await expect(page.locator('#units .unit[data-state="resident"]')).toHaveCount(stats.loader.units.length);
});

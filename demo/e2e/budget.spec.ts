// A memory budget smaller than the model: the blocks it cannot keep are
// streamed again for every token (from the browser's cache), the page shows
// which, and the memory figure stays within the budget. The text is the
// native engine's all the same.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test } from '@playwright/test';

import {
  RangeServer, complete, expectReady, generateModel, loadUrl, nativeGreedy, openDemo, pageStats, setFields,
} from './support.js';

const PROMPT = 'Tell me a story about a dragon';
const TOKENS = 16;
const BUDGET_MB = 20;  // of a 45 MB model

let dir: string;
let server: RangeServer;
let model: string;
let modelUrl: string;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-budget-'));
  model = generateModel(dir, 'kquant-small', 'Q8_0', 'ggml-vocab-llama-spm.gguf');
  server = await RangeServer.start(dir);
  modelUrl = `${server.url}/${basename(model)}`;
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a model over the memory budget streams some blocks every token, within the budget', async ({ page }, testInfo) => {
  const expected = nativeGreedy(model, PROMPT, TOKENS);
  await expectReady(page, await openDemo(page));
  await setFields(page, { 'memory-budget': BUDGET_MB, temperature: 0, 'max-tokens': TOKENS });
  expect(await loadUrl(page, modelUrl)).toBe('ready');
  expect(await complete(page, PROMPT)).toBe(expected);
  await page.screenshot({ path: testInfo.outputPath('budget.png'), fullPage: true });

  const stats = await pageStats(page);
  const budget = BUDGET_MB * 1e6;
  expect(stats.memoryBudget).toBe(budget);
  expect(stats.loader.peakWeightBytes).toBeLessThanOrEqual(budget);
  const streamed = stats.loader.units.filter((unit) => !unit.resident).length;
  expect(streamed).toBeGreaterThan(0);
  expect(stats.loader.prefetchHits + stats.loader.prefetchMisses).toBeGreaterThan(0);

  await expect(page.locator('#units .unit[data-state="streamed"]')).toHaveCount(streamed);
  await expect(page.locator('#units .unit[data-state="resident"]')).toHaveCount(stats.loader.units.length - streamed);
  await expect(page.locator('#units .unit[data-cached]')).toHaveCount(stats.loader.units.length);
  await expect(page.locator('[data-figure="memory"] .value')).toHaveText(/ MB of 20\.0 MB$/);
  await expect(page.locator('[data-figure="memory"] meter')).toBeVisible();
  await expect(page.locator('[data-figure="hit-rate"] .value')).toHaveText(/^[\d.]+ %$/);

  // The browser's cache lists the model, whole, beside the bundled one
  // (whose header the page read first); deleting one removes it from the list.
  await page.locator('#cache-panel summary').click();
  await page.locator('#refresh-cache').click();
  const entries = page.locator('#cached-models li');
  await expect(entries.filter({ hasText: modelUrl })).toHaveText(new RegExp(`^${modelUrl}: 44\\.9 MB of 44\\.9 MB`));
  const bundled = entries.filter({ hasText: '/models/stories260K.gguf' });
  await expect(bundled).toHaveCount(1);
  await bundled.getByRole('button', { name: 'Delete' }).click();
  await expect(bundled).toHaveCount(0);
  await expect(entries.filter({ hasText: modelUrl })).toHaveCount(1);
});

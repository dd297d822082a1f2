// Stop ends a generation, in both builds: the engine reports the request as
// cancelled within a token (threaded), or its worker is halted and the next
// request restarts it (single-thread); either way the page can generate again.
// The model is a random-weight one of a real shape, slow enough per token
// that a long request is still running when Stop is pressed.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';

import {
  RangeServer, complete, expectReady, generateModel, openDemo, pageStats, requestSettled, requestsSettled, setFields,
  startCompletion,
} from './support.js';

const PROMPT = 'Tell me a story about a dragon';
const LONG = 1500;

let dir: string;
let server: RangeServer;
let modelUrl: string;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-stop-'));
  const model = generateModel(dir, 'kquant-small', 'Q8_0', 'ggml-vocab-llama-spm.gguf');
  server = await RangeServer.start(dir);
  modelUrl = `${server.url}/${basename(model)}`;
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Starts a long greedy request, waits for its first text, presses Stop.
async function startAndStop(page: Page): Promise<void> {
  await setFields(page, { temperature: 0, 'max-tokens': LONG });
  const before = await requestsSettled(page);
  await startCompletion(page, PROMPT);
  await expect(page.locator('#status')).toHaveAttribute('data-state', 'generating');
  await expect(page.locator('#output .generated')).not.toBeEmpty();
  await expect(page.locator('button.stop').first()).toBeEnabled();
  await page.locator('#completion-view button.stop').click();
  expect(await requestSettled(page, before)).toBe('stopped');
  await expect(page.locator('#output')).toHaveAttribute('data-state', 'stopped');
  await expect(page.locator('#generate')).toBeEnabled();
  await expect(page.locator('#completion-view button.stop')).toBeDisabled();
}

test('Stop ends a generation in the threaded build, within a token', async ({ page }) => {
  await expectReady(page, await openDemo(page, `?model=${encodeURIComponent(modelUrl)}`));
  await startAndStop(page);
  const stats = await pageStats(page);
  expect(stats.build).toBe('relaxed');  // threaded, with relaxed SIMD: Chromium has it
  const generation = stats.lastGeneration!;
  expect(generation.stopReason).toBe('cancelled');
  expect(generation.generatedTokens).toBeLessThan(LONG);
  expect(generation.tokensAtCancel).toBeDefined();
  expect(generation.generatedTokens - generation.tokensAtCancel!).toBeLessThanOrEqual(1);
  await expect(page.locator('[data-figure="stop"] .value')).toHaveText('cancelled');
  await expect(page.locator('#status')).toHaveText(/^Stopped after \d+ tokens\.$/);

  // The engine takes the next request.
  await setFields(page, { 'max-tokens': 8 });
  await complete(page, PROMPT);
  expect((await pageStats(page)).lastGeneration?.generatedTokens).toBe(8);
});

test('Stop ends a generation in the single-thread build, which restarts for the next request', async ({ page }) => {
  await expectReady(page, await openDemo(page, `?isolate=0&model=${encodeURIComponent(modelUrl)}`));
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(false);
  await startAndStop(page);
  await expect(page.locator('#status')).toHaveText(/single-thread engine was halted/);

  await setFields(page, { 'max-tokens': 8 });
  await complete(page, PROMPT);
  const stats = await pageStats(page);
  expect(stats.build).toBe('single');
  expect(stats.lastGeneration?.generatedTokens).toBe(8);
  expect(stats.lastGeneration?.stopReason).toBe('max tokens');
});

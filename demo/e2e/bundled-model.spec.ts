// The bundled model in a cross-origin isolated page: greedy text equal to the
// native engine's, then the figures, the block map and the timeline.

import { expect, test } from '@playwright/test';

import {
  bundledModel, complete, expectReady, loadBundled, nativeGreedy, openDemo, pageStats, requestSettled, requestsSettled,
  setFields,
} from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 120;

let expected: string;

test.beforeAll(() => {
  expected = nativeGreedy(bundledModel, PROMPT, TOKENS);
});

test('generates greedily what the native engine generates, with figures and a timeline', async ({ page }, testInfo) => {
  await expectReady(page, await openDemo(page));
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
  await expect(page.locator('#isolation-badge')).toHaveAttribute('data-isolated', 'true');
  await expect(page.locator('#isolation-note')).toBeHidden();
  // No chat template in this model: completion mode, chat disabled.
  await expect(page.locator('#mode-chat')).toBeDisabled();
  await expect(page.locator('#model-info [data-chat-template]')).toHaveText(/No chat template/);

  await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
  const text = await complete(page, PROMPT);
  expect(text).toBe(expected);
  await page.screenshot({ path: testInfo.outputPath('bundled-model-after-generation.png'), fullPage: true });

  // The figures, as the engine reported them.
  const stats = await pageStats(page);
  expect(stats.build).toBe('relaxed');  // threaded, with relaxed SIMD: Chromium has it
  expect(stats.lastGeneration?.generatedTokens).toBe(TOKENS);
  const figure = (name: string) => page.locator(`[data-figure="${name}"] .value`);
  await expect(figure('isolation')).toHaveText('yes');
  await expect(figure('threads')).toHaveText(String(stats.threads));
  await expect(figure('ttft')).toHaveText(/^[\d.]+ m?s$/);
  await expect(figure('prefill')).toHaveText(/^[\d.,]+ tok\/s$/);
  await expect(figure('decode')).toHaveText(/^[\d.,]+ tok\/s$/);
  await expect(figure('stop')).toHaveText('max tokens');
  await expect(page.locator('[data-figure="hit-rate"]')).toBeVisible();
  await expect(figure('memory')).toHaveText(/MB \(no budget\)$/);
  await expect(figure('network')).toHaveText(/^\d+ requests?$/);

  // Every unit arrived and stays resident (no budget); the bar is full.
  const units = stats.loader.units.length;
  expect(units).toBe(6);  // 5 blocks and the output head
  await expect(page.locator('#units .unit')).toHaveCount(units);
  await expect(page.locator('#units .unit[data-state="resident"]')).toHaveCount(units);
  const total = await page.locator('#progress-text').getAttribute('data-total');
  expect(Number(total)).toBeGreaterThan(0);
  await expect(page.locator('#progress-text')).toHaveAttribute('data-loaded', total!);

  // The timeline chart draws the request's events, one row per unit.
  const canvas = page.locator('#timeline');
  await expect(canvas).toHaveAttribute('data-units', String(units));
  expect(Number(await canvas.getAttribute('data-events'))).toBe(stats.loader.timeline.length);
  expect(stats.loader.timeline.length).toBeGreaterThanOrEqual(units);
  const box = await canvas.boundingBox();
  expect(box?.height).toBeGreaterThan(units * 10);

  // A second request on the same model: the same text, from resident memory
  // without reading a unit again.
  expect(await complete(page, PROMPT)).toBe(expected);
  const again = await pageStats(page);
  expect(again.loader.unitsLoaded).toBe(0);
  expect(again.loader.residentHits).toBeGreaterThan(0);

  // Loaded again, the model comes from the browser's cache without a request.
  expect(await loadBundled(page)).toBe('ready');
  expect(await complete(page, PROMPT)).toBe(expected);
  const cached = await pageStats(page);
  expect(cached.source?.openedFromCache).toBe(true);
  expect(cached.source?.requests).toBe(0);
  await expect(page.locator('#units .unit[data-cached]')).toHaveCount(units);
  await expect(page.locator('#progress-bar')).toHaveAttribute('data-phase', 'ready');
  await expect(page.locator('#progress-text')).toHaveText(/fetched 0 B, from the cache [\d.]+ MB$/);

  // Continue: the text so far becomes the prompt, as the native engine would take it.
  const longer = PROMPT + expected;
  const continued = nativeGreedy(bundledModel, longer, 40);
  await setFields(page, { 'max-tokens': 40 });
  const before = await requestsSettled(page);
  await page.locator('#continue').click();
  expect(await requestSettled(page, before)).toBe('done');
  await expect(page.locator('#prompt')).toHaveValue(longer);
  expect(await page.locator('#output .generated').textContent()).toBe(continued);
});

test('the plain threaded build, where relaxed SIMD is not used, generates the same text', async ({ page }) => {
  await expectReady(page, await openDemo(page, '?build=threaded'));
  await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
  expect(await complete(page, PROMPT)).toBe(expected);
  expect((await pageStats(page)).build).toBe('threaded');
});

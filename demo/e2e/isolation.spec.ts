// A page served without COOP/COEP cannot share memory with workers: the demo
// says so, runs the single-thread build on one thread, and still generates
// the native engine's text.

import { expect, test } from '@playwright/test';

import { bundledModel, complete, expectReady, nativeGreedy, openDemo, pageStats, setFields } from './support.js';

const PROMPT = 'The little dog';
const TOKENS = 80;

test('without cross-origin isolation the single-thread build generates the same text', async ({ page }, testInfo) => {
  const expected = nativeGreedy(bundledModel, PROMPT, TOKENS);
  await expectReady(page, await openDemo(page, '?isolate=0'));
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(false);
  await expect(page.locator('#isolation-badge')).toHaveAttribute('data-isolated', 'false');
  await expect(page.locator('#isolation-note')).toBeVisible();
  await expect(page.locator('#isolation-note')).toHaveText(/not cross-origin isolated.*single-thread build/);
  await expect(page.locator('#threads')).toBeDisabled();
  await expect(page.locator('#threads')).toHaveValue('1');

  await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
  expect(await complete(page, PROMPT)).toBe(expected);
  const stats = await pageStats(page);
  expect(stats.build).toBe('single');
  expect(stats.threads).toBe(1);
  expect(stats.crossOriginIsolated).toBe(false);
  await expect(page.locator('[data-figure="isolation"] .value')).toHaveText('no');
  await expect(page.locator('[data-figure="threads"] .value')).toHaveText('1');
  await expect(page.locator('[data-figure="threads"] .detail')).toHaveText(/single-thread build/);
  await page.screenshot({ path: testInfo.outputPath('single-thread.png'), fullPage: true });
});

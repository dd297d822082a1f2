// Loading, using and unloading a model ten times in one page leaves the
// tab's memory where it was: each load's worker and WebAssembly memory go
// with its unload.

import { expect, test } from '@playwright/test';

import config from '../playwright.config.js';
import { complete, expectReady, loadBundled, openDemo, setFields, unload } from './support.js';

// Chromium answers a memory measurement at its next garbage collection,
// which it may put off for up to a minute; this flag makes it collect and
// measure at once.
const launchOptions = config.use!.launchOptions!;
test.use({ launchOptions: { ...launchOptions, args: [...launchOptions.args!, '--enable-blink-features=ForceEagerMeasureMemory'] } });

const ROUNDS = 10;
// What a tab may keep between rounds: allocator and JIT caches, the page's
// own DOM (the output and timeline redrawn each round). (0.2 MB measured
// over 19 rounds; a worker or WebAssembly memory left behind is 32 MB or
// more, and 1 MB a round would show.)
const ALLOWED_GROWTH_BYTES = 8e6;

async function tabMemory(page: import('@playwright/test').Page): Promise<number> {
  // Counts the page and its workers, the WebAssembly memories included; it
  // resolves after a garbage collection.
  return page.evaluate(async () => {
    const measure = (performance as unknown as { measureUserAgentSpecificMemory(): Promise<{ bytes: number }> });
    return (await measure.measureUserAgentSpecificMemory()).bytes;
  });
}

test('ten loads and unloads do not grow the tab', async ({ page }) => {
  test.setTimeout(600_000);
  await expectReady(page, await openDemo(page));
  expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
  await setFields(page, { temperature: 0, 'max-tokens': 8 });
  const round = async () => {
    expect(await loadBundled(page)).toBe('ready');
    expect((await complete(page, 'Once upon a time')).length).toBeGreaterThan(0);
    await unload(page);
  };
  // The measure sees a loaded model (its worker's WebAssembly memory), so it
  // would see one left behind.
  expect(await loadBundled(page)).toBe('ready');
  const loaded = await tabMemory(page);
  await unload(page);
  await round();  // the first round brings in what every later one reuses
  const before = await tabMemory(page);
  expect(loaded - before).toBeGreaterThan(32e6);
  for (let i = 1; i < ROUNDS; ++i) await round();
  const after = await tabMemory(page);
  console.log(`tab memory: ${(loaded / 1e6).toFixed(1)} MB with a model loaded, ` +
              `${(before / 1e6).toFixed(1)} MB after one round, ${(after / 1e6).toFixed(1)} MB after ${ROUNDS}`);
  expect(after - before).toBeLessThanOrEqual(ALLOWED_GROWTH_BYTES);
});

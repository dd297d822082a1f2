// The demo loads one file of every model family (written and quantized by
// llama.cpp) over HTTP range requests, streams it under a memory budget of a
// quarter of its size, and writes the native engine's text.

import { statSync } from 'node:fs';
import { join } from 'node:path';

import { expect, test } from '@playwright/test';

import { RangeServer, complete, expectReady, loadUrl, nativeGreedy, openDemo, pageStats, repoRoot, setFields } from './support.js';

const FIXTURES = join(repoRoot, 'tests/fixtures/arch');
const FAMILIES = ['llama3', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3', 'smollm3'];
const PROMPT = 'Once upon a time there was a little robot';
const TOKENS = 12;

let server: RangeServer;

test.beforeAll(async () => {
  server = await RangeServer.start(FIXTURES);
});

test.afterAll(async () => {
  await server?.stop();
});

for (const family of FAMILIES) {
  test(`${family} streams under a quarter of its size with the native engine's text`, async ({ page }) => {
    const file = `${family}-Q4_K_M.gguf`;
    const bytes = statSync(join(FIXTURES, file)).size;
    const budgetMb = Math.floor(bytes / 4 / 1e3) / 1e3;
    const expected = nativeGreedy(join(FIXTURES, file), PROMPT, TOKENS);
    await expectReady(page, await openDemo(page));
    await setFields(page, { 'memory-budget': budgetMb, temperature: 0, 'max-tokens': TOKENS });
    expect(await loadUrl(page, `${server.url}/${file}`)).toBe('ready');
    expect(await complete(page, PROMPT)).toBe(expected);
    const stats = await pageStats(page);
    const architecture = await page.evaluate(
      () => (globalThis as unknown as { sipllmDemo: { llm: { info: { architecture: string } } } }).sipllmDemo.llm.info.architecture);
    expect(architecture).toBe(family === 'llama3' ? 'llama' : family);
    expect(stats.loader.peakWeightBytes).toBeLessThanOrEqual(budgetMb * 1e6);
    expect(stats.loader.units.filter((unit) => !unit.resident).length).toBeGreaterThan(0);
  });
}

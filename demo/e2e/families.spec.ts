// The demo loads one file of every model family (written and quantized by
// llama.cpp) over HTTP range requests, streams it under a memory budget that
// leaves its weights a quarter of the file (the budget covers the working
// memory too: activations and the KV cache), and writes the native engine's
// text, with the relaxed SIMD build.

import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';

import { expect, test } from '@playwright/test';

import { SipLLM } from 'sipllm';

import { RangeServer, cliPath, complete, expectReady, loadUrl, openDemo, pageStats, repoRoot, setFields } from './support.js';

const FIXTURES = join(repoRoot, 'tests/fixtures/arch');
const FAMILIES = ['llama3', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3', 'smollm3', 'qwen35', 'lfm2', 'gemma4', 'qwen3moe',
                  'qwen35moe', 'lfm2moe'];
const PROMPT = 'Once upon a time there was a little robot';
const TOKENS = 12;
const CONTEXT = 64;

// The native engine's greedy text at the same context (it picks Phi-3's rope
// factors, as in llama.cpp).
function nativeText(model: string): string {
  const out = execFileSync(cliPath, ['run', '-m', model, '-p', PROMPT, '-n', String(TOKENS), '--temp', '0', '--threads', '1',
                                     '--ctx', String(CONTEXT)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  return out.slice(PROMPT.length, -1);
}

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
    const url = `${server.url}/${file}`;
    const quarter = Math.floor(statSync(join(FIXTURES, file)).size / 4);
    const expected = nativeText(join(FIXTURES, file));
    // What the working memory takes, from a load (here, under Node) that
    // keeps no weights, with the page's threads and context; a little room for
    // the page's other figures.
    const probe = await SipLLM.load(url, { threads: 2, contextLength: CONTEXT, cache: false, memoryBudget: 0 });
    const working = probe.stats().loader.workingBytes;
    // qwen35's fixture has four blocks, the largest 30 % of the file: the
    // weights' share is then one buffer of it, the least a ring takes.
    const weights = Math.max(quarter, ...probe.stats().loader.units.map((unit) => unit.memoryBytes));
    await probe.unload();
    const budgetMb = Math.ceil((working + weights) / 1e3) / 1e3;
    await expectReady(page, await openDemo(page));
    await setFields(page, { threads: 2, 'memory-budget': budgetMb, 'context-length': CONTEXT, temperature: 0,
                            'max-tokens': TOKENS });
    expect(await loadUrl(page, `${server.url}/${file}`)).toBe('ready');
    expect(await complete(page, PROMPT)).toBe(expected);
    const stats = await pageStats(page);
    const architecture = await page.evaluate(
      () => (globalThis as unknown as { sipllmDemo: { llm: { info: { architecture: string } } } }).sipllmDemo.llm.info.architecture);
    expect(architecture).toBe(family === 'llama3' ? 'llama' : family);
    // Chromium has relaxed SIMD: this text came from its 8-bit dot products
    // (the file's Q4_K, Q5_0 and Q6_K tensors), the native text from SSSE3's.
    expect(stats.build).toBe('relaxed');
    expect(stats.loader.residentBytes + stats.loader.ringBytes).toBeLessThanOrEqual(weights + 2e3);
    expect(stats.loader.peakWeightBytes + stats.loader.workingBytes).toBeLessThanOrEqual(budgetMb * 1e6);
    expect(stats.loader.units.filter((unit) => !unit.resident).length).toBeGreaterThan(0);
    // The timeline: a row per unit, but a mixture of experts' experts share
    // one per layer; the prefill's end (a pass over every row) is found.
    const experts = stats.loader.units.filter((unit) => / expert /.test(unit.name));
    const expertLayers = new Set(experts.map((unit) => unit.name.split(' ')[1]));
    const timeline = page.locator('#timeline');
    expect(Number(await timeline.getAttribute('data-rows')))
      .toBe(stats.loader.units.length - experts.length + expertLayers.size);
    expect(await timeline.getAttribute('data-first-token-ms')).not.toBe('');
  });
}

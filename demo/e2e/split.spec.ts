// Split models (llama.cpp's gguf-split) in Chromium, opened by their first
// part's URL: the native engine's text, each part its own OPFS entry, and a
// second load from those entries alone. And a set whose tensors lie past
// 4 GiB in each part (sparse files): fetched at those offsets by the page,
// kept in OPFS at those offsets, and read back from there. That one runs in a
// browser profile on disk, where OPFS is the disk (a test's usual profile
// keeps OPFS in memory, where a sparse 4.5 GiB file would be real).

import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { chromium, expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';

import config from '../playwright.config.js';
import {
  RangeServer, bundledModel, cliPath, complete, expectReady, loadUrl, nativeGreedy, openDemo, pageStats, setFields,
} from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 24;
const FOUR_GIB = 2 ** 32;

let dir: string;
let server: RangeServer;
let expected: string;

interface ServerLog {
  requests: number;
  log: Array<{ url: string; range: string | null }>;
}

async function serverStats(): Promise<ServerLog> {
  return (await fetch(`${server.url}/__stats`)).json() as Promise<ServerLog>;
}

async function resetServer(): Promise<void> {
  await fetch(`${server.url}/__reset`, { method: 'POST' });
}

function rangeStart(range: string | null): number {
  const match = /^bytes=(\d+)-/.exec(range ?? '');
  return match === null ? -1 : Number(match[1]);
}

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-split-'));
  const split = (parts: number, prefix: string, extra: string[] = []) =>
    execFileSync(cliPath, ['split', '--parts', String(parts), ...extra, bundledModel, join(dir, prefix)], { stdio: 'ignore' });
  split(3, 'stories');
  split(2, 'far', ['--data-gap', '4608M']);  // a 4.5 GiB hole before each part's tensors
  server = await RangeServer.start(dir);
  expected = nativeGreedy(bundledModel, PROMPT, TOKENS);
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// Loads `url` with the cache on, generates, and returns what the page saw.
async function loadAndComplete(page: Page, url: string) {
  await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
  await page.locator('#use-cache').check();
  expect(await loadUrl(page, url), await page.locator('#error').innerText()).toBe('ready');
  const text = await complete(page, PROMPT);
  return { text, stats: await pageStats(page) };
}

test('a split model generates the unsplit text, each part cached, then from OPFS alone', async ({ page }) => {
  await expectReady(page, await openDemo(page));
  const first = `${server.url}/stories-00001-of-00003.gguf`;
  await resetServer();
  const cold = await loadAndComplete(page, first);
  expect(cold.text).toBe(expected);
  expect(cold.stats.source?.bytesFetched).toBeGreaterThan(0);
  const requested = new Set((await serverStats()).log.map((entry) => entry.url));
  expect([...requested].sort()).toEqual([1, 2, 3].map((k) => `/stories-0000${k}-of-00003.gguf`));

  await page.locator('#cache-panel summary').click();
  await page.locator('#refresh-cache').click();
  for (const k of [1, 2, 3]) {
    const part = `${server.url}/stories-0000${k}-of-00003.gguf`;
    // Whole: "URL: 505.7 kB of 505.7 kB".
    await expect(page.locator('#cached-models li').filter({ hasText: part }))
      .toHaveText(new RegExp(`^${part}: ([\\d.]+ [kMG]B) of \\1`));
  }

  await resetServer();
  const again = await loadAndComplete(page, first);
  expect(again.text).toBe(expected);
  expect(again.stats.source?.bytesFetched).toBe(0);
  expect((await serverStats()).requests).toBe(0);
});

test('tensors past 4 GiB are fetched, cached in OPFS at their offsets and read back from there', async () => {
  expect(statSync(join(dir, 'far-00001-of-00002.gguf')).size).toBeGreaterThan(FOUR_GIB);
  const profile = mkdtempSync(join(tmpdir(), 'sipllm-e2e-profile-'));
  const context = await chromium.launchPersistentContext(profile, {
    ...config.use!.launchOptions, headless: true, viewport: config.use!.viewport,
  });
  try {
    const page = context.pages()[0] ?? await context.newPage();
    await expectReady(page, await openDemo(page));
    const first = `${server.url}/far-00001-of-00002.gguf`;
    await resetServer();
    const cold = await loadAndComplete(page, first);
    expect(cold.text).toBe(expected);
    expect(cold.stats.cache.error).toBe('');
    expect((await serverStats()).log.some((entry) => rangeStart(entry.range) > FOUR_GIB)).toBe(true);

    await resetServer();
    const again = await loadAndComplete(page, first);
    expect(again.text).toBe(expected);
    expect(again.stats.source?.bytesFromCache).toBeGreaterThan(0);
    // (Readahead may ask for pages of the unused gap again; no weight.)
    expect((await serverStats()).log.some((entry) => rangeStart(entry.range) > FOUR_GIB)).toBe(false);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
});

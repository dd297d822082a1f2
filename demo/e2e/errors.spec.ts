// Every failure a person can meet while choosing a model shows a message
// that names it: a missing file, something that is not a URL or not a GGUF
// file, a server that refuses CORS or cannot be reached, a model the engine
// does not run, a memory budget too small, a setting out of range.

import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { expect, test } from '@playwright/test';
import type { Page } from '@playwright/test';

import {
  RangeServer, bundledModel, closedPort, demoUrl, expectReady, loadBundled, loadUrl, openDemo, setFields, sharedModels,
  startServerWithoutCors,
} from './support.js';

let root: string;
let server: RangeServer;

test.beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'sipllm-e2e-errors-'));
  // A valid GGUF file of another architecture: a GPT-2 vocabulary.
  symlinkSync(join(sharedModels, 'llama.cpp-vocab/ggml-vocab-gpt-2.gguf'), join(root, 'gpt2-vocab.gguf'));
  server = await RangeServer.start(root);
});

test.afterAll(async () => {
  await server?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

async function expectFailure(page: Page, kind: string, title: RegExp, message: RegExp): Promise<void> {
  const box = page.locator('#error');
  await expect(box).toBeVisible();
  await expect(box).toHaveAttribute('data-kind', kind);
  await expect(box.locator('.title')).toHaveText(title);
  await expect(box.locator('.message')).toHaveText(message);
  await expect(box.locator('.hint')).not.toBeEmpty();
}

test.beforeEach(async ({ page }) => {
  await expectReady(page, await openDemo(page));
});

test('a URL with no file behind it says 404', async ({ page }) => {
  expect(await loadUrl(page, demoUrl('/models/no-such-model.gguf'))).toBe('failed');
  await expectFailure(page, 'not-found', /404/, /no-such-model\.gguf.*404/);
  await expect(page.locator('#generate')).toBeDisabled();
});

test('something that is not an http URL is refused as such', async ({ page }) => {
  expect(await loadUrl(page, 'ftp://example.com/model.gguf')).toBe('failed');
  await expectFailure(page, 'invalid-argument', /Not a model URL/, /ftp:\/\/example\.com\/model\.gguf.*http/);
});

test('a file that is not GGUF says so, and a web page is recognised', async ({ page }) => {
  expect(await loadUrl(page, demoUrl('/models/ATTRIBUTION.md'))).toBe('failed');
  await expectFailure(page, 'format', /not a GGUF model/, /ATTRIBUTION\.md: not a GGUF file/);

  expect(await loadUrl(page, demoUrl('/'))).toBe('failed');
  await expectFailure(page, 'format', /not a GGUF model/, /not a GGUF file/);
  await expect(page.locator('#error .hint')).toHaveText(/web page.*resolve/);
});

test('a model of another architecture is unsupported, named', async ({ page }) => {
  expect(await loadUrl(page, `${server.url}/gpt2-vocab.gguf`)).toBe('failed');
  await expectFailure(page, 'unsupported', /not supported/, /architecture 'gpt2'/);
});

test('a server without CORS headers is reported as refusing CORS', async ({ page }) => {
  const plain = await startServerWithoutCors(bundledModel);
  try {
    expect(await loadUrl(page, `${plain.url}/stories260K.gguf`)).toBe('failed');
    await expectFailure(page, 'cors', /CORS refused/, /stories260K\.gguf/);
    await expect(page.locator('#error .hint')).toHaveText(/Access-Control-Allow-Origin/);
  } finally {
    await plain.close();
  }
});

test('a server that does not answer is reported as unreachable', async ({ page }) => {
  const port = await closedPort();
  expect(await loadUrl(page, `http://127.0.0.1:${port}/model.gguf`)).toBe('failed');
  await expectFailure(page, 'unreachable', new RegExp(`127\\.0\\.0\\.1:${port} cannot be reached`), /model\.gguf/);
  await expect(page.locator('#error .hint')).toHaveText(/ECONNREFUSED/);
});

test('a memory budget too small for the model is out of budget', async ({ page }) => {
  await setFields(page, { 'memory-budget': 0.01 });
  expect(await loadBundled(page)).toBe('failed');
  await expectFailure(page, 'out-of-budget', /Out of memory budget/, /memory budget of 10000 bytes/);
});

test('a sampling setting out of range is named before anything runs', async ({ page }) => {
  await setFields(page, { 'top-p': 2 });
  await page.locator('#generate').click();
  // The engine's range, checked before a job is queued, in its words.
  await expectFailure(page, 'settings', /out of range/, /option 'topP' must be above 0 and at most 1, not 2/);
});

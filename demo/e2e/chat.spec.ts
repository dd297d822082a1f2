// A model with a chat template opens in chat mode; each message goes through
// the template (the prompt the model sees is shown), and the conversation
// grows turn by turn. The model is a small random-weight one carrying the
// Phi-3 vocabulary and its template, so its replies are noise: what is
// checked is the conversation, not the words.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test } from '@playwright/test';

import {
  RangeServer, expectReady, generateModel, openDemo, pageStats, requestSettled, requestsSettled, setFields,
} from './support.js';

let dir: string;
let server: RangeServer;
let modelUrl: string;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-chat-'));
  const model = generateModel(dir, 'tiny', 'Q8_0', 'ggml-vocab-phi-3.gguf');
  server = await RangeServer.start(dir);
  modelUrl = `${server.url}/${basename(model)}`;
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('a model with a chat template chats through it', async ({ page }) => {
  await expectReady(page, await openDemo(page, `?model=${encodeURIComponent(modelUrl)}`));
  await expect(page.locator('#model-info [data-chat-template]')).toHaveAttribute('data-chat-template', 'yes');
  await expect(page.locator('#chat-view')).toBeVisible();
  await expect(page.locator('#mode-chat')).toHaveAttribute('aria-selected', 'true');
  await setFields(page, { temperature: 0, 'max-tokens': 12 });

  const send = async (text: string) => {
    const before = await requestsSettled(page);
    await page.locator('#chat-input').fill(text);
    await page.locator('#send').click();
    expect(await requestSettled(page, before), await page.locator('#error').innerText()).toBe('done');
  };

  await send('Hello, who are you?');
  await expect(page.locator('#messages .message.user')).toHaveCount(1);
  await expect(page.locator('#messages .message.assistant[data-state="done"]')).toHaveCount(1);
  const rendered = page.locator('#rendered-prompt');
  await expect(rendered).toHaveText(/<\|user\|>\s*Hello, who are you\?<\|end\|>\s*<\|assistant\|>\s*$/);
  const first = await pageStats(page);
  expect(first.lastGeneration?.promptTokens).toBeGreaterThan(5);

  // The second turn's prompt holds the whole conversation, the first reply included.
  const reply = (await page.locator('#messages .message.assistant p').first().textContent()) ?? '';
  await send('Tell me more.');
  await expect(page.locator('#messages .message')).toHaveCount(4);
  const second = (await rendered.textContent()) ?? '';
  expect(second).toContain('Hello, who are you?');
  expect(second).toContain(`<|assistant|>\n${reply}`);
  expect(second).toMatch(/<\|user\|>\s*Tell me more\.<\|end\|>\s*<\|assistant\|>\s*$/);

  // The completion mode stays available, and a new chat starts empty.
  await page.locator('#new-chat').click();
  await expect(page.locator('#messages .message')).toHaveCount(0);
});

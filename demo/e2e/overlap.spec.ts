// The point of the prefetch ring, seen from a browser: a multi-block model
// served over a bandwidth-capped link is computed while it arrives. The block
// map follows the blocks as they arrive, while the request runs. From the
// engine's per-block timeline of the first request (its prefill loads every
// block once, in order): the computation kept pace with the download (most
// blocks computed before the block two further on had arrived) and the
// first token came within one block's computation of the last byte. The page
// showed the expected time to the first token while the bytes arrived.
// Orderings of events, not durations.

import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test } from '@playwright/test';
import type { UnitEvent } from 'sipllm';

import {
  RangeServer, expectReady, generateModel, loadUrl, openDemo, pageStats, requestSettled, requestsSettled, setFields,
  startCompletion,
} from './support.js';

// Slow enough that a block takes longer to arrive than to compute, on a
// small machine: SmolLM-135M's shape, 30 blocks of 3.8 MB at Q8_0.
const LINK_MBPS = 20;
const PROMPT = 'The quick brown fox jumps over the lazy dog while the cat sleeps';

let dir: string;
let server: RangeServer;
let modelUrl: string;
let modelBytes: number;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-overlap-'));
  const model = generateModel(dir, 'smollm-135m', 'Q8_0', 'ggml-vocab-llama-spm.gguf');
  modelBytes = statSync(model).size;
  server = await RangeServer.start(dir, ['--mbps', String(LINK_MBPS)]);
  modelUrl = `${server.url}/${basename(model)}`;
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// What the block map showed, render by render (recorded in the page).
interface BlockMapFrame {
  states: string[];
  status: string;
  generated: number;  // characters of generated text on the page
}

test('prefill computes each block while the next one is still arriving', async ({ page }, testInfo) => {
  await expectReady(page, await openDemo(page));
  // Straight from the capped link: no persistent cache in between.
  await page.locator('#use-cache').uncheck();
  await setFields(page, { temperature: 0, 'max-tokens': 4 });
  await page.evaluate(() => {
    const frames: BlockMapFrame[] = [];
    (globalThis as unknown as { blockMapFrames: BlockMapFrame[] }).blockMapFrames = frames;
    const units = document.getElementById('units')!;
    new MutationObserver(() => frames.push({
      states: [...units.querySelectorAll<HTMLElement>('.unit')].map((unit) => unit.dataset.state ?? ''),
      status: document.getElementById('status')!.dataset.state ?? '',
      generated: document.querySelector('#output .generated')?.textContent?.length ?? 0,
    })).observe(units, { childList: true });
  });
  expect(await loadUrl(page, modelUrl)).toBe('ready');
  await expect(page.locator('#units .unit')).toHaveCount(36);  // 30 blocks, 6 head pieces

  // While the first request runs the weights stream in: the bar grows and
  // the block map follows the blocks as they arrive.
  const before = await requestsSettled(page);
  await startCompletion(page, PROMPT);
  await expect(page.locator('#progress-bar')).toHaveAttribute('data-phase', 'weights');
  await expect(page.locator('#units .unit[data-state="streaming"]').first()).toBeVisible();
  // While bytes arrive the page gives the measured rate and the time to the
  // first token it expects (bytes left ÷ rate).
  await expect(page.locator('#progress-text')).toHaveAttribute('data-eta-ms', /^\d+$/);
  await expect(page.locator('#progress-text')).toContainText('first token in about');
  await page.screenshot({ path: testInfo.outputPath('overlap-streaming.png'), fullPage: true });
  expect(await requestSettled(page, before), await page.locator('#error').innerText()).toBe('done');
  await expect(page.locator('#progress-bar')).toHaveAttribute('data-phase', 'ready');
  await expect(page.locator('#units .unit[data-state="resident"]')).toHaveCount(36);
  await page.screenshot({ path: testInfo.outputPath('overlap-timeline.png'), fullPage: true });

  // Render by render: the blocks were fetched in stream order (those begun
  // are a prefix of the map, the rest waiting), at most two at a time (the
  // loader's two load threads over the network), and a block that had
  // arrived never went back; the map showed blocks arrived and blocks still
  // to come while the request ran, before its first token.
  const frames = (await page.evaluate(() => (globalThis as unknown as { blockMapFrames: BlockMapFrame[] }).blockMapFrames))
    .filter((frame) => frame.states.length === 36);
  let arrivedBefore = 0;
  for (const frame of frames) {
    const shown = frame.states.join(' ');
    const arrived = frame.states.findIndex((state) => state !== 'resident');
    const prefix = arrived < 0 ? 36 : arrived;
    const firstWaiting = frame.states.indexOf('waiting');
    if (firstWaiting >= 0) expect(frame.states.slice(firstWaiting).every((state) => state === 'waiting'), shown).toBe(true);
    expect(frame.states.filter((state) => state === 'streaming').length, shown).toBeLessThanOrEqual(2);
    expect(prefix).toBeGreaterThanOrEqual(arrivedBefore);
    arrivedBefore = prefix;
  }
  const midway = frames.filter((frame) => frame.status === 'generating' && frame.generated === 0 &&
                                          frame.states.includes('resident') && frame.states.includes('streaming') &&
                                          frame.states.includes('waiting'));
  expect(midway.length).toBeGreaterThan(0);

  const stats = await pageStats(page);
  expect(stats.build).toBe('relaxed');  // threaded, with relaxed SIMD: Chromium has it
  expect(stats.source?.bytesFromCache).toBe(0);
  const units = stats.loader.units;
  const blocks = units.map((unit, i) => ({ name: unit.name, i })).filter((u) => /^block \d+$/.test(u.name));
  expect(blocks.length).toBe(30);

  // The first event of each unit is its load for the prefill.
  const first = new Map<number, UnitEvent>();
  for (const event of stats.loader.timeline) if (!first.has(event.unit)) first.set(event.unit, event);
  for (const { name, i } of blocks) {
    const event = first.get(i);
    expect(event, `${name} has no event`).toBeDefined();
    expect(event!.ioEndMs, `${name} did not arrive over the network`).toBeGreaterThan(event!.ioStartMs);
    expect(event!.computeEndMs, `${name} was not computed`).toBeGreaterThan(event!.computeStartMs);
  }

  // The orderings that make the promise, on a link slower than the compute
  // (a short prompt, a few ms per block): the prefill began computing before
  // the last block had arrived; most blocks began computing before the block
  // two further on had arrived (the computation keeps pace with the
  // download); and the first token came within one block's computation of
  // the last byte (only the last units' work was left when it arrived).
  const prefill = [...first.values()];
  const prefillStart = Math.min(...blocks.map(({ i }) => first.get(i)!.computeStartMs));
  const lastArrival = Math.max(...prefill.map((e) => e.ioEndMs));
  expect(prefillStart).toBeLessThan(lastArrival);
  // Blocks that arrived while the request was being made (the engine fetches
  // ahead from the load on) are a backlog the prefill works through first;
  // keeping pace starts at the first block the computation had to wait for.
  const waitedFor = blocks.findIndex(({ i }, k) => k > 0 && first.get(blocks[k - 1].i)!.computeEndMs <= first.get(i)!.ioEndMs);
  expect(waitedFor, 'the computation caught up with the download').toBeGreaterThan(0);
  const racing = blocks.slice(waitedFor, -2).map((block, k) => ({ block, twoOn: blocks[waitedFor + k + 2] }));
  const keptPace = racing.filter(({ block, twoOn }) =>
    first.get(block.i)!.computeStartMs < first.get(twoOn.i)!.ioEndMs);
  expect(racing.length, 'blocks still arriving once the computation caught up').toBeGreaterThan(2);
  expect(keptPace.length, `blocks computed before the one two further on arrived, of ${racing.length}`)
    .toBeGreaterThan(racing.length / 2);
  const longestBlock = Math.max(...blocks.map(({ i }) => first.get(i)!.computeEndMs - first.get(i)!.computeStartMs));
  const prefillEnd = Math.max(...prefill.map((e) => e.computeEndMs));
  expect(prefillEnd - lastArrival, `the first token after the last byte; the longest block took ${longestBlock} ms`)
    .toBeLessThanOrEqual(longestBlock);
  const pairs = blocks.slice(0, -1).map(({ i }, k) => {
    const current = first.get(i)!;
    const next = first.get(blocks[k + 1].i)!;
    return { k, current, next, overlap: current.computeStartMs < next.ioEndMs && next.ioStartMs < current.computeEndMs };
  }).filter(({ next }) => next.ioEndMs > prefillStart);
  const overlapped = pairs.filter((pair) => pair.overlap);
  const missed = pairs.filter((pair) => !pair.overlap);
  const firstToken = Math.max(...prefill.map((e) => e.computeEndMs));
  const download = lastArrival - Math.min(...prefill.map((e) => e.ioStartMs));
  console.log(`block map: ${frames.length} renders, ${midway.length} with blocks arrived and to come before the first token; ` +
              `the computation caught up at block ${waitedFor}, then ${keptPace.length} of ${racing.length} kept pace; ` +
              `overlap: ${overlapped.length} of ${pairs.length} block pairs arriving after the prefill began ` +
              `(${blocks.length - 1 - pairs.length} arrived before it; not overlapped: ` +
              `${missed.map(({ k, current, next }) => `${k}: compute ${current.computeStartMs.toFixed(0)}-` +
                                  `${current.computeEndMs.toFixed(0)}, next io ${next.ioStartMs.toFixed(0)}-${next.ioEndMs.toFixed(0)}`)
                .join('; ') || 'none'}); ` +
              `${(modelBytes / 1e6).toFixed(1)} MB at ${LINK_MBPS} MB/s = ${(modelBytes / (LINK_MBPS * 1e3)).toFixed(0)} ms ` +
              `of transfer; the units arrived over ${download.toFixed(0)} ms; the first token ` +
              `${(firstToken - lastArrival).toFixed(1)} ms after the last unit arrived; ` +
              `TTFT ${stats.lastGeneration?.ttftMs.toFixed(0)} ms`);

  // The chart shows that request.
  await expect(page.locator('#timeline')).toHaveAttribute('data-units', String(units.length));
  await expect(page.locator('#timeline')).toHaveAttribute('data-events', String(stats.loader.timeline.length));
});

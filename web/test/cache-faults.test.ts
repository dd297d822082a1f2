// The persistent cache under HTTP faults, on a model of several blocks and
// tens of megabytes (the kquant-small shape in Q4_K: 8 blocks, 28 MB): a load
// cut short and resumed, a cache damaged on disk, a server that trickles.
// What the server sent, what the engine counted and what the cache lists
// must agree to the byte, no byte the cache keeps may cross the network
// again, and the output must be the native engine's.

import { cpSync, readFileSync, readdirSync, rmSync, truncateSync } from 'node:fs';
import { basename, join } from 'node:path';
import { execFileSync } from 'node:child_process';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AbortError, SipLLM } from '../dist/index.js';
import type { LoadOptions } from '../dist/index.js';
import { readGgufLayout } from '../dist/page/gguf-layout.js';
import { checkCache, parseIndex } from '../../scripts/fault-matrix/lib.mjs';
import {
  RangeServer, cliPath, collect, generateModel, nativeGreedy, nativeTokenize, removeDir, tempDir,
} from './support.js';
import type { ServerLogEntry } from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 24;
const PAGE = 1 << 20;  // cachePageBytes' default
// The cut load's link: its 28 MB take about 6 s, so that the cut lands
// where it is asked even when progress events come late.
const SLOW_MBPS = 5;

// [start, end) in the file.
interface Span { start: number; end: number }

let scratch: string;
let modelPath: string;
let model: Buffer;
let size: number;
let expected: string;
let expectedEmbedding: Float32Array;
let blocks: Span[];
let rowBytes: number;  // one row of the token embeddings
let promptRows: number;  // the prompt's distinct rows
let plain: RangeServer;
let slow: RangeServer;

beforeAll(async () => {
  scratch = tempDir('cache-faults');
  modelPath = generateModel(scratch, 'kquant-small', 'Q4_K', 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
  model = readFileSync(modelPath);
  size = model.length;
  expected = nativeGreedy(modelPath, PROMPT, TOKENS);
  // Every block's weights go into an embedding (the text adds the output head).
  const printed = execFileSync(cliPath, ['embed', '-m', modelPath, '-p', PROMPT, '--threads', '1'],
                               { encoding: 'utf8' });
  expectedEmbedding = Float32Array.from(printed.trim().split(/\s+/).map(Number));
  blocks = blockSpans(model);
  const info = execFileSync(cliPath, ['info', '-m', modelPath], { encoding: 'utf8' });
  rowBytes = embeddingRowBytes(model, Number(/n_vocab\s+(\d+)/.exec(info)![1]));
  promptRows = new Set(nativeTokenize(modelPath, PROMPT)).size;
  plain = await RangeServer.start(scratch);
  slow = await RangeServer.start(scratch, ['--mbps', String(SLOW_MBPS)]);
});

afterAll(async () => {
  await plain?.stop();
  await slow?.stop();
  if (scratch) removeDir(scratch);
});

// Each block's bytes: from its first tensor to the tensor after its last.
function blockSpans(bytes: Buffer): Span[] {
  const { tensors } = readGgufLayout(bytes.subarray(0, 4 << 20));
  const spans: Span[] = [];
  tensors.forEach((tensor, i) => {
    const match = /^blk\.(\d+)\./.exec(tensor.name);
    if (match === null) return;
    const end = i + 1 < tensors.length ? tensors[i + 1].offset : bytes.length;
    const n = Number(match[1]);
    spans[n] = spans[n] === undefined ? { start: tensor.offset, end }
      : { start: Math.min(spans[n].start, tensor.offset), end: Math.max(spans[n].end, end) };
  });
  return spans;
}

function embeddingRowBytes(bytes: Buffer, vocab: number): number {
  const { tensors } = readGgufLayout(bytes.subarray(0, 4 << 20));
  const i = tensors.findIndex((t) => t.name === 'token_embd.weight');
  const end = i + 1 < tensors.length ? tensors[i + 1].offset : bytes.length;
  return Math.floor((end - tensors[i].offset) / vocab);  // past the alignment padding
}

function urlOf(server: RangeServer, path = ''): string {
  return `${server.url}${path}/${basename(modelPath)}`;
}

function options(cache: string, more: LoadOptions = {}): LoadOptions {
  return { cache, threads: 2, ...more };
}

// The text and the embedding of the prompt, both the native engine's exactly.
async function expectRightOutput(llm: SipLLM): Promise<void> {
  expect(await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
  const { embeddings } = await llm.embed([PROMPT]);
  expect(embeddings[0]).toEqual(expectedEmbedding);
}

// Loads, checks the output, unloads; returns the engine's HTTP counters.
async function loadAndCheck(url: string, cache: string, more: LoadOptions = {}) {
  const llm = await SipLLM.load(url, options(cache, more));
  try {
    await expectRightOutput(llm);
    return llm.stats().source!;
  } finally {
    await llm.unload();
  }
}

function cacheFiles(cache: string): Record<string, Buffer> {
  return Object.fromEntries(readdirSync(cache).map((name) => [name, readFileSync(join(cache, name))]));
}

// What the cache's one entry lists: whole pages, and rows stored as byte
// ranges outside them (page_cache.h).
function storedSpans(cache: string): { pages: Span[]; ranges: Span[] } {
  const files = cacheFiles(cache);
  const indexName = Object.keys(files).find((name) => name.endsWith('.index'));
  expect(indexName).toBeDefined();
  const index = parseIndex(files[indexName!]);
  expect(index).not.toBeNull();
  expect(index!.pageBytes).toBe(PAGE);
  const pages: Span[] = [];
  index!.pages.forEach((stored, p) => {
    if (stored) pages.push({ start: p * PAGE, end: Math.min((p + 1) * PAGE, size) });
  });
  const text = files[indexName!].toString('utf8', 0, Number(files[indexName!].toString('utf8', 15, 31)));
  const line = text.split('\n').find((l) => l.startsWith('ranges ')) ?? 'ranges';
  const ranges = line.split(' ').slice(1).map((item) => {
    const [start, end] = item.split('-').map(Number);
    return { start, end };
  });
  return { pages, ranges };
}

function total(spans: Span[]): number {
  return spans.reduce((sum, s) => sum + s.end - s.start, 0);
}

function overlaps(a: Span, b: Span): boolean {
  return a.start < b.end && b.start < a.end;
}

// Whether `spans` together hold every byte of `span`.
function covers(spans: Span[], span: Span): boolean {
  let at = span.start;
  for (const s of [...spans].sort((a, b) => a.start - b.start)) {
    if (s.start > at) break;
    at = Math.max(at, s.end);
  }
  return at >= span.end;
}

// The range a request asked for.
function requestedSpan(entry: ServerLogEntry): Span {
  const match = /^bytes=(\d+)-(\d+)$/.exec(entry.range ?? '');
  expect(match, `a request without a closed range: ${entry.range}`).not.toBeNull();
  return { start: Number(match![1]), end: Number(match![2]) + 1 };
}

// Pairs of requests that asked for a byte twice.
function askedTwice(spans: Span[]): string[] {
  const sorted = [...spans].sort((a, b) => a.start - b.start);
  const twice: string[] = [];
  for (let i = 1; i < sorted.length; ++i) {
    if (sorted[i].start < sorted[i - 1].end) {
      twice.push(`${sorted[i - 1].start}-${sorted[i - 1].end} and ${sorted[i].start}-${sorted[i].end}`);
    }
  }
  return twice;
}

// Checks that a load's answers brought the `needed` bytes, each once. A cold
// load (no page of the model in the cache) may also, by design, ask for the
// prompt's embedding rows (a request of one row each) before the pages that
// hold them arrive, and get those bytes again with the pages, which the
// output head reads whole; and it may give up pieces the package fetched
// ahead once the engine leads (page/early-fetch.ts), whose bytes the engine then
// fetches itself. Returns those extra bytes.
function expectEachByteOnce(log: ServerLogEntry[], needed: number, cold: boolean) {
  const answers = log.map((entry) => ({ span: requestedSpan(entry), bytes: entry.bytes }));
  const whole = answers.filter((a) => a.bytes === a.span.end - a.span.start).map((a) => a.span);
  const givenUp = answers.filter((a) => a.bytes !== a.span.end - a.span.start);
  const isRow = (span: Span) => span.end - span.start === rowBytes;
  const rowsAgain = whole
    .filter((span) => isRow(span) && whole.some((other) => other !== span && overlaps(span, other)))
    .reduce((sum, span) => sum + span.end - span.start, 0);
  const givenUpBytes = givenUp.reduce((sum, a) => sum + a.bytes, 0);
  expect(askedTwice(whole.filter((span) => !isRow(span)))).toEqual([]);
  if (cold) {
    expect(rowsAgain).toBeLessThanOrEqual(promptRows * rowBytes);
    expect(givenUp.length).toBeLessThanOrEqual(3);  // the pieces in flight
  } else {
    expect(rowsAgain).toBe(0);
    expect(givenUp.map((a) => `${a.span.start}-${a.span.end}: ${a.bytes} bytes`)).toEqual([]);
  }
  expect(log.reduce((sum, entry) => sum + entry.bytes, 0)).toBe(needed + rowsAgain + givenUpBytes);
  return { rowsAgain, givenUp: givenUp.length, givenUpBytes };
}

// The engine's count of bytes fetched: a warm load's is the server's; a
// cold one counts a prompt row twice even when the second copy came from
// the pieces fetched ahead rather than from the network.
function expectEngineCount(bytesFetched: number, wire: number, needed: number, cold: boolean): void {
  if (cold) {
    expect(bytesFetched).toBeGreaterThanOrEqual(needed);
    expect(bytesFetched).toBeLessThanOrEqual(needed + promptRows * rowBytes);
  } else {
    expect(bytesFetched).toBe(wire);
  }
}

// The cache holds the whole file, every stored byte the file's own.
async function expectWholeFileCached(cache: string): Promise<void> {
  const check = checkCache(cacheFiles(cache), model);
  expect(check.problems).toEqual([]);
  expect(check.entries).toBe(1);
  expect(check.kept).toBe(size);
  const [listed] = await SipLLM.cachedModels({ cache });
  expect(listed).toMatchObject({ size, cachedBytes: size });
}

// A load abandoned through its AbortSignal once `onProgress` has counted
// `fraction` of the file fetched. load() resolves once the header is read
// and the weights keep arriving: the same signal ends the generation, and
// the model is then unloaded, which stops the transfers.
async function cutLoad(url: string, cache: string, fraction: number):
    Promise<{ fetchedAtCut: number; finished: boolean; error: unknown }> {
  const abort = new AbortController();
  let fetchedAtCut = -1;
  let llm: SipLLM | null = null;
  let unloading: Promise<void> | null = null;
  abort.signal.addEventListener('abort', () => {
    if (llm !== null) unloading = llm.unload();
  });
  let finished = false;
  let error: unknown = null;
  try {
    llm = await SipLLM.load(url, options(cache, {
      signal: abort.signal,
      onProgress: (event) => {
        if (fetchedAtCut < 0 && event.fetched >= fraction * event.total) {
          fetchedAtCut = event.fetched;
          abort.abort();
        }
      },
    }));
    if (!abort.signal.aborted) {
      await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0, signal: abort.signal }));
      finished = true;
    }
  } catch (e) {
    error = e;
  } finally {
    await (unloading ?? llm?.unload());
  }
  return { fetchedAtCut, finished, error };
}

describe('the persistent cache under HTTP faults (a 28 MB model of 8 blocks)', () => {
  for (const fraction of [0.3, 0.7]) {
    it(`resumes a load cut at ${fraction * 100} % with only the bytes the cache lacks`, async () => {
      const cache = tempDir('cut-cache');
      const url = urlOf(slow);
      try {
        await slow.reset();
        const cut = await cutLoad(url, cache, fraction);
        expect(cut.fetchedAtCut).toBeGreaterThanOrEqual(fraction * size);
        expect(cut.finished).toBe(false);
        if (cut.error !== null) expect(cut.error).toBeInstanceOf(AbortError);
        const sentBeforeCut = (await slow.stats()).bytes;

        // What the cut load kept: the listing and the index agree, and every
        // page stored is the file's.
        const [partial] = await SipLLM.cachedModels({ cache });
        expect(partial).toMatchObject({ url, size });
        const stored = storedSpans(cache);
        const keptPages = total(stored.pages);
        expect(partial.cachedBytes).toBe(keptPages + total(stored.ranges));
        expect(keptPages).toBeGreaterThan(0);
        expect(partial.cachedBytes).toBeLessThan(size);
        expect(checkCache(cacheFiles(cache), model).problems).toEqual([]);

        await slow.reset();
        const source = await loadAndCheck(url, cache);
        const { log, bytes: fetched } = await slow.stats();
        console.log(`cut at ${fraction} (${cut.error === null ? 'after load()' : (cut.error as Error).message}): ` +
                    `first load fetched ${cut.fetchedAtCut} (engine) / ${sentBeforeCut} (server) bytes, ` +
                    `kept ${keptPages} in pages + ${total(stored.ranges)} in rows; resumed with ${log.length} requests, ` +
                    `${fetched} bytes (engine: ${source.bytesFetched}, ${source.bytesFromCache} from the cache)`);
        // Every missing page once, and nothing else: the rows kept outside
        // pages come again inside their page (the cache keeps pages whole).
        expect(log.every((entry) => entry.status === 206 && entry.fault === null)).toBe(true);
        expect(log.map(requestedSpan).filter((span) => stored.pages.some((page) => overlaps(span, page)))).toEqual([]);
        expectEachByteOnce(log, size - keptPages, false);
        expect(fetched).toBe(size - keptPages);
        expect(Math.abs(fetched + partial.cachedBytes - size)).toBeLessThan(PAGE);
        expect(source).toMatchObject({ openedFromCache: true, requests: log.length, retries: 0 });
        expectEngineCount(source.bytesFetched, fetched, size - keptPages, false);
        expect(source.bytesFromCache).toBeGreaterThanOrEqual(keptPages);
        await expectWholeFileCached(cache);
      } finally {
        removeDir(cache);
      }
    });
  }

  describe('a cache damaged on disk', () => {
    let whole: string;

    beforeAll(async () => {
      whole = tempDir('whole-cache');
      await loadAndCheck(urlOf(plain), whole);
      await expectWholeFileCached(whole);
    });

    afterAll(() => {
      if (whole) removeDir(whole);
    });

    // A copy of the whole cache, damaged by `damage` (given the entry's
    // files); the next load must give the right output, fetch `refetch`
    // bytes and no byte of `kept`, and leave the whole file cached.
    async function afterDamage(damage: (cache: string, index: string, pages: string) => void,
                               lost: () => { refetch: number; kept: Span; cold: boolean }) {
      const cache = tempDir('damaged-cache');
      try {
        cpSync(whole, cache, { recursive: true });
        const names = readdirSync(cache);
        const index = names.find((name) => name.endsWith('.index'))!;
        const pages = names.find((name) => name.endsWith('.pages'))!;
        damage(cache, join(cache, index), join(cache, pages));
        const listed = await SipLLM.cachedModels({ cache });
        const { refetch, kept, cold } = lost();
        await plain.reset();
        const source = await loadAndCheck(urlOf(plain), cache);
        const { log, bytes: fetched } = await plain.stats();
        expect(log.every((entry) => entry.status === 206 && entry.fault === null)).toBe(true);
        expect(log.map(requestedSpan).filter((span) => overlaps(span, kept))).toEqual([]);
        const extra = expectEachByteOnce(log, refetch, cold);
        expectEngineCount(source.bytesFetched, fetched, refetch, cold);
        await expectWholeFileCached(cache);
        expect(readdirSync(cache).sort()).toEqual([index, pages].sort());
        return { listed, source, requests: log.length, fetched, ...extra };
      } finally {
        removeDir(cache);
      }
    }

    it('refetches what a pages file truncated to 40 % lost, and only that', async () => {
      const length = Math.floor(0.4 * size);
      const keptEnd = Math.floor(length / PAGE) * PAGE;  // the page cut in the middle is lost too
      const result = await afterDamage((_cache, _index, pages) => truncateSync(pages, length),
                                        () => ({ refetch: size - keptEnd, kept: { start: 0, end: keptEnd }, cold: false }));
      // The index still lists the lost pages until a load opens the entry.
      expect(result.listed[0].cachedBytes).toBe(size);
      expect(result.source.openedFromCache).toBe(true);
      expect(result.source.bytesFromCache).toBeGreaterThanOrEqual(keptEnd);
      console.log(`pages file truncated to ${length} bytes: ${result.requests} requests, ${result.fetched} bytes refetched ` +
                  `(${size - keptEnd} lost; engine: ${result.source.bytesFetched}, ${result.source.bytesFromCache} from the cache)`);
    });

    it('refetches the whole file when its pages file is deleted', async () => {
      const result = await afterDamage((_cache, _index, pages) => rmSync(pages),
                                       () => ({ refetch: size, kept: { start: 0, end: 0 }, cold: true }));
      expect(result.listed[0].cachedBytes).toBe(size);
      console.log(`pages file deleted: ${result.requests} requests, ${result.fetched} bytes refetched ` +
                  `(${result.rowsAgain} of rows twice, ${result.givenUpBytes} in ${result.givenUp} answers given up; ` +
                  `engine: ${result.source.bytesFetched})`);
    });

    it('starts a fresh entry when the index is deleted', async () => {
      const result = await afterDamage((_cache, index) => rmSync(index),
                                       () => ({ refetch: size, kept: { start: 0, end: 0 }, cold: true }));
      // Without its index the pages file is no entry; the fresh entry replaces it.
      expect(result.listed).toEqual([]);
      expect(result.source.openedFromCache).toBe(false);
      console.log(`index deleted: ${result.requests} requests, ${result.fetched} bytes refetched ` +
                  `(${result.rowsAgain} of rows twice, ${result.givenUpBytes} in ${result.givenUp} answers given up; ` +
                  `engine: ${result.source.bytesFetched})`);
    });
  });

  it('completes a load trickled over every block, and caches the whole file', async () => {
    // Every answer at 1 MB/s, in chunks every 100 ms: a range of a few
    // megabytes takes seconds, while the engine waits for block after block.
    const url = urlOf(plain, '/fault/trickle:rate=1000000');
    const cache = tempDir('trickle-cache');
    try {
      await plain.reset();
      const started = performance.now();
      const source = await loadAndCheck(url, cache);
      const seconds = (performance.now() - started) / 1000;
      const { log, bytes } = await plain.stats();
      expect(log.length).toBeGreaterThan(0);
      expect(log.every((entry) => entry.status === 206 && entry.fault?.startsWith('trickle'))).toBe(true);
      const slowAnswers = (log as Array<ServerLogEntry & { endMs: number }>)
        .filter((entry) => entry.endMs - entry.startMs > 1000);
      expect(slowAnswers.length).toBeGreaterThanOrEqual(3);
      // Blocks whose every byte came trickled.
      const trickled = blocks.filter((block) => covers(log.map(requestedSpan), block));
      expect(trickled.length).toBeGreaterThanOrEqual(3);
      // Slow is not faulty: no retry, and every byte once (as in any cold load).
      expect(source.retries).toBe(0);
      const extra = expectEachByteOnce(log, size, true);
      expectEngineCount(source.bytesFetched, bytes, size, true);
      console.log(`trickle: ${log.length} requests, ${bytes} bytes (${extra.rowsAgain} of rows twice, ` +
                  `${extra.givenUpBytes} in ${extra.givenUp} answers given up; engine: ${source.bytesFetched}) ` +
                  `in ${seconds.toFixed(1)} s, ${slowAnswers.length} answers over 1 s, ` +
                  `${trickled.length} of ${blocks.length} blocks trickled`);
      await expectWholeFileCached(cache);

      // All of it kept: the same URL again crosses no byte.
      await plain.reset();
      const again = await loadAndCheck(url, cache);
      expect(again).toMatchObject({ openedFromCache: true, requests: 0, bytesFetched: 0 });
      expect((await plain.stats()).requests).toBe(0);
    } finally {
      removeDir(cache);
    }
  });
});

// The persistent cache's promise (README: "kept in a persistent cache ... so
// that a second load sends no request"): a model loaded with `cache`, given
// a request and unloaded, is loaded again and given the same request without
// a byte from the network, and that second load adds nothing to the cache.
//
// What a load stores is what its engine used: the header, every unit it
// loaded, every embedding row it read (each stored before the engine is
// handed its bytes). Bytes fetched ahead of need (readahead, prefetch, a
// request an unload cut) are not promised, and a second load that asks for
// nothing more than the first must not fetch them either.
//
// The condition is forced, not hoped for. The model has an untied token
// table read by the row (the memory budget keeps it out of memory) right
// after its header: the first load stores its rows as exact ranges, so
// pages of the table, which the header's reads are followed by, are
// certainly not in the cache (asserted from the cache's index). A second
// load that reads ahead past the header meets the network, every time
// (pages 1-4 of the whole file; of the split set's first part, those of
// pages 1-4 that its one-token rows did not bring in whole; on the 8B split
// set of bench:large, pages 8-11 of its first part).
//
// Also: a split set caches the rows it reads one at a time (a decode step's
// token) as rows, as a whole file does, not as the page around them; and an
// unload that cuts requests in flight (a slow link, the unload right after
// load() resolves) records nothing they carried, and loses nothing recorded.

import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SipLLM } from '../dist/index.js';
import type { CachedModel, LoadOptions } from '../dist/index.js';
import { readGgufLayout } from '../dist/page/gguf-layout.js';
import type { ServerLogEntry } from './support.js';
import { RangeServer, cliPath, collect, generateModel, nativeGreedy, removeDir, tempDir } from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 16;
const PAGE = 1 << 20;  // the cache's page (cachePageBytes' default)
// tiny-k (untied head) with the llama-spm vocabulary, Q4_K_M: 12.8 MB, a
// 0.7 MB header, then the token table (4.6 MB), 2 blocks, the output head.
// Under this budget neither the token table nor the head stays in memory.
const BUDGET = 4e6;
// A request that stalls fails with its dump well within the test's time.
const OPTIONS: LoadOptions = { threads: 2, memoryBudget: BUDGET, contextLength: 256, stallTimeoutMs: 30_000 };

let dir: string;
let whole: string;
let expected: string;

// An entry of the cache directory's index (page_cache.h): its pages, one
// character each, and the byte ranges stored besides them.
interface Index {
  url: string;
  size: number;
  pageBytes: number;
  pages: string;
  ranges: Array<[number, number]>;
}

function readIndexes(cache: string): Map<string, Index> {
  const out = new Map<string, Index>();
  for (const name of readdirSync(cache)) {
    if (!name.endsWith('.index')) continue;
    const text = readFileSync(join(cache, name), 'utf8');
    const field = (key: string) => new RegExp(`^${key} (.*)$`, 'm').exec(text)?.[1] ?? '';
    const ranges = field('ranges').split(' ').filter(Boolean).map((r) => r.split('-').map(Number) as [number, number]);
    const url = field('url');
    out.set(basename(new URL(url).pathname), {
      url, size: Number(field('size')), pageBytes: Number(field('page-bytes')), pages: field('pages'), ranges,
    });
  }
  return out;
}

function rangeOf(entry: ServerLogEntry): [number, number] {
  const match = /^bytes=(\d+)-(\d+)$/.exec(entry.range ?? '');
  if (match === null) throw new Error(`a request without a range: ${entry.url}`);
  return [Number(match[1]), Number(match[2]) + 1];
}

// Whether the index records any byte of [start, end).
function recordsAnyOf(index: Index, start: number, end: number): boolean {
  for (let p = Math.floor(start / index.pageBytes); p * index.pageBytes < end; ++p) {
    if (index.pages[p] === '1') return true;
  }
  return index.ranges.some(([a, b]) => a < end && start < b);
}

// The pages of the token table (the first part's, in a split set) that the
// index does not hold.
function tokenTablePagesMissing(file: string, index: Index): number[] {
  const { tensors } = readGgufLayout(readFileSync(file).subarray(0, 2 * PAGE));
  const at = tensors.findIndex((t) => t.name === 'token_embd.weight');
  expect(at).toBeGreaterThanOrEqual(0);
  const start = tensors[at].offset;
  const end = tensors[at + 1]?.offset ?? index.size;
  const missing: number[] = [];
  for (let p = Math.ceil(start / PAGE); (p + 1) * PAGE <= end; ++p) if (index.pages[p] !== '1') missing.push(p);
  return missing;
}

function describeRequests(log: ServerLogEntry[]): string[] {
  return log.map((e) => `${basename(e.url)} ${e.range} (${e.bytes} bytes)`);
}

async function loadAndRun(url: string, cache: string): Promise<{ text: string; bytesFetched: number; bytesFromCache: number }> {
  const llm = await SipLLM.load(url, { ...OPTIONS, cache });
  try {
    const text = await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }));
    const source = llm.stats().source!;
    return { text, bytesFetched: source.bytesFetched, bytesFromCache: source.bytesFromCache };
  } finally {
    await llm.unload();
  }
}

function sortedByUrl(models: CachedModel[]): CachedModel[] {
  return [...models].sort((a, b) => a.url.localeCompare(b.url));
}

beforeAll(() => {
  dir = tempDir('cache-promise');
  whole = generateModel(dir, 'tiny-k', 'Q4_K_M', 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
  // The same model as a split set: each part its own cache entry, and rows
  // of the token table read through the set's source.
  execFileSync(cliPath, ['split', '--parts', '2', whole, join(dir, 'tiny-k-split')], { stdio: 'ignore' });
  expected = nativeGreedy(whole, PROMPT, TOKENS);
});

afterAll(() => {
  if (dir) removeDir(dir);
});

describe('a model loaded, used and unloaded', () => {
  for (const layout of ['whole', 'split'] as const) {
    const name = layout === 'whole' ? 'tiny-k-Q4_K_M.gguf' : 'tiny-k-split-00001-of-00002.gguf';

    it(`is used again without a byte from the network (${layout} file)`, async () => {
      // 20 MB/s: the first load streams while its request runs.
      const server = await RangeServer.start(dir, ['--mbps', '20']);
      const cache = tempDir('cache-promise-cache');
      try {
        const url = `${server.url}/${name}`;
        const first = await loadAndRun(url, cache);
        expect(first.text).toBe(expected);
        expect(first.bytesFetched).toBeGreaterThan(0);

        // The condition: the token table's pages are not in the cache (its
        // rows are, as ranges), so anything that reads ahead into them
        // meets the network.
        const index = readIndexes(cache).get(name);
        expect(index).toBeDefined();
        const missing = tokenTablePagesMissing(join(dir, name), index!);
        expect(missing.length, `token table pages not cached after the first load (${layout} file)`).toBeGreaterThan(0);
        const storedAfterFirst = sortedByUrl(await SipLLM.cachedModels({ cache }));

        await server.reset();
        const second = await loadAndRun(url, cache);
        expect(second.text).toBe(expected);
        const { requests, bytes, log } = await server.stats();
        expect(describeRequests(log), `the second load's requests (${layout} file)`).toEqual([]);
        expect(requests).toBe(0);
        expect(bytes).toBe(0);
        expect(second.bytesFetched).toBe(0);
        expect(second.bytesFromCache).toBeGreaterThan(0);
        // And it stored nothing: it fetched nothing it did not need.
        expect(sortedByUrl(await SipLLM.cachedModels({ cache }))).toEqual(storedAfterFirst);
      } finally {
        await server.stop();
        removeDir(cache);
      }
    });
  }

  // A one-token step reads one row of the token table: a split set must
  // fetch and store it as a row, as a whole file does, not as the 1 MiB page
  // around it (which a later load's reads ahead would then find, or not).
  it('caches the rows of a split set as a whole file caches them', async () => {
    const server = await RangeServer.start(dir);
    const caches = [tempDir('cache-promise-whole'), tempDir('cache-promise-split')];
    try {
      const missing: number[][] = [];
      for (const [k, name] of ['tiny-k-Q4_K_M.gguf', 'tiny-k-split-00001-of-00002.gguf'].entries()) {
        expect((await loadAndRun(`${server.url}/${name}`, caches[k])).text).toBe(expected);
        missing.push(tokenTablePagesMissing(join(dir, name), readIndexes(caches[k]).get(name)!));
      }
      expect(missing[0].length).toBeGreaterThan(0);
      expect(missing[1], 'token table pages not cached: the split set against the whole file').toEqual(missing[0]);
    } finally {
      await server.stop();
      for (const cache of caches) removeDir(cache);
    }
  });

  it('loses nothing it recorded to an unload that cuts requests in flight', async () => {
    // 2 MB/s: the 12.8 MB take over 6 s; the unload comes right after load().
    const server = await RangeServer.start(dir, ['--mbps', '2']);
    const cache = tempDir('cache-promise-cut');
    const name = 'tiny-k-Q4_K_M.gguf';
    const url = `${server.url}/${name}`;
    try {
      const llm = await SipLLM.load(url, { ...OPTIONS, cache });
      await llm.unload();
      await llm.workerExited;
      const cut = await server.stats();
      // The condition: requests were under way, and the unload cut them.
      expect(cut.log.some((e) => e.bytes < rangeOf(e)[1] - rangeOf(e)[0])).toBe(true);
      const recorded = readIndexes(cache).get(name)!;
      expect(recorded).toBeDefined();
      expect(recorded.pages).toContain('0');

      // Pages recorded hold the file's bytes (the text is right) and are
      // never fetched again.
      await server.reset();
      const second = await loadAndRun(url, cache);
      expect(second.text).toBe(expected);
      const refetched = (await server.stats()).log.filter((e) => recordsAnyOf(recorded, ...rangeOf(e)));
      expect(describeRequests(refetched)).toEqual([]);

      // The same request once more: from the cache alone.
      await server.reset();
      const third = await loadAndRun(url, cache);
      expect(third.text).toBe(expected);
      expect(describeRequests((await server.stats()).log)).toEqual([]);
      expect(third.bytesFetched).toBe(0);
    } finally {
      await server.stop();
      removeDir(cache);
    }
  });
});

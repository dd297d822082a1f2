// Streaming from the range server: progress, the persistent cache, and a
// memory budget smaller than the model.

import { mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { NetworkError, SipLLM } from '../dist/index.js';
import type { LoadProgress } from '../dist/index.js';
import { blockRanges, readGgufLayout } from '../dist/page/gguf-layout.js';
import {
  RangeServer, collect, fileSize, generateModel, nativeGreedy, nativeRun, removeDir, repoRoot, serveDir, tempDir,
} from './support.js';

const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';

let server: RangeServer;
let root: string;
let expected: string;

beforeAll(async () => {
  expected = nativeGreedy(MODEL, PROMPT, 60);
  root = serveDir([MODEL]);
  server = await RangeServer.start(root);
});

afterAll(async () => {
  await server?.stop();
  if (root) removeDir(root);
});

function expectMonotonic(events: LoadProgress[]): void {
  for (let i = 1; i < events.length; ++i) {
    expect(events[i].loaded).toBeGreaterThanOrEqual(events[i - 1].loaded);
    expect(events[i].fetched).toBeGreaterThanOrEqual(events[i - 1].fetched);
    expect(events[i].fromCache).toBeGreaterThanOrEqual(events[i - 1].fromCache);
    expect(events[i].total).toBe(events[0].total);
  }
}

describe('streaming over HTTP', () => {
  it('reports monotonic progress that ends at the file size', async () => {
    const events: LoadProgress[] = [];
    const llm = await SipLLM.load(`${server.url}/${MODEL}`, { threads: 2, onProgress: (e) => events.push(e) });
    try {
      expect(events.length).toBeGreaterThan(0);
      expect(events[0].phase).toBe('header');
      expect(await collect(llm.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
      expectMonotonic(events);
      const last = events[events.length - 1];
      expect(last.total).toBe(fileSize(MODEL));
      expect(last.loaded).toBe(fileSize(MODEL));
      expect(last.phase).toBe('ready');
      expect(events.some((e) => e.phase === 'weights')).toBe(true);
    } finally {
      await llm.unload();
    }
  });

  // Without a cache, and with an empty one (which the engine fills as usual).
  for (const cached of [false, true]) {
    it(`fetches the header and the first blocks while the module starts, every block byte once${cached ? ', into an empty cache' : ''}`, async () => {
      const dir = tempDir('early');
      const cache = cached ? tempDir('early-cache') : false;
      const model = generateModel(dir, 'kquant-small', 'Q8_0', 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
      const bytes = readFileSync(model);
      const blockBytes = blockRanges(readGgufLayout(bytes.subarray(0, 1 << 20)), bytes.length);
      expect(blockBytes).toHaveLength(1);  // a dense model's blocks: one run of bytes
      const span = { begin: blockBytes[0][0], end: blockBytes[0][1] };
      const own = await RangeServer.start(dir);
      try {
        const llm = await SipLLM.load(`${own.url}/kquant-small-Q8_0.gguf`, { threads: 2, cache });
        try {
          expect(await collect(llm.generate(PROMPT, { maxTokens: 8, temperature: 0 })))
            .toBe(nativeGreedy(model, PROMPT, 8));
          const { log } = await own.stats();
          const ranges = log.map((entry) => {
            const [first, last] = (entry.range ?? '').replace('bytes=', '').split('-').map(Number);
            return { first, last, startMs: entry.startMs };
          });
          // The header's request went out before the module was ready.
          expect(ranges[0]).toMatchObject({ first: 0, last: (1 << 20) - 1 });
          expect(ranges[0].startMs).toBeLessThan(llm.stats().load.moduleReadyAt);
          // Block bytes (and the head's after them): fetched ahead or by the
          // engine, never both, with no gap.
          // (The header's pieces go on in order until the tensor table has
          // been parsed, so the first block bytes may come with the last of
          // them, in a range that begins before the blocks.)
          const blocks = ranges.filter((r) => r.last >= span.begin)
            .sort((a, b) => a.first - b.first);
          expect(blocks[0].first).toBeLessThanOrEqual(span.begin);
          for (let i = 1; i < blocks.length; ++i) expect(blocks[i].first).toBe(blocks[i - 1].last + 1);
          expect(blocks[blocks.length - 1].last).toBeGreaterThanOrEqual(span.end - 1);
          // And no byte of the file twice (the header's pieces reach into the
          // embeddings, which the engine reads for the prompt and the head).
          const all = [...ranges].sort((a, b) => a.first - b.first);
          for (let i = 1; i < all.length; ++i) expect(all[i].first).toBeGreaterThan(all[i - 1].last);
        } finally {
          await llm.unload();
        }
        if (cache) {
          // Cached now: the next load makes no request at all.
          await own.reset();
          const again = await SipLLM.load(`${own.url}/kquant-small-Q8_0.gguf`, { threads: 2, cache });
          try {
            expect(await collect(again.generate(PROMPT, { maxTokens: 8, temperature: 0 })))
              .toBe(nativeGreedy(model, PROMPT, 8));
            expect((await own.stats()).requests).toBe(0);
          } finally {
            await again.unload();
          }
        }
      } finally {
        await own.stop();
        removeDir(dir);
        if (cache) removeDir(cache);
      }
    });
  }

  for (const build of ['threaded', 'single'] as const) {
    it(`reports each block's state as the blocks arrive (${build} build)`, async () => {
      // A slow link, so that the blocks arrive over a second or more while
      // the engine runs. The threaded build fetches the first pieces while
      // its module starts: there, a model whose blocks lie well past its
      // first megabyte, or they would all be in before the engine asks.
      const dir = build === 'threaded' ? tempDir('unit-states') : root;
      const model = build === 'threaded'
        ? generateModel(dir, 'kquant-small', 'Q8_0', 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf')
        : join(root, MODEL);
      const maxTokens = build === 'threaded' ? 8 : 60;
      const text = build === 'threaded' ? nativeGreedy(model, PROMPT, maxTokens) : expected;
      const slow = await RangeServer.start(dir, ['--mbps', build === 'threaded' ? '10' : '1']);
      const events: LoadProgress[] = [];
      try {
        const llm = await SipLLM.load(`${slow.url}/${basename(model)}`, { build, onProgress: (e) => events.push(e) });
        try {
          expect(await collect(llm.generate(PROMPT, { maxTokens, temperature: 0 }))).toBe(text);
          const names = llm.stats().loader.units.map((unit) => unit.name);
          const withUnits = events.filter((e) => e.units.length > 0);
          expect(withUnits.length).toBeGreaterThan(0);
          // In every event the units that arrived come first, in stream
          // order; at most one is streaming, right after them; none goes back.
          let arrivedBefore = 0;
          for (const event of withUnits) {
            expect(event.units.map((unit) => unit.name)).toEqual(names);
            const states = event.units.map((unit) => unit.state);
            const firstMissing = states.findIndex((state) => state === 'waiting' || state === 'streaming');
            const arrived = firstMissing < 0 ? states.length : firstMissing;
            expect(states.slice(arrived).every((state) => state === 'waiting' || state === 'streaming'), states.join(' ')).toBe(true);
            expect(states.slice(arrived + 1)).not.toContain('streaming');
            expect(arrived).toBeGreaterThanOrEqual(arrivedBefore);
            arrivedBefore = arrived;
          }
          // Seen while they arrived, not only at the end.
          expect(withUnits.some((e) => e.units.some((unit) => unit.state === 'resident') &&
                                       e.units.some((unit) => unit.state === 'streaming'))).toBe(true);
          const last = events[events.length - 1];
          expect(last.phase).toBe('ready');
          expect(last.units.every((unit) => unit.state === 'resident' && !unit.cached)).toBe(true);
        } finally {
          await llm.unload();
        }
      } finally {
        await slow.stop();
        if (dir !== root) removeDir(dir);
      }
    });
  }

  // The early fetch leaves a mixture of experts' experts to the engine,
  // which reads only those its router chooses: what it fetches ahead, it
  // would otherwise hold until the load ends.
  it('fetches ahead every block tensor but the experts', () => {
    const bytes = readFileSync(join(repoRoot, 'tests/fixtures/arch/qwen3moe-Q4_K_M.gguf'));
    const layout = readGgufLayout(bytes);
    const ranges = blockRanges(layout, bytes.length);
    const inRanges = (offset: number) => ranges.some(([begin, end]) => begin <= offset && offset < end);
    const blockTensors = layout.tensors.filter((t) => t.name.startsWith('blk.'));
    const experts = blockTensors.filter((t) => /_exps\./.test(t.name));
    expect(experts.length).toBeGreaterThan(0);
    for (const t of blockTensors) expect(inRanges(t.offset), t.name).toBe(!experts.includes(t));
    for (let i = 1; i < ranges.length; ++i) expect(ranges[i][0]).toBeGreaterThan(ranges[i - 1][1]);
  });

  it('follows a redirect, as Hugging Face resolve URLs answer', async () => {
    const llm = await SipLLM.load(`${server.url}/fault/redirect/${MODEL}`, { threads: 2 });
    try {
      expect(await collect(llm.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
    } finally {
      await llm.unload();
    }
  });

  it('serves a second load from the cache without a request', async () => {
    const cache = tempDir('cache');
    const url = `${server.url}/${MODEL}`;
    try {
      await server.reset();
      const first = await SipLLM.load(url, { threads: 2, cache });
      try {
        expect(await collect(first.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        expect(first.stats().cache).toEqual({ enabled: true, error: '' });
      } finally {
        await first.unload();
      }
      expect((await server.stats()).requests).toBeGreaterThan(0);
      expect(await SipLLM.cachedModels({ cache })).toEqual([
        expect.objectContaining({ url, size: fileSize(MODEL), cachedBytes: fileSize(MODEL) }),
      ]);

      await server.reset();
      const events: LoadProgress[] = [];
      const second = await SipLLM.load(url, { threads: 2, cache, onProgress: (e) => events.push(e) });
      try {
        expect(await collect(second.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        expect(second.stats().source).toMatchObject({ openedFromCache: true, requests: 0, bytesFetched: 0 });
      } finally {
        await second.unload();
      }
      expect((await server.stats()).requests).toBe(0);
      expectMonotonic(events);
      expect(events.some((e) => e.phase === 'cached')).toBe(true);
      expect(events[events.length - 1].loaded).toBe(fileSize(MODEL));

      await SipLLM.deleteCachedModel(url, { cache });
      expect(await SipLLM.cachedModels({ cache })).toEqual([]);
    } finally {
      removeDir(cache);
    }
  });

  it('resumes an interrupted download from the pages it kept', async () => {
    const cache = tempDir('cache');
    // The connection drops once, inside the last block's bytes.
    const url = `${server.url}/fault/drop-once/${MODEL}?at=${fileSize(MODEL) - 20_000}`;
    try {
      await server.reset();
      // The single-thread build has no prefetch thread that could fetch the
      // block again in the background after the failure.
      const first = await SipLLM.load(url, { build: 'single', cache, maxRetries: 0 });
      try {
        await expect(collect(first.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).rejects.toBeInstanceOf(NetworkError);
      } finally {
        await first.unload();
      }
      const [partial] = await SipLLM.cachedModels({ cache });
      expect(partial.cachedBytes).toBeGreaterThan(0);
      expect(partial.cachedBytes).toBeLessThan(partial.size);

      // (Not reset: the connection has dropped once, and stays up now.)
      const before = (await server.stats()).log.length;
      const second = await SipLLM.load(url, { threads: 1, cache });
      try {
        expect(await collect(second.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        expect(second.stats().source?.openedFromCache).toBe(true);
      } finally {
        await second.unload();
      }
      // Only the pages that were missing crossed the network.
      const fetched = (await server.stats()).log.slice(before).reduce((sum, entry) => sum + entry.bytes, 0);
      expect(fetched).toBe(partial.size - partial.cachedBytes);
      const [complete] = await SipLLM.cachedModels({ cache });
      expect(complete.cachedBytes).toBe(complete.size);
    } finally {
      removeDir(cache);
    }
  });

  it('streams on without the cache when the cache cannot be written', async () => {
    const cache = tempDir('cache');
    const url = `${server.url}/${MODEL}`;
    try {
      // An entry whose pages file then turns into something that cannot be
      // written (as a full disk or a browser quota would refuse the write).
      const first = await SipLLM.load(url, { build: 'single', cache });
      await first.unload();
      const pages = readdirSync(cache).filter((name) => name.endsWith('.pages'));
      expect(pages).toHaveLength(1);
      rmSync(join(cache, pages[0]));
      mkdirSync(join(cache, pages[0]));

      const second = await SipLLM.load(url, { threads: 2, cache });
      try {
        expect(await collect(second.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        const stats = second.stats();
        expect(stats.cache.enabled).toBe(false);
        expect(stats.cache.error).toContain(pages[0]);
        expect(stats.source?.bytesFetched).toBeGreaterThan(0);
      } finally {
        await second.unload();
      }
    } finally {
      removeDir(cache);
    }
  });

  it('streams a unit over its budget from the cache once it is stored, never again from the network', async () => {
    const budget = 420_000;
    const url = `${server.url}/${MODEL}`;
    const cache = tempDir('cache');
    try {
      await server.reset();
      const llm = await SipLLM.load(url, { threads: 2, memoryBudget: budget, cache });
      try {
        expect(await collect(llm.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        expect(llm.stats().loader.streamedUnits).toBeGreaterThan(0);
        // Every byte crossed the network once, however often it was read.
        expect((await server.stats()).bytes).toBeLessThanOrEqual(fileSize(MODEL));
        const afterFirst = llm.stats().source!;
        const requests = (await server.stats()).requests;

        await llm.reset();
        expect(await collect(llm.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
        const afterSecond = llm.stats();
        expect((await server.stats()).requests).toBe(requests);
        expect(afterSecond.source!.bytesFetched).toBe(afterFirst.bytesFetched);
        // The streamed units were read again, every token, from the cache.
        expect(afterSecond.source!.bytesFromCache - afterFirst.bytesFromCache)
          .toBeGreaterThan(10 * (llm.info.weightBytes - afterSecond.loader.residentBytes));
      } finally {
        await llm.unload();
      }
    } finally {
      removeDir(cache);
    }
  });

  // Q5_0 and Q5_1 matrices, which the engine keeps a value per byte unless
  // told not to or the budget cannot hold the model so: the text of the
  // native engine with them packed, and the same hidden states bit for bit
  // either way.
  for (const type of ['Q5_0', 'Q5_1']) {
    it(`runs ${type} matrices unpacked and packed alike`, async () => {
      const dir = tempDir('q5');
      const model = generateModel(dir, 'kquant-small', type, 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
      const text = nativeRun(model, PROMPT, 8, ['--temp', '0', '--unpack-5bit', 'off']);
      const own = await RangeServer.start(dir);
      try {
        const runs: { embedding: Float32Array; residentBytes: number; unpacked: boolean }[] = [];
        for (const options of [{ unpack5bit: false }, {}, { memoryBudget: 0 }]) {
          const llm = await SipLLM.load(`${own.url}/${basename(model)}`, { threads: 2, cache: false, ...options });
          try {
            expect(await collect(llm.generate(PROMPT, { maxTokens: 8, temperature: 0 }))).toBe(text);
            const { embeddings } = await llm.embed([`${PROMPT} there was a robot`]);
            const { loader } = llm.stats();
            runs.push({ embedding: embeddings[0], residentBytes: loader.residentBytes, unpacked: loader.unpacked5bit });
          } finally {
            await llm.unload();
          }
        }
        expect(runs[1].embedding).toEqual(runs[0].embedding);
        expect(runs[2].embedding).toEqual(runs[0].embedding);
        // 34 or 36 bytes per 32 values instead of 22 or 24 (the Q6_K head stays).
        expect(runs[1].residentBytes).toBeGreaterThan(runs[0].residentBytes * 1.2);
        expect(runs[2].residentBytes).toBe(0);
        expect(runs.map((run) => run.unpacked)).toEqual([false, true, false]);
      } finally {
        await own.stop();
        removeDir(dir);
      }
    });
  }

  // Q4_0 and Q4_1 matrices, whose tiles interleave four rows' values (the
  // kernels' other layout): the native engine's text, resident and streamed,
  // and the same hidden states bit for bit either way.
  for (const type of ['Q4_0', 'Q4_1']) {
    it(`runs ${type} matrices as the native engine does`, async () => {
      const dir = tempDir('q4');
      const model = generateModel(dir, 'kquant-small', type, 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
      const text = nativeRun(model, PROMPT, 8, ['--temp', '0']);
      const own = await RangeServer.start(dir);
      try {
        const embeddings: Float32Array[] = [];
        for (const options of [{}, { memoryBudget: 0 }]) {
          const llm = await SipLLM.load(`${own.url}/${basename(model)}`, { threads: 2, cache: false, ...options });
          try {
            expect(await collect(llm.generate(PROMPT, { maxTokens: 8, temperature: 0 }))).toBe(text);
            embeddings.push((await llm.embed([`${PROMPT} there was a robot`])).embeddings[0]);
          } finally {
            await llm.unload();
          }
        }
        expect(embeddings[1]).toEqual(embeddings[0]);
      } finally {
        await own.stop();
        removeDir(dir);
      }
    });
  }

  it('streams a model larger than its memory budget, on every token', async () => {
    // Room for the ring (two of the largest unit) and little else.
    const budget = 420_000;
    const llm = await SipLLM.load(`${server.url}/${MODEL}`, { threads: 2, memoryBudget: budget });
    try {
      expect(await collect(llm.generate(PROMPT, { maxTokens: 60, temperature: 0 }))).toBe(expected);
      const stats = llm.stats();
      expect(stats.loader.streamedUnits).toBeGreaterThan(0);
      expect(stats.loader.peakWeightBytes).toBeLessThanOrEqual(budget);
      // Streamed units were read from the source again for every token.
      expect(stats.loader.bytesRead).toBeGreaterThan(10 * llm.info.weightBytes);
    } finally {
      await llm.unload();
    }
  });
});

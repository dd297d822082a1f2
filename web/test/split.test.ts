// Split models (llama.cpp's gguf-split), loaded by their first part's URL:
// the same text as the unsplit file, each part its own cache entry, a
// missing part named; and tensors past 4 GiB, fetched by the 32-bit
// WebAssembly build over range requests and cached at those offsets.

import { execFileSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

import { NetworkError, SipLLM } from '../dist/index.js';
import type { ServerLogEntry } from './support.js';
import { RangeServer, cliPath, collect, modelPath, nativeGreedy, removeDir, tempDir } from './support.js';

const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';
const TOKENS = 40;
const FOUR_GIB = 2 ** 32;

let server: RangeServer;
let root: string;
let expected: string;

function split(parts: number, prefix: string, extra: string[] = []): void {
  execFileSync(cliPath, ['split', '--parts', String(parts), ...extra, modelPath(MODEL), join(root, prefix)],
               { stdio: 'ignore' });
}

function rangeStart(entry: ServerLogEntry): number {
  const match = /^bytes=(\d+)-/.exec(entry.range ?? '');
  return match === null ? -1 : Number(match[1]);
}

beforeAll(async () => {
  expected = nativeGreedy(MODEL, PROMPT, TOKENS);
  root = tempDir('split-root');
  split(3, 'stories');
  // Each part with a 4.5 GiB hole (sparse) before its tensors.
  split(2, 'far', ['--data-gap', '4608M']);
  split(2, 'lonely');
  removeDir(join(root, 'lonely-00002-of-00002.gguf'));
  server = await RangeServer.start(root);
});

afterAll(async () => {
  await server?.stop();
  if (root) removeDir(root);
});

describe('a split model', () => {
  it('gives the unsplit text natively and in the package, each part cached on its own', async () => {
    const first = `${server.url}/stories-00001-of-00003.gguf`;
    expect(nativeGreedy(join(root, 'stories-00001-of-00003.gguf'), PROMPT, TOKENS)).toBe(expected);
    const cache = tempDir('cache');
    try {
      const llm = await SipLLM.load(first, { threads: 2, cache });
      try {
        expect(await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        const source = llm.stats().source!;
        expect(source.requests).toBeGreaterThan(0);
        expect(source.bytesFetched).toBeGreaterThan(0);
      } finally {
        await llm.unload();
      }
      const cached = await SipLLM.cachedModels({ cache });
      expect(cached.map((m) => m.url).sort()).toEqual(
        [1, 2, 3].map((k) => `${server.url}/stories-0000${k}-of-00003.gguf`));
      for (const m of cached) expect(m.cachedBytes).toBe(m.size);

      await server.reset();
      const again = await SipLLM.load(first, { build: 'single', cache });
      try {
        expect(await collect(again.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        expect(again.stats().source!.bytesFetched).toBe(0);
      } finally {
        await again.unload();
      }
      expect((await server.stats()).requests).toBe(0);

      // The first part's URL stands for the model: every part's entry goes.
      await SipLLM.deleteCachedModel(first, { cache });
      expect(await SipLLM.cachedModels({ cache })).toEqual([]);
    } finally {
      removeDir(cache);
    }
  });

  // The parts' request threads are more than the worker pool holds: the
  // engine starts the rest from its own threads, which the worker's event
  // loop carries out, so the engine must free the model without blocking it.
  // (Blocking it, 8 of 20 such unloads hung until unload() stopped the
  // worker.)
  it('unloads in order right after the load, before every thread has started', async () => {
    const warn = vi.spyOn(console, 'warn');
    try {
      for (let run = 0; run < 8; run++) {
        const cache = tempDir('cache');
        try {
          const llm = await SipLLM.load(`${server.url}/stories-00001-of-00003.gguf`, { threads: 2, cache });
          await llm.unload();
          await llm.workerExited;
        } finally {
          removeDir(cache);
        }
      }
      expect(warn).not.toHaveBeenCalled();
    } finally {
      warn.mockRestore();
    }
  });

  it('names a missing part', async () => {
    const error = await SipLLM.load(`${server.url}/lonely-00001-of-00002.gguf`, { build: 'single' })
      .then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(NetworkError);
    expect((error as Error).message).toContain('lonely-00002-of-00002.gguf (part 2 of 2 of a split model)');
    expect((error as Error).message).toContain('HTTP 404');
  });
});

describe('offsets past 4 GiB', () => {
  for (const build of ['single', 'threaded'] as const) {
    it(`are fetched and cached by the ${build} build`, async () => {
      const first = `${server.url}/far-00001-of-00002.gguf`;
      expect(statSync(join(root, 'far-00001-of-00002.gguf')).size).toBeGreaterThan(FOUR_GIB);
      const cache = tempDir('cache');
      const options = build === 'single' ? { build, cache } : { threads: 2, cache };
      try {
        await server.reset();
        const llm = await SipLLM.load(first, options);
        try {
          expect(llm.info.fileBytes).toBeGreaterThan(2 * FOUR_GIB);
          expect(await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        } finally {
          await llm.unload();
        }
        expect((await server.stats()).log.some((entry) => rangeStart(entry) > FOUR_GIB)).toBe(true);
        const cached = await SipLLM.cachedModels({ cache });
        expect(cached).toHaveLength(2);
        for (const m of cached) expect(m.size).toBeGreaterThan(FOUR_GIB);

        await server.reset();
        const again = await SipLLM.load(first, options);
        try {
          expect(await collect(again.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        } finally {
          await again.unload();
        }
        // (Readahead may ask for pages of the unused gap again; no weight.)
        expect((await server.stats()).log.some((entry) => rangeStart(entry) > FOUR_GIB)).toBe(false);
      } finally {
        removeDir(cache);
      }
    });
  }
});

// Every failure arrives as its typed error, with a message naming what was
// wrong; a dropped connection is retried.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';

import { FormatError, NetworkError, OutOfBudgetError, SipLLM, SipLLMError, UnsupportedError } from '../dist/index.js';
import { RangeServer, collect, fileSize, modelPath, nativeGreedy, removeDir, serveDir } from './support.js';

const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';

let server: RangeServer;
let root: string;
let expected: string;

beforeAll(async () => {
  expected = nativeGreedy(MODEL, PROMPT, 30);
  const model = readFileSync(modelPath(MODEL));
  root = serveDir([MODEL], {
    // The first 60% of the model: the header is whole, the tensors are not.
    'truncated.gguf': model.subarray(0, Math.floor(model.length * 0.6)),
    // A tokenizer-only GGUF of another architecture.
    'gpt2-vocab.gguf': readFileSync(modelPath('llama.cpp-vocab/ggml-vocab-gpt-2.gguf')),
  });
  server = await RangeServer.start(root);
});

afterAll(async () => {
  await server?.stop();
  if (root) removeDir(root);
});

async function loadError(path: string, options = {}): Promise<SipLLMError> {
  try {
    const llm = await SipLLM.load(`${server.url}${path}`, { threads: 2, backoffMs: 1, ...options });
    await llm.unload();
  } catch (error) {
    return error as SipLLMError;
  }
  throw new Error(`loading ${path} succeeded`);
}

describe('errors', () => {
  it('a 404 is a NetworkError naming the status', async () => {
    const error = await loadError(`/fault/404/${MODEL}`);
    expect(error).toBeInstanceOf(NetworkError);
    expect(error.kind).toBe('network');
    expect(error.message).toContain('404');
    expect(error.message).toContain(`/fault/404/${MODEL}`);
  });

  it('a missing server is a NetworkError', async () => {
    const unused = await RangeServer.start(root);
    const url = unused.url;
    await unused.stop();
    const error = await SipLLM.load(`${url}/${MODEL}`, { maxRetries: 1, backoffMs: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NetworkError);
  });

  it('a server that ignores Range is a NetworkError unless the whole file is allowed', async () => {
    const error = await loadError(`/fault/ignore-range/${MODEL}`);
    expect(error).toBeInstanceOf(NetworkError);
    expect(error.message).toMatch(/ignored the Range header/);

    const llm = await SipLLM.load(`${server.url}/fault/ignore-range/${MODEL}`, { threads: 2, allowWholeFile: true });
    try {
      expect(await collect(llm.generate(PROMPT, { maxTokens: 30, temperature: 0 }))).toBe(expected);
      expect(llm.stats().source?.wholeFile).toBe(true);
    } finally {
      await llm.unload();
    }
  });

  it('a truncated file is a FormatError naming the tensor', async () => {
    const error = await loadError('/truncated.gguf');
    expect(error).toBeInstanceOf(FormatError);
    expect(error.message).toMatch(/tensor '[^']+'.* outside the file/);
  });

  it('a body cut short on every attempt is a NetworkError', async () => {
    const error = await loadError(`/fault/truncated/${MODEL}`, { maxRetries: 2 });
    expect(error).toBeInstanceOf(NetworkError);
    expect(error.message).toMatch(/closed after/);
  });

  // The single-thread build: the threaded ones fetch the first blocks before
  // the engine asks (see the next test), and the one drop would hit that request.
  it('a connection dropped mid-block fails without retries, and succeeds with them', async () => {
    const path = `/fault/drop-once/${MODEL}?at=${fileSize(MODEL) - 20_000}`;
    await server.reset();
    const once = await SipLLM.load(`${server.url}${path}`, { build: 'single', maxRetries: 0 });
    try {
      const error = await collect(once.generate(PROMPT, { maxTokens: 30, temperature: 0 })).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(NetworkError);
      expect((error as Error).message).toMatch(/block \d+/);
      // Asked again, the same model fetches the block again.
      expect(await collect(once.generate(PROMPT, { maxTokens: 30, temperature: 0 }))).toBe(expected);
    } finally {
      await once.unload();
    }

    await server.reset();
    const retried = await SipLLM.load(`${server.url}${path}`, { build: 'single', backoffMs: 1 });
    try {
      expect(await collect(retried.generate(PROMPT, { maxTokens: 30, temperature: 0 }))).toBe(expected);
      expect(retried.stats().source?.retries).toBe(1);
    } finally {
      await retried.unload();
    }
  });

  it('a connection dropped while the worker fetched ahead of the engine costs the engine nothing', async () => {
    const path = `/fault/drop-once/${MODEL}?at=${fileSize(MODEL) - 20_000}`;
    await server.reset();
    const llm = await SipLLM.load(`${server.url}${path}`, { threads: 2, maxRetries: 0 });
    try {
      expect(await collect(llm.generate(PROMPT, { maxTokens: 30, temperature: 0 }))).toBe(expected);
      expect(llm.stats().source?.retries).toBe(0);
      // The worker's request met the drop; the engine fetched the rest itself.
      const { log } = await server.stats();
      expect(log.filter((entry) => entry.fault !== null)).toHaveLength(1);
    } finally {
      await llm.unload();
    }
  });

  it('a 5xx is retried, then reported', async () => {
    const llm = await SipLLM.load(`${server.url}/fault/500-once/${MODEL}`, { threads: 2, backoffMs: 1 });
    await llm.unload();
    const error = await loadError(`/fault/503/${MODEL}`, { maxRetries: 2 });
    expect(error).toBeInstanceOf(NetworkError);
    expect(error.message).toContain('503');
  });

  it('another architecture is an UnsupportedError', async () => {
    const error = await loadError('/gpt2-vocab.gguf');
    expect(error).toBeInstanceOf(UnsupportedError);
    expect(error.message).toContain('gpt2');
  });

  it('a budget too small for the ring is an OutOfBudgetError', async () => {
    const error = await loadError(`/${MODEL}`, { memoryBudget: 1000 });
    expect(error).toBeInstanceOf(OutOfBudgetError);
    expect(error.message).toMatch(/prefetch ring/);
  });

  it('bytes that are not a model are a FormatError', async () => {
    const error = await SipLLM.load(new TextEncoder().encode('not a model at all'), { threads: 1 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(FormatError);
  });
});

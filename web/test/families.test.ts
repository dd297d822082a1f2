// One file of every model family, written and quantized by llama.cpp, loaded
// over HTTP range requests and streamed under a memory budget that leaves its
// weights a quarter of the file (the budget covers the working memory too:
// activations and the KV cache): the text is the native engine's.

import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SipLLM } from '../dist/index.js';
import { RangeServer, collect, nativeRun, repoRoot } from './support.js';

const FIXTURES = join(repoRoot, 'tests/fixtures/arch');
const FAMILIES = ['llama3', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3', 'smollm3', 'qwen35', 'lfm2', 'gemma4', 'qwen3moe',
                  'qwen35moe', 'lfm2moe'];
const PROMPT = 'Once upon a time there was a little robot';
const TOKENS = 12;

let server: RangeServer;

beforeAll(async () => {
  server = await RangeServer.start(FIXTURES);
});

afterAll(async () => {
  await server?.stop();
});

describe('every family over HTTP under a quarter budget', () => {
  for (const family of FAMILIES) {
    it(family, async () => {
      const file = `${family}-Q4_K_M.gguf`;
      const url = `${server.url}/${file}`;
      const quarter = Math.floor(statSync(join(FIXTURES, file)).size / 4);
      // The context decides Phi-3's rope factors (long beyond its original
      // context, as llama.cpp picks them): the same on both sides.
      const expected = nativeRun(join(FIXTURES, file), PROMPT, TOKENS, ['--temp', '0', '--ctx', '64']);
      // What the working memory takes, from a load that keeps no weights.
      const options = { threads: 2, cache: false, contextLength: 64, prefillChunk: 16 };
      const probe = await SipLLM.load(url, { ...options, memoryBudget: 0 });
      const working = probe.stats().loader.workingBytes;
      // qwen35's fixture has four blocks, the largest 30 % of the file: the
      // weights' share is then one buffer of it, the least a ring takes.
      const weights = Math.max(quarter, ...probe.stats().loader.units.map((unit) => unit.memoryBytes));
      await probe.unload();
      const budget = working + weights;
      const llm = await SipLLM.load(url, { ...options, memoryBudget: budget });
      try {
        expect(llm.info.architecture).toBe(family === 'llama3' ? 'llama' : family);
        expect(await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        const { loader } = llm.stats();
        expect(loader.residentBytes + loader.ringBytes).toBeLessThanOrEqual(weights);
        expect(loader.peakWeightBytes + loader.workingBytes).toBeLessThanOrEqual(budget);
        expect(loader.units.filter((unit) => !unit.resident).length).toBeGreaterThan(0);
      } finally {
        await llm.unload();
      }
    });
  }
});

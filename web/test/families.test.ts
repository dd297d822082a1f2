// One file of every model family, written and quantized by llama.cpp, loaded
// over HTTP range requests and streamed under a memory budget of a quarter of
// its size: the text is the native engine's.

import { statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SipLLM } from '../dist/index.js';
import { RangeServer, collect, nativeGreedy, repoRoot } from './support.js';

const FIXTURES = join(repoRoot, 'tests/fixtures/arch');
const FAMILIES = ['llama3', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3', 'smollm3'];
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
      const budget = Math.floor(statSync(join(FIXTURES, file)).size / 4);
      const expected = nativeGreedy(join(FIXTURES, file), PROMPT, TOKENS);
      const llm = await SipLLM.load(`${server.url}/${file}`, { threads: 2, memoryBudget: budget, cache: false });
      try {
        expect(llm.info.architecture).toBe(family === 'llama3' ? 'llama' : family);
        expect(await collect(llm.generate(PROMPT, { maxTokens: TOKENS, temperature: 0 }))).toBe(expected);
        const stats = llm.stats();
        expect(stats.loader.peakWeightBytes).toBeLessThanOrEqual(budget);
        expect(stats.loader.units.filter((unit) => !unit.resident).length).toBeGreaterThan(0);
      } finally {
        await llm.unload();
      }
    });
  }
});

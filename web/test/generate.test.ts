// Generation through the package equals the native engine's, in both builds,
// from bytes and from a URL; abort stops the engine within one token; unload
// stops the worker.

import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AbortError, ContextFullError, InvalidArgumentError, SipLLM } from '../dist/index.js';
import {
  RangeServer,
  collect,
  generateModel,
  modelPath,
  nativeGreedy,
  nativeRun,
  nativeTokenize,
  removeDir,
  serveDir,
  tempDir,
} from './support.js';

const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';
const BUILDS = ['threaded', 'single'] as const;

let server: RangeServer;
let root: string;
let scratch: string;
let slowModel: string;
let expected: string;
// A small model of each block type of llama.cpp's that the engine reads
// besides the common ones: their kernels in WebAssembly against the native.
const BLOCK_TYPES = ['Q2_K', 'Q3_K', 'IQ4_NL', 'IQ4_XS', 'MXFP4'] as const;
const blockTypeModels: Record<string, string> = {};

beforeAll(async () => {
  expected = nativeGreedy(MODEL, PROMPT, 120);
  root = serveDir([MODEL]);
  server = await RangeServer.start(root);
  scratch = tempDir('models');
  slowModel = generateModel(scratch, 'smollm-135m', 'Q8_0', 'llama.cpp-vocab/ggml-vocab-starcoder.gguf');
  for (const type of BLOCK_TYPES) blockTypeModels[type] = generateModel(scratch, 'tiny-k', type, MODEL);
});

afterAll(async () => {
  await server?.stop();
  if (root) removeDir(root);
  if (scratch) removeDir(scratch);
});

describe.each(BUILDS)('the %s build', (build) => {
  it('generates greedily what the native engine generates, from bytes', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { build, threads: 2 });
    try {
      expect(llm.build).toBe(build);
      const text = await collect(llm.generate(PROMPT, { maxTokens: 120, temperature: 0 }));
      expect(text).toBe(expected);
      const stats = llm.stats();
      expect(stats.build).toBe(build);
      expect(stats.lastGeneration?.generatedTokens).toBe(120);
      // The engine's split of decode between loops its threads shared and the rest.
      const { decodeMs, decodeParallel } = stats.lastGeneration!;
      expect(Number.isInteger(decodeParallel.loops)).toBe(true);
      expect(decodeParallel.waitMs).toBeGreaterThanOrEqual(0);
      expect(decodeParallel.waitMs).toBeLessThanOrEqual(decodeParallel.loopMs);
      expect(decodeParallel.loopMs).toBeLessThanOrEqual(decodeMs);
      // Plain SIMD128 in every build Node runs.
      expect(stats.lastGeneration?.kernels).toBe('WebAssembly SIMD128, 16-bit dot products');
      expect(stats.source).toBeNull();
    } finally {
      await llm.unload();
    }
  });

  it('reads each block type to the native engine\'s text', async () => {
    for (const type of BLOCK_TYPES) {
      const model = blockTypeModels[type];
      const llm = await SipLLM.load(readFileSync(model), { build, threads: 2 });
      try {
        const text = await collect(llm.generate(PROMPT, { maxTokens: 24, temperature: 0 }));
        expect(text, type).toBe(nativeGreedy(model, PROMPT, 24));
        expect(text.length, type).toBeGreaterThan(0);
      } finally {
        await llm.unload();
      }
    }
  });

  it('generates greedily what the native engine generates, from a URL', async () => {
    const llm = await SipLLM.load(`${server.url}/${MODEL}`, { build, threads: 2 });
    try {
      const text = await collect(llm.generate(PROMPT, { maxTokens: 120, temperature: 0 }));
      expect(text).toBe(expected);
      const stats = llm.stats();
      expect(stats.source?.requests).toBeGreaterThan(0);
      // The loader's per-unit counters and timeline, for the demo's chart.
      expect(stats.loader.units.length).toBe(llm.info.hyperparameters.nLayers + 1);
      // A prompt token's multiply-adds: per layer Q and the output
      // (dim x heads' width), K and V (dim x KV heads' width), gate, up
      // and down (dim x hidden).
      const { nLayers, dim, hiddenDim, nHeads, nKvHeads, headDim } = llm.info.hyperparameters;
      expect(llm.info.multiplyAddsPerToken)
        .toBe(nLayers * dim * (2 * nHeads * headDim + 2 * nKvHeads * headDim + 3 * hiddenDim));
      expect(stats.loader.timeline.length).toBeGreaterThan(0);
    } finally {
      await llm.unload();
    }
  });

  it('stops within one token of an abort', async () => {
    // A model slow enough per token that the abort reaches the engine long
    // before the last token could have been generated.
    const llm = await SipLLM.load(readFileSync(slowModel), { build, threads: 2 });
    try {
      const controller = new AbortController();
      const maxTokens = 300;
      // End of text is banned so that only the abort can stop it early.
      const options = { maxTokens, temperature: 0, logitBias: { [llm.info.eos]: -Infinity }, signal: controller.signal };
      let pieces = 0;
      const run = async () => {
        for await (const piece of llm.generate('Once upon a time', options)) {
          expect(piece.length).toBeGreaterThan(0);
          pieces += 1;
          if (pieces === 3) controller.abort();
        }
      };
      await expect(run()).rejects.toBeInstanceOf(AbortError);
      expect(pieces).toBe(3);  // nothing is yielded after the abort
      const generation = llm.stats().lastGeneration!;
      expect(generation.stopReason).toBe('cancelled');
      expect(generation.tokensAtCancel).toBeGreaterThanOrEqual(3);
      expect(generation.generatedTokens - generation.tokensAtCancel!).toBeLessThanOrEqual(1);
      expect(generation.generatedTokens).toBeLessThan(maxTokens);

      // The next request runs normally.
      await collect(llm.generate('Once upon a time', { ...options, maxTokens: 4, signal: undefined }));
      expect(llm.stats().lastGeneration).toMatchObject({ stopReason: 'max tokens', generatedTokens: 4 });
    } finally {
      await llm.unload();
    }
  });

  it('generates as the native engine does after an aborted request', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { build, threads: 2 });
    try {
      const controller = new AbortController();
      let pieces = 0;
      const run = async () => {
        for await (const _ of llm.generate(PROMPT, { maxTokens: 1000, temperature: 0, signal: controller.signal })) {
          if (++pieces === 3) controller.abort();
        }
      };
      await expect(run()).rejects.toBeInstanceOf(AbortError);
      expect(await collect(llm.generate(PROMPT, { maxTokens: 120, temperature: 0 }))).toBe(expected);
    } finally {
      await llm.unload();
    }
  });
});

describe('the package', () => {
  it('tokenizes as the native engine does', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 1 });
    try {
      const text = 'Lily saw a big, red ball in the park.';
      const ids = await llm.tokenize(text);
      expect(ids).toEqual(nativeTokenize(MODEL, text));
      expect(await llm.detokenize(ids)).toBe(text);
    } finally {
      await llm.unload();
    }
  });

  it('samples with a seed, and stops at a stop string, as the native engine does', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 2 });
    try {
      const sampling = { temperature: 0.9, topK: 30, topP: 0.9, minP: 0.02, repeatPenalty: 1.1, seed: 42 };
      const flags = ['--temp', '0.9', '--top-k', '30', '--top-p', '0.9', '--min-p', '0.02', '--repeat-penalty', '1.1', '--seed', '42'];
      const sampled = await collect(llm.generate(PROMPT, { maxTokens: 80, ...sampling }));
      expect(sampled).toBe(nativeRun(MODEL, PROMPT, 80, flags));

      await llm.reset();
      const stopped = await collect(llm.generate(PROMPT, { maxTokens: 120, temperature: 0, stop: [' day'] }));
      expect(llm.stats().lastGeneration?.stopReason).toBe('stop string');
      expect(stopped).toBe(nativeRun(MODEL, PROMPT, 120, ['--temp', '0', '--stop', ' day']));
      expect(expected.startsWith(stopped + ' day')).toBe(true);
    } finally {
      await llm.unload();
    }
  });

  it('samples typically (typicalP) as the native engine does, and the engine checks its range', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 2 });
    try {
      const sampling = { temperature: 1, topK: 0, topP: 1, minP: 0, seed: 7 };
      const flags = ['--temp', '1', '--top-k', '0', '--top-p', '1', '--min-p', '0', '--seed', '7'];
      const typical = await collect(llm.generate(PROMPT, { maxTokens: 60, ...sampling, typicalP: 0.5 }));
      expect(typical).toBe(nativeRun(MODEL, PROMPT, 60, [...flags, '--typical-p', '0.5']));
      await llm.reset();
      const untouched = await collect(llm.generate(PROMPT, { maxTokens: 60, ...sampling }));
      expect(untouched).toBe(nativeRun(MODEL, PROMPT, 60, flags));
      expect(typical).not.toBe(untouched);
      for (const bad of [0, -1]) {
        const error = await collect(llm.generate(PROMPT, { maxTokens: 4, typicalP: bad })).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(InvalidArgumentError);
        expect((error as InvalidArgumentError).message).toBe(`option 'typicalP' must be above 0 and at most 1, not ${bad}`);
        expect((error as InvalidArgumentError).option).toBe('typicalP');
      }
      // The OpenAI layer passes it on, and its range is the engine's to check.
      const completion = await llm.completions.create({ prompt: PROMPT, max_tokens: 60, temperature: 1, top_k: 0,
                                                        top_p: 1, min_p: 0, seed: 7, typical_p: 0.5 });
      expect(completion.choices[0].text).toBe(typical);
      await expect(llm.completions.create({ prompt: PROMPT, max_tokens: 4, typical_p: 0 }))
        .rejects.toThrow("field 'typical_p' must be above 0 and at most 1, not 0");
    } finally {
      await llm.unload();
    }
  });

  it('continues a conversation and forgets it on reset', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 1 });
    try {
      await collect(llm.generate(PROMPT, { maxTokens: 10, temperature: 0 }));
      await collect(llm.generate(PROMPT, { maxTokens: 10, temperature: 0 }));
      const reused = llm.stats().lastGeneration!.reusedTokens;
      expect(reused).toBeGreaterThan(0);
      await llm.reset();
      await collect(llm.generate(PROMPT, { maxTokens: 10, temperature: 0 }));
      expect(llm.stats().lastGeneration!.reusedTokens).toBe(0);
    } finally {
      await llm.unload();
    }
  });

  it('reports a request beyond the context as ContextFullError', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 1, contextLength: 64 });
    try {
      await expect(collect(llm.generate(PROMPT, { maxTokens: 100 }))).rejects.toBeInstanceOf(ContextFullError);
      // The model is still usable.
      expect(await collect(llm.generate(PROMPT, { maxTokens: 5, temperature: 0 }))).toBe(nativeGreedy(MODEL, PROMPT, 5));
    } finally {
      await llm.unload();
    }
  });

  it('rejects bad options with InvalidArgumentError', async () => {
    await expect(SipLLM.load('ftp://example.com/model.gguf')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(SipLLM.load('model.gguf')).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(SipLLM.load(new Uint8Array(8), { memoryBudget: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 1 });
    try {
      await expect(collect(llm.generate(PROMPT, { topK: 1.5 }))).rejects.toBeInstanceOf(InvalidArgumentError);
      await expect(llm.detokenize([100000])).rejects.toBeInstanceOf(InvalidArgumentError);
    } finally {
      await llm.unload();
    }
  });

  it('stops its worker on unload', async () => {
    const llm = await SipLLM.load(readFileSync(modelPath(MODEL)), { threads: 2 });
    await llm.unload();
    await llm.workerExited;  // resolves only once the worker thread has exited
    await expect(collect(llm.generate(PROMPT))).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

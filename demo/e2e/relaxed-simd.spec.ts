// The relaxed SIMD build against the plain threaded one, in the same browser:
// their hidden states are the same bit for bit for the types whose kernels
// take relaxed SIMD's 8-bit dot product in its exact form where the engine
// gives it (Q8_0's signed bytes, Q4_0's and unpacked Q5_0's interleaved
// tiles, the K-quants' one-position kernels; V8 on an x86 CPU with AVX-VNNI),
// and the text is the native engine's.

import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test, type Page } from '@playwright/test';

import {
  RangeServer, cliPath, complete, expectReady, generateModel, loadUrl, nativeGreedy, openDemo, pageStats, setFields,
} from './support.js';

const PROMPT = 'Once upon a time there was a little robot';
const EMBEDDED = `${PROMPT} who wanted to see the sea`;
const TOKENS = 12;

let dir: string;
let server: RangeServer;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-relaxed-'));
  server = await RangeServer.start(dir);
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function pageEmbedding(page: Page, text: string): Promise<number[]> {
  return page.evaluate(async (input) => {
    const demo = (globalThis as unknown as {
      sipllmDemo: { llm: { embed(texts: string[]): Promise<{ embeddings: Float32Array[] }> } };
    }).sipllmDemo;
    return Array.from((await demo.llm.embed([input])).embeddings[0]);
  }, text);
}

for (const type of ['Q8_0', 'Q4_0', 'Q5_0', 'Q4_K', 'Q6_K']) {
  test(`${type}: the relaxed build's hidden states are the plain build's, and its text the native engine's`,
    async ({ page }) => {
      const model = generateModel(dir, 'kquant-small', type, 'ggml-vocab-llama-spm.gguf');
      const url = `${server.url}/${basename(model)}`;
      const expected = nativeGreedy(model, PROMPT, TOKENS);
      const runs: { build: string; kernels: string; text: string; embedding: number[] }[] = [];
      for (const query of ['', '?build=threaded']) {
        await expectReady(page, await openDemo(page, query));
        await setFields(page, { temperature: 0, 'max-tokens': TOKENS });
        expect(await loadUrl(page, url)).toBe('ready');
        const text = await complete(page, PROMPT);
        const stats = await pageStats(page);
        runs.push({ build: stats.build, kernels: stats.lastGeneration?.kernels ?? '', text,
                    embedding: await pageEmbedding(page, EMBEDDED) });
      }
      expect(runs.map((run) => run.build)).toEqual(['relaxed', 'threaded']);
      // What each build says its matrix products took (this host's V8 gives
      // the exact dot product where the CPU has AVX-VNNI).
      expect(runs[0].kernels).toMatch(/^WebAssembly relaxed SIMD, /);
      expect(runs[1].kernels).toBe('WebAssembly SIMD128, 16-bit dot products');
      expect(runs.map((run) => run.text)).toEqual([expected, expected]);
      expect(runs[0].embedding.length).toBeGreaterThan(0);
      expect(runs[0].embedding).toEqual(runs[1].embedding);
      // And the native engine's embedding (printed with %.9g, which gives
      // every float back).
      const native = execFileSync(cliPath, ['embed', '-m', model, '--threads', '1', '-p', EMBEDDED], { encoding: 'utf8' })
        .trim().split(' ').map((value) => Math.fround(Number(value)));
      expect(runs[0].embedding).toEqual(native);
    });
}

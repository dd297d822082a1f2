// No request waits forever, in Chromium: a stall injected into the engine's
// job thread or into the worker's own thread ends the request with
// EngineStalledError and what each part of the worker was doing; the next
// request loads the model again, from OPFS alone, and gives the native
// engine's text. In both threaded builds. (web/test/stall.test.ts runs the
// same under Node.)

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';

import { expect, test } from '@playwright/test';

import { RangeServer, expectReady, generateModel, nativeGreedy, openDemo } from './support.js';

const PROMPT = 'Once upon a time';
const TOKENS = 12;
const STALL_MS = 2000;

let dir: string;
let server: RangeServer;
let model: string;

test.beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'sipllm-e2e-stall-'));
  model = generateModel(dir, 'kquant-small', 'Q8_0', 'ggml-vocab-llama-spm.gguf');
  server = await RangeServer.start(dir);
});

test.afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

interface Run {
  build: string;
  first: string;
  error: { name: string; message: string; dump: {
    pending: { type: string }[];
    worker: { request: number; requestType: string } | null;
    engine: { job: string; jobState: string; poolThreads: string[] } | null;
  } };
  again: string;
  fetchedAgain: number;
}

for (const stall of ['hold-jobs', 'block-worker'] as const) {
  test(`a stall in ${stall === 'hold-jobs' ? "the engine's job thread" : "the worker's own thread"} ends the request, and the model reloads from OPFS`,
    async ({ page }) => {
      await expectReady(page, await openDemo(page));
      const url = `${server.url}/${basename(model)}`;
      const runs = await page.evaluate(async ({ url, stall, prompt, tokens, stallMs }) => {
        type Llm = {
          generate(prompt: string, options: object): AsyncIterable<string>;
          testHook(hook: string): Promise<void>;
          stats(): { build: string; source: { bytesFetched: number } };
          unload(): Promise<void>;
        };
        type SipLLMClass = {
          load(url: string, options: object): Promise<Llm>;
          cachedModels(options: object): Promise<{ url: string; size: number; cachedBytes: number }[]>;
          deleteCachedModel(url: string, options: object): Promise<void>;
        };
        const demo = (globalThis as unknown as { sipllmDemo: { llm: { constructor: SipLLMClass } } }).sipllmDemo;
        const SipLLM = demo.llm.constructor;
        const collect = async (pieces: AsyncIterable<string>) => {
          let text = '';
          for await (const piece of pieces) text += piece;
          return text;
        };
        const greedy = { maxTokens: tokens, temperature: 0 };
        const out: Run[] = [];
        for (const build of ['relaxed', 'threaded']) {
          await SipLLM.deleteCachedModel(url, { cache: true });
          const llm = await SipLLM.load(url, { build, cache: true, warmUpMs: 0, stallTimeoutMs: stallMs });
          try {
            const first = await collect(llm.generate(prompt, greedy));
            // Every byte in OPFS before the stall, so that the reload can be
            // checked to fetch none.
            for (;;) {
              const entry = (await SipLLM.cachedModels({ cache: true })).find((m) => m.url === url);
              if (entry !== undefined && entry.cachedBytes === entry.size) break;
              await new Promise((done) => setTimeout(done, 50));
            }
            await llm.testHook(stall);
            const error = await collect(llm.generate(prompt, greedy)).then(() => null, (e: Run['error']) => e);
            const again = await collect(llm.generate(prompt, greedy));
            out.push({
              build: llm.stats().build, first, again, fetchedAgain: llm.stats().source.bytesFetched,
              error: error === null ? { name: 'none', message: '', dump: { pending: [], worker: null, engine: null } }
                : { name: error.name, message: error.message, dump: error.dump },
            });
          } finally {
            await llm.unload();
          }
        }
        return out;
      }, { url, stall, prompt: PROMPT, tokens: TOKENS, stallMs: STALL_MS });

      const expected = nativeGreedy(model, PROMPT, TOKENS);
      expect(runs.map((run) => run.build)).toEqual(['relaxed', 'threaded']);
      for (const run of runs) {
        expect(run.first).toBe(expected);
        expect(run.error.name, run.error.message).toBe('EngineStalledError');
        expect(run.error.message).toContain('made no progress');
        expect(run.error.dump.pending.map((p) => p.type)).toEqual(['generate']);
        if (stall === 'hold-jobs') {
          expect(run.error.dump.worker?.requestType).toBe('generate');
          expect(run.error.dump.engine?.job).toBe('generate');
          expect(run.error.dump.engine?.jobState).toBe('held');
        } else {
          expect(run.error.dump.worker?.request).toBe(0);
          expect(run.error.dump.engine?.jobState).toBe('idle');
        }
        expect(run.error.dump.engine?.poolThreads.length).toBeGreaterThan(0);
        expect(run.again).toBe(expected);
        expect(run.fetchedAgain).toBe(0);
      }
    });
}

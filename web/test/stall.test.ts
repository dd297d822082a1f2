// No request waits forever: a worker that stops moving is noticed, reported
// with what each part of it was doing, stopped, and replaced on the next
// request, with the persistent cache intact. The stalls are injected (a test
// hook holds the engine's job thread, or blocks the worker's own thread for
// good). And two forced interleavings behind stalls the soak caught: a cancel
// that reaches the engine's job before the engine has started it, and events
// of the engine that arrive while the worker's thread waits for a lock.

import { basename } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AbortError, EngineStalledError, SipLLM } from '../dist/index.js';
import { RangeServer, collect, fileSize, generateModel, nativeGreedy, removeDir, serveDir, tempDir } from './support.js';

const MODEL = 'stories260K.gguf';
const PROMPT = 'Once upon a time';
const STALL_MS = 1500;

let server: RangeServer;
let root: string;
let expected: string;

beforeAll(async () => {
  expected = nativeGreedy(MODEL, PROMPT, 20);
  root = serveDir([MODEL]);
  server = await RangeServer.start(root);
});

afterAll(async () => {
  await server?.stop();
  if (root) removeDir(root);
});

async function untilCached(cache: string): Promise<void> {
  for (;;) {
    const [entry] = await SipLLM.cachedModels({ cache });
    if (entry !== undefined && entry.cachedBytes === entry.size) return;
    await new Promise((done) => setTimeout(done, 50));
  }
}

describe('a stalled engine', () => {
  for (const stall of ['hold-jobs', 'block-worker'] as const) {
    const what = stall === 'hold-jobs' ? "the engine's job thread" : "the worker's own thread";
    it(`fails the request with a dump when ${what} stops, then reloads from the cache`, async () => {
      const cache = tempDir('stall-cache');
      const llm = await SipLLM.load(`${server.url}/${MODEL}`, { threads: 2, cache, warmUpMs: 0, stallTimeoutMs: STALL_MS });
      try {
        expect(await collect(llm.generate(PROMPT, { maxTokens: 20, temperature: 0 }))).toBe(expected);
        await untilCached(cache);
        await llm.testHook(stall);
        const error = await collect(llm.generate(PROMPT, { maxTokens: 20, temperature: 0 })).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(EngineStalledError);
        const { dump } = error as EngineStalledError;
        expect(dump.stalledForMs).toBeGreaterThanOrEqual(STALL_MS);
        expect(dump.pending.map((p) => p.type)).toEqual(['generate']);
        expect(dump.worker).not.toBeNull();
        expect(dump.engine).not.toBeNull();
        if (stall === 'hold-jobs') {
          // The worker handed the request to the engine, whose job thread never started it.
          expect(dump.worker!.requestType).toBe('generate');
          expect(dump.engine!.job).toBe('generate');
          expect(dump.engine!.jobState).toBe('held');
          // Every job that ended was seen to end by the worker.
          expect(dump.worker!.jobsSeen).toBe(dump.engine!.jobsDone);
          expect(dump.engine!.jobsDone).toBeGreaterThan(0);
          expect((error as Error).message).toContain("the engine's generate job is held");
        } else {
          // The worker never took the request up (its thread never came
          // back to read the message); the engine is idle.
          expect(dump.worker!.request).toBe(0);
          expect(dump.worker!.queued).toBe(0);
          expect(dump.engine!.jobState).toBe('idle');
        }
        expect(dump.engine!.poolThreads.length).toBe(2);

        // The next request runs in a new worker, on the model read from the
        // cache: every byte of it, none over the network.
        expect(await collect(llm.generate(PROMPT, { maxTokens: 20, temperature: 0 }))).toBe(expected);
        const source = llm.stats().source!;
        expect(source.bytesFetched).toBe(0);
        expect(source.bytesFromCache).toBeGreaterThanOrEqual(fileSize(MODEL));
      } finally {
        await llm.unload();
        removeDir(cache);
      }
    });
  }
});

describe('a cancel that reaches a job before the engine starts it', () => {
  it('stops the job: it computes nothing', async () => {
    const llm = await SipLLM.load(`${server.url}/${MODEL}`, { threads: 2, warmUpMs: 0 });
    try {
      expect(await collect(llm.generate(PROMPT, { maxTokens: 3, temperature: 0 }))).toBe(nativeGreedy(MODEL, PROMPT, 3));
      const before = llm.stats().lastGeneration;
      expect(before?.generatedTokens).toBe(3);
      // The engine's job thread takes no job; the request reaches it and waits.
      await llm.testHook('hold-jobs');
      const controller = new AbortController();
      const stream = llm.generate(PROMPT, { maxTokens: 50, temperature: 0, signal: controller.signal });
      const first = stream.next();
      while (llm.stallDump().engine?.jobState !== 'held') await new Promise((done) => setTimeout(done, 5));
      // Now the cancel, then (a message behind it) the job thread goes on.
      // Before the fix the engine started the request as if no cancel had
      // come, and it generated until the worker saw the cancel again at its
      // first token.
      controller.abort();
      await llm.testHook('release-jobs');
      await expect(first).rejects.toBeInstanceOf(AbortError);
      expect(llm.stats().lastGeneration).toEqual(before);
      // The model goes on as before.
      expect(await collect(llm.generate(PROMPT, { maxTokens: 3, temperature: 0 }))).toBe(nativeGreedy(MODEL, PROMPT, 3));
    } finally {
      await llm.unload();
    }
  });
});

describe('events that arrive while the worker holds a lock of the engine', () => {
  it('are handled after the call that holds it, not inside: a handler that calls the engine does not wait for itself', async () => {
    // The soak's stall: a stream left early; the worker's thread, in the
    // engine's cancel, waited for a lock; Emscripten runs queued calls in
    // such a wait, and ran a token event whose handler called the engine's
    // cancel again, which waited for the lock its own thread held. The
    // worker's thread, and every range request it starts, stopped for good.
    const dir = tempDir('contend');
    const model = generateModel(dir, 'kquant-small', 'Q8_0', 'llama.cpp-vocab/ggml-vocab-llama-spm.gguf');
    const own = await RangeServer.start(dir);
    const llm = await SipLLM.load(`${own.url}/${basename(model)}`, { threads: 2, warmUpMs: 0, stallTimeoutMs: 5000 });
    const maxTokens = 400;
    const stream = llm.generate(PROMPT, { maxTokens, temperature: 0 });
    try {
      expect((await stream.next()).done).toBe(false);  // it runs; its tokens come as events
      // The worker marks the job cancelled in the shared words, as the page
      // does, then holds the engine's lock for 300 ms while token events
      // queue up: each one's handler cancels the job.
      await llm.testHook('contend-engine-lock');
      for await (const piece of stream) void piece;
      const generation = llm.stats().lastGeneration!;
      expect(generation.stopReason).toBe('cancelled');
      expect(generation.generatedTokens).toBeLessThan(maxTokens);
    } finally {
      await stream.return(undefined).catch(() => undefined);  // (holds the model while open)
      await llm.unload();
      await own.stop();
      removeDir(dir);
    }
  });
});

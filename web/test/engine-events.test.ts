// The engine's events reach the worker's handler through Emscripten's queue of
// calls from the engine's threads: a handler that throws must not stop the
// events after it (the queue stays usable), and running the queue by hand
// (the worker's poll) delivers what is waiting and nothing twice.

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

import { loadEngineModule } from '../dist/worker/module-loader.js';
import type { EngineEvent } from '../dist/worker/module-loader.js';
import { modelPath } from './support.js';

const MODEL = 'stories260K.gguf';
const BYTES_ID = 1;

describe('events from the engine threads', () => {
  it('keep coming after a handler threw', async () => {
    const module = await loadEngineModule('threaded', null, 2);
    const bytes = new Uint8Array(readFileSync(modelPath(MODEL)));
    const seen: EngineEvent[] = [];
    let threw = 0;
    let onDone = (): void => {};
    let onClosed = (): void => {};
    module.sipllmRegistry = {
      stores: new Map(),
      bytes: new Map([[BYTES_ID, bytes]]),
      early: null,
      onEvent: (_sessionId, kind) => {
        seen.push(kind);
        if (kind === 'done') onDone();
        if (kind === 'closed') onClosed();
        if (threw === 0) {
          threw += 1;
          throw new Error('a handler that fails');
        }
      },
    };
    const errors: unknown[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => errors.push(args.join(' '));
    const session = new module.Session(7);
    try {
      // The load reports progress, then 'done'; the first event throws.
      const loaded = new Promise<void>((resolve) => { onDone = resolve; });
      expect(session.openBytes(BYTES_ID, bytes.length, MODEL, { threads: 2 }).error).toBeUndefined();
      await loaded;
      expect(session.takeResult().ok).toBe(true);
      expect(threw).toBe(1);
      expect(String(errors[0])).toContain('a handler that fails');

      // A generation after it: its tokens and its end arrive.
      const generated = new Promise<void>((resolve) => { onDone = resolve; });
      const before = seen.length;
      const prompt = Array.from(session.tokenize('Once upon a time', true, false).value ?? []);
      expect(session.generateTokens(prompt, { maxTokens: 4, temperature: 0 }).error).toBeUndefined();
      await generated;
      module.runQueuedCalls();  // nothing waits, nothing comes twice
      expect(seen.slice(before)).toContain('tokens');
      expect(seen.filter((kind) => kind === 'done').length).toBe(2);
      const result = session.takeResult();
      expect(result.ok).toBe(true);
      expect(result.stats?.generatedTokens).toBe(4);
    } finally {
      console.error = consoleError;
      const closed = new Promise<void>((resolve) => { onClosed = resolve; });
      session.close();
      await closed;
      session.delete();
    }
  });
});

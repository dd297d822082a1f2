// The reduced HTTP fault matrix with the Node package (see
// scripts/fault-matrix/lib.mjs; the whole table: node scripts/fault-matrix.mjs).
// Each fault, with the cache on and off, must end in exactly the fault-free
// text or in a NetworkError naming the fault, leave only the file's bytes in
// the cache, and let a fault-free load resume from them.

import { readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

import { SipLLM } from '../dist/index.js';
import {
  CI_FAULTS, bundledModel, checkCache, expectedText, faultName, loadOptions, nodeClient, runCell, startFaultServer,
  tempDir,
} from '../../scripts/fault-matrix/lib.mjs';
import type { FaultServer } from '../../scripts/fault-matrix/lib.mjs';

let server: FaultServer;
let expected: string;
const model = readFileSync(bundledModel);
const client = nodeClient({ SipLLM });

beforeAll(async () => {
  expected = await expectedText();
  server = await startFaultServer();
});

afterAll(async () => {
  await server?.close();
});

describe('the HTTP fault matrix (reduced), Node package', () => {
  for (const fault of CI_FAULTS) {
    for (const cache of [true, false]) {
      it(`${faultName(fault)}, cache ${cache ? 'on' : 'off'}: ${fault.what}`, async () => {
        const row = await runCell({ server, client, fault, cache, expected, model });
        expect(row.problems).toEqual([]);
        if (fault.expect !== 'either') expect(row.outcome).toBe(fault.expect);
      });
    }
  }
});

describe('unloading while ranges are in flight', () => {
  it('does not wait for answers that never come, and keeps only the file\'s bytes', async () => {
    const cache = tempDir('node');
    try {
      server.reset();
      // The header's request gets through; every later answer sends its
      // headers and then nothing, for longer than this test may run.
      server.setFault('stall:skip=1,after=0,hold=600000');
      // The warm-up (the default) runs while the loader fetches the first
      // blocks: their requests are in flight, stalled, when unload() comes.
      const llm = await SipLLM.load(server.url, { ...loadOptions(), warmUpMs: 500, readTimeoutMs: 600_000, cache });
      await vi.waitFor(() => expect(server.stats().log.some((e) => e.fault?.startsWith('stall'))).toBe(true),
                       { timeout: 60_000 });
      // Waiting for the stalled requests would take their read timeout, far
      // past this test's own timeout.
      await llm.unload();
      const files = Object.fromEntries(readdirSync(cache).map((name) => [name, readFileSync(join(cache, name))]));
      const check = checkCache(files, model);
      expect(check.problems).toEqual([]);
      expect(check.kept).toBeGreaterThan(0);
      expect(check.kept).toBeLessThan(model.length);
    } finally {
      server.setFault(null);
      rmSync(cache, { recursive: true, force: true });
    }
  });
});

// The reduced HTTP fault matrix in Chromium (see scripts/fault-matrix/lib.mjs;
// the whole table: node scripts/fault-matrix.mjs). The package runs in a
// minimal cross-origin isolated page of its own (scripts/fault-matrix/page),
// the threaded build, against a range server whose fault each test sets.
// Each fault, with the cache (OPFS) on and off, must end in exactly the
// fault-free text or in a NetworkError naming the fault, leave only the
// file's bytes in OPFS (read back in the page), and let a fault-free load
// resume from them.

import { readFileSync } from 'node:fs';

import { expect, test } from '@playwright/test';

import {
  CI_FAULTS, bundledModel, checkCache, chromiumClient, expectedText, faultName, loadOptions, runCell, startFaultServer,
  startPageServer,
} from '../../scripts/fault-matrix/lib.mjs';
import type { FaultServer } from '../../scripts/fault-matrix/lib.mjs';

let server: FaultServer;
let pages: { url: string; close(): Promise<void> };
let expected: string;
const model = readFileSync(bundledModel);

test.beforeAll(async () => {
  expected = await expectedText();
  server = await startFaultServer();
  pages = await startPageServer();
});

test.afterAll(async () => {
  await server?.close();
  await pages?.close();
});

for (const fault of CI_FAULTS) {
  for (const cache of [true, false]) {
    test(`fault matrix: ${faultName(fault)}, cache ${cache ? 'on' : 'off'}`, async ({ page }) => {
      const client = chromiumClient({ page, pageUrl: pages.url });
      await client.open();
      // The threaded build: fetch() on the engine worker's main thread.
      expect(await page.evaluate(() => globalThis.crossOriginIsolated)).toBe(true);
      const row = await runCell({ server, client, fault, cache, expected, model });
      expect(row.problems).toEqual([]);
      if (fault.expect !== 'either') expect(row.outcome).toBe(fault.expect);
    });
  }
}

test('unloading while ranges are in flight does not wait for them, and OPFS keeps only the file\'s bytes',
     async ({ page }) => {
  const client = chromiumClient({ page, pageUrl: pages.url });
  await client.open();
  const cache = await client.newCache();
  try {
    server.reset();
    // The header's request gets through; every later answer sends its
    // headers and then nothing, for longer than this test may run. The
    // warm-up runs while the loader fetches the first blocks: their
    // requests are in flight, stalled, when the model is unloaded.
    server.setFault('stall:skip=1,after=0,hold=600000');
    const load = { ...loadOptions(), warmUpMs: 500, readTimeoutMs: 600_000 };
    type Page = { openModel(o: unknown): Promise<string>; closeModel(): Promise<void> };
    expect(await page.evaluate((o) => (globalThis as unknown as Page).openModel(o), { url: server.url, cache, load }))
      .toBe('relaxed');
    await expect.poll(() => server.stats().log.some((e) => e.fault?.startsWith('stall') === true)).toBe(true);
    // Waiting for the stalled requests would take their read timeout, far
    // past this test's own timeout.
    await page.evaluate(() => (globalThis as unknown as Page).closeModel());
    const check = checkCache(await client.readCache(cache), model);
    expect(check.problems).toEqual([]);
    expect(check.kept).toBeGreaterThan(0);
  } finally {
    server.setFault(null);
    await client.dropCache(cache);
  }
});

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
  CI_FAULTS, bundledModel, chromiumClient, expectedText, faultName, runCell, startFaultServer, startPageServer,
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

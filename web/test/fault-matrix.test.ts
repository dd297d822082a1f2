// The reduced HTTP fault matrix with the Node package (see
// scripts/fault-matrix/lib.mjs; the whole table: node scripts/fault-matrix.mjs).
// Each fault, with the cache on and off, must end in exactly the fault-free
// text or in a NetworkError naming the fault, leave only the file's bytes in
// the cache, and let a fault-free load resume from them.

import { readFileSync } from 'node:fs';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { SipLLM } from '../dist/index.js';
import {
  CI_FAULTS, bundledModel, expectedText, faultName, nodeClient, runCell, startFaultServer,
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

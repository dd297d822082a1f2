// The range server's faults themselves (scripts/range-server.mjs): how they
// are chosen, that a seed makes them reproducible, and that a bad spec is
// refused with a message naming what is wrong.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { startRangeServer } from '../../scripts/range-server.mjs';
import { bundledModel } from '../../scripts/fault-matrix/lib.mjs';
import { dirname } from 'node:path';

interface Entry { url: string; range: string | null; status: number; bytes: number; fault: string | null }
interface Server {
  url: string;
  stats: { requests: number; bytes: number; log: Entry[] };
  setFault(spec: string | null): void;
  reset(): void;
  close(): Promise<void>;
}

const root = dirname(bundledModel);
let server: Server;

beforeAll(async () => {
  server = await startRangeServer({ root }) as Server;
});

afterAll(async () => {
  await server?.close();
});

// GETs `path` with a Range, reading whatever body arrives; never throws.
async function get(base: string, path: string, range = 'bytes=0-199999'): Promise<{ status: number; bytes: number }> {
  try {
    const response = await fetch(`${base}${path}`, { headers: { Range: range }, redirect: 'manual' });
    let bytes = 0;
    try {
      for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) bytes += chunk.length;
    } catch {
      // cut on purpose
    }
    return { status: response.status, bytes };
  } catch {
    return { status: 0, bytes: 0 };
  }
}

const RANGES = ['bytes=0-199999', 'bytes=200000-399999', 'bytes=400000-599999', 'bytes=600000-799999'];

// The faults the server applied to four ranges asked three times each.
async function faultsFor(base: string, path: string, reset: () => void, log: () => Entry[]): Promise<string[]> {
  reset();
  for (let attempt = 0; attempt < 3; ++attempt) {
    for (const range of RANGES) await get(base, path, range);
  }
  return log().map((e) => `${e.range} ${e.fault ?? '-'}`);
}

describe('range-server faults', () => {
  it('cuts at the same bytes for the same seed, at others for another seed', async () => {
    const log = () => server.stats.log;
    const reset = () => server.reset();
    const first = await faultsFor(server.url, '/fault/drop:p=0.5,seed=7/stories260K.gguf', reset, log);
    const again = await faultsFor(server.url, '/fault/drop:p=0.5,seed=7/stories260K.gguf', reset, log);
    const other = await faultsFor(server.url, '/fault/drop:p=0.5,seed=8/stories260K.gguf', reset, log);
    expect(again).toEqual(first);
    expect(other).not.toEqual(first);
    expect(first.filter((f) => f.includes('drop@')).length).toBeGreaterThan(0);
    expect(first.filter((f) => f.endsWith(' -')).length).toBeGreaterThan(0);
    // The same seed server-wide, on the plain URL: the same cuts.
    server.setFault('drop:p=0.5,seed=7');
    try {
      expect(await faultsFor(server.url, '/stories260K.gguf', reset, log)).toEqual(first);
    } finally {
      server.setFault(null);
    }
  });

  it('hits each range at most `times` times, then lets it through', async () => {
    server.reset();
    const statuses = [];
    for (let attempt = 0; attempt < 4; ++attempt) statuses.push((await get(server.url, '/fault/5xx:times=3/stories260K.gguf')).status);
    expect(statuses).toEqual([500, 502, 503, 206]);
  });

  it('lets the first `skip` requests for a file through', async () => {
    server.reset();
    const statuses = [];
    for (let n = 0; n < 3; ++n) statuses.push((await get(server.url, '/fault/404:skip=2/stories260K.gguf')).status);
    expect(statuses).toEqual([206, 206, 404]);
  });

  it('answers 429 with Retry-After, in seconds or as a date', async () => {
    const seconds = await fetch(`${server.url}/fault/429:after=7/stories260K.gguf`, { headers: { Range: 'bytes=0-9' } });
    expect(seconds.status).toBe(429);
    expect(seconds.headers.get('retry-after')).toBe('7');
    const date = await fetch(`${server.url}/fault/429:after=7,date=1/stories260K.gguf`, { headers: { Range: 'bytes=0-9' } });
    expect(Date.parse(date.headers.get('retry-after') ?? '') - Date.now()).toBeGreaterThan(5000);
  });

  it('replaces the file after the first response: other bytes, another ETag', async () => {
    server.reset();
    const url = `${server.url}/fault/replace/stories260K.gguf`;
    const a = await fetch(url, { headers: { Range: 'bytes=0-3' } });
    const b = await fetch(url, { headers: { Range: 'bytes=0-3' } });
    const [bytesA, bytesB] = [new Uint8Array(await a.arrayBuffer()), new Uint8Array(await b.arrayBuffer())];
    expect(new TextDecoder().decode(bytesA)).toBe('GGUF');
    expect(Array.from(bytesB)).toEqual(Array.from(bytesA, (x) => x ^ 0x5a));
    expect(b.headers.get('etag')).not.toBe(a.headers.get('etag'));
    expect(Date.parse(b.headers.get('last-modified') ?? '')).toBeGreaterThan(Date.parse(a.headers.get('last-modified') ?? ''));
  });

  it('redirects a loop to itself', async () => {
    const response = await get(server.url, '/fault/redirect-loop/stories260K.gguf');
    expect(response.status).toBe(302);
  });

  it('refuses a bad spec, naming what is wrong', async () => {
    for (const [spec, message] of [
      ['nope', "unknown fault 'nope'"],
      ['drop:q=1', "fault 'drop' has no key 'q'"],
      ['drop:p=2', "'p=2' wants a number from 0 to 1"],
      ['stall:after=x', "'after=x' wants a number >= 0"],
    ]) {
      const inUrl = await fetch(`${server.url}/fault/${spec}/stories260K.gguf`);
      expect(inUrl.status).toBe(400);
      expect(await inUrl.text()).toContain(message);
      const serverWide = await fetch(`${server.url}/__fault?spec=${encodeURIComponent(spec)}`, { method: 'POST' });
      expect(serverWide.status).toBe(400);
      expect(await serverWide.text()).toContain(message);
    }
    expect(() => server.setFault('nope')).toThrow(/unknown fault 'nope'/);
  });

  it('sets and clears the server-wide fault at run time; a URL fault wins over it', async () => {
    expect(await (await fetch(`${server.url}/__fault?spec=404`, { method: 'POST' })).json()).toEqual({ fault: '404' });
    expect((await get(server.url, '/stories260K.gguf')).status).toBe(404);
    expect((await get(server.url, '/fault/5xx:times=1/stories260K.gguf')).status).toBe(500);
    expect(await (await fetch(`${server.url}/__fault`, { method: 'POST' })).json()).toEqual({ fault: null });
    expect((await get(server.url, '/stories260K.gguf')).status).toBe(206);
  });
});

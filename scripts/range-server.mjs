#!/usr/bin/env node
// A static file server with real HTTP range support, for tests and benchmarks.
//
//   node scripts/range-server.mjs --root DIR [--port 0] [--host 127.0.0.1]
//        [--mount /PREFIX=DIR ...] [--mbps X] [--latency-ms Y] [--verbose]
//        [--fault SPEC] [--no-isolation] [--exit-on-stdin-close]
//
// Prints {"port":N,"url":"http://HOST:N"} as one line on stdout once it listens.
// With --exit-on-stdin-close it stops when its standard input ends, so that a
// test that spawns it with a pipe cannot leave it running, even if it crashes.
//
// Every file answers GET and HEAD with Accept-Ranges, ETag, Last-Modified and
// Content-Length; a single "Range: bytes=..." gets 206 with Content-Range, an
// unsatisfiable one 416. Responses carry CORS headers (any origin, the range
// headers exposed) and the cross-origin isolation headers (COOP same-origin,
// COEP require-corp, CORP cross-origin), so a page served from here can use
// threads and fetch models from another origin served by another instance.
// --no-isolation leaves out COOP and COEP (CORP stays): a page served so is
// not cross-origin isolated, as on most static hosts.
//
// --mbps X caps the body bytes sent by all connections together at X MB/s
// (MB = 1e6 bytes): one shared link, like a user's downlink. --latency-ms Y
// delays every response's headers by Y ms.
//
// Faults. A SPEC is NAME or NAME:KEY=VALUE,KEY=VALUE,... and applies
//   to every file from the start      --fault SPEC
//   to every file from now on         POST /__fault?spec=SPEC   (no spec: none)
//   to one request                    /fault/SPEC/PATH serves PATH with SPEC
// A fault in the URL wins over the server-wide one; control endpoints and
// CORS preflights are never faulted. Every random choice is a hash of `seed`,
// the file, the Range header and the attempt (how many requests for the same
// file and Range came before in this fault's life), so a run is reproducible
// whatever order parallel requests arrive in.
//
// Common keys: p (chance a request is hit, default 1; for 5xx and 429, the
// chance a range gets a burst at all), times (hits per file and Range at most,
// default unlimited: 2 means the first two attempts of each range are hit and
// the third gets through), seed (default 1); and for every fault, skip (the
// first `skip` requests for the file pass untouched, default 0: skip=1 lets a
// client open the file, then faults what it reads next).
//   drop              the body stops at a random byte (drawn uniformly over
//                     the body) and the connection is reset (TCP RST)
//   short             Content-Length announced, the body stops at a random
//                     byte, the connection is closed cleanly (FIN)
//   5xx               a burst of `times` (default 2) answers 500, 502, 503,
//                     500, ... for each range (p: chance per range)
//   429               a burst of `times` (default 1) answers 429 with
//                     "Retry-After: after" (seconds, default 1; date=1 sends
//                     it as an HTTP date)
//   ignore-range      200 with the whole file, whatever the Range says
//   bad-content-range 206 whose Content-Range is `shift` bytes off (default 1)
//   stall             headers and `after` body bytes (default: a random
//                     number), then nothing, the connection held open until
//                     the client gives up (at most `hold` ms, default 600000)
//   trickle           the first `bytes` of each body (default all) at `rate`
//                     bytes/s (default 10000), sent every 100 ms
//   replace           the file is replaced after `after` requests (default
//                     1): later answers carry a new ETag and Last-Modified and
//                     other bytes (each XOR 0x5a), as a file updated on a CDN
//   redirect-loop     302 to the very same URL, forever
//   redirect          302 to /PATH (as Hugging Face "resolve" URLs do)
//   404               always 404
//   503               always 503 with "Retry-After: 1"
// Older names, kept for the tests that use them:
//   truncated         Content-Length announced, half the body sent, closed
//   drop-once         the first response covering file byte `at` (query
//                     ?at=N, default the middle of the file) stops right
//                     before it and drops the connection; later ones behave
//   500-once          the first request gets 500, later ones behave
//   etag-change       the first response has the file's ETag, later ones another
// Fault state (attempts, "once" faults, replacement) lives as long as the
// fault: POST /__reset and POST /__fault start it afresh.
//
// Control endpoints (not counted):
//   GET  /__stats              {"requests":N,"bytes":N,"log":[{method,url,range,status,bytes,fault,
//                              startMs,firstByteMs,endMs}]} (times: ms since the Unix epoch)
//                              (fault: what was done to the answer, e.g. "drop@1234", or null)
//   GET  /__stats?format=text  "requests N", "bytes N", then one line per request:
//                              METHOD URL RANGE|- STATUS BYTES
//   POST /__reset              zeroes the counters and the log, restarts the faults' state
//   POST /__fault?spec=SPEC    sets the server-wide fault (no spec: clears it);
//                              400 naming what is wrong with a bad SPEC
//
// Also usable in-process: import { startRangeServer } from './range-server.mjs'.
import { createServer } from 'node:http';
import { open, stat } from 'node:fs/promises';
import { resolve, sep, extname } from 'node:path';
import { pathToFileURL } from 'node:url';

const CONTENT_TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
};

// Each fault's keys and their defaults (undefined: no default, see above).
const FAULTS = {
  drop: { p: 1, times: Infinity, seed: 1 },
  short: { p: 1, times: Infinity, seed: 1 },
  '5xx': { p: 1, times: 2, seed: 1 },
  429: { p: 1, times: 1, seed: 1, after: 1, date: 0 },
  'ignore-range': {},
  'bad-content-range': { shift: 1 },
  stall: { p: 1, times: Infinity, seed: 1, after: undefined, hold: 600_000 },
  trickle: { rate: 10_000, bytes: Infinity },
  replace: { after: 1 },
  'redirect-loop': {},
  redirect: {},
  404: {},
  503: {},
  truncated: {},
  'drop-once': {},
  '500-once': {},
  'etag-change': {},
};

// "NAME:k=v,k=v" -> { name, spec, ...params }; throws naming what is wrong.
export function parseFault(spec) {
  const colon = spec.indexOf(':');
  const name = colon < 0 ? spec : spec.slice(0, colon);
  const defaults = FAULTS[name];
  if (defaults === undefined || !Object.hasOwn(FAULTS, name)) {
    throw new Error(`unknown fault '${name}' (known: ${Object.keys(FAULTS).join(', ')})`);
  }
  const fault = { name, spec, skip: 0, ...defaults };
  if (colon >= 0 && colon < spec.length - 1) {
    for (const pair of spec.slice(colon + 1).split(',')) {
      const eq = pair.indexOf('=');
      const key = eq < 0 ? pair : pair.slice(0, eq);
      if (!Object.hasOwn(defaults, key) && key !== 'skip') {
        throw new Error(`fault '${name}' has no key '${key}' (keys: ${[...Object.keys(defaults), 'skip'].join(', ')})`);
      }
      const value = Number(pair.slice(eq + 1));
      if (eq < 0 || !Number.isFinite(value) || value < 0 || (key === 'p' && value > 1)) {
        throw new Error(`fault '${name}': '${pair}' wants a number${key === 'p' ? ' from 0 to 1' : ' >= 0'}`);
      }
      fault[key] = value;
    }
  }
  return fault;
}

// A number in [0, 1) that depends only on its arguments (FNV-1a, then a
// round of mulberry32 to spread the bits).
function chance(...parts) {
  let h = 0x811c9dc5;
  for (const ch of parts.join('|')) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193);
  }
  h = (h + 0x6d2b79f5) | 0;
  h = Math.imul(h ^ (h >>> 15), h | 1);
  h ^= h + Math.imul(h ^ (h >>> 7), h | 61);
  return ((h ^ (h >>> 14)) >>> 0) / 4294967296;
}

// What one fault has done so far: attempts per file and Range, "once"
// faults fired, requests per file (for replace).
class FaultState {
  constructor(fault) {
    this.fault = fault;
    this.attempts = new Map();
    this.hits = new Map();
    this.once = new Set();
    this.served = new Map();
  }

  // Counts this request; returns its attempt number (0 for the first) and
  // how often its file and Range have been hit so far.
  attempt(key) {
    const n = this.attempts.get(key) ?? 0;
    this.attempts.set(key, n + 1);
    return { n, hits: this.hits.get(key) ?? 0 };
  }

  hit(key) {
    this.hits.set(key, (this.hits.get(key) ?? 0) + 1);
  }

  // Requests for `path` before this one.
  serve(path) {
    const n = this.served.get(path) ?? 0;
    this.served.set(path, n + 1);
    return n;
  }
}

// A body goes out in chunks of 64 KiB, or 2 ms of the capped link when that
// is more (at most 256 KiB; 256 KiB uncapped): the server shares the machine
// with the client it measures, and each chunk costs it a file read, a timer
// and a socket write. The link is shared chunk by chunk, so a small answer
// waits at most a chunk per other connection.
const CHUNK_MS = 2;
const MIN_CHUNK_BYTES = 64 * 1024;
const MAX_CHUNK_BYTES = 256 * 1024;

const epochMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// One shared link: each chunk reserves its transmission time after the chunks
// already reserved by every connection, so parallel requests share the cap.
// A timer fires late by a millisecond or so, which at these chunk sizes is as
// long as the chunk itself: the link keeps that time as credit (up to
// BURST_MS) instead of losing it, so the average rate is the cap, as on a
// real link whose sender keeps its window full.
const BURST_MS = 20;

class Link {
  constructor(mbps) {
    this.bytesPerMs = mbps > 0 ? (mbps * 1e6) / 1e3 : 0;
    this.nextFree = 0;
    this.chunkBytes = this.bytesPerMs === 0 ? MAX_CHUNK_BYTES
      : Math.min(MAX_CHUNK_BYTES, Math.max(MIN_CHUNK_BYTES, Math.round(this.bytesPerMs * CHUNK_MS)));
  }

  async transmit(bytes) {
    if (this.bytesPerMs === 0) return;
    const now = performance.now();
    const start = Math.max(now - BURST_MS, this.nextFree);
    this.nextFree = start + bytes / this.bytesPerMs;
    const wait = this.nextFree - now;
    if (wait >= 1) await sleep(wait);
  }
}

// "bytes=a-b", "bytes=a-", "bytes=-n" against a file of `size` bytes.
// Returns null for no (or an ignorable) Range, 'unsatisfiable', or {start, end}.
function parseRange(header, size) {
  if (header === undefined) return null;
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim());
  if (m === null) return null;  // several ranges or another unit: serve the whole file
  const [, first, last] = m;
  if (first === '' && last === '') return null;
  let start;
  let end;
  if (first === '') {
    const suffix = Number(last);
    if (suffix === 0) return 'unsatisfiable';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(first);
    end = last === '' ? size - 1 : Math.min(Number(last), size - 1);
    if (last !== '' && Number(last) < start) return null;
  }
  if (start >= size) return 'unsatisfiable';
  return { start, end };
}

function parseArgs(argv) {
  const options = {
    root: null, port: 0, host: '127.0.0.1', mounts: [], mbps: 0, latencyMs: 0, verbose: false,
    exitOnStdinClose: false, fault: null, isolation: true,
  };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    if (flag === '--root') options.root = value();
    else if (flag === '--port') options.port = Number(value());
    else if (flag === '--host') options.host = value();
    else if (flag === '--mbps') options.mbps = Number(value());
    else if (flag === '--latency-ms') options.latencyMs = Number(value());
    else if (flag === '--verbose') options.verbose = true;
    else if (flag === '--exit-on-stdin-close') options.exitOnStdinClose = true;
    else if (flag === '--fault') options.fault = value();
    else if (flag === '--no-isolation') options.isolation = false;
    else if (flag === '--mount') {
      const spec = value();
      const eq = spec.indexOf('=');
      if (!spec.startsWith('/') || eq < 0) throw new Error(`--mount wants /PREFIX=DIR, got '${spec}'`);
      options.mounts.push({ prefix: spec.slice(0, eq), dir: spec.slice(eq + 1) });
    } else throw new Error(`unknown option '${flag}'`);
  }
  if (options.root === null && options.mounts.length === 0) throw new Error('--root DIR is required');
  if (!Number.isInteger(options.port) || options.port < 0) throw new Error('--port wants an integer');
  if (!(options.mbps >= 0)) throw new Error('--mbps wants a number >= 0');
  if (!(options.latencyMs >= 0)) throw new Error('--latency-ms wants a number >= 0');
  if (options.fault !== null) parseFault(options.fault);  // names what is wrong before listening
  return options;
}

export async function startRangeServer(opts) {
  const options = {
    port: 0, host: '127.0.0.1', mounts: [], mbps: 0, latencyMs: 0, verbose: false, fault: null, isolation: true, ...opts,
  };
  const mounts = options.mounts.map((m) => ({ prefix: m.prefix.replace(/\/+$/, ''), dir: resolve(m.dir) }));
  if (options.root) mounts.push({ prefix: '', dir: resolve(options.root) });
  // Longest prefix first, so /models wins over the root.
  mounts.sort((a, b) => b.prefix.length - a.prefix.length);

  const link = new Link(options.mbps);
  const stats = { requests: 0, bytes: 0, log: [] };
  let serverFault = options.fault ? new FaultState(parseFault(options.fault)) : null;
  const urlFaults = new Map();  // SPEC in a /fault/SPEC/ URL -> its state
  const sockets = new Set();

  // Maps a URL path to a file inside a mount, or null.
  function locate(path) {
    let decoded;
    try {
      decoded = decodeURIComponent(path);
    } catch {
      return null;
    }
    if (decoded.includes('\0')) return null;
    for (const { prefix, dir } of mounts) {
      if (prefix !== '' && decoded !== prefix && !decoded.startsWith(prefix + '/')) continue;
      const file = resolve(dir, '.' + decoded.slice(prefix.length));
      if (file !== dir && !file.startsWith(dir + sep)) return null;
      return file;
    }
    return null;
  }

  function restartFaults() {
    if (serverFault !== null) serverFault = new FaultState(serverFault.fault);
    urlFaults.clear();
  }

  // The server-wide fault from now on (null: none), with a fresh state.
  function setFault(spec) {
    serverFault = spec === null ? null : new FaultState(parseFault(spec));
  }

  function commonHeaders(res) {
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Expose-Headers',
      'Content-Range, Content-Length, Accept-Ranges, ETag, Last-Modified, Retry-After');
    if (options.isolation) {
      res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
      res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
    }
    res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
    // Every request must reach the server, so that tests can count them.
    res.setHeader('Cache-Control', 'no-store');
  }

  // Sends body bytes [start, start + length) of the open file. `plan` may
  // stop it early (stopAt bytes), pace its first bytes (rate bytes/s for
  // rateBytes) and change its bytes (xor). Returns how many were sent.
  async function sendBody(res, handle, start, length, plan, entry) {
    let sent = 0;
    let closed = false;
    let wake = null;  // resolves a wait for 'drain' when the connection closes instead
    res.on('close', () => {
      closed = true;
      if (wake !== null) wake();
    });
    const limit = plan.stopAt ?? length;
    // Paced chunks go every 100 ms.
    const pacedChunk = plan.rate > 0 ? Math.max(1, Math.floor(plan.rate / 10)) : 0;
    while (sent < limit && !closed) {
      const paced = pacedChunk > 0 && sent < plan.rateBytes;
      const n = Math.min(paced ? Math.min(pacedChunk, plan.rateBytes - sent) : link.chunkBytes, limit - sent);
      const chunk = Buffer.allocUnsafe(n);
      const { bytesRead } = await handle.read(chunk, 0, n, start + sent);
      if (bytesRead !== n) throw new Error(`short read of ${entry.url}`);
      if (plan.xor) for (let i = 0; i < n; ++i) chunk[i] ^= plan.xor;
      if (paced) await sleep((n / plan.rate) * 1000);
      await link.transmit(n);
      if (closed) break;
      const more = res.write(chunk);
      if (sent === 0) entry.firstByteMs = epochMs();
      sent += n;
      entry.bytes += n;
      stats.bytes += n;
      if (!more && !closed) {
        await new Promise((done) => {
          wake = done;
          res.once('drain', done);
        });
        wake = null;
      }
    }
    if (sent < length && plan.holdMs > 0 && !closed) {
      // A stall: nothing more, until the client hangs up (or the hold ends).
      await new Promise((done) => {
        const timer = setTimeout(done, plan.holdMs);
        res.once('close', () => {
          clearTimeout(timer);
          done();
        });
      });
    }
    return sent;
  }

  // The fault state for this request: the URL's own fault, or the server's.
  function faultFor(path) {
    const inUrl = /^\/fault\/([^/]+)(\/.*)$/.exec(path);
    if (inUrl === null) return { state: serverFault, path };
    const spec = decodeURIComponent(inUrl[1]);
    let state = urlFaults.get(spec);
    if (state === undefined) {
      state = new FaultState(parseFault(spec));  // throws for a bad spec
      urlFaults.set(spec, state);
    }
    return { state, path: inUrl[2] };
  }

  async function serveFile(req, res, url, entry) {
    let located;
    try {
      located = faultFor(url.pathname);
    } catch (error) {
      res.statusCode = 400;
      res.end(`${error.message}\n`);
      return;
    }
    const { state, path } = located;
    // Requests for this file before this one, in this fault's life.
    const nth = state !== null ? state.serve(path) : 0;
    const fault = state !== null && nth >= state.fault.skip ? state.fault : { name: null };
    const mode = fault.name;
    const onceKey = `${url.pathname}${url.search}`;
    const firstTime = state !== null && !state.once.has(onceKey);
    // One request's identity for the random choices and the per-range counts.
    const key = `${path} ${req.headers.range ?? '-'}`;
    const { n: attempt, hits } = state !== null ? state.attempt(key) : { n: 0, hits: 0 };
    const roll = (what) => chance(fault.seed, key, attempt, what);
    // Whether this request is hit: p per request, at most `times` per range.
    const struck = () => hits < fault.times && roll('p') < fault.p;
    // Bursts: p per range, then the first `times` attempts.
    const inBurst = () => attempt < fault.times && chance(fault.seed, key, 'burst') < fault.p;
    const mark = (what) => {
      entry.fault = what;
      state.hit(key);
    };

    if (mode === '404') {
      entry.fault = '404';
      res.statusCode = 404;
      res.end('not found\n');
      return;
    }
    if (mode === '503') {
      entry.fault = '503';
      res.statusCode = 503;
      res.setHeader('Retry-After', '1');
      res.end('unavailable\n');
      return;
    }
    if (mode === '500-once' && firstTime) {
      state.once.add(onceKey);
      entry.fault = '500';
      res.statusCode = 500;
      res.end('internal error\n');
      return;
    }
    if (mode === '5xx' && inBurst()) {
      const status = [500, 502, 503][attempt % 3];
      mark(String(status));
      res.statusCode = status;
      res.end(`error ${status}\n`);
      return;
    }
    if (mode === '429' && inBurst()) {
      mark('429');
      res.statusCode = 429;
      res.setHeader('Retry-After', fault.date
        ? new Date(Date.now() + fault.after * 1000).toUTCString()
        : String(fault.after));
      res.end('too many requests\n');
      return;
    }
    if (mode === 'redirect') {
      res.statusCode = 302;
      res.setHeader('Location', path + url.search);
      res.end();
      return;
    }
    if (mode === 'redirect-loop') {
      entry.fault = 'redirect-loop';
      res.statusCode = 302;
      res.setHeader('Location', url.pathname + url.search);
      res.end();
      return;
    }

    let file = locate(path);
    let info = null;
    if (file !== null) {
      info = await stat(file).catch(() => null);
      if (info !== null && info.isDirectory()) {
        file = resolve(file, 'index.html');
        info = await stat(file).catch(() => null);
      }
    }
    if (info === null || !info.isFile()) {
      res.statusCode = 404;
      res.end('not found\n');
      return;
    }

    const size = info.size;
    let etag = `"${size.toString(16)}-${Math.floor(info.mtimeMs).toString(16)}"`;
    let modified = info.mtime;
    let xor = 0;
    if (mode === 'etag-change') {
      if (!firstTime) etag = `"changed-${etag.slice(1)}`;
      state.once.add(onceKey);
    }
    if (mode === 'replace' && nth >= fault.after) {
      // The new version: other bytes, another ETag, an hour newer.
      etag = `"${etag.slice(1, -1)}-replaced"`;
      modified = new Date(info.mtimeMs + 3600_000);
      xor = 0x5a;
      entry.fault = 'replaced';
    }
    res.setHeader('Accept-Ranges', 'bytes');
    res.setHeader('ETag', etag);
    res.setHeader('Last-Modified', modified.toUTCString());
    res.setHeader('Content-Type', CONTENT_TYPES[extname(file)] ?? 'application/octet-stream');

    const range = mode === 'ignore-range' ? null : parseRange(req.headers.range, size);
    if (mode === 'ignore-range' && req.headers.range !== undefined) entry.fault = 'ignore-range';
    if (range === 'unsatisfiable') {
      res.statusCode = 416;
      res.setHeader('Content-Range', `bytes */${size}`);
      res.end();
      return;
    }
    let start = 0;
    let length = size;
    if (range !== null) {
      start = range.start;
      length = range.end - range.start + 1;
      res.statusCode = 206;
      const shift = mode === 'bad-content-range' ? fault.shift : 0;
      if (shift !== 0) entry.fault = `content-range+${shift}`;
      res.setHeader('Content-Range', `bytes ${start + shift}-${range.end + shift}/${size}`);
    } else {
      res.statusCode = 200;
    }
    res.setHeader('Content-Length', String(length));
    if (req.method === 'HEAD') {
      res.end();
      return;
    }

    // How the body goes: where it stops short (relative to its start), and
    // what happens to the connection then.
    const plan = { stopAt: null, ending: 'reset', holdMs: 0, rate: 0, rateBytes: 0, xor };
    if (mode === 'truncated') {
      plan.stopAt = Math.floor(length / 2);
      plan.ending = 'close';
    }
    if (mode === 'drop-once' && firstTime) {
      const at = url.searchParams.has('at') ? Number(url.searchParams.get('at')) : Math.floor(size / 2);
      if (at >= start && at < start + length) {
        state.once.add(onceKey);
        plan.stopAt = at - start;
        mark(`drop@${at}`);
      }
    }
    if ((mode === 'drop' || mode === 'short') && struck()) {
      plan.stopAt = Math.floor(roll('at') * length);
      plan.ending = mode === 'drop' ? 'reset' : 'close';
      mark(`${mode}@${start + plan.stopAt}`);
    }
    if (mode === 'stall' && struck()) {
      plan.stopAt = Math.min(length - 1, fault.after ?? Math.floor(roll('at') * length));
      plan.holdMs = fault.hold;
      mark(`stall@${start + plan.stopAt}`);
    }
    if (mode === 'trickle') {
      plan.rate = fault.rate;
      plan.rateBytes = fault.bytes;
      entry.fault = `trickle ${fault.rate} B/s`;
    }

    const handle = await open(file, 'r');
    try {
      res.flushHeaders();
      const sent = await sendBody(res, handle, start, length, plan, entry);
      if (sent < length) {
        // The body ends before its Content-Length: a clean close, or a reset.
        if (plan.ending === 'close') res.socket?.end();
        else if (res.socket?.resetAndDestroy !== undefined) res.socket.resetAndDestroy();
        else res.destroy();
        return;
      }
      res.end();
    } finally {
      await handle.close();
    }
  }

  async function handle(req, res) {
    const url = new URL(req.url, 'http://localhost');
    commonHeaders(res);
    if (url.pathname === '/__stats') {
      res.setHeader('Content-Type', url.searchParams.get('format') === 'text' ? 'text/plain' : 'application/json');
      if (url.searchParams.get('format') === 'text') {
        const lines = [`requests ${stats.requests}`, `bytes ${stats.bytes}`];
        for (const e of stats.log) lines.push(`${e.method} ${e.url} ${e.range ?? '-'} ${e.status} ${e.bytes}`);
        res.end(lines.join('\n') + '\n');
      } else {
        res.end(JSON.stringify(stats));
      }
      return;
    }
    if (url.pathname === '/__reset') {
      if (req.method !== 'POST') {
        res.statusCode = 405;
        res.end('POST only\n');
        return;
      }
      stats.requests = 0;
      stats.bytes = 0;
      stats.log = [];
      restartFaults();
      res.end('{}');
      return;
    }
    if (url.pathname === '/__fault') {
      if (req.method !== 'POST') {
        res.statusCode = 405;
        res.end('POST only\n');
        return;
      }
      try {
        setFault(url.searchParams.get('spec') || null);
      } catch (error) {
        res.statusCode = 400;
        res.end(`${error.message}\n`);
        return;
      }
      res.end(JSON.stringify({ fault: serverFault?.fault.spec ?? null }));
      return;
    }
    if (req.method === 'OPTIONS') {
      res.statusCode = 204;
      res.setHeader('Access-Control-Allow-Methods', 'GET, HEAD, OPTIONS');
      res.setHeader('Access-Control-Allow-Headers', 'Range, Content-Type');
      res.setHeader('Access-Control-Max-Age', '600');
      res.end();
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.statusCode = 405;
      res.end('method not allowed\n');
      return;
    }
    // Times in ms since the Unix epoch (performance.timeOrigin-based, so a
    // page's performance.timeOrigin + performance.now() lines up with them):
    // the request arrived, its first body bytes were written, it ended.
    const entry = {
      method: req.method, url: req.url, range: req.headers.range ?? null, status: 0, bytes: 0, fault: null,
      startMs: epochMs(), firstByteMs: null, endMs: null,
    };
    stats.requests += 1;
    stats.log.push(entry);
    if (options.latencyMs > 0) await sleep(options.latencyMs);
    try {
      await serveFile(req, res, url, entry);
    } catch (error) {
      if (!res.headersSent) {
        res.statusCode = 500;
        res.end(`${error.message}\n`);
      } else {
        res.destroy();
      }
    }
    entry.status = res.statusCode;
    entry.endMs = epochMs();
    if (options.verbose) {
      process.stderr.write(`${entry.method} ${entry.url} ${entry.range ?? '-'} ${entry.status} ${entry.bytes}` +
                           `${entry.fault ? ` ${entry.fault}` : ''}\n`);
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((error) => {
      process.stderr.write(`range-server: ${error.stack}\n`);
      res.destroy();
    });
  });
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise((done, fail) => {
    server.once('error', fail);
    server.listen(options.port, options.host, done);
  });
  const { port } = server.address();
  return {
    port,
    url: `http://${options.host}:${port}`,
    stats,
    setFault,
    reset: () => {
      stats.requests = 0;
      stats.bytes = 0;
      stats.log = [];
      restartFaults();
    },
    close: () => new Promise((done) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => done());
    }),
  };
}

async function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`range-server: ${error.message}\n`);
    process.exit(2);
  }
  const server = await startRangeServer(options);
  process.stdout.write(JSON.stringify({ port: server.port, url: server.url }) + '\n');
  const stop = () => server.close().then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (options.exitOnStdinClose) {
    process.stdin.on('end', stop);
    process.stdin.on('error', stop);
    process.stdin.resume();
  }
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  main().catch((error) => {
    process.stderr.write(`range-server: ${error.stack}\n`);
    process.exit(1);
  });
}

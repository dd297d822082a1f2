#!/usr/bin/env node
// A static file server with real HTTP range support, for tests and benchmarks.
//
//   node scripts/range-server.mjs --root DIR [--port 0] [--host 127.0.0.1]
//        [--mount /PREFIX=DIR ...] [--mbps X] [--latency-ms Y] [--verbose]
//        [--exit-on-stdin-close]
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
//
// --mbps X caps the body bytes sent by all connections together at X MB/s
// (MB = 1e6 bytes): one shared link, like a user's downlink. --latency-ms Y
// delays every response's headers by Y ms.
//
// Faults, chosen by the URL: /fault/MODE/PATH serves PATH with MODE applied.
//   404               always 404
//   ignore-range      200 with the whole file, whatever the Range says
//   truncated         declares the full Content-Length, sends half, closes
//   drop-once         the first response covering file byte `at` (query
//                     ?at=N, default the middle of the file) stops right
//                     before it and drops the connection; later ones behave
//   500-once          the first request gets 500, later ones behave
//   503               always 503
//   redirect          302 to /PATH (as Hugging Face "resolve" URLs do)
//   bad-content-range 206 whose Content-Range is off by one byte
//   etag-change       the first response has the file's ETag, later ones another
// "Once" state is per URL (path and query) and cleared by POST /__reset.
//
// Control endpoints (not counted):
//   GET  /__stats              {"requests":N,"bytes":N,"log":[{method,url,range,status,bytes}]}
//   GET  /__stats?format=text  "requests N", "bytes N", then one line per request:
//                              METHOD URL RANGE|- STATUS BYTES
//   POST /__reset              zeroes the counters and the log, forgets "once" faults
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

const FAULT_MODES = new Set([
  '404', 'ignore-range', 'truncated', 'drop-once', '500-once', '503', 'redirect',
  'bad-content-range', 'etag-change',
]);

const CHUNK_BYTES = 64 * 1024;

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

// One shared link: each chunk reserves its transmission time after the chunks
// already reserved by every connection, so parallel requests share the cap.
class Link {
  constructor(mbps) {
    this.bytesPerMs = mbps > 0 ? (mbps * 1e6) / 1e3 : 0;
    this.nextFree = 0;
  }

  async transmit(bytes) {
    if (this.bytesPerMs === 0) return;
    const now = performance.now();
    const start = Math.max(now, this.nextFree);
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
    exitOnStdinClose: false,
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
  return options;
}

export async function startRangeServer(opts) {
  const options = { port: 0, host: '127.0.0.1', mounts: [], mbps: 0, latencyMs: 0, verbose: false, ...opts };
  const mounts = options.mounts.map((m) => ({ prefix: m.prefix.replace(/\/+$/, ''), dir: resolve(m.dir) }));
  if (options.root) mounts.push({ prefix: '', dir: resolve(options.root) });
  // Longest prefix first, so /models wins over the root.
  mounts.sort((a, b) => b.prefix.length - a.prefix.length);

  const link = new Link(options.mbps);
  const stats = { requests: 0, bytes: 0, log: [] };
  const onceDone = new Set();  // "mode url" of once-faults that already fired
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

  function commonHeaders(res) {
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Expose-Headers',
      'Content-Range, Content-Length, Accept-Ranges, ETag, Last-Modified');
    res.setHeader('Cross-Origin-Opener-Policy', 'same-origin');
    res.setHeader('Cross-Origin-Embedder-Policy', 'require-corp');
    res.setHeader('Cross-Origin-Resource-Policy', 'cross-origin');
    // Every request must reach the server, so that tests can count them.
    res.setHeader('Cache-Control', 'no-store');
  }

  async function sendBody(res, handle, start, length, stopAt, entry) {
    let sent = 0;
    let closed = false;
    let wake = null;  // resolves a wait for 'drain' when the connection closes instead
    res.on('close', () => {
      closed = true;
      if (wake !== null) wake();
    });
    const limit = stopAt === null ? length : stopAt;
    while (sent < limit && !closed) {
      const n = Math.min(CHUNK_BYTES, limit - sent);
      const chunk = Buffer.allocUnsafe(n);
      const { bytesRead } = await handle.read(chunk, 0, n, start + sent);
      if (bytesRead !== n) throw new Error(`short read of ${entry.url}`);
      await link.transmit(n);
      if (closed) break;
      const more = res.write(chunk);
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
    return sent;
  }

  async function serveFile(req, res, url, entry) {
    let path = url.pathname;
    let mode = null;
    const fault = /^\/fault\/([^/]+)(\/.*)$/.exec(path);
    if (fault !== null) {
      if (!FAULT_MODES.has(fault[1])) {
        res.statusCode = 400;
        res.end(`unknown fault mode '${fault[1]}'\n`);
        return;
      }
      mode = fault[1];
      path = fault[2];
    }
    const onceKey = `${mode} ${url.pathname}${url.search}`;
    const firstTime = !onceDone.has(onceKey);

    if (mode === '404') {
      res.statusCode = 404;
      res.end('not found\n');
      return;
    }
    if (mode === '503') {
      res.statusCode = 503;
      res.setHeader('Retry-After', '1');
      res.end('unavailable\n');
      return;
    }
    if (mode === '500-once' && firstTime) {
      onceDone.add(onceKey);
      res.statusCode = 500;
      res.end('internal error\n');
      return;
    }
    if (mode === 'redirect') {
      res.statusCode = 302;
      res.setHeader('Location', path + url.search);
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
    if (mode === 'etag-change') {
      if (!firstTime) etag = `"changed-${etag.slice(1)}`;
      onceDone.add(onceKey);
    }
    res.setHeader('Accept-Ranges', 'bytes');
    res.setHeader('ETag', etag);
    res.setHeader('Last-Modified', info.mtime.toUTCString());
    res.setHeader('Content-Type', CONTENT_TYPES[extname(file)] ?? 'application/octet-stream');

    let range = mode === 'ignore-range' ? null : parseRange(req.headers.range, size);
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
      const shift = mode === 'bad-content-range' ? 1 : 0;
      res.setHeader('Content-Range', `bytes ${start + shift}-${range.end + shift}/${size}`);
    } else {
      res.statusCode = 200;
    }
    res.setHeader('Content-Length', String(length));
    if (req.method === 'HEAD') {
      res.end();
      return;
    }

    // Where the body stops short (relative to its start), for the faults that cut it.
    let stopAt = null;
    if (mode === 'truncated') stopAt = Math.floor(length / 2);
    if (mode === 'drop-once' && firstTime) {
      const at = url.searchParams.has('at') ? Number(url.searchParams.get('at')) : Math.floor(size / 2);
      if (at >= start && at < start + length) {
        onceDone.add(onceKey);
        stopAt = at - start;
      }
    }

    const handle = await open(file, 'r');
    try {
      res.flushHeaders();
      const sent = await sendBody(res, handle, start, length, stopAt, entry);
      if (sent < length) {
        // The body ends before its Content-Length. "truncated" closes the
        // connection cleanly after what it sent; "drop-once" resets it.
        if (mode === 'truncated') res.socket?.end();
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
      onceDone.clear();
      res.end('{}');
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
    const entry = { method: req.method, url: req.url, range: req.headers.range ?? null, status: 0, bytes: 0 };
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
    if (options.verbose) {
      process.stderr.write(`${entry.method} ${entry.url} ${entry.range ?? '-'} ${entry.status} ${entry.bytes}\n`);
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

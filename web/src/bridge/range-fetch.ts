// One range GET and where its body goes: the engine's requests (into the
// WebAssembly heap, behind a call record of js_host.cpp) and the caller's
// early pieces (bridge/early-pieces.ts). Both run on a RangeFetcher: in a
// browser, on short-lived workers (bridge/range-fetch-worker.ts); elsewhere
// on the thread that asks.

import {
  ARRIVED, ARRIVING, CONTENT_RANGE, DISPOSED, STATUS,
} from './early-pieces.js';
import type { EarlyFile } from './early-pieces.js';

// A range answer as host.js hands it to the engine (record()).
export interface RangeAnswer {
  status: number;
  bodyBytes: number;
  contentRange?: string;
  etag?: string;
  lastModified?: string;
  retryAfter?: string;
  failure?: string;
  error?: string;
}

// What a response says before its body.
export interface RangeHead {
  status: number;
  contentRange: string;
  etag: string;
  lastModified: string;
}

// Takes a piece of a body at `at` (its place in the body); false: stop.
export type Sink = (chunk: Uint8Array, at: number) => boolean;

// One range GET with fetch(), its body streamed into a sink.
//
// sink(chunk, at) receives the pieces of a 200 or 206 body that fall within
// `length`, in order, and returns false to stop the transfer. onBytes(),
// when given, is called whenever bytes arrive; accept(head), when given,
// decides before the body is read whether it is wanted at all. Resolves with
// what the C++ side reads: `failure` is 'stalled' when nothing arrived for
// timeoutMs (the read timeout: a transfer that keeps moving is never cut,
// however slow), 'redirects' when the redirect limit was hit.
// Self-contained (no names from around it), so that Node's fetcher thread
// (host.js) can run the same function from its source.
export async function fetchRange(url: string, offset: number, length: number, timeoutMs: number, sink: Sink,
                                 onBytes?: () => void, accept?: (head: RangeHead) => boolean): Promise<RangeAnswer> {
  function describe(e: unknown): string {
    if (!e) return 'unknown error';
    const error = e as { message?: string; cause?: { code?: string; message?: string } };
    let text = error.message || String(e);
    if (error.cause) text += ' (' + (error.cause.code || error.cause.message || String(error.cause)) + ')';
    return text;
  }
  const inNode = typeof process === 'object' && process !== null && typeof process.versions === 'object';
  const range = 'bytes=' + offset + '-' + (offset + length - 1);
  const controller = new AbortController();
  let stalled = false;
  let timer: ReturnType<typeof setTimeout> | null = null;
  // (Re)starts the read timeout: called whenever something arrives.
  const arm = () => {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(() => {
      stalled = true;
      controller.abort(new Error('no bytes for ' + timeoutMs + ' ms'));
    }, timeoutMs);
  };
  const out: Required<RangeAnswer> = {
    status: 0, bodyBytes: 0, contentRange: '', etag: '', lastModified: '', retryAfter: '', failure: '', error: '',
  };
  arm();
  try {
    let response: Response;
    try {
      // no-store: the engine keeps its own cache; the browser's would write
      // a second copy of every range to disk, and it makes requests for one
      // URL wait on each other (Chromium's cache lock), which serialises
      // small ones such as a prompt's embedding rows.
      response = await fetch(url, { headers: { Range: range }, redirect: 'follow', cache: 'no-store',
                                    signal: controller.signal });
    } catch (e) {
      if (stalled) {
        out.failure = 'stalled';
        out.error = 'no answer for ' + timeoutMs + ' ms';
        return out;
      }
      const c = (e as { cause?: { message?: string; code?: string } } | null)?.cause;
      const cause = c ? String(c.message || c.code || c) : '';
      if (/redirect count exceeded|too many redirects/i.test(cause)) {
        out.failure = 'redirects';
        out.error = 'request failed: ' + describe(e);
        return out;
      }
      if (inNode) {
        out.error = 'request failed: ' + describe(e);
        return out;
      }
      // A browser does not say why a request failed: a refused connection,
      // a CORS refusal and a redirect loop look alike. Asked once more
      // without following redirects, the server tells whether one was involved.
      out.error = 'request failed: ' + describe(e) + ' (a network error, or a CORS refusal)';
      const probe = new AbortController();
      const probeTimer = setTimeout(() => probe.abort(), timeoutMs);
      const hop = await fetch(url, { headers: { Range: range }, redirect: 'manual', signal: probe.signal })
        .catch(() => null);
      clearTimeout(probeTimer);
      if (hop !== null && hop.type === 'opaqueredirect') {
        out.error = 'request failed after a redirect: ' + describe(e) + ' (too many redirects, as in a ' +
                    'redirect loop, or a redirect target that cannot be reached or refused CORS)';
      }
      return out;
    }
    arm();
    out.status = response.status;
    out.contentRange = response.headers.get('content-range') || '';
    out.etag = response.headers.get('etag') || '';
    out.lastModified = response.headers.get('last-modified') || '';
    out.retryAfter = response.headers.get('retry-after') || '';
    const declared = response.headers.get('content-length');
    const body = response.body;
    if ((response.status !== 200 && response.status !== 206) || !body ||
        (accept && !accept({ status: out.status, contentRange: out.contentRange, etag: out.etag,
                             lastModified: out.lastModified }))) {
      if (body) await body.cancel().catch(() => {});
      return out;
    }
    // A byte stream is read into a buffer of our own ("bring your own
    // buffer"): Chromium then hands over up to 1 MiB a read instead of a
    // chunk of 64 KiB or less, and a range costs the renderer a few reads.
    // Measured on a 2-core machine, 8 MiB ranges three at a time from
    // localhost: 114-124 MB/s against 83-100 with the default reader; a cold
    // load of the qwen3.5-0.8b shape (512 MB), five runs each: first token
    // after 9.9-10.8 s instead of 10.4-13.0.
    let byob: ReadableStreamBYOBReader | null = null;
    try {
      byob = body.getReader({ mode: 'byob' });
    } catch {
      byob = null;  // not a byte stream: read as it comes
    }
    const reader = byob ?? body.getReader();
    let buffer = new ArrayBuffer(byob !== null ? 1 << 20 : 0);
    let received = 0;
    try {
      for (;;) {
        const step = byob !== null ? await byob.read(new Uint8Array(buffer))
          : await (reader as ReadableStreamDefaultReader<Uint8Array>).read();
        if (step.done || step.value === undefined) break;
        const chunk = step.value;
        if (byob !== null) buffer = chunk.buffer as ArrayBuffer;  // the same memory, handed back for the next read
        arm();
        if (onBytes) onBytes();
        const n = Math.min(chunk.length, length - received);
        if (n > 0 && !sink(chunk.subarray(0, n), received)) {
          await reader.cancel().catch(() => {});
          out.bodyBytes = received;
          out.error = 'the request was given up by the thread that made it';
          return out;
        }
        received += chunk.length;
        if (received > length) {
          // Longer than asked (a server that ignored Range): stop reading.
          await reader.cancel().catch(() => {});
          out.bodyBytes = declared !== null ? Number(declared) : received;
          return out;
        }
      }
      out.bodyBytes = received;
    } catch (e) {
      out.bodyBytes = received;
      if (stalled) out.failure = 'stalled';
      out.error = (stalled ? 'no bytes for ' + timeoutMs + ' ms, the transfer stopped' : 'the connection closed') +
                  ' after ' + received + ' of ' + (declared !== null ? declared : 'an unknown number of') +
                  ' body bytes: ' + describe(e);
    }
    return out;
  } finally {
    if (timer !== null) clearTimeout(timer);
  }
}

// ---- Where a body goes ----------------------------------------------------------

// The engine's request (js_host.cpp): the calling thread allocated a call
// record (an int32 state, a uint32 for the answer, an int32 counting
// arrivals, then the URL) and waits on the state with Atomics.wait; the body
// is copied chunk by chunk straight to `dst` in the heap. The state word
// hands the destination over safely: a chunk is copied only while the state
// is RUNNING (WRITING marks a copy in progress); a caller that gave up
// (ABANDONED) owns nothing any more. The arrival count tells the caller that
// a slow transfer is still moving.
export interface HeapTarget {
  kind: 'heap';
  memory: WebAssembly.Memory;
  call: number;
  dst: number;
}
// The state word's values (host.js has the same): RUNNING, WRITING here;
// DONE (1) and ABANDONED (2) are set by host.js and by the caller.
const CALL_RUNNING = 0;
const CALL_WRITING = 3;

// A piece of the caller's early fetch: its bytes arrive at the start of
// `bytes`, and are accepted only as a 206 for exactly the range asked, of
// the file `validators` describe (the first answer's, not known yet for the
// first piece).
export interface PieceTarget {
  kind: 'piece';
  bytes: SharedArrayBuffer;
  state: SharedArrayBuffer;    // Int32Array of PIECE_WORDS
  control: SharedArrayBuffer;  // EarlyFetch.control
  validators: EarlyFile | null;
}

export type RangeTarget = HeapTarget | PieceTarget;

export interface TargetSink {
  sink: Sink;
  onBytes?: () => void;
  accept?: (head: RangeHead) => boolean;
}

export function sinkFor(target: RangeTarget, offset: number, length: number): TargetSink {
  if (target.kind === 'heap') {
    const { memory, call, dst } = target;
    const state = call >>> 2;
    return {
      sink: (chunk, at) => {
        const words = new Int32Array(memory.buffer);  // a fresh view: another thread may have grown the memory
        if (Atomics.compareExchange(words, state, CALL_RUNNING, CALL_WRITING) !== CALL_RUNNING) return false;
        new Uint8Array(memory.buffer, dst + at, chunk.length).set(chunk);
        Atomics.store(words, state, CALL_RUNNING);
        return true;
      },
      onBytes: () => { Atomics.add(new Int32Array(memory.buffer), (call + 8) >>> 2, 1); },
    };
  }
  const bytes = new Uint8Array(target.bytes);
  const state = new Int32Array(target.state);
  const control = new Int32Array(target.control);
  return {
    // Given up by the worker (stalled, or nothing wanted any more): stop.
    sink: (chunk, at) => {
      if (Atomics.load(state, STATUS) !== ARRIVING || Atomics.load(control, DISPOSED) === 1) return false;
      bytes.set(chunk, at);
      Atomics.store(state, ARRIVED, at + chunk.length);
      return true;
    },
    accept: (head) => pieceAnswerFits(head, offset, length, target.validators) !== null,
  };
}

// The range's bytes to `target`; onHead receives the response's head
// before its body, once the target has accepted it. Never throws.
export async function fetchTo(url: string, offset: number, length: number, timeoutMs: number, target: RangeTarget,
                              onHead?: (head: RangeHead) => void): Promise<RangeAnswer> {
  const { sink, onBytes, accept } = sinkFor(target, offset, length);
  try {
    return await fetchRange(url, offset, length, timeoutMs, sink, onBytes, (head) => {
      const ok = accept === undefined || accept(head);
      if (ok) onHead?.(head);
      return ok;
    });
  } catch (error) {
    return { status: 0, bodyBytes: 0, error: 'request failed: ' + ((error as Error)?.message ?? String(error)) };
  }
}

// The file a piece's answer describes when it is a 206 for exactly the
// range asked (up to the file's end), of the file `validators` describe
// (any file for the first piece, at offset 0); else null.
export function pieceAnswerFits(head: RangeHead, offset: number, length: number,
                                validators: EarlyFile | null): EarlyFile | null {
  const range = CONTENT_RANGE.exec(head.contentRange);
  if (head.status !== 206 || range === null) return null;
  const seen: EarlyFile = { type: 'early-file', total: Number(range[3]), etag: head.etag, lastModified: head.lastModified };
  const last = Math.min(offset + length, seen.total) - 1;
  if (Number(range[1]) !== offset || Number(range[2]) !== last) return null;
  if (validators === null) return offset === 0 ? seen : null;
  const same = seen.total === validators.total && seen.etag === validators.etag &&
               seen.lastModified === validators.lastModified;
  return same ? seen : null;
}

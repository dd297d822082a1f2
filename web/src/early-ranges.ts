// The first bytes of a model, fetched by the engine worker before its
// WebAssembly module is ready: the GGUF header, then the transformer blocks
// in file order. Compiling the module and starting its threads takes about
// half a second; without this the link idles through it, and every byte,
// the first token's last one included, arrives that much later.
//
// The engine knows nothing of it. Its range requests reach host.js
// (startRange), which asks serve() first: a request whose first byte lies in
// a piece fetched (or still arriving) here is answered from it as its bytes
// arrive, and any part past the pieces is fetched then. From the first
// request that starts past the pieces, the engine leads and no new piece is
// fetched here. Anything unexpected (a status other than 206, another file
// size or validator, a failed or stalled piece) drops the piece and ends the
// fetching ahead: the engine's own requests meet the server as it is.
//
// With a persistent cache, only while it holds no model (see worker.ts).

import { blockSpan, NeedMoreBytes, readGgufLayout } from './gguf-layout.js';

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

// Takes a piece of a body at `at` (its place in the body); false: stop.
export type Sink = (chunk: Uint8Array, at: number) => boolean;
export type FetchRange = (url: string, offset: number, length: number, timeoutMs: number, sink: Sink,
                          onBytes: () => void) => Promise<RangeAnswer>;

// The engine's own first request is this long (http_source.cpp,
// kFirstRangeBytes); the header grows by doubling past it, as there.
const FIRST_RANGE_BYTES = 1 << 20;
const MAX_HEADER_BYTES = 64 << 20;
// Two requests in flight keep the link busy across each one's round trip;
// 4 MiB each keeps the browser's cost per request small (see kMinPieceBytes).
const PIECE_BYTES = 4 << 20;
const IN_FLIGHT = 2;
// Fetched and not yet taken by the engine: at most this much (the engine
// takes the blocks from the load on, so at most about what arrives while
// its module starts).
const MAX_HELD_BYTES = 64 << 20;

interface Piece {
  offset: number;
  length: number;
  bytes: Uint8Array | null;  // null once taken whole, or dropped
  arrived: number;           // bytes [0, arrived) are in
  failed: boolean;
  done: boolean;
  taken: number;             // bytes handed to the engine
  controller: AbortController;
  wake: Array<() => void>;   // waiting for more bytes
}

interface Validators {
  total: number;
  etag: string;
  lastModified: string;
}

const CONTENT_RANGE = /^bytes (\d+)-(\d+)\/(\d+)$/;

export class EarlyRanges {
  private readonly pieces: Piece[] = [];  // by offset, not overlapping
  private validators: Validators | null = null;
  private next = 0;        // where the next block piece starts
  private engineEnd = 0;   // the furthest end of a request the engine made itself
  private end = 0;         // where the blocks end
  private leading = true;  // new pieces are fetched here
  private disposed = false;

  constructor(readonly url: string, private readonly readTimeoutMs: number) {}

  // Fetches the header, then the blocks; never throws.
  start(): void {
    this.run().catch(() => this.stopLeading());
  }

  // Stops fetching and drops every piece (the model is loaded or failed).
  dispose(): void {
    this.disposed = true;
    this.stopLeading();
    for (const piece of this.pieces) this.drop(piece);
    this.pieces.length = 0;
  }

  // Called by host.js for each of the engine's range requests: the answer
  // when the request starts in a piece here, null to fetch it as usual.
  serve(url: string, offset: number, length: number, timeoutMs: number, sink: Sink, onBytes: () => void,
        fetchRange: FetchRange): Promise<RangeAnswer> | null {
    if (this.disposed || url !== this.url || this.validators === null || length <= 0) return null;
    // A range past the end of the file gets what the file has, as from the server.
    if (offset >= this.validators.total) return null;
    length = Math.min(length, this.validators.total - offset);
    const chain = this.chain(offset, offset + length);
    if (chain.length === 0) {
      // The engine has reached past the pieces: from here on it leads.
      if (this.end > 0 && offset >= this.next && offset < this.end) this.stopLeading();
      this.engineEnd = Math.max(this.engineEnd, offset + length);
      return null;
    }
    const last = chain[chain.length - 1];
    const covered = Math.min(offset + length, last.offset + last.length);
    if (covered < offset + length) this.stopLeading();
    return this.answer(chain, offset, length, covered, timeoutMs, sink, onBytes, fetchRange);
  }

  // ---- Fetching -------------------------------------------------------------------

  private async run(): Promise<void> {
    // The header, grown until its tensor table has been read.
    let head = new Uint8Array(0);
    let layout = null;
    while (layout === null) {
      const from = head.length;
      const to = from === 0 ? FIRST_RANGE_BYTES : Math.min(2 * from, MAX_HEADER_BYTES);
      if (to <= from || (this.validators !== null && from >= this.validators.total)) return;
      const piece = this.fetchPiece(from, to - from);
      if (!(await this.arrival(piece))) return;
      const grown = new Uint8Array(from + piece.arrived);
      grown.set(head);
      grown.set((piece.bytes as Uint8Array).subarray(0, piece.arrived), from);
      head = grown;
      try {
        layout = readGgufLayout(head);
      } catch (error) {
        if (!(error instanceof NeedMoreBytes)) return;  // the engine will say what is wrong
      }
    }
    const span = blockSpan(layout, (this.validators as Validators).total);
    if (span === null) return;
    // Blocks the engine already asked for itself (its module was quicker) are its own.
    this.next = Math.max(span.begin, head.length, this.engineEnd);
    this.end = span.end;
    this.fill();
  }

  // Starts block pieces while there is room.
  private fill(): void {
    while (this.leading && !this.disposed && this.next < this.end && this.inFlight() < IN_FLIGHT &&
           this.held() + PIECE_BYTES <= MAX_HELD_BYTES) {
      const length = Math.min(PIECE_BYTES, this.end - this.next);
      const piece = this.fetchPiece(this.next, length);
      this.next += length;
      void this.arrival(piece).then(() => this.fill());
    }
  }

  private fetchPiece(offset: number, length: number): Piece {
    const piece: Piece = {
      offset, length, bytes: new Uint8Array(length), arrived: 0, failed: false, done: false, taken: 0,
      controller: new AbortController(), wake: [],
    };
    this.pieces.push(piece);
    this.pieces.sort((a, b) => a.offset - b.offset);
    void this.download(piece);
    return piece;
  }

  // Resolves true when the piece arrived whole, false when it failed.
  private async arrival(piece: Piece): Promise<boolean> {
    while (!piece.done && !piece.failed) await new Promise<void>((resolve) => piece.wake.push(resolve));
    return piece.done && !piece.failed;
  }

  private async download(piece: Piece): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => piece.controller.abort(), this.readTimeoutMs);
    };
    try {
      arm();
      const response = await fetch(this.url, {
        headers: { Range: `bytes=${piece.offset}-${piece.offset + piece.length - 1}` },
        cache: 'no-store', signal: piece.controller.signal,
      });
      if (!this.accept(piece, response) || response.body === null) {
        await response.body?.cancel().catch(() => {});
        throw new Error('not the expected answer');
      }
      const reader = response.body.getReader();
      for (;;) {
        const step = await reader.read();
        if (step.done) break;
        arm();
        const n = Math.min(step.value.length, piece.length - piece.arrived);
        if (piece.bytes === null) break;  // dropped meanwhile
        piece.bytes.set(step.value.subarray(0, n), piece.arrived);
        piece.arrived += n;
        this.wake(piece);
      }
      if (piece.arrived !== piece.length) throw new Error('the body ended early');
      piece.done = true;
    } catch {
      this.fail(piece);
    } finally {
      clearTimeout(timer);
      this.wake(piece);
    }
  }

  // A 206 for exactly the range asked, of the same file as the first answer.
  private accept(piece: Piece, response: Response): boolean {
    const range = CONTENT_RANGE.exec(response.headers.get('content-range') ?? '');
    if (response.status !== 206 || range === null) return false;
    const seen: Validators = {
      total: Number(range[3]),
      etag: response.headers.get('etag') ?? '',
      lastModified: response.headers.get('last-modified') ?? '',
    };
    const last = Math.min(piece.offset + piece.length, seen.total) - 1;
    if (Number(range[1]) !== piece.offset || Number(range[2]) !== last) return false;
    if (this.validators === null) {
      this.validators = seen;
      piece.length = last + 1 - piece.offset;  // a file shorter than the first range
      return true;
    }
    const v = this.validators;
    return seen.total === v.total && seen.etag === v.etag && seen.lastModified === v.lastModified;
  }

  private fail(piece: Piece): void {
    if (piece.failed) return;
    piece.failed = true;
    piece.controller.abort();
    // A server that fails once (a fault, a replaced file) is left to the
    // engine, which retries and reports.
    this.stopLeading();
    this.forget(piece);
  }

  private wake(piece: Piece): void {
    const waiting = piece.wake;
    piece.wake = [];
    for (const resolve of waiting) resolve();
  }

  private stopLeading(): void {
    this.leading = false;
  }

  private inFlight(): number {
    return this.pieces.filter((p) => !p.done && !p.failed).length;
  }

  private held(): number {
    return this.pieces.reduce((sum, p) => sum + (p.bytes === null ? 0 : p.length - p.taken), 0);
  }

  private drop(piece: Piece): void {
    if (!piece.done) piece.controller.abort();
    piece.bytes = null;
    piece.failed = piece.failed || !piece.done;
    this.wake(piece);
  }

  private forget(piece: Piece): void {
    const i = this.pieces.indexOf(piece);
    if (i >= 0) this.pieces.splice(i, 1);
    piece.bytes = null;
  }

  // ---- Serving ----------------------------------------------------------------------

  // The pieces that hold [offset, ...) without a gap, up to `end`.
  private chain(offset: number, end: number): Piece[] {
    const chain: Piece[] = [];
    let at = offset;
    for (const piece of this.pieces) {
      if (at >= end) break;
      if (piece.bytes === null || piece.failed) continue;
      if (piece.offset <= at && at < piece.offset + piece.length) {
        chain.push(piece);
        at = piece.offset + piece.length;
      }
    }
    return chain;
  }

  private async answer(chain: Piece[], offset: number, length: number, covered: number, timeoutMs: number,
                       sink: Sink, onBytes: () => void, fetchRange: FetchRange): Promise<RangeAnswer> {
    const v = this.validators as Validators;
    const end = offset + length;
    // The part past the pieces, fetched now, beside the copying of the rest.
    const rest = covered < end
      ? fetchRange(this.url, covered, end - covered, timeoutMs, (chunk, at) => sink(chunk, at + covered - offset), onBytes)
      : null;
    const problem = await this.copy(chain, offset, covered, timeoutMs, sink, onBytes);
    const whole: RangeAnswer = {
      status: 206, bodyBytes: length, contentRange: `bytes ${offset}-${end - 1}/${v.total}`,
      etag: v.etag, lastModified: v.lastModified,
    };
    if (rest === null) {
      return problem === null ? whole : { status: 0, bodyBytes: 0, failure: problem.failure, error: problem.error };
    }
    const r = await rest;
    if (problem !== null) return { status: 0, bodyBytes: 0, failure: problem.failure, error: problem.error };
    const range = CONTENT_RANGE.exec(r.contentRange ?? '');
    if (r.status !== 206 || range === null || Number(range[1]) !== covered || Number(range[2]) !== end - 1 ||
        Number(range[3]) !== v.total) {
      return r;  // the server's own answer for the rest: the engine judges it
    }
    return { ...r, bodyBytes: covered - offset + r.bodyBytes, contentRange: whole.contentRange };
  }

  // Copies [offset, covered) from the chain as its bytes arrive; null when
  // all of it was copied, else what went wrong.
  private async copy(chain: Piece[], offset: number, covered: number, timeoutMs: number, sink: Sink,
                     onBytes: () => void): Promise<{ failure: string; error: string } | null> {
    let at = offset;
    for (const piece of chain) {
      const stop = Math.min(covered, piece.offset + piece.length);
      const from = at;
      while (at < stop) {
        const available = piece.bytes === null ? at : Math.min(stop, piece.offset + piece.arrived);
        if (available > at) {
          const bytes = piece.bytes as Uint8Array;
          if (!sink(bytes.subarray(at - piece.offset, available - piece.offset), at - offset)) {
            return { failure: '', error: 'the request was given up by the thread that made it' };
          }
          onBytes();
          at = available;
          continue;
        }
        if (piece.failed || piece.bytes === null) {
          return { failure: '', error: `the connection closed after ${at - offset} body bytes (an early request)` };
        }
        const moved = await this.moved(piece, timeoutMs);
        if (!moved) {
          this.fail(piece);
          return { failure: 'stalled', error: `no bytes for ${timeoutMs} ms, the transfer stopped` };
        }
      }
      piece.taken += stop - from;
      // Taken whole: the engine holds its own copy now.
      if (piece.done && piece.taken >= piece.length) this.forget(piece);
    }
    this.fill();
    return null;
  }

  // Resolves true when the piece gets more bytes or ends, false after
  // timeoutMs without either.
  private moved(piece: Piece, timeoutMs: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      piece.wake.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

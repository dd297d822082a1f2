// The first bytes of a model, fetched before the engine's WebAssembly module
// is ready: the GGUF header (and the file past it until the tensor table has
// been read), then the transformer blocks in file order. Compiling the
// module and starting its threads takes half a second to more than a second;
// without this the link idles through it, and every byte, the first token's
// last one included, arrives that much later.
//
// Two halves. EarlyFetch runs on the thread that called load() (the page, or
// Node's main thread): while the module starts, the engine worker's own
// thread is busy for most of a second at a time (compiling, starting one Web
// Worker per engine thread), and a request it would start, or a body it
// would read, waits that long; the caller's thread is free. It writes each
// piece into a SharedArrayBuffer that the worker sees as it fills.
// EarlyRanges runs in the worker: host.js (startRange) asks its serve()
// first, and a request that pieces hold a part of is answered from them as
// their bytes arrive; the other parts are fetched beside. A request for
// block bytes that no piece holds yet waits for one: they come in order.
// The engine knows nothing of either.
//
// The caller leads until the blocks end, or until the engine asks for bytes
// past every piece outside the blocks (or before the first answer came).
// Anything unexpected (a status other than 206, another file size or
// validator, a failed or stalled piece) drops the piece and ends the
// fetching ahead: the engine's own requests meet the server as it is. With
// a persistent cache, the fetch starts only once the worker has found no
// model in the store (worker.ts).

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

// What the fetching half tells the serving half (worker messages).
export interface EarlyFile {
  type: 'early-file';
  total: number;
  etag: string;
  lastModified: string;
}
export interface EarlyBlocks {
  type: 'early-blocks';
  begin: number;  // the transformer blocks' bytes (blockSpan), fetched here in order
  end: number;
}
export interface EarlyPiece {
  type: 'early-piece';
  offset: number;
  length: number;
  bytes: SharedArrayBuffer;
  state: SharedArrayBuffer;  // Int32Array of PIECE_WORDS: ARRIVED, STATUS, TAKEN
  header: boolean;           // read before the tensor table was (the header, the embeddings past it)
}

// The shared control words (Int32Array over `control`).
const LEADING = 0;  // NOT_LEADING, IS_LEADING, or OFFERING while a piece is being offered
const DISPOSED = 1; // 1 once the worker has no use for any piece
const CACHE = 2;    // with a persistent cache: 0 unknown yet, 1 holds no model (fetch), 2 holds one
const OFFERED = 3;  // pieces offered to the worker (each with a message on its way)
const WAITING = 4;  // the engine's requests waiting for block pieces not offered yet
const CONTROL_WORDS = 5;
const NOT_LEADING = 0;
const IS_LEADING = 1;
const OFFERING = 2;
// Each piece's shared words.
const ARRIVED = 0;  // bytes [0, ARRIVED) are in
const STATUS = 1;   // ARRIVING, DONE or FAILED (either side may fail it)
const TAKEN = 2;    // bytes handed to the engine
const PIECE_WORDS = 3;
const ARRIVING = 0;
const DONE = 1;
const FAILED = 2;

// The engine's own first request is this long (http_source.cpp,
// kFirstRangeBytes); the header grows by doubling past it, as there.
const FIRST_RANGE_BYTES = 1 << 20;
const MAX_HEADER_BYTES = 64 << 20;
// 8 MiB a request keeps the browser's cost per request small (see
// kMinPieceBytes): Chromium on 2 cores downloaded a 512 MB file from
// localhost, three ranges at a time, in 8.9-9.4 s in ranges of 2 MiB, 6.0 s
// of 4 MiB, 4.8-6.0 s of 8 MiB, 4.7 s of 32 MiB. Three in flight, the first
// ones shorter (a third, two thirds), so that they end one at a time: when
// one ends, the others still have bytes to send while the next request goes out.
const PIECE_BYTES = 8 << 20;
const IN_FLIGHT = 3;
const PIECE_ALIGN = 64 << 10;
// Fetched and not yet taken by the engine: at most this much (the engine
// takes the blocks from the load on, so at most about what arrives while
// its module starts).
const MAX_HELD_BYTES = 64 << 20;
// How often a side waiting on the other looks at the shared words.
const POLL_MS = 2;
const HELD_POLL_MS = 20;
const CACHE_POLL_MS = 10;

// The engine's own read timeout when the load options give none (HttpSourceOptions).
export const DEFAULT_READ_TIMEOUT_MS = 30_000;

const CONTENT_RANGE = /^bytes (\d+)-(\d+)\/(\d+)$/;
// A body is read into a buffer of this size where its stream allows it (a
// byte stream, "bring your own buffer"): Chromium then hands over up to this
// much at a time instead of a chunk of 64 KiB or less per read, and one
// request's bytes cost a few reads. Measured on a 2-core machine, 8 MiB
// ranges three at a time from localhost: 114-124 MB/s against 83-100 with
// the default reader; a cold load of the qwen3.5-0.8b shape (512 MB), five
// runs each: first token after 9.9-10.8 s instead of 10.4-13.0.
const BODY_READ_BYTES = 1 << 20;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

// Hands `take` the body's bytes in order, as they arrive; an exception from
// `take` ends the reading and is rethrown.
async function readBody(body: ReadableStream<Uint8Array>, take: (chunk: Uint8Array) => void): Promise<void> {
  let byob: ReadableStreamBYOBReader | null = null;
  try {
    byob = body.getReader({ mode: 'byob' });
  } catch {
    // Not a byte stream: read as it comes.
  }
  if (byob === null) {
    const reader = body.getReader();
    try {
      for (let step = await reader.read(); !step.done; step = await reader.read()) take(step.value);
    } catch (error) {
      await reader.cancel().catch(() => {});
      throw error;
    }
    return;
  }
  let buffer = new ArrayBuffer(BODY_READ_BYTES);
  try {
    for (;;) {
      const step = await byob.read(new Uint8Array(buffer));
      if (step.done || step.value === undefined) break;
      take(step.value);
      buffer = step.value.buffer as ArrayBuffer;  // the same memory, handed back
    }
  } catch (error) {
    await byob.cancel().catch(() => {});
    throw error;
  }
}

// ---- Fetching (the caller's thread) -------------------------------------------------

interface FetchedPiece {
  offset: number;
  length: number;
  bytes: Uint8Array;
  state: Int32Array;
  controller: AbortController;
  ended: Promise<boolean>;  // true: arrived whole
}

export class EarlyFetch {
  readonly control = new Int32Array(new SharedArrayBuffer(4 * CONTROL_WORDS));
  private readonly pieces: FetchedPiece[] = [];
  private validators: EarlyFile | null = null;
  private blockPieces = 0;  // block pieces started

  // `post` hands a message to the worker.
  constructor(readonly url: string, private readonly readTimeoutMs: number,
              private readonly post: (message: EarlyFile | EarlyBlocks | EarlyPiece) => void) {
    Atomics.store(this.control, LEADING, IS_LEADING);
  }

  // Fetches the header, then the blocks; never throws. With a persistent
  // cache, first waits for the worker's word on what the store holds.
  start(cache: boolean): void {
    this.run(cache).catch(() => this.stopLeading());
  }

  // The load failed or was abandoned: no piece is wanted any more.
  dispose(): void {
    Atomics.store(this.control, DISPOSED, 1);
    this.stopLeading();
    for (const piece of this.pieces) this.fail(piece);
  }

  private leading(): boolean {
    return Atomics.load(this.control, LEADING) === IS_LEADING && Atomics.load(this.control, DISPOSED) === 0;
  }

  private stopLeading(): void {
    Atomics.store(this.control, LEADING, NOT_LEADING);
  }

  // Offers a piece to the worker, unless the engine leads by now: counted
  // and posted while the worker cannot end the leading, so that once it has
  // ended it, it knows how many pieces are on their way (EarlyRanges.serve).
  private offer(message: EarlyPiece): boolean {
    if (Atomics.load(this.control, DISPOSED) === 1) return false;
    if (Atomics.compareExchange(this.control, LEADING, IS_LEADING, OFFERING) !== IS_LEADING) return false;
    Atomics.add(this.control, OFFERED, 1);
    this.post(message);
    Atomics.store(this.control, LEADING, IS_LEADING);
    return true;
  }

  private async run(cache: boolean): Promise<void> {
    while (cache && Atomics.load(this.control, CACHE) === 0 && this.leading()) await sleep(CACHE_POLL_MS);
    if (cache && Atomics.load(this.control, CACHE) !== 1) return;
    // The header, and the file past it in order until the tensor table has
    // been read: the next ranges go out as soon as the first answer gives the
    // file's size, not after each part has been parsed. What lies past the
    // header is the token embeddings, which the engine reads for the prompt,
    // and whole for the output head when the two share their weights.
    const first = this.fetchPiece(0, FIRST_RANGE_BYTES) as FetchedPiece;  // offered once answered
    await Promise.race([first.ended, this.answered()]);
    if (this.validators === null) return;
    const total = this.validators.total;
    const heads = [first];
    let sequentialEnd = first.length;
    const more = () => {
      while (this.leading() && sequentialEnd < Math.min(total, MAX_HEADER_BYTES) && this.inFlight() < IN_FLIGHT) {
        const length = Math.min(sequentialEnd, PIECE_BYTES, total - sequentialEnd);
        const piece = this.fetchPiece(sequentialEnd, length);
        if (piece === null) return;
        heads.push(piece);
        sequentialEnd += length;
      }
    };
    more();
    let layout = null;
    for (let parsed = 0; layout === null; ++parsed) {
      if (parsed >= heads.length || !(await heads[parsed].ended)) return;
      more();
      const head = new Uint8Array(heads[parsed].offset + heads[parsed].length);
      for (const piece of heads.slice(0, parsed + 1)) head.set(piece.bytes, piece.offset);
      try {
        layout = readGgufLayout(head);
      } catch (error) {
        if (!(error instanceof NeedMoreBytes)) return;  // the engine will say what is wrong
      }
    }
    const span = blockSpan(layout, total);
    if (span === null) return;
    let next = Math.max(span.begin, sequentialEnd);
    // The blocks are fetched here, in order, while this leads: the engine
    // waits for their pieces rather than asking the server itself.
    this.post({ type: 'early-blocks', begin: next, end: span.end });
    // Block pieces while there is room (or the engine waits for the next
    // one), until the blocks end or the engine leads.
    heads.length = 0;
    while (this.leading() && next < span.end) {
      this.prune();
      if (this.inFlight() >= IN_FLIGHT) {
        await Promise.race(this.pieces.filter((p) => this.arriving(p)).map((p) => p.ended));
        continue;
      }
      if (this.held() + PIECE_BYTES > MAX_HELD_BYTES && Atomics.load(this.control, WAITING) === 0) {
        await sleep(HELD_POLL_MS);
        continue;
      }
      const length = Math.min(this.pieceBytes(), span.end - next);
      if (this.fetchPiece(next, length) === null) return;
      next += length;
    }
  }

  // Resolves once the first answer has given the file's validators.
  private async answered(): Promise<void> {
    while (this.validators === null && this.pieces.some((p) => this.arriving(p))) await sleep(POLL_MS);
  }

  // The k-th block piece of the first IN_FLIGHT is (k + 1) / IN_FLIGHT of a
  // whole one; the rest are whole.
  private pieceBytes(): number {
    const started = this.blockPieces++;
    if (started >= IN_FLIGHT - 1) return PIECE_BYTES;
    const share = Math.floor((PIECE_BYTES * (started + 1)) / IN_FLIGHT / PIECE_ALIGN) * PIECE_ALIGN;
    return Math.max(PIECE_ALIGN, share);
  }

  // Null when the engine leads by now.
  private fetchPiece(offset: number, length: number): FetchedPiece | null {
    const bytes = new SharedArrayBuffer(length);
    const state = new SharedArrayBuffer(4 * PIECE_WORDS);
    const piece: FetchedPiece = {
      offset, length, bytes: new Uint8Array(bytes), state: new Int32Array(state),
      controller: new AbortController(), ended: Promise.resolve(false),
    };
    // Offered before its answer: the worker must know the bytes are coming,
    // or a request of the engine for them would go to the server too. (The
    // header's piece once its length is known: see download().)
    if (offset > 0 && !this.offer({ type: 'early-piece', offset, length, bytes, state, header: this.blockPieces === 0 })) {
      return null;
    }
    this.pieces.push(piece);
    piece.ended = this.download(piece, bytes, state);
    return piece;
  }

  // Lets go of the pieces the worker took whole, and of the failed ones.
  private prune(): void {
    for (let i = this.pieces.length - 1; i >= 0; --i) {
      const piece = this.pieces[i];
      const status = Atomics.load(piece.state, STATUS);
      if (status === FAILED || (status === DONE && Atomics.load(piece.state, TAKEN) >= piece.length)) {
        this.pieces.splice(i, 1);
      }
    }
  }

  private arriving(piece: FetchedPiece): boolean {
    return Atomics.load(piece.state, STATUS) === ARRIVING;
  }

  private inFlight(): number {
    return this.pieces.filter((p) => this.arriving(p)).length;
  }

  private held(): number {
    return this.pieces.reduce((sum, p) => sum + (Atomics.load(p.state, STATUS) === FAILED ? 0
      : p.length - Atomics.load(p.state, TAKEN)), 0);
  }

  private async download(piece: FetchedPiece, bytes: SharedArrayBuffer, state: SharedArrayBuffer): Promise<boolean> {
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
      // The header's piece is offered once its length is known (a file
      // shorter than the first range shortens it).
      if (piece.offset === 0 && !this.offer({ type: 'early-piece', offset: 0, length: piece.length, bytes, state, header: true })) {
        throw new Error('the engine leads');
      }
      let arrived = 0;
      await readBody(response.body, (chunk) => {
        arm();
        // Given up by the worker (stalled, or nothing wanted any more).
        if (!this.arriving(piece) || Atomics.load(this.control, DISPOSED) === 1) throw new Error('given up');
        const n = Math.min(chunk.length, piece.length - arrived);
        piece.bytes.set(chunk.subarray(0, n), arrived);
        arrived += n;
        Atomics.store(piece.state, ARRIVED, arrived);
      });
      if (arrived !== piece.length) throw new Error('the body ended early');
      Atomics.compareExchange(piece.state, STATUS, ARRIVING, DONE);
      return Atomics.load(piece.state, STATUS) === DONE;
    } catch {
      this.fail(piece);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  // A 206 for exactly the range asked, of the same file as the first answer.
  private accept(piece: FetchedPiece, response: Response): boolean {
    const range = CONTENT_RANGE.exec(response.headers.get('content-range') ?? '');
    if (response.status !== 206 || range === null) return false;
    const seen: EarlyFile = {
      type: 'early-file',
      total: Number(range[3]),
      etag: response.headers.get('etag') ?? '',
      lastModified: response.headers.get('last-modified') ?? '',
    };
    const last = Math.min(piece.offset + piece.length, seen.total) - 1;
    if (Number(range[1]) !== piece.offset || Number(range[2]) !== last) return false;
    if (this.validators === null) {
      if (piece.offset !== 0) return false;
      this.validators = seen;
      piece.length = last + 1;  // a file shorter than the first range
      this.post(seen);
      return true;
    }
    const v = this.validators;
    return seen.total === v.total && seen.etag === v.etag && seen.lastModified === v.lastModified;
  }

  private fail(piece: FetchedPiece): void {
    Atomics.compareExchange(piece.state, STATUS, ARRIVING, FAILED);
    piece.controller.abort();
    // A server that fails once (a fault, a replaced file) is left to the
    // engine, which retries and reports.
    if (Atomics.load(piece.state, STATUS) === FAILED) this.stopLeading();
  }
}

// ---- Serving (the engine worker) ------------------------------------------------------

interface Piece {
  offset: number;
  length: number;
  bytes: Uint8Array | null;  // null once taken whole, or dropped
  state: Int32Array;
  taken: number;             // bytes handed to the engine
  keep: boolean;             // kept when taken whole
}

export class EarlyRanges {
  private readonly pieces: Piece[] = [];  // by offset, not overlapping
  private validators: EarlyFile | null = null;
  private blocks: EarlyBlocks | null = null;
  private received = 0;  // pieces offered and received
  private disposed = false;

  // `control`: EarlyFetch.control.
  constructor(readonly url: string, private readonly control: Int32Array) {}

  // From EarlyFetch.
  receive(message: EarlyFile | EarlyBlocks | EarlyPiece): void {
    if (this.disposed) return;
    if (message.type === 'early-file') {
      this.validators = message;
      return;
    }
    if (message.type === 'early-blocks') {
      this.blocks = message;
      return;
    }
    this.received += 1;
    this.pieces.push({
      offset: message.offset, length: message.length, bytes: new Uint8Array(message.bytes),
      state: new Int32Array(message.state), taken: 0, keep: message.header,
    });
    this.pieces.sort((a, b) => a.offset - b.offset);
  }

  // Tells the caller's EarlyFetch that nothing will be taken.
  static refuse(control: Int32Array): void {
    Atomics.store(control, DISPOSED, 1);
  }

  // With a persistent cache: whether the store holds a model (then nothing
  // is fetched ahead: a cached model must not cost a request).
  cacheHoldsModel(holds: boolean): void {
    Atomics.store(this.control, CACHE, holds ? 2 : 1);
  }

  // Stops the fetching and drops every piece (the model is loaded or failed).
  dispose(): void {
    this.disposed = true;
    Atomics.store(this.control, DISPOSED, 1);
    this.stopLeading();
    for (const piece of this.pieces) {
      Atomics.compareExchange(piece.state, STATUS, ARRIVING, FAILED);
      piece.bytes = null;
    }
    this.pieces.length = 0;
  }

  // Called by host.js for each of the engine's range requests: the answer
  // when pieces here hold a part of it (the rest fetched beside), null to
  // fetch it as usual.
  serve(url: string, offset: number, length: number, timeoutMs: number, sink: Sink, onBytes: () => void,
        fetchRange: FetchRange): Promise<RangeAnswer> | null {
    if (this.disposed || url !== this.url || length <= 0) return null;
    // Pieces offered whose message has not been received yet: wait for them.
    if (this.received < Atomics.load(this.control, OFFERED)) {
      return this.whenOffered(url, offset, length, timeoutMs, sink, onBytes, fetchRange);
    }
    if (this.validators === null) {
      // The engine is quicker than the first answer: it leads.
      if (this.stopLeading()) return this.whenOffered(url, offset, length, timeoutMs, sink, onBytes, fetchRange);
      return null;
    }
    // A range past the end of the file gets what the file has, as from the server.
    if (offset >= this.validators.total) return null;
    length = Math.min(length, this.validators.total - offset);
    if (this.awaitsBlockPieces(offset, offset + length)) {
      return this.whenOffered(url, offset, length, timeoutMs, sink, onBytes, fetchRange);
    }
    const chain = this.chain(offset, offset + length);
    if (chain.length === 0) {
      // Past every piece: from here on the engine leads. (Before them, it
      // reads the embeddings of its prompt, and the fetching goes on.)
      const last = this.pieces[this.pieces.length - 1];
      if ((last === undefined || offset >= last.offset + last.length) && this.stopLeading()) {
        return this.whenOffered(url, offset, length, timeoutMs, sink, onBytes, fetchRange);
      }
      return null;
    }
    const start = Math.max(offset, chain[0].offset);
    // The parts the pieces do not hold lie outside the blocks (checked
    // above while the caller leads): they are fetched beside.
    const last = chain[chain.length - 1];
    const covered = Math.min(offset + length, last.offset + last.length);
    return this.answer(chain, offset, length, start, covered, timeoutMs, sink, onBytes, fetchRange);
  }

  // A request for block bytes that the caller's pieces do not cover yet,
  // while it leads: they will, in order.
  private awaitsBlockPieces(offset: number, end: number): boolean {
    const blocks = this.blocks;
    if (blocks === null) return false;
    const from = Math.max(offset, blocks.begin);
    const to = Math.min(end, blocks.end);
    if (from >= to) return false;
    if (Atomics.load(this.control, LEADING) === NOT_LEADING || Atomics.load(this.control, DISPOSED) === 1) return false;
    const chain = this.chain(from, to);
    if (chain.length === 0 || chain[0].offset > from) return true;
    const last = chain[chain.length - 1];
    return last.offset + last.length < to;
  }

  // Serves a request once every piece offered has been received and, for
  // block bytes, once pieces cover them (or the fetching ahead has ended).
  // The caller's side goes past its limit on held bytes while the engine
  // waits, so that a unit longer than that limit comes too.
  private async whenOffered(url: string, offset: number, length: number, timeoutMs: number, sink: Sink,
                            onBytes: () => void, fetchRange: FetchRange): Promise<RangeAnswer> {
    let since = performance.now();
    let offered = Atomics.load(this.control, OFFERED);
    Atomics.add(this.control, WAITING, 1);
    try {
      while (!this.disposed && (this.received < Atomics.load(this.control, OFFERED) ||
                                this.awaitsBlockPieces(offset, offset + length))) {
        const now = Atomics.load(this.control, OFFERED);
        if (now !== offered) {
          offered = now;
          since = performance.now();
        } else if (performance.now() - since > timeoutMs && this.received >= now) {
          this.stopLeading();  // no piece offered for that long: the engine leads
          break;
        }
        await sleep(POLL_MS);
      }
    } finally {
      Atomics.sub(this.control, WAITING, 1);
    }
    const served = this.serve(url, offset, length, timeoutMs, sink, onBytes, fetchRange);
    return served ?? fetchRange(url, offset, length, timeoutMs, sink, onBytes);
  }

  // Ends the fetching ahead. True when pieces offered before that are still
  // to be received.
  private stopLeading(): boolean {
    // The caller's thread holds OFFERING only while it counts and posts one piece.
    while (Atomics.compareExchange(this.control, LEADING, IS_LEADING, NOT_LEADING) === OFFERING) { /* a moment */ }
    return this.received < Atomics.load(this.control, OFFERED);
  }

  private failed(piece: Piece): boolean {
    return piece.bytes === null || Atomics.load(piece.state, STATUS) === FAILED;
  }

  // The pieces that hold a part of [offset, end) without a gap, from the
  // first one that does.
  private chain(offset: number, end: number): Piece[] {
    const chain: Piece[] = [];
    let at = offset;
    for (const piece of this.pieces) {
      if (at >= end) break;
      if (this.failed(piece)) continue;
      const holds = chain.length === 0
        ? piece.offset < end && at < piece.offset + piece.length
        : piece.offset === at;
      if (holds) {
        chain.push(piece);
        at = piece.offset + piece.length;
      } else if (chain.length > 0) {
        break;
      }
    }
    return chain;
  }

  // [offset, start) and [covered, end) from the server, beside the copying
  // of [start, covered) from the chain.
  private async answer(chain: Piece[], offset: number, length: number, start: number, covered: number,
                       timeoutMs: number, sink: Sink, onBytes: () => void,
                       fetchRange: FetchRange): Promise<RangeAnswer> {
    const v = this.validators as EarlyFile;
    const end = offset + length;
    const fetchPart = (from: number, to: number) => (from < to
      ? fetchRange(this.url, from, to - from, timeoutMs, (chunk, at) => sink(chunk, at + from - offset), onBytes)
        .then((r) => ({ r, from, to }))
      : null);
    const parts = [fetchPart(offset, start), fetchPart(covered, end)];
    const problem = await this.copy(chain, start, covered, offset, timeoutMs, sink, onBytes);
    let bodyBytes = covered - start;
    // The server's validators where they differ from the first answer's: the
    // engine then sees that the file changed, and says so.
    let validators: RangeAnswer = { status: 206, bodyBytes: 0, etag: v.etag, lastModified: v.lastModified };
    for (const part of parts) {
      if (part === null) continue;
      const { r, from, to } = await part;
      const range = CONTENT_RANGE.exec(r.contentRange ?? '');
      if (r.status !== 206 || range === null || Number(range[1]) !== from || Number(range[2]) !== to - 1 ||
          Number(range[3]) !== v.total) {
        return r;  // the server's own answer for that part: the engine judges it
      }
      if ((r.etag ?? '') !== v.etag || (r.lastModified ?? '') !== v.lastModified) validators = r;
      bodyBytes += r.bodyBytes;
    }
    if (problem !== null) return { status: 0, bodyBytes: 0, failure: problem.failure, error: problem.error };
    return { ...validators, status: 206, bodyBytes, contentRange: `bytes ${offset}-${end - 1}/${v.total}` };
  }

  // Copies [start, covered) from the chain as its bytes arrive, to its
  // place in a body that starts at `offset`; null when all of it was copied,
  // else what went wrong.
  private async copy(chain: Piece[], start: number, covered: number, offset: number, timeoutMs: number, sink: Sink,
                     onBytes: () => void): Promise<{ failure: string; error: string } | null> {
    let at = start;
    for (const piece of chain) {
      const stop = Math.min(covered, piece.offset + piece.length);
      const from = at;
      let movedAt = performance.now();
      while (at < stop) {
        const available = this.failed(piece) ? at : Math.min(stop, piece.offset + Atomics.load(piece.state, ARRIVED));
        if (available > at) {
          const bytes = piece.bytes as Uint8Array;
          if (!sink(bytes.subarray(at - piece.offset, available - piece.offset), at - offset)) {
            return { failure: '', error: 'the request was given up by the thread that made it' };
          }
          onBytes();
          at = available;
          movedAt = performance.now();
          continue;
        }
        if (this.failed(piece)) {
          return { failure: '', error: `the connection closed after ${at - start} body bytes (an early request)` };
        }
        if (performance.now() - movedAt > timeoutMs) {
          Atomics.compareExchange(piece.state, STATUS, ARRIVING, FAILED);
          this.stopLeading();
          return { failure: 'stalled', error: `no bytes for ${timeoutMs} ms, the transfer stopped` };
        }
        await sleep(POLL_MS);
      }
      piece.taken += stop - from;
      Atomics.store(piece.state, TAKEN, piece.taken);
      // Taken whole: the engine holds its own copy now. (The header's pieces
      // are kept: the engine reads the head, then the embeddings past it.)
      if (piece.taken >= piece.length && !piece.keep) this.forget(piece);
    }
    return null;
  }

  private forget(piece: Piece): void {
    const i = this.pieces.indexOf(piece);
    if (i >= 0) this.pieces.splice(i, 1);
    piece.bytes = null;
  }
}

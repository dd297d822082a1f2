// EarlyFetch: the half of the early fetch (bridge/early-pieces.ts) that runs
// on the thread that called load(): it fetches the header and the blocks in
// order into shared pieces while the engine's module starts.

import {
  ARRIVED, ARRIVING, CACHE, CONTENT_RANGE, CONTROL_WORDS, DISPOSED, DONE, FAILED, IS_LEADING, LEADING, NOT_LEADING, OFFERED,
  OFFERING, PIECE_WORDS, POLL_MS, STATUS, TAKEN, WAITING, sleep,
} from '../bridge/early-pieces.js';
import type { EarlyBlocks, EarlyFile, EarlyPiece } from '../bridge/early-pieces.js';
import { HTTP_FIRST_RANGE_BYTES as FIRST_RANGE_BYTES, HTTP_MAX_HEAD_BYTES as MAX_HEADER_BYTES } from '../bridge/bridge.generated.js';
import { fetchTo, pieceAnswerFits } from '../bridge/range-fetch.js';
import type { PieceTarget, RangeHead } from '../bridge/range-fetch.js';
import { RangeFetcher } from '../bridge/range-fetcher.js';
import { blockRanges, NeedMoreBytes, readGgufLayout } from './gguf-layout.js';

// The engine's own first request is FIRST_RANGE_BYTES long; the header
// grows by doubling past it, as there.
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
const HELD_POLL_MS = 20;
const CACHE_POLL_MS = 10;

interface FetchedPiece {
  offset: number;
  length: number;
  buffer: SharedArrayBuffer;
  reusable: boolean;  // a block piece's buffer from `spare` (the header's the worker keeps)
  bytes: Uint8Array;
  state: Int32Array;
  ended: Promise<boolean>;  // true: arrived whole
}

export class EarlyFetch {
  readonly control = new Int32Array(new SharedArrayBuffer(4 * CONTROL_WORDS));
  private readonly pieces: FetchedPiece[] = [];
  private readonly fetcher = new RangeFetcher();
  // Block pieces' buffers the worker has taken whole, for the next ones. A
  // buffer shared with the worker is freed only once both threads' garbage
  // collectors have let go of it, which they do late: with a new buffer per
  // piece, qwen3-0.6b Q8_0 without a budget (468 MB of block pieces) peaked
  // at 1,387 MB in the tab, 1,324 MB with reused ones (both before the
  // fetch workers, range-fetcher.ts, which did the rest).
  private readonly spare: SharedArrayBuffer[] = [];
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
    this.fetcher.warm();
    this.run(cache).catch(() => this.stopLeading()).finally(() => this.fetcher.close());
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
      for (const piece of heads.slice(0, parsed + 1)) head.set(piece.bytes.subarray(0, piece.length), piece.offset);
      try {
        layout = readGgufLayout(head);
      } catch (error) {
        if (!(error instanceof NeedMoreBytes)) return;  // the engine will say what is wrong
      }
    }
    const ranges = blockRanges(layout, total)
      .map(([begin, end]): [number, number] => [Math.max(begin, sequentialEnd), end])
      .filter(([begin, end]) => begin < end);
    if (ranges.length === 0) return;
    // The blocks are fetched here, in order, while this leads: the engine
    // waits for their pieces rather than asking the server itself.
    this.post({ type: 'early-blocks', ranges });
    // Block pieces while there is room (or the engine waits for the next
    // one), until the blocks end or the engine leads.
    heads.length = 0;
    for (const [begin, end] of ranges) {
      let next = begin;
      while (this.leading() && next < end) {
        this.prune();
        if (this.inFlight() >= IN_FLIGHT) {
          await Promise.race(this.pieces.filter((p) => this.arriving(p)).map((p) => p.ended));
          continue;
        }
        if (this.held() + PIECE_BYTES > MAX_HELD_BYTES && Atomics.load(this.control, WAITING) === 0) {
          await sleep(HELD_POLL_MS);
          continue;
        }
        const length = Math.min(this.pieceBytes(), end - next);
        if (this.fetchPiece(next, length, this.spare.pop() ?? new SharedArrayBuffer(PIECE_BYTES)) === null) return;
        next += length;
      }
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

  // Into `reused` when given (a block piece), else a new buffer. Null when
  // the engine leads by now.
  private fetchPiece(offset: number, length: number, reused?: SharedArrayBuffer): FetchedPiece | null {
    const bytes = reused ?? new SharedArrayBuffer(length);
    const state = new SharedArrayBuffer(4 * PIECE_WORDS);
    const piece: FetchedPiece = {
      offset, length, buffer: bytes, reusable: reused !== undefined, bytes: new Uint8Array(bytes, 0, length),
      state: new Int32Array(state), ended: Promise.resolve(false),
    };
    // Offered before its answer: the worker must know the bytes are coming,
    // or a request of the engine for them would go to the server too. (The
    // header's piece once its length is known: see heard().)
    if (offset > 0 && !this.offer({ type: 'early-piece', offset, length, bytes, state, header: this.blockPieces === 0 })) {
      return null;
    }
    this.pieces.push(piece);
    piece.ended = this.download(piece, state);
    return piece;
  }

  // Lets go of the pieces the worker took whole, and of the failed ones. A
  // block piece's buffer taken whole is used again: the worker has copied
  // the last of it and forgotten the piece. (A failed piece's is not: the
  // worker may still be copying from it; nothing is fetched ahead after a
  // failure anyway.)
  private prune(): void {
    for (let i = this.pieces.length - 1; i >= 0; --i) {
      const piece = this.pieces[i];
      const status = Atomics.load(piece.state, STATUS);
      const takenWhole = status === DONE && Atomics.load(piece.state, TAKEN) >= piece.length;
      if (status === FAILED || takenWhole) {
        this.pieces.splice(i, 1);
        if (takenWhole && piece.reusable) this.spare.push(piece.buffer);
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

  // A 206 for exactly the range asked, of the same file as the first
  // answer: its bytes are written into the piece as they arrive (on a
  // worker of the fetcher, in a browser).
  private async download(piece: FetchedPiece, state: SharedArrayBuffer): Promise<boolean> {
    const target: PieceTarget = {
      kind: 'piece', bytes: piece.buffer, state, control: this.control.buffer as SharedArrayBuffer,
      validators: this.validators,
    };
    // The header's pieces on this thread: a worker's start would put the
    // first answer after the engine's first request, which then goes to
    // the server itself. They are few and small; the blocks are not.
    const request = piece.reusable ? this.fetcher.fetch.bind(this.fetcher) : fetchTo;
    const answer = await request(this.url, piece.offset, piece.length, this.readTimeoutMs, target,
                               (head) => this.heard(piece, head, state));
    if (answer.status !== 206 || answer.error || Atomics.load(piece.state, ARRIVED) !== piece.length) {
      this.fail(piece);
      return false;
    }
    Atomics.compareExchange(piece.state, STATUS, ARRIVING, DONE);
    return Atomics.load(piece.state, STATUS) === DONE;
  }

  // The first answer gives the file's validators and the header piece's
  // length (a file shorter than the first range shortens it); the piece is
  // offered then.
  private heard(piece: FetchedPiece, head: RangeHead, state: SharedArrayBuffer): void {
    if (piece.offset !== 0 || this.validators !== null) return;
    const seen = pieceAnswerFits(head, 0, piece.length, null) as EarlyFile;
    this.validators = seen;
    piece.length = Math.min(piece.length, seen.total);
    this.post(seen);
    const offered = this.offer({ type: 'early-piece', offset: 0, length: piece.length, bytes: piece.buffer, state, header: true });
    if (!offered) this.fail(piece);  // the engine leads
  }

  private fail(piece: FetchedPiece): void {
    Atomics.compareExchange(piece.state, STATUS, ARRIVING, FAILED);  // its fetch stops at the next bytes
    // A server that fails once (a fault, a replaced file) is left to the
    // engine, which retries and reports.
    if (Atomics.load(piece.state, STATUS) === FAILED) this.stopLeading();
  }
}

// EarlyRanges: the half of the early fetch (bridge/early-pieces.ts) that
// runs in the engine worker: it answers the engine's range requests from the
// pieces the page fetched, as their bytes arrive.

import {
  ARRIVED, ARRIVING, CACHE, CONTENT_RANGE, DISPOSED, FAILED, IS_LEADING, LEADING, NOT_LEADING, OFFERED, OFFERING, POLL_MS,
  STATUS, TAKEN, WAITING, sleep,
} from '../bridge/early-pieces.js';
import type { EarlyBlocks, EarlyFile, EarlyPiece } from '../bridge/early-pieces.js';
import { sinkFor } from '../bridge/range-fetch.js';
import type { HeapTarget, RangeAnswer } from '../bridge/range-fetch.js';

// Fetches a range to its place in the heap (RangeFetcher.fetch).
export type FetchRange = (url: string, offset: number, length: number, timeoutMs: number,
                          target: HeapTarget) => Promise<RangeAnswer>;

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

  // Called for each of the engine's range requests (the worker's startRange): the answer
  // when pieces here hold a part of it (the rest fetched beside), null to
  // fetch it as usual.
  serve(url: string, offset: number, length: number, timeoutMs: number, target: HeapTarget,
        fetchRange: FetchRange): Promise<RangeAnswer> | null {
    if (this.disposed || url !== this.url || length <= 0) return null;
    // Pieces offered whose message has not been received yet: wait for them.
    if (this.received < Atomics.load(this.control, OFFERED)) {
      return this.whenOffered(url, offset, length, timeoutMs, target, fetchRange);
    }
    if (this.validators === null) {
      // The engine is quicker than the first answer: it leads.
      if (this.stopLeading()) return this.whenOffered(url, offset, length, timeoutMs, target, fetchRange);
      return null;
    }
    // A range past the end of the file gets what the file has, as from the server.
    if (offset >= this.validators.total) return null;
    length = Math.min(length, this.validators.total - offset);
    if (this.awaitsBlockPieces(offset, offset + length)) {
      return this.whenOffered(url, offset, length, timeoutMs, target, fetchRange);
    }
    if (this.skippedByTheBlocks(offset, offset + length)) return null;
    const chain = this.chain(offset, offset + length);
    if (chain.length === 0) {
      // Past every piece: from here on the engine leads. (Before them, it
      // reads the embeddings of its prompt, and the fetching goes on.)
      const last = this.pieces[this.pieces.length - 1];
      if ((last === undefined || offset >= last.offset + last.length) && this.stopLeading()) {
        return this.whenOffered(url, offset, length, timeoutMs, target, fetchRange);
      }
      return null;
    }
    const start = Math.max(offset, chain[0].offset);
    // The parts the pieces do not hold lie outside the blocks (checked
    // above while the caller leads): they are fetched beside.
    const last = chain[chain.length - 1];
    const covered = Math.min(offset + length, last.offset + last.length);
    return this.answer(chain, offset, length, start, covered, timeoutMs, target, fetchRange);
  }

  // A request for block bytes that the caller's pieces do not cover yet,
  // while it leads: they will, in order.
  private awaitsBlockPieces(offset: number, end: number): boolean {
    if (this.blocks === null) return false;
    if (Atomics.load(this.control, LEADING) === NOT_LEADING || Atomics.load(this.control, DISPOSED) === 1) return false;
    return this.blocks.ranges.some(([begin, stop]) => {
      const from = Math.max(offset, begin);
      const to = Math.min(end, stop);
      if (from >= to) return false;
      const chain = this.chain(from, to);
      if (chain.length === 0 || chain[0].offset > from) return true;
      const last = chain[chain.length - 1];
      return last.offset + last.length < to;
    });
  }

  // Bytes among the blocks that the caller does not fetch (a mixture of
  // experts' experts): the engine fetches them, and the caller still leads.
  private skippedByTheBlocks(offset: number, end: number): boolean {
    const ranges = this.blocks?.ranges ?? [];
    if (ranges.length === 0 || offset < ranges[0][0] || end > ranges[ranges.length - 1][1]) return false;
    return !ranges.some(([begin, stop]) => offset < stop && begin < end);
  }

  // Serves a request once every piece offered has been received and, for
  // block bytes, once pieces cover them (or the fetching ahead has ended).
  // The caller's side goes past its limit on held bytes while the engine
  // waits, so that a unit longer than that limit comes too.
  private async whenOffered(url: string, offset: number, length: number, timeoutMs: number, target: HeapTarget,
                            fetchRange: FetchRange): Promise<RangeAnswer> {
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
    const served = this.serve(url, offset, length, timeoutMs, target, fetchRange);
    return served ?? fetchRange(url, offset, length, timeoutMs, target);
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
                       timeoutMs: number, target: HeapTarget, fetchRange: FetchRange): Promise<RangeAnswer> {
    const v = this.validators as EarlyFile;
    const end = offset + length;
    const fetchPart = (from: number, to: number) => (from < to
      ? fetchRange(this.url, from, to - from, timeoutMs, { ...target, dst: target.dst + from - offset })
        .then((r) => ({ r, from, to }))
      : null);
    const parts = [fetchPart(offset, start), fetchPart(covered, end)];
    const problem = await this.copy(chain, start, covered, offset, length, timeoutMs, target);
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
  private async copy(chain: Piece[], start: number, covered: number, offset: number, length: number,
                     timeoutMs: number, target: HeapTarget): Promise<{ failure: string; error: string } | null> {
    const { sink, onBytes } = sinkFor(target, offset, length);
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
          onBytes?.();
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

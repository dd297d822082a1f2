// RangeFetcher: runs range requests (range-fetch.ts) on short-lived
// workers in a browser, on the asking thread elsewhere.
//
// Why workers, and why short-lived: every body a browser hands to a page
// leaves native memory behind in the thread that read it (the stream's
// chunks, of up to 2 MiB each in Chromium), which that thread's garbage
// collectors give back late or not at all; a forced collection every 32 MiB
// did not give it back. Measured in Chromium on this project's 2-core
// machine, a 610 MB file read in 8 MiB ranges, three at a time, into shared
// memory: the renderer held 200-230 MB more than the file when one thread
// read it all, 40 MB when each worker read 64 MiB and was then ended (the
// same time: 7.9 s against 8.3). Ending a worker frees what it held at once.
// The engine's own thread and the page's are never ended, so neither reads
// a body itself.

import type { RangeAnswer, RangeHead, RangeTarget } from './range-fetch.js';
import { fetchTo } from './range-fetch.js';

// What a worker reads before it is replaced.
const BYTES_PER_WORKER = 64 << 20;
// A worker without requests for this long is ended too.
const IDLE_MS = 2000;

// Between a RangeFetcher and its workers.
export interface RangeFetchRequest {
  id: number;
  url: string;
  offset: number;
  length: number;
  timeoutMs: number;
  target: RangeTarget;
}
export type RangeFetchReply = { id: number; head: RangeHead } | { id: number; answer: RangeAnswer };

interface Pending {
  resolve: (answer: RangeAnswer) => void;
  onHead?: (head: RangeHead) => void;
}

interface FetchWorker {
  worker: Worker;
  assigned: number;  // bytes asked of it
  pending: Map<number, Pending>;
  idle: ReturnType<typeof setTimeout> | null;
}

export class RangeFetcher {
  private current: FetchWorker | null = null;
  private readonly retired = new Set<FetchWorker>();
  private nextId = 1;
  // Workers could not be started here (none in this realm, or the first
  // one failed, as under a policy that forbids them): each request runs on
  // this thread.
  private inThread = typeof Worker !== 'function' ||
    (typeof process === 'object' && typeof process.versions?.node === 'string');
  private failure = '';  // why workers are not used, when one failed
  private closed = false;
  private brokenForTest = false;

  // Whether requests run on workers, and why not when one failed.
  get state(): { workers: boolean; error: string } {
    return { workers: !this.inThread, error: this.failure };
  }

  // The range's bytes to `target`. onHead receives the response's head
  // before its body (once it has been accepted, for a piece).
  fetch(url: string, offset: number, length: number, timeoutMs: number, target: RangeTarget,
        onHead?: (head: RangeHead) => void): Promise<RangeAnswer> {
    if (this.inThread || this.closed) return fetchTo(url, offset, length, timeoutMs, target, onHead);
    const fetcher = this.worker(length);
    const id = this.nextId++;
    return new Promise((resolve) => {
      fetcher.pending.set(id, { resolve, onHead });
      const request: RangeFetchRequest = { id, url, offset, length, timeoutMs, target };
      fetcher.worker.postMessage(request);
    });
  }

  // Starts the worker the next request will go to, so that its start is
  // not on that request's time.
  warm(): void {
    if (!this.inThread && !this.closed && this.current === null) this.current = this.start();
  }

  // For the package's own tests: the next worker fails to start (as under a
  // policy that forbids it), the current one ends once its requests have.
  breakForTest(): void {
    this.brokenForTest = true;
    if (this.current !== null) this.retire(this.current);
    this.current = null;
  }

  // No more requests: each worker ends once its requests have.
  close(): void {
    this.closed = true;
    if (this.current !== null) this.retire(this.current);
    this.current = null;
  }

  // The worker for the next `length` bytes: the current one while it has
  // read less than BYTES_PER_WORKER, else a new one.
  private worker(length: number): FetchWorker {
    let fetcher = this.current;
    if (fetcher !== null && fetcher.assigned >= BYTES_PER_WORKER) {
      this.retire(fetcher);
      fetcher = null;
    }
    if (fetcher === null) {
      fetcher = this.start();
      this.current = fetcher;
    }
    if (fetcher.idle !== null) clearTimeout(fetcher.idle);
    fetcher.idle = null;
    fetcher.assigned += length;
    return fetcher;
  }

  private start(): FetchWorker {
    // A literal `new URL('...', import.meta.url)`, as bundlers recognise it
    // (see worker/module-loader.ts).
    const worker = this.brokenForTest
      ? new Worker('data:text/javascript,throw new Error("broken for a test")', { type: 'module' })
      : new Worker(new URL('./range-fetch-worker.js', import.meta.url), { type: 'module', name: 'sipllm-fetch' });
    const fetcher: FetchWorker = { worker, assigned: 0, pending: new Map(), idle: null };
    worker.onmessage = (event: MessageEvent<RangeFetchReply>) => {
      const reply = event.data;
      const pending = fetcher.pending.get(reply.id);
      if (pending === undefined) return;
      if ('head' in reply) {
        pending.onHead?.(reply.head);
        return;
      }
      fetcher.pending.delete(reply.id);
      pending.resolve(reply.answer);
      this.settled(fetcher);
    };
    worker.onerror = (event) => {
      event.preventDefault();
      // Its requests fail (the engine retries them; an early piece is left
      // to the engine), and the next ones run on this thread.
      this.inThread = true;
      const why = event.message || 'it could not be started';
      this.failure = `a fetch worker failed (${why}): range requests run on the engine worker's thread`;
      for (const pending of fetcher.pending.values()) {
        pending.resolve({ status: 0, bodyBytes: 0, error: `request failed: the fetch worker failed (${why})` });
      }
      fetcher.pending.clear();
      this.end(fetcher);
    };
    return fetcher;
  }

  private settled(fetcher: FetchWorker): void {
    if (fetcher.pending.size > 0) return;
    if (this.retired.has(fetcher)) {
      this.end(fetcher);
    } else {
      // Idle: ended (the next request starts another), so that what it
      // holds is not kept through a long pause.
      fetcher.idle = setTimeout(() => this.end(fetcher), IDLE_MS);
    }
  }

  private retire(fetcher: FetchWorker): void {
    if (fetcher.pending.size === 0) this.end(fetcher);
    else this.retired.add(fetcher);
  }

  private end(fetcher: FetchWorker): void {
    if (fetcher.idle !== null) clearTimeout(fetcher.idle);
    this.retired.delete(fetcher);
    if (this.current === fetcher) this.current = null;
    fetcher.worker.terminate();
  }
}

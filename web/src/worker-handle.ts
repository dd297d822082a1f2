// The page's end of one engine worker: starts it (a module Web Worker, or a
// Node worker thread), matches replies to requests, routes events.

import { isNode, nodeImport } from './env.js';
import { SipLLMError, errorFromKind } from './errors.js';
import type { LoadProgress } from './types.js';
import type { Reply, Request } from './protocol.js';

type Distribute<T> = T extends unknown ? Omit<T, 'id'> : never;
export type RequestBody = Distribute<Request>;

interface Pending {
  resolve(value: unknown): void;
  reject(error: Error): void;
  onProgress?: (progress: LoadProgress) => void;
  onTokens?: (pieces: string[]) => void;
}

interface WorkerLike {
  postMessage(message: unknown): void;
  terminate(): unknown;
}

export class WorkerHandle {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Map<number, (progress: LoadProgress) => void>();
  private stopped: Error | null = null;
  readonly exited: Promise<void>;
  private markExited!: () => void;

  private constructor(private readonly worker: WorkerLike, private readonly ref: (held: boolean) => void) {
    this.exited = new Promise((resolve) => {
      this.markExited = resolve;
    });
  }

  static async start(): Promise<WorkerHandle> {
    if (isNode) {
      const { Worker } = await nodeImport<typeof import('node:worker_threads')>('node:worker_threads');
      // (Not the literal pattern below: a bundler would copy the file as an asset.)
      const here = import.meta.url;
      const worker = new Worker(new URL('./worker.js', here));
      const handle = new WorkerHandle(worker, (held) => (held ? worker.ref() : worker.unref()));
      worker.on('message', (reply: Reply) => handle.receive(reply));
      worker.on('error', (error: Error) => handle.fail(`the engine worker failed: ${error.message}`));
      worker.on('exit', (code: number) => {
        handle.fail(`the engine worker stopped (exit code ${code})`);
        handle.markExited();
      });
      worker.unref();
      return handle;
    }
    // In one expression, as bundlers (Vite, webpack, Rollup plugins) recognise
    // it: they then build worker.js with its imports into a worker chunk.
    const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module', name: 'sipllm-engine' });
    const handle = new WorkerHandle(worker, () => {});
    worker.onmessage = (event: MessageEvent<Reply>) => handle.receive(event.data);
    worker.onerror = (event: ErrorEvent) => {
      event.preventDefault();
      handle.fail(`the engine worker failed: ${event.message || 'it could not start'}`);
    };
    return handle;
  }

  get alive(): boolean {
    return this.stopped === null;
  }

  // Progress events of a load keep coming after its reply (the weights stream
  // during the first requests); they go to this listener.
  listen(loadId: number, onProgress: (progress: LoadProgress) => void): void {
    this.listeners.set(loadId, onProgress);
  }

  send<T>(body: RequestBody, hooks: Omit<Pending, 'resolve' | 'reject'> = {}): { id: number; reply: Promise<T> } {
    const id = this.nextId++;
    const reply = new Promise<T>((resolve, reject) => {
      if (this.stopped !== null) {
        reject(this.stopped);
        return;
      }
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject, ...hooks });
      if (this.pending.size === 1) this.ref(true);
      this.worker.postMessage({ ...body, id });
    });
    return { id, reply };
  }

  request<T>(body: RequestBody): Promise<T> {
    return this.send<T>(body).reply;
  }

  // Not a request: no reply.
  post(body: RequestBody): void {
    if (this.stopped === null) this.worker.postMessage({ ...body, id: 0 });
  }

  private receive(reply: Reply): void {
    if (reply.type === 'progress') {
      this.pending.get(reply.id)?.onProgress?.(reply.progress);
      this.listeners.get(reply.id)?.(reply.progress);
      return;
    }
    const pending = this.pending.get(reply.id);
    if (pending === undefined) return;
    if (reply.type === 'tokens') {
      pending.onTokens?.(reply.pieces);
      return;
    }
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.ref(false);
    if (reply.type === 'result') pending.resolve(reply.value);
    else pending.reject(errorFromKind(reply.kind, reply.message));
  }

  private fail(message: string): void {
    if (this.stopped !== null) return;
    this.stopped = new SipLLMError('internal', message);
    for (const pending of this.pending.values()) pending.reject(this.stopped);
    this.pending.clear();
    this.ref(false);
  }

  async terminate(): Promise<void> {
    if (this.stopped === null) this.fail('the engine worker was stopped');
    await this.worker.terminate();
    if (!isNode) this.markExited();
    await this.exited;
  }
}

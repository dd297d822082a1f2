// The page's end of one engine worker: starts it (a module Web Worker, or a
// Node worker thread), matches replies to requests, routes events.

import { canShareMemory, isNode, isThreadedBuild, nodeImport } from '../env.js';
import { EngineStalledError, SipLLMError, errorFromKind } from '../errors.js';
import { MIRROR_PRESENT, MIRROR_WORDS, readEngineProbe, readWorkerWords } from '../probe.js';
import type { ProbeMirrorStart } from './probe-mirror.js';
import type { StallDump } from '../probe.js';
import type { Build, LoadProgress } from '../types.js';
import type { Answered, Replies, Reply, Request } from '../bridge/protocol.js';

type Distribute<T> = T extends unknown ? Omit<T, 'id'> : never;
export type RequestBody = Distribute<Request>;
// A request the worker answers, and what it answers with.
type AnsweredBody = RequestBody & { type: Answered };

interface Pending {
  type: string;
  sentAt: number;
  resolve(value: unknown): void;
  reject(error: Error): void;
  onProgress?: (progress: LoadProgress) => void;
  onTokens?: (pieces: string[]) => void;
}

interface WorkerLike {
  postMessage(message: unknown): void;
  terminate(): unknown;
}

// How the page notices a worker that stopped moving: while a request waits
// for its answer, every message from the worker (a token, a byte count, the
// engine's 'alive' about every 250 ms of work) is a sign of life; none for
// `timeoutMs` is a stall. The engine's words (probe.ts) say what it was doing.
export interface Watch {
  timeoutMs: number;  // 0: no watch
  words: Int32Array | null;
  probe: { memory: SharedArrayBuffer; address: number } | null;  // Node: the memory itself (a browser mirrors it)
  onStall(error: EngineStalledError): void;
}

export class WorkerHandle {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly listeners = new Map<number, (progress: LoadProgress) => void>();
  private stopped: Error | null = null;
  readonly exited: Promise<void>;
  private markExited!: () => void;
  readonly watch: Watch = { timeoutMs: 0, words: null, probe: null, onStall: () => {} };
  private heardAt = 0;
  private watchdog: ReturnType<typeof setInterval> | null = null;
  // A browser's copy of the engine's probe (probe.ts), and the worker that keeps it.
  private mirror: { worker: Worker; words: Int32Array } | null = null;

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
      const worker = new Worker(new URL('../worker/worker.js', here));
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
    const worker = new Worker(new URL('../worker/worker.js', import.meta.url), { type: 'module', name: 'sipllm-engine' });
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

  send<B extends AnsweredBody>(body: B, hooks: Pick<Pending, 'onProgress' | 'onTokens'> = {}):
      { id: number; reply: Promise<Replies[B['type']]> } {
    const id = this.nextId++;
    const reply = new Promise<Replies[B['type']]>((resolve, reject) => {
      if (this.stopped !== null) {
        reject(this.stopped);
        return;
      }
      this.pending.set(id, { ...hooks, type: body.type, sentAt: performance.now(), resolve: resolve as (value: unknown) => void, reject });
      if (this.pending.size === 1) {
        this.ref(true);
        this.heardAt = performance.now();
        this.startWatchdog();
      }
      // The probe mirror's port goes with the init (see InitRequest).
      const port = body.type === 'init' ? this.startMirror(body.build) : null;
      if (port !== null) (this.worker as Worker).postMessage({ ...body, id, probePort: port }, [port]);  // a browser's
      else this.worker.postMessage({ ...body, id });
    });
    return { id, reply };
  }

  // A browser's threaded builds: the worker that mirrors the engine's probe
  // (probe.ts), and the port the engine worker tells it where the probe is on.
  private startMirror(build: Build): MessagePort | null {
    if (isNode || !isThreadedBuild(build) || !canShareMemory() || this.mirror !== null) return null;
    const words = new Int32Array(new SharedArrayBuffer(4 * MIRROR_WORDS));
    const channel = new MessageChannel();
    const worker = new Worker(new URL('./probe-mirror.js', import.meta.url), { type: 'module', name: 'sipllm-probe' });
    const start: ProbeMirrorStart = { mirror: words.buffer as SharedArrayBuffer, port: channel.port2 };
    worker.postMessage(start, [channel.port2]);
    this.mirror = { worker, words };
    return channel.port1;
  }

  request<B extends AnsweredBody>(body: B): Promise<Replies[B['type']]> {
    return this.send(body).reply;
  }

  // Not a request: no reply.
  post(body: RequestBody): void {
    if (this.stopped === null) this.worker.postMessage({ ...body, id: 0 });
  }

  private receive(reply: Reply): void {
    this.heardAt = performance.now();
    if (reply.type === 'alive') return;
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
    if (this.pending.size === 0) this.idle();
    if (reply.type === 'result') pending.resolve(reply.value);
    else pending.reject(errorFromKind(reply.kind, reply.message, reply.option));
  }

  private idle(): void {
    this.ref(false);
    if (this.watchdog !== null) clearInterval(this.watchdog);
    this.watchdog = null;
  }

  private startWatchdog(): void {
    const timeoutMs = this.watch.timeoutMs;
    if (timeoutMs <= 0 || this.watchdog !== null) return;
    this.watchdog = setInterval(() => this.checkProgress(), Math.min(1000, Math.max(50, timeoutMs / 4)));
    // Node: the pending request holds the process open, not this timer.
    (this.watchdog as { unref?: () => void }).unref?.();
  }

  private checkProgress(): void {
    const silentMs = performance.now() - this.heardAt;
    if (this.stopped !== null || this.pending.size === 0 || silentMs < this.watch.timeoutMs) return;
    const dump = this.dump(silentMs);
    const error = new EngineStalledError(`the engine made no progress for ${Math.round(silentMs / 1000)} s ` +
                                         `(${describeStall(dump)}); its worker was stopped, and the next ` +
                                         'request loads the model again', dump);
    this.stop(error);
    void this.terminate();
    this.watch.onStall(error);
  }

  // What the page knows, and what the shared words say when there are any.
  dump(silentMs = performance.now() - this.heardAt): StallDump {
    const now = performance.now();
    const { words, probe } = this.watch;
    const mirror = this.mirror?.words;
    const mirrored = mirror !== undefined && Atomics.load(mirror, MIRROR_PRESENT) === 1;
    return {
      stalledForMs: Math.round(silentMs),
      pending: [...this.pending].map(([id, p]) => ({ id, type: p.type, waitingMs: Math.round(now - p.sentAt) })),
      worker: words !== null ? readWorkerWords(words) : null,
      engine: probe !== null ? readEngineProbe(probe.memory, probe.address)
        : mirrored ? readEngineProbe(mirror.buffer as SharedArrayBuffer, 0) : null,
    };
  }

  private fail(message: string): void {
    this.stop(new SipLLMError('internal', message));
  }

  private stop(error: SipLLMError): void {
    if (this.stopped !== null) return;
    this.stopped = error;
    for (const pending of this.pending.values()) pending.reject(error);
    this.pending.clear();
    this.idle();
  }

  async terminate(): Promise<void> {
    if (this.stopped === null) this.fail('the engine worker was stopped');
    this.mirror?.worker.terminate();  // and with it the engine's memory
    await this.worker.terminate();
    if (!isNode) this.markExited();
    await this.exited;
  }
}

// One line of what a stall dump says, for the error's message.
function describeStall(dump: StallDump): string {
  const parts = [`waiting: ${dump.pending.map((p) => `${p.type} #${p.id}`).join(', ') || 'nothing'}`];
  const w = dump.worker;
  if (w !== null) {
    parts.push(w.request !== 0 ? `the worker runs ${w.requestType} #${w.request}` : 'the worker is between requests');
    if (w.request !== 0 && w.sinceTickMs > 1000) parts.push(`its thread has not run for ${Math.round(w.sinceTickMs / 1000)} s`);
  }
  const e = dump.engine;
  if (e !== null) {
    parts.push(`the engine's ${e.job} job is ${e.jobState}${e.jobCancelled ? ' (cancelled)' : ''}`);
    if (w !== null && w.jobsSeen < e.jobsDone) parts.push(`${e.jobsDone - w.jobsSeen} job end(s) not seen by the worker`);
    if (e.waitingForUnit >= 0) parts.push(`it waits for unit ${e.waitingForUnit}`);
    if (e.httpInFlight > 0) parts.push(`${e.httpInFlight} range request(s) in flight`);
  }
  return parts.join('; ');
}

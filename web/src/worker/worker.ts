// The engine worker: one WebAssembly module and at most one open model, run
// off the page's thread (a Web Worker in a browser, a worker thread under
// Node). Requests are handled one at a time, in order; only 'cancel' is
// handled at once. See bridge/protocol.ts for the messages.

import { EarlyRanges } from './early-ranges.js';
import type { FetchRange } from './early-ranges.js';
import { fetchRange } from '../bridge/range-fetch.js';
import type { HeapTarget, RangeAnswer } from '../bridge/range-fetch.js';
import { RangeFetcher } from '../bridge/range-fetcher.js';
import { isNode, isThreadedBuild, nodeImport } from '../env.js';
import { loadEngineModule } from './module-loader.js';
import type { Answer, ByteProgress, EngineEvent, EngineModule, EngineSession, JobOutcome, LiveUnit, Registry } from './module-loader.js';
import type {
  Answered, CacheLocation, EmbedRequest, EmbedResult, GenerateRequest, GenerateResult, InitRequest, LoadRequest, LoadResult, Replies, Reply,
  Request, RequestOf, TestHook,
} from '../bridge/protocol.js';
import { REQUEST_TYPES, WorkerWords, tickNow } from '../probe.js';
import { splitPartUrls } from '../split-names.js';
import { DirectoryStore, OpfsStore } from './stores.js';
import type { SyncStore } from './stores.js';
import type { EngineOpenOptions } from '../bridge/bridge.generated.js';
import type { Build, GenerationStats, LoadProgress, LoadTimes, Stats, UnitProgress, UnitState } from '../types.js';

const MODEL_STORE_ID = 1;
const QUERY_STORE_ID = 2;
const MODEL_BYTES_ID = 1;
// A cached model's index entry in the store ends so (page_cache.cpp, cache_index_name).
const CACHE_INDEX_SUFFIX = '.index';
// How often the units' states are looked at while a job runs.
const UNIT_POLL_MS = 100;
// Bytes arrived this recently: the loader is fetching.
const BYTES_MOVING_MS = 1000;
// As often as the engine's own 'alive' (wasm-bindings/session.cpp).
const ALIVE_WHILE_COMPILING_MS = 250;

// ms since the Unix epoch, comparable across threads and processes.
function epochMs(): number {
  return performance.timeOrigin + performance.now();
}

// Before anything else: when the worker's script started (LoadTimes).
const workerStartedAt = epochMs();

class Failure extends Error {
  constructor(readonly kind: string, message: string, readonly option?: string) {
    super(message);
  }
}

function fail(error: { kind: string; message: string; option?: string } | undefined): Failure {
  return new Failure(error?.kind ?? 'internal', error?.message ?? 'unknown error', error?.option);
}

function unwrap<T>(answer: Answer<T>): T {
  if (answer.error) throw fail(answer.error);
  return answer.value as T;
}

interface Endpoint {
  post(reply: Reply, transfer?: Transferable[]): void;
  listen(handler: (request: Request) => void): void;
}

// Node's port queues the messages that arrive before its listener is set.
async function nodeEndpoint(): Promise<Endpoint> {
  const { parentPort } = await nodeImport<typeof import('node:worker_threads')>('node:worker_threads');
  if (parentPort === null) throw new Error('the engine worker must run in a worker thread');
  return {
    post: (reply) => parentPort.postMessage(reply),
    listen: (handler) => parentPort.on('message', handler),
  };
}

function webEndpoint(): Endpoint {
  const scope = globalThis as unknown as {
    postMessage(message: unknown): void;
    onmessage: ((event: { data: Request }) => void) | null;
  };
  return {
    post: (reply) => scope.postMessage(reply),
    listen: (handler) => {
      scope.onmessage = (event) => handler(event.data);
    },
  };
}

class EngineWorker {
  private module: EngineModule | null = null;
  private build: Build = 'single';
  private words: Int32Array | null = null;  // WorkerWords, shared with the page
  private probePort: NonNullable<InitRequest['probePort']> | null = null;  // to the page's probe mirror
  private queued = 0;
  private readonly registry: Registry;
  private readonly fetcher = new RangeFetcher();

  private session: EngineSession | null = null;
  private sessionId = 0;
  private loadId = 0;          // progress events belong to the load request
  private threads = 1;
  private memoryBudget: number | null = null;
  private store: SyncStore | null = null;
  private opening: { id: number; store: Promise<SyncStore> } | null = null;  // the load's store, opened on arrival
  private cacheError = '';

  private job: { id: number; resolve: (outcome: JobOutcome) => void } | null = null;
  // Sessions being closed, by id: resolved by their 'closed' event.
  private readonly closing = new Map<number, () => void>();
  private warming: Promise<void> | null = null;  // the warm-up job after a load
  private warmUpAbandoned = false;
  private tokensAtCancel: number | undefined;
  private lastGeneration: GenerationStats | null = null;
  private progress: LoadProgress = { phase: 'header', loaded: 0, total: 0, fetched: 0, fromCache: 0, units: [] };
  private arrived: boolean[] = [];  // per unit: it has arrived at least once
  private cacheKeeps = false;       // fetched bytes go to the persistent cache
  private bytesMovedAt = -Infinity;
  private unitsPolledAt = -Infinity;
  private readySent = false;
  private moduleReadyAt = 0;
  private loadTimes: LoadTimes = { calledAt: 0, workerStartedAt, moduleReadyAt: 0, headerReadAt: 0 };
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly endpoint: Endpoint) {
    this.registry = {
      stores: new Map(),
      bytes: new Map(),
      onEvent: (sessionId, kind, data) => this.onEvent(sessionId, kind, data),
      early: null,
      startRange: (url, offset, length, timeoutMs, call, dst) => this.startRange(url, offset, length, timeoutMs, call, dst),
      fetchRangeSource: fetchRange.toString(),
    };
  }

  receive(request: Request): void {
    if (request.type === 'cancel') {
      this.cancel(request.target);
      return;
    }
    if (request.type === 'testHook') {
      // At once, as a cancel: the hook is for what is queued or running.
      void this.answer(request.id, async () => this.handlers.testHook(request));
      return;
    }
    if (request.type === 'early-file' || request.type === 'early-blocks' || request.type === 'early-piece') {
      this.registry.early?.receive(request);
      return;
    }
    if (request.type === 'init') {
      this.build = request.build;
      this.words = request.words;
      this.probePort = request.probePort ?? null;
    }
    if (request.type === 'load') {
      this.fetchEarly(request);
      if (isThreadedBuild(this.build)) this.fetcher.warm();  // while the module starts (host.js startRange)
    }
    this.show(WorkerWords.queued, ++this.queued);
    this.queue = this.queue.then(() => this.run(request));
  }

  private show(word: number, value: number): void {
    if (this.words !== null) Atomics.store(this.words, word, value);
  }

  // A load arrives while the module is still being made (the page sends it
  // right after 'init'), and the caller fetches its first pieces meanwhile
  // (bridge/early-pieces.ts) when it gave `early`. With a persistent cache, only
  // when the cache holds no model at all: a cached model must not cost a
  // request, and which entry is whose is the engine's to say. The store is
  // opened now; the load uses it.
  private fetchEarly(request: LoadRequest): void {
    if (request.url === undefined || request.early === null) return;
    if (this.session !== null || this.registry.early !== null) {
      EarlyRanges.refuse(request.early);  // the load is refused anyway
      return;
    }
    const early = new EarlyRanges(request.url, request.early);
    this.registry.early = early;
    if (request.cache === null) return;
    const store = this.openStore(request.cache);
    this.opening = { id: request.id, store };
    store.then((opened) => {
      early.cacheHoldsModel(opened.list().some(([name]) => name.endsWith(CACHE_INDEX_SUFFIX)));
    }, () => early.cacheHoldsModel(true));
  }

  // The early pieces answer what they hold (early-ranges.ts); the rest is
  // fetched by this worker's RangeFetcher.
  private startRange(url: string, offset: number, length: number, timeoutMs: number, call: number,
                     dst: number): Promise<RangeAnswer> {
    const target: HeapTarget = { kind: 'heap', memory: this.engine().sipllmHost.wasmMemory(), call, dst };
    const fetch: FetchRange = (u, o, l, t, into) => this.fetcher.fetch(u, o, l, t, into);
    let served: Promise<RangeAnswer> | null = null;
    try {
      served = this.registry.early?.serve(url, offset, length, timeoutMs, target, fetch) ?? null;
    } catch {
      served = null;  // never the engine's problem: the range is fetched as usual
    }
    return served ?? fetch(url, offset, length, timeoutMs, target);
  }

  private dropEarly(): void {
    this.registry.early?.dispose();
    this.registry.early = null;
  }

  private async run(request: Request): Promise<void> {
    if (this.warming !== null) {
      // A request ends the warm-up (it needs the cores more, and the first
      // weights keep arriving meanwhile); an unload also stops the loader.
      this.warmUpAbandoned = true;
      if (request.type === 'unload') this.session?.cancel();
      else this.session?.endWarmUp();
      await this.warming;
    }
    this.show(WorkerWords.request, request.id);
    this.show(WorkerWords.requestType, Math.max(0, REQUEST_TYPES.indexOf(request.type as (typeof REQUEST_TYPES)[number])));
    await this.answer(request.id, () => this.dispatch(request));
    this.show(WorkerWords.request, 0);
    this.show(WorkerWords.requestType, 0);
    this.show(WorkerWords.queued, --this.queued);
  }

  private async answer(id: number, work: () => Promise<Replies[Answered]>): Promise<void> {
    try {
      const value = await work();
      this.endpoint.post({ type: 'result', id, value });
    } catch (error) {
      const kind = error instanceof Failure ? error.kind : 'internal';
      const message = error instanceof Error ? error.message : String(error);
      const option = error instanceof Failure ? error.option : undefined;
      this.endpoint.post({ type: 'error', id, kind, message, ...(option !== undefined ? { option } : {}) });
    }
  }

  // Each answered request's handler, typed by what it answers (Replies).
  private readonly handlers: { [K in Answered]: (request: RequestOf<K>) => Promise<Replies[K]> | Replies[K] } = {
    init: (request) => this.init(request),
    load: (request) => this.load(request),
    generate: (request) => this.generate(request),
    embed: (request) => this.embed(request),
    grammar: (request) => {
      const module = this.engine();
      if (request.schema === null) return unwrap(module.jsonObjectGrammar());
      const calls = request.calls;
      return unwrap(calls === undefined
        ? module.jsonSchemaToGrammar(request.schema)
        : module.toolCallGrammar(request.schema, calls.open, calls.close, calls.parallel));
    },
    checkOptions: (request) => {
      unwrap(this.engine().checkGenerateOptions(request.options, request.nVocab));
      return null;
    },
    tokenize: (request) => Array.from(unwrap(this.open().tokenize(request.text, request.addSpecial, request.parseSpecial))),
    detokenize: (request) => unwrap(this.open().detokenize(request.tokens)),
    reset: () => {
      unwrap(this.open().reset());
      return this.snapshot();
    },
    stats: () => this.snapshot(),
    unload: async () => {
      await this.unload();
      return null;
    },
    listCache: (request) => this.withQueryStore(request.cache, (module) => unwrap(module.listCachedModels(QUERY_STORE_ID))),
    deleteCache: (request) =>
      this.withQueryStore(request.cache, (module) => unwrap(module.deleteCachedModel(QUERY_STORE_ID, request.url))),
    testHook: (request) => this.testHook(request.hook),
  };

  private async dispatch(request: Request): Promise<Replies[Answered]> {
    const handler = this.handlers[request.type as Answered] as ((r: Request) => Promise<Replies[Answered]> | Replies[Answered]) | undefined;
    if (handler === undefined) throw new Failure('invalid-argument', `unknown request ${request.type}`);
    return handler(request);
  }

  private async init(request: InitRequest): Promise<Replies['init']> {
    this.build = request.build;
    this.words = request.words;
    // The browser compiles the module off this thread, out of the engine's
    // sight: this thread says it is alive meanwhile, so that a slow compile
    // on a busy machine is not taken for a stall.
    const alive = setInterval(() => this.endpoint.post({ type: 'alive', id: request.id }), ALIVE_WHILE_COMPILING_MS);
    try {
      this.module = await loadEngineModule(request.build, request.wasmBaseUrl, request.poolSize);
    } finally {
      clearInterval(alive);
    }
    this.module.sipllmRegistry = this.registry;
    this.moduleReadyAt = epochMs();
    return { build: this.build };
  }

  private engine(): EngineModule {
    if (this.module === null) throw new Failure('internal', 'the engine worker was not initialised');
    return this.module;
  }

  private open(): EngineSession {
    if (this.session === null) throw new Failure('invalid-argument', 'no model is loaded');
    return this.session;
  }

  private async openStore(location: CacheLocation): Promise<SyncStore> {
    return location.kind === 'opfs' ? OpfsStore.open(location.directory) : DirectoryStore.open(location.directory);
  }

  private async withQueryStore<T>(location: CacheLocation, use: (module: EngineModule) => T): Promise<T> {
    const module = this.engine();
    const store = await this.openStore(location);
    this.registry.stores.set(QUERY_STORE_ID, store);
    try {
      return use(module);
    } finally {
      this.registry.stores.delete(QUERY_STORE_ID);
      await store.maintain();
      store.close();
    }
  }

  // Starts a job on the session and waits for its 'done' event (which, in the
  // single-thread build, arrives before start() even returns). While it runs
  // the units' states are polled (the single-thread build, busy meanwhile,
  // looks at them when it reports bytes instead).
  private async runJob(id: number, start: () => Answer<undefined>): Promise<JobOutcome> {
    const done = new Promise<JobOutcome>((resolve) => {
      this.job = { id, resolve };
    });
    this.updateUnits();
    const module = this.engine();
    const poll = setInterval(() => {
      this.show(WorkerWords.tick, tickNow());
      module.runQueuedCalls();
      this.updateUnits();
    }, UNIT_POLL_MS);
    let outcome: JobOutcome;
    try {
      const answer = start();
      if (answer.error) throw fail(answer.error);
      outcome = await done;
    } finally {
      clearInterval(poll);
      this.job = null;
    }
    this.updateUnits();
    await this.store?.maintain().catch((error: Error) => {
      this.cacheError = `cache upkeep failed: ${error.message}`;
    });
    return outcome;
  }

  private async load(request: LoadRequest): Promise<LoadResult> {
    const module = this.engine();
    if (this.session !== null) throw new Failure('invalid-argument', 'a model is already loaded in this worker');
    this.threads = request.options.threads;
    this.memoryBudget = request.options.memoryBudget ?? null;
    let cacheStoreId = 0;
    if (request.cache !== null) {
      try {
        const opening = this.opening?.id === request.id ? this.opening.store : null;
        this.opening = null;
        this.store = await (opening ?? this.openStore(request.cache));
        if (request.url !== undefined) await this.store.reserve(splitPartUrls(request.url).length);
        this.registry.stores.set(MODEL_STORE_ID, this.store);
        cacheStoreId = MODEL_STORE_ID;
      } catch (error) {
        this.cacheError = `the cache could not be opened, streaming without it: ${(error as Error).message}`;
      }
    }
    const options: EngineOpenOptions = { ...request.options, cacheStoreId };
    this.sessionId += 1;
    this.loadId = request.id;
    this.progress = { phase: 'header', loaded: 0, total: 0, fetched: 0, fromCache: 0, units: [] };
    this.arrived = [];
    this.readySent = false;
    const session = new module.Session(this.sessionId);
    this.session = session;
    const outcome = await this.runJob(request.id, () => {
      if (request.url !== undefined) return session.openUrl(request.url, options);
      const bytes = request.bytes as Uint8Array;
      this.registry.bytes.set(MODEL_BYTES_ID, bytes);
      return session.openBytes(MODEL_BYTES_ID, bytes.length, request.name, options);
    }).catch(async (error) => {
      await this.unload();
      throw error;
    });
    if (!outcome.ok) {
      await this.unload();
      throw fail(outcome.error);
    }
    this.loadTimes = { calledAt: request.calledAt, workerStartedAt, moduleReadyAt: this.moduleReadyAt, headerReadAt: epochMs() };
    // The memory as it is now holds the session's probe (it only grows). In
    // a browser the page's mirror holds it, not the page (probe.ts).
    const memory = module.sipllmHost.memory();
    let probe: LoadResult['probe'] = null;
    if (typeof SharedArrayBuffer !== 'undefined' && memory instanceof SharedArrayBuffer) {
      if (this.probePort !== null) this.probePort.postMessage({ memory, address: session.probeAddress() });
      else probe = { memory, address: session.probeAddress() };
    }
    const result: LoadResult = { info: unwrap(session.info()), stats: this.snapshot(), probe };
    this.cacheKeeps = result.stats.cache.enabled;
    if (request.warmUpMs > 0) this.startWarmUp(session, request.id, request.warmUpMs);
    return result;
  }

  // Not awaited by the load, whose answer goes out first (a single-thread
  // job keeps this thread busy until it ends): the next request ends it and
  // waits for it to stop (see run()). A warm-up that fails changes nothing a request depends on.
  private startWarmUp(session: EngineSession, loadId: number, milliseconds: number): void {
    this.warmUpAbandoned = false;
    const warming: Promise<void> = new Promise((resolve) => setTimeout(resolve, 0))
      .then(() => (this.warmUpAbandoned || this.session !== session
        ? undefined : this.runJob(loadId, () => session.warmUp(milliseconds))))
      .then(() => {}, () => {})
      .then(() => {
        if (this.warming === warming) this.warming = null;
      });
    this.warming = warming;
  }

  private async generate(request: GenerateRequest): Promise<GenerateResult> {
    const session = this.open();
    this.tokensAtCancel = undefined;
    if (this.words !== null && Atomics.load(this.words, WorkerWords.cancelTarget) === request.id) {
      throw new Failure('aborted', 'generation was aborted before it started');
    }
    const outcome = await this.runJob(request.id, () =>
      request.tokens !== undefined
        ? session.generateTokens(request.tokens, request.options)
        : session.generate(request.prompt ?? '', request.options));
    // The first pass has taken what the early pieces held.
    this.dropEarly();
    if (!outcome.ok) throw fail(outcome.error);
    if (outcome.stats === undefined) throw new Failure('internal', 'a generation ended without its statistics');
    const generation: GenerationStats = outcome.stats;
    if (this.tokensAtCancel !== undefined) generation.tokensAtCancel = this.tokensAtCancel;
    this.lastGeneration = generation;
    const stats = this.snapshot();
    this.cacheKeeps = stats.cache.enabled;
    return { generation, stats };
  }

  private async embed(request: EmbedRequest): Promise<EmbedResult> {
    const session = this.open();
    const outcome = await this.runJob(request.id, () => session.embed(request.texts, request.options));
    this.dropEarly();
    if (!outcome.ok) throw fail(outcome.error);
    const { vectors, tokens } = outcome.embeddings as NonNullable<JobOutcome['embeddings']>;
    return { vectors, tokens, stats: this.snapshot() };
  }

  private testHook(hook: TestHook): null {
    if (hook === 'block-worker') {
      // For good: only terminate() ends it, as it would end a worker stuck
      // for any other reason.
      if (typeof SharedArrayBuffer !== 'undefined') Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
      for (;;) { /* no shared memory to wait on */ }
    }
    if (hook === 'break-fetch-workers') {
      this.fetcher.breakForTest();
      return null;
    }
    if (hook === 'contend-engine-lock') {
      if (this.words !== null && this.job !== null) Atomics.store(this.words, WorkerWords.cancelTarget, this.job.id);
      this.open().holdEngineLock(300);
      return null;
    }
    unwrap(this.open().holdJobs(hook === 'hold-jobs'));
    return null;
  }

  private cancel(target: number): void {
    if (this.session === null || this.job === null || this.job.id !== target) return;
    const generated = this.session.cancel();
    if (this.tokensAtCancel === undefined) this.tokensAtCancel = generated;
  }

  // The engine frees the model on its job thread while this thread's event
  // loop runs (see Session::close).
  private async unload(): Promise<void> {
    const session = this.session;
    if (session !== null) {
      this.session = null;
      const closed = new Promise<void>((resolve) => this.closing.set(this.sessionId, resolve));
      session.close();
      await closed;
      session.delete();
    }
    this.dropEarly();
    this.registry.stores.delete(MODEL_STORE_ID);
    this.registry.bytes.delete(MODEL_BYTES_ID);
    this.store?.close();
    this.store = null;
  }

  private snapshot(): Stats {
    const raw = unwrap(this.open().stats());
    const source = raw.source ?? null;
    const cacheError = this.cacheError || source?.cacheError || '';
    const fetching = this.fetcher.state;
    return {
      build: this.build,
      load: this.loadTimes,
      threads: this.threads,
      crossOriginIsolated: (globalThis as { crossOriginIsolated?: boolean }).crossOriginIsolated === true,
      memoryBudget: this.memoryBudget,
      heapBytes: raw.heapBytes,
      kvCacheBytes: raw.kvCacheBytes,
      loader: raw.loader,
      source,
      cache: { enabled: this.store !== null && (source === null || source.caching), error: cacheError },
      fetch: { workers: isThreadedBuild(this.build) && fetching.workers, error: fetching.error },
      lastGeneration: this.lastGeneration,
    };
  }

  // ---- Events from the engine --------------------------------------------------

  private onEvent(sessionId: number, kind: EngineEvent, data?: unknown): void {
    if (kind === 'closed') {
      this.closing.get(sessionId)?.();
      this.closing.delete(sessionId);
      return;
    }
    const session = this.session;
    if (session === null || sessionId !== this.sessionId) return;
    if (kind === 'progress') {
      this.onProgress(data as ByteProgress);
      return;
    }
    const job = this.job;
    if (kind === 'alive') this.endpoint.post({ type: 'alive', id: job?.id ?? 0 });
    else this.sendTokens(session);
    if (kind === 'done' && this.words !== null) Atomics.add(this.words, WorkerWords.jobsSeen, 1);
    if (kind === 'done' && job !== null) {
      let outcome: JobOutcome;
      try {
        outcome = session.takeResult();
      } catch (error) {
        outcome = { ok: false, error: { kind: 'internal', message: `the job's result could not be read: ${String(error)}` } };
      }
      job.resolve(outcome);
    } else if (job !== null && this.words !== null && Atomics.load(this.words, WorkerWords.cancelTarget) === job.id) {
      // The page cannot reach a busy single-thread worker by message: it
      // looks at every event, the engine's 'alive' too (about every 250 ms
      // of work, in a long prompt as well).
      this.cancel(job.id);
    }
  }

  private sendTokens(session: EngineSession): void {
    const tokens = session.takeTokens();
    if (tokens.length === 0 || this.job === null) return;
    const pieces = tokens.map((t) => t.text).filter((text) => text.length > 0);
    if (pieces.length > 0) this.endpoint.post({ type: 'tokens', id: this.job.id, pieces });
  }

  private onProgress(event: ByteProgress): void {
    const last = this.progress;
    if (event.loaded < last.loaded && !this.readySent) return;  // overtaken by a later report
    this.bytesMovedAt = performance.now();
    let phase: LoadProgress['phase'] = 'weights';
    if (this.readySent) phase = 'ready';
    else if (event.header) phase = 'header';
    else if (event.fetched > last.fetched) phase = 'weights';
    else if (event.fromCache > last.fromCache || (event.fetched === 0 && event.fromCache > 0)) phase = 'cached';
    const loaded = this.readySent ? event.total : event.loaded;
    this.progress = { ...last, phase, loaded, total: event.total, fetched: event.fetched, fromCache: event.fromCache };
    // A single-thread job keeps this thread busy: its byte reports are the
    // only moments to look at the units.
    if (this.job !== null && performance.now() - this.unitsPolledAt >= UNIT_POLL_MS) this.updateUnits(false);
    this.postProgress();
  }

  private postProgress(): void {
    this.endpoint.post({ type: 'progress', id: this.loadId, progress: this.progress });
  }

  // Reads the loader's per-unit counters and works out each unit's state;
  // posts a progress event when one changed (unless the caller posts).
  private updateUnits(post = true): void {
    const session = this.session;
    if (session === null) return;
    this.unitsPolledAt = performance.now();
    const live: LiveUnit[] = session.liveUnits();
    if (live.length === 0) return;
    if (this.arrived.length !== live.length) this.arrived = live.map(() => false);
    // Arrivals are shown in stream order: with two units in flight the
    // second may land first, and counts once the one before it has.
    live.forEach((unit, i) => {
      if ((unit.loads > 0 || unit.used) && (i === 0 || this.arrived[i - 1])) this.arrived[i] = true;
    });
    const moving = this.job !== null && performance.now() - this.bytesMovedAt < BYTES_MOVING_MS;
    const next = moving ? this.arrived.indexOf(false) : -1;
    const units: UnitProgress[] = live.map((unit, i) => {
      let state: UnitState = i === next ? 'streaming' : 'waiting';
      if (this.arrived[i]) state = unit.resident ? 'resident' : 'streamed';
      return { name: unit.name, bytes: unit.bytes, state, cached: this.cacheKeeps && this.arrived[i] };
    });
    const previous = this.progress.units;
    const changed = units.length !== previous.length ||
      units.some((u, i) => u.state !== previous[i].state || u.cached !== previous[i].cached);
    this.progress = { ...this.progress, units };
    // Once every unit has arrived, the whole model has.
    if (!this.readySent && this.progress.total > 0 && this.arrived.every(Boolean)) {
      // The engine posts its byte reports from its own thread: the units can
      // all be in (the first pieces were fetched ahead) before this thread
      // has seen a report past the header. The phase they came through is
      // reported first all the same, as the header's came (the engine's
      // counters cannot be read while it works).
      if (this.progress.phase === 'header') {
        const cached = this.progress.fetched === 0 && this.progress.fromCache > 0;
        this.progress = { ...this.progress, phase: cached ? 'cached' : 'weights' };
        this.postProgress();
      }
      this.readySent = true;
      this.progress = { ...this.progress, phase: 'ready', loaded: this.progress.total };
    } else if (!changed) {
      return;
    }
    if (post) this.postProgress();
  }
}

function serve(endpoint: Endpoint): void {
  const worker = new EngineWorker(endpoint);
  endpoint.listen((request) => worker.receive(request));
}

// Without top-level await, so that a bundler may also build this worker as a
// classic script (Vite's default worker format, 'iife'). A Web Worker must
// listen before its script ends, or the first messages are lost.
if (isNode) void nodeEndpoint().then(serve);
else serve(webEndpoint());

// SipLLM: a model running in its own worker, streamed from a URL (or given
// as bytes).
//
//   const llm = await SipLLM.load(url, { memoryBudget, cache: true, onProgress });
//   for await (const piece of llm.generate('Once upon a time', { maxTokens: 64 })) ...
//   for await (const piece of llm.chat([{ role: 'user', content: 'Hi' }])) ...
//   await llm.chat.completions.create({ messages, response_format, tools, stream })  (openai/openai.ts)
//   await llm.embeddings.create({ input: ['a text', 'another'] })
//   llm.stats(); await llm.unload();

import { renderChatTemplate } from '../chat.js';
import { EarlyFetch } from './early-fetch.js';
import { canShareMemory, hasRelaxedSimd, isNode, isThreadedBuild, nodeImport } from '../env.js';
import { AbortError, EngineStalledError, InvalidArgumentError, SipLLMError, UnsupportedError } from '../errors.js';
import { ENGINE_LOAD_DEFAULTS, ENGINE_LOAD_OPTION_KEYS, NON_NEGATIVE_LOAD_OPTION_KEYS } from '../bridge/bridge.generated.js';
import type { EngineLoadOptions } from '../bridge/bridge.generated.js';
import { ChatCompletions, Completions, Embeddings } from '../openai/openai.js';
import type { CompletionEngine } from '../openai/openai.js';
import { splitPartUrls } from '../split-names.js';
import { WorkerWords } from '../probe.js';
import type { StallDump } from '../probe.js';
import type { CacheLocation, EngineGenerateOptions, LoadRequest, LoadResult, TestHook, ToolCallTags } from '../bridge/protocol.js';
import type {
  Build,
  CacheOptions,
  CachedModel,
  ChatMessage,
  ChatOptions,
  EmbedOptions,
  EmbedResult,
  GenerateOptions,
  GenerationStats,
  LoadOptions,
  LoadProgress,
  ModelInfo,
  Stats,
} from '../types.js';
import { WorkerHandle } from './worker-handle.js';

// Time enough for Chromium to replace its first-run code of the hot kernels
// with optimised code; the threaded build spends it while the first blocks
// download (see LoadOptions.warmUpMs).
const DEFAULT_WARM_UP_MS = 500;
// How long unload() lets the worker free the model in order before it stops
// the worker regardless (which frees everything too, but leaves a cache as
// the last write left it): a fault in the orderly close must not hang the
// caller. It is reported with a warning.
const UNLOAD_GRACE_MS = 10_000;
// A request that shows no progress for this long is a stall (LoadOptions.
// stallTimeoutMs): past any read timeout and its retry, far past the engine's
// 'alive' every 250 ms of work.
const DEFAULT_STALL_TIMEOUT_MS = 120_000;

type Source = { url: string } | { bytes: Uint8Array; name: string };

// Everything needed to start (or restart) the worker and load the model.
interface Plan {
  build: Build;
  poolSize: number;
  wasmBaseUrl: string | null;
  cache: CacheLocation | null;
  engineOptions: LoadRequest['options'];
  warmUpMs: number;
  stallTimeoutMs: number;
  onProgress?: (event: LoadProgress) => void;
}

// The worker resolves URLs against its own script, not the page: make a
// relative base ("/assets/wasm/") absolute here, against the page. null: the
// package's own files, which the worker locates itself (worker/module-loader.ts).
function resolveWasmBaseUrl(given: string | URL | undefined): string | null {
  if (given === undefined) return null;
  const base = typeof location !== 'undefined' ? location.href : import.meta.url;
  return new URL(String(given), base).href;
}

function chooseBuild(requested: LoadOptions['build']): Build {
  const threaded = canShareMemory();
  if (requested === 'threaded' || requested === 'relaxed') {
    if (!threaded) {
      throw new UnsupportedError(`the ${requested} build needs SharedArrayBuffer: serve the page with ` +
                                 'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp');
    }
    if (requested === 'relaxed' && !hasRelaxedSimd()) {
      throw new UnsupportedError('the relaxed build needs relaxed SIMD, which this runtime does not validate');
    }
    return requested;
  }
  if (requested === 'single') return 'single';
  if (!threaded) return 'single';
  return hasRelaxedSimd() ? 'relaxed' : 'threaded';
}

async function defaultThreads(): Promise<number> {
  if (isNode) {
    const os = await nodeImport<typeof import('node:os')>('node:os');
    return os.availableParallelism();
  }
  return (globalThis as { navigator?: { hardwareConcurrency?: number } }).navigator?.hardwareConcurrency ?? 4;
}

async function cacheLocation(cache: LoadOptions['cache']): Promise<CacheLocation | null> {
  if (cache === undefined || cache === false) return null;
  if (!isNode) return { kind: 'opfs', directory: typeof cache === 'string' ? cache : 'sipllm-cache' };
  const path = await nodeImport<typeof import('node:path')>('node:path');
  if (typeof cache === 'string') return { kind: 'directory', directory: path.resolve(cache) };
  // The native CLI's default too, so that both share one cache.
  const os = await nodeImport<typeof import('node:os')>('node:os');
  const xdg = process.env.XDG_CACHE_HOME;
  const directory = process.env.SIPLLM_CACHE_DIR ?? path.join(xdg ? xdg : path.join(os.homedir(), '.cache'), 'sipllm');
  return { kind: 'directory', directory };
}

function resolveUrl(source: string | URL): string {
  const base = (globalThis as { location?: { href: string } }).location?.href;
  let url: URL;
  try {
    url = new URL(String(source), base);
  } catch {
    throw new InvalidArgumentError(`'${String(source)}' is not a URL${isNode ? ' (under Node it must be absolute)' : ''}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new InvalidArgumentError(`${url.href}: only http and https URLs can be streamed (give other models as bytes)`);
  }
  return url.href;
}

// GenerateOptions as the worker takes them: no signal, the biases as pairs.
function wireOptions(options: GenerateOptions): EngineGenerateOptions {
  const { signal: _signal, logitBias, ...rest } = options;
  const request: EngineGenerateOptions = { ...rest };
  if (logitBias !== undefined) {
    const entries = logitBias instanceof Map ? [...logitBias] : Object.entries(logitBias);
    request.logitBias = entries.map(([token, bias]) => [Number(token), bias]);
  }
  return request;
}

function checkNumber(options: LoadOptions, key: keyof LoadOptions): void {
  const value = options[key];
  if (value !== undefined && (typeof value !== 'number' || Number.isNaN(value) || value < 0)) {
    throw new InvalidArgumentError(`option '${key}' must be a number >= 0`, key);
  }
}

// The fields of `from` named in `keys` that are set.
function definedFields<T extends object, K extends keyof T>(from: T, keys: readonly K[]): Pick<T, K> {
  const out = {} as Pick<T, K>;
  for (const key of keys) {
    if (from[key] !== undefined) out[key] = from[key];
  }
  return out;
}

function abortError(signal: AbortSignal | undefined, what: string): AbortError {
  const reason = signal?.reason instanceof Error ? `: ${signal.reason.message}` : '';
  return new AbortError(`${what} was aborted${reason}`);
}

// Pieces from the worker, pulled by the async iterator.
class PieceQueue {
  private readonly pieces: string[] = [];
  private ended = false;
  private error: Error | null = null;
  private wake: (() => void) | null = null;

  push(pieces: string[]): void {
    this.pieces.push(...pieces);
    this.notify();
  }

  end(error: Error | null = null): void {
    this.ended = true;
    this.error = error;
    this.notify();
  }

  // The next piece; null at the end; throws the error that ended it.
  async next(): Promise<string | null> {
    for (;;) {
      if (this.pieces.length > 0) return this.pieces.shift() as string;
      if (this.ended) {
        if (this.error !== null) throw this.error;
        return null;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

// llm.chat(messages, options) streams a reply's text; llm.chat.completions is
// the OpenAI-style call.
export type ChatFunction = ((messages: ChatMessage[], options?: ChatOptions) => AsyncGenerator<string, GenerationStats>) & {
  readonly completions: ChatCompletions;
};

export class SipLLM implements CompletionEngine {
  readonly chat: ChatFunction;
  readonly completions: Completions;
  readonly embeddings: Embeddings;
  private snapshot: Stats;
  private queue: Promise<void> = Promise.resolve();
  private unloaded = false;
  // A single-thread worker on a page without SharedArrayBuffer cannot hear a
  // cancel while it generates: it is stopped instead, and started again (the
  // model reloads, from the cache when there is one) on the next request.
  private restartNeeded = false;

  private constructor(
    private handle: WorkerHandle,
    readonly info: ModelInfo,
    stats: Stats,
    private readonly restartSource: Source | null,
    private readonly plan: Plan,
    private readonly words: Int32Array | null,
  ) {
    this.snapshot = stats;
    this.watchForStalls(handle);
    this.chat = Object.assign((messages: ChatMessage[], options?: ChatOptions) => this.chatStream(messages, options),
                              { completions: new ChatCompletions(this) });
    this.completions = new Completions(this);
    this.embeddings = new Embeddings(this);
  }

  static async load(source: string | URL | ArrayBuffer | ArrayBufferView, options: LoadOptions = {}): Promise<SipLLM> {
    const calledAt = performance.timeOrigin + performance.now();
    if (options.signal?.aborted) throw abortError(options.signal, 'loading');
    for (const key of [...NON_NEGATIVE_LOAD_OPTION_KEYS, 'warmUpMs', 'stallTimeoutMs'] as const) checkNumber(options, key);
    const build = chooseBuild(options.build);
    const threads = build === 'single' ? 1 : Math.max(1, Math.floor(options.threads ?? (await defaultThreads())));
    const parallelRequests = build === 'single' ? 1 : options.parallelRequests ?? ENGINE_LOAD_DEFAULTS.parallelRequests;
    const given: EngineLoadOptions = definedFields(options, ENGINE_LOAD_OPTION_KEYS);
    const plan: Plan = {
      build,
      // The job thread, the compute threads but the calling one, the
      // loader's load threads (two over the network unless set), the request
      // threads but the calling one, one spare.
      poolSize: threads + (options.loadThreads || 2) + parallelRequests,
      wasmBaseUrl: resolveWasmBaseUrl(options.wasmBaseUrl),
      cache: await cacheLocation(options.cache),
      engineOptions: { ...given, threads, parallelRequests },
      warmUpMs: options.warmUpMs ?? (isThreadedBuild(build) ? DEFAULT_WARM_UP_MS : 0),
      stallTimeoutMs: options.stallTimeoutMs ?? Math.max(DEFAULT_STALL_TIMEOUT_MS, 2 * (options.readTimeoutMs ?? 0)),
      onProgress: options.onProgress,
    };
    let src: Source;
    if (typeof source === 'string' || source instanceof URL) {
      src = { url: resolveUrl(source) };
    } else {
      const bytes = ArrayBuffer.isView(source)
        ? new Uint8Array(source.buffer, source.byteOffset, source.byteLength)
        : new Uint8Array(source);
      src = { bytes, name: options.name ?? 'model bytes' };
    }
    const words = canShareMemory() ? new Int32Array(new SharedArrayBuffer(4 * WorkerWords.count)) : null;
    const { handle, result } = await SipLLM.start(plan, src, words, options.signal, calledAt);
    // Bytes are kept only where a restart may need them.
    const restartable = !('bytes' in src) || (build === 'single' && words === null);
    return new SipLLM(handle, result.info, result.stats, restartable ? src : null, plan, words);
  }

  private static async start(plan: Plan, source: Source, words: Int32Array | null, signal?: AbortSignal,
                             calledAt = performance.timeOrigin + performance.now()):
      Promise<{ handle: WorkerHandle; result: LoadResult }> {
    const handle = await WorkerHandle.start();
    // A stalled load fails with the stall's error; later stalls are the model's (watchForStalls).
    Object.assign(handle.watch, { timeoutMs: plan.stallTimeoutMs, words });
    // The model's first pieces, fetched on this thread while the worker
    // starts its module (see bridge/early-pieces.ts): threaded builds only.
    const early = 'url' in source && isThreadedBuild(plan.build) && canShareMemory()
      ? new EarlyFetch(source.url, plan.engineOptions.readTimeoutMs || ENGINE_LOAD_DEFAULTS.readTimeoutMs, (message) => handle.post(message))
      : null;
    const onAbort = () => {
      early?.dispose();
      void handle.terminate();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      // The load goes right behind the init: the worker starts fetching the
      // model while its module is being made (see bridge/early-pieces.ts).
      const init = handle.request({ type: 'init', build: plan.build, wasmBaseUrl: plan.wasmBaseUrl, poolSize: plan.poolSize, words });
      const { id, reply } = handle.send({
        type: 'load',
        ...('url' in source ? { url: source.url } : { bytes: source.bytes }),
        name: 'url' in source ? source.url : source.name,
        cache: plan.cache,
        options: plan.engineOptions,
        warmUpMs: plan.warmUpMs,
        calledAt,
        early: early?.control ?? null,
      });
      early?.start(plan.cache !== null);
      if (plan.onProgress !== undefined) handle.listen(id, plan.onProgress);
      // A failed init fails the load too: the init's error is the one to report.
      reply.catch(() => {});
      await init;
      const result = await reply;
      handle.watch.probe = result.probe;
      return { handle, result };
    } catch (error) {
      early?.dispose();
      await handle.terminate();
      if (signal?.aborted) throw abortError(signal, 'loading');
      throw error;
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  // ---- Generation ------------------------------------------------------------------

  // Streams the text of the generated tokens. The iterator's return value is
  // the request's statistics. Aborting through options.signal (or leaving
  // the loop early) stops the engine within one token; an aborted signal
  // makes the iterator throw AbortError.
  async *generate(prompt: string | number[], options: GenerateOptions = {}): AsyncGenerator<string, GenerationStats> {
    const release = await this.acquire();
    try {
      return yield* this.stream(prompt, options);
    } finally {
      release();
    }
  }

  // Renders the model's chat template (tokenizer.chat_template) with the
  // messages and streams the reply. A model without a template makes this
  // throw UnsupportedError, unless options.fallbackTemplate gives one.
  private async *chatStream(messages: ChatMessage[], options: ChatOptions = {}): AsyncGenerator<string, GenerationStats> {
    const { addGenerationPrompt, fallbackTemplate, templateVariables, ...generateOptions } = options;
    const template = this.info.chatTemplate || fallbackTemplate;
    if (!template) {
      throw new UnsupportedError('this model has no chat template (tokenizer.chat_template is absent): ' +
                                 'use generate() with a plain prompt, or pass a fallbackTemplate');
    }
    const prompt = renderChatTemplate(template, messages, {
      bosToken: this.info.bosText,
      eosToken: this.info.eosText,
      addGenerationPrompt: addGenerationPrompt ?? true,
      variables: templateVariables,
    });
    // The template writes the special tokens itself.
    return yield* this.generate(prompt, { addSpecial: false, ...generateOptions });
  }

  private async *stream(prompt: string | number[], options: GenerateOptions): AsyncGenerator<string, GenerationStats> {
    const { signal } = options;
    if (signal?.aborted) throw abortError(signal, 'generation');
    const handle = await this.liveHandle();
    const request = wireOptions(options);
    const pieces = new PieceQueue();
    const { id, reply } = handle.send(
      typeof prompt === 'string'
        ? { type: 'generate', prompt, options: request }
        : { type: 'generate', tokens: prompt, options: request },
      { onTokens: (p) => pieces.push(p) });
    reply.then((result) => {
      this.snapshot = result.stats;
      pieces.end();
    }, (error: Error) => pieces.end(error));

    const onAbort = () => this.cancel(handle, id);
    signal?.addEventListener('abort', onAbort, { once: true });
    let consumed = false;
    try {
      for (;;) {
        let piece: string | null;
        try {
          piece = await pieces.next();
        } catch (error) {
          if (signal?.aborted) break;
          throw error;
        }
        if (piece === null || signal?.aborted) break;
        yield piece;
      }
      consumed = true;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      // Left early (break, return, throw): stop the engine, wait until it has.
      // A stall is said even so: the caller's loop exit throws it.
      if (!consumed && !signal?.aborted) this.cancel(handle, id);
      await reply.catch((error: unknown) => {
        if (error instanceof EngineStalledError) throw error;
      });
    }
    if (signal?.aborted) throw abortError(signal, 'generation');
    return (await reply).generation;
  }

  private cancel(handle: WorkerHandle, id: number): void {
    if (this.words !== null) Atomics.store(this.words, WorkerWords.cancelTarget, id);
    if (isThreadedBuild(this.plan.build) || this.words !== null) {
      handle.post({ type: 'cancel', target: id });
      return;
    }
    this.restartNeeded = true;
    // The stopped request's figures are lost with its worker.
    this.snapshot = { ...this.snapshot, lastGeneration: null };
    void handle.terminate();
  }

  // ---- Other requests --------------------------------------------------------------

  // Embeddings of `texts`, one batch: the final norm's output pooled over
  // each text's positions (options.pooling, by default the file's) and
  // scaled to unit length. The conversation's KV cache is left as it was.
  async embed(texts: string[], options: EmbedOptions = {}): Promise<EmbedResult> {
    const reply = await this.exclusive((handle) => handle.request({ type: 'embed', texts, options }));
    this.snapshot = reply.stats;
    return { embeddings: reply.vectors, promptTokens: reply.tokens };
  }

  // A GBNF grammar (for GenerateOptions.grammar) whose sentences are the JSON
  // documents valid under `schema` (an object, or JSON text), compiled by the
  // engine as llama.cpp's json-schema-to-grammar does. Throws
  // UnsupportedError naming a keyword that would constrain the value but is
  // not compiled (pattern, uniqueItems, ...).
  async jsonSchemaToGrammar(schema: unknown): Promise<string> {
    const text = typeof schema === 'string' ? schema : JSON.stringify(schema);
    return this.exclusive((handle) => handle.request({ type: 'grammar', schema: text }));
  }

  // A grammar of any JSON object.
  async jsonObjectGrammar(): Promise<string> {
    return this.exclusive((handle) => handle.request({ type: 'grammar', schema: null }));
  }

  /**
   * @internal The OpenAI layer's: the engine's check of `options` (its
   * ranges, sipllm/options.h), running nothing; throws what generate() would.
   */
  async checkGenerateOptions(options: GenerateOptions): Promise<void> {
    const handle = await this.liveHandle();
    await handle.request({ type: 'checkOptions', options: wireOptions(options), nVocab: this.info.hyperparameters.nVocab });
  }

  /** @internal The OpenAI layer's: tool calls of `schema`, each between its tags. */
  async toolCallGrammar(schema: unknown, calls: ToolCallTags): Promise<string> {
    return this.exclusive((handle) => handle.request({ type: 'grammar', schema: JSON.stringify(schema), calls }));
  }

  async tokenize(text: string, options: { addSpecial?: boolean; parseSpecial?: boolean } = {}): Promise<number[]> {
    return this.exclusive((handle) => handle.request({
      type: 'tokenize', text, addSpecial: options.addSpecial ?? true, parseSpecial: options.parseSpecial ?? true,
    }));
  }

  async detokenize(tokens: number[]): Promise<string> {
    return this.exclusive((handle) => handle.request({ type: 'detokenize', tokens }));
  }

  // Forgets the conversation (the KV cache); the model stays loaded.
  async reset(): Promise<void> {
    this.snapshot = await this.exclusive((handle) => handle.request({ type: 'reset' }));
  }

  // Figures as of the last request: cheap, and available while one runs.
  stats(): Stats {
    return this.snapshot;
  }

  get build(): Build {
    return this.plan.build;
  }

  // Frees the model and stops its worker. Resolves within UNLOAD_GRACE_MS
  // (10 s) whatever happens: past that, the worker is stopped outright and a
  // warning says so.
  async unload(): Promise<void> {
    if (this.unloaded) return;
    this.unloaded = true;
    const release = await this.acquire(true);
    try {
      if (this.handle.alive) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const orderly = await Promise.race([
          this.handle.request({ type: 'unload' }).then(() => true, () => true),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(false), UNLOAD_GRACE_MS);
          }),
        ]);
        clearTimeout(timer);
        if (!orderly) {
          console.warn(`SipLLM: unload(): the engine did not free the model within ${UNLOAD_GRACE_MS / 1000} s; ` +
                       'its worker was stopped instead');
        }
      }
      await this.handle.terminate();
    } finally {
      release();
    }
  }

  // A promise that settles when the worker has exited (after unload()).
  get workerExited(): Promise<void> {
    return this.handle.exited;
  }

  // ---- The cache tier ------------------------------------------------------------------

  // Models in the cache, with their sizes and how much of each is stored.
  static async cachedModels(options: CacheOptions = {}): Promise<CachedModel[]> {
    return SipLLM.withCacheWorker(options, (handle, cache) => handle.request({ type: 'listCache', cache }));
  }

  // A split model's first part stands for the model: every part's entry goes.
  static async deleteCachedModel(url: string | URL, options: CacheOptions = {}): Promise<void> {
    const href = resolveUrl(url);
    await SipLLM.withCacheWorker(options, async (handle, cache) => {
      for (const part of splitPartUrls(href)) await handle.request({ type: 'deleteCache', cache, url: part });
    });
  }

  private static async withCacheWorker<T>(options: CacheOptions,
                                          use: (handle: WorkerHandle, cache: CacheLocation) => Promise<T>): Promise<T> {
    const cache = await cacheLocation(options.cache ?? true);
    const handle = await WorkerHandle.start();
    try {
      const wasmBaseUrl = resolveWasmBaseUrl(options.wasmBaseUrl);
      await handle.request({ type: 'init', build: 'single', wasmBaseUrl, poolSize: 0, words: null });
      return await use(handle, cache as CacheLocation);
    } finally {
      await handle.terminate();
    }
  }

  // ---- Plumbing --------------------------------------------------------------------------

  // One request at a time, in call order.
  private acquire(evenIfUnloaded = false): Promise<() => void> {
    if (this.unloaded && !evenIfUnloaded) {
      return Promise.reject(new InvalidArgumentError('the model was unloaded'));
    }
    let release!: () => void;
    const turn = new Promise<void>((resolve) => {
      release = resolve;
    });
    const previous = this.queue;
    this.queue = previous.then(() => turn);
    return previous.then(() => release);
  }

  private async exclusive<T>(run: (handle: WorkerHandle) => Promise<T>): Promise<T> {
    const release = await this.acquire();
    try {
      return await run(await this.liveHandle());
    } finally {
      release();
    }
  }

  // A stalled worker has been stopped (worker-handle.ts): the next request
  // starts another and loads the model again, from the cache when it is on.
  private watchForStalls(handle: WorkerHandle): void {
    handle.watch.onStall = () => {
      if (this.handle !== handle) return;
      this.restartNeeded = this.restartSource !== null;
      this.snapshot = { ...this.snapshot, lastGeneration: null };
    };
  }

  /** @internal For the package's own tests: see TestHook in bridge/protocol.ts. */
  async testHook(hook: TestHook): Promise<void> {
    const handle = await this.liveHandle();
    if (hook === 'block-worker') handle.post({ type: 'testHook', hook });
    else await handle.request({ type: 'testHook', hook });
  }

  /** @internal For the package's own tests: what a stall would report now. */
  stallDump(): StallDump {
    return this.handle.dump();
  }

  private async liveHandle(): Promise<WorkerHandle> {
    if (!this.restartNeeded && this.handle.alive) return this.handle;
    if (!this.restartNeeded || this.restartSource === null) {
      throw new SipLLMError('internal', 'the engine worker stopped; load the model again');
    }
    const { handle, result } = await SipLLM.start({ ...this.plan, onProgress: undefined }, this.restartSource, this.words);
    this.handle = handle;
    this.watchForStalls(handle);
    this.snapshot = result.stats;
    this.restartNeeded = false;
    return handle;
  }
}

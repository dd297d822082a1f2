// The public option, event and statistics types of the package. The
// options the engine itself reads are declared with the bindings
// (wasm-bindings/bridge_options.h) and arrive here from bridge.generated.ts.

import type {
  EngineEmbedOptions,
  EngineGenerateOptions,
  EngineGenerationStats,
  EngineLoadOptions,
  LoaderStats,
  SourceStats,
} from './bridge/bridge.generated.js';

// The engine's results, as bindings.cpp writes them.
export type {
  CachedModel, LoaderStats, ModelHyperparameters, ModelInfo, ParallelTime, SourceStats, UnitCounters, UnitEvent,
} from './bridge/bridge.generated.js';

// 'threaded': pthreads + SIMD128; 'relaxed': the same with relaxed SIMD's
// 8-bit dot product (faster matrix products); 'single': SIMD128 on one thread.
export type Build = 'threaded' | 'relaxed' | 'single';

// The engine's and its HTTP source's options (EngineLoadOptions), and the
// package's own.
export interface LoadOptions extends EngineLoadOptions {
  // Keep fetched bytes: true uses the default place (the OPFS directory
  // "sipllm-cache" in a browser; under Node $SIPLLM_CACHE_DIR, else
  // $XDG_CACHE_HOME/sipllm, else ~/.cache/sipllm, as the native CLI), a
  // string names the OPFS directory or the filesystem directory.
  // Default: false. A cache that cannot be opened or written is skipped.
  cache?: boolean | string;
  // Bytes as they arrive, see LoadProgress. Keeps being called after load()
  // resolves: weights arrive while the first requests run.
  onProgress?: (event: LoadProgress) => void;
  // Abandons the load (the worker is stopped).
  signal?: AbortSignal;
  // Which WebAssembly build: 'auto' picks a threaded one when
  // SharedArrayBuffer is usable (a cross-origin isolated page, or Node):
  // 'relaxed' where the runtime validates relaxed SIMD, else 'threaded';
  // and 'single' otherwise. Every build gives the same text.
  build?: 'auto' | Build;
  // Where sipllm-*.js/.wasm are served from. Default: the package's own
  // wasm/ files, wherever the app's bundler emitted them.
  wasmBaseUrl?: string | URL;
  // Milliseconds the engine spends, right after opening, running its kernels
  // on synthetic data while the first weights download, so that the first
  // request runs on optimised code rather than the browser's first-run
  // WebAssembly code. load() does not wait for it; the first request ends
  // it (within one round of kernels) and starts.
  // Default: 500 in the threaded build, 0 (none) in the single-thread build.
  warmUpMs?: number;
  // A request that shows no progress for this long (no token, no computation,
  // no byte arriving; a busy engine says it is alive about every 250 ms) is
  // stalled: it fails with EngineStalledError, which carries what each part
  // of the worker was doing; the worker is stopped, and the next request loads
  // the model again (from the cache when it is on). 0: never.
  // Default: 120 000, or twice readTimeoutMs if that is longer.
  stallTimeoutMs?: number;
  name?: string;               // a name for a model given as bytes, for messages
}

export interface LoadProgress {
  // header: the GGUF header is being read; weights: bytes arriving from the
  // network (or memory); cached: bytes read from the cache; ready: every block
  // has arrived once (loaded === total).
  phase: 'header' | 'weights' | 'cached' | 'ready';
  loaded: number;     // distinct bytes of the file delivered to the engine so far
  total: number;      // the file's size
  fetched: number;    // bytes from the network (a byte fetched twice counts twice)
  fromCache: number;  // bytes read from the cache
  // Every stream unit, in the order a forward pass uses them (empty while
  // the header is read). Updated while a request runs, about every 100 ms.
  units: UnitProgress[];
}

// Where a stream unit stands:
//   waiting    it has not arrived yet
//   streaming  its bytes are arriving now (the loader fetches units in the
//              order the forward pass needs them: this is the first one
//              missing, while bytes are moving)
//   resident   it has arrived and stays in memory
//   streamed   it has arrived, but the memory budget cannot keep it: it is
//              read again (from the cache, or the network) for every token
export type UnitState = 'waiting' | 'streaming' | 'resident' | 'streamed';

export interface UnitProgress {
  name: string;     // "block 3", "output head 2/6"
  bytes: number;    // bytes one load of it reads
  state: UnitState;
  cached: boolean;  // it has arrived and the persistent cache keeps its bytes
}

// The engine's generation options (see EngineGenerateOptions), with the
// logit bias by token (-Infinity bans a token) and an abort signal.
export interface GenerateOptions extends Omit<EngineGenerateOptions, 'logitBias'> {
  logitBias?: Record<number, number> | Map<number, number>;
  signal?: AbortSignal;
}

// How a text's per-position vectors become one embedding (llama.cpp's
// pooling types): 'model' is what the file says ({arch}.pooling_type), the
// mean when it says nothing.
export type Pooling = NonNullable<EngineEmbedOptions['pooling']>;

export type EmbedOptions = EngineEmbedOptions;

export interface EmbedResult {
  embeddings: Float32Array[];  // one per text, in order
  promptTokens: number;        // tokens of all the texts
}

export interface ChatMessage {
  role: string;  // 'system' | 'user' | 'assistant' | 'tool' | ...
  content: string;
  // Any other field (tool_calls, reasoning_content, ...) reaches the template as is.
  [field: string]: unknown;
}

export interface ChatOptions extends GenerateOptions {
  addGenerationPrompt?: boolean;  // default true
  // Used when the model has none (otherwise chat() throws UnsupportedError).
  fallbackTemplate?: string;
  // More variables for the template (tools, date_string, ...).
  templateVariables?: Record<string, unknown>;
}

// A generation's figures: the engine's, and tokensAtCancel.
export interface GenerationStats extends EngineGenerationStats {
  // When the request was cancelled: tokens it had produced when the engine
  // was told (generatedTokens - tokensAtCancel is at most 1).
  tokensAtCancel?: number;
}

// When load() reached each of its phases, in ms since the Unix epoch
// (performance.timeOrigin + performance.now() of the thread that saw it), so
// that they line up with loader.timelineOriginMs and with a server's clock.
export interface LoadTimes {
  calledAt: number;         // load() was called
  workerStartedAt: number;  // the engine worker's script started
  moduleReadyAt: number;    // the WebAssembly module compiled and instantiated, its thread pool started
  headerReadAt: number;     // the model's header read and parsed (load() resolves next)
}

export interface Stats {
  build: Build;
  load: LoadTimes;
  threads: number;
  crossOriginIsolated: boolean;
  memoryBudget: number | null;  // null: unlimited
  heapBytes: number;            // the WebAssembly heap (it only grows: also the peak)
  kvCacheBytes: number;
  loader: LoaderStats;          // the last request's loader counters and timeline
  source: SourceStats | null;   // null for a model given as bytes
  cache: { enabled: boolean; error: string };
  // The engine's range requests: on fetch workers of their own (a browser's
  // threaded builds: each is ended after a share of the bytes, and what it
  // held goes with it), or on the engine worker's thread, and why when a
  // fetch worker failed.
  fetch: { workers: boolean; error: string };
  lastGeneration: GenerationStats | null;
}

export interface CacheOptions {
  cache?: true | string;  // as LoadOptions.cache
  wasmBaseUrl?: string | URL;
}

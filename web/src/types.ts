// The public option, event and statistics types of the package.

export type Build = 'threaded' | 'single';

export interface LoadOptions {
  // Compute threads (threaded build only). Default: the machine's cores.
  threads?: number;
  // Bytes of weights kept in memory, prefetch ring included; units beyond it
  // stream from the source (or the cache) on every token. Default: unlimited.
  memoryBudget?: number;
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
  // Which WebAssembly build: 'auto' picks 'threaded' when SharedArrayBuffer
  // is usable (a cross-origin isolated page, or Node) and 'single' otherwise.
  build?: 'auto' | Build;
  // Where sipllm-*.js/.wasm are served from. Default: the package's own
  // wasm/ files, wherever the app's bundler emitted them.
  wasmBaseUrl?: string | URL;
  contextLength?: number;      // tokens; default: the model's own
  kvCacheType?: 'f16' | 'f32'; // how the KV cache keeps keys and values; default 'f16' (as llama.cpp)
  ringBuffers?: number;        // prefetch ring size; default 2
  loadThreads?: number;        // units loaded side by side; default 2 (the sync loader of the single build: none)
  prefillChunk?: number;       // prompt positions per block load; default 512
  parallelRequests?: number;   // range requests in flight for one read; default 4 (1 in the single build)
  maxRetries?: number;         // per request, on network errors, stalls, short bodies, 5xx and 429; default 4
  backoffMs?: number;          // first retry delay, doubling; default 100
  // No byte for this long fails the attempt (then retried); a slow transfer
  // that keeps moving is never cut. Default 30000. (The single-thread build
  // in a browser cannot watch bytes arrive: it gives a request this plus
  // the range's time at 64 kB/s.)
  readTimeoutMs?: number;
  // A 429 or 503 with Retry-After waits as asked up to this; a longer wait
  // asked for fails at once, naming it. Default 30000.
  maxRetryAfterMs?: number;
  allowWholeFile?: boolean;    // accept a server that ignores Range by downloading the whole file; default false
  cachePageBytes?: number;     // cache page size for new entries; default 1 MiB
  // Milliseconds the engine spends, right after opening, running its kernels
  // on synthetic data while the first weights download, so that the first
  // request runs on optimised code rather than the browser's first-run
  // WebAssembly code. load() does not wait for it; the first request does.
  // Default: 500 in the threaded build, 0 (none) in the single-thread build.
  warmUpMs?: number;
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

export interface GenerateOptions {
  maxTokens?: number;      // default 256
  temperature?: number;    // <= 0: greedy; default 0.8
  topK?: number;           // <= 0: all; default 40
  topP?: number;           // >= 1: off; default 0.95
  minP?: number;           // <= 0: off; default 0.05
  repeatPenalty?: number;  // default 1 (off)
  repeatLastN?: number;    // default 64
  // Subtracted from the logit of each token of the last repeatLastN: once
  // (presence), once per occurrence (frequency), as OpenAI defines them. Default 0.
  presencePenalty?: number;
  frequencyPenalty?: number;
  seed?: number;           // default: random
  stop?: string[];         // generation ends before any of these
  logitBias?: Record<number, number> | Map<number, number>;  // -Infinity bans a token
  addSpecial?: boolean;    // BOS/EOS as the model asks; default true (false for chat)
  parseSpecial?: boolean;  // "<|im_start|>" in the prompt is a token; default true
  // A GBNF grammar (llama.cpp's format, from rule `root`) every generated
  // token must continue, whatever the sampling settings; see
  // SipLLM.jsonSchemaToGrammar. Generation ends by itself once the grammar's
  // sentence is complete (stopReason 'grammar complete').
  grammar?: string;
  signal?: AbortSignal;
}

// How a text's per-position vectors become one embedding (llama.cpp's
// pooling types): 'model' is what the file says ({arch}.pooling_type), the
// mean when it says nothing.
export type Pooling = 'model' | 'mean' | 'cls' | 'last';

export interface EmbedOptions {
  pooling?: Pooling;     // default 'model'
  normalize?: boolean;   // to unit length (L2); default true
  addSpecial?: boolean;  // BOS/EOS as the model asks; default true
}

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

// The engine's list of hyper-parameters (ModelInfo::hyperparameters in
// engine.h), names in camelCase: these always, the optional ones where the
// model has them.
export interface ModelHyperparameters {
  nLayers: number;
  dim: number;
  hiddenDim: number;
  nHeads: number;
  nKvHeads: number;
  headDim: number;
  nVocab: number;
  contextLength: number;  // the engine's, at most trainedContextLength
  trainedContextLength: number;
  rmsEps: number;
  ropeDims: number;
  ropeFreqBase: number;
  ropeFreqScale?: number;
  ropeAttnFactor?: number;
  slidingWindow?: number;
  localRopeFreqBase?: number;
  attnSoftcap?: number;
  finalSoftcap?: number;
}

export interface ModelInfo {
  architecture: string;  // general.architecture: 'llama', 'qwen2', 'qwen3', 'gemma2', 'gemma3', 'phi3', 'smollm3'
  name: string;
  hyperparameters: ModelHyperparameters;
  ggufVersion: number;
  fileBytes: number;
  weightBytes: number;
  tiedOutput: boolean;
  tensorsByType: Record<string, number>;
  tokenizer: string;
  bos: number;
  eos: number;
  bosText: string;
  eosText: string;
  chatTemplate: string;  // '' when the model has none
}

export interface UnitCounters {
  name: string;
  loads: number;
  bytes: number;
  ioMs: number;
  prepareMs: number;
  computeMs: number;
  waitMs: number;
  resident: boolean;
}

// One load of one unit (block or output-head piece) and its use; times in ms
// since the loader started, 0 where a phase did not happen.
export interface UnitEvent {
  unit: number;
  ioStartMs: number;
  ioEndMs: number;
  prepareEndMs: number;
  computeStartMs: number;
  computeEndMs: number;
  hit: boolean;       // ready when asked for
  resident: boolean;  // served from resident memory
}

export interface LoaderStats {
  prefetchHits: number;
  prefetchMisses: number;
  residentHits: number;
  unitsLoaded: number;
  bytesRead: number;
  bytesConsumed: number;
  embeddingBytesRead: number;
  ioMs: number;
  prepareMs: number;
  waitMs: number;
  computeMs: number;
  residentBytes: number;
  ringBytes: number;
  peakWeightBytes: number;
  memoryBudget: number;  // bytes the engine may take; -1: no budget
  workingBytes: number;  // of those, activations, scratch and the KV cache so far
  residentUnits: number;
  streamedUnits: number;
  loadThreads: number;         // units loaded side by side (0: the sync loader)
  units: UnitCounters[];
  timeline: UnitEvent[];
}

export interface GenerationStats {
  promptTokens: number;
  reusedTokens: number;
  generatedTokens: number;
  promptMs: number;
  decodeMs: number;
  ttftMs: number;
  promptTokensPerS: number;
  decodeTokensPerS: number;
  stopReason: string;  // 'end of text' | 'max tokens' | 'stop string' | 'cancelled' | ...
  prefillBytesRead: number;
  decodeBytesRead: number;
  kvCacheBytes: number;
  loader: LoaderStats;
  // When the request was cancelled: tokens it had produced when the engine
  // was told (generatedTokens - tokensAtCancel is at most 1).
  tokensAtCancel?: number;
}

export interface SourceStats {
  requests: number;
  retries: number;
  bytesFetched: number;
  bytesFromCache: number;
  openedFromCache: boolean;
  wholeFile: boolean;
  caching: boolean;
  cacheError: string;
}

export interface Stats {
  build: Build;
  threads: number;
  crossOriginIsolated: boolean;
  memoryBudget: number | null;  // null: unlimited
  heapBytes: number;            // the WebAssembly heap (it only grows: also the peak)
  kvCacheBytes: number;
  loader: LoaderStats;          // the last request's loader counters and timeline
  source: SourceStats | null;   // null for a model given as bytes
  cache: { enabled: boolean; error: string };
  lastGeneration: GenerationStats | null;
}

export interface CachedModel {
  url: string;
  size: number;         // the file's size
  cachedBytes: number;  // how much of it is stored
  etag: string;
  lastModified: string;
}

export interface CacheOptions {
  cache?: true | string;  // as LoadOptions.cache
  wasmBaseUrl?: string | URL;
}

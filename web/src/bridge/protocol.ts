// Messages between the page (or Node's main thread) and the engine worker.
// Every request carries an id; the worker answers it with one 'result' or
// 'error', after any number of 'progress' and 'tokens' events for that id.

import type { EngineGenerateOptions, EngineLoadOptions } from './bridge.generated.js';
import type { EarlyBlocks, EarlyFile, EarlyPiece } from './early-pieces.js';
import type { Build, CachedModel, EmbedOptions, GenerationStats, LoadProgress, ModelInfo, Stats } from '../types.js';

export type { EngineGenerateOptions };

// Where the worker's cache store lives.
export type CacheLocation =
  | { kind: 'opfs'; directory: string }
  | { kind: 'directory'; directory: string };

export interface InitRequest {
  type: 'init';
  id: number;
  build: Build;
  wasmBaseUrl: string | null;  // null: the package's own files
  poolSize: number;
  // Shared with the page when SharedArrayBuffer is usable (WorkerWords in
  // probe.ts): the page writes the id of a request to cancel into element 0,
  // so that a worker busy in a single-thread generation sees it between
  // tokens; the worker keeps what it is doing in the others, which the page
  // reads when the worker stalls.
  words: Int32Array | null;
  // In a browser with shared memory: where the worker tells the page's
  // probe mirror where its probe is (page/probe-mirror.ts); WorkerHandle
  // adds it.
  probePort?: { postMessage(message: unknown): void };  // a MessagePort (typed so for Node projects too)
}

// Hooks for tests of the watchdog and of forced interleavings: the engine's
// job thread holds its next job until released (threaded builds); the
// worker's own thread blocks for good; or, while a job runs, the worker
// marks it cancelled in the shared words (as the page does) and then holds
// the engine's lock for 300 ms, waiting as for a contended lock, while the
// job's events arrive; or the engine's next fetch worker fails to start.
export type TestHook = 'hold-jobs' | 'release-jobs' | 'block-worker' | 'contend-engine-lock' | 'break-fetch-workers';

export interface LoadRequest {
  type: 'load';
  id: number;
  url?: string;
  bytes?: Uint8Array;
  name: string;
  cache: CacheLocation | null;
  // The engine and HTTP options of LoadOptions, threads and parallelRequests
  // resolved for the build.
  options: EngineLoadOptions & { threads: number };
  warmUpMs: number;  // 0: none
  calledAt: number;  // when load() was called (LoadTimes.calledAt)
  // EarlyFetch.control when the caller fetches the first pieces (early-pieces.ts).
  early: Int32Array | null;
}

export interface GenerateRequest {
  type: 'generate';
  id: number;
  prompt?: string;
  tokens?: number[];
  options: EngineGenerateOptions;
}

// The engine's check of generation options (sipllm/options.h,
// check_generate_options), running nothing: for the OpenAI layer, which
// refuses a streamed request before its stream begins.
export interface CheckOptionsRequest {
  type: 'checkOptions';
  id: number;
  options: EngineGenerateOptions;
  nVocab: number;
}

export interface EmbedRequest {
  type: 'embed';
  id: number;
  texts: string[];
  options: EmbedOptions;
}

// GBNF text from the engine's JSON Schema compiler: of `schema` (JSON text),
// or of any JSON object when it is null; with `calls`, of tool calls whose
// JSON `schema` describes, each between its tags (sipllm/grammar.h,
// tool_call_grammar).
export interface GrammarRequest {
  type: 'grammar';
  id: number;
  schema: string | null;
  calls?: ToolCallTags;
}

export interface ToolCallTags {
  open: string;   // '' and '': the document alone
  close: string;
  parallel: boolean;
}

export type Request =
  | InitRequest
  | LoadRequest
  | GenerateRequest
  | EmbedRequest
  | GrammarRequest
  | CheckOptionsRequest
  | { type: 'cancel'; id: number; target: number }
  | (EarlyFile & { id: number })
  | (EarlyBlocks & { id: number })
  | (EarlyPiece & { id: number })
  | { type: 'tokenize'; id: number; text: string; addSpecial: boolean; parseSpecial: boolean }
  | { type: 'detokenize'; id: number; tokens: number[] }
  | { type: 'reset'; id: number }
  | { type: 'stats'; id: number }
  | { type: 'unload'; id: number }
  | { type: 'listCache'; id: number; cache: CacheLocation }
  | { type: 'deleteCache'; id: number; cache: CacheLocation; url: string }
  | { type: 'testHook'; id: number; hook: TestHook };

export interface LoadResult {
  info: ModelInfo;
  stats: Stats;
  // Where the session's probe is (probe.ts), when the memory is shared and
  // the page has no mirror of it (Node; a browser's page gets the probe's
  // words through its mirror instead, InitRequest.probePort).
  probe: { memory: SharedArrayBuffer; address: number } | null;
}

export interface GenerateResult {
  generation: GenerationStats;
  stats: Stats;
}

export interface EmbedResult {
  vectors: Float32Array[];
  tokens: number;
  stats: Stats;
}

// What the worker answers each request that has an answer with (the value
// of its 'result'); 'cancel' and the early pieces are posted, never answered.
// The page's request() and the worker's handlers are typed by it.
export interface Replies {
  init: { build: Build };
  load: LoadResult;
  generate: GenerateResult;
  embed: EmbedResult;
  grammar: string;
  checkOptions: null;
  tokenize: number[];
  detokenize: string;
  reset: Stats;
  stats: Stats;
  unload: null;
  listCache: CachedModel[];
  deleteCache: undefined;
  testHook: null;
}
export type Answered = keyof Replies;
export type RequestOf<K extends Request['type']> = Extract<Request, { type: K }>;

export type Reply =
  | { type: 'result'; id: number; value: Replies[Answered] }
  | { type: 'error'; id: number; kind: string; message: string; option?: string }
  | { type: 'progress'; id: number; progress: LoadProgress }
  | { type: 'tokens'; id: number; pieces: string[] }
  // The engine is making progress (about every 250 ms while it works).
  | { type: 'alive'; id: number };

// Instantiates one of the WebAssembly builds (wasm-bindings/) in the current
// realm: a browser worker or a Node worker thread.

import { isNode, isThreadedBuild, nodeImport } from '../env.js';
import type { EngineEmbedOptions, EngineGenerateOptions, EngineOpenOptions } from '../bridge/bridge.generated.js';
import type { EarlyRanges } from './early-ranges.js';
import type { Build, CachedModel, GenerationStats, LoaderStats, ModelInfo, SourceStats } from '../types.js';

// What wasm-bindings/bindings.cpp and host.js give the JavaScript side.
export interface Answer<T> {
  value?: T;
  error?: { kind: string; message: string };
}

export interface EngineSession {
  openUrl(url: string, options: EngineOpenOptions): Answer<undefined>;
  openBytes(bytesId: number, size: number, name: string, options: EngineOpenOptions): Answer<undefined>;
  generate(prompt: string, options: EngineGenerateOptions): Answer<undefined>;
  generateTokens(tokens: number[], options: EngineGenerateOptions): Answer<undefined>;
  embed(texts: string[], options: EngineEmbedOptions): Answer<undefined>;
  warmUp(milliseconds: number): Answer<undefined>;
  endWarmUp(): void;  // at any time: a running warm-up stops, the loader goes on
  // At any time, also while a job runs.
  liveUnits(): LiveUnit[];
  takeTokens(): Array<{ token: number; text: string }>;
  takeResult(): JobOutcome;
  busy(): boolean;
  cancel(): number;
  info(): Answer<ModelInfo>;
  tokenize(text: string, addSpecial: boolean, parseSpecial: boolean): Answer<Int32Array>;
  detokenize(tokens: number[]): Answer<string>;
  reset(): Answer<undefined>;
  stats(): Answer<SessionStats>;
  close(): void;  // then wait for the 'closed' event before delete()
  delete(): void;
  probeAddress(): number;  // where its probe lies in the memory (probe.ts)
  holdJobs(held: boolean): Answer<undefined>;  // a test's hook (threaded builds)
  holdEngineLock(milliseconds: number): void;  // a test's hook (Session::hold_engine_lock)
}

// How a job ended (Session::take_result): a generation's statistics, or an
// embed job's vectors and the tokens its texts took.
export interface JobOutcome {
  ok: boolean;
  error?: { kind: string; message: string };
  stats?: GenerationStats;
  embeddings?: { vectors: Float32Array[]; tokens: number };
}

// The session's figures (bindings.cpp, stats): what Stats takes from the engine.
export interface SessionStats {
  loader: LoaderStats;
  kvCacheBytes: number;
  heapBytes: number;
  source?: SourceStats;           // a model opened from a URL
  lastGeneration?: GenerationStats;
}

// Bytes delivered to the engine so far (a 'progress' event, js_host.cpp post_progress).
export interface ByteProgress {
  loaded: number;
  fetched: number;
  fromCache: number;
  total: number;
  header: boolean;  // the GGUF header is still being read
}

// A stream unit as the loader's counters describe it (bindings.cpp).
export interface LiveUnit {
  name: string;
  bytes: number;
  loads: number;      // in the running (or last) request
  resident: boolean;  // kept in memory once loaded
  used: boolean;      // the running (or last) request has computed with it
}

// What the engine tells a session's JavaScript side (js_host.cpp post_*).
export type EngineEvent = 'tokens' | 'done' | 'progress' | 'closed' | 'alive';

export interface Registry {
  stores: Map<number, unknown>;
  bytes: Map<number, Uint8Array>;
  onEvent(sessionId: number, kind: EngineEvent, data?: unknown): void;
  early: EarlyRanges | null;  // the model's first bytes, fetched before the module was ready
}

export interface EngineModule {
  Session: new (id: number) => EngineSession;
  listCachedModels(storeId: number): Answer<CachedModel[]>;
  deleteCachedModel(storeId: number, url: string): Answer<undefined>;
  jsonSchemaToGrammar(schema: string): Answer<string>;
  jsonObjectGrammar(): Answer<string>;
  toolCallGrammar(callSchema: string, open: string, close: string, parallel: boolean): Answer<string>;
  runQueuedCalls(): void;  // what the engine's threads queued for this thread (bindings.cpp)
  threaded: boolean;
  sipllmRegistry?: Registry;
  sipllmHost: { memory(): ArrayBufferLike };  // host.js
}

type Factory = (settings: Record<string, unknown>) => Promise<EngineModule>;

const EXPORT_NAMES: Record<Build, string> = { threaded: 'SipllmThreaded', relaxed: 'SipllmRelaxed', single: 'SipllmSingle' };

// A build's files: the module script (a classic script defining one factory),
// its WebAssembly, and the threaded build's pthread worker script.
interface BuildFiles {
  script: URL;
  wasm: URL;
  worker?: URL;
}

// The package's own files, each written as a literal
// `new URL('...', import.meta.url)`: the form bundlers (Vite, webpack 5,
// Rollup and esbuild plugins, Parcel) recognise, so that an app's build emits
// the file beside the engine worker and puts its final URL here, with no copy
// step. `?no-inline` keeps Vite from inlining the small pthread worker script
// as a data: URL (a worker started from one has no origin, so it could not
// load the module script); other bundlers and Node ignore the query.
function packagedFiles(build: Build): BuildFiles {
  if (build === 'threaded') {
    return {
      script: new URL('../../wasm/sipllm-threaded.js', import.meta.url),
      wasm: new URL('../../wasm/sipllm-threaded.wasm', import.meta.url),
      worker: new URL('../../wasm/sipllm-threaded.worker.js?no-inline', import.meta.url),
    };
  }
  if (build === 'relaxed') {
    return {
      script: new URL('../../wasm/sipllm-relaxed.js', import.meta.url),
      wasm: new URL('../../wasm/sipllm-relaxed.wasm', import.meta.url),
      worker: new URL('../../wasm/sipllm-relaxed.worker.js?no-inline', import.meta.url),
    };
  }
  return {
    script: new URL('../../wasm/sipllm-single.js', import.meta.url),
    wasm: new URL('../../wasm/sipllm-single.wasm', import.meta.url),
  };
}

// The files of a build served under `baseUrl` (LoadOptions.wasmBaseUrl).
function filesUnder(baseUrl: string, build: Build): BuildFiles {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  const name = `sipllm-${build}`;
  return {
    script: new URL(`${name}.js`, base),
    wasm: new URL(`${name}.wasm`, base),
    worker: isThreadedBuild(build) ? new URL(`${name}.worker.js`, base) : undefined,
  };
}

// What the module asks locateFile() for, by the name Emscripten gave it.
function locator(build: Build, files: BuildFiles, toLocation: (url: URL) => string): (file: string) => string {
  const located: Record<string, URL | undefined> = {
    [`sipllm-${build}.wasm`]: files.wasm,
    [`sipllm-${build}.worker.js`]: files.worker,
  };
  return (file: string) => {
    const url = located[file];
    if (url === undefined) throw new Error(`the ${build} WebAssembly build asked for an unknown file: ${file}`);
    return toLocation(url);
  };
}

// wasmBaseUrl: where the build's files are served; null for the package's own.
export async function loadEngineModule(build: Build, wasmBaseUrl: string | null, poolSize: number): Promise<EngineModule> {
  const files = wasmBaseUrl === null ? packagedFiles(build) : filesUnder(wasmBaseUrl, build);
  const settings: Record<string, unknown> = { sipllmPoolSize: poolSize };
  if (isNode) {
    const { createRequire } = await nodeImport<typeof import('node:module')>('node:module');
    const { readFile } = await nodeImport<typeof import('node:fs/promises')>('node:fs/promises');
    const { fileURLToPath } = await nodeImport<typeof import('node:url')>('node:url');
    const scriptPath = fileURLToPath(files.script);
    let factory: Factory;
    try {
      factory = createRequire(scriptPath)(scriptPath) as Factory;
      // Node's fetch() cannot read files, so the module gets its bytes.
      settings.wasmBinary = await readFile(fileURLToPath(files.wasm));
    } catch (error) {
      throw new Error(`cannot load the ${build} WebAssembly build from ${new URL('.', files.script).href}: ` +
                      `${(error as Error).message} (run scripts/build-wasm.sh)`);
    }
    settings.locateFile = locator(build, files, (url) => fileURLToPath(url));
    return factory(settings);
  }
  const scriptUrl = files.script.href;
  const response = await fetch(scriptUrl);
  if (!response.ok) throw new Error(`cannot load the ${build} WebAssembly build: ${scriptUrl} answered ${response.status}`);
  // Evaluated here rather than imported: the same script also runs in the
  // pthread workers, which load it with importScripts().
  const factory = new Function(`${await response.text()}\nreturn ${EXPORT_NAMES[build]};`)() as Factory;
  settings.locateFile = locator(build, files, (url) => url.href);
  settings.mainScriptUrlOrBlob = scriptUrl;
  return factory(settings);
}

// Instantiates one of the WebAssembly builds (wasm-bindings/) in the current
// realm: a browser worker or a Node worker thread.

import { isNode, isThreadedBuild, nodeImport } from '../env.js';
import type { EngineModuleFunctions, EngineSession } from '../bridge/bridge.generated.js';
import type { EarlyRanges } from './early-ranges.js';
import type { RangeAnswer } from '../bridge/range-fetch.js';
import type { Build } from '../types.js';

// What wasm-bindings/bindings.cpp gives the JavaScript side is declared
// with it (bridge_surface.h, bridge_results.h) and generated.
export type { Answer, EngineSession, JobOutcome, LiveUnit, SessionStats } from '../bridge/bridge.generated.js';

// Bytes delivered to the engine so far (a 'progress' event, js_host.cpp post_progress).
export interface ByteProgress {
  loaded: number;
  fetched: number;
  fromCache: number;
  total: number;
  header: boolean;  // the GGUF header is still being read
}

// What the engine tells a session's JavaScript side (js_host.cpp post_*).
export type EngineEvent = 'tokens' | 'done' | 'progress' | 'closed' | 'alive';

export interface Registry {
  stores: Map<number, unknown>;
  bytes: Map<number, Uint8Array>;
  onEvent(sessionId: number, kind: EngineEvent, data?: unknown): void;
  early: EarlyRanges | null;  // the model's first bytes, fetched before the module was ready
  // The threaded build's range requests (host.js startRange): the range's
  // body to `dst` in the heap, behind js_host.cpp's call record at `call`.
  startRange(url: string, offset: number, length: number, timeoutMs: number, call: number,
             dst: number): Promise<RangeAnswer>;
  fetchRangeSource: string;  // range-fetch.ts's fetchRange, for Node's fetcher thread (host.js)
}

// The module: the functions bindings.cpp registers, and what host.js and
// the worker add.
export interface EngineModule extends EngineModuleFunctions {
  Session: new (id: number) => EngineSession;
  threaded: boolean;
  sipllmRegistry?: Registry;
  sipllmHost: { memory(): ArrayBufferLike; wasmMemory(): WebAssembly.Memory };  // host.js
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

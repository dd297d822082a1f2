// Instantiates one of the WebAssembly builds (wasm-bindings/) in the current
// realm: a browser worker or a Node worker thread.

import { isNode, nodeImport } from './env.js';
import type { EngineGenerateOptions } from './protocol.js';
import type { Build, EmbedOptions } from './types.js';

// What wasm-bindings/bindings.cpp and host.js give the JavaScript side.
export interface Answer<T> {
  value?: T;
  error?: { kind: string; message: string };
}

export interface EngineSession {
  openUrl(url: string, options: Record<string, unknown>): Answer<undefined>;
  openBytes(bytesId: number, size: number, name: string, options: Record<string, unknown>): Answer<undefined>;
  generate(prompt: string, options: EngineGenerateOptions): Answer<undefined>;
  generateTokens(tokens: number[], options: EngineGenerateOptions): Answer<undefined>;
  embed(texts: string[], options: EmbedOptions): Answer<undefined>;
  warmUp(milliseconds: number): Answer<undefined>;
  // At any time, also while a job runs.
  liveUnits(): LiveUnit[];
  takeTokens(): Array<{ token: number; text: string }>;
  takeResult(): JobOutcome;
  busy(): boolean;
  cancel(): number;
  info(): Answer<unknown>;
  tokenize(text: string, addSpecial: boolean, parseSpecial: boolean): Answer<Int32Array>;
  detokenize(tokens: number[]): Answer<string>;
  reset(): Answer<undefined>;
  stats(): Answer<Record<string, unknown>>;
  close(): void;
  delete(): void;
}

// How a job ended (Session::take_result): a generation's statistics, or an
// embed job's vectors and the tokens its texts took.
export interface JobOutcome {
  ok: boolean;
  error?: { kind: string; message: string };
  stats?: unknown;
  embeddings?: { vectors: Float32Array[]; tokens: number };
}

// A stream unit as the loader's counters describe it (bindings.cpp).
export interface LiveUnit {
  name: string;
  bytes: number;
  loads: number;      // in the running (or last) request
  resident: boolean;  // kept in memory once loaded
  used: boolean;      // the running (or last) request has computed with it
}

export interface Registry {
  stores: Map<number, unknown>;
  bytes: Map<number, Uint8Array>;
  onEvent(sessionId: number, kind: 'tokens' | 'done' | 'progress', data?: unknown): void;
}

export interface EngineModule {
  Session: new (id: number) => EngineSession;
  listCachedModels(storeId: number): Answer<unknown[]>;
  deleteCachedModel(storeId: number, url: string): Answer<undefined>;
  jsonSchemaToGrammar(schema: string): Answer<string>;
  jsonObjectGrammar(): Answer<string>;
  threaded: boolean;
  sipllmRegistry?: Registry;
}

type Factory = (settings: Record<string, unknown>) => Promise<EngineModule>;

const EXPORT_NAMES: Record<Build, string> = { threaded: 'SipllmThreaded', single: 'SipllmSingle' };

export async function loadEngineModule(build: Build, wasmBaseUrl: string, poolSize: number): Promise<EngineModule> {
  const base = wasmBaseUrl.endsWith('/') ? wasmBaseUrl : `${wasmBaseUrl}/`;
  const name = `sipllm-${build}`;
  const settings: Record<string, unknown> = { sipllmPoolSize: poolSize };
  if (isNode) {
    const { createRequire } = await nodeImport<typeof import('node:module')>('node:module');
    const { readFile } = await nodeImport<typeof import('node:fs/promises')>('node:fs/promises');
    const { fileURLToPath } = await nodeImport<typeof import('node:url')>('node:url');
    const path = (file: string) => fileURLToPath(new URL(file, base));
    let factory: Factory;
    try {
      factory = createRequire(path(`${name}.js`))(path(`${name}.js`)) as Factory;
      // Node's fetch() cannot read files, so the module gets its bytes.
      settings.wasmBinary = await readFile(path(`${name}.wasm`));
    } catch (error) {
      throw new Error(`cannot load the ${build} WebAssembly build from ${base}: ${(error as Error).message} ` +
                      '(run scripts/build-wasm.sh)');
    }
    settings.locateFile = (file: string) => path(file);
    return factory(settings);
  }
  const scriptUrl = new URL(`${name}.js`, base).href;
  const response = await fetch(scriptUrl);
  if (!response.ok) throw new Error(`cannot load the ${build} WebAssembly build: ${scriptUrl} answered ${response.status}`);
  // The module is a classic script defining one factory; evaluate it here.
  const factory = new Function(`${await response.text()}\nreturn ${EXPORT_NAMES[build]};`)() as Factory;
  settings.locateFile = (file: string) => new URL(file, base).href;
  // The pthread workers load the same script by URL.
  settings.mainScriptUrlOrBlob = scriptUrl;
  return factory(settings);
}

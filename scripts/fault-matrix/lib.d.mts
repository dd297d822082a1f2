// Types of lib.mjs, for the TypeScript suites that use it (web/test, demo/e2e).

export const repoRoot: string;
export const bundledModel: string;
export const defaultCli: string;

export interface Settings {
  prompt: string;
  maxTokens: number;
  threads: number;
  maxRetries: number;
  backoffMs: number;
  readTimeoutMs: number;
  cachePageBytes: number;
  memoryBudget: number | null;
  cellTimeoutMs: number;
}
export const SETTINGS: Settings;

export interface Fault {
  spec: string | null;
  expect: 'text' | 'error' | 'either';
  error?: RegExp[];
  dropsCache?: boolean;
  clients?: Record<string, Partial<Fault>>;
  ci?: boolean;
  what: string;
}
export const FAULTS: Fault[];
export const CI_FAULTS: Fault[];
export function faultName(fault: Fault): string;

export interface LogEntry {
  method: string;
  url: string;
  range: string | null;
  status: number;
  bytes: number;
  fault: string | null;
}
export interface FaultServer {
  url: string;
  base: string;
  setFault(spec: string | null): void;
  reset(): void;
  stats(): { requests: number; bytes: number; log: LogEntry[] };
  close(): Promise<void>;
}
export function startFaultServer(model?: string): Promise<FaultServer>;
export function startPageServer(): Promise<{ url: string; close(): Promise<void> }>;

export interface RunResult {
  ok: boolean;
  hang?: boolean;
  text: string;
  ms: number;
  error?: { name: string; kind: string | null; message: string };
}
export interface Client {
  name: string;
  newCache(): string | Promise<string>;
  readCache(ref: string): Record<string, Uint8Array> | Promise<Record<string, Uint8Array>>;
  dropCache(ref: string): unknown;
  run(url: string, cacheRef: string | null): Promise<RunResult>;
}
type Build = 'auto' | 'threaded' | 'single';
export function nativeClient(options?: { cli?: string; settings?: Settings }): Client;
export function nodeClient(options: { SipLLM: unknown; settings?: Settings; build?: Build }): Client;
export function nodeChildClient(options?: { settings?: Settings; build?: Build }): Client;
// `page` is a Playwright Page.
export function chromiumClient(options: {
  page: unknown; pageUrl: string; settings?: Settings; build?: Build; newPage?: () => Promise<unknown>;
}): Client & { open(): Promise<void> };
export function loadOptions(settings?: Settings, build?: Build): Record<string, unknown>;
export function runPackage(SipLLM: unknown, url: string, cache: string | false, settings?: Settings,
                           build?: Build): Promise<RunResult>;

export function expectedText(model?: string, options?: { cli?: string; settings?: Settings }): Promise<string>;
export function parseIndex(bytes: Uint8Array): { url: string; size: number; etag: string; pageBytes: number;
                                                 pages: boolean[] } | null;
export function checkCache(files: Record<string, Uint8Array>, model: Uint8Array):
  { kept: number; entries: number; problems: string[] };
export function tempDir(tag: string): string;

export interface Row {
  fault: string;
  client: string;
  cache: boolean;
  expect: Fault['expect'];
  outcome: 'text' | 'error' | 'hang';
  message: string;
  ms: number;
  requests: number;
  bytes: number;
  injected: number;
  kept: number | null;
  resumeBytes: number | null;
  problems: string[];
  pass: boolean;
}
export function runCell(cell: {
  server: FaultServer; client: Client; fault: Fault; cache: boolean; expected: string; model: Uint8Array;
}): Promise<Row>;
export function markdownTable(rows: Row[]): string;

// What the tests share: the real range server (scripts/range-server.mjs, in
// its own process), the fixture models, and the native CLI as the reference.

import { execFileSync, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
// The fixture models, gathered by the native build (tests/CMakeLists.txt).
export const modelsDir = process.env.SIPLLM_MODELS_DIR ?? resolve(repoRoot, 'build/native/tests/fixtures/models');
export const cliPath = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');

// A fixture by name, or any path.
export function modelPath(name: string): string {
  return name.startsWith('/') ? name : join(modelsDir, name);
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), `sipllm-${prefix}-`));
}

export interface ServerLogEntry {
  method: string;
  url: string;
  range: string | null;
  status: number;
  bytes: number;
  fault: string | null;  // what was done to the answer, e.g. "drop@1234"
  startMs: number;       // when the request arrived, ms since the Unix epoch
}

export class RangeServer {
  private constructor(private readonly process: ChildProcess, readonly url: string) {}

  // Serves `root` on a free port.
  static async start(root: string, extraArgs: string[] = []): Promise<RangeServer> {
    // With its standard input tied to this process, it stops with it even
    // when the tests are killed.
    const child = spawn(process.execPath, [join(repoRoot, 'scripts/range-server.mjs'), '--root', root, '--port', '0',
                                           '--exit-on-stdin-close', ...extraArgs],
                        { stdio: ['pipe', 'pipe', 'inherit'] });
    const firstLine = await new Promise<string>((resolveLine, reject) => {
      const lines = createInterface({ input: child.stdout! });
      lines.once('line', resolveLine);
      child.once('exit', (code) => reject(new Error(`range-server exited with ${code}`)));
    });
    return new RangeServer(child, (JSON.parse(firstLine) as { url: string }).url);
  }

  async stats(): Promise<{ requests: number; bytes: number; log: ServerLogEntry[] }> {
    return (await fetch(`${this.url}/__stats`)).json() as Promise<{ requests: number; bytes: number; log: ServerLogEntry[] }>;
  }

  async reset(): Promise<void> {
    await fetch(`${this.url}/__reset`, { method: 'POST' });
  }

  async stop(): Promise<void> {
    const exited = new Promise((done) => this.process.once('exit', done));
    this.process.kill('SIGTERM');
    await exited;
  }
}

// A directory to serve: links to fixture models, plus files written here.
export function serveDir(links: string[], files: Record<string, Uint8Array> = {}): string {
  const dir = tempDir('root');
  for (const name of links) symlinkSync(modelPath(name), join(dir, name));
  for (const [name, bytes] of Object.entries(files)) writeFileSync(join(dir, name), bytes);
  return dir;
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

function requireCli(): void {
  if (!existsSync(cliPath)) {
    throw new Error(`the native CLI ${cliPath} is missing: build it with scripts/build-native.sh (or set SIPLLM_CLI)`);
  }
}

// The native engine's greedy continuation of `prompt`: `sipllm run` prints
// the prompt, the generated text, then a newline.
export function nativeGreedy(model: string, prompt: string, tokens: number): string {
  return nativeRun(model, prompt, tokens, ['--temp', '0']);
}

// The same with any sampling flags of `sipllm run`.
export function nativeRun(model: string, prompt: string, tokens: number, flags: string[]): string {
  requireCli();
  const out = execFileSync(cliPath, ['run', '-m', modelPath(model), '-p', prompt, '-n', String(tokens), '--threads', '1', ...flags],
                           { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  if (!out.startsWith(prompt) || !out.endsWith('\n')) throw new Error(`unexpected output from ${cliPath}: ${out}`);
  return out.slice(prompt.length, -1);
}

// A random-weight model of a real shape, written by the native CLI: large
// enough that a token takes milliseconds.
export function generateModel(dir: string, shape: string, type: string, vocab: string): string {
  requireCli();
  const out = join(dir, `${shape}-${type}.gguf`);
  execFileSync(cliPath, ['gen', '--shape', shape, '--type', type, '--vocab', modelPath(vocab), '-o', out], { stdio: 'ignore' });
  return out;
}

export function nativeTokenize(model: string, text: string): number[] {
  requireCli();
  const out = execFileSync(cliPath, ['tokenize', '-m', modelPath(model), '-p', text], { encoding: 'utf8' });
  return out.trim().split(/\s+/).map(Number);
}

export async function collect(pieces: AsyncIterable<string>): Promise<string> {
  let text = '';
  for await (const piece of pieces) text += piece;
  return text;
}

export function fileSize(name: string): number {
  return readFileSync(modelPath(name)).length;
}

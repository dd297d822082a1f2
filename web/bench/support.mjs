// What the package's figure scripts share: the repository's root, their
// command-line options, and a range server run as a child process.
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const cliPath = process.env.SIPLLM_CLI ?? join(repoRoot, 'build/native/engine/sipllm');

const args = process.argv.slice(2);
export function option(name, fallback) {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : fallback;
}

// scripts/range-server.mjs serving `root`, with its other options `extra`.
export async function startServer(root, extra = []) {
  const child = spawn(process.execPath, [join(repoRoot, 'scripts/range-server.mjs'), '--root', root, '--port', '0',
                                         '--exit-on-stdin-close', ...extra], { stdio: ['pipe', 'pipe', 'inherit'] });
  const line = await new Promise((done) => createInterface({ input: child.stdout }).once('line', done));
  return { url: JSON.parse(line).url, stop: () => child.kill('SIGTERM') };
}

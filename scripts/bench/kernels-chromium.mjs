// Runs the WebAssembly kernel benchmark that scripts/bench-kernels-wasm.sh
// --chromium built in DIR in Chromium, on a cross-origin isolated page (its
// threads need SharedArrayBuffer), and prints what it prints.
//   node scripts/bench/kernels-chromium.mjs DIR
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM_ARGS } from './support.mjs';

const dir = process.argv[2];
if (!dir) throw new Error('usage: node scripts/bench/kernels-chromium.mjs DIR');
const PAGE = `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,"><script>
var Module = {
  print: (text) => console.log(text),
  printErr: (text) => console.log(text),
  onExit: (code) => console.log('kernels-bench-exit ' + code),
  onAbort: (what) => console.log('kernels-bench-exit abort: ' + what),
};
</script><script src="kernels_bench.js"></script>`;
const TYPES = { '.js': 'text/javascript', '.wasm': 'application/wasm' };

const server = createServer(async (request, response) => {
  const headers = { 'Cross-Origin-Opener-Policy': 'same-origin', 'Cross-Origin-Embedder-Policy': 'require-corp' };
  const path = new URL(request.url, 'http://localhost').pathname;
  if (path === '/') {
    response.writeHead(200, { ...headers, 'Content-Type': 'text/html' }).end(PAGE);
    return;
  }
  try {
    const body = await readFile(join(dir, path.replace(/^\/+/, '').replace(/\.\.\//g, '')));
    const type = TYPES[path.slice(path.lastIndexOf('.'))] ?? 'application/octet-stream';
    response.writeHead(200, { ...headers, 'Content-Type': type }).end(body);
  } catch {
    response.writeHead(404, headers).end();
  }
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: CHROMIUM_ARGS });
let status = 1;
try {
  const page = await browser.newPage();
  const finished = new Promise((resolve) => {
    page.on('console', (message) => {
      const text = message.text();
      if (text.startsWith('kernels-bench-exit ')) {
        status = text === 'kernels-bench-exit 0' ? 0 : 1;
        if (status !== 0) console.error(text.slice('kernels-bench-exit '.length));
        resolve();
      } else {
        console.log(text);
      }
    });
    page.on('pageerror', (error) => { console.error(`page error: ${error.message}`); resolve(); });
  });
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  await finished;
} finally {
  await browser.close();
  server.close();
}
process.exit(status);

#!/usr/bin/env node
// The HTTP fault matrix (scripts/fault-matrix/lib.mjs): every fault of the
// range server × {native CLI, Node package, Chromium page} × {cache on, off},
// printed as a Markdown table (fault, client, cache → outcome, time, bytes).
//
//   node scripts/fault-matrix.mjs [--ci] [--clients native,node,chromium[,node-single,chromium-single]]
//        [--faults SPEC;SPEC...] [--cache on,off] [--model PATH] [--budget BYTES]
//        [--cell-timeout-s S] [--out FILE]
//
// --ci runs the reduced matrix the test suites run. --budget 0 streams every
// block for every token, so that faults land in mid-generation too (without
// a cache, every token's blocks cross the network).
// --faults takes specs of the catalogue in lib.mjs; any other spec runs
// with the outcome left open (text or an error, whichever). A cell that runs
// over --cell-timeout-s (default 120) counts as a hang. Needs the native
// CLI (scripts/build-native.sh), and for node and chromium the WebAssembly builds
// and the package (scripts/build-wasm.sh, npm run build --workspace web);
// chromium is Debian's /usr/bin/chromium (CHROMIUM_PATH) through
// playwright-core. Exits 1 when a cell fails, 2 on bad arguments.
import { readFileSync, writeFileSync } from 'node:fs';

import {
  CI_FAULTS, FAULTS, SETTINGS, bundledModel, chromiumClient, expectedText, faultName, markdownTable, nativeClient,
  nodeChildClient, runCell, startFaultServer, startPageServer,
} from './fault-matrix/lib.mjs';

// The three clients, and the single-thread WebAssembly build under Node and
// in Chromium (other transports: a fetcher thread, a synchronous XHR).
const CLIENTS = ['native', 'node', 'chromium', 'node-single', 'chromium-single'];

function parseArgs(argv) {
  const options = { ci: false, clients: ['native', 'node', 'chromium'], faults: null, cache: [true, false],
                    model: bundledModel, out: null, budget: null, cellTimeoutS: null };
  for (let i = 0; i < argv.length; ++i) {
    const flag = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${flag} needs a value`);
      return argv[++i];
    };
    if (flag === '--ci') options.ci = true;
    else if (flag === '--clients') options.clients = value().split(',');
    else if (flag === '--faults') options.faults = value().split(';');
    else if (flag === '--cache') options.cache = value().split(',').map((v) => v === 'on');
    else if (flag === '--model') options.model = value();
    else if (flag === '--out') options.out = value();
    else if (flag === '--budget') options.budget = Number(value());
    else if (flag === '--cell-timeout-s') options.cellTimeoutS = Number(value());
    else throw new Error(`unknown option '${flag}'`);
  }
  for (const client of options.clients) {
    if (!CLIENTS.includes(client)) throw new Error(`unknown client '${client}' (known: ${CLIENTS.join(', ')})`);
  }
  return options;
}

async function launchChromium() {
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'],
  });
  return browser;
}

async function main() {
  let options;
  try {
    options = parseArgs(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`fault-matrix: ${error.message}\n`);
    process.exit(2);
  }
  const catalogue = options.ci ? CI_FAULTS : FAULTS;
  const faults = options.faults === null ? catalogue
    : options.faults.map((spec) => FAULTS.find((f) => faultName(f) === spec) ?? { spec, expect: 'either', what: '' });
  const settings = { ...SETTINGS, memoryBudget: options.budget };
  if (options.cellTimeoutS !== null) settings.cellTimeoutMs = options.cellTimeoutS * 1000;
  const model = readFileSync(options.model);
  const expected = await expectedText(options.model, { settings });
  const server = await startFaultServer(options.model);
  const closers = [() => server.close()];
  const clients = [];
  try {
    let browser = null;
    let pages = null;
    for (const name of options.clients) {
      const build = name.endsWith('-single') ? 'single' : 'auto';
      if (name === 'native') clients.push(nativeClient({ settings }));
      if (name.startsWith('node')) clients.push(nodeChildClient({ build, settings }));
      if (name.startsWith('chromium')) {
        if (browser === null) {
          pages = await startPageServer();
          closers.push(() => pages.close());
          browser = await launchChromium();
          closers.push(() => browser.close());
        }
        const client = chromiumClient({ page: await browser.newPage(), pageUrl: pages.url,
                                        newPage: () => browser.newPage(), build, settings });
        await client.open();
        clients.push(client);
      }
    }
    const rows = [];
    const started = performance.now();
    for (const fault of faults) {
      for (const client of clients) {
        for (const cache of options.cache) {
          const row = await runCell({ server, client, fault, cache, expected, model });
          rows.push(row);
          process.stderr.write(`${row.pass ? 'pass' : 'FAIL'}  ${faultName(fault)}  ${client.name}  cache ${
            cache ? 'on' : 'off'}  ${row.outcome}  ${(row.ms / 1000).toFixed(1)} s${
            row.pass ? '' : `\n      ${row.problems.join('\n      ')}`}\n`);
        }
      }
    }
    const failed = rows.filter((r) => !r.pass).length;
    const table = `${markdownTable(rows)}\n\n${rows.length} cells, ${failed} failed, ${
      ((performance.now() - started) / 1000).toFixed(0)} s; fault-free text: ${JSON.stringify(expected)}\n`;
    process.stdout.write(table);
    if (options.out !== null) writeFileSync(options.out, table);
    process.exitCode = failed > 0 ? 1 : 0;
  } finally {
    for (const close of closers.reverse()) await close().catch(() => {});
  }
}

main().catch((error) => {
  process.stderr.write(`fault-matrix: ${error.stack}\n`);
  process.exit(1);
});

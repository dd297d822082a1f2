// What the benchmarks share (run.mjs, large-model.mjs, native-peer.mjs):
// running the native CLI and reading its benchmark's figures, fitting a
// prompt to a token count, and watching the browser's processes through /proc.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

export function run(command, args, what) {
  console.log(`$ ${[command, ...args].join(' ')}`);
  try {
    execFileSync(command, args, { cwd: repoRoot, stdio: 'inherit' });
  } catch (error) {
    throw new Error(`${what} failed (${error.message.split('\n')[0]})`);
  }
}

// The native engine's figures on `model` from `sipllm bench`, best of `runs`:
// prefill with the weights already in memory ("prefill again", as a warm
// run in the browser and llama.cpp's mapped file have them), the first
// prefill (which reads them as it goes), decode, and decode's weight bytes
// per second against the read probe's; a prompt token's multiply-adds in the
// blocks' matrices and the dot product peak (G multiply-adds/s with as many
// threads); and the kernels it names.
export function nativeBenchFigures(cli, model, { threads, promptTokens, genTokens, runs }) {
  let best = { prefill: 0, firstPrefill: 0, decode: 0, decodeGBps: 0, readGBps: 0, macsPerToken: 0, peakGmacs: 0,
    kernels: '' };
  for (let k = 0; k < runs; ++k) {
    const out = execFileSync(cli, ['bench', '-m', model, '--threads', String(threads), '--prompt-tokens',
      String(promptTokens), '--gen-tokens', String(genTokens)], { encoding: 'utf8' });
    const firstPrefill = Number(/^prefill +([0-9.]+) tokens\/s/m.exec(out)?.[1] ?? 0);
    const prefill = Number(/^prefill again +([0-9.]+) tokens\/s/m.exec(out)?.[1] ?? 0);
    const decode = Number(/^decode +([0-9.]+) tokens\/s/m.exec(out)?.[1] ?? 0);
    const gbps = /^weight bandwidth .*read in decode: ([0-9.]+) GB\/s, .*read probe's ([0-9.]+) GB\/s/m.exec(out);
    const macs = /^matrix products .*: ([0-9.]+) G multiply-adds\/s .*peak's ([0-9.]+) G\/s/m.exec(out);
    best = {
      prefill: Math.max(best.prefill, prefill),
      firstPrefill: Math.max(best.firstPrefill, firstPrefill),
      decode: Math.max(best.decode, decode),
      decodeGBps: Math.max(best.decodeGBps, Number(gbps?.[1] ?? 0)),
      readGBps: Math.max(best.readGBps, Number(gbps?.[2] ?? 0)),
      macsPerToken: macs && prefill ? Number(macs[1]) * 1e9 / prefill : best.macsPerToken,
      peakGmacs: Math.max(best.peakGmacs, Number(macs?.[2] ?? 0)),
      kernels: /^kernels +(.*)$/m.exec(out)?.[1] ?? best.kernels,
    };
  }
  return best;
}

// Plain text (no digits, no punctuation runs) that tokenizes alike everywhere.
const PASSAGE = `The old lighthouse keeper climbed the narrow stairs every evening, carrying a lamp and a
small notebook in which he wrote down the colour of the sea, the shape of the clouds and the names of
the boats that passed the rocks before dark. Over the years the notebook became a long letter to
nobody in particular, full of weather and patience. Children from the village sometimes followed him
up to the gallery, where the wind was strong enough to lean on, and he would point out the gulls, the
fishing nets drying on the harbour wall and the faint line where the water changed from green to deep
blue. He told them that the light was not there to show the way home but to show where the danger
was, and that a good sailor learns the difference early. In winter the storms came from the west and
the whole tower hummed like a bell, yet the lamp kept turning, slow and steady, while the keeper sat
by the stove mending sails for his neighbours and listening to the radio reports from distant ports.
When the new automatic beacon was finally installed, he kept climbing the stairs anyway, because the
sea still needed someone to watch it, and because the notebook was not yet finished.`;

function tokenCount(cli, model, text) {
  let out;
  try {
    out = execFileSync(cli, ['tokenize', '-m', model, '-p', text], { encoding: 'utf8' });
  } catch (error) {
    throw new Error(`${cli} tokenize failed on ${model}: ${error.message.split('\n')[0]}`);
  }
  return out.trim().split(/\s+/).filter(Boolean).length;
}

// The longest run of whole words of PASSAGE (repeated as needed) that stays
// within `target` tokens, then " and" (one token) until it is exactly there.
export function fitPrompt(cli, model, target) {
  const base = PASSAGE.split(/\s+/);
  let words = base;
  while (tokenCount(cli, model, words.join(' ')) < target) words = words.concat(base);
  let lo = 1;
  let hi = words.length;  // count(lo words) <= target < count(hi words), unless lo is too long already
  if (tokenCount(cli, model, words[0]) > target) throw new Error(`--prompt-tokens ${target} is too short for a prompt`);
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (tokenCount(cli, model, words.slice(0, mid).join(' ')) <= target) lo = mid;
    else hi = mid;
  }
  let text = words.slice(0, lo).join(' ');
  let n = tokenCount(cli, model, text);
  while (n < target) {
    text += ' and';
    n = tokenCount(cli, model, text);
  }
  if (n !== target) throw new Error(`could not fit a prompt to exactly ${target} tokens (got ${n})`);
  return text;
}

// ---- The browser's processes ----------------------------------------------------------

export function processTable() {
  const table = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      table.set(Number(entry), { ppid, cmdline });
    } catch {
      // The process ended while we looked.
    }
  }
  return table;
}

export function statusField(pid, field) {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return match ? Number(match[1]) * 1024 : null;
  } catch {
    return null;
  }
}

// The processes this one started (the browser and its children).
export function ourProcesses(table) {
  const ours = new Set([process.pid]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const [pid, { ppid }] of table) {
      if (!ours.has(pid) && ours.has(ppid)) {
        ours.add(pid);
        grew = true;
      }
    }
  }
  return ours;
}

// Peak resident set (VmHWM; `field` VmRSS: the current one) of the renderer
// processes of the browser this process started (the page, its workers and
// their WebAssembly memory live in one): the largest.
export function rendererMemoryBytes(field = 'VmHWM') {
  const table = processTable();
  let peak = null;
  for (const pid of ourProcesses(table)) {
    if (!table.get(pid)?.cmdline.includes('--type=renderer')) continue;
    const bytes = statusField(pid, field);
    if (bytes !== null && (peak === null || bytes > peak)) peak = bytes;
  }
  return peak;
}

// CPU time so far (ms) of the browser's processes by kind, and of this
// process, which runs the model server: who used the two cores while the
// bytes arrived. /proc counts in ticks of 10 ms.
const TICK_MS = 10;
function processKind(cmdline) {
  if (cmdline.includes('--type=renderer')) return 'renderer';
  if (cmdline.includes('network.mojom.NetworkService')) return 'network';
  if (cmdline.includes('--type=gpu-process')) return 'gpu';
  if (cmdline.includes('--type=')) return 'otherBrowser';
  return 'browser';
}

// The browser's processes and their kinds, listed once per run (walking
// /proc at every sample would cost the machine more than what it measures).
export function browserProcesses() {
  const table = processTable();
  return [...ourProcesses(table)].filter((pid) => pid !== process.pid)
    .map((pid) => ({ pid, kind: processKind(table.get(pid).cmdline) }));
}

export function cpuSample(processes) {
  const sample = { atMs: performance.timeOrigin + performance.now(), server: 0, renderer: 0, network: 0, gpu: 0, browser: 0, otherBrowser: 0 };
  for (const { pid, kind } of processes) {
    try {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      sample[kind] += (Number(fields[11]) + Number(fields[12])) * TICK_MS;
    } catch {
      // The process ended while we looked.
    }
  }
  const own = process.cpuUsage();
  sample.server = (own.user + own.system) / 1000;
  return sample;
}

export function withTimeout(promise, seconds, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took more than ${seconds} s (see --timeout)`)), seconds * 1000);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// A figure for a table: '–' when there is none.
export const fmt = (v, digits = 0) => (v === null || v === undefined || !Number.isFinite(v) ? '–' : v.toFixed(digits));

// Native llama.cpp, the peer: the CPU build that node-llama-cpp ships (its
// prebuilt binary for this CPU, picked at run time: AVX2/AVX-512 kernels,
// llama.cpp's own thread pool), installed from npm into build/bench/peer on
// first use.
export const LLAMA_CPP_PEER = 'node-llama-cpp 3.22.1';

export async function loadLlamaCpp() {
  const dir = join(repoRoot, 'build/bench/peer');
  const entry = join(dir, 'node_modules/node-llama-cpp/dist/index.js');
  if (!existsSync(entry)) {
    mkdirSync(dir, { recursive: true });
    const spec = LLAMA_CPP_PEER.replace(' ', '@');
    console.error(`installing ${spec} into ${dir}`);
    execFileSync('npm', ['install', '--no-audit', '--no-fund', '--prefix', dir, spec], { stdio: 'inherit' });
  }
  const peer = await import(pathToFileURL(entry).href);
  return peer.getLlama({ gpu: false, build: 'never', maxThreads: 0 });
}

// llama.cpp's figures for `model`: context 512, batch 512, `threads` for
// prompt and generation; prefill = promptTokens / the time to evaluate them,
// decode = (genTokens - 1) / (first .. last generated token), greedy; the
// best of `runs` each.
export async function llamaCppFigures(llama, model, { threads, promptTokens, genTokens, runs }) {
  const m = await llama.loadModel({ modelPath: model, gpuLayers: 0 });
  const context = await m.createContext({ contextSize: 512, batchSize: 512, threads: { ideal: threads, min: threads } });
  const sequence = context.getSequence();
  const words = m.tokenize('The quick brown fox jumps over the lazy dog while the river runs to the sea. ');
  const prompt = [];
  while (prompt.length < promptTokens) prompt.push(...words);
  prompt.length = promptTokens;
  let best = { prefill: 0, decode: 0 };
  for (let run = 0; run < runs; ++run) {
    await sequence.clearHistory();
    let t0 = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(prompt);
    const prefill = promptTokens / ((performance.now() - t0) / 1000);
    await sequence.clearHistory();
    let first = 0;
    let count = 0;
    t0 = performance.now();
    for await (const token of sequence.evaluate(prompt, { temperature: 0 })) {
      void token;
      if (++count === 1) first = performance.now();
      if (count === genTokens) break;
    }
    const decode = (genTokens - 1) / ((performance.now() - first) / 1000);
    best = { prefill: Math.max(best.prefill, prefill), decode: Math.max(best.decode, decode) };
  }
  await context.dispose();
  await m.dispose();
  return best;
}

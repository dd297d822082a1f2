// What the fault matrix asks of a browser page (see lib.mjs): one load and
// generation of a model URL, and the OPFS cache read back, file by file.
import { SipLLM } from '/sipllm/dist/index.js';

// Loads `url`, generates greedily, unloads. Never throws: the outcome is
// data, with the text generated before any error.
async function runCell({ url, cache, load, prompt, maxTokens }) {
  let text = '';
  let llm = null;
  const started = performance.now();
  try {
    llm = await SipLLM.load(url, { ...load, cache });
    for await (const piece of llm.generate(prompt, { maxTokens, temperature: 0 })) text += piece;
    return { ok: true, text, ms: performance.now() - started, source: llm.stats().source, build: llm.stats().build };
  } catch (error) {
    return {
      ok: false, text, ms: performance.now() - started,
      error: { name: error?.name ?? 'Error', kind: error?.kind ?? null, message: error?.message ?? String(error) },
    };
  } finally {
    await llm?.unload().catch(() => {});
  }
}

// A model kept open between calls, to close it while its ranges are in flight.
let held = null;

async function openModel({ url, cache, load }) {
  held = await SipLLM.load(url, { ...load, cache });
  return held.stats().build;
}

async function closeModel() {
  await held?.unload();
  held = null;
}

const HEADER_BYTES = 4096;  // web/src/worker/stores.ts: each OPFS file starts with the name it stands for
const MAGIC = 'sipllm-cache-file 1\n';

function base64(bytes) {
  let text = '';
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

// The store's files in OPFS directory `name`: { storeName: base64 bytes }.
async function readCache(name) {
  const root = await navigator.storage.getDirectory();
  let directory;
  try {
    directory = await root.getDirectoryHandle(name);
  } catch {
    return {};
  }
  const files = {};
  for await (const [, handle] of directory.entries()) {
    if (handle.kind !== 'file') continue;
    const bytes = new Uint8Array(await (await handle.getFile()).arrayBuffer());
    if (bytes.length < HEADER_BYTES) continue;  // a spare, or an entry removed since
    const header = new TextDecoder().decode(bytes.subarray(0, HEADER_BYTES));
    if (!header.startsWith(MAGIC)) continue;
    files[header.slice(MAGIC.length).split('\n')[0]] = base64(bytes.subarray(HEADER_BYTES));
  }
  return files;
}

async function dropCache(name) {
  const root = await navigator.storage.getDirectory();
  await root.removeEntry(name, { recursive: true }).catch(() => {});
}

Object.assign(globalThis, { runCell, readCache, dropCache, openModel, closeModel });
document.getElementById('state').textContent = 'ready';

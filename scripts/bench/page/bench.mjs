// The in-page half of the benchmark (scripts/bench/run.mjs drives it). One
// function per engine; each loads one model from a URL with nothing cached,
// runs the same prompt once cold and then warm, and returns what it saw.
// Every time is taken here, with performance.now(), as a page would see it.
//
// Per generation: callMs (the request is made), firstMs / lastMs (the first
// and the last non-empty piece reach the page), endMs (the request settles),
// plus the token counts and figures each engine reports about itself.

// Each engine's module is imported before its clock starts (a page has its
// scripts before it loads a model), and only by its own run, so that one
// engine's missing build does not stop the other.
const SIPLLM_WASM_BASE = '/web/wasm/';
const WLLAMA_WASM = new URL('/node_modules/@wllama/wllama/esm/wasm/wllama.wasm', location.href).href;

function log(message) {
  document.getElementById('log').textContent += `\n${message}`;
  console.log(`[bench] ${message}`);
}

function errorText(error) {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

// Timestamps of the pieces of one generation as they reach the page.
class PieceClock {
  constructor() {
    this.callMs = performance.now();
    this.firstMs = null;
    this.lastMs = null;
    this.pieces = 0;
    this.text = '';
  }

  piece(text) {
    if (text.length === 0) return;
    const now = performance.now();
    if (this.firstMs === null) this.firstMs = now;
    this.lastMs = now;
    this.pieces += 1;
    this.text += text;
  }

  finish(counts) {
    return {
      callMs: this.callMs, firstMs: this.firstMs, lastMs: this.lastMs, endMs: performance.now(),
      pieces: this.pieces, text: this.text, ...counts,
    };
  }
}

async function withErrors(run) {
  const result = { crossOriginIsolated: globalThis.crossOriginIsolated === true, cores: navigator.hardwareConcurrency };
  try {
    await run(result);
  } catch (error) {
    result.error = errorText(error);
    log(`failed: ${result.error}`);
  }
  return result;
}

// ---- SipLLM ---------------------------------------------------------------------

async function sipllmGenerate(llm, prompt, options) {
  const clock = new PieceClock();
  const iterator = llm.generate(prompt, options);
  let step;
  while (!(step = await iterator.next()).done) clock.piece(step.value);
  const g = step.value;
  return clock.finish({
    promptTokens: g.promptTokens,
    cachedTokens: g.reusedTokens,
    generatedTokens: g.generatedTokens,
    stopReason: g.stopReason,
    engine: {
      promptMs: g.promptMs, decodeMs: g.decodeMs, ttftMs: g.ttftMs,
      prefillTokensPerS: g.promptTokensPerS, decodeTokensPerS: g.decodeTokensPerS,
      prefillParallel: g.prefillParallel, decodeParallel: g.decodeParallel,
    },
  });
}

async function benchSipllm({ url, threads, prompt, maxTokens, ban, contextLength, warmRuns, seed, sipllmWasmBase, sipllmBuild }) {
  return withErrors(async (result) => {
    const { SipLLM } = await import('sipllm');
    const logitBias = new Map(ban.map((token) => [token, -Infinity]));
    const options = { maxTokens, temperature: 0, seed, logitBias };
    log(`SipLLM: loading ${url} with ${threads} threads`);
    const t0 = performance.now();
    const wasmBaseUrl = new URL(sipllmWasmBase ?? SIPLLM_WASM_BASE, location.href).href;
    const llm = await SipLLM.load(url, { threads, cache: false, build: sipllmBuild ?? 'auto', contextLength, wasmBaseUrl });
    result.loadMs = performance.now() - t0;
    // Epoch times (as the servers and the engine's loader timeline keep them).
    result.timeOriginMs = performance.timeOrigin;
    result.calledAtMs = performance.timeOrigin + t0;
    result.loadTimes = llm.stats().load;
    log(`SipLLM: loaded in ${result.loadMs.toFixed(0)} ms; cold run`);
    const cold = await sipllmGenerate(llm, prompt, options);
    result.coldTtftMs = cold.firstMs - t0;
    result.cold = cold;
    // How the weights arrived during the cold request (per block: I/O,
    // prepare and compute times), to explain its time to first token.
    result.coldLoader = llm.stats().loader;
    result.warm = [];
    for (let i = 0; i < warmRuns; ++i) {
      await llm.reset();
      log(`SipLLM: warm run ${i + 1}`);
      result.warm.push(await sipllmGenerate(llm, prompt, options));
    }
    const stats = llm.stats();
    result.build = stats.build;
    result.threads = stats.threads;
    result.heapBytes = stats.heapBytes;
    result.kvCacheBytes = stats.kvCacheBytes;
    result.source = stats.source;
    await llm.unload();
  });
}

// ---- wllama -------------------------------------------------------------------------

const quietLogger = { debug() {}, log() {}, info() {}, warn: console.warn, error: console.error };

async function wllamaGenerate(wllama, prompt, { maxTokens, ban, seed }) {
  // JSON has no -Infinity: llama.cpp's server reads `false` as a ban.
  const logitBias = Object.fromEntries(ban.map((token) => [String(token), false]));
  const clock = new PieceClock();
  let last = null;
  await wllama.createCompletion({
    prompt,
    max_tokens: maxTokens,
    temperature: 0,
    seed,
    logit_bias: logitBias,
    ignore_eos: true,
    cache_prompt: false,  // every run processes the whole prompt
    stream: true,
    onData: (chunk) => {
      last = chunk;
      clock.piece(chunk.choices?.[0]?.text ?? '');
    },
  });
  const timings = last?.timings ?? null;
  const usage = last?.usage ?? null;
  return clock.finish({
    promptTokens: timings ? timings.prompt_n + timings.cache_n : usage?.prompt_tokens ?? null,
    cachedTokens: timings ? timings.cache_n : null,
    generatedTokens: timings ? timings.predicted_n : usage?.completion_tokens ?? null,
    stopReason: last?.choices?.[0]?.finish_reason ?? null,
    engine: timings === null ? null : {
      promptMs: timings.prompt_ms, decodeMs: timings.predicted_ms,
      prefillTokensPerS: timings.prompt_per_second, decodeTokensPerS: timings.predicted_per_second,
      usage,
    },
  });
}

async function benchWllama({ url, threads, prompt, maxTokens, ban, contextLength, warmRuns, seed }) {
  return withErrors(async (result) => {
    const { Wllama } = await import('@wllama/wllama');
    result.version = Wllama.getLibllamaVersion();
    log(`wllama ${result.version}: loading ${url} with ${threads} threads`);
    const t0 = performance.now();
    const wllama = new Wllama({ default: WLLAMA_WASM }, { suppressNativeLog: true, logger: quietLogger });
    // useCache: false downloads again even if the file is in wllama's cache.
    await wllama.loadModelFromUrl(url, { n_threads: threads, n_ctx: contextLength, n_gpu_layers: 0, useCache: false });
    result.loadMs = performance.now() - t0;
    result.timeOriginMs = performance.timeOrigin;
    result.calledAtMs = performance.timeOrigin + t0;
    result.threads = wllama.getNumThreads();
    result.multithread = wllama.isMultithread();
    log(`wllama: loaded in ${result.loadMs.toFixed(0)} ms (${result.threads} threads); cold run`);
    const options = { maxTokens, ban, seed };
    const cold = await wllamaGenerate(wllama, prompt, options);
    result.coldTtftMs = cold.firstMs - t0;
    result.cold = cold;
    result.warm = [];
    for (let i = 0; i < warmRuns; ++i) {
      log(`wllama: warm run ${i + 1}`);
      result.warm.push(await wllamaGenerate(wllama, prompt, options));
    }
    await wllama.exit();
  });
}

// ---- The link alone -------------------------------------------------------------------

// How long this browser takes just to download the file over the same link:
// range requests of `pieceBytes`, `inFlight` at a time (as the engine's two
// load threads make them), each body read to the end and copied once, as the
// engine's transport does. The honest "pure transfer time" to hold a time to
// first token against: a browser spends CPU on every request and every byte.
async function benchDownload({ url, pieceBytes, inFlight }) {
  return withErrors(async (result) => {
    const head = await fetch(url, { headers: { Range: 'bytes=0-0' } });
    const size = Number((head.headers.get('content-range') ?? '').split('/')[1]);
    if (!(size > 0)) throw new Error(`${url}: no file size in the answer to a range request`);
    const sink = new Uint8Array(pieceBytes);
    let next = 0;
    const t0 = performance.now();
    const worker = async () => {
      while (next < size) {
        const offset = next;
        next += pieceBytes;
        const end = Math.min(offset + pieceBytes, size) - 1;
        const response = await fetch(url, { headers: { Range: `bytes=${offset}-${end}` } });
        const reader = response.body.getReader();
        let at = 0;
        for (;;) {
          const step = await reader.read();
          if (step.done) break;
          sink.set(step.value.subarray(0, Math.min(step.value.length, sink.length - at)), at);
          at += step.value.length;
        }
      }
    };
    await Promise.all(Array.from({ length: inFlight }, worker));
    result.downloadMs = performance.now() - t0;
    result.bytes = size;
  });
}

// ---- A model larger than the tab ------------------------------------------------------

// One load of `url` (a split set's first part names the set) within
// `memoryBudget`, with the persistent cache on: the prompt runs once, then
// the model is unloaded. The first load in a page streams from the network
// and keeps what it fetched; the next ones find everything in the cache.
async function benchBudgeted({ url, threads, prompt, maxTokens, ban, contextLength, memoryBudget, seed, sipllmBuild }) {
  return withErrors(async (result) => {
    const { SipLLM } = await import('sipllm');
    const logitBias = new Map(ban.map((token) => [token, -Infinity]));
    log(`SipLLM: loading ${url}, budget ${memoryBudget ?? 'none'}`);
    const t0 = performance.now();
    const llm = await SipLLM.load(url, {
      threads, cache: true, memoryBudget: memoryBudget ?? undefined, contextLength, build: sipllmBuild ?? 'auto',
      wasmBaseUrl: new URL(SIPLLM_WASM_BASE, location.href).href,
    });
    const loadMs = performance.now() - t0;
    const run = await sipllmGenerate(llm, prompt, { maxTokens, temperature: 0, seed, logitBias });
    const stats = llm.stats();
    const g = stats.lastGeneration;
    Object.assign(result, {
      loadMs, ttftMs: run.firstMs - t0, run, build: stats.build, threads: stats.threads,
      memoryBudget: stats.memoryBudget, heapBytes: stats.heapBytes, kvCacheBytes: stats.kvCacheBytes,
      source: stats.source, cache: stats.cache,
      prefillBytesRead: g.prefillBytesRead, decodeBytesRead: g.decodeBytesRead, kernels: g.kernels,
      loader: { ...stats.loader, timeline: undefined, units: stats.loader.units.map(({ name, bytes, resident, ioMs, loads }) => ({ name, bytes, resident, ioMs, loads })) },
    });
    await llm.unload();
  });
}

// The persistent cache's read bandwidth in this page: a file of `bytes` in
// OPFS, written, then read back `passes` times in pieces of `pieceBytes`
// through a synchronous access handle in a worker, as the engine's loader
// threads read their cache.
async function benchOpfsRead({ bytes, pieceBytes, passes }) {
  return withErrors(async (result) => {
    const source = `onmessage = async ({ data: { bytes, pieceBytes, passes } }) => {
      const root = await navigator.storage.getDirectory();
      const name = 'sipllm-bench-read-' + Date.now();
      const handle = await root.getFileHandle(name, { create: true });
      const file = await handle.createSyncAccessHandle();
      try {
        const piece = new Uint8Array(pieceBytes);
        for (let i = 0; i < piece.length; i += 4096) piece[i] = i & 255;
        const w0 = performance.now();
        for (let at = 0; at < bytes; at += pieceBytes) file.write(piece, { at });
        file.flush();
        const writeMs = performance.now() - w0;
        const readMs = [];
        for (let p = 0; p < passes; ++p) {
          const r0 = performance.now();
          for (let at = 0; at < bytes; at += pieceBytes) {
            if (file.read(piece, { at }) !== Math.min(pieceBytes, bytes - at)) throw new Error('short read at ' + at);
          }
          readMs.push(performance.now() - r0);
        }
        postMessage({ writeMs, readMs });
      } catch (error) {
        postMessage({ error: String(error) });
      } finally {
        file.close();
        await root.removeEntry(name);
      }
    };`;
    const worker = new Worker(URL.createObjectURL(new Blob([source], { type: 'text/javascript' })));
    const answer = await new Promise((done, fail) => {
      worker.onmessage = ({ data }) => done(data);
      worker.onerror = (event) => fail(new Error(event.message));
      worker.postMessage({ bytes, pieceBytes, passes });
    });
    worker.terminate();
    if (answer.error) throw new Error(answer.error);
    Object.assign(result, answer, { bytes, pieceBytes });
    result.readGBps = bytes / Math.min(...answer.readMs) / 1e6;
  });
}

// wllama on a split set, given its first part's URL (wllama derives the
// others); records what happened.
async function benchWllamaSplit({ url, threads, prompt, maxTokens, ban, contextLength, seed }) {
  return withErrors(async (result) => {
    const { Wllama } = await import('@wllama/wllama');
    result.version = Wllama.getLibllamaVersion();
    const t0 = performance.now();
    const wllama = new Wllama({ default: WLLAMA_WASM }, { suppressNativeLog: true, logger: quietLogger });
    try {
      await wllama.loadModelFromUrl(url, { n_threads: threads, n_ctx: contextLength, n_gpu_layers: 0, useCache: false });
      result.loadMs = performance.now() - t0;
      const run = await wllamaGenerate(wllama, prompt, { maxTokens, ban, seed });
      result.ttftMs = run.firstMs - t0;
      result.run = run;
    } finally {
      result.failedAfterMs = performance.now() - t0;
      await wllama.exit().catch(() => {});
    }
  });
}

Object.assign(globalThis, { benchSipllm, benchWllama, benchDownload, benchBudgeted, benchOpfsRead, benchWllamaSplit });
globalThis.benchReady = true;
log(`ready (crossOriginIsolated: ${globalThis.crossOriginIsolated})`);

// The live figures: speed of the last request, the prefetch ring's hit rate,
// memory against the budget, and where the engine runs. Each figure is an
// element with a data-figure name, so that it can be read back.

import type { GenerationStats, ModelInfo, Stats } from 'sipllm';

import { el, formatBytes, formatMs, formatPercent, formatRate } from './format.js';

export interface LiveRequest {
  startedAt: number;       // performance.now() when the request was sent
  firstPieceAt: number | null;
  pieces: number;
}

function row(name: string, label: string, value: string, detail = ''): HTMLElement {
  return el('div', { class: 'figure', 'data-figure': name },
    el('dt', {}, label),
    el('dd', {}, el('span', { class: 'value' }, value), detail === '' ? '' : el('span', { class: 'detail' }, ` ${detail}`)));
}

function hitRate(stats: Stats): { value: string; detail: string } {
  const { prefetchHits, prefetchMisses, residentHits } = stats.loader;
  const streamed = prefetchHits + prefetchMisses;
  if (streamed === 0) {
    return { value: '–', detail: residentHits > 0 ? `(no streamed loads: ${residentHits} resident hits)` : '' };
  }
  return { value: formatPercent(prefetchHits / streamed), detail: `(${prefetchHits} of ${streamed} streamed loads ready in time)` };
}

function memory(stats: Stats): { value: string; detail: string; fraction: number | null } {
  // What the budget covers: weights, and working memory (activations,
  // scratch and the KV cache).
  const inUse = stats.loader.residentBytes + stats.loader.ringBytes + stats.loader.workingBytes;
  const budget = stats.memoryBudget;
  const value = budget === null ? `${formatBytes(inUse)} (no budget)` : `${formatBytes(inUse)} of ${formatBytes(budget)}`;
  const detail = `weights: ${formatBytes(stats.loader.residentBytes)} resident + ${formatBytes(stats.loader.ringBytes)} ring; ` +
                 `working memory ${formatBytes(stats.loader.workingBytes)} (KV cache ${formatBytes(stats.kvCacheBytes)}); ` +
                 `WebAssembly heap ${formatBytes(stats.heapBytes)}`;
  return { value, detail, fraction: budget === null || budget === 0 ? null : inUse / budget };
}

const BUILD_NAMES: Record<Stats['build'], string> = {
  threaded: 'threaded build',
  relaxed: 'threaded build with relaxed SIMD',
  single: 'single-thread build',
};

export function renderFigures(target: HTMLElement, stats: Stats | null, live: LiveRequest | null): void {
  const rows: HTMLElement[] = [];
  const isolated = globalThis.crossOriginIsolated === true;
  rows.push(row('isolation', 'Cross-origin isolated', isolated ? 'yes' : 'no',
                isolated ? '(SharedArrayBuffer: threads available)' : '(no COOP/COEP: single-thread build)'));
  if (stats !== null) {
    rows.push(row('threads', 'Threads', String(stats.threads),
                  `(${BUILD_NAMES[stats.build]})`));
  }

  const generation: GenerationStats | null = stats?.lastGeneration ?? null;
  if (live !== null) {
    const elapsed = performance.now() - live.startedAt;
    const ttft = live.firstPieceAt === null ? 'waiting for the first token…' : formatMs(live.firstPieceAt - live.startedAt);
    rows.push(row('ttft', 'Time to first token', ttft, '(measured on the page)'));
    rows.push(row('live', 'Generating', `${live.pieces} pieces`, `in ${formatMs(elapsed)}`));
  } else if (generation !== null) {
    rows.push(row('ttft', 'Time to first token', formatMs(generation.ttftMs), '(in the engine)'));
    rows.push(row('prefill', 'Prefill', `${formatRate(generation.promptTokensPerS)} tok/s`,
                  `(${generation.promptTokens} prompt tokens, ${generation.reusedTokens} reused, ${formatMs(generation.promptMs)})`));
    rows.push(row('decode', 'Decode', `${formatRate(generation.decodeTokensPerS)} tok/s`,
                  `(${generation.generatedTokens} tokens in ${formatMs(generation.decodeMs)})`));
    rows.push(row('stop', 'Stopped by', generation.stopReason));
  } else {
    rows.push(row('ttft', 'Time to first token', '–', '(no request yet)'));
  }

  if (stats !== null) {
    const rate = hitRate(stats);
    rows.push(row('hit-rate', 'Prefetch hit rate', rate.value, rate.detail));
    const mem = memory(stats);
    const memoryRow = row('memory', 'Memory in use', mem.value, mem.detail);
    if (mem.fraction !== null) {
      const meter = el('meter', { min: 0, max: 1, value: Math.min(mem.fraction, 1), high: 0.9 });
      memoryRow.querySelector('dd')?.prepend(meter);
    }
    rows.push(memoryRow);
    const source = stats.source;
    if (source !== null) {
      const cache = stats.cache.enabled ? 'on' : stats.cache.error !== '' ? `off (${stats.cache.error})` : 'off';
      rows.push(row('network', 'Network', `${source.requests} request${source.requests === 1 ? '' : 's'}`,
                    `(${formatBytes(source.bytesFetched)} fetched, ${formatBytes(source.bytesFromCache)} from the cache; ` +
                    `cache ${cache}${source.retries > 0 ? `; ${source.retries} retries` : ''})`));
    }
  }
  target.replaceChildren(...rows);
}

export function renderModelInfo(target: HTMLElement, info: ModelInfo | null, label: string): void {
  if (info === null) {
    target.replaceChildren();
    return;
  }
  const types = Object.entries(info.tensorsByType).map(([type, n]) => `${type} ×${n}`).join(', ');
  const h = info.hyperparameters;
  target.replaceChildren(
    el('div', {}, el('strong', {}, label)),
    el('div', {}, `${info.architecture} · ${h.nLayers} blocks · dim ${h.dim} · ${h.nHeads} heads ` +
                  `(${h.nKvHeads} KV) · vocabulary ${h.nVocab} (${info.tokenizer}) · context ${h.contextLength}` +
                  (h.slidingWindow ? ` · window ${h.slidingWindow}` : '')),
    el('div', {}, `${formatBytes(info.fileBytes)} file, ${formatBytes(info.weightBytes)} of weights: ${types}`),
    el('div', { 'data-chat-template': info.chatTemplate !== '' ? 'yes' : 'no' },
       info.chatTemplate !== '' ? 'Has a chat template: chat mode uses it.' : 'No chat template: plain completion mode.'),
  );
}

// The download as a person sees it: a bar of the file's bytes delivered to
// the engine, and one cell per stream unit (a transformer block or a piece
// of the output head) saying where that unit stands, live: still waiting,
// streaming (its bytes arriving now), resident (kept in memory; under a
// budget, the experts of a mixture of experts used most lately are, and give
// way to ones used more) or streamed (re-read for every token because the
// memory budget cannot keep it); a unit
// that has arrived is also marked cached when the persistent cache keeps its
// bytes. The states come with the engine's progress events
// (LoadProgress.units), which it sends about every 100 ms while a request
// runs; the load counts in the cells' titles come from the figures of the
// last request. While bytes arrive, the bar's text also gives the measured
// rate and the expected time to the first token: the prefill keeps pace with
// the download, so the first token comes about when the last byte does
// (bytes left ÷ rate).

import type { LoadProgress, Stats, UnitProgress, UnitState } from 'sipllm';

import { el, formatBytes } from './format.js';

const STATE_TEXT: Record<UnitState, string> = {
  waiting: 'not loaded yet',
  streaming: 'arriving now',
  resident: 'resident in memory',
  streamed: 'streamed for every token (over the memory budget)',
};

const PHASE_TEXT: Record<LoadProgress['phase'], string> = {
  header: 'reading the header',
  weights: 'streaming weights',
  cached: 'reading from the cache',
  ready: 'every block has arrived',
};

// The rate is measured over the last few seconds of progress events, and
// given once it spans enough time to mean something.
const RATE_WINDOW_MS = 3000;
const MIN_RATE_SPAN_MS = 300;

// "block 12" shows as 12, "output head 3/48" as h3, "block 12 expert 5" as
// 12e5: the title has the rest.
function shortName(name: string): string {
  const block = /^block (\d+)$/.exec(name);
  if (block !== null) return block[1];
  const expert = /^block (\d+) expert (\d+)$/.exec(name);
  if (expert !== null) return `${expert[1]}e${expert[2]}`;
  const head = /^output head(?: (\d+)\/\d+)?$/.exec(name);
  if (head !== null) return `h${head[1] ?? ''}`;
  return name;
}

export class BlockMap {
  private units: UnitProgress[] = [];
  private loads: number[] = [];  // per unit, in the last request
  private uses: number[] = [];   // per expert, positions that chose it in the last request
  private progress: LoadProgress | null = null;
  private arrivals: Array<{ at: number; loaded: number }> = [];  // recent progress, for the rate

  constructor(private readonly bar: HTMLElement, private readonly barText: HTMLElement,
              private readonly cells: HTMLElement) {}

  reset(): void {
    this.units = [];
    this.loads = [];
    this.uses = [];
    this.progress = null;
    this.arrivals = [];
    this.render();
  }

  onProgress(progress: LoadProgress): void {
    this.progress = progress;
    const now = performance.now();
    if (progress.phase !== 'weights') this.arrivals = [];
    else this.arrivals.push({ at: now, loaded: progress.loaded });
    while (this.arrivals.length > 2 && now - this.arrivals[1].at > RATE_WINDOW_MS) this.arrivals.shift();
    if (progress.units.length > 0) this.units = progress.units;
    this.render();
  }

  // The figures of the last request.
  update(stats: Stats): void {
    this.loads = stats.loader.units.map((unit) => unit.loads);
    this.uses = stats.loader.units.map((unit) => unit.uses);
    this.render();
  }

  // Bytes per ms over the recent progress events, or null before it means anything.
  private rate(): number | null {
    const first = this.arrivals[0];
    const last = this.arrivals[this.arrivals.length - 1];
    if (first === undefined || last.at - first.at < MIN_RATE_SPAN_MS || last.loaded <= first.loaded) return null;
    return (last.loaded - first.loaded) / (last.at - first.at);
  }

  private render(): void {
    const p = this.progress;
    const rate = p?.phase === 'weights' ? this.rate() : null;
    const etaMs = rate === null || p === null ? null : (p.total - p.loaded) / rate;
    this.barText.dataset.etaMs = etaMs === null ? '' : String(Math.round(etaMs));
    const fraction = p !== null && p.total > 0 ? p.loaded / p.total : 0;
    this.bar.style.width = `${(fraction * 100).toFixed(1)}%`;
    this.bar.dataset.phase = p?.phase ?? 'none';
    this.bar.parentElement?.setAttribute('aria-valuenow', String(Math.round(fraction * 100)));
    this.barText.dataset.loaded = String(p?.loaded ?? 0);
    this.barText.dataset.total = String(p?.total ?? 0);
    this.barText.textContent = p === null
      ? 'no model loaded'
      : `${formatBytes(p.loaded)} of ${formatBytes(p.total)} · ${PHASE_TEXT[p.phase]} · ` +
        `fetched ${formatBytes(p.fetched)}, from the cache ${formatBytes(p.fromCache)}` +
        (etaMs === null || rate === null ? ''
          : ` · ${(rate / 1e3).toFixed(1)} MB/s: first token in about ${(etaMs / 1000).toFixed(1)} s`);

    this.cells.replaceChildren(...this.units.map((unit, i) => {
      const loads = this.loads[i];
      const uses = /expert/.test(unit.name) ? this.uses[i] : undefined;
      const title = `${unit.name}: ${formatBytes(unit.bytes)}, ${STATE_TEXT[unit.state]}` +
                    `${unit.cached ? ', kept in the cache' : ''}` +
                    `${loads === undefined ? '' : `; loaded ${loads}× in the last request`}` +
                    `${uses === undefined ? '' : `, chosen by ${uses} position${uses === 1 ? '' : 's'}`}`;
      return el('span', {
        class: `unit ${unit.state}${unit.cached ? ' cached' : ''}`,
        'data-state': unit.state,
        'data-cached': unit.cached,
        title,
        role: 'img',
        'aria-label': title,
      }, shortName(unit.name));
    }));
    this.cells.dataset.units = String(this.units.length);
  }
}

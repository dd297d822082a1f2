// The engine's per-unit timeline of the last request, drawn on a canvas: one
// row per stream unit; in each row the I/O of every load (bytes arriving),
// its preparation, and the computation that used it. With the prefetch ring
// the I/O of unit L+1 runs while unit L computes: the bars of neighbouring
// rows overlap in time instead of forming a staircase. A mixture of experts'
// experts share one row per layer, below their block's: the experts a layer's
// positions chose arrive there one after another while others compute.

import type { UnitCounters, UnitEvent } from 'sipllm';

import { formatMs } from './format.js';

const COLORS = {
  io: '#3b82f6',
  prepare: '#f59e0b',
  compute: '#16a34a',
  residentCompute: '#86efac',
  grid: '#e5e7eb',
  text: '#374151',
  firstToken: '#dc2626',
};

const MAX_ROW_HEIGHT = 18;
const MIN_ROW_HEIGHT = 6;
const PLOT_HEIGHT = 620;  // rows shrink to fit this, down to MIN_ROW_HEIGHT
const LABEL_WIDTH = 104;
const AXIS_HEIGHT = 22;

export interface TimelineView {
  prefillOnly: boolean;
}

function eventStart(event: UnitEvent): number {
  return event.ioStartMs > 0 ? event.ioStartMs : event.computeStartMs;
}

const EXPERT = /^block (\d+) expert \d+$/;

// The chart's rows: a unit each, but a mixture of experts' experts, which
// share a row per layer (hundreds of rows a layer would each be too thin to
// see), placed after their block's row. rowOf[unit] is the unit's row.
export function timelineRows(units: UnitCounters[]): { names: string[]; rowOf: number[] } {
  const expertLayers = new Set<string>();
  for (const unit of units) {
    const layer = EXPERT.exec(unit.name)?.[1];
    if (layer !== undefined) expertLayers.add(layer);
  }
  const names: string[] = [];
  const rowOf: number[] = [];
  const layerRow = new Map<string, number>();
  units.forEach((unit, i) => {
    if (EXPERT.test(unit.name)) return;
    rowOf[i] = names.push(unit.name) - 1;
    const block = /^block (\d+)$/.exec(unit.name)?.[1];
    if (block !== undefined && expertLayers.has(block)) layerRow.set(block, names.push(`${unit.name} experts`) - 1);
  });
  units.forEach((unit, i) => {
    const layer = EXPERT.exec(unit.name)?.[1];
    if (layer !== undefined) rowOf[i] = layerRow.get(layer) ?? 0;
  });
  return { names, rowOf };
}

// When the first token was ready: the end of the computation of the first
// pass over every row (the prefill: every unit, and some expert of each
// layer), as the timeline records it.
export function firstPassEnd(events: UnitEvent[], rowOf: number[], rowCount: number): number | null {
  const seen = new Set<number>();
  for (const event of events) {
    seen.add(rowOf[event.unit]);
    if (seen.size === rowCount) return event.computeEndMs;
  }
  return null;
}

export function drawTimeline(canvas: HTMLCanvasElement, events: UnitEvent[], units: UnitCounters[],
                             view: TimelineView): void {
  const { names, rowOf } = timelineRows(units);
  const rows = Math.max(names.length, 1);
  const rowHeight = Math.max(MIN_ROW_HEIGHT, Math.min(MAX_ROW_HEIGHT, Math.floor(PLOT_HEIGHT / rows)));
  const labelEvery = Math.ceil(12 / rowHeight);
  const cssWidth = Math.max(canvas.parentElement?.clientWidth ?? 600, 320);
  const cssHeight = rows * rowHeight + AXIS_HEIGHT + 8;
  const scale = window.devicePixelRatio || 1;
  canvas.width = Math.round(cssWidth * scale);
  canvas.height = Math.round(cssHeight * scale);
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  canvas.dataset.events = String(events.length);
  canvas.dataset.units = String(units.length);
  canvas.dataset.rows = String(names.length);
  canvas.dataset.firstTokenMs = '';

  const g = canvas.getContext('2d');
  if (g === null) return;
  g.setTransform(scale, 0, 0, scale, 0, 0);
  g.clearRect(0, 0, cssWidth, cssHeight);
  g.font = '11px system-ui, sans-serif';
  g.textBaseline = 'middle';

  const plotWidth = cssWidth - LABEL_WIDTH - 8;

  // Rows and labels.
  names.forEach((name, row) => {
    const top = row * rowHeight;
    g.fillStyle = row % 2 === 0 ? '#f9fafb' : '#ffffff';
    g.fillRect(LABEL_WIDTH, top, plotWidth, rowHeight);
    if (row % labelEvery === 0) {
      g.fillStyle = COLORS.text;
      g.fillText(name, 4, top + rowHeight / 2);
    }
  });
  if (events.length === 0) {
    g.fillStyle = COLORS.text;
    g.fillText('No request yet: the timeline of the next one appears here.', LABEL_WIDTH + 8, Math.min(cssHeight / 2, 40));
    return;
  }

  const origin = Math.min(...events.map(eventStart));
  const firstToken = firstPassEnd(events, rowOf, names.length);
  canvas.dataset.firstTokenMs = firstToken === null ? '' : String(firstToken - origin);
  const lastEnd = Math.max(...events.map((e) => Math.max(e.computeEndMs, e.ioEndMs, e.prepareEndMs)));
  const end = view.prefillOnly && firstToken !== null ? firstToken : lastEnd;
  const span = Math.max(end - origin, 1e-3);
  const x = (ms: number) => LABEL_WIDTH + ((ms - origin) / span) * plotWidth;
  const bar = (from: number, to: number, top: number, height: number, color: string) => {
    if (to <= 0 || from > end) return;
    const left = x(Math.max(from, origin));
    const right = x(Math.min(to, end));
    g.fillStyle = color;
    g.fillRect(left, top, Math.max(right - left, 1), height);
  };

  // I/O and preparation in the upper half of a row, computation in the lower.
  for (const event of events) {
    const top = (rowOf[event.unit] ?? 0) * rowHeight;
    const half = Math.max((rowHeight - 4) / 2, 2);
    if (event.ioEndMs > 0) {
      bar(event.ioStartMs, event.ioEndMs, top + 2, half, COLORS.io);
      if (event.prepareEndMs > event.ioEndMs) bar(event.ioEndMs, event.prepareEndMs, top + 2, half, COLORS.prepare);
    }
    if (event.computeEndMs > 0) {
      bar(event.computeStartMs, event.computeEndMs, top + 2 + half, half,
          event.resident && event.ioEndMs === 0 ? COLORS.residentCompute : COLORS.compute);
    }
  }

  // Time axis.
  const axisTop = rows * rowHeight + 4;
  g.strokeStyle = COLORS.grid;
  g.fillStyle = COLORS.text;
  const ticks = 6;
  for (let i = 0; i <= ticks; ++i) {
    const ms = origin + (span * i) / ticks;
    const px = x(ms);
    g.beginPath();
    g.moveTo(px, 0);
    g.lineTo(px, axisTop);
    g.stroke();
    g.textAlign = i === 0 ? 'left' : i === ticks ? 'right' : 'center';
    g.fillText(formatMs(ms - origin), px, axisTop + 9);
  }
  g.textAlign = 'left';

  if (firstToken !== null && firstToken <= end) {
    const px = x(firstToken);
    g.strokeStyle = COLORS.firstToken;
    g.setLineDash([4, 3]);
    g.beginPath();
    g.moveTo(px, 0);
    g.lineTo(px, axisTop);
    g.stroke();
    g.setLineDash([]);
  }
}

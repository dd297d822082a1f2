// The settings form: what applies when a model loads (threads, memory budget,
// cache) and what applies to each request (sampling, max tokens). A field
// that is not a number is named here; the sampling values' ranges are the
// engine's, whose refusal names the option.

import type { GenerateOptions } from 'sipllm';

import { byId } from './format.js';

export class SettingsError extends Error {}

export interface LoadSettings {
  threads: number;
  memoryBudget: number | undefined;  // bytes; undefined: no limit
  contextLength: number | undefined;  // tokens; undefined: the model's
  cache: boolean;
}

export type SamplingSettings = Required<Pick<GenerateOptions,
  'temperature' | 'topK' | 'topP' | 'minP' | 'repeatPenalty' | 'maxTokens'>> & { seed: number | undefined };

function input(id: string): HTMLInputElement {
  return byId<HTMLInputElement>(id);
}

function label(field: HTMLInputElement): string {
  return field.closest('label')?.querySelector('.name')?.textContent?.trim() ?? field.id;
}

// The field's number; `optional` fields may be left empty.
function numberField(id: string, min: number, max: number, options: { integer?: boolean; optional: true }): number | undefined;
function numberField(id: string, min: number, max: number, options?: { integer?: boolean; optional?: false }): number;
function numberField(id: string, min: number, max: number,
                     { integer = false, optional = false }: { integer?: boolean; optional?: boolean } = {}): number | undefined {
  const field = input(id);
  const text = field.value.trim();
  const kind = integer ? 'a whole number' : 'a number';
  const range = min === -Infinity ? '' : ` from ${min} to ${max}`;
  if (text === '') {
    if (optional) return undefined;
    throw new SettingsError(`${label(field)} is empty: give ${kind}${range}`);
  }
  const value = Number(text);
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new SettingsError(`${label(field)} must be ${kind}${range}, not '${text}'`);
  }
  return value;
}

export function readLoadSettings(): LoadSettings {
  const budgetMb = numberField('memory-budget', 0, 4096, { optional: true });
  return {
    threads: numberField('threads', 1, 64, { integer: true }),
    memoryBudget: budgetMb === undefined ? undefined : Math.round(budgetMb * 1e6),
    contextLength: numberField('context-length', 1, 1 << 24, { integer: true, optional: true }),
    cache: input('use-cache').checked,
  };
}

export function readSamplingSettings(): SamplingSettings {
  const any = [-Infinity, Infinity] as const;
  return {
    temperature: numberField('temperature', ...any),
    topK: numberField('top-k', ...any, { integer: true }),
    topP: numberField('top-p', ...any),
    minP: numberField('min-p', ...any),
    repeatPenalty: numberField('repeat-penalty', ...any),
    seed: numberField('seed', ...any, { integer: true, optional: true }),
    maxTokens: numberField('max-tokens', ...any, { integer: true }),
  };
}

// Threads only mean something in the threaded build: without isolation the
// field shows 1 and is locked.
export function initThreadsField(isolated: boolean): void {
  const field = input('threads');
  if (isolated) {
    field.value = String(navigator.hardwareConcurrency || 4);
  } else {
    field.value = '1';
    field.disabled = true;
    field.title = 'this page is not cross-origin isolated: the single-thread build runs on one thread';
  }
}

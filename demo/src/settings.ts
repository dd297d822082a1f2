// The settings form: what applies when a model loads (threads, memory budget,
// cache) and what applies to each request (sampling, max tokens). Every value
// is checked here, so that a mistyped field is named instead of reaching the
// engine.

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
  if (text === '') {
    if (optional) return undefined;
    throw new SettingsError(`${label(field)} is empty: give a number from ${min} to ${max}`);
  }
  const value = Number(text);
  if (!Number.isFinite(value) || value < min || value > max || (integer && !Number.isInteger(value))) {
    throw new SettingsError(`${label(field)} must be ${integer ? 'a whole number' : 'a number'} from ${min} to ${max}, ` +
                            `not '${text}'`);
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
  return {
    temperature: numberField('temperature', 0, 10),
    topK: numberField('top-k', 0, 100_000, { integer: true }),
    topP: numberField('top-p', 0, 1),
    minP: numberField('min-p', 0, 1),
    repeatPenalty: numberField('repeat-penalty', 0.1, 10),
    seed: numberField('seed', 0, 2 ** 32 - 1, { integer: true, optional: true }),
    maxTokens: numberField('max-tokens', 1, 100_000, { integer: true }),
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

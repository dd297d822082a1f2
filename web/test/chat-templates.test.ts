// Real chat templates (tests/fixtures/vocab/<name>.chat_template.jinja)
// rendered by the package's renderer against what Jinja2 renders from them as
// transformers' apply_chat_template does
// (tests/fixtures/vocab/render_chat_templates.py wrote the expectations, the
// <name>.chat_renderings.json beside them). Where each template comes from:
// tests/fixtures/SOURCES.md. Qwen3, Llama 3 and Gemma 3's are their
// vocabulary GGUFs' (a native test checks they still equal the files' keys);
// Qwen3.5's, Gemma 4's and LFM2's are the models' own templates as llama.cpp
// keeps them in models/templates/. No engine is loaded here.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';

import { InvalidArgumentError, renderChatTemplate } from '../dist/index.js';
import type { ChatMessage } from '../dist/index.js';
import { repoRoot } from './support.js';

interface Rendering {
  case: string;
  addGenerationPrompt: boolean;
  variables: Record<string, unknown>;
  messages: ChatMessage[];
  expected?: string;
  error?: string;
}

interface RenderingFile {
  bosToken: string;
  eosToken: string;
  renderings: Rendering[];
}

const vocabFixtures = join(repoRoot, 'tests/fixtures/vocab');
const template = (name: string) => readFileSync(join(vocabFixtures, `${name}.chat_template.jinja`), 'utf8');

// render_chat_templates.py answers strftime_now (LFM2's template writes the
// date beside its tools) at a fixed instant, 2026-01-15 09:30, so that the
// expectations do not change with the date; the renderer reads the clock.
beforeAll(() => {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(new Date(2026, 0, 15, 9, 30));
});
afterAll(() => {
  vi.useRealTimers();
});

describe.each(['qwen3', 'llama3', 'gemma3', 'qwen35', 'gemma4', 'lfm2'])('the %s chat template', (name) => {
  const file = JSON.parse(readFileSync(join(vocabFixtures, `${name}.chat_renderings.json`), 'utf8')) as RenderingFile;

  it('has renderings to compare with, with and without the generation prompt', () => {
    const withSystem = file.renderings.filter((r) => r.messages[0]?.role === 'system' && r.expected !== undefined);
    expect(withSystem.some((r) => r.addGenerationPrompt)).toBe(true);
    expect(withSystem.some((r) => !r.addGenerationPrompt)).toBe(true);
  });

  it.each(file.renderings.map((r) => [`${r.case}, generation prompt ${r.addGenerationPrompt}`, r] as const))(
    'renders %s as Jinja2 does', (_title, rendering) => {
      const render = () => renderChatTemplate(template(name), rendering.messages, {
        bosToken: file.bosToken,
        eosToken: file.eosToken,
        addGenerationPrompt: rendering.addGenerationPrompt,
        variables: rendering.variables,
      });
      if (rendering.error !== undefined) {
        expect(render).toThrow(InvalidArgumentError);
        expect(render).toThrow(rendering.error);
      } else {
        expect(render()).toBe(rendering.expected);
      }
    });
});

// The 2026 families' turns, written out.
const SYSTEM = { role: 'system', content: 'Be brief.' };
const USER = { role: 'user', content: 'Hi' };
const ASSISTANT = { role: 'assistant', content: 'Hello!' };
const FOLLOW_UP = { role: 'user', content: 'Bye' };

describe('the Qwen3.5 template', () => {
  const qwen35 = template('qwen35');
  const context = { bosToken: '<|endoftext|>', eosToken: '<|im_end|>', addGenerationPrompt: true };

  it('writes ChatML turns and opens a thinking block for the answer', () => {
    expect(renderChatTemplate(qwen35, [SYSTEM, USER, ASSISTANT, FOLLOW_UP], context)).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n' +
      '<|im_start|>user\nHi<|im_end|>\n' +
      '<|im_start|>assistant\nHello!<|im_end|>\n' +
      '<|im_start|>user\nBye<|im_end|>\n' +
      '<|im_start|>assistant\n<think>\n');
  });

  it('gives an empty, closed thinking block when enable_thinking is false', () => {
    const off = renderChatTemplate(qwen35, [USER], { ...context, variables: { enable_thinking: false } });
    expect(off).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    const on = renderChatTemplate(qwen35, [USER], { ...context, variables: { enable_thinking: true } });
    expect(on).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n');
  });

  it('drops the reasoning of answers before the last question and keeps it after', () => {
    const reasoned = { role: 'assistant', content: '<think>\nGreet back.\n</think>\n\nHello!' };
    expect(renderChatTemplate(qwen35, [USER, reasoned, FOLLOW_UP], { ...context, addGenerationPrompt: false }))
      .toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n');
    expect(renderChatTemplate(qwen35, [USER, reasoned], { ...context, addGenerationPrompt: false }))
      .toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nGreet back.\n</think>\n\nHello!<|im_end|>\n');
  });

  it('refuses a system message after the first', () => {
    expect(() => renderChatTemplate(qwen35, [USER, SYSTEM], context)).toThrow('System message must be at the beginning.');
  });
});

describe('the Gemma 4 template', () => {
  const gemma4 = template('gemma4');
  const context = { bosToken: '<bos>', eosToken: '<eos>', addGenerationPrompt: true };

  it('writes <|turn>role ... <turn|> turns, the assistant as model, and opens an empty thought channel', () => {
    expect(renderChatTemplate(gemma4, [SYSTEM, USER, ASSISTANT, FOLLOW_UP], context)).toBe(
      '<bos><|turn>system\nBe brief.<turn|>\n' +
      '<|turn>user\nHi<turn|>\n' +
      '<|turn>model\nHello!<turn|>\n' +
      '<|turn>user\nBye<turn|>\n' +
      '<|turn>model\n<|channel>thought\n<channel|>');
  });

  it('asks for thinking with <|think|> in the system turn when enable_thinking is true', () => {
    expect(renderChatTemplate(gemma4, [USER], { ...context, variables: { enable_thinking: true } }))
      .toBe('<bos><|turn>system\n<|think|><turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n');
  });

  it('drops the thought channel of earlier answers', () => {
    const thought = { role: 'assistant', content: '<|channel>thought\nGreet back.<channel|>Hello!' };
    expect(renderChatTemplate(gemma4, [USER, thought], { ...context, addGenerationPrompt: false }))
      .toBe('<bos><|turn>user\nHi<turn|>\n<|turn>model\nHello!<turn|>\n');
  });
});

describe('the LFM2 template', () => {
  const lfm2 = template('lfm2');
  const context = { bosToken: '<|startoftext|>', eosToken: '<|im_end|>', addGenerationPrompt: true };

  it('writes ChatML turns after the BOS text', () => {
    expect(renderChatTemplate(lfm2, [SYSTEM, USER, ASSISTANT, FOLLOW_UP], context)).toBe(
      '<|startoftext|><|im_start|>system\nBe brief.<|im_end|>\n' +
      '<|im_start|>user\nHi<|im_end|>\n' +
      '<|im_start|>assistant\nHello!<|im_end|>\n' +
      '<|im_start|>user\nBye<|im_end|>\n' +
      '<|im_start|>assistant\n');
  });

  it('keeps the thinking of answers after the last question only, unless preserve_thinking', () => {
    const messages = [USER, { ...ASSISTANT, thinking: 'Greet.' }, FOLLOW_UP, { role: 'assistant', content: 'Bye!', thinking: 'Part.' }];
    const history = '<|startoftext|><|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n';
    const end = '<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>Part.</think>Bye!<|im_end|>\n';
    expect(renderChatTemplate(lfm2, messages, { ...context, addGenerationPrompt: false }))
      .toBe(`${history}Hello!<|im_end|>\n${end}`);
    expect(renderChatTemplate(lfm2, messages, { ...context, addGenerationPrompt: false, variables: { preserve_thinking: true } }))
      .toBe(`${history}<think>Greet.</think>Hello!<|im_end|>\n${end}`);
  });
});

// Chat prompts come from the model's template through @huggingface/jinja.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { InvalidArgumentError, SipLLM, UnsupportedError, renderChatTemplate } from '../dist/index.js';
import { collect, modelPath, repoRoot } from './support.js';

// The ChatML template as SmolLM and Qwen ship it.
const CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
               "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
// Llama 2's, which uses bos_token and eos_token and rejects bad turn orders.
const LLAMA2 = "{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}" +
               "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}" +
               "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}" +
               "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}";

const context = { bosToken: '<s>', eosToken: '</s>', addGenerationPrompt: true };

describe('chat templates', () => {
  it('renders ChatML', () => {
    const text = renderChatTemplate(CHATML, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ], context);
    expect(text).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n');
  });

  it('passes the special tokens and reports a template error', () => {
    const text = renderChatTemplate(LLAMA2, [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: 'Hello' },
      { role: 'user', content: 'Bye' },
    ], context);
    expect(text).toBe('<s>[INST] Hi [/INST] Hello </s><s>[INST] Bye [/INST]');
    expect(() => renderChatTemplate(LLAMA2, [{ role: 'assistant', content: 'x' }], context))
      .toThrow(InvalidArgumentError);
  });
});

// The real templates of model families against Jinja2's renderings of them:
// chat-templates.test.ts.
const vocabFixtures = join(repoRoot, 'tests/fixtures/vocab');

describe('the Gemma 3 template', () => {
  it('folds the system prompt into the first user turn', () => {
    const template = readFileSync(join(vocabFixtures, 'gemma3.chat_template.jinja'), 'utf8');
    const text = renderChatTemplate(template, [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ], { bosToken: '<bos>', eosToken: '<end_of_turn>', addGenerationPrompt: true });
    expect(text).toBe('<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n');
    expect(text).not.toContain('<start_of_turn>system');
  });
});

describe('chat()', () => {
  let llm: SipLLM;
  beforeAll(async () => {
    llm = await SipLLM.load(readFileSync(modelPath('stories260K.gguf')), { threads: 1 });
  });
  afterAll(async () => {
    await llm?.unload();
  });

  it('refuses a model without a template', async () => {
    expect(llm.info.chatTemplate).toBe('');
    await expect(collect(llm.chat([{ role: 'user', content: 'Hi' }]))).rejects.toBeInstanceOf(UnsupportedError);
  });

  it('uses a fallback template like a plain prompt without added specials', async () => {
    const messages = [{ role: 'user', content: 'Tell me a story.' }];
    const greedy = { maxTokens: 40, temperature: 0 };
    const viaChat = await collect(llm.chat(messages, { ...greedy, fallbackTemplate: LLAMA2 }));
    await llm.reset();
    const prompt = renderChatTemplate(LLAMA2, messages, { bosToken: llm.info.bosText, eosToken: llm.info.eosText, addGenerationPrompt: true });
    expect(prompt.startsWith(llm.info.bosText)).toBe(true);
    const viaGenerate = await collect(llm.generate(prompt, { ...greedy, addSpecial: false }));
    expect(viaChat).toBe(viaGenerate);
    expect(viaChat.length).toBeGreaterThan(0);
  });
});

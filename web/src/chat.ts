// Chat prompts from a model's own template (tokenizer.chat_template), rendered
// by @huggingface/jinja, the Jinja implementation Hugging Face maintains for
// exactly these templates.

import { Template } from '@huggingface/jinja';

import { FormatError, InvalidArgumentError } from './errors.js';
import type { ChatMessage } from './types.js';

export interface ChatTemplateContext {
  bosToken: string;
  eosToken: string;
  addGenerationPrompt: boolean;
  variables?: Record<string, unknown>;
}

export function renderChatTemplate(template: string, messages: ChatMessage[], context: ChatTemplateContext): string {
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (error) {
    throw new FormatError(`the model's chat template does not parse: ${(error as Error).message}`);
  }
  try {
    return compiled.render({
      ...context.variables,
      messages,
      bos_token: context.bosToken,
      eos_token: context.eosToken,
      add_generation_prompt: context.addGenerationPrompt,
    });
  } catch (error) {
    // Templates reject what they cannot format (raise_exception).
    throw new InvalidArgumentError(`the model's chat template rejected the messages: ${(error as Error).message}`);
  }
}

// What the person and the model have said: a chat (rendered through the
// model's chat template by the package) or a plain completion of a prompt.

import type { ChatMessage } from 'sipllm';

import { byId, el } from './format.js';

export type Mode = 'chat' | 'completion';

export class CompletionView {
  private readonly promptText = byId('output').querySelector('.prompt') as HTMLElement;
  private readonly generatedText = byId('output').querySelector('.generated') as HTMLElement;

  prompt(): string {
    return byId<HTMLTextAreaElement>('prompt').value;
  }

  // The prompt and what was generated from it.
  text(): string {
    return `${this.promptText.textContent ?? ''}${this.generatedText.textContent ?? ''}`;
  }

  hasText(): boolean {
    return (this.generatedText.textContent ?? '') !== '';
  }

  // Continues where the last request ended: its text becomes the prompt.
  carryOver(): void {
    byId<HTMLTextAreaElement>('prompt').value = this.text();
  }

  start(prompt: string): void {
    this.promptText.textContent = prompt;
    this.generatedText.textContent = '';
    byId('output').dataset.state = 'generating';
  }

  append(piece: string): void {
    this.generatedText.textContent += piece;
  }

  finish(state: 'done' | 'stopped' | 'failed'): void {
    byId('output').dataset.state = state;
  }
}

export class ChatView {
  readonly messages: ChatMessage[] = [];
  private current: HTMLElement | null = null;
  private reply = '';

  input(): string {
    return byId<HTMLTextAreaElement>('chat-input').value.trim();
  }

  // Adds the person's message and an empty reply to fill.
  start(text: string): ChatMessage[] {
    byId<HTMLTextAreaElement>('chat-input').value = '';
    this.messages.push({ role: 'user', content: text });
    const list = byId('messages');
    list.append(el('div', { class: 'message user' }, el('span', { class: 'role' }, 'you'), el('p', {}, text)));
    this.current = el('p', {});
    list.append(el('div', { class: 'message assistant', 'data-state': 'generating' },
                   el('span', { class: 'role' }, 'model'), this.current));
    this.reply = '';
    list.scrollTop = list.scrollHeight;
    return [...this.messages];
  }

  append(piece: string): void {
    this.reply += piece;
    if (this.current !== null) this.current.textContent = this.reply;
    const list = byId('messages');
    list.scrollTop = list.scrollHeight;
  }

  // A stopped reply stays in the conversation as far as it went.
  finish(state: 'done' | 'stopped' | 'failed'): void {
    const bubble = this.current?.parentElement;
    if (bubble) bubble.dataset.state = state;
    if (state !== 'failed') this.messages.push({ role: 'assistant', content: this.reply });
    else this.messages.pop();
    this.current = null;
  }

  showPrompt(rendered: string): void {
    byId('rendered-prompt').textContent = rendered;
  }

  clear(): void {
    this.messages.length = 0;
    byId('messages').replaceChildren();
    byId('rendered-prompt').textContent = '';
  }
}

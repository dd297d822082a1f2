// The demo page: load a model (the bundled one, or any GGUF URL), watch it
// stream in, talk to it, and see what the engine did.

import { SipLLM, renderChatTemplate } from 'sipllm';
import type { GenerationStats, Stats } from 'sipllm';

import { BlockMap } from './block-map.js';
import { ChatView, CompletionView } from './conversation.js';
import type { Mode } from './conversation.js';
import { describeFailure } from './failure.js';
import type { Failure } from './failure.js';
import { renderFigures, renderModelInfo } from './figures.js';
import type { LiveRequest } from './figures.js';
import { byId, el, formatBytes } from './format.js';
import { initThreadsField, readLoadSettings, readSamplingSettings } from './settings.js';
import { drawTimeline } from './timeline-chart.js';
import './style.css';

const BUNDLED_MODEL = '/models/stories260K.gguf';
// The engine's builds are served untouched by the dev server (vite.config.ts);
// the engine worker needs an absolute URL.
const WASM_BASE_URL = new URL('/sipllm-wasm/', location.href).href;

type Status = 'idle' | 'loading' | 'ready' | 'generating' | 'done' | 'stopped' | 'failed';


// ?build=threaded|relaxed|single picks the WebAssembly build; 'auto' otherwise.
function requestedBuild(): 'auto' | 'threaded' | 'relaxed' | 'single' {
  const build = new URLSearchParams(location.search).get('build');
  return build === 'threaded' || build === 'relaxed' || build === 'single' ? build : 'auto';
}
class DemoApp {
  llm: SipLLM | null = null;
  private modelUrl: string | null = null;
  private loadSerial = 0;
  private request: AbortController | null = null;
  private live: LiveRequest | null = null;
  private liveFrame = 0;
  private readonly isolated = globalThis.crossOriginIsolated === true;
  private readonly blockMap = new BlockMap(byId('progress-bar'), byId('progress-text'), byId('units'));
  private readonly completion = new CompletionView();
  private readonly chat = new ChatView();

  start(): void {
    this.showIsolation();
    initThreadsField(this.isolated);
    byId('model-form').addEventListener('submit', (event) => {
      event.preventDefault();
      void this.load();
    });
    byId('model-url').addEventListener('input', () => {
      byId<HTMLInputElement>('model-form').querySelector<HTMLInputElement>('input[value=url]')!.checked = true;
    });
    byId('unload').addEventListener('click', () => void this.unload().then(() => {
      this.blockMap.reset();
      renderModelInfo(byId('model-info'), null, '');
      this.refresh();
      this.setStatus('idle', 'No model loaded.');
    }));
    byId('generate').addEventListener('click', () => void this.generate());
    byId('continue').addEventListener('click', () => {
      this.completion.carryOver();
      void this.generate();
    });
    byId('chat-form').addEventListener('submit', (event) => {
      event.preventDefault();
      void this.sendChat();
    });
    byId('chat-input').addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && !event.shiftKey) {
        event.preventDefault();
        void this.sendChat();
      }
    });
    byId('new-chat').addEventListener('click', () => void this.newChat());
    for (const button of document.querySelectorAll<HTMLButtonElement>('button.stop')) {
      button.addEventListener('click', () => this.request?.abort(new Error('stopped on the page')));
    }
    byId('mode-chat').addEventListener('click', () => this.setMode('chat'));
    byId('mode-completion').addEventListener('click', () => this.setMode('completion'));
    byId('prefill-only').addEventListener('change', () => this.drawTimeline());
    byId('refresh-cache').addEventListener('click', () => void this.listCache());
    byId('error').querySelector('.dismiss')?.addEventListener('click', () => this.hideError());
    window.addEventListener('resize', () => this.drawTimeline());
    this.setMode('completion');
    this.refresh();

    // ?model=URL opens that model; otherwise the bundled one.
    const requested = new URLSearchParams(location.search).get('model');
    if (requested !== null) {
      byId<HTMLInputElement>('model-url').value = requested;
      byId<HTMLInputElement>('model-form').querySelector<HTMLInputElement>('input[value=url]')!.checked = true;
    }
    void this.load();
  }

  // ---- Loading ------------------------------------------------------------------

  private chosenModel(): { url: string; label: string } | null {
    const source = byId('model-form').querySelector<HTMLInputElement>('input[name=source]:checked')?.value;
    if (source === 'bundled') return { url: new URL(BUNDLED_MODEL, location.href).href, label: 'stories260K (bundled)' };
    const url = byId<HTMLInputElement>('model-url').value.trim();
    return url === '' ? null : { url, label: url };
  }

  async load(): Promise<void> {
    const serial = ++this.loadSerial;
    this.hideError();
    const chosen = this.chosenModel();
    if (chosen === null) {
      this.showError({ kind: 'invalid-argument', title: 'No URL given', message: 'The URL field is empty.',
                       hint: 'Paste the URL of a .gguf file, or choose the bundled model.' });
      this.countSettled('loads');
      return;
    }
    let settings;
    try {
      settings = readLoadSettings();
    } catch (error) {
      this.showError(await describeFailure(error, null));
      this.countSettled('loads');
      return;
    }
    await this.unload();
    this.blockMap.reset();
    this.chat.clear();
    renderModelInfo(byId('model-info'), null, '');
    this.setStatus('loading', `Opening ${chosen.label}…`);
    try {
      const llm = await SipLLM.load(chosen.url, {
        threads: settings.threads,
        memoryBudget: settings.memoryBudget,
        contextLength: settings.contextLength,
        cache: settings.cache,
        wasmBaseUrl: WASM_BASE_URL,
        build: requestedBuild(),
        onProgress: (progress) => {
          if (serial === this.loadSerial) this.blockMap.onProgress(progress);
        },
      });
      if (serial !== this.loadSerial) {
        await llm.unload();
        return;
      }
      this.llm = llm;
      this.modelUrl = chosen.url;
      renderModelInfo(byId('model-info'), llm.info, chosen.label);
      this.setMode(llm.info.chatTemplate !== '' ? 'chat' : 'completion');
      this.refresh();
      this.setStatus('ready', 'Ready. The weights stream in with the first request.');
      this.countSettled('loads');
    } catch (error) {
      if (serial !== this.loadSerial) return;
      this.refresh();
      this.showError(await describeFailure(error, this.absolute(chosen.url)));
      this.setStatus('failed', 'Loading failed.');
      this.countSettled('loads');
    }
  }

  async unload(): Promise<void> {
    this.request?.abort(new Error('the model is being unloaded'));
    const llm = this.llm;
    this.llm = null;
    this.modelUrl = null;
    this.updateButtons();
    await llm?.unload();
  }

  private absolute(url: string): string | null {
    try {
      return new URL(url, location.href).href;
    } catch {
      return null;
    }
  }

  // ---- Requests -----------------------------------------------------------------

  async generate(): Promise<void> {
    const llm = this.llm;
    if (llm === null || this.request !== null) return;
    const prompt = this.completion.prompt();
    await this.run(this.completion, (options) => llm.generate(prompt, options), () => this.completion.start(prompt));
  }

  async sendChat(): Promise<void> {
    const llm = this.llm;
    const text = this.chat.input();
    if (llm === null || this.request !== null || text === '') return;
    let messages: ReturnType<ChatView['start']> = [];
    await this.run(this.chat, (options) => llm.chat(messages, options), () => {
      messages = this.chat.start(text);
      this.chat.showPrompt(renderChatTemplate(llm.info.chatTemplate, messages, {
        bosToken: llm.info.bosText, eosToken: llm.info.eosText, addGenerationPrompt: true,
      }));
    });
  }

  private async newChat(): Promise<void> {
    if (this.request !== null) return;
    this.chat.clear();
    try {
      await this.llm?.reset();
    } catch (error) {
      this.showError(await describeFailure(error, this.modelUrl));
    }
    this.refresh();
  }

  // Streams one request into `view`, with Stop, live figures and, at the end,
  // the engine's own figures and timeline.
  private async run(view: CompletionView | ChatView,
                    open: (options: Parameters<SipLLM['generate']>[1]) => AsyncGenerator<string, GenerationStats>,
                    begin: () => void): Promise<void> {
    const llm = this.llm;
    if (llm === null) return;
    this.hideError();
    let sampling;
    try {
      sampling = readSamplingSettings();
    } catch (error) {
      this.showError(await describeFailure(error, null));
      this.countSettled('requests');
      return;
    }
    const request = new AbortController();
    this.request = request;
    this.live = { startedAt: performance.now(), firstPieceAt: null, pieces: 0 };
    this.updateButtons();
    this.setStatus('generating', 'Generating…');
    let outcome: 'done' | 'stopped' | 'failed' = 'done';
    // The elapsed time moves on even while the first token is still far off
    // (a large model arriving).
    const ticker = setInterval(() => this.scheduleLiveFigures(), 250);
    this.scheduleLiveFigures();
    try {
      begin();
      for await (const piece of open({ ...sampling, signal: request.signal })) {
        view.append(piece);
        this.live.pieces += 1;
        this.live.firstPieceAt ??= performance.now();
        this.scheduleLiveFigures();
      }
    } catch (error) {
      if (request.signal.aborted) {
        outcome = 'stopped';
      } else {
        outcome = 'failed';
        this.showError(await describeFailure(error, this.modelUrl));
      }
    } finally {
      clearInterval(ticker);
      view.finish(outcome);
      this.request = null;
      this.live = null;
      if (this.llm === llm) {
        this.refresh();
        this.setStatus(outcome, this.outcomeText(outcome, llm.stats()));
      }
      this.updateButtons();
      this.countSettled('requests');
    }
  }

  private outcomeText(outcome: 'done' | 'stopped' | 'failed', stats: Stats): string {
    const generation = stats.lastGeneration;
    if (outcome === 'failed') return 'The request failed.';
    if (outcome === 'stopped') {
      if (stats.build === 'single' && !this.isolated) {
        return 'Stopped. The single-thread engine was halted; the next request restarts it and reloads the model.';
      }
      return `Stopped after ${generation?.generatedTokens ?? 0} tokens.`;
    }
    return generation === null ? 'Done.' : `Done: ${generation.generatedTokens} tokens (${generation.stopReason}).`;
  }

  // ---- Display ------------------------------------------------------------------

  private setStatus(state: Status, text: string): void {
    const status = byId('status');
    status.dataset.state = state;
    status.textContent = text;
    this.updateButtons();
  }

  // How many loads and requests have settled, so that a reader can wait for
  // the next one whatever the state before it.
  private countSettled(what: 'loads' | 'requests'): void {
    const status = byId('status');
    status.dataset[what] = String(Number(status.dataset[what] ?? '0') + 1);
  }

  private updateButtons(): void {
    const loaded = this.llm !== null;
    const running = this.request !== null;
    byId<HTMLButtonElement>('generate').disabled = !loaded || running;
    byId<HTMLButtonElement>('continue').disabled = !loaded || running || !this.completion.hasText();
    byId<HTMLButtonElement>('send').disabled = !loaded || running || this.llm?.info.chatTemplate === '';
    byId<HTMLButtonElement>('unload').disabled = !loaded;
    byId<HTMLButtonElement>('new-chat').disabled = running;
    for (const button of document.querySelectorAll<HTMLButtonElement>('button.stop')) button.disabled = !running;
  }

  private setMode(mode: Mode): void {
    const hasTemplate = (this.llm?.info.chatTemplate ?? '') !== '';
    if (mode === 'chat' && this.llm !== null && !hasTemplate) mode = 'completion';
    byId('chat-view').hidden = mode !== 'chat';
    byId('completion-view').hidden = mode !== 'completion';
    byId('mode-chat').setAttribute('aria-selected', String(mode === 'chat'));
    byId('mode-completion').setAttribute('aria-selected', String(mode === 'completion'));
    byId<HTMLButtonElement>('mode-chat').disabled = this.llm !== null && !hasTemplate;
    byId('mode-note').textContent = this.llm === null ? ''
      : hasTemplate ? 'Chat uses the model\'s own chat template.'
        : 'This model has no chat template: plain completion only.';
    byId('conversation-panel').dataset.mode = mode;
    this.updateButtons();
  }

  private refresh(): void {
    const stats = this.llm?.stats() ?? null;
    if (stats !== null) this.blockMap.update(stats);
    renderFigures(byId('figures'), stats, this.live);
    this.drawTimeline();
  }

  private scheduleLiveFigures(): void {
    if (this.liveFrame !== 0) return;
    this.liveFrame = requestAnimationFrame(() => {
      this.liveFrame = 0;
      if (this.live !== null) renderFigures(byId('figures'), this.llm?.stats() ?? null, this.live);
    });
  }

  private drawTimeline(): void {
    const stats = this.llm?.stats();
    drawTimeline(byId<HTMLCanvasElement>('timeline'), stats?.loader.timeline ?? [], stats?.loader.units ?? [],
                 { prefillOnly: byId<HTMLInputElement>('prefill-only').checked });
  }

  private showIsolation(): void {
    const badge = byId('isolation-badge');
    badge.textContent = this.isolated ? 'cross-origin isolated: threaded build' : 'not isolated: single-thread build';
    badge.dataset.isolated = String(this.isolated);
    const note = byId('isolation-note');
    note.hidden = this.isolated;
    note.textContent = 'This page is not cross-origin isolated (it was served without the headers ' +
      'Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), so it cannot share ' +
      'memory with workers. SipLLM runs its single-thread build: one thread, one range request at a time. Stop halts ' +
      'the engine\'s worker; the next request starts it again and reloads the model (from the cache when it is kept).';
    const link = byId<HTMLAnchorElement>('isolation-link');
    const query = new URLSearchParams(location.search);
    if (this.isolated) {
      query.set('isolate', '0');
      link.textContent = 'Open this page without cross-origin isolation (single-thread build)';
    } else {
      query.delete('isolate');
      link.textContent = 'Open this page with cross-origin isolation (threads)';
    }
    link.href = `${location.pathname}${query.size > 0 ? `?${query}` : ''}`;
  }

  private showError(failure: Failure): void {
    const box = byId('error');
    box.dataset.kind = failure.kind;
    box.querySelector('.title')!.textContent = failure.title;
    box.querySelector('.message')!.textContent = failure.message;
    box.querySelector('.hint')!.textContent = failure.hint;
    box.hidden = false;
  }

  private hideError(): void {
    byId('error').hidden = true;
  }

  private async listCache(): Promise<void> {
    const list = byId('cached-models');
    list.replaceChildren(el('li', {}, 'Reading the cache…'));
    try {
      const models = await SipLLM.cachedModels({ wasmBaseUrl: WASM_BASE_URL });
      list.replaceChildren(...(models.length === 0 ? [el('li', {}, 'Nothing is kept.')] : models.map((model) => {
        const remove = el('button', { type: 'button' }, 'Delete');
        remove.addEventListener('click', () => {
          void SipLLM.deleteCachedModel(model.url, { wasmBaseUrl: WASM_BASE_URL })
            .then(() => this.listCache(), async (error) => this.showError(await describeFailure(error, null)));
        });
        return el('li', {}, `${model.url}: ${formatBytes(model.cachedBytes)} of ${formatBytes(model.size)} `, remove);
      })));
    } catch (error) {
      list.replaceChildren();
      this.showError(await describeFailure(error, null));
    }
  }
}

const app = new DemoApp();
// For the console (and the end-to-end tests): the loaded model and its stats.
(globalThis as { sipllmDemo?: unknown }).sipllmDemo = {
  get llm() {
    return app.llm;
  },
  stats: () => app.llm?.stats() ?? null,
};
app.start();

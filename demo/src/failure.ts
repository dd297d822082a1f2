// Every failure as a person should read it: a title naming what went wrong,
// the engine's own message (which names the file, key or offset at fault),
// and what to do about it.
//
// A browser does not tell a page why a cross-origin request failed: a CORS
// refusal, a refused connection and an unknown host all look alike. The dev
// server can ask the model's server itself (/__sipllm/probe), which tells
// them apart.

import { ARCHITECTURES, InvalidArgumentError, SipLLMError } from 'sipllm';

import type { ProbeReport } from '../vite.config.js';
import { SettingsError } from './settings.js';

export interface Failure {
  kind: string;     // the engine's error kind, or 'settings', 'cors', 'unreachable', 'not-found'
  title: string;
  message: string;
  hint: string;
}

async function probe(url: string): Promise<ProbeReport | null> {
  try {
    const query = new URLSearchParams({ url, origin: location.origin });
    const response = await fetch(`/__sipllm/probe?${query}`);
    if (!response.ok) return null;
    return (await response.json()) as ProbeReport;
  } catch {
    return null;
  }
}

function allowsOrigin(allowOrigin: string | null | undefined): boolean {
  return allowOrigin === '*' || allowOrigin === location.origin;
}

// A network failure of the model at `url`, explained as far as the probe can.
async function explainNetwork(url: string | null, message: string): Promise<Failure> {
  const general: Failure = {
    kind: 'network',
    title: 'The model could not be downloaded',
    message,
    hint: 'Check the URL and the network. A model on another site must allow this page with CORS ' +
          '(Access-Control-Allow-Origin, exposing Content-Range) and answer Range requests with 206.',
  };
  const notFound = /\b(404|410)\b/.test(message);
  if (notFound) {
    return { ...general, kind: 'not-found', title: 'No model at this URL (404)',
             hint: 'The server has no file there. For Hugging Face, copy the link of the file itself: …/resolve/main/NAME.gguf.' };
  }
  if (url === null) return general;
  const target = new URL(url);
  const report = await probe(url);
  if (report === null) return general;
  if (!report.reachable) {
    return { ...general, kind: 'unreachable', title: `${target.host} cannot be reached`,
             hint: `The server did not answer (${report.error ?? 'no answer'}): check the address and that it is up.` };
  }
  if (report.status !== undefined && report.status >= 400) {
    return { ...general, kind: report.status === 404 ? 'not-found' : 'network',
             title: `${target.host} answered ${report.status}`,
             hint: report.status === 404 ? 'There is no file at this URL.' : 'The server refused to send the file.' };
  }
  const crossOrigin = target.origin !== location.origin;
  if (crossOrigin && !allowsOrigin(report.allowOrigin)) {
    return {
      kind: 'cors',
      title: `CORS refused: ${target.host} does not allow this page to read the model`,
      message,
      hint: `The server answered (${report.status}) but without "Access-Control-Allow-Origin: *" ` +
            `(or ${location.origin}), so the browser withheld the bytes. Serve the file with CORS headers ` +
            '(and expose Content-Range), or from a host that sends them, such as Hugging Face resolve URLs.',
    };
  }
  if (crossOrigin && globalThis.crossOriginIsolated && report.allowOrigin === null && report.resourcePolicy !== 'cross-origin') {
    return { ...general, kind: 'cors', title: `${target.host} cannot be embedded in an isolated page`,
             hint: 'A cross-origin isolated page needs CORS headers (or Cross-Origin-Resource-Policy: cross-origin) on the model.' };
  }
  return general;
}

export async function describeFailure(error: unknown, url: string | null): Promise<Failure> {
  // A field that is not a number (the form's), or a value the engine refuses,
  // naming the option.
  if (error instanceof SettingsError || (error instanceof InvalidArgumentError && error.option !== undefined)) {
    return { kind: 'settings', title: 'A setting is out of range', message: error.message, hint: 'Fix it in Settings.' };
  }
  if (!(error instanceof SipLLMError)) {
    const message = error instanceof Error ? error.message : String(error);
    return { kind: 'internal', title: 'Something failed', message, hint: 'Reload the page; if it happens again, report it.' };
  }
  const message = error.message;
  switch (error.kind) {
    case 'network':
      return explainNetwork(url, message);
    case 'format': {
      const report = url === null ? null : await probe(url);
      const page = report?.firstBytes?.trimStart().startsWith('<') === true;
      return {
        kind: 'format',
        title: 'This is not a GGUF model',
        message,
        hint: page
          ? 'The URL returns a web page, not the file. For Hugging Face, use the …/resolve/main/NAME.gguf link, not …/blob/main/….'
          : 'SipLLM reads GGUF files (llama.cpp\'s format). Convert or pick a .gguf file.',
      };
    }
    case 'unsupported':
      return {
        kind: 'unsupported',
        title: 'This model is not supported',
        message,
        hint: `SipLLM runs these architectures: ${ARCHITECTURES.join(', ')}, ` +
              'with F32, F16, BF16, Q8_0, Q4_0, Q5_0, K-quant, IQ4_NL, IQ4_XS and MXFP4 tensors.',
      };
    case 'out-of-budget':
      return {
        kind: 'out-of-budget',
        title: 'Out of memory budget',
        message,
        hint: 'Raise the memory budget in Settings, or leave it empty for no limit, then load again.',
      };
    case 'context-full':
      return { kind: 'context-full', title: 'The context is full', message,
               hint: 'Lower Max tokens, shorten the prompt, or start a new chat.' };
    case 'invalid-argument':
      return { kind: 'invalid-argument', title: /\bURLs?\b/.test(message) ? 'Not a model URL' : 'Invalid request',
               message, hint: 'Give an http:// or https:// URL of a .gguf file.' };
    case 'io':
      return { kind: 'io', title: 'The model could not be read', message,
               hint: 'The browser storage failed; try again with the cache off (Settings).' };
    default:
      return {
        kind: error.kind,
        title: 'The engine failed',
        message,
        hint: /WebAssembly build/.test(message)
          ? 'The engine\'s WebAssembly files are not being served: build them with scripts/build-wasm.sh.'
          : 'Load the model again.',
      };
  }
}

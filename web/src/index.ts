export { SipLLM } from './sipllm.js';
export type { ChatFunction } from './sipllm.js';
export type { ChatCompletions, Completions, Embeddings } from './openai.js';
export type * from './openai-types.js';
export { renderChatTemplate } from './chat.js';
export {
  AbortError,
  ContextFullError,
  EngineStalledError,
  FormatError,
  InvalidArgumentError,
  IoError,
  NetworkError,
  OutOfBudgetError,
  SipLLMError,
  UnsupportedError,
} from './errors.js';
export type { ErrorKind } from './errors.js';
export type { StallDump } from './probe.js';
export type * from './types.js';

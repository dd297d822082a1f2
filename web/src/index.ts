export { SipLLM } from './page/sipllm.js';
export type { ChatFunction } from './page/sipllm.js';
export type { ChatCompletions, Completions, Embeddings } from './openai/openai.js';
export type * from './openai/openai-types.js';
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
export { ARCHITECTURES } from './bridge/bridge.generated.js';
export type { Architecture } from './bridge/bridge.generated.js';

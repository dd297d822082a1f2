// The OpenAI-style request and response shapes of llm.chat.completions,
// llm.completions and llm.embeddings: the fields of OpenAI's API that apply
// to a local model, plus a few extensions other local servers (llama.cpp's,
// vLLM) share: top_k, min_p, chat_template, chat_template_kwargs.

import type { Pooling } from '../types.js';

// ---- Requests ------------------------------------------------------------------------

export interface JsonSchemaFormat {
  name?: string;
  description?: string;
  schema?: Record<string, unknown> | boolean;  // absent: any JSON value
  strict?: boolean | null;  // the output follows the schema by construction either way
}

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; json_schema: JsonSchemaFormat };

export interface FunctionDefinition {
  name: string;
  description?: string;
  parameters?: Record<string, unknown>;  // a JSON Schema; absent: any object
  strict?: boolean | null;
}

export interface ChatCompletionTool {
  type: 'function';
  function: FunctionDefinition;
}

export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };  // arguments: JSON text
}

export interface ContentPart {
  type: 'text';
  text: string;
}

export interface ChatCompletionMessageParam {
  role: 'system' | 'developer' | 'user' | 'assistant' | 'tool';
  content: string | ContentPart[] | null;
  name?: string;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

// What both kinds of completion take.
export interface SamplingParams {
  model?: string;               // accepted and echoed; the loaded model answers
  max_tokens?: number | null;   // default 256
  temperature?: number | null;  // 0..2; 0 is greedy; default 0.8
  top_p?: number | null;        // (0, 1]; default 0.95
  top_k?: number | null;        // extension; 0: off; default 40
  min_p?: number | null;        // extension; 0..1; default 0.05
  typical_p?: number | null;    // extension (llama.cpp's server, vLLM); (0, 1]; default 1: off
  seed?: number | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;   // -2..2
  frequency_penalty?: number | null;  // -2..2
  logit_bias?: Record<string, number> | null;  // token id -> -100..100; -100 bans the token
  response_format?: ResponseFormat;
  n?: number | null;  // 1 only
  user?: string;      // accepted, no effect
  stream_options?: { include_usage?: boolean } | null;  // usage comes in the last chunk anyway
  signal?: AbortSignal;
}

export interface ChatCompletionCreateParams extends SamplingParams {
  messages: ChatCompletionMessageParam[];
  stream?: boolean | null;
  max_completion_tokens?: number | null;  // as max_tokens
  tools?: ChatCompletionTool[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;  // default true: several calls may be made
  logprobs?: false | null;  // not available
  // Extensions: a template to use instead of the model's, and more variables for it.
  chat_template?: string;
  chat_template_kwargs?: Record<string, unknown>;
}

export interface CompletionCreateParams extends SamplingParams {
  prompt: string | number[];  // text, or token ids
  stream?: boolean | null;
  echo?: boolean | null;  // the prompt's text before the completion
}

export interface EmbeddingCreateParams {
  input: string | string[];
  model?: string;
  encoding_format?: 'float' | 'base64';
  user?: string;
  pooling?: Pooling;  // extension; default: the file's
}

// ---- Responses -------------------------------------------------------------------------

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  // cached_tokens: prompt tokens whose keys and values were already in the
  // KV cache (a conversation's earlier turns), not computed again.
  prompt_tokens_details: { cached_tokens: number };
}

export interface ChatCompletionMessage {
  role: 'assistant';
  content: string | null;
  refusal: null;
  tool_calls?: ToolCall[];
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: Array<{ index: number; message: ChatCompletionMessage; logprobs: null; finish_reason: FinishReason }>;
  usage: CompletionUsage;
}

export interface ToolCallDelta {
  index: number;
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: Array<{
    index: number;
    delta: { role?: 'assistant'; content?: string; tool_calls?: ToolCallDelta[] };
    logprobs: null;
    finish_reason: FinishReason | null;
  }>;
  usage?: CompletionUsage;  // in the last chunk
}

export interface Completion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: Array<{ index: number; text: string; logprobs: null; finish_reason: FinishReason | null }>;
  usage?: CompletionUsage;  // always in a whole completion; in the last chunk of a stream
}

export interface Embedding {
  object: 'embedding';
  index: number;
  embedding: number[] | string;  // base64 of little-endian float32 with encoding_format 'base64'
}

export interface CreateEmbeddingResponse {
  object: 'list';
  data: Embedding[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

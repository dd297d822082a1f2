// llm.chat.completions, llm.completions and llm.embeddings: OpenAI's call
// shapes over the engine's own generate() and embed(). Requests are checked
// field by field (an unknown field, one of the wrong type, or one that does
// not apply to a local model, is an InvalidArgumentError naming it); the
// values' ranges are the engine's to check (sipllm/options.h), and its
// refusal is passed on under the request's field name. Structured output and
// forced tool calls become a grammar the engine compiles and enforces.

import { renderChatTemplate } from '../chat.js';
import { InvalidArgumentError, UnsupportedError } from '../errors.js';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatCompletionMessageParam,
  ChatCompletionTool,
  Completion,
  CompletionCreateParams,
  CompletionUsage,
  CreateEmbeddingResponse,
  EmbeddingCreateParams,
  FinishReason,
  ResponseFormat,
  SamplingParams,
  ToolCall,
  ToolChoice,
} from './openai-types.js';
import {
  ToolCallStream,
  forcedFunctions,
  parseToolCalls,
  randomId,
  templateRendersTools,
  toolCallTags,
  toolCallSchema,
  toolCallStyle,
  toolsSystemPrompt,
} from './tool-calls.js';
import type { ToolCallStyle } from './tool-calls.js';
import type { ToolCallTags } from '../bridge/protocol.js';
import type { ChatMessage, EmbedOptions, EmbedResult, GenerateOptions, GenerationStats, ModelInfo } from '../types.js';

// What this layer needs of a loaded model (SipLLM provides it).
export interface CompletionEngine {
  readonly info: ModelInfo;
  generate(prompt: string | number[], options: GenerateOptions): AsyncGenerator<string, GenerationStats>;
  detokenize(tokens: number[]): Promise<string>;
  jsonSchemaToGrammar(schema: unknown): Promise<string>;
  jsonObjectGrammar(): Promise<string>;
  toolCallGrammar(schema: unknown, calls: ToolCallTags): Promise<string>;
  checkGenerateOptions(options: GenerateOptions): Promise<void>;
  embed(texts: string[], options: EmbedOptions): Promise<EmbedResult>;
}

// ---- Checking requests ------------------------------------------------------------------

type Check = (value: unknown, field: string) => void;

function fail(field: string, message: string): never {
  throw new InvalidArgumentError(`field '${field}' ${message}`);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

const isNumber = (integer = false): Check => (value, field) => {
  if (typeof value !== 'number' || Number.isNaN(value) || (integer && !Number.isInteger(value))) {
    fail(field, `must be ${integer ? 'an integer' : 'a number'}`);
  }
};

const oneOf = (...allowed: string[]): Check => (value, field) => {
  if (typeof value !== 'string' || !allowed.includes(value)) {
    fail(field, `must be ${allowed.map((a) => `'${a}'`).join(', ')}, not ${JSON.stringify(value)}`);
  }
};

const isString: Check = (value, field) => {
  if (typeof value !== 'string') fail(field, 'must be a string');
};

const isBoolean: Check = (value, field) => {
  if (typeof value !== 'boolean') fail(field, 'must be true or false');
};

const isObject: Check = (value, field) => {
  if (!isRecord(value)) fail(field, 'must be an object');
};

const isSignal: Check = (value, field) => {
  if (typeof AbortSignal !== 'undefined' && !(value instanceof AbortSignal)) fail(field, 'must be an AbortSignal');
};

const stopStrings: Check = (value, field) => {
  const list = Array.isArray(value) ? value : [value];
  list.forEach((stop, i) => {
    if (typeof stop !== 'string' || stop.length === 0) {
      fail(Array.isArray(value) ? `${field}[${i}]` : field, 'must be a non-empty string');
    }
  });
};

// OpenAI: "-100 should result in a ban".
const BANNING_BIAS = -100;

const logitBias: Check = (value, field) => {
  if (!isRecord(value)) fail(field, 'must be an object mapping token ids to biases');
  for (const [token, bias] of Object.entries(value)) {
    if (!/^\d+$/.test(token)) fail(`${field}.${token}`, 'is not a token id');
    isNumber()(bias, `${field}.${token}`);
  }
};

const responseFormat: Check = (value, field) => {
  if (!isRecord(value)) fail(field, 'must be an object');
  oneOf('text', 'json_object', 'json_schema')(value.type, `${field}.type`);
  for (const key of Object.keys(value)) {
    if (key !== 'type' && !(key === 'json_schema' && value.type === 'json_schema')) fail(`${field}.${key}`, 'is not a known field');
  }
  if (value.type !== 'json_schema') return;
  const format = value.json_schema;
  if (!isRecord(format)) fail(`${field}.json_schema`, 'must be an object');
  for (const [key, item] of Object.entries(format)) {
    const where = `${field}.json_schema.${key}`;
    if (key === 'name' || key === 'description') isString(item, where);
    else if (key === 'strict') { if (item !== null) isBoolean(item, where); }
    else if (key === 'schema') { if (typeof item !== 'boolean') isObject(item, where); }
    else fail(where, 'is not a known field');
  }
};

// Fields of OpenAI's API that a local model cannot honour: accepted only at
// their neutral value, refused otherwise with the reason.
interface NotApplicable {
  neutral: unknown[];
  reason: string;
}

const SAMPLING_FIELDS: Record<string, Check> = {
  model: isString,
  max_tokens: isNumber(true),
  temperature: isNumber(),
  top_p: isNumber(),
  top_k: isNumber(true),
  min_p: isNumber(),
  typical_p: isNumber(),
  seed: isNumber(true),
  stop: stopStrings,
  presence_penalty: isNumber(),
  frequency_penalty: isNumber(),
  logit_bias: logitBias,
  response_format: responseFormat,
  user: isString,
  stream: isBoolean,
  stream_options: isObject,
  signal: isSignal,
};

const SAMPLING_NOT_APPLICABLE: Record<string, NotApplicable> = {
  n: { neutral: [1], reason: 'only one choice is generated (n: 1)' },
  store: { neutral: [false], reason: 'nothing is stored: the model runs here' },
  service_tier: { neutral: ['auto', 'default'], reason: 'there are no service tiers: the model runs here' },
  metadata: { neutral: [], reason: 'nothing is stored: the model runs here' },
};

const CHAT_FIELDS: Record<string, Check> = {
  ...SAMPLING_FIELDS,
  messages: () => {},  // checked with the messages
  max_completion_tokens: isNumber(true),
  tools: () => {},  // checked with the tools
  tool_choice: () => {},
  parallel_tool_calls: isBoolean,
  chat_template: isString,
  chat_template_kwargs: isObject,
};

const CHAT_NOT_APPLICABLE: Record<string, NotApplicable> = {
  ...SAMPLING_NOT_APPLICABLE,
  logprobs: { neutral: [false], reason: 'log-probabilities are not reported' },
  top_logprobs: { neutral: [0], reason: 'log-probabilities are not reported' },
  audio: { neutral: [], reason: 'the engine generates text only' },
  modalities: { neutral: [['text']], reason: 'the engine generates text only' },
  prediction: { neutral: [], reason: 'predicted outputs are not supported' },
  reasoning_effort: { neutral: [], reason: 'use chat_template_kwargs (enable_thinking, ...) for a model that reasons' },
  web_search_options: { neutral: [], reason: 'the model has no web search' },
  functions: { neutral: [], reason: 'deprecated: use tools' },
  function_call: { neutral: [], reason: 'deprecated: use tool_choice' },
};

const COMPLETION_FIELDS: Record<string, Check> = {
  ...SAMPLING_FIELDS,
  prompt: () => {},  // checked with the prompt
  echo: isBoolean,
};

const COMPLETION_NOT_APPLICABLE: Record<string, NotApplicable> = {
  ...SAMPLING_NOT_APPLICABLE,
  best_of: { neutral: [1], reason: 'only one completion is generated (best_of: 1)' },
  logprobs: { neutral: [0], reason: 'log-probabilities are not reported' },
  suffix: { neutral: [''], reason: 'insertion (suffix) is not supported' },
};

const EMBEDDING_FIELDS: Record<string, Check> = {
  input: () => {},
  model: isString,
  encoding_format: oneOf('float', 'base64'),
  user: isString,
  pooling: oneOf('model', 'mean', 'cls', 'last'),
};

const EMBEDDING_NOT_APPLICABLE: Record<string, NotApplicable> = {
  dimensions: { neutral: [], reason: 'embeddings have the model\'s width (truncating is only valid for models trained for it)' },
};

function checkFields(params: unknown, fields: Record<string, Check>, notApplicable: Record<string, NotApplicable>): void {
  if (!isRecord(params)) throw new InvalidArgumentError('the request must be an object');
  for (const [field, value] of Object.entries(params)) {
    if (value === undefined || value === null) continue;
    const check = fields[field];
    if (check !== undefined) {
      check(value, field);
      continue;
    }
    const refused = notApplicable[field];
    if (refused === undefined) fail(field, 'is not a known field');
    if (!refused.neutral.some((neutral) => JSON.stringify(neutral) === JSON.stringify(value))) {
      fail(field, `does not apply: ${refused.reason}`);
    }
  }
}

function checkMessages(messages: unknown): ChatCompletionMessageParam[] {
  if (!Array.isArray(messages) || messages.length === 0) fail('messages', 'must be a non-empty array');
  messages.forEach((message, i) => {
    const where = `messages[${i}]`;
    if (!isRecord(message)) fail(where, 'must be an object');
    oneOf('system', 'developer', 'user', 'assistant', 'tool')(message.role, `${where}.role`);
    const content = message.content;
    if (Array.isArray(content)) {
      content.forEach((part, j) => {
        if (!isRecord(part) || part.type !== 'text' || typeof part.text !== 'string') {
          fail(`${where}.content[${j}]`, "must be a text part ({ type: 'text', text }): the engine reads text only");
        }
      });
    } else if (typeof content !== 'string' && !(content === null && message.role === 'assistant') &&
               !(content === undefined && message.role === 'assistant' && Array.isArray(message.tool_calls))) {
      fail(`${where}.content`, 'must be a string or an array of text parts');
    }
    if (message.tool_calls !== undefined) {
      if (message.role !== 'assistant' || !Array.isArray(message.tool_calls)) {
        fail(`${where}.tool_calls`, 'must be an array, on an assistant message');
      }
      message.tool_calls.forEach((call, j) => {
        const fn = isRecord(call) ? call.function : undefined;
        if (!isRecord(fn) || typeof fn.name !== 'string' || typeof fn.arguments !== 'string') {
          fail(`${where}.tool_calls[${j}]`, "must be { id, type: 'function', function: { name, arguments } }");
        }
      });
    }
    if (message.name !== undefined) isString(message.name, `${where}.name`);
    if (message.tool_call_id !== undefined) isString(message.tool_call_id, `${where}.tool_call_id`);
    for (const key of Object.keys(message)) {
      if (!['role', 'content', 'name', 'tool_calls', 'tool_call_id'].includes(key)) fail(`${where}.${key}`, 'is not a known field');
    }
  });
  return messages as ChatCompletionMessageParam[];
}

function checkTools(tools: unknown, choice: unknown): { tools: ChatCompletionTool[]; choice: ToolChoice | undefined } {
  if (tools === undefined || tools === null) {
    if (choice !== undefined && choice !== null && choice !== 'none' && choice !== 'auto') {
      fail('tool_choice', 'asks for a tool call, but no tools are given');
    }
    return { tools: [], choice: undefined };
  }
  if (!Array.isArray(tools)) fail('tools', 'must be an array');
  tools.forEach((tool, i) => {
    const where = `tools[${i}]`;
    if (!isRecord(tool) || tool.type !== 'function') fail(`${where}.type`, "must be 'function'");
    const fn = tool.function;
    if (!isRecord(fn)) fail(`${where}.function`, 'must be an object');
    if (typeof fn.name !== 'string' || !/^[a-zA-Z0-9_-]{1,64}$/.test(fn.name)) {
      fail(`${where}.function.name`, 'must be 1 to 64 letters, digits, underscores or dashes');
    }
    if (fn.parameters !== undefined) isObject(fn.parameters, `${where}.function.parameters`);
  });
  if (choice !== undefined && choice !== null && typeof choice !== 'string') {
    if (!isRecord(choice) || choice.type !== 'function' || !isRecord(choice.function) || typeof choice.function.name !== 'string') {
      fail('tool_choice', "must be 'none', 'auto', 'required' or { type: 'function', function: { name } }");
    }
  } else if (choice !== undefined && choice !== null) {
    oneOf('none', 'auto', 'required')(choice, 'tool_choice');
  }
  return { tools: tools as ChatCompletionTool[], choice: (choice ?? undefined) as ToolChoice | undefined };
}

// ---- From a request to the engine's options ------------------------------------------------

async function grammarFor(engine: CompletionEngine, format: ResponseFormat | undefined | null): Promise<string | undefined> {
  if (format === undefined || format === null || format.type === 'text') return undefined;
  if (format.type === 'json_object') return engine.jsonObjectGrammar();
  return engine.jsonSchemaToGrammar(format.json_schema.schema ?? true);
}

// The request's field that gave each of the engine's options.
type MaxTokensParams = SamplingParams & { max_completion_tokens?: number | null };
function fieldOf(option: string, params: MaxTokensParams): string {
  if (option === 'maxTokens') return params.max_completion_tokens != null ? 'max_completion_tokens' : 'max_tokens';
  if (option === 'grammar') return 'response_format';
  return option.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);
}

// The engine's options for a request, held to the engine's ranges before
// anything runs (a streamed request is refused before its stream begins).
async function generateOptions(engine: CompletionEngine, params: MaxTokensParams,
                               grammar: string | undefined): Promise<GenerateOptions> {
  const options: GenerateOptions = { signal: params.signal, grammar };
  const maxTokens = params.max_completion_tokens ?? params.max_tokens;
  if (maxTokens != null) options.maxTokens = maxTokens;
  if (params.temperature != null) options.temperature = params.temperature;
  if (params.top_p != null) options.topP = params.top_p;
  if (params.top_k != null) options.topK = params.top_k;
  if (params.min_p != null) options.minP = params.min_p;
  if (params.typical_p != null) options.typicalP = params.typical_p;
  if (params.seed != null) options.seed = params.seed;
  if (params.stop != null) options.stop = Array.isArray(params.stop) ? params.stop : [params.stop];
  if (params.presence_penalty != null) options.presencePenalty = params.presence_penalty;
  if (params.frequency_penalty != null) options.frequencyPenalty = params.frequency_penalty;
  if (params.logit_bias != null) {
    const bias = new Map<number, number>();
    for (const [token, value] of Object.entries(params.logit_bias)) bias.set(Number(token), value <= BANNING_BIAS ? -Infinity : value);
    options.logitBias = bias;
  }
  try {
    await engine.checkGenerateOptions(options);
  } catch (error) {
    if (error instanceof InvalidArgumentError && error.option !== undefined) {
      const field = fieldOf(error.option, params);
      throw new InvalidArgumentError(error.message.replace(`option '${error.option}'`, `field '${field}'`), field);
    }
    throw error;
  }
  return options;
}

function usageOf(stats: GenerationStats): CompletionUsage {
  return {
    prompt_tokens: stats.promptTokens,
    completion_tokens: stats.generatedTokens,
    total_tokens: stats.promptTokens + stats.generatedTokens,
    prompt_tokens_details: { cached_tokens: stats.reusedTokens },
  };
}

function finishReason(stats: GenerationStats): FinishReason {
  return stats.stopReason === 'max tokens' ? 'length' : 'stop';
}

function modelName(engine: CompletionEngine, requested: string | undefined | null): string {
  return requested ?? (engine.info.name || engine.info.architecture);
}

function textOf(content: ChatCompletionMessageParam['content'] | undefined): string {
  if (content === null || content === undefined) return '';
  return typeof content === 'string' ? content : content.map((part) => part.text).join('');
}

function parsedArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// The messages as chat templates take them (transformers' conventions):
// text content, tool call arguments as objects. For a template that cannot
// show tools, `toolsAsText` are described in the system turn and the calls
// and results are written in the hermes style's text.
function templateMessages(messages: ChatCompletionMessageParam[], toolsAsText: ChatCompletionTool[] | null): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const message of messages) {
    const content = textOf(message.content);
    const role = message.role === 'developer' ? 'system' : message.role;
    if (toolsAsText !== null && role === 'tool') {
      out.push({ role: 'user', content: `<tool_response>\n${content}\n</tool_response>` });
    } else if (toolsAsText !== null && message.tool_calls !== undefined) {
      const calls = message.tool_calls.map((call) =>
        `<tool_call>\n${JSON.stringify({ name: call.function.name, arguments: parsedArguments(call.function.arguments) })}\n</tool_call>`);
      out.push({ role, content: [content, ...calls].filter((part) => part.length > 0).join('\n') });
    } else {
      const rendered: ChatMessage = { role, content };
      if (message.name !== undefined) rendered.name = message.name;
      if (message.tool_call_id !== undefined) rendered.tool_call_id = message.tool_call_id;
      if (message.tool_calls !== undefined) {
        rendered.tool_calls = message.tool_calls.map((call) => ({
          id: call.id,
          type: 'function',
          function: { name: call.function.name, arguments: parsedArguments(call.function.arguments) },
        }));
      }
      out.push(rendered);
    }
  }
  if (toolsAsText !== null) {
    const prompt = toolsSystemPrompt(toolsAsText);
    if (out[0]?.role === 'system') out[0] = { ...out[0], content: `${out[0].content}\n\n${prompt}` };
    else out.unshift({ role: 'system', content: prompt });
  }
  return out;
}

function created(): number {
  return Math.floor(Date.now() / 1000);
}

// Runs a generation to its end, returning its text and statistics.
async function generateAll(engine: CompletionEngine, prompt: string | number[],
                           options: GenerateOptions): Promise<{ text: string; stats: GenerationStats }> {
  const pieces = engine.generate(prompt, options);
  let text = '';
  for (;;) {
    const next = await pieces.next();
    if (next.done) return { text, stats: next.value };
    text += next.value;
  }
}

// ---- The API -----------------------------------------------------------------------------------

interface PreparedChat {
  prompt: string;
  options: GenerateOptions;
  model: string;
  // Set when the reply is to be searched for tool calls.
  tools: { list: ChatCompletionTool[]; style: ToolCallStyle } | null;
}

export class ChatCompletions {
  constructor(private readonly engine: CompletionEngine) {}

  // With stream: true, an async iterable of chat.completion.chunk objects;
  // otherwise the chat.completion object.
  create(params: ChatCompletionCreateParams & { stream: true }): Promise<AsyncIterable<ChatCompletionChunk>>;
  create(params: ChatCompletionCreateParams & { stream?: false | null }): Promise<ChatCompletion>;
  create(params: ChatCompletionCreateParams): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
  async create(params: ChatCompletionCreateParams): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
    const prepared = await this.prepare(params);
    if (params.stream === true) return this.stream(prepared);
    const { text, stats } = await generateAll(this.engine, prepared.prompt, prepared.options);
    let content: string | null = text;
    let toolCalls: ToolCall[] = [];
    if (prepared.tools !== null) {
      const parsed = parseToolCalls(text, prepared.tools.style, prepared.tools.list);
      toolCalls = parsed.toolCalls;
      if (toolCalls.length > 0) content = parsed.content.length > 0 ? parsed.content : null;
    }
    return {
      id: randomId('chatcmpl-'),
      object: 'chat.completion',
      created: created(),
      model: prepared.model,
      choices: [{
        index: 0,
        message: { role: 'assistant', content, refusal: null, ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) },
        logprobs: null,
        finish_reason: toolCalls.length > 0 ? 'tool_calls' : finishReason(stats),
      }],
      usage: usageOf(stats),
    };
  }

  private async prepare(params: ChatCompletionCreateParams): Promise<PreparedChat> {
    checkFields(params, CHAT_FIELDS, CHAT_NOT_APPLICABLE);
    const messages = checkMessages(params.messages);
    const { tools, choice } = checkTools(params.tools, params.tool_choice);
    const template = params.chat_template ?? this.engine.info.chatTemplate;
    if (!template) {
      throw new UnsupportedError('this model has no chat template (tokenizer.chat_template is absent): ' +
                                 'use completions.create() with a plain prompt, or pass chat_template');
    }
    const useTools = tools.length > 0 && choice !== 'none';
    const rendersTools = templateRendersTools(template);
    // A template without tools is shown them in the hermes style (toolsSystemPrompt).
    const style = rendersTools ? toolCallStyle(template) : 'hermes';
    const forced = useTools ? forcedFunctions(tools, choice) : null;
    const format = params.response_format;
    if (forced !== null && format != null && format.type !== 'text') {
      fail('response_format', 'cannot apply while tool_choice forces a tool call');
    }
    const prompt = renderChatTemplate(template, templateMessages(messages, useTools && !rendersTools ? tools : null), {
      bosToken: this.engine.info.bosText,
      eosToken: this.engine.info.eosText,
      addGenerationPrompt: true,
      variables: { ...params.chat_template_kwargs, ...(useTools && rendersTools ? { tools } : {}) },
    });
    let grammar = await grammarFor(this.engine, format);
    if (forced !== null) {
      grammar = await this.engine.toolCallGrammar(toolCallSchema(forced, style),
                                                  { ...toolCallTags(style), parallel: params.parallel_tool_calls !== false });
    }
    return {
      prompt,
      // The template writes the special tokens itself.
      options: { ...await generateOptions(this.engine, params, grammar), addSpecial: false },
      model: modelName(this.engine, params.model),
      tools: useTools ? { list: tools, style } : null,
    };
  }

  private async *stream(prepared: PreparedChat): AsyncGenerator<ChatCompletionChunk> {
    const id = randomId('chatcmpl-');
    const createdAt = created();
    const chunk = (delta: ChatCompletionChunk['choices'][0]['delta'], finish: FinishReason | null = null,
                   usage?: CompletionUsage): ChatCompletionChunk => ({
      id, object: 'chat.completion.chunk', created: createdAt, model: prepared.model,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }],
      ...(usage !== undefined ? { usage } : {}),
    });
    yield chunk({ role: 'assistant', content: '' });
    const calls = prepared.tools !== null ? new ToolCallStream(prepared.tools.style) : null;
    const pieces = this.engine.generate(prepared.prompt, prepared.options);
    let stats: GenerationStats;
    try {
      for (;;) {
        const next = await pieces.next();
        if (next.done) {
          stats = next.value;
          break;
        }
        const text = calls !== null ? calls.push(next.value) : next.value;
        if (text.length > 0) yield chunk({ content: text });
      }
    } finally {
      // Left early: stop the engine (and free the model for the next request).
      await pieces.return(undefined as never);
    }
    let finish = finishReason(stats);
    if (calls !== null && prepared.tools !== null && calls.rest.length > 0) {
      const parsed = parseToolCalls(calls.rest, prepared.tools.style, prepared.tools.list);
      if (parsed.content.length > 0) yield chunk({ content: parsed.content });
      if (parsed.toolCalls.length > 0) {
        finish = 'tool_calls';
        yield chunk({ tool_calls: parsed.toolCalls.map((call, index) => ({ index, ...call })) });
      }
    }
    yield chunk({}, finish, usageOf(stats));
  }
}

export class Completions {
  constructor(private readonly engine: CompletionEngine) {}

  // With stream: true, an async iterable of text_completion chunks;
  // otherwise the text_completion object.
  create(params: CompletionCreateParams & { stream: true }): Promise<AsyncIterable<Completion>>;
  create(params: CompletionCreateParams & { stream?: false | null }): Promise<Completion>;
  create(params: CompletionCreateParams): Promise<Completion | AsyncIterable<Completion>>;
  async create(params: CompletionCreateParams): Promise<Completion | AsyncIterable<Completion>> {
    checkFields(params, COMPLETION_FIELDS, COMPLETION_NOT_APPLICABLE);
    const prompt = params.prompt;
    const vocabulary = this.engine.info.hyperparameters.nVocab;
    if (Array.isArray(prompt)) {
      if (prompt.length === 0) fail('prompt', 'must not be empty');
      prompt.forEach((token, i) => {
        isNumber(true)(token, `prompt[${i}]`);
        if (token < 0 || token >= vocabulary) fail(`prompt[${i}]`, `must be a token id of this model, from 0 to ${vocabulary - 1}, not ${token}`);
      });
    } else if (typeof prompt !== 'string') {
      fail('prompt', 'must be a string or an array of token ids');
    }
    const options = await generateOptions(this.engine, params, await grammarFor(this.engine, params.response_format));
    const echo = params.echo === true ? (typeof prompt === 'string' ? prompt : await this.engine.detokenize(prompt)) : '';
    const id = randomId('cmpl-');
    const model = modelName(this.engine, params.model);
    const completion = (text: string, finish: FinishReason | null, usage?: CompletionUsage): Completion => ({
      id, object: 'text_completion', created: created(), model,
      choices: [{ index: 0, text, logprobs: null, finish_reason: finish }],
      ...(usage !== undefined ? { usage } : {}),
    });
    if (params.stream !== true) {
      const { text, stats } = await generateAll(this.engine, prompt, options);
      return completion(echo + text, finishReason(stats), usageOf(stats));
    }
    const engine = this.engine;
    return (async function* stream(): AsyncGenerator<Completion> {
      if (echo.length > 0) yield completion(echo, null);
      const pieces = engine.generate(prompt, options);
      let stats: GenerationStats;
      try {
        for (;;) {
          const next = await pieces.next();
          if (next.done) {
            stats = next.value;
            break;
          }
          yield completion(next.value, null);
        }
      } finally {
        await pieces.return(undefined as never);  // left early: stop the engine
      }
      yield completion('', finishReason(stats), usageOf(stats));
    })();
  }
}

function base64(vector: Float32Array): string {
  // Little-endian float32, as OpenAI sends them (every platform that runs
  // WebAssembly is little-endian).
  const bytes = new Uint8Array(vector.buffer, vector.byteOffset, vector.byteLength);
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

export class Embeddings {
  constructor(private readonly engine: CompletionEngine) {}

  async create(params: EmbeddingCreateParams): Promise<CreateEmbeddingResponse> {
    checkFields(params, EMBEDDING_FIELDS, EMBEDDING_NOT_APPLICABLE);
    const input = params.input;
    const texts = typeof input === 'string' ? [input] : input;
    if (!Array.isArray(texts) || texts.length === 0) fail('input', 'must be a string or a non-empty array of strings');
    texts.forEach((text, i) => {
      const where = typeof input === 'string' ? 'input' : `input[${i}]`;
      if (typeof text !== 'string') fail(where, 'must be a string (token ids are not taken)');
      if (text.length === 0) fail(where, 'must not be empty');
    });
    const { embeddings, promptTokens } = await this.engine.embed(texts, { pooling: params.pooling });
    return {
      object: 'list',
      data: embeddings.map((vector, index) => ({
        object: 'embedding',
        index,
        embedding: params.encoding_format === 'base64' ? base64(vector) : Array.from(vector),
      })),
      model: modelName(this.engine, params.model),
      usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    };
  }
}

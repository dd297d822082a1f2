// Tool calls as models write them, and how they are asked for.
//
// Two styles:
//   hermes      <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, one
//               block per call (Qwen 2.5/3, Hermes, SmolLM3 and most others)
//   llama-json  {"name": ..., "parameters": {...}}, the whole reply, possibly
//               after <|python_tag|> (Llama 3.1/3.2/3.3)
// A chat template that renders `tools` describes them to the model itself;
// for one that does not, a system message in the hermes style does.

import { InvalidArgumentError } from '../errors.js';
import type { ChatCompletionTool, ToolCall, ToolChoice } from './openai-types.js';

export type ToolCallStyle = 'hermes' | 'llama-json';

const HERMES_OPEN = '<tool_call>';
const HERMES_CLOSE = '</tool_call>';
const PYTHON_TAG = '<|python_tag|>';

// Llama 3.x templates pass tool results as `ipython` messages and mark raw
// calls with <|python_tag|>; every other template with tools is taken to use
// the hermes style.
export function toolCallStyle(template: string): ToolCallStyle {
  return /<tool_call>/.test(template) || !/ipython|python_tag/.test(template) ? 'hermes' : 'llama-json';
}

export function templateRendersTools(template: string): boolean {
  return /\btools\b/.test(template);
}

// The tool descriptions for a template that has no place for them, as
// Qwen's template words them.
export function toolsSystemPrompt(tools: ChatCompletionTool[]): string {
  return '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
    tools.map((tool) => JSON.stringify(tool)).join('\n') +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' +
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>';
}

// The functions a tool_choice allows; none when it does not force a call.
export function forcedFunctions(tools: ChatCompletionTool[], choice: ToolChoice | undefined): ChatCompletionTool[] | null {
  if (choice === undefined || choice === 'auto' || choice === 'none') return null;
  if (choice === 'required') return tools;
  const named = tools.filter((tool) => tool.function.name === choice.function.name);
  if (named.length === 0) {
    throw new InvalidArgumentError(`field 'tool_choice.function.name': '${choice.function.name}' is not among the tools`);
  }
  return named;
}

function hasRef(value: unknown): boolean {
  if (value === null || typeof value !== 'object') return false;
  if (Array.isArray(value)) return value.some(hasRef);
  return Object.entries(value).some(([key, item]) => (key === '$ref' && typeof item === 'string') || hasRef(item));
}

// `$ref`s of a schema as they read once the schema is `$defs[name]` of a
// larger document, its own `$defs` (or `definitions`) beside it as
// `$defs[name-DEF]`.
function rebaseRefs(value: unknown, name: string): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((item) => rebaseRefs(item, name));
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    if (key === '$ref' && typeof item === 'string' && item.startsWith('#')) {
      const definition = /^#\/(?:\$defs|definitions)\/([^/]+)(.*)$/.exec(item);
      out[key] = definition !== null ? `#/$defs/${name}-${definition[1]}${definition[2]}` : `#/$defs/${name}${item.slice(1)}`;
    } else {
      out[key] = rebaseRefs(item, name);
    }
  }
  return out;
}

// A JSON Schema whose documents are one call of one of `tools` in `style`.
// The functions' parameters go in as they are, or, when they use `$ref`
// (pydantic's schemas do), moved with their definitions under the
// document's `$defs`, where their references still reach.
export function toolCallSchema(tools: ChatCompletionTool[], style: ToolCallStyle): Record<string, unknown> {
  const argumentsKey = style === 'hermes' ? 'arguments' : 'parameters';
  const definitions: Record<string, unknown> = {};
  const calls = tools.map((tool, i) => {
    let parameters: unknown = tool.function.parameters ?? { type: 'object', additionalProperties: true };
    if (hasRef(parameters)) {
      const { $defs, definitions: older, ...own } = rebaseRefs(parameters, `tool${i}`) as Record<string, unknown>;
      definitions[`tool${i}`] = own;
      for (const [key, definition] of Object.entries({ ...(older as object), ...($defs as object) })) {
        definitions[`tool${i}-${key}`] = definition;
      }
      parameters = { $ref: `#/$defs/tool${i}` };
    }
    return {
      type: 'object',
      properties: { name: { const: tool.function.name }, [argumentsKey]: parameters },
      required: ['name', argumentsKey],
    };
  });
  const schema: Record<string, unknown> = calls.length === 1 ? calls[0] : { anyOf: calls };
  return Object.keys(definitions).length > 0 ? { ...schema, $defs: definitions } : schema;
}

// The tags around each call the model must make (the engine builds the
// grammar of the calls: sipllm/grammar.h, tool_call_grammar): in the hermes
// style each call sits in its tags; a Llama 3 call is the document alone.
export function toolCallTags(style: ToolCallStyle): { open: string; close: string } {
  return style === 'hermes' ? { open: HERMES_OPEN, close: HERMES_CLOSE } : { open: '', close: '' };
}

// An id as OpenAI's look: a prefix and random characters.
export function randomId(prefix: string): string {
  const bytes = globalThis.crypto.getRandomValues(new Uint8Array(12));
  return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

function asCall(value: unknown, argumentsKey: string, names: Set<string>): ToolCall | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const record = value as Record<string, unknown>;
  const args = record[argumentsKey] ?? record.arguments ?? record.parameters;
  if (typeof record.name !== 'string' || !names.has(record.name)) return null;
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return null;
  return { id: randomId('call_'), type: 'function', function: { name: record.name, arguments: JSON.stringify(args) } };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

export interface ParsedReply {
  content: string;  // what is not a call
  toolCalls: ToolCall[];
}

// Splits a whole reply into text and the calls of known tools. Text that
// looks like a call but does not parse stays text.
export function parseToolCalls(text: string, style: ToolCallStyle, tools: ChatCompletionTool[]): ParsedReply {
  const names = new Set(tools.map((tool) => tool.function.name));
  const toolCalls: ToolCall[] = [];
  let content = '';
  if (style === 'hermes') {
    let rest = text;
    for (;;) {
      const open = rest.indexOf(HERMES_OPEN);
      if (open < 0) break;
      const close = rest.indexOf(HERMES_CLOSE, open);
      const body = rest.slice(open + HERMES_OPEN.length, close < 0 ? undefined : close);
      const call = asCall(parseJson(body.trim()), 'arguments', names);
      content += rest.slice(0, open);
      if (call === null) content += rest.slice(open, close < 0 ? undefined : close + HERMES_CLOSE.length);
      else toolCalls.push(call);
      if (close < 0) {
        rest = '';
        break;
      }
      rest = rest.slice(close + HERMES_CLOSE.length);
    }
    content += rest;
  } else {
    let body = text.trim();
    if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length).trim();
    // One call, or several separated by semicolons (Llama 3.2's way).
    const parts = body.startsWith('{') ? body.split(/(?<=\})\s*;\s*(?=\{)/) : [];
    const calls = parts.map((part) => asCall(parseJson(part), 'parameters', names));
    if (calls.length > 0 && calls.every((call) => call !== null)) toolCalls.push(...(calls as ToolCall[]));
    else content = text;
  }
  return { content: toolCalls.length > 0 ? content.trim() : content, toolCalls };
}

// Streaming: passes on at once the text that cannot be part of a call, and
// holds back the rest until the reply ends.
export class ToolCallStream {
  private held = '';
  // hermes: 'undecided' until a call starts; llama-json: until the reply's
  // first characters tell whether it is a call or text.
  private state: 'undecided' | 'text' | 'call' = 'undecided';

  constructor(private readonly style: ToolCallStyle) {}

  // The part of `piece` (with what was held) that is plain text for sure.
  push(piece: string): string {
    this.held += piece;
    if (this.state === 'call') return '';
    if (this.state === 'text') {
      const text = this.held;
      this.held = '';
      return text;
    }
    if (this.style === 'hermes') {
      const open = this.held.indexOf(HERMES_OPEN);
      if (open >= 0) {
        this.state = 'call';
        const text = this.held.slice(0, open);
        this.held = this.held.slice(open);
        return text;
      }
      // Hold back a tail that may be the start of the tag.
      let keep = Math.min(this.held.length, HERMES_OPEN.length - 1);
      while (keep > 0 && !HERMES_OPEN.startsWith(this.held.slice(this.held.length - keep))) keep -= 1;
      const text = this.held.slice(0, this.held.length - keep);
      this.held = this.held.slice(this.held.length - keep);
      return text;
    }
    // The llama-json style: a reply that starts as a call is held whole.
    const start = this.held.trimStart();
    if (start.length === 0) return '';
    if (start.startsWith('{') || start.startsWith(PYTHON_TAG)) {
      this.state = 'call';
      return '';
    }
    if (PYTHON_TAG.startsWith(start)) return '';
    this.state = 'text';
    const text = this.held;
    this.held = '';
    return text;
  }

  // What was held back, to be parsed at the end.
  get rest(): string {
    return this.held;
  }
}

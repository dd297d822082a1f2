// The OpenAI-style calls: llm.chat.completions.create, llm.completions.create
// and llm.embeddings.create, on random-weight fixtures written by llama.cpp
// (tests/fixtures/arch), loaded over HTTP range requests. Structured output
// and forced tool calls are checked under random sampling with a JSON
// Schema validator; embeddings against the native CLI's.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { AbortError, InvalidArgumentError, SipLLM, UnsupportedError, renderChatTemplate } from '../dist/index.js';
import type { ChatCompletionChunk, ChatCompletionCreateParams, ChatCompletionTool, Completion } from '../dist/index.js';
import { parseToolCalls, toolCallStyle } from '../dist/openai/tool-calls.js';
import { RangeServer, cliPath, collect, nativeRun, repoRoot } from './support.js';

const FIXTURES = join(repoRoot, 'tests/fixtures/arch');
// The fixtures carry no chat template (their vocabulary is a small
// SentencePiece one): the real Qwen 3 template is given with each request.
const QWEN3_TEMPLATE = readFileSync(join(repoRoot, 'tests/fixtures/vocab/qwen3.chat_template.jinja'), 'utf8');
const RANDOM = { temperature: 1.5, top_k: 0, top_p: 1, min_p: 0 };
const SEEDS = [1, 2, 3, 4, 5, 6];

const PERSON_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    role: { enum: ['admin', 'user', 'guest'] },
    active: { type: 'boolean' },
    tags: { type: 'array', items: { type: 'string', maxLength: 6 }, minItems: 1, maxItems: 3 },
    address: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 10 }, zip: { type: 'integer', minimum: 10000, maximum: 99999 } },
      required: ['city'],
    },
    contact: { anyOf: [{ type: 'null' }, { type: 'object', properties: { email: { type: 'string', maxLength: 16 } }, required: ['email'] }] },
    version: { const: 2 },
  },
  required: ['name', 'age', 'role', 'tags', 'address', 'version'],
};

const WEATHER_TOOL: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 16 }, unit: { enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
    },
  },
};
const TIME_TOOL: ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_time',
    parameters: { type: 'object', properties: { zone: { type: 'string', maxLength: 8 } }, required: ['zone'] },
  },
};

// Llama 3.1's conventions in a few lines: the tools as JSON in the system
// turn, results in `ipython` turns, calls as {"name", "parameters"}.
const LLAMA_JSON_TEMPLATE = "{{- bos_token }}{%- if tools %}{{- '<|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n' }}" +
  "{%- for t in tools %}{{- t | tojson }}{{- '\n' }}{%- endfor %}{{- '<|eot_id|>' }}{%- endif %}" +
  "{%- for message in messages %}{%- if message.role == 'tool' %}" +
  "{{- '<|start_header_id|>ipython<|end_header_id|>\n\n' + message.content + '<|eot_id|>' }}" +
  "{%- else %}{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + message.content + '<|eot_id|>' }}{%- endif %}" +
  "{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %}";

const ajv = new Ajv({ strict: false });
const MESSAGES: ChatCompletionCreateParams['messages'] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Once upon a time there was a little robot' },
];

let server: RangeServer;
const models = new Map<string, SipLLM>();

async function model(family: string): Promise<SipLLM> {
  let llm = models.get(family);
  if (llm === undefined) {
    llm = await SipLLM.load(`${server.url}/${family}-Q8_0.gguf`, { threads: 2, cache: false, contextLength: 2048 });
    models.set(family, llm);
  }
  return llm;
}

async function chunksOf<T>(stream: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const chunk of stream) out.push(chunk);
  return out;
}

beforeAll(async () => {
  server = await RangeServer.start(FIXTURES);
});

afterAll(async () => {
  for (const llm of models.values()) await llm.unload();
  await server?.stop();
});

describe('chat.completions.create', () => {
  it('answers in the chat.completion shape, with the text generate() gives for the rendered template', async () => {
    const llm = await model('qwen3');
    await llm.reset();
    const completion = await llm.chat.completions.create({
      messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 12, temperature: 0,
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.id).toMatch(/^chatcmpl-[0-9a-f]{24}$/);
    expect(completion.model).toBe(llm.info.name);
    expect(Number.isInteger(completion.created)).toBe(true);
    expect(completion.choices).toHaveLength(1);
    const [choice] = completion.choices;
    expect(choice.index).toBe(0);
    expect(choice.message.role).toBe('assistant');
    expect(choice.message.tool_calls).toBeUndefined();

    const prompt = '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' +
                   '<|im_start|>user\nOnce upon a time there was a little robot<|im_end|>\n<|im_start|>assistant\n';
    await llm.reset();
    const expected = await collect(llm.generate(prompt, { maxTokens: 12, temperature: 0, addSpecial: false }));
    expect(choice.message.content).toBe(expected);
    const { usage } = completion;
    expect(usage.prompt_tokens).toBe((await llm.tokenize(prompt, { addSpecial: false })).length);
    expect(usage.completion_tokens).toBe(llm.stats().lastGeneration?.generatedTokens);
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
    expect(choice.finish_reason).toBe(usage.completion_tokens === 12 ? 'length' : 'stop');
  });

  it('streams chat.completion.chunk objects whose deltas make the same text, usage in the last', async () => {
    const llm = await model('qwen3');
    const request = { messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 16, seed: 7, temperature: 1 };
    const whole = await llm.chat.completions.create(request);
    const chunks: ChatCompletionChunk[] = await chunksOf(await llm.chat.completions.create({ ...request, stream: true }));
    expect(chunks.length).toBeGreaterThan(2);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
    expect(chunks.every((c) => c.object === 'chat.completion.chunk')).toBe(true);
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    const text = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
    expect(text).toBe(whole.choices[0].message.content);
    const last = chunks[chunks.length - 1];
    expect(last.choices[0].finish_reason).toBe(whole.choices[0].finish_reason);
    expect(last.usage?.completion_tokens).toBe(whole.usage.completion_tokens);
    expect(last.usage?.prompt_tokens).toBe(whole.usage.prompt_tokens);
    for (const chunk of chunks.slice(0, -1)) {
      expect(chunk.choices[0].finish_reason).toBeNull();
      expect(chunk.usage).toBeUndefined();
    }
  });

  it('reuses the previous turn from the KV cache and says so in usage', async () => {
    const llm = await model('qwen3');
    await llm.reset();
    const first = await llm.chat.completions.create({ messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 8, temperature: 0 });
    expect(first.usage.prompt_tokens_details.cached_tokens).toBe(0);
    const second = await llm.chat.completions.create({
      messages: [...MESSAGES, { role: 'assistant', content: first.choices[0].message.content }, { role: 'user', content: 'And then?' }],
      chat_template: QWEN3_TEMPLATE, max_tokens: 8, temperature: 0,
    });
    const cached = second.usage.prompt_tokens_details.cached_tokens;
    // At least the whole first prompt was already there.
    expect(cached).toBeGreaterThanOrEqual(first.usage.prompt_tokens);
    expect(cached).toBeLessThan(second.usage.prompt_tokens);
  });

  it.each(['qwen3', 'gemma3'])('gives JSON valid under the schema for every seed at temperature 1.5 (%s)', async (family) => {
    const llm = await model(family);
    const validate = ajv.compile(PERSON_SCHEMA);
    const outputs = new Set<string>();
    for (const seed of SEEDS) {
      const completion = await llm.chat.completions.create({
        messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed, max_tokens: 1500,
        response_format: { type: 'json_schema', json_schema: { name: 'person', schema: PERSON_SCHEMA, strict: true } },
      });
      const content = completion.choices[0].message.content as string;
      expect(completion.choices[0].finish_reason, content).toBe('stop');
      expect(['grammar complete', 'end of text']).toContain(llm.stats().lastGeneration?.stopReason);
      const value: unknown = JSON.parse(content);
      expect(validate(value), `${content}\n${JSON.stringify(validate.errors)}`).toBe(true);
      outputs.add(content);
    }
    // Random sampling really ran: the seeds gave different documents.
    expect(outputs.size).toBeGreaterThan(SEEDS.length / 2);
  });

  it('gives a JSON object for json_object, streamed too', async () => {
    const llm = await model('llama3');
    for (const seed of SEEDS.slice(0, 3)) {
      const chunks = await chunksOf(await llm.chat.completions.create({
        messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed, max_tokens: 1500, stream: true,
        response_format: { type: 'json_object' },
      }));
      const content = chunks.map((c) => c.choices[0].delta.content ?? '').join('');
      expect(chunks[chunks.length - 1].choices[0].finish_reason, content).toBe('stop');
      const value: unknown = JSON.parse(content);
      expect(typeof value === 'object' && value !== null && !Array.isArray(value)).toBe(true);
    }
  });

  it("makes parseable tool calls valid under the tool's parameters with tool_choice 'required'", async () => {
    const llm = await model('qwen3');
    const validators = new Map([WEATHER_TOOL, TIME_TOOL].map((tool) => [tool.function.name, ajv.compile(tool.function.parameters as object)]));
    for (const seed of SEEDS) {
      const completion = await llm.chat.completions.create({
        messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed, max_tokens: 1000,
        tools: [WEATHER_TOOL, TIME_TOOL], tool_choice: 'required', parallel_tool_calls: false,
      });
      const [choice] = completion.choices;
      expect(choice.finish_reason, JSON.stringify(choice.message)).toBe('tool_calls');
      expect(choice.message.tool_calls).toHaveLength(1);
      const call = choice.message.tool_calls![0];
      expect(call.type).toBe('function');
      expect(call.id).toMatch(/^call_/);
      const validate = validators.get(call.function.name);
      expect(validate, call.function.name).toBeDefined();
      const args: unknown = JSON.parse(call.function.arguments);
      expect(validate!(args), call.function.arguments).toBe(true);
    }
  });

  it('keeps the references of parameters that use $defs, as pydantic writes them', async () => {
    const llm = await model('qwen3');
    const parameters = {
      type: 'object',
      properties: { where: { $ref: '#/$defs/Place' }, hour: { type: 'integer', minimum: 0, maximum: 23 } },
      required: ['where', 'hour'],
      $defs: {
        Place: {
          type: 'object',
          properties: { city: { type: 'string', maxLength: 10 }, country: { $ref: '#/$defs/Country' } },
          required: ['city', 'country'],
        },
        Country: { enum: ['NO', 'IT', 'JP'] },
      },
    };
    const book: ChatCompletionTool = { type: 'function', function: { name: 'book', parameters } };
    const validate = ajv.compile(parameters);
    for (const seed of SEEDS.slice(0, 3)) {
      const completion = await llm.chat.completions.create({
        messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed, max_tokens: 1000,
        tools: [WEATHER_TOOL, book], tool_choice: { type: 'function', function: { name: 'book' } }, parallel_tool_calls: false,
      });
      const call = completion.choices[0].message.tool_calls?.[0];
      expect(call?.function.name).toBe('book');
      expect(validate(JSON.parse(call!.function.arguments)), call!.function.arguments).toBe(true);
    }
  });

  it('calls the named function, and streams the call as delta.tool_calls', async () => {
    const llm = await model('qwen3');
    const chunks = await chunksOf(await llm.chat.completions.create({
      messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed: 11, max_tokens: 1000, stream: true,
      tools: [WEATHER_TOOL, TIME_TOOL], tool_choice: { type: 'function', function: { name: 'get_time' } },
    }));
    const calls = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
    expect(calls.length).toBeGreaterThan(0);
    for (const call of calls) {
      expect(call.function.name).toBe('get_time');
      expect(typeof (JSON.parse(call.function.arguments) as { zone: unknown }).zone).toBe('string');
    }
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe('tool_calls');
    // The markup of the calls is not passed on as text.
    expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).not.toContain('<tool_call>');
  });

  it("makes Llama 3's JSON-style calls with a template written that way", async () => {
    const llm = await model('llama3');
    const validate = ajv.compile(WEATHER_TOOL.function.parameters as object);
    for (const seed of SEEDS.slice(0, 3)) {
      const chunks = await chunksOf(await llm.chat.completions.create({
        messages: MESSAGES, chat_template: LLAMA_JSON_TEMPLATE, ...RANDOM, seed, max_tokens: 1000, stream: true,
        tools: [WEATHER_TOOL, TIME_TOOL], tool_choice: { type: 'function', function: { name: 'get_weather' } },
      }));
      const calls = chunks.flatMap((c) => c.choices[0].delta.tool_calls ?? []);
      expect(calls).toHaveLength(1);
      expect(calls[0].function.name).toBe('get_weather');
      expect(validate(JSON.parse(calls[0].function.arguments)), calls[0].function.arguments).toBe(true);
      expect(chunks.map((c) => c.choices[0].delta.content ?? '').join('')).toBe('');
      expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe('tool_calls');
    }
  });

  it('renders the tools into a template that has no place for them', async () => {
    const llm = await model('llama3');
    const completion = await llm.chat.completions.create({
      messages: MESSAGES, chat_template: readFileSync(join(repoRoot, 'tests/fixtures/vocab/llama3.chat_template.jinja'), 'utf8'),
      ...RANDOM, seed: 3, max_tokens: 1000, tools: [WEATHER_TOOL], tool_choice: 'required', parallel_tool_calls: false,
    });
    expect(completion.choices[0].finish_reason).toBe('tool_calls');
    expect(completion.choices[0].message.tool_calls?.[0].function.name).toBe('get_weather');
  });

  it('stops at an aborted signal with AbortError', async () => {
    const llm = await model('qwen3');
    const controller = new AbortController();
    const stream = await llm.chat.completions.create({
      messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 1000, stream: true, signal: controller.signal,
    });
    let chunks = 0;
    await expect((async () => {
      for await (const chunk of stream) {
        chunks += 1;
        if (chunk.choices[0].delta.content) controller.abort();
      }
    })()).rejects.toBeInstanceOf(AbortError);
    expect(chunks).toBeLessThan(10);
    expect(llm.stats().lastGeneration?.stopReason).toBe('cancelled');
  });

  it('stops the engine when the loop is left early, so that the next request runs', async () => {
    const llm = await model('qwen3');
    const stream = await llm.chat.completions.create({ messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 1000, stream: true });
    let chunks = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0].delta.content && ++chunks === 3) break;
    }
    expect(llm.stats().lastGeneration?.stopReason).toBe('cancelled');
    const next = await llm.completions.create({ prompt: 'Once upon a time', max_tokens: 3, temperature: 0 });
    expect(next.usage?.completion_tokens).toBe(3);
  });

  it('renders a conversation holding a tool call and its result, and continues it', async () => {
    const llm = await model('qwen3');
    const conversation: ChatCompletionCreateParams['messages'] = [
      ...MESSAGES,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Oslo", "unit": "celsius"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 3}' },
    ];
    await llm.reset();
    const reply = await llm.chat.completions.create({
      messages: conversation, chat_template: QWEN3_TEMPLATE, tools: [WEATHER_TOOL], max_tokens: 6, temperature: 0,
    });
    // The Qwen 3 template writes the call and the result as it was trained to read them.
    const prompt = renderChatTemplate(QWEN3_TEMPLATE, [
      ...MESSAGES,
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: { city: 'Oslo', unit: 'celsius' } } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 3}' },
    ], { bosToken: llm.info.bosText, eosToken: llm.info.eosText, addGenerationPrompt: true, variables: { tools: [WEATHER_TOOL] } });
    expect(prompt).toContain('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>');
    expect(prompt).toContain('<tool_response>\n{"temperature": 3}\n</tool_response>');
    expect(reply.usage.prompt_tokens).toBe((await llm.tokenize(prompt, { addSpecial: false })).length);
  });

  it('applies the presence and frequency penalties as the native engine does', async () => {
    const llm = await model('gemma3');
    const prompt = 'Once upon a time';
    const penalties = { presence_penalty: 0.5, frequency_penalty: 1.5 };
    const penalized = await llm.completions.create({ prompt, max_tokens: 40, temperature: 0, ...penalties });
    expect(penalized.choices[0].text).toBe(nativeRun(join(FIXTURES, 'gemma3-Q8_0.gguf'), prompt, 40,
                                                     ['--temp', '0', '--presence-penalty', '0.5', '--frequency-penalty', '1.5']));
    const plain = await llm.completions.create({ prompt, max_tokens: 40, temperature: 0 });
    expect(penalized.choices[0].text).not.toBe(plain.choices[0].text);
  });
});

describe('completions.create', () => {
  it('continues a prompt in the text_completion shape, whole and streamed', async () => {
    const llm = await model('gemma3');
    const request = { prompt: 'Once upon a time', max_tokens: 10, temperature: 0 };
    const whole = await llm.completions.create(request);
    expect(whole.object).toBe('text_completion');
    expect(whole.id).toMatch(/^cmpl-/);
    await llm.reset();
    expect(whole.choices[0].text).toBe(await collect(llm.generate('Once upon a time', { maxTokens: 10, temperature: 0 })));
    expect(whole.usage?.completion_tokens).toBe(10);
    expect(whole.choices[0].finish_reason).toBe('length');
    const chunks: Completion[] = await chunksOf(await llm.completions.create({ ...request, stream: true, echo: true }));
    expect(chunks.map((c) => c.choices[0].text).join('')).toBe(`Once upon a time${whole.choices[0].text}`);
    expect(chunks[chunks.length - 1].usage?.completion_tokens).toBe(10);
    expect(chunks[chunks.length - 1].choices[0].finish_reason).toBe('length');
  });

  it('takes token ids and a JSON schema', async () => {
    const llm = await model('gemma3');
    const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
    const completion = await llm.completions.create({
      prompt: await llm.tokenize('Once upon a time'), ...RANDOM, seed: 5, max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { schema } },
    });
    expect(ajv.validate(schema, JSON.parse(completion.choices[0].text))).toBe(true);
  });
});

// `sipllm embed` prints one line of floats per text.
function nativeEmbeddings(file: string, texts: string[]): number[][] {
  const out = execFileSync(cliPath, ['embed', '-m', join(FIXTURES, file), '--threads', '1', ...texts.flatMap((t) => ['-p', t])],
                           { encoding: 'utf8' });
  return out.trim().split('\n').map((line) => line.split(' ').map(Number));
}

describe('embeddings.create', () => {
  const TEXTS = ['Once upon a time there was a little robot', 'The cat sat on the mat.', 'a'];

  it.each(['qwen3', 'gemma3'])('equals the native engine on %s, batched', async (family) => {
    const llm = await model(family);
    const response = await llm.embeddings.create({ input: TEXTS });
    expect(response.object).toBe('list');
    expect(response.model).toBe(llm.info.name);
    expect(response.data.map((d) => d.index)).toEqual([0, 1, 2]);
    const expected = nativeEmbeddings(`${family}-Q8_0.gguf`, TEXTS);
    response.data.forEach((item, i) => {
      expect(item.object).toBe('embedding');
      const vector = item.embedding as number[];
      expect(vector).toHaveLength(llm.info.hyperparameters.dim);
      expect(Math.hypot(...vector)).toBeCloseTo(1, 5);
      vector.forEach((x, j) => expect(Math.abs(x - expected[i][j])).toBeLessThan(1e-5));
    });
    let tokens = 0;
    for (const text of TEXTS) tokens += (await llm.tokenize(text)).length;
    expect(response.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
  });

  it('takes a single string, and encodes base64 as OpenAI does', async () => {
    const llm = await model('qwen3');
    const floats = await llm.embeddings.create({ input: TEXTS[1] });
    expect(floats.data).toHaveLength(1);
    const encoded = await llm.embeddings.create({ input: TEXTS[1], encoding_format: 'base64' });
    const bytes = Buffer.from(encoded.data[0].embedding as string, 'base64');
    const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4));
    expect(decoded).toEqual(floats.data[0].embedding);
  });

  it('pools as asked', async () => {
    const llm = await model('qwen3');
    const mean = await llm.embeddings.create({ input: TEXTS[0], pooling: 'mean' });
    const last = await llm.embeddings.create({ input: TEXTS[0], pooling: 'last' });
    expect(last.data[0].embedding).not.toEqual(mean.data[0].embedding);
    const expected = execFileSync(cliPath, ['embed', '-m', join(FIXTURES, 'qwen3-Q8_0.gguf'), '--pooling', 'last', '-p', TEXTS[0]],
                                  { encoding: 'utf8' }).trim().split(' ').map(Number);
    (last.data[0].embedding as number[]).forEach((x, j) => expect(Math.abs(x - expected[j])).toBeLessThan(1e-5));
  });
});

describe('the single-thread build', () => {
  it('embeds and follows a schema as the threaded build does', async () => {
    const threaded = await model('qwen3');
    const single = await SipLLM.load(`${server.url}/qwen3-Q8_0.gguf`, { build: 'single', cache: false, contextLength: 2048 });
    try {
      expect(single.build).toBe('single');
      const request = { input: ['The cat sat on the mat.', 'a'] };
      expect((await single.embeddings.create(request)).data).toEqual((await threaded.embeddings.create(request)).data);
      const chat = {
        messages: MESSAGES, chat_template: QWEN3_TEMPLATE, ...RANDOM, seed: 9, max_tokens: 1500,
        response_format: { type: 'json_schema' as const, json_schema: { schema: PERSON_SCHEMA } },
      };
      await threaded.reset();
      const expected = await threaded.chat.completions.create(chat);
      const reply = await single.chat.completions.create(chat);
      expect(reply.choices[0].message.content).toBe(expected.choices[0].message.content);
      expect(ajv.validate(PERSON_SCHEMA, JSON.parse(reply.choices[0].message.content as string))).toBe(true);
    } finally {
      await single.unload();
    }
  });
});

describe('bad requests', () => {
  const chat = { messages: MESSAGES, chat_template: QWEN3_TEMPLATE, max_tokens: 4 };
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['an unknown field', { ...chat, temprature: 0.5 }, "field 'temprature' is not a known field"],
    ['a temperature out of range', { ...chat, temperature: 3 }, "field 'temperature' must be from 0 to 2"],
    ['a top_p of 0', { ...chat, top_p: 0 }, "field 'top_p' must be above 0 and at most 1, not 0"],
    ['a negative max_completion_tokens', { ...chat, max_completion_tokens: -1 }, "field 'max_completion_tokens' must be 0 or more, not -1"],
    ['a negative seed', { ...chat, seed: -1 }, "field 'seed' must be a whole number from 0 to 2^53 - 1"],
    ['a fractional max_tokens', { ...chat, max_tokens: 2.5 }, "field 'max_tokens' must be an integer"],
    ['several choices', { ...chat, n: 2 }, "field 'n' does not apply"],
    ['log-probabilities', { ...chat, logprobs: true }, "field 'logprobs' does not apply"],
    ['a bad role', { ...chat, messages: [{ role: 'robot', content: 'x' }] }, "field 'messages[0].role'"],
    ['an image part', { ...chat, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
     "field 'messages[0].content[0]'"],
    ['a bias that is not a number', { ...chat, logit_bias: { 5: '1' } }, "field 'logit_bias.5' must be a number"],
    ['a bias for no token', { ...chat, logit_bias: { 999999: 1 } },
     "field 'logit_bias' names token 999999, which is not a token id of this model"],
    ['an unknown response format', { ...chat, response_format: { type: 'xml' } }, "field 'response_format.type'"],
    ['a tool choice without tools', { ...chat, tool_choice: 'required' }, "field 'tool_choice'"],
    ['a named tool that is not there', { ...chat, tools: [WEATHER_TOOL], tool_choice: { type: 'function', function: { name: 'nope' } } },
     "field 'tool_choice.function.name'"],
    ['a bad tool name', { ...chat, tools: [{ type: 'function', function: { name: 'a b' } }] }, "field 'tools[0].function.name'"],
    ['a schema with a forced call', { ...chat, tools: [WEATHER_TOOL], tool_choice: 'required', response_format: { type: 'json_object' } },
     "field 'response_format'"],
  ];

  it.each(cases)('refuses %s in chat, naming the field', async (_title, request, message) => {
    const llm = await model('qwen3');
    const attempt = llm.chat.completions.create(request as unknown as ChatCompletionCreateParams);
    await expect(attempt).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(attempt).rejects.toThrow(message);
  });

  it('refuses a streamed request out of range before its stream begins', async () => {
    const llm = await model('qwen3');
    const stream = llm.chat.completions.create({ ...chat, stream: true, temperature: 3 });
    await expect(stream).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(stream).rejects.toThrow("field 'temperature' must be from 0 to 2, not 3");
    await expect(llm.completions.create({ prompt: 'x', stream: true, top_k: -1 })).rejects.toThrow("field 'top_k' must be 0 or more, not -1");
  });

  it('refuses what completions and embeddings cannot do, naming the field', async () => {
    const llm = await model('qwen3');
    await expect(llm.completions.create({ prompt: 'x', suffix: 'y' } as never)).rejects.toThrow("field 'suffix' does not apply");
    await expect(llm.completions.create({ prompt: [1, 1e9] })).rejects.toThrow("field 'prompt[1]'");
    await expect(llm.embeddings.create({ input: 'x', dimensions: 64 } as never)).rejects.toThrow("field 'dimensions' does not apply");
    await expect(llm.embeddings.create({ input: ['x', ''] })).rejects.toThrow("field 'input[1]' must not be empty");
    await expect(llm.embeddings.create({ input: [[1, 2]] } as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it('passes on the engine refusing a schema keyword it cannot enforce', async () => {
    const llm = await model('qwen3');
    const attempt = llm.chat.completions.create({
      ...chat, response_format: { type: 'json_schema', json_schema: { schema: { type: 'string', pattern: '^a+$' } } },
    });
    await expect(attempt).rejects.toBeInstanceOf(UnsupportedError);
    await expect(attempt).rejects.toThrow('pattern');
  });

  it('needs a chat template', async () => {
    const llm = await model('qwen3');
    await expect(llm.chat.completions.create({ messages: MESSAGES })).rejects.toBeInstanceOf(UnsupportedError);
  });
});

describe('tool call parsing', () => {
  const tools = [WEATHER_TOOL, TIME_TOOL];

  it('tells the style from the template', () => {
    expect(toolCallStyle(QWEN3_TEMPLATE)).toBe('hermes');
    expect(toolCallStyle(LLAMA_JSON_TEMPLATE)).toBe('llama-json');
  });

  it('reads hermes blocks and leaves the text around them', () => {
    const reply = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}}\n</tool_call>\n' +
                  '<tool_call>{"name": "get_time", "arguments": {"zone": "CET"}}</tool_call>';
    const { content, toolCalls } = parseToolCalls(reply, 'hermes', tools);
    expect(content).toBe('Let me look.');
    expect(toolCalls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['get_weather', { city: 'Oslo', unit: 'celsius' }],
      ['get_time', { zone: 'CET' }],
    ]);
  });

  it("reads Llama 3's JSON calls, with or without <|python_tag|>", () => {
    const one = parseToolCalls('{"name": "get_time", "parameters": {"zone": "UTC"}}', 'llama-json', tools);
    expect(one.toolCalls.map((c) => JSON.parse(c.function.arguments))).toEqual([{ zone: 'UTC' }]);
    expect(one.content).toBe('');
    const two = parseToolCalls('<|python_tag|>{"name": "get_time", "parameters": {"zone": "UTC"}}; ' +
                               '{"name": "get_weather", "parameters": {"city": "Rome", "unit": "celsius"}}', 'llama-json', tools);
    expect(two.toolCalls.map((c) => c.function.name)).toEqual(['get_time', 'get_weather']);
  });

  it('keeps as text what is not a call of a known tool', () => {
    expect(parseToolCalls('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', 'hermes', tools).toolCalls).toEqual([]);
    expect(parseToolCalls('<tool_call>{"name": broken</tool_call>', 'hermes', tools).content).toContain('broken');
    const plain = parseToolCalls('{"answer": 42}', 'llama-json', tools);
    expect(plain).toEqual({ content: '{"answer": 42}', toolCalls: [] });
  });
});

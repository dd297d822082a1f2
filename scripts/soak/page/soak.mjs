// The soak's requests, the same under Node (run.mjs imports this module) and
// in Chromium (index.html does): a seeded random mix against several models
// loaded at once, each request under a deadline. `soak()` returns the
// counts; what only the host can do (read the memory of the process, write a
// report file, print) comes in as `hooks`.
//
// Request i draws everything it does (kind, model, prompt, tokens, delays)
// from a generator seeded by (seed, i), so a report's seed and index name the
// request exactly; the interleaving of concurrent requests is the only thing
// a rerun does not repeat.

// Requests by weight. Every greedy text (greedy, queue, parallel, unload,
// cycle, a request that finished before its abort) and every grammar text is
// compared with the native CLI's, computed by run.mjs for these prompts and
// token counts.
export const KINDS = {
  greedy: 28,    // read to the end, compared
  early: 10,     // a stream left after 0..6 pieces (break)
  abort: 12,     // an AbortSignal before the request, after a random delay, or at a piece
  reset: 5,
  queue: 7,      // 2..4 greedy requests on one model, issued without awaiting: they queue
  parallel: 5,   // greedy requests on 2..4 models at once
  unload: 3,     // unload() while a request runs: it ends first, later ones are refused; then load again
  cycle: 3,      // another instance of a model loaded, used once, unloaded, 1..3 times
  grammar: 8,    // jsonSchemaToGrammar, then a greedy generation under it, compared
  embed: 8,
  chat: 11,      // chat.completions.create with stream: true, left after 0..6 chunks
};
export const TOKENS = [4, 8, 12, 16, 20, 24];  // greedy max tokens; run.mjs computes each
export const GRAMMAR_TOKENS = 16;

// mulberry32, seeded by the run's seed and the request's index.
function generator(seed, index) {
  let a = (Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.imul(index + 1, 0x85ebca6b)) >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  next.int = (lo, hi) => lo + Math.floor(next() * (hi - lo + 1));
  next.pick = (list) => list[Math.floor(next() * list.length)];
  next.weighted = (weights) => {
    let x = next() * Object.values(weights).reduce((a, b) => a + b, 0);
    for (const [key, w] of Object.entries(weights)) if ((x -= w) < 0) return key;
    return Object.keys(weights)[0];
  };
  return next;
}

const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
const errorKind = (error) => error?.kind ?? error?.name ?? 'Error';
const errorText = (error) => `${error?.name ?? 'Error'} (${errorKind(error)}): ${error?.message ?? String(error)}`;

async function collect(pieces, onPiece = () => {}) {
  let text = '';
  for await (const piece of pieces) {
    text += piece;
    onPiece();
  }
  return text;
}

export async function soak(SipLLM, config, hooks) {
  const { seed, deadlineMs, prompts } = config;
  const weights = Object.fromEntries(Object.entries(KINDS).filter(([kind]) => config.kinds.includes(kind)));
  const loadOptions = (spec, extra = {}) => ({
    threads: config.threads, contextLength: config.contextLength, build: config.build,
    cache: spec.cache ? config.cache : false,
    ...(spec.memoryBudget !== undefined ? { memoryBudget: spec.memoryBudget } : {}),
    ...(config.wasmBaseUrl ? { wasmBaseUrl: config.wasmBaseUrl } : {}),
    ...(config.stallTimeoutMs != null ? { stallTimeoutMs: config.stallTimeoutMs } : {}),
    ...extra,
  });

  // A budget that leaves the weights a quarter of the file (at least the
  // largest unit, the least a ring holds) beside the working memory, so that
  // blocks stream for every token, as web/test/families.test.ts sizes it.
  for (const spec of config.models) {
    if (!spec.stream) continue;
    const probe = await SipLLM.load(spec.url, loadOptions({ ...spec, cache: false }, { memoryBudget: 0 }));
    const { workingBytes, units } = probe.stats().loader;
    spec.memoryBudget = workingBytes + Math.max(Math.floor(spec.size / 4), ...units.map((u) => u.memoryBytes));
    await probe.unload();
  }

  // Each model's current instance. A request takes the instance as it finds
  // it; an unload or a stall puts a fresh load in its place.
  const slots = config.models.map((spec) => ({ spec, current: null, ready: null }));
  const reload = (slot, after = Promise.resolve()) => {
    slot.current = null;
    slot.failed = false;
    const ready = after.then(() => SipLLM.load(slot.spec.url, loadOptions(slot.spec))).then((llm) => {
      if (slot.ready === ready) slot.current = llm;
      else llm.unload().catch(() => {});  // replaced while it loaded (after a stall)
      return llm;
    }, (error) => {
      if (slot.ready === ready) slot.failed = true;
      throw error;
    });
    ready.catch(() => {});
    slot.ready = ready;
    return ready;
  };
  for (const slot of slots) await reload(slot);
  // The build that runs ('auto' under Node: the package's pick).
  const build = slots[0].current.build;
  const label = `${config.where} ${build}`;

  const counts = { done: {}, ok: {}, expected: {}, stalls: 0, wrong: 0, unexpected: 0 };
  const failures = [];  // the first stalls, wrong outputs and unexpected errors, for the summary
  const reports = [];
  const memory = [];
  let stop = false;

  async function report(what, ctx, details) {
    const record = {
      what, where: config.where, build, seed, index: ctx.index, kind: ctx.kind, request: ctx.request,
      models: ctx.used.map(({ slot }) => slot.spec.name), atMs: Date.now(), ...details,
      stats: ctx.used.map(({ slot, llm }) => ({ model: slot.spec.name, stats: llm.stats() })),
    };
    if (failures.length < 20) failures.push({ what, index: ctx.index, kind: ctx.kind, request: ctx.request, ...details });
    const name = `${what}-${config.where}-${build}-seed${seed}-request${ctx.index}`;
    const path = await hooks.report(name, record);
    if (!reports.includes(path)) reports.push(path);
    return { name, record };
  }

  // A request's context: its generator, what it used, and its checks.
  function context(index) {
    const r = generator(seed, index);
    const ctx = { index, r, kind: r.weighted(weights), request: {}, used: [], aborted: false, wrongs: [] };
    ctx.use = async (slot) => {
      if (slot.failed) reload(slot);
      const llm = await slot.ready;
      ctx.used.push({ slot, llm });
      return llm;
    };
    ctx.check = (slot, prompt, tokens, got, expected) => {
      if (got !== expected) ctx.wrongs.push({ model: slot.spec.name, prompt, tokens, expected, got });
    };
    return ctx;
  }

  // A prompt and greedy options, drawn before any await (so that requests
  // issued together draw in a fixed order) and written into the report.
  const draw = (ctx, slot, tokens = ctx.r.pick(TOKENS)) => {
    const call = { model: slot.spec.name, prompt: ctx.r.pick(prompts), maxTokens: tokens, seed: ctx.r.int(0, 1e6) };
    (ctx.request.calls ??= []).push(call);
    return { prompt: call.prompt, tokens, options: { maxTokens: tokens, temperature: 0, seed: call.seed } };
  };
  async function greedy(ctx, slot, llm = null) {
    const { prompt, tokens, options } = draw(ctx, slot);
    llm ??= await ctx.use(slot);
    ctx.check(slot, prompt, tokens, await collect(llm.generate(prompt, options)), slot.spec.expected[prompt][tokens]);
  }

  const requests = {
    greedy: (ctx, slot) => greedy(ctx, slot),
    async early(ctx, slot) {
      const { prompt, options } = draw(ctx, slot, 24);
      ctx.request.leaveAfter = ctx.r.int(0, 6);
      options.temperature = ctx.request.temperature = ctx.r() < 0.5 ? 0 : 0.9;
      let pieces = 0;
      for await (const _ of (await ctx.use(slot)).generate(prompt, options)) if (pieces++ >= ctx.request.leaveAfter) break;
    },
    async abort(ctx, slot) {
      const { prompt, options } = draw(ctx, slot, 24);
      const llm = await ctx.use(slot);
      const controller = new AbortController();
      const how = ctx.r.pick(['before', 'delay', 'piece']);
      // Mostly within the load of the weights and the prefill, some within
      // decode, a few after the end.
      const delayMs = ctx.r() * ctx.r() * 150;
      const atPiece = ctx.r.int(0, 8);
      ctx.request.abort = how === 'delay' ? `after ${delayMs.toFixed(1)} ms` : how === 'piece' ? `at piece ${atPiece}` : how;
      ctx.aborted = true;
      if (how === 'before') controller.abort();
      const timer = how === 'delay' ? setTimeout(() => controller.abort(), delayMs) : null;
      let pieces = 0;
      try {
        const text = await collect(llm.generate(prompt, { ...options, signal: controller.signal }), () => {
          if (how === 'piece' && pieces++ === atPiece) controller.abort();
        });
        // Finished before the abort came: the text must be whole.
        ctx.check(slot, prompt, 24, text, slot.spec.expected[prompt][24]);
      } finally {
        clearTimeout(timer);
      }
    },
    reset: async (ctx, slot) => (await ctx.use(slot)).reset(),
    async queue(ctx, slot) {
      const llm = await ctx.use(slot);
      const n = ctx.r.int(2, 4);
      await Promise.all(Array.from({ length: n }, () => greedy(ctx, slot, llm)));
    },
    async parallel(ctx) {
      const chosen = [...slots].sort(() => ctx.r() - 0.5).slice(0, ctx.r.int(2, slots.length));
      ctx.request.models = chosen.map((s) => s.spec.name);
      await Promise.all(chosen.map((s) => greedy(ctx, s)));
    },
    async unload(ctx, slot) {
      const { prompt, tokens, options } = draw(ctx, slot);
      const llm = await ctx.use(slot);
      const running = collect(llm.generate(prompt, options));
      await sleep(ctx.r() * 20);
      const unloading = llm.unload();
      reload(slot, unloading);  // requests from now on wait for the new instance
      // The running request ends first, whole; one made after unload() is refused.
      let refused = null;
      await llm.reset().catch((error) => (refused = error));
      if (errorKind(refused) !== 'invalid-argument') throw refused ?? new Error('a request after unload() was accepted');
      ctx.check(slot, prompt, tokens, await running, slot.spec.expected[prompt][tokens]);
      await unloading;
      await slot.ready;
    },
    async cycle(ctx, slot) {
      ctx.request.loads = ctx.r.int(1, 3);
      for (let k = 0; k < ctx.request.loads; ++k) {
        const llm = await SipLLM.load(slot.spec.url, loadOptions(slot.spec));
        ctx.used.push({ slot, llm });
        try {
          await greedy(ctx, slot, llm);
        } finally {
          await llm.unload();
        }
      }
    },
    async grammar(ctx, slot) {
      const { prompt, options } = draw(ctx, slot, GRAMMAR_TOKENS);
      const llm = await ctx.use(slot);
      const grammar = await llm.jsonSchemaToGrammar(config.schema);
      const text = await collect(llm.generate(prompt, { ...options, grammar }));
      ctx.check(slot, prompt, `${GRAMMAR_TOKENS} under the schema`, text, slot.spec.grammarExpected[prompt]);
    },
    async embed(ctx, slot) {
      const llm = await ctx.use(slot);
      const input = [ctx.r.pick(prompts), ctx.r.pick(prompts)];
      const { data } = await llm.embeddings.create({ input });
      const dim = llm.info.hyperparameters.dim;
      const bad = data.length !== 2 || data.some(({ embedding: e }) => e.length !== dim ||
        Math.abs(Math.hypot(...e) - 1) > 1e-3);
      if (bad) ctx.wrongs.push({ model: slot.spec.name, input, expected: `2 unit vectors of ${dim}`, got: data.map((d) => d.embedding.length) });
    },
    async chat(ctx, slot) {
      const { prompt, tokens, options } = draw(ctx, slot);
      ctx.request.leaveAfter = ctx.r.int(0, 6);
      ctx.request.temperature = ctx.r() < 0.5 ? 0 : 0.9;
      const stream = await (await ctx.use(slot)).chat.completions.create({
        messages: [{ role: 'user', content: prompt }], chat_template: config.chatTemplate, stream: true,
        max_tokens: tokens, temperature: ctx.request.temperature, seed: options.seed,
      });
      let chunks = 0;
      for await (const _ of stream) if (chunks++ >= ctx.request.leaveAfter) break;
    },
  };

  // One request under its deadline, then its accounting.
  async function one(index) {
    const ctx = context(index);
    const slot = ctx.r.pick(slots);
    ctx.request = { model: slot.spec.name, ...ctx.request };
    const startMs = performance.now();
    const running = requests[ctx.kind](ctx, slot);
    let timer;
    const outcome = await Promise.race([
      running.then(() => ({ ok: true }), (error) => ({ error })),
      new Promise((done) => (timer = setTimeout(() => done({ stalled: true }), deadlineMs))),
    ]);
    clearTimeout(timer);
    counts.done[ctx.kind] = (counts.done[ctx.kind] ?? 0) + 1;
    if (ctx.wrongs.length > 0) {
      counts.wrong += ctx.wrongs.length;
      await report('wrong', ctx, { wrong: ctx.wrongs });
    }
    const kind = outcome.error !== undefined ? errorKind(outcome.error) : null;
    if (outcome.stalled || kind === 'stalled') {
      counts.stalls += 1;
      const late = outcome.error ?? null;
      const stall = await report('stall', ctx, {
        deadlineMs, elapsedMs: performance.now() - startMs,
        error: late && errorText(late), dump: late?.dump ?? null,
        // What each instance's worker and engine are doing now (the package's
        // own stall dump, read live), where the package has it.
        liveDumps: ctx.used.map(({ slot: s, llm }) => ({ model: s.spec.name, dump: llm.stallDump?.() ?? null })),
      });
      // Whatever the request ends with later, and the engine's dump if its
      // error carries one, go into the same report.
      if (outcome.stalled) {
        running.then(() => ({ settled: 'resolved' }), (error) => ({ settled: errorText(error), dump: error?.dump ?? null }))
          .then((end) => hooks.report(stall.name, { ...stall.record, ...end, settledAfterMs: performance.now() - startMs }))
          .catch(() => {});  // the run may be over, and the page closed
      }
      // Its models get fresh instances (so does one whose load it waited
      // for); the stuck ones are left to unload when they can.
      for (const s of new Set([slot, ...ctx.used.map((u) => u.slot)])) {
        const llm = s.current;
        if (llm !== null && !ctx.used.some((u) => u.llm === llm)) continue;
        llm?.unload().catch(() => {});
        reload(s);
      }
      if (config.stopOnStall) stop = true;
    } else if (outcome.error !== undefined) {
      const error = outcome.error;
      const expected = (kind === 'aborted' && ctx.aborted) ||
        (kind === 'invalid-argument' && /unloaded/.test(error.message));
      if (expected) {
        counts.expected[kind] = (counts.expected[kind] ?? 0) + 1;
      } else {
        counts.unexpected += 1;
        await report('error', ctx, { error: errorText(error), stack: error?.stack ?? null });
      }
    } else if (ctx.wrongs.length === 0) {
      counts.ok[ctx.kind] = (counts.ok[ctx.kind] ?? 0) + 1;
    }
    memory.push(await hooks.memory());
  }

  const startMs = performance.now();
  const endMs = config.minutes ? startMs + config.minutes * 60_000 : Infinity;
  const line = () => {
    const n = memory.length;
    const s = (performance.now() - startMs) / 1000;
    return `[${label}] ${(s / 60).toFixed(1)} min, ${n} requests (${(n / s).toFixed(2)}/s): ` +
      `${counts.stalls} stalls, ${counts.wrong} wrong, ${counts.unexpected} unexpected errors, ` +
      `memory ${n ? (memory[n - 1] / 1e6).toFixed(0) : '–'} MB`;
  };
  const ticker = setInterval(() => hooks.progress(line()), 60_000);
  let next = 0;
  const worker = async () => {
    while (!stop && performance.now() < endMs && (config.requests === null || next < config.requests)) await one(next++);
  };
  try {
    await Promise.all(Array.from({ length: config.concurrency }, worker));
  } finally {
    clearInterval(ticker);
  }
  const seconds = (performance.now() - startMs) / 1000;
  hooks.progress(line());

  // What the last instances say of their cache and their reads: the cache
  // in use, the budget streaming.
  const models = slots.map(({ spec, current }) => {
    const stats = current?.stats();
    return { name: spec.name, cache: stats?.cache ?? null, memoryBudget: spec.memoryBudget ?? null,
             source: stats?.source ?? null, heapBytes: stats?.heapBytes ?? null };
  });
  // A stuck instance never unloads: give up on it after a while.
  await Promise.all(slots.map((slot) => Promise.race([slot.ready.then((llm) => llm.unload()).catch(() => {}), sleep(15_000)])));

  // Memory over the first and the last 1000 requests, or tenths of a shorter run.
  const window = Math.max(1, Math.min(1000, Math.ceil(memory.length / 10)));
  const mean = (list) => list.reduce((a, b) => a + b, 0) / Math.max(1, list.length);
  const stretches = Math.min(20, memory.length);
  return {
    where: config.where, build, seed, requests: memory.length, seconds,
    perSecond: memory.length / seconds, ...counts, failures, reports,
    models,
    memory: { what: config.memoryWhat, window, firstMeanBytes: mean(memory.slice(0, window)),
              lastMeanBytes: mean(memory.slice(-window)), peakBytes: Math.max(...memory),
              // The means of twenty equal stretches of the run, in order: the shape of the curve.
              trendBytes: Array.from({ length: stretches }, (_, k) => Math.round(mean(memory.slice(
                Math.floor(k * memory.length / stretches), Math.floor((k + 1) * memory.length / stretches))))) },
  };
}

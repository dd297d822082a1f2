// What a stuck engine worker was doing, read from outside it. The engine
// keeps its state in words of its WebAssembly memory (SessionProbe in
// wasm-bindings/session.h, EngineProbe in sipllm/engine_probe.h), and the
// worker keeps its own in a small shared array (WorkerWords below); both are
// SharedArrayBuffers, so they can be read while every thread of the worker
// is blocked. In a browser the page does not hold the WebAssembly memory
// itself: a buffer shared with a thread is freed only when that thread's
// garbage collector lets go of it, and the page's kept a whole engine heap
// alive long after its unload (a 683 MB heap: the tab at 911-1,206 MB after
// the unload, 284 MB without it). A small worker of the page's holds it and
// copies the probe's words into a mirror (page/probe-mirror.ts); it ends
// with the engine worker. Without shared memory (the single-thread build
// on a page that is not cross-origin isolated) only the page's own view is
// left: which requests were waiting, and since when.

// The worker's words, in the Int32Array the page gives it at 'init' (element
// 0 is the cancel target, see bridge/protocol.ts).
export const WorkerWords = {
  cancelTarget: 0,
  request: 1,      // id of the request the worker is running, 0 when none
  requestType: 2,  // its type, as an index into REQUEST_TYPES
  queued: 3,       // requests received and not yet answered
  tick: 4,         // when the worker's thread last ran its job poll (ms since the epoch, mod 2^31)
  jobsSeen: 5,     // the engine's "done" events the worker has handled
  count: 6,
} as const;

// Request types by index, for WorkerWords.requestType.
export const REQUEST_TYPES = [
  'none', 'init', 'load', 'generate', 'embed', 'grammar', 'tokenize', 'detokenize', 'reset', 'stats', 'unload',
  'listCache', 'deleteCache',
] as const;

// Offsets in bytes, as static_asserts in session.cpp fix them.
const SESSION = { job: 0, jobState: 4, jobCancelled: 8, sessionId: 12, httpInFlight: 16, httpArrivals: 20, jobsDone: 24, engine: 64 };
const ENGINE = { beats: 0, cancelled: 4, waitingForUnit: 8, unitsLoading: 12, poolThreads: 16, pool: 64, poolStride: 64, maxPool: 16 };
// The probe's extent from its address, and the mirror's word that says a
// probe is mirrored (probe-mirror.ts).
export const PROBE_WORDS = (SESSION.engine + ENGINE.pool + ENGINE.poolStride * ENGINE.maxPool) / 4;
export const MIRROR_PRESENT = PROBE_WORDS;
export const MIRROR_WORDS = PROBE_WORDS + 1;
const JOBS = ['none', 'open', 'generate', 'embed', 'warm-up', 'close'];
const JOB_STATES = ['idle', 'queued', 'running', 'held'];
const POOL_STATES = ['absent', 'idle', 'spinning', 'parked', 'working', 'waiting-for-workers'];

export interface EngineProbeView {
  sessionId: number;
  job: string;              // the session's job: open, generate, embed, warm-up, close, none
  jobState: string;         // queued (the job thread has not started it), running, held, idle
  jobCancelled: boolean;    // the page cancelled it
  engineCancelled: boolean; // the engine was told to stop
  beats: number;            // the engine's progress count
  waitingForUnit: number;   // the unit the compute thread waits for, -1 when none
  unitsLoading: number;     // loads under way in the loader's threads
  httpInFlight: number;     // range requests awaiting their answer
  httpArrivals: number;     // pieces of response bodies arrived
  jobsDone: number;         // jobs ended, each with a "done" event for the worker
  poolThreads: string[];    // per compute thread: idle, working, spinning, parked, waiting-for-workers
}

export interface StallDump {
  stalledForMs: number;     // since the worker last showed progress
  pending: { id: number; type: string; waitingMs: number }[];  // the page's requests without an answer
  // null: no shared memory. sinceTickMs: since the worker's thread last ran
  // its job poll (every 100 ms while a job runs): a large value while a job
  // runs means the thread itself is blocked. jobsSeen below the engine's
  // jobsDone: a "done" event the worker never handled.
  worker: { request: number; requestType: string; queued: number; sinceTickMs: number; jobsSeen: number } | null;
  engine: EngineProbeView | null;  // null: no shared memory, or no model open
}

export function readEngineProbe(memory: SharedArrayBuffer, address: number): EngineProbeView {
  const view = new Int32Array(memory);
  const word = (offset: number) => Atomics.load(view, (address + offset) >> 2);
  const engine = (offset: number) => word(SESSION.engine + offset);
  const threads = Math.min(engine(ENGINE.poolThreads), ENGINE.maxPool);
  const pool: string[] = [];
  for (let i = 0; i < threads; i++) {
    pool.push(POOL_STATES[engine(ENGINE.pool + i * ENGINE.poolStride)] ?? 'unknown');
  }
  return {
    sessionId: word(SESSION.sessionId),
    job: JOBS[word(SESSION.job)] ?? 'unknown',
    jobState: JOB_STATES[word(SESSION.jobState)] ?? 'unknown',
    jobCancelled: word(SESSION.jobCancelled) !== 0,
    engineCancelled: engine(ENGINE.cancelled) !== 0,
    beats: engine(ENGINE.beats) >>> 0,
    waitingForUnit: engine(ENGINE.waitingForUnit),
    unitsLoading: engine(ENGINE.unitsLoading),
    httpInFlight: word(SESSION.httpInFlight),
    httpArrivals: word(SESSION.httpArrivals),
    jobsDone: word(SESSION.jobsDone),
    poolThreads: pool,
  };
}

const TICK_MODULUS = 2 ** 31;

// The worker's clock word: ms since the epoch, kept in an Int32.
export function tickNow(): number {
  return Math.floor(performance.timeOrigin + performance.now()) % TICK_MODULUS;
}

export function readWorkerWords(words: Int32Array): StallDump['worker'] {
  const tick = Atomics.load(words, WorkerWords.tick);
  return {
    request: Atomics.load(words, WorkerWords.request),
    requestType: REQUEST_TYPES[Atomics.load(words, WorkerWords.requestType)] ?? 'unknown',
    queued: Atomics.load(words, WorkerWords.queued),
    sinceTickMs: tick === 0 ? -1 : (tickNow() - tick + TICK_MODULUS) % TICK_MODULUS,
    jobsSeen: Atomics.load(words, WorkerWords.jobsSeen),
  };
}

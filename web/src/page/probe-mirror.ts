// The page's copy of the engine's probe (probe.ts): this worker holds the
// engine's WebAssembly memory, which the page must not (its collector would
// keep the whole heap after the unload), and copies the probe's words into
// the page's mirror every COPY_MS. The engine worker tells it where the
// probe is, over the port the page gave both.

import { MIRROR_PRESENT, PROBE_WORDS } from '../probe.js';

// A stall is declared after seconds of silence: words this old say what the
// engine was doing.
const COPY_MS = 50;

export interface ProbeMirrorStart {
  mirror: SharedArrayBuffer;  // Int32Array of MIRROR_WORDS
  port: MessagePort;          // the engine worker sends { memory, address } on it
}

self.onmessage = (event: MessageEvent<ProbeMirrorStart>) => {
  const mirror = new Int32Array(event.data.mirror);
  let source: Int32Array | null = null;
  let first = 0;
  const copy = () => {
    if (source === null) return;
    for (let i = 0; i < PROBE_WORDS; i++) Atomics.store(mirror, i, Atomics.load(source, first + i));
  };
  event.data.port.onmessage = (found: MessageEvent<{ memory: SharedArrayBuffer; address: number }>) => {
    source = new Int32Array(found.data.memory);
    first = found.data.address >> 2;
    copy();
    Atomics.store(mirror, MIRROR_PRESENT, 1);
  };
  setInterval(copy, COPY_MS);
};

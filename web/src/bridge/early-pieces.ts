// The first bytes of a model, fetched before the engine's WebAssembly module
// is ready: the GGUF header (and the file past it until the tensor table has
// been read), then the transformer blocks in file order (a mixture of
// experts' expert tensors left to the engine, which reads only those its
// router chooses). Compiling the module and starting its threads takes half
// a second to more than a second; without this the link idles through it,
// and every byte, the first token's last one included, arrives that much
// later.
//
// Two halves, which share only what this file declares: the messages and
// the words of shared memory between them. EarlyFetch (page/early-fetch.ts)
// runs on the thread that called load() (the page, or Node's main thread):
// while the module starts, the engine worker's own thread is busy for most
// of a second at a time (compiling, starting one Web Worker per engine
// thread), and a request it would start, or a body it would read, waits
// that long; the caller's thread is free. It writes each piece into a
// SharedArrayBuffer that the worker sees as it fills. EarlyRanges
// (worker/early-ranges.ts) runs in the worker: each engine request (startRange) asks its
// serve() first, and a request that pieces hold a part of is answered from
// them as their bytes arrive; the other parts are fetched beside. A request
// for block bytes that no piece holds yet waits for one: they come in order.
// The engine knows nothing of either.
//
// The caller leads until the blocks end, or until the engine asks for bytes
// past every piece outside the blocks (or before the first answer came).
// Anything unexpected (a status other than 206, another file size or
// validator, a failed or stalled piece) drops the piece and ends the
// fetching ahead: the engine's own requests meet the server as it is. With
// a persistent cache, the fetch starts only once the worker has found no
// model in the store (worker/worker.ts).

// What the fetching half tells the serving half (worker messages).
export interface EarlyFile {
  type: 'early-file';
  total: number;
  etag: string;
  lastModified: string;
}
export interface EarlyBlocks {
  type: 'early-blocks';
  // The transformer blocks' bytes fetched here, in order (blockRanges: a
  // mixture of experts' expert tensors left out), past the header's pieces.
  ranges: [number, number][];
}
export interface EarlyPiece {
  type: 'early-piece';
  offset: number;
  length: number;
  bytes: SharedArrayBuffer;
  state: SharedArrayBuffer;  // Int32Array of PIECE_WORDS: ARRIVED, STATUS, TAKEN
  header: boolean;           // read before the tensor table was (the header, the embeddings past it)
}

// The shared control words (Int32Array over `control`).
export const LEADING = 0;  // NOT_LEADING, IS_LEADING, or OFFERING while a piece is being offered
export const DISPOSED = 1; // 1 once the worker has no use for any piece
export const CACHE = 2;    // with a persistent cache: 0 unknown yet, 1 holds no model (fetch), 2 holds one
export const OFFERED = 3;  // pieces offered to the worker (each with a message on its way)
export const WAITING = 4;  // the engine's requests waiting for block pieces not offered yet
export const CONTROL_WORDS = 5;
export const NOT_LEADING = 0;
export const IS_LEADING = 1;
export const OFFERING = 2;
// Each piece's shared words.
export const ARRIVED = 0;  // bytes [0, ARRIVED) are in
export const STATUS = 1;   // ARRIVING, DONE or FAILED (either side may fail it)
export const TAKEN = 2;    // bytes handed to the engine
export const PIECE_WORDS = 3;
export const ARRIVING = 0;
export const DONE = 1;
export const FAILED = 2;
// How often a side waiting on the other looks at the shared words.
export const POLL_MS = 2;
export const CONTENT_RANGE = /^bytes (\d+)-(\d+)\/(\d+)$/;
export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

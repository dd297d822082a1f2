// The engine's I/O in the WebAssembly build, implemented by calling JavaScript
// (host.js): everything the engine reads or stores goes through one of these.
//
//   transport  one blocking range GET. Threaded build: made with fetch() on
//              the main runtime thread and streamed chunk by chunk into the
//              heap, while the calling thread sleeps on Atomics.wait, so that
//              several requests are in flight at once and no response buffer
//              is left for a busy thread's garbage collector. Single-thread
//              build: a synchronous XMLHttpRequest in a browser worker, a
//              fetch on a helper thread (the caller waits with Atomics.wait)
//              under Node.
//   store      the cache tier: OPFS files (sync access handles) in a browser,
//              a directory under Node. The store object lives in the main
//              runtime thread's JavaScript (OPFS handles cannot be opened
//              synchronously, so they are opened there beforehand); calls
//              from other threads are proxied to it and wait for the answer.
//   bytes      a model the caller handed over as bytes: they stay in a
//              JavaScript buffer outside the WebAssembly heap and are copied
//              in unit by unit, like any other source.
//
// The main runtime thread never runs engine work (see session.h), so proxied
// calls are answered at once rather than when the computation next waits.
// It does read the engine's state (stats, the units, a cancel). While it
// waits for a lock it runs the queued calls (Emscripten's mutex wait), but
// not from inside one: so nothing that runs as a queued call may take an
// engine lock (the events are handled after the queued call, see host.js),
// and no engine thread should hold a lock the main runtime thread takes
// while it waits for one of these calls (PageCache's index write did;
// page_cache_test.cpp ItsStateCanBeReadWhileAStoreCallWaits).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "sipllm/engine_probe.h"
#include "sipllm/http_source.h"
#include "sipllm/weight_source.h"

namespace sipllm::wasm {

// What the transport has under way, for a stalled worker's report (see
// SessionProbe in session.h); arrivals also beat the engine's probe.
struct TransportProbe {
  std::atomic<int32_t> in_flight{0};  // range requests awaiting their answer
  std::atomic<int32_t> arrivals{0};   // pieces of bodies arrived
};

// The read timeout each call is given is applied in JavaScript: no byte for
// that long aborts the request (reported as HttpFailure::kStalled, and
// retried by the HTTP source like a dropped connection). The single-thread
// build's synchronous XMLHttpRequest cannot see bytes arrive: it is given the
// read timeout plus the range's time at 64 kB/s for the whole transfer.
// The probes (when given) must outlive the transport.
std::shared_ptr<HttpTransport> make_js_transport(TransportProbe* probe = nullptr, EngineProbe* beats = nullptr);

// The store registered in JavaScript under `store_id` (see host.js).
std::shared_ptr<CacheStore> make_js_store(int store_id);

// The buffer registered in JavaScript under `bytes_id`, of `size` bytes.
std::unique_ptr<WeightSource> make_js_bytes_source(int bytes_id, uint64_t size, std::string name);

// Events for the JavaScript side of session `session_id`, delivered on the
// main runtime thread: queued when sent from another thread, run at once
// when sent from it.
void post_tokens_ready(int session_id);
void post_job_done(int session_id);
void post_closed(int session_id);
void post_alive(int session_id);
void post_progress(int session_id, uint64_t loaded, uint64_t fetched, uint64_t from_cache,
                   uint64_t total, bool header);

}  // namespace sipllm::wasm

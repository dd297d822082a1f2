// Words the engine keeps current while it works, for a watchdog elsewhere:
// whether the engine is still making progress and, when it is not, what each
// of its threads is waiting on. The caller owns the probe (EngineOptions::
// probe) and reads it from any thread at any time; in the WebAssembly build
// the page reads it straight from the shared memory, by offset, so that it
// can be read while every thread of the engine's worker is stuck.
//
// Plain words: writing them costs the engine a relaxed store or increment
// where its state changes (a loop of the thread pool, a unit asked for or
// arrived, a token), nothing else.
#pragma once

#include <atomic>
#include <cstdint>

namespace sipllm {

struct EngineProbe {
  // What a compute thread of the pool is doing.
  enum PoolThread : int32_t {
    kAbsent = 0,             // no such thread
    kIdle = 1,               // the calling thread, between loops
    kSpinning = 2,           // a worker, polling for the next loop
    kParked = 3,             // a worker, asleep until the next loop
    kWorking = 4,            // running chunks of a loop
    kWaitingForWorkers = 5,  // the calling thread, its chunks done, waits for the others'
  };
  static constexpr int kMaxPoolThreads = 16;

  // Bumped by every piece of work done: a loop of the thread pool, a unit
  // loaded, a token. A count that stops moving while a request runs is a
  // stall.
  std::atomic<uint32_t> beats{0};
  std::atomic<int32_t> cancelled{0};          // the running call was told to stop
  std::atomic<int32_t> waiting_for_unit{-1};  // the unit the compute thread waits for, or -1
  std::atomic<int32_t> units_loading{0};      // loads the loader's threads have under way
  std::atomic<int32_t> pool_threads{0};       // threads of the pool (the caller is thread 0)
  // Per pool thread, a PoolThread, each word on its own cache line: the
  // threads write theirs at every loop.
  struct alignas(64) Word {
    std::atomic<int32_t> value{kAbsent};
  };
  Word pool[kMaxPoolThreads];

  // Called now and then (about every 16 beats) by the thread that beats, when
  // set: how a host that runs the engine on its only thread (the
  // single-thread WebAssembly build) hears from a busy engine. It must be
  // cheap (look at a clock) and may be called from any engine thread.
  void (*pulse)(void* context) = nullptr;
  void* pulse_context = nullptr;

  void beat() {
    const uint32_t n = beats.fetch_add(1, std::memory_order_relaxed) + 1;
    if (pulse != nullptr && (n & 15) == 0) pulse(pulse_context);
  }
  void set_pool_thread(int index, PoolThread state) {
    if (index < kMaxPoolThreads) pool[index].value.store(state, std::memory_order_relaxed);
  }
};

}  // namespace sipllm

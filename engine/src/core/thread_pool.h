// A fixed set of compute workers that split loops between them.
//
// The calling thread takes part in every loop, so a pool of N threads starts
// N - 1 workers. A loop is cut into chunks of `grain` indices that threads
// claim one by one, so a thread slowed by something else on its core (the
// page, the prefetch thread, another process) does not hold the others back.
// Which thread runs a chunk must therefore never change a result: callers
// compute each output from its inputs alone.
//
// Between loops workers spin for a short while (a token makes hundreds of
// loops a few microseconds apart, and waking a sleeping thread costs tens of
// microseconds), then park on a condition variable, so an idle engine uses no
// CPU. A loop with a single chunk runs on the calling thread and wakes no one.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "sipllm/engine_probe.h"
#include "sipllm/stats.h"

namespace sipllm {

class ThreadPool {
 public:
  using RangeFn = std::function<void(size_t begin, size_t end, int thread_index)>;

  // threads <= 0 means one per hardware thread. The probe, when given, is
  // told of every loop and of what each thread is doing.
  explicit ThreadPool(int threads, EngineProbe* probe = nullptr);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, n) and
  // returns when all are done. Ranges are [k * grain, min(n, (k + 1) * grain)).
  // thread_index is in [0, size()) and unique among concurrent calls (0 is
  // the caller), for per-thread scratch. Not reentrant: fn must not call
  // parallel_for on the same pool.
  void parallel_for(size_t n, size_t grain, const RangeFn& fn);

  // Workers currently parked (asleep on the condition variable).
  int parked_workers() const { return parked_.load(); }

  // The calling thread's time in loops of more than one chunk since the pool
  // was made (ParallelTime in sipllm/stats.h says what it is for).
  ParallelTime time() const { return time_; }

 private:
  void worker_loop(int index);
  // Claims and runs chunks of the current loop until none are left.
  void run_chunks(int index);
  // Waits for a loop newer than `seen`; false when the pool is stopping.
  bool wait_for_loop(int index, uint64_t seen, uint64_t* loop);
  using Clock = std::chrono::steady_clock;
  void add_loop_time(Clock::time_point start, Clock::time_point own_chunks_done, Clock::time_point end);

  void show(int index, EngineProbe::PoolThread state) {
    if (probe_ != nullptr) probe_->set_pool_thread(index, state);
  }

  EngineProbe* const probe_;
  std::vector<std::thread> workers_;
  ParallelTime time_;  // written by the calling thread alone

  // The current loop. Written by the caller before it opens the loop (a
  // release store of open_loop_), read by workers that joined it.
  const RangeFn* fn_ = nullptr;
  size_t size_ = 0;
  size_t grain_ = 1;
  size_t chunks_ = 0;
  // Each on its own cache line: claiming chunks must not slow down the
  // threads polling for the next loop or counting who has joined.
  alignas(64) std::atomic<size_t> next_chunk_{0};
  alignas(64) std::atomic<uint64_t> loops_{0};  // id of the latest loop (workers wait for it to change)
  std::atomic<uint64_t> open_loop_{0};          // id of the loop workers may join, 0 when closed
  alignas(64) std::atomic<int> joined_{0};      // workers inside the current loop
  std::atomic<int> parked_{0};
  std::atomic<bool> caller_waiting_{false};     // the caller sleeps on finished_
  std::atomic<bool> stopping_{false};

  std::mutex park_mutex_;
  std::condition_variable park_;      // parked workers wait here for a loop
  std::condition_variable finished_;  // the caller waits here for the last worker
};

}  // namespace sipllm

// A fixed set of compute workers that split loops between them.
//
// The calling thread takes part in every loop, so a pool of N threads starts
// N - 1 workers. Idle workers sleep on a condition variable rather than spin:
// the engine shares its cores with the page, the prefetch thread and the
// network. Work is split into contiguous ranges that depend only on the loop
// size and the thread count, never on timing.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sipllm {

class ThreadPool {
 public:
  // threads <= 0 means one per hardware thread.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, n) and
  // returns when all are done. Ranges are multiples of `grain` (but the last).
  // Not reentrant: fn must not call parallel_for on the same pool.
  void parallel_for(size_t n, size_t grain,
                    const std::function<void(size_t, size_t, int)>& fn);

 private:
  void worker_loop(int index);
  void run_share(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_size_ = 0;
  size_t job_grain_ = 1;
  int active_workers_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
};

}  // namespace sipllm

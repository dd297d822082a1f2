// A few threads that make blocking range requests side by side, so that one
// large read has several requests in flight. Owned by one HTTP source; its
// threads live exactly as long as it does. A source that makes one request at
// a time (the single-thread WebAssembly build) has no pool at all.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sipllm {

class RequestPool {
 public:
  explicit RequestPool(int workers);
  ~RequestPool();
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // Runs every task and returns when all have finished; the calling thread
  // runs tasks too. Several threads may call this at once. When tasks throw,
  // the others still run to the end and the first exception is rethrown.
  void run_all(const std::vector<std::function<void()>>& tasks);

  // Queues a task to run in the background (readahead); it must not throw.
  // Tasks still queued when the pool is destroyed never run.
  void post(std::function<void()> task);

 private:
  struct Batch {
    size_t unfinished = 0;
    std::exception_ptr error;
  };
  struct Job {
    const std::function<void()>* task;  // a task of run_all's batch, or
    Batch* batch;
    std::function<void()> posted;       // a posted task (batch is null)
  };

  void worker_loop();
  void run_job(const Job& job, std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable work_;  // a job was queued, or the pool is stopping
  std::condition_variable done_;  // a job finished
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace sipllm

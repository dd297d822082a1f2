#include "thread_pool.h"

#include <algorithm>

namespace sipllm {

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_share(int index) {
  // Thread `index` of `size()` takes the index-th of size() near-equal runs
  // of whole grains.
  const size_t grains = (job_size_ + job_grain_ - 1) / job_grain_;
  const size_t threads = static_cast<size_t>(size());
  const size_t first = grains * static_cast<size_t>(index) / threads;
  const size_t last = grains * static_cast<size_t>(index + 1) / threads;
  const size_t begin = first * job_grain_;
  const size_t end = std::min(job_size_, last * job_grain_);
  if (begin < end) (*job_)(begin, end, index);
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_size_ = n;
    job_grain_ = grain;
    active_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_share(0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return active_workers_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    run_share(index);
    std::lock_guard<std::mutex> lock(mutex_);
    if (--active_workers_ == 0) done_.notify_one();
  }
}

}  // namespace sipllm

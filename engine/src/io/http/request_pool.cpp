#include "io/http/request_pool.h"

#include <algorithm>

namespace sipllm {

RequestPool::RequestPool(int workers) {
  for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { worker_loop(); });
}

RequestPool::~RequestPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void RequestPool::run_job(const Job& job, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  if (job.batch == nullptr) {
    job.posted();
    lock.lock();
    return;
  }
  std::exception_ptr error;
  try {
    (*job.task)();
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  if (error && !job.batch->error) job.batch->error = error;
  --job.batch->unfinished;
  done_.notify_all();
}

void RequestPool::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;  // no batch is waiting: the owner is being destroyed
    const Job job = std::move(queue_.front());
    queue_.pop_front();
    run_job(job, lock);
  }
}

void RequestPool::run_all(const std::vector<std::function<void()>>& tasks) {
  Batch batch;
  std::unique_lock<std::mutex> lock(mutex_);
  batch.unfinished = tasks.size();
  for (const auto& task : tasks) queue_.push_back({&task, &batch, {}});
  work_.notify_all();
  // Take part: run this batch's jobs that no worker has picked up yet.
  for (;;) {
    auto mine = std::find_if(queue_.begin(), queue_.end(),
                             [&](const Job& job) { return job.batch == &batch; });
    if (mine == queue_.end()) break;
    const Job job = *mine;
    queue_.erase(mine);
    run_job(job, lock);
  }
  done_.wait(lock, [&] { return batch.unfinished == 0; });
  if (batch.error) std::rethrow_exception(batch.error);
}

void RequestPool::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({nullptr, nullptr, std::move(task)});
  }
  work_.notify_one();
}

}  // namespace sipllm

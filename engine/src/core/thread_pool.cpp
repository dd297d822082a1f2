#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace sipllm {
namespace {

// How long an idle worker keeps spinning before it parks: longer than the
// gaps between the loops of one token, far shorter than a human-visible idle.
// After the first part it yields between polls, so that on a busy machine
// the spinning costs other processes (and its own next time slice) little.
constexpr auto kSpinBeforeParking = std::chrono::microseconds(300);
constexpr auto kSpinBeforeYielding = std::chrono::microseconds(30);
// How long a caller that has finished its chunks spins for the workers'
// last ones before it sleeps: a chunk takes a few microseconds unless its
// worker was preempted.
constexpr auto kStragglerSpin = std::chrono::microseconds(50);

// A hint to the core that this is a spin-wait (frees resources for its
// sibling hyper-thread); nothing where the target has no such instruction.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads, EngineProbe* probe) : probe_(probe) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (probe_ != nullptr) probe_->pool_threads.store(threads);
  show(0, EngineProbe::kIdle);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> lock(park_mutex_);
  }
  park_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunks(int index) {
  for (;;) {
    const size_t chunk = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= chunks_) return;
    const size_t begin = chunk * grain_;
    (*fn_)(begin, std::min(size_, begin + grain_), index);
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain, const RangeFn& fn) {
  if (probe_ != nullptr) probe_->beat();
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  const size_t chunks = (n + grain - 1) / grain;
  if (chunks == 1) {
    fn(0, n, 0);
    return;
  }
  const auto loop_start = std::chrono::steady_clock::now();
  if (workers_.empty()) {
    fn(0, n, 0);
    const auto end = std::chrono::steady_clock::now();
    add_loop_time(loop_start, end, end);
    return;
  }
  fn_ = &fn;
  size_ = n;
  grain_ = grain;
  chunks_ = chunks;
  next_chunk_.store(0, std::memory_order_relaxed);
  const uint64_t loop = loops_.load(std::memory_order_relaxed) + 1;
  open_loop_.store(loop);
  loops_.store(loop);
  if (parked_.load() > 0) {
    // Taking the mutex orders this notify after a parking worker's check.
    { std::lock_guard<std::mutex> lock(park_mutex_); }
    park_.notify_all();
  }
  show(0, EngineProbe::kWorking);
  run_chunks(0);
  // No chunk is left to claim: close the loop to latecomers, then wait for
  // the workers still finishing theirs.
  open_loop_.store(0);
  show(0, EngineProbe::kWaitingForWorkers);
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 1; joined_.load(std::memory_order_acquire) != 0; ++spins) {
    cpu_relax();
    if (spins % 64 == 0 && std::chrono::steady_clock::now() - start > kStragglerSpin) {
      // A worker lost its core mid-chunk (the machine is busy). Sleep, so
      // that this core goes idle and the scheduler can move it here.
      std::unique_lock<std::mutex> lock(park_mutex_);
      caller_waiting_.store(true);
      // caller_waiting_ is raised before joined_ is checked, and a leaving
      // worker lowers joined_ before it checks caller_waiting_.
      finished_.wait(lock, [&] { return joined_.load() == 0; });
      caller_waiting_.store(false);
      break;
    }
  }
  fn_ = nullptr;
  show(0, EngineProbe::kIdle);
  add_loop_time(loop_start, start, std::chrono::steady_clock::now());
}

void ThreadPool::add_loop_time(Clock::time_point start, Clock::time_point own_chunks_done,
                               Clock::time_point end) {
  time_.loops += 1;
  time_.loop_ms += std::chrono::duration<double, std::milli>(end - start).count();
  time_.wait_ms += std::chrono::duration<double, std::milli>(end - own_chunks_done).count();
}

bool ThreadPool::wait_for_loop(int index, uint64_t seen, uint64_t* loop) {
  show(index, EngineProbe::kSpinning);
  const auto start = std::chrono::steady_clock::now();
  for (int spins = 1;; ++spins) {
    const uint64_t latest = loops_.load(std::memory_order_acquire);
    if (latest != seen) {
      *loop = latest;
      return true;
    }
    if (stopping_.load(std::memory_order_relaxed)) return false;
    cpu_relax();
    if (spins % 64 == 0) {
      const auto spun = std::chrono::steady_clock::now() - start;
      if (spun > kSpinBeforeParking) break;
      if (spun > kSpinBeforeYielding) std::this_thread::yield();
    }
  }
  show(index, EngineProbe::kParked);
  std::unique_lock<std::mutex> lock(park_mutex_);
  parked_.fetch_add(1);
  // parked_ is raised before loops_ is checked, and parallel_for raises
  // loops_ before it checks parked_: one of the two sees the other.
  park_.wait(lock, [&] { return loops_.load() != seen || stopping_.load(); });
  parked_.fetch_sub(1);
  if (stopping_.load()) return false;
  *loop = loops_.load();
  return true;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  uint64_t loop = 0;
  while (wait_for_loop(index, seen, &loop)) {
    seen = loop;
    // Join, then check the loop is still open: if it is, the caller cannot
    // finish before this worker leaves; if not, nothing of it is touched.
    joined_.fetch_add(1);
    show(index, EngineProbe::kWorking);
    if (open_loop_.load() == loop) run_chunks(index);
    if (joined_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      { std::lock_guard<std::mutex> lock(park_mutex_); }
      finished_.notify_one();
    }
  }
  show(index, EngineProbe::kAbsent);
}

}  // namespace sipllm

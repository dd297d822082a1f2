// The compute thread pool: every index exactly once, in whole grains, on
// valid thread indices; small loops stay on the caller; idle workers park and
// wake again; the pool shuts down cleanly from any state.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace sipllm {
namespace {

// Polls `done` for up to 30 s: an eventual state, not a timing claim.
template <class F>
bool eventually(F done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(ThreadPool, CoversEveryIndexOnceInWholeGrains) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{100}, size_t{1000}, size_t{12345}}) {
      for (size_t grain : {size_t{0}, size_t{1}, size_t{3}, size_t{64}, size_t{20000}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<bool> bad_range{false}, bad_thread{false};
        const size_t g = grain == 0 ? 1 : grain;
        pool.parallel_for(n, grain, [&](size_t begin, size_t end, int thread) {
          if (begin >= end || end > n || begin % g != 0 || (end != n && (end - begin) % g != 0)) bad_range = true;
          if (thread < 0 || thread >= pool.size()) bad_thread = true;
          for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        EXPECT_FALSE(bad_range) << "n " << n << ", grain " << grain;
        EXPECT_FALSE(bad_thread);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
      }
    }
  }
}

TEST(ThreadPool, ThreadIndicesAreExclusiveForScratch) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> in_use(static_cast<size_t>(pool.size()));
  std::atomic<bool> shared{false};
  for (int round = 0; round < 200; ++round) {
    pool.parallel_for(64, 1, [&](size_t, size_t, int thread) {
      if (in_use[static_cast<size_t>(thread)].fetch_add(1) != 0) shared = true;
      for (volatile int spin = 0; spin < 200;) spin = spin + 1;
      in_use[static_cast<size_t>(thread)].fetch_sub(1);
    });
  }
  EXPECT_FALSE(shared);
}

TEST(ThreadPool, OneChunkRunsOnTheCallerAlone) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  bool on_caller = true;
  pool.parallel_for(100, 100, [&](size_t begin, size_t end, int thread) {
    ++calls;
    on_caller = on_caller && std::this_thread::get_id() == caller && thread == 0 && begin == 0 && end == 100;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(on_caller);
}

TEST(ThreadPool, ManyBackToBackLoopsAddUp) {
  ThreadPool pool(3);
  std::atomic<uint64_t> total{0};
  uint64_t expected = 0;
  for (int round = 0; round < 20000; ++round) {
    const size_t n = static_cast<size_t>(round % 17) + 1;
    pool.parallel_for(n, 1, [&](size_t begin, size_t end, int) {
      for (size_t i = begin; i < end; ++i) total.fetch_add(i + 1);
    });
    expected += n * (n + 1) / 2;
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(ThreadPool, TimesTheLoopsThreadsShareAndOnlyThose) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    const auto sleep_per_chunk = [](size_t, size_t, int) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); };
    pool.parallel_for(10, 10, sleep_per_chunk);  // one chunk: a part that never splits
    EXPECT_EQ(pool.time().loops, 0u);
    EXPECT_EQ(pool.time().loop_ms, 0.0);
    pool.parallel_for(4, 1, sleep_per_chunk);
    pool.parallel_for(4, 2, sleep_per_chunk);
    const ParallelTime t = pool.time();
    EXPECT_EQ(t.loops, 2u) << threads << " threads";
    // The caller made at least one call of each loop (one for the whole loop, alone).
    EXPECT_GE(t.loop_ms, 4.0);
    EXPECT_GE(t.wait_ms, 0.0);
    EXPECT_LE(t.wait_ms, t.loop_ms);
    if (threads == 1) EXPECT_EQ(t.wait_ms, 0.0);  // nobody to wait for
  }
}

TEST(ThreadPool, IdleWorkersParkAndWakeForTheNextLoop) {
  ThreadPool pool(3);
  std::atomic<int> sum{0};
  pool.parallel_for(8, 1, [&](size_t begin, size_t end, int) { sum += static_cast<int>(end - begin); });
  EXPECT_TRUE(eventually([&] { return pool.parked_workers() == 2; })) << pool.parked_workers() << " parked";
  // Parked workers take part again.
  std::vector<std::atomic<int>> by_thread(3);
  for (int round = 0; round < 50; ++round) {
    pool.parallel_for(3000, 1, [&](size_t begin, size_t end, int thread) {
      sum += static_cast<int>(end - begin);
      by_thread[static_cast<size_t>(thread)] += 1;
      for (volatile int spin = 0; spin < 2000;) spin = spin + 1;
    });
  }
  EXPECT_EQ(sum.load(), 8 + 50 * 3000);
  EXPECT_GT(by_thread[1].load() + by_thread[2].load(), 0) << "no worker ever joined";
}

TEST(ThreadPool, ShutsDownWhileSpinningOrParked) {
  for (int round = 0; round < 20; ++round) {
    auto pool = std::make_unique<ThreadPool>(3);
    pool->parallel_for(100, 1, [](size_t, size_t, int) {});
    pool.reset();  // workers still spinning
  }
  auto pool = std::make_unique<ThreadPool>(2);
  ASSERT_TRUE(eventually([&] { return pool->parked_workers() == 1; }));
  pool.reset();
}

TEST(ThreadPool, DefaultIsOneThreadPerCore) {
  ThreadPool pool(0);
  EXPECT_EQ(pool.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace sipllm

// Native kernel benchmark (Google Benchmark): the cases of kernel_cases.h at
// 1 and 2 threads, reporting weight GB/s and GFLOP/s. Built with the tests,
// not run by ctest:
//   build/native/tests/bench/sipllm_kernels_bench [--benchmark_filter=Q8_0]
#include <benchmark/benchmark.h>

#include <memory>

#include "kernel_cases.h"
#include "core/thread_pool.h"

namespace sipllm::bench {
namespace {

void run_matmul(benchmark::State& state, const MatmulCase& c, int threads) {
  ThreadPool pool(threads);
  MatmulFixture fixture(c);
  for (auto _ : state) fixture.run(pool);
  const double runs = static_cast<double>(state.iterations());
  state.counters["GB"] = benchmark::Counter(fixture.weight_bytes() * runs / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP"] = benchmark::Counter(fixture.flops() * runs / 1e9, benchmark::Counter::kIsRate);
}

void run_vector(benchmark::State& state, const VectorCase& c, int threads) {
  ThreadPool pool(threads);
  VectorFixture fixture(c);
  for (auto _ : state) fixture.run(pool);
  state.counters["GFLOP"] =
      benchmark::Counter(c.flops_per_run * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  if (c.bytes_per_run > 0) {
    state.counters["GB"] =
        benchmark::Counter(c.bytes_per_run * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  }
}

const bool kRegistered = [] {
  for (int threads : {1, 2}) {
    for (const MatmulCase& c : matmul_cases()) {
      benchmark::RegisterBenchmark(("matmul " + c.name() + " t" + std::to_string(threads)).c_str(),
                                   [c, threads](benchmark::State& s) { run_matmul(s, c, threads); })
          ->UseRealTime()
          ->MinTime(0.2);
    }
  }
  for (const VectorCase& c : vector_cases()) {
    benchmark::RegisterBenchmark(("vector " + c.name + " t1").c_str(),
                                 [c](benchmark::State& s) { run_vector(s, c, 1); })
        ->UseRealTime()
        ->MinTime(0.1);
  }
  return true;
}();

}  // namespace
}  // namespace sipllm::bench

BENCHMARK_MAIN();

// The kernel benchmark without Google Benchmark, for targets that lack it
// (WebAssembly under Node or in Chromium: scripts/bench-kernels-wasm.sh).
// Same cases as kernels_bench.cpp; prints one line per case and thread count.
//   sipllm_kernels_bench_plain [FILTER]   (cases whose name contains FILTER)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "kernel_cases.h"
#include "core/thread_pool.h"

namespace sipllm::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per run: the best of five batches of runs lasting ~40 ms each.
template <class Run>
double seconds_per_run(Run run) {
  run();  // warm-up: caches, pages, lazily built tables
  int runs = 1;
  for (;;) {
    const auto start = Clock::now();
    for (int i = 0; i < runs; ++i) run();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s > 0.04) break;
    runs *= 2;
  }
  double best = 1e30;
  for (int batch = 0; batch < 5; ++batch) {
    const auto start = Clock::now();
    for (int i = 0; i < runs; ++i) run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count() / runs);
  }
  return best;
}

int run_cases(const std::string& filter) {
  std::printf("%-52s %7s %10s %9s %9s\n", "case", "threads", "us/run", "GB/s", "GFLOP/s");
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const MatmulCase& c : matmul_cases()) {
      if (c.name().find(filter) == std::string::npos) continue;
      MatmulFixture fixture(c);
      const double s = seconds_per_run([&] { fixture.run(pool); });
      std::printf("%-52s %7d %10.2f %9.2f %9.2f\n", ("matmul " + c.name()).c_str(), threads, s * 1e6,
                  fixture.weight_bytes() / s / 1e9, fixture.flops() / s / 1e9);
      std::fflush(stdout);
      if (const int wrong = fixture.mismatches(); wrong > 0) {
        std::fprintf(stderr, "matmul %s: %d outputs differ from the scalar reference\n", c.name().c_str(), wrong);
        return 1;
      }
    }
  }
  for (const VectorCase& c : vector_cases()) {
    if (c.name.find(filter) == std::string::npos) continue;
    VectorFixture fixture(c);
    // The vector work runs on one thread; the read probe on one and on two.
    for (int threads : {1, 2}) {
      if (threads > 1 && c.bytes_per_run == 0) break;
      ThreadPool pool(threads);
      const double s = seconds_per_run([&] { fixture.run(pool); });
      char bandwidth[16] = "";
      if (c.bytes_per_run > 0) std::snprintf(bandwidth, sizeof bandwidth, "%.2f", c.bytes_per_run / s / 1e9);
      std::printf("%-52s %7d %10.3f %9s %9.2f\n", ("vector " + c.name).c_str(), threads, s * 1e6, bandwidth,
                  c.flops_per_run / s / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace sipllm::bench

#if defined(SIPLLM_BENCH_FILTER)
// The filter set when compiling: a page has no command line, and Debian's
// Emscripten (3.1.6) finds no main(argc, argv) in code from LLVM 19 (the
// relaxed SIMD build), which names that __main_argc_argv.
int main() { return sipllm::bench::run_cases(SIPLLM_BENCH_FILTER); }
#else
int main(int argc, char** argv) { return sipllm::bench::run_cases(argc > 1 ? argv[1] : ""); }
#endif

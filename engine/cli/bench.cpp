// sipllm bench: the streaming profiler.
//
// Runs a prompt of random tokens and a greedy generation, then prints per-unit
// I/O, prepare and compute time, prefetch hits and misses, bytes streamed in
// prefill and decode, time to first token, speeds and peak memory. With
// --sweep-budget, repeats the run across memory budgets from 0 to the model
// size and prints decode speed and memory for each. With a grammar
// (--grammar, --json-schema, --json), runs with and without it in turn and
// prints the decode speeds and the grammar's overhead.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_options.h"

namespace sipllm::cli {
namespace {

// Peak resident set size of this process, from /proc (0 where unavailable).
uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Restarts the kernel's peak-RSS tracking, so each sweep row measures its own.
void reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

std::vector<int32_t> bench_prompt(const Engine& engine, int n) {
  // Seeded random ids, skipping the first few (control tokens in most vocabs).
  std::vector<int32_t> tokens;
  const ModelInfo& m = engine.info();
  if (m.bos >= 0) tokens.push_back(m.bos);
  uint64_t state = 42;
  while (static_cast<int>(tokens.size()) < n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    tokens.push_back(static_cast<int32_t>(3 + (state >> 33) % static_cast<uint64_t>(m.n_vocab() - 3)));
  }
  return tokens;
}

double mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

// Bytes per second `threads` threads read (and only read: a memcpy writes as
// much as it reads) from a buffer far larger than the caches: the ceiling
// for decoding, which reads every weight once per token. Best of three.
double read_bytes_per_s(int threads) {
  const size_t bytes = size_t{512} << 20;
  std::vector<uint64_t> buffer(bytes / sizeof(uint64_t), 1);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> readers;
    const size_t share = buffer.size() / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      readers.emplace_back([&, t] {
        const uint64_t* p = buffer.data() + static_cast<size_t>(t) * share;
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (size_t i = 0; i < share; i += 4) {
          a += p[i];
          b += p[i + 1];
          c += p[i + 2];
          d += p[i + 3];
        }
        volatile uint64_t sink = a + b + c + d;  // the reads must happen
        (void)sink;
      });
    }
    for (auto& r : readers) r.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(share * sizeof(uint64_t)) * threads / s);
  }
  return best;
}

GenerationStats run_once(Engine& engine, const BenchOptions& bench) {
  GenerateOptions options;
  options.max_tokens = bench.gen_tokens;
  options.sampling.temperature = 0;
  engine.reset();
  return engine.generate_tokens(bench_prompt(engine, bench.prompt_tokens), options,
                                [](const TokenEvent&) { return true; });
}

// Where a phase's time went, per step (a token of decode, a prompt token of
// prefill): in the loops the threads share, waiting for the last of them, and
// on one thread. From a run with several threads, a model of more: the work in
// the loops split evenly, the time on one thread unchanged, each loop's wait as
// measured. What the model leaves out (memory bandwidth, which decode reaches
// first, and a wait that grows with more threads) only lowers its figures.
void print_parallel(const char* phase, const ParallelTime& p, double phase_ms, int steps, int threads) {
  if (steps <= 0 || phase_ms <= 0) return;
  const double serial_ms = std::max(0.0, phase_ms - p.loop_ms);
  std::printf("  %-13s %5.0f loops/step, %8.3f ms/step in them (%.3f waiting for the last thread), "
              "%.3f ms/step on one thread (%.0f%%)\n",
              phase, static_cast<double>(p.loops) / steps, p.loop_ms / steps, p.wait_ms / steps, serial_ms / steps,
              100.0 * serial_ms / phase_ms);
  if (threads < 2 || p.loops == 0) return;
  const double work_ms = (p.loop_ms - p.wait_ms) * threads;
  const double wait_per_loop_ms = p.wait_ms / static_cast<double>(p.loops);
  std::printf("  %-13s model, steps/s:", "");
  for (int n : {1, 2, 4, 8, 16}) {
    const double ms = serial_ms + work_ms / n + (n > 1 ? wait_per_loop_ms * static_cast<double>(p.loops) : 0.0);
    std::printf(" %d threads %.1f%s", n, 1e3 * steps / ms, n == 16 ? "\n" : ",");
  }
}

// `again`: the same request run a second time, or nullptr.
void print_report(const GenerationStats& s, const GenerationStats* again, const Engine& engine,
                  const CommonOptions& common) {
  const uint64_t peak_rss = peak_rss_bytes();  // before the read probe's buffer
  const LoaderStats& l = s.loader;
  std::printf("\n%-14s %6s %10s %10s %10s %10s %10s\n", "unit", "loads", "MB/load", "io ms",
              "prepare ms", "compute ms", "wait ms");
  for (const UnitCounters& u : l.units) {
    std::printf("%-14s %6llu %10.3f %10.2f %10.2f %10.2f %10.2f%s\n", u.name.c_str(),
                static_cast<unsigned long long>(u.loads), mb(u.bytes), u.io_ms, u.prepare_ms,
                u.compute_ms, u.wait_ms, u.resident ? "  (resident)" : "");
  }
  std::printf("%-14s %6llu %10s %10.2f %10.2f %10.2f %10.2f\n", "total",
              static_cast<unsigned long long>(l.units_loaded), "", l.io_ms, l.prepare_ms,
              l.compute_ms, l.wait_ms);

  const int prefill_tokens = s.prompt_tokens - s.reused_tokens;
  std::printf("\nprefetch          hits %llu, misses %llu, resident hits %llu\n",
              static_cast<unsigned long long>(l.prefetch_hits),
              static_cast<unsigned long long>(l.prefetch_misses),
              static_cast<unsigned long long>(l.resident_hits));
  std::printf("streamed          prefill %.3f MB (%d tokens), decode %.3f MB (%d tokens, %.3f MB/token), "
              "embedding rows %.3f MB\n",
              mb(s.prefill_bytes_read), prefill_tokens, mb(s.decode_bytes_read), s.generated_tokens,
              s.generated_tokens > 1 ? mb(s.decode_bytes_read) / (s.generated_tokens - 1) : 0.0,
              mb(l.embedding_bytes_read));
  std::printf("time to first    %.1f ms\n", s.ttft_ms);
  std::printf("prefill           %.1f tokens/s (%.1f ms)\n", s.prompt_tokens_per_s(), s.prompt_ms);
  if (again != nullptr) {
    std::printf("prefill again     %.1f tokens/s (%.1f ms), with the weights the first run left in memory\n",
                again->prompt_tokens_per_s(), again->prompt_ms);
  }
  std::printf("decode            %.2f tokens/s (%.1f ms for %d tokens, %.2f ms/token)\n",
              s.decode_tokens_per_s(), s.decode_ms, s.generated_tokens,
              s.generated_tokens > 1 ? s.decode_ms / (s.generated_tokens - 1) : 0.0);
  // Every decode step reads every unit's weights once, resident or streamed,
  // as they lie in memory; of a mixture's experts, the ones a token uses
  // (n_experts_used of each layer's n_experts).
  uint64_t weights_per_token = 0;
  uint64_t expert_bytes = 0;
  for (const UnitCounters& u : l.units) {
    (u.name.find(" expert ") == std::string::npos ? weights_per_token : expert_bytes) += u.memory_bytes;
  }
  const double experts = engine.info().hyperparameter("n_experts");
  if (experts > 0) {
    weights_per_token += static_cast<uint64_t>(static_cast<double>(expert_bytes) *
                                               engine.info().hyperparameter("n_experts_used") / experts);
  }
  const int threads = common.engine.threads > 0 ? common.engine.threads
                                                : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The probe with as many threads as decoding used, and with one.
  const double decode_bytes_per_s = static_cast<double>(weights_per_token) * s.decode_tokens_per_s();
  const double probe = read_bytes_per_s(threads);
  std::printf("weight bandwidth  %.1f MB/token read in decode: %.2f GB/s, %.0f%% of the read probe's %.2f GB/s "
              "(%d threads)",
              mb(weights_per_token), decode_bytes_per_s / 1e9, 100.0 * decode_bytes_per_s / probe, probe / 1e9,
              threads);
  if (threads > 1) std::printf("; %.2f GB/s with 1 thread", read_bytes_per_s(1) / 1e9);
  std::printf("\n");
  // Prefill's multiply-adds per second against the most the kernels' dot
  // product instruction does with as many threads (and with one).
  const GenerationStats& prefill = again != nullptr ? *again : s;
  const double prefill_macs = static_cast<double>(engine.info().multiply_adds_per_token) * prefill.prompt_tokens_per_s();
  const double peak = dot_product_peak(threads);
  std::printf("matrix products   %s: %.1f G multiply-adds/s in the blocks' matrices, %.0f%% of the dot product "
              "peak's %.1f G/s (%d threads",
              again != nullptr ? "prefill again" : "prefill", prefill_macs / 1e9, 100.0 * prefill_macs / peak,
              peak / 1e9, threads);
  if (threads > 1) std::printf("; %.1f G/s with 1 thread", dot_product_peak(1) / 1e9);
  std::printf(")\n");
  std::printf("kernels           %s\n", s.kernels.c_str());
  std::printf("threads           %d; where the time went:\n", threads);
  // The first prefill waits for weights to arrive: that wait is not a part that runs on one thread.
  print_parallel(again != nullptr ? "prefill again" : "prefill", prefill.prefill_parallel, prefill.prompt_ms,
                 prefill.prompt_tokens - prefill.reused_tokens, threads);
  print_parallel("decode", s.decode_parallel, s.decode_ms, s.generated_tokens - 1, threads);
  std::printf("weights in memory resident %.3f MB (%d units), ring %.3f MB (%d streamed units), peak %.3f MB\n",
              mb(l.resident_bytes), l.resident_units, mb(l.ring_bytes), l.streamed_units,
              mb(l.peak_weight_bytes));
  if (experts > 0) {
    // The request's distinct experts (what a prompt's bytes grow with) and
    // the ones kept in memory now.
    int n_experts = 0, chosen = 0, kept = 0;
    uint64_t chosen_bytes = 0;
    for (const UnitCounters& u : l.units) {
      if (u.name.find(" expert ") == std::string::npos) continue;
      ++n_experts;
      if (u.uses > 0) {
        ++chosen;
        chosen_bytes += u.bytes;
      }
      if (u.resident) ++kept;
    }
    std::printf("experts           %d of %d chosen in this request (%.3f MB), %d kept in memory\n", chosen,
                n_experts, mb(chosen_bytes), kept);
  }
  std::printf("KV cache          %.3f MB\n", mb(s.kv_cache_bytes));
  if (s.recurrent_state_bytes > 0) std::printf("recurrent state   %.3f MB (with its checkpoint)\n", mb(s.recurrent_state_bytes));
  std::printf("peak RSS          %.1f MB\n", mb(peak_rss));
  (void)common;
}

int run_sweep(const CommonOptions& common, const BenchOptions& bench) {
  // Budgets from "stream everything" to "everything resident", in equal steps
  // of the model's weight bytes.
  uint64_t model_bytes = 0;
  {
    auto probe = open_engine(common);
    model_bytes = probe->info().weight_bytes;
  }
  std::printf("%10s %9s %9s %13s %13s %10s %11s %12s\n", "budget MB", "resident", "streamed",
              "decode tok/s", "prefill tok/s", "MB/token", "weights MB", "peak RSS MB");
  for (int step = 0; step <= bench.sweep_steps; ++step) {
    CommonOptions options = common;
    options.engine.loader.memory_budget =
        step == bench.sweep_steps ? kUnlimitedBudget : model_bytes * static_cast<uint64_t>(step) / bench.sweep_steps;
    reset_peak_rss();
    std::unique_ptr<Engine> engine;
    try {
      engine = open_engine(options);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kOutOfBudget) throw;
      std::printf("%10.2f  %s\n", mb(options.engine.loader.memory_budget), e.what());
      continue;
    }
    run_once(*engine, bench);  // first pass: loads what stays resident
    const GenerationStats s = run_once(*engine, bench);
    const double budget_mb = step == bench.sweep_steps ? mb(model_bytes) : mb(options.engine.loader.memory_budget);
    std::printf("%10.2f %9d %9d %13.2f %13.1f %10.3f %11.2f %12.1f\n", budget_mb, s.loader.resident_units,
                s.loader.streamed_units, s.decode_tokens_per_s(), s.prompt_tokens_per_s(),
                s.generated_tokens > 1 ? mb(s.decode_bytes_read) / (s.generated_tokens - 1) : 0.0,
                mb(s.loader.peak_weight_bytes), mb(peak_rss_bytes()));
    std::fflush(stdout);
  }
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Decode speed with and without the grammar, on the same engine and prompt,
// alternating so that a change in the machine's load hits both alike.
int run_grammar_bench(const CommonOptions& common, const BenchOptions& bench) {
  auto engine = open_engine(common);
  const ModelInfo& m = engine->info();
  GenerateOptions options;
  options.max_tokens = bench.gen_tokens;
  if (bench.sampling) {
    options.sampling = *bench.sampling;
    if (!options.sampling.seed) options.sampling.seed = 1;  // both runs draw alike
  } else {
    options.sampling.temperature = 0;
  }
  const SamplingOptions& s = options.sampling;
  std::printf("model     %s: %s, %d blocks, dim %d, vocabulary %d tokens\n", common.model.c_str(),
              m.architecture.c_str(), m.n_layers(), static_cast<int>(m.hyperparameter("dim")), m.n_vocab());
  std::printf("grammar   %s (%zu bytes of GBNF)\n", bench.grammar_source.c_str(), bench.grammar.size());
  if (s.temperature <= 0) {
    std::printf("sampling  greedy\n");
  } else {
    std::printf("sampling  temperature %.2f, top-k %d, top-p %.2f, min-p %.2f, seed %llu\n", s.temperature, s.top_k,
                s.top_p, s.min_p, static_cast<unsigned long long>(*s.seed));
  }
  std::printf("run       %d prompt tokens, up to %d generated, %d runs each way\n\n", bench.prompt_tokens,
              bench.gen_tokens, bench.repeats);
  const std::vector<int32_t> prompt = bench_prompt(*engine, bench.prompt_tokens);
  auto run = [&](bool with_grammar) {
    GenerateOptions o = options;
    if (with_grammar) o.grammar = bench.grammar;
    engine->reset();
    return engine->generate_tokens(prompt, o, [](const TokenEvent&) { return true; });
  };
  // First runs load the weights and build the vocabulary trie: not timed,
  // but the trie's cost shows in the grammar run's prompt time.
  run(false);
  const GenerationStats first = run(true);
  // Decode speeds move with the machine's load; the time spent choosing
  // tokens (sampler and grammar) is measured apart, per token, and its
  // growth against the plain run's time per token is the overhead that
  // does not depend on how fast the model itself ran.
  std::printf("%4s %12s %12s %14s %14s %10s %10s %8s  %s\n", "run", "plain tok/s", "gramm tok/s", "plain pick ms",
              "gramm pick ms", "speed", "pick", "tokens", "stop");
  std::vector<double> plain, constrained, speed_overheads, pick_overheads, grammar_prompt_ms;
  auto per_token = [](const GenerationStats& g, double ms) { return g.generated_tokens > 0 ? ms / g.generated_tokens : 0; };
  for (int r = 0; r < bench.repeats; ++r) {
    const GenerationStats a = run(false);
    const GenerationStats b = run(true);
    const double pa = a.decode_tokens_per_s(), pb = b.decode_tokens_per_s();
    const double speed = pb > 0 ? (pa / pb - 1) * 100 : 0;  // extra time per token, end to end
    const double plain_token_ms = per_token(a, a.decode_ms);
    const double pick = plain_token_ms > 0 ? (per_token(b, b.sample_ms) - per_token(a, a.sample_ms)) / plain_token_ms * 100 : 0;
    plain.push_back(pa);
    constrained.push_back(pb);
    speed_overheads.push_back(speed);
    pick_overheads.push_back(pick);
    grammar_prompt_ms.push_back(b.prompt_ms);
    std::printf("%4d %12.2f %12.2f %14.3f %14.3f %9.1f%% %9.2f%% %8d  %s\n", r + 1, pa, pb, per_token(a, a.sample_ms),
                per_token(b, b.sample_ms), speed, pick, b.generated_tokens, stop_reason_name(b.stop_reason));
    std::fflush(stdout);
  }
  std::printf("%4s %12.2f %12.2f %14s %14s %9.1f%% %9.2f%%  medians\n", "", median(plain), median(constrained), "",
              "", median(speed_overheads), median(pick_overheads));
  std::printf("\nspeed: extra time per decoded token, end to end; pick: the grammar's extra time choosing\n"
              "tokens, against the plain run's time per token\n");
  std::printf("the first run with the grammar took %.1f ms more before decoding than the later ones: the\n"
              "vocabulary trie, built once per engine\n",
              first.prompt_ms - median(grammar_prompt_ms));
  return 0;
}

}  // namespace

int run_bench(const CommonOptions& common, const BenchOptions& bench) {
  if (!bench.grammar.empty()) return run_grammar_bench(common, bench);
  {
    auto engine = open_engine(common);
    const ModelInfo& m = engine->info();
    const LoaderOptions& l = common.engine.loader;
    std::string types;
    for (const auto& [type, count] : m.tensors_by_type) {
      types += (types.empty() ? "" : ", ") + type + " x" + std::to_string(count);
    }
    std::printf("model     %s: %s, %d blocks, dim %d, %s; %.1f MB of weights\n", common.model.c_str(),
                m.architecture.c_str(), m.n_layers(), static_cast<int>(m.hyperparameter("dim")), types.c_str(),
                mb(m.weight_bytes));
    std::printf("loader    %s, %d buffers, %d load threads, budget %s, %s prefill (chunk %d), %d threads%s\n",
                common.backend == Backend::kMmap ? "mmap + ring"
                : l.mode == LoaderMode::kSync    ? "sync (pread, one buffer)"
                                                 : "ring (pread + prefetch threads)",
                l.mode == LoaderMode::kSync ? 1 : l.n_buffers, engine->loader_stats().load_threads,
                l.memory_budget == kUnlimitedBudget ? "unlimited" : (std::to_string(l.memory_budget) + " bytes").c_str(),
                common.engine.layer_major_prefill ? "layer-major" : "per-token",
                common.engine.prefill_chunk,
                common.engine.threads > 0 ? common.engine.threads : static_cast<int>(std::thread::hardware_concurrency()),
                engine->loader_stats().unpacked_5bit ? ", Q5_0/Q5_1 unpacked" : "");
    if (common.throttle.bandwidth_mb_per_s > 0 || common.throttle.latency_ms > 0) {
      std::printf("throttle  %.1f MB/s, %.1f ms latency per read\n", common.throttle.bandwidth_mb_per_s,
                  common.throttle.latency_ms);
    }
    std::printf("run       %d prompt tokens, %d generated (greedy)\n", bench.prompt_tokens, bench.gen_tokens);
    if (!bench.sweep_budget) {
      const GenerationStats s = run_once(*engine, bench);
      // The first prefill loads the weights as it goes (the time to the
      // first token). When they all stayed resident, a second one is their
      // compute alone, which is what a peer that maps the file before its
      // timer starts reports; with streamed units it would only stream them
      // again.
      if (s.loader.streamed_units == 0) {
        const GenerationStats again = run_once(*engine, bench);
        print_report(s, &again, *engine, common);
      } else {
        print_report(s, nullptr, *engine, common);
      }
      return 0;
    }
  }
  return run_sweep(common, bench);
}

}  // namespace sipllm::cli

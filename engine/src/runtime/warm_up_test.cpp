// Engine::warm_up: it runs the model's kernels on synthetic data and starts
// the loader on the first pass, and changes no result.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <limits>
#include <thread>

#include "model/gguf.h"
#include "runtime/kernel_warm_up.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::unique_ptr<Engine> open_generated(TensorType type, EngineOptions options = {}) {
  return Engine::open(make_memory_source(test::random_llama_bytes("tiny", type)), options);
}

// Watches the loader from this thread (as a page watches the weights arrive)
// until every unit of the first pass has arrived, checking that they come in
// stream order, each once. Returns how many arrived (all of them, unless the
// generous deadline, there only so that a broken loader fails, passed).
uint64_t watch_first_pass(const Engine& engine) {
  const auto units = static_cast<uint64_t>(engine.loader_stats().units.size());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  uint64_t seen = 0;
  while (seen < units && std::chrono::steady_clock::now() < deadline) {
    const LoaderStats stats = engine.loader_stats();
    EXPECT_GE(stats.units_loaded, seen);
    seen = stats.units_loaded;
    for (uint64_t u = 0; u < units; ++u) EXPECT_EQ(stats.units[u].loads, u < seen ? 1u : 0u) << "unit " << u;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return seen;
}

TEST(WarmUp, LeavesEveryResultUnchanged) {
  for (TensorType type : {TensorType::kF32, TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ6_K}) {
    EngineOptions options;
    options.threads = 2;
    auto cold = open_generated(type, options);
    const std::string first = test::generate_text(*cold, "Once upon a time", test::greedy(12));
    const std::string second = test::generate_text(*cold, " there was", test::greedy(12));

    auto warm = open_generated(type, options);
    warm->warm_up(5);
    EXPECT_EQ(test::generate_text(*warm, "Once upon a time", test::greedy(12)), first)
        << tensor_type_name(static_cast<uint32_t>(type));
    // In the middle of a conversation too: the KV cache is left alone.
    warm->warm_up(5);
    EXPECT_EQ(test::generate_text(*warm, " there was", test::greedy(12)), second)
        << tensor_type_name(static_cast<uint32_t>(type));
  }
}

std::string arch_fixture(const std::string& name) {
  return std::string(SIPLLM_SOURCE_DIR) + "/tests/fixtures/arch/" + name;
}

// The warm-up runs the forward pass's own blocks on synthetic weights, with
// the engine's activations: a family whose layers differ (hybrid recurrences,
// sliding windows, shared keys, per-layer inputs) must come out of it with
// every result unchanged, from the first request and mid-conversation.
TEST(WarmUp, EveryFamilyRunsItsOwnBlocksAndChangesNoResult) {
  for (const char* name : {"qwen35-Q4_K_M.gguf", "gemma4-Q4_K_M.gguf", "lfm2-Q4_K_M.gguf", "gemma3-Q8_0.gguf",
                           "phi3-Q4_K_M.gguf"}) {
    EngineOptions options;
    options.threads = 2;
    options.context_length = 256;
    auto cold = Engine::open(open_file_source(arch_fixture(name)), options);
    const std::vector<int32_t> prompt = {1, 17, 42, 99, 7, 250, 3, 64};
    const std::vector<int32_t> more = {12, 480, 33};
    std::vector<int32_t> first, second;
    cold->generate_tokens(prompt, test::greedy(8), [&](const TokenEvent& e) { first.push_back(e.token); return true; });
    cold->generate_tokens(more, test::greedy(8), [&](const TokenEvent& e) { second.push_back(e.token); return true; });

    auto warm = Engine::open(open_file_source(arch_fixture(name)), options);
    warm->warm_up(30);
    std::vector<int32_t> got;
    warm->generate_tokens(prompt, test::greedy(8), [&](const TokenEvent& e) { got.push_back(e.token); return true; });
    EXPECT_EQ(got, first) << name;
    warm->warm_up(30);
    got.clear();
    warm->generate_tokens(more, test::greedy(8), [&](const TokenEvent& e) { got.push_back(e.token); return true; });
    EXPECT_EQ(got, second) << name;
  }
}

// One layer of each kind, every kind: a hybrid model's recurrent layers and
// its attention layers; Gemma 4's sliding and global layers, those that
// share keys, and block 0 with the per-layer projection.
TEST(WarmUp, RunsOneLayerOfEveryKind) {
  for (const char* name : {"qwen35-Q8_0.gguf", "gemma4-Q8_0.gguf", "lfm2-Q8_0.gguf", "llama3-Q8_0.gguf"}) {
    auto source = open_file_source(arch_fixture(name));
    const GgufFile file = GgufFile::parse(*source);
    const ModelDescription model = describe_model(file);
    const MemoryPlan plan = MemoryPlan::for_loader(model, LoaderOptions{});
    const std::vector<int> layers = KernelWarmUp::one_layer_of_each_kind(model, plan);
    ASSERT_FALSE(layers.empty()) << name;
    EXPECT_EQ(layers.front(), 0) << name;
    const auto has = [&](const std::function<bool(const LayerShape&, int)>& which) {
      bool in_model = false, run = false;
      for (int l = 0; l < model.shape.n_layers; ++l) {
        if (!which(model.layers[static_cast<size_t>(l)], l)) continue;
        in_model = true;
        run = run || std::find(layers.begin(), layers.end(), l) != layers.end();
      }
      return !in_model || run;
    };
    for (LayerKind kind : {LayerKind::kAttention, LayerKind::kDeltaNet, LayerKind::kShortConv}) {
      EXPECT_TRUE(has([&](const LayerShape& s, int) { return s.kind == kind; })) << name << " kind " << static_cast<int>(kind);
    }
    EXPECT_TRUE(has([](const LayerShape& s, int) { return s.sliding_window; })) << name;
    EXPECT_TRUE(has([](const LayerShape& s, int) { return !s.sliding_window; })) << name;
    EXPECT_TRUE(has([](const LayerShape& s, int l) { return s.kv_source != l; })) << name;
    // Fewer than every layer where layers repeat (one type throughout here): the warm-up is short.
    EXPECT_LT(layers.size(), static_cast<size_t>(model.shape.n_layers)) << name;
  }
}

TEST(WarmUp, LoaderFetchesTheFirstPassMeanwhile) {
  auto engine = open_generated(TensorType::kQ8_0);
  const auto units = static_cast<uint64_t>(engine->loader_stats().units.size());
  ASSERT_GT(units, 0u);
  EXPECT_EQ(engine->loader_stats().units_loaded, 0u);
  // While the warm-up runs, without any request, every unit (all resident,
  // no budget) arrives, in stream order.
  std::atomic<bool> warmed{false};
  std::thread warming([&] {
    engine->warm_up(1e9);
    warmed = true;
  });
  const uint64_t seen = watch_first_pass(*engine);
  while (!warmed) {  // (a cancel that came before the warm-up began would not count)
    engine->cancel();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  warming.join();
  EXPECT_EQ(seen, units);
  GenerationStats stats;
  test::generate_text(*engine, "Once upon a time", test::greedy(4), &stats);
  EXPECT_EQ(stats.loader.prefetch_misses, 0u);
  EXPECT_EQ(stats.loader.units_loaded, 0u);  // nothing left to load
}

TEST(WarmUp, CancelEndsIt) {
  auto engine = open_generated(TensorType::kQ4_K);
  std::atomic<bool> done{false};
  std::thread canceller([&] {
    while (!done) {
      engine->cancel();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  engine->warm_up(1e9);
  done = true;
  canceller.join();
  // The engine still works afterwards.
  EXPECT_FALSE(test::generate_text(*engine, "Once upon a time", test::greedy(4)).empty());
}

TEST(WarmUp, EndWarmUpStopsItAndTheLoaderGoesOn) {
  auto engine = open_generated(TensorType::kQ8_0);
  const auto units = static_cast<uint64_t>(engine->loader_stats().units.size());
  std::atomic<bool> done{false};
  std::thread ender([&] {
    // Once the loader has begun, as a request coming during the warm-up ends it.
    while (!done && engine->loader_stats().units_loaded == 0) std::this_thread::yield();
    while (!done) {
      engine->end_warm_up();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  engine->warm_up(1e9);
  done = true;
  ender.join();
  // Unlike cancel(), the loader went on by itself: the whole first pass
  // arrives with no request; the request then loads nothing and gives the
  // text it gives without a warm-up.
  EXPECT_EQ(watch_first_pass(*engine), units);
  GenerationStats stats;
  const std::string text = test::generate_text(*engine, "Once upon a time", test::greedy(8), &stats);
  EXPECT_EQ(stats.loader.units_loaded, 0u);
  EXPECT_EQ(text, test::generate_text(*open_generated(TensorType::kQ8_0), "Once upon a time", test::greedy(8)));
}

// The request can come before the warm-up's job has begun: it must not run
// its whole time then (here: longer than any test may take).
TEST(WarmUp, EndedBeforeItBeginsItReturnsAtOnce) {
  auto engine = open_generated(TensorType::kQ8_0);
  engine->end_warm_up();
  engine->warm_up(1e9);
  // The conversation is as it was: the request gives its usual text.
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", test::greedy(8)),
            test::generate_text(*open_generated(TensorType::kQ8_0), "Once upon a time", test::greedy(8)));
}

TEST(WarmUp, PrefetchOnOpenLoadsTheFirstPassBeforeAnyRequest) {
  EngineOptions options;
  options.loader.prefetch_on_open = true;
  auto engine = open_generated(TensorType::kQ8_0, options);
  const auto units = static_cast<uint64_t>(engine->loader_stats().units.size());
  ASSERT_GT(units, 0u);
  // No request, no warm-up: the units arrive anyway, in stream order.
  EXPECT_EQ(watch_first_pass(*engine), units);
  GenerationStats stats;
  test::generate_text(*engine, "Once upon a time", test::greedy(4), &stats);
  EXPECT_EQ(stats.loader.units_loaded, 0u);  // nothing left to load
  EXPECT_EQ(stats.loader.prefetch_misses, 0u);
}

TEST(WarmUp, RejectsBadDurations) {
  auto engine = open_generated(TensorType::kF32);
  for (double ms : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      engine->warm_up(ms);
      ADD_FAILURE() << "warm_up(" << ms << ") did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("warm-up"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(engine->warm_up(0));
}

}  // namespace
}  // namespace sipllm

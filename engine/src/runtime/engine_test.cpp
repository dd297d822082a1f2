// The engine end to end on the real fixture models.
#include "sipllm/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <thread>

#include "kernels/matmul.h"
#include "model/gguf_writer.h"
#include "sipllm/engine_probe.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::unique_ptr<Engine> open_model(const std::string& relative, EngineOptions options = {}) {
  return Engine::open(open_file_source(test::model_path(relative)), options);
}

TEST(Engine, Stories260KGreedyFromBosMatchesLlama2c) {
  auto engine = open_model("stories260K.gguf");
  const std::string expected = test::read_file(test::model_path("stories260K.greedy200.expected.txt"));
  // llama2.c's `run -t 0 -n 200`: 200 forward steps from BOS, each emitting a token.
  GenerationStats stats;
  const std::string text = test::generate_text(*engine, std::vector<int32_t>{1}, test::greedy(200), &stats);
  EXPECT_EQ(stats.generated_tokens, 200);
  EXPECT_EQ(text, expected);
}

TEST(Engine, PromptGreedySameAcrossRunsAndThreadCounts) {
  std::string first;
  for (int threads : {1, 2, 3, 1}) {
    EngineOptions options;
    options.threads = threads;
    auto engine = open_model("stories260K.gguf", options);
    GenerationStats stats;
    const std::string text = test::generate_text(*engine, "Once upon a time", test::greedy(32), &stats);
    EXPECT_EQ(stats.generated_tokens, 32);
    if (first.empty()) {
      first = text;
      EXPECT_GT(first.size(), 32u);
    } else {
      EXPECT_EQ(text, first) << "threads " << threads;
    }
  }
}

TEST(Engine, TinyStoriesQ8_0GreedyFromBosIsCoherent) {
  auto engine = open_model("TinyStories-656K/TinyStories-656K-Q8_0.gguf");
  const std::string text = test::generate_text(*engine, "", test::greedy(40));
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u) << text;
  // The first 20 tokens as computed from the model's safetensors original.
  const std::vector<int32_t> expected = {147, 201, 282, 215, 286, 598, 1662, 356, 499, 826,
                                         1363, 1145, 1652, 615, 242, 1482, 951, 628, 499, 826};
  std::vector<int32_t> tokens;
  engine->reset();
  engine->generate_tokens({1}, test::greedy(20), [&](const TokenEvent& e) {
    tokens.push_back(e.token);
    return true;
  });
  EXPECT_EQ(tokens, expected);
}

TEST(Engine, SameSeedSameTextOtherSeedOtherText) {
  auto engine = open_model("stories260K.gguf");
  GenerateOptions options;
  options.max_tokens = 64;
  options.sampling.temperature = 1.0f;
  options.sampling.top_k = 0;
  options.sampling.top_p = 1.0f;
  options.sampling.min_p = 0;
  options.sampling.seed = 1234;
  const std::string a = test::generate_text(*engine, "Once upon a time", options);
  engine->reset();
  const std::string b = test::generate_text(*engine, "Once upon a time", options);
  options.sampling.seed = 99;
  engine->reset();
  const std::string c = test::generate_text(*engine, "Once upon a time", options);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Engine, SamplingFiltersShapeTheOutput) {
  auto engine = open_model("stories260K.gguf");
  GenerateOptions options = test::greedy(24);
  const std::string greedy_text = test::generate_text(*engine, "Once upon a time", options);
  // top-k 1 at any temperature is greedy.
  options.sampling.temperature = 1.5f;
  options.sampling.top_k = 1;
  options.sampling.seed = 5;
  engine->reset();
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", options), greedy_text);
  // So is a tiny top-p, and a min-p of 1.
  options.sampling.top_k = 0;
  options.sampling.top_p = 1e-6f;
  engine->reset();
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", options), greedy_text);
  options.sampling.top_p = 1.0f;
  options.sampling.min_p = 1.0f;
  engine->reset();
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", options), greedy_text);
}

TEST(Engine, RepetitionPenaltyChangesGreedyText) {
  auto engine = open_model("stories260K.gguf");
  GenerateOptions options = test::greedy(100);
  const std::string plain = test::generate_text(*engine, "Once upon a time", options);
  options.sampling.repeat_penalty = 1.5f;
  engine->reset();
  const std::string penalized = test::generate_text(*engine, "Once upon a time", options);
  EXPECT_NE(plain, penalized);
}

TEST(Engine, LogitBiasBansAToken) {
  auto engine = open_model("stories260K.gguf");
  std::vector<int32_t> tokens;
  GenerateOptions options = test::greedy(30);
  engine->generate_tokens({1}, options, [&](const TokenEvent& e) {
    tokens.push_back(e.token);
    return true;
  });
  ASSERT_FALSE(tokens.empty());
  const int32_t banned = tokens[0];
  options.sampling.logit_bias[banned] = -INFINITY;
  engine->reset();
  engine->generate_tokens({1}, options, [&](const TokenEvent& e) {
    EXPECT_NE(e.token, banned);
    return true;
  });
}

TEST(Engine, StopsAtStopStringAndHoldsNothingBack) {
  auto engine = open_model("stories260K.gguf");
  const std::string full = test::generate_text(*engine, "", test::greedy(60));
  const size_t cut = full.find("Lily");
  ASSERT_NE(cut, std::string::npos);
  GenerateOptions options = test::greedy(60);
  options.stop = {"Lily"};
  engine->reset();
  GenerationStats stats;
  const std::string text = test::generate_text(*engine, "", options, &stats);
  EXPECT_EQ(stats.stop_reason, StopReason::kStopString);
  EXPECT_EQ(text, full.substr(0, cut));
  // A stop string that never appears changes nothing.
  options.stop = {"never appears in the story"};
  engine->reset();
  EXPECT_EQ(test::generate_text(*engine, "", options, &stats), full);
  EXPECT_EQ(stats.stop_reason, StopReason::kMaxTokens);
}

TEST(Engine, CallbackCanStopGeneration) {
  auto engine = open_model("stories260K.gguf");
  int seen = 0;
  const GenerationStats stats = engine->generate_tokens({1}, test::greedy(50), [&](const TokenEvent&) {
    return ++seen < 5;
  });
  EXPECT_EQ(seen, 5);
  EXPECT_EQ(stats.generated_tokens, 5);
  EXPECT_EQ(stats.stop_reason, StopReason::kCallback);
}

TEST(Engine, EndOfTextStopsGeneration) {
  auto engine = open_model("stories260K.gguf");
  // Force EOS (id 2) as the only choice after a few tokens via the bias.
  GenerateOptions options = test::greedy(50);
  options.sampling.logit_bias[2] = 1e9f;
  const GenerationStats stats = engine->generate_tokens({1}, options, [](const TokenEvent&) { return true; });
  EXPECT_EQ(stats.stop_reason, StopReason::kEndOfText);
  EXPECT_EQ(stats.generated_tokens, 0);
}

TEST(Engine, PromptPlusTokensBeyondContextIsAClearError) {
  EngineOptions options;
  options.context_length = 16;
  auto engine = open_model("stories260K.gguf", options);
  try {
    engine->generate("Once upon a time", test::greedy(12), [](const TokenEvent&) { return true; });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kContextFull);
    EXPECT_NE(std::string(e.what()).find("context length 16"), std::string::npos) << e.what();
  }
  // Within the context it works, and the engine is still usable.
  EXPECT_FALSE(test::generate_text(*engine, "Once upon a time", test::greedy(8)).empty());
}

TEST(Engine, StatsAreFilledIn) {
  auto engine = open_model("stories260K.gguf");
  GenerationStats stats;
  test::generate_text(*engine, "Once upon a time", test::greedy(16), &stats);
  EXPECT_EQ(stats.prompt_tokens, static_cast<int>(engine->tokenize("Once upon a time").size()));
  EXPECT_EQ(stats.generated_tokens, 16);
  EXPECT_GT(stats.prompt_ms, 0);
  EXPECT_GT(stats.decode_ms, 0);
  EXPECT_GT(stats.ttft_ms, 0);
  EXPECT_GT(stats.prompt_tokens_per_s(), 0);
  EXPECT_GT(stats.decode_tokens_per_s(), 0);
  EXPECT_EQ(stats.kernels, matmul_kernel_form());
  EXPECT_FALSE(stats.kernels.empty());
}

TEST(Engine, CancelFromAnotherThreadStopsGeneration) {
  auto engine = open_model("stories260K.gguf");
  int seen = 0;
  const GenerationStats stats = engine->generate_tokens({1}, test::greedy(400), [&](const TokenEvent&) {
    if (++seen == 3) {
      std::thread canceller([&] { engine->cancel(); });
      canceller.join();
    }
    return true;
  });
  EXPECT_EQ(stats.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(seen, 3);
  // The next request runs normally.
  EXPECT_EQ(test::generate_text(*engine, "", test::greedy(10)).size() > 0, true);
}

TEST(Engine, ItsProbeShowsProgressAndWhatEachThreadDoes) {
  EngineProbe probe;
  EngineOptions options;
  options.threads = 3;
  options.probe = &probe;
  auto engine = open_model("stories260K.gguf", options);
  EXPECT_EQ(probe.pool_threads.load(), 3);
  EXPECT_EQ(probe.pool[3].value.load(), EngineProbe::kAbsent);
  uint32_t beats = probe.beats.load();
  int tokens = 0;
  const GenerationStats stats = engine->generate_tokens({1}, test::greedy(20), [&](const TokenEvent&) {
    // The caller is inside the request; each token has moved the count on.
    EXPECT_GT(probe.beats.load(), beats);
    beats = probe.beats.load();
    EXPECT_EQ(probe.waiting_for_unit.load(), -1);  // the units are resident
    if (++tokens == 5) engine->cancel();
    return true;
  });
  EXPECT_EQ(stats.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(probe.cancelled.load(), 1);
  EXPECT_EQ(probe.pool[0].value.load(), EngineProbe::kIdle);
  for (int i = 1; i < 3; ++i) {
    const int32_t state = probe.pool[i].value.load();
    EXPECT_TRUE(state == EngineProbe::kSpinning || state == EngineProbe::kParked) << i << ": " << state;
  }
  // The next request starts uncancelled.
  test::generate_text(*engine, "", test::greedy(2));
  EXPECT_EQ(probe.cancelled.load(), 0);
}

TEST(Engine, InfoDescribesTheModel) {
  auto engine = open_model("TinyStories-656K/TinyStories-656K-Q8_0.gguf");
  const ModelInfo& m = engine->info();
  EXPECT_EQ(m.architecture, "llama");
  EXPECT_EQ(m.n_layers(), 2);
  EXPECT_EQ(m.hyperparameter("dim"), 128);
  EXPECT_EQ(m.hyperparameter("hidden_dim"), 384);
  EXPECT_EQ(m.hyperparameter("n_heads"), 8);
  EXPECT_EQ(m.hyperparameter("n_kv_heads"), 4);
  EXPECT_EQ(m.n_vocab(), 2048);
  EXPECT_TRUE(m.tied_output);
  EXPECT_EQ(m.tensors_by_type.at("Q8_0") + m.tensors_by_type.at("F32"), 20);
  EXPECT_FLOAT_EQ(static_cast<float>(m.hyperparameter("rms_eps")), 1e-6f);
  // A llama model has no sliding window or soft-cap to report.
  EXPECT_EQ(m.hyperparameter("sliding_window", -1), -1);
  EXPECT_EQ(m.hyperparameter("attn_softcap", -1), -1);
  // Per layer Q and the output (128 x 128 each), K and V (128 x 64: 4 of
  // 8 heads of 16), gate, up and down (128 x 384 each).
  EXPECT_EQ(m.multiply_adds_per_token, 2u * (2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 384));
}

TEST(Engine, DotProductPeakIsMeasuredAndRefusesABadDuration) {
  const double one = dot_product_peak(1, 5);
  EXPECT_TRUE(one > 0 && std::isfinite(one)) << one;
  const double two = dot_product_peak(2, 5);
  EXPECT_TRUE(two > 0 && std::isfinite(two)) << two;
  for (double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    try {
      dot_product_peak(1, bad);
      ADD_FAILURE() << "no error for " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("milliseconds"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sipllm

namespace sipllm {
namespace {

// What ModelInfo lists is what SIPLLM_HYPERPARAMETERS declares (the web
// package's ModelHyperparameters is generated from it): every name
// declared, in the declared order, the `always` ones in every model, and,
// over the families, each optional one somewhere.
TEST(Engine, HyperparametersAreTheDeclaredListInItsOrder) {
  struct Declared {
    std::string name;
    bool always;
  };
  const std::vector<Declared> declared = {
#define SIPLLM_DECLARED(name, always, what) {#name, always},
      SIPLLM_HYPERPARAMETERS(SIPLLM_DECLARED)
#undef SIPLLM_DECLARED
  };
  std::set<std::string> seen;
  const auto check = [&](const ModelInfo& info, const std::string& what) {
    size_t next = 0;
    for (const Hyperparameter& h : info.hyperparameters) {
      while (next < declared.size() && declared[next].name != h.name) {
        EXPECT_FALSE(declared[next].always) << what << " lacks " << declared[next].name;
        ++next;
      }
      ASSERT_LT(next, declared.size()) << what << ": '" << h.name << "' is not declared, or out of order";
      seen.insert(h.name);
      ++next;
    }
    for (; next < declared.size(); ++next) EXPECT_FALSE(declared[next].always) << what << " lacks " << declared[next].name;
  };
  const std::string arch = std::string(SIPLLM_SOURCE_DIR) + "/tests/fixtures/arch/";
  const std::vector<std::string> architectures = supported_architectures();
  std::set<std::string> opened;
  for (const char* family : {"llama3", "qwen2", "qwen3", "gemma2", "gemma3", "gemma4", "phi3", "smollm3", "qwen35",
                             "lfm2", "qwen3moe", "qwen35moe", "lfm2moe"}) {
    // The mixtures of experts are carried as Q4_K_M only.
    const std::string quant = std::string(family).find("moe") != std::string::npos ? "-Q4_K_M" : "-Q8_0";
    const ModelInfo info = Engine::open(open_file_source(arch + family + quant + ".gguf"))->info();
    check(info, family);
    // The list the package is given (ARCHITECTURES) is what the engine runs.
    EXPECT_NE(std::find(architectures.begin(), architectures.end(), info.architecture), architectures.end())
        << info.architecture;
    opened.insert(info.architecture);
  }
  EXPECT_EQ(opened, std::set<std::string>(architectures.begin(), architectures.end()));
  // Pooling (embedding models), rope scaling: keys the fixtures lack.
  GgufWriter pooled = test::random_family_writer("qwen3");
  pooled.set_uint32("qwen3.pooling_type", 1);
  pooled.set_float32("qwen3.rope.scaling.factor", 2.0f);
  pooled.set_float32("qwen3.rope.scaling.attn_factor", 1.5f);
  check(Engine::open(make_memory_source(pooled.to_bytes()))->info(), "pooled qwen3");
  for (const Declared& d : declared) EXPECT_TRUE(seen.count(d.name)) << d.name << " is listed by no model tested";
}

}  // namespace
}  // namespace sipllm

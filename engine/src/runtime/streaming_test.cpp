// Layer streaming: every backend, loader mode and memory budget gives the
// same logits bit for bit; layer-major prefill streams each block once; the
// KV cache grows on demand and is reused across turns; failures and
// cancellation leave the engine usable.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "model/gguf.h"
#include "core/kv_cache.h"
#include "runtime/layer_loader.h"
#include "model/model_description.h"
#include "sipllm/engine.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  const std::string s = test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

// Writes bytes to a temporary file that is removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes, const std::string& name = "model.gguf")
      : path_(testing::TempDir() + "/" + std::to_string(::getpid()) + "-" + name) {
    rewrite(bytes);
  }
  ~TempFile() { std::remove(path_.c_str()); }
  void rewrite(const std::vector<uint8_t>& bytes) const {
    FILE* f = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Wraps a source and runs a hook before every read (fault injection,
// cancellation at a chosen point).
class HookedSource final : public WeightSource {
 public:
  using Hook = std::function<void(uint64_t offset, size_t length)>;
  HookedSource(std::unique_ptr<WeightSource> inner, Hook hook)
      : inner_(std::move(inner)), hook_(std::move(hook)) {}
  uint64_t size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }
  void read(uint64_t offset, void* dst, size_t length) override {
    hook_(offset, length);
    inner_->read(offset, dst, length);
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  Hook hook_;
};

enum class Backend { kFile, kMmap, kMemory, kThrottled };
const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kFile: return "file";
    case Backend::kMmap: return "mmap";
    case Backend::kMemory: return "memory";
    case Backend::kThrottled: return "throttled";
  }
  return "?";
}

std::unique_ptr<WeightSource> make_source(Backend backend, const TempFile& file,
                                          const std::vector<uint8_t>& bytes) {
  switch (backend) {
    case Backend::kFile: return open_file_source(file.path());
    case Backend::kMmap: return open_mmap_source(file.path());
    case Backend::kMemory: return make_memory_source(bytes);
    case Backend::kThrottled: {
      ThrottleOptions t;
      t.latency_ms = 0.3;
      t.jitter = 0.9;
      t.bandwidth_mb_per_s = 2000;
      t.seed = 11;
      return make_throttled_source(make_memory_source(bytes), t);
    }
  }
  return nullptr;
}

// Logits as raw bytes, so comparisons are exact.
std::string as_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Prefill logits of every prompt position, then the logits of three decode
// steps (each a one-token extension the cache reuses).
std::vector<std::string> run_transcript(Engine& engine, const std::vector<int32_t>& prompt) {
  std::vector<std::string> out;
  out.push_back(as_bytes(engine.evaluate(prompt, /*all_positions=*/true)));
  std::vector<int32_t> tokens = prompt;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> logits = engine.evaluate(tokens);
    tokens.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    out.push_back(as_bytes(engine.evaluate(tokens)));
  }
  return out;
}

uint64_t sum_unit_bytes(const LoaderStats& s) {
  uint64_t total = 0;
  for (const UnitCounters& u : s.units) total += u.bytes;
  return total;
}

// Every backend, loader mode and budget, with LoaderOptions::unpack_5bit off
// and on (Q5_0 and Q5_1 matrices unpacked where the budget holds the whole
// model so), against a plain sync run.
void check_every_configuration(const std::vector<uint8_t>& bytes, const std::string& prompt_text,
                               size_t min_tokens = 9) {
  const TempFile file(bytes);

  EngineOptions reference_options;
  reference_options.loader.mode = LoaderMode::kSync;
  reference_options.loader.unpack_5bit = false;
  auto reference_engine = Engine::open(make_memory_source(bytes), reference_options);
  const std::vector<int32_t> prompt = reference_engine->tokenize(prompt_text);
  ASSERT_GE(prompt.size(), min_tokens);
  const std::vector<std::string> expected = run_transcript(*reference_engine, prompt);

  for (bool unpack : {false, true}) {
    // Budgets in terms of this model: the ring alone, the ring plus one
    // block, plus half the model, and everything; each beside the working
    // memory (activations, the KV cache), which the budget covers too.
    uint64_t ring_bytes = 0, block_bytes = 0, model_bytes = 0, working_bytes = 0;
    {
      EngineOptions probe;
      probe.loader.memory_budget = 0;
      probe.loader.unpack_5bit = unpack;
      probe.threads = 2;
      auto engine = Engine::open(make_memory_source(bytes), probe);
      const LoaderStats s = engine->loader_stats();
      ring_bytes = s.ring_bytes;
      block_bytes = ring_bytes / 2;  // the largest unit's buffer
      model_bytes = engine->info().weight_bytes;
      working_bytes = s.working_bytes;
    }
    struct Budget {
      const char* name;
      uint64_t bytes;
    };
    for (Backend backend : {Backend::kFile, Backend::kMmap, Backend::kMemory, Backend::kThrottled}) {
      for (LoaderMode mode : {LoaderMode::kSync, LoaderMode::kRing}) {
        const uint64_t ring = mode == LoaderMode::kSync ? ring_bytes / 2 : ring_bytes;
        for (const Budget& budget : {Budget{"0", 0}, Budget{"one block", working_bytes + ring + block_bytes},
                                     Budget{"half", working_bytes + ring + model_bytes / 2},
                                     Budget{"whole", kUnlimitedBudget}}) {
          SCOPED_TRACE(std::string(backend_name(backend)) + ", " + (mode == LoaderMode::kSync ? "sync" : "ring") +
                       ", budget " + budget.name + (unpack ? ", unpacked" : ""));
          EngineOptions options;
          options.loader.mode = mode;
          options.loader.memory_budget = budget.bytes;
          options.loader.unpack_5bit = unpack;
          options.threads = 2;
          auto engine = Engine::open(make_source(backend, file, bytes), options);
          const std::vector<std::string> got = run_transcript(*engine, prompt);
          ASSERT_EQ(got.size(), expected.size());
          for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_TRUE(got[i] == expected[i]) << (i == 0 ? "prefill" : "decode step ") << i;
          }
          const LoaderStats s = engine->loader_stats();
          // At least the largest block; two smaller ones where blocks
          // differ in size (a hybrid model's recurrent and attention ones).
          if (std::string(budget.name) == "one block") {
            EXPECT_GE(s.resident_units, 1);
            EXPECT_GT(s.streamed_units, 0);
          }
          if (std::string(budget.name) == "0") EXPECT_EQ(s.resident_units, 0);
          if (std::string(budget.name) == "whole") EXPECT_EQ(s.streamed_units, 0);
        }
      }
    }
  }
}

TEST(Streaming, EveryBackendModeAndBudgetIsBitIdentical_Stories260K) {
  check_every_configuration(file_bytes(test::model_path("stories260K.gguf")),
                            "Once upon a time, there was a little dog. He liked to run in the park.");
}

TEST(Streaming, EveryBackendModeAndBudgetIsBitIdentical_TinyStoriesQ8_0) {
  check_every_configuration(file_bytes(test::model_path("TinyStories-656K/TinyStories-656K-Q8_0.gguf")),
                            "Once upon a time, there was a little dog. He liked to run in the park.");
}

// Q5_0 and Q5_1 matrices, which the loader may unpack: in a llama, in
// phi3's fused tensors, and in gemma2's head tied to the token embeddings
// (whose rows embed() then reads from the unpacked head).
// The hybrid families and the mixtures of experts: the recurrent state and its checkpoints (run_transcript
// repeats its prompt) whatever the budget, which also decides the prefill
// chunk: a prompt of more than one DeltaNet chunk of 64 positions.
TEST(Streaming, EveryBackendModeAndBudgetIsBitIdentical_HybridFamilies) {
  std::string text;
  for (int i = 0; i < 6; ++i) text += "Once upon a time, there was a little dog. He liked to run in the park. ";
  for (const char* family : {"qwen35-Q4_K_M", "lfm2-Q8_0", "qwen35moe-Q4_K_M", "lfm2moe-Q4_K_M", "qwen3moe-Q4_K_M"}) {
    SCOPED_TRACE(family);
    check_every_configuration(
        file_bytes(std::string(SIPLLM_SOURCE_DIR) + "/tests/fixtures/arch/" + family + ".gguf"), text, 100);
  }
}

TEST(Streaming, EveryBackendModeAndBudgetIsBitIdentical_Q5Matrices) {
  const std::string prompt = "Once upon a time, there was a little dog. He liked to run in the park.";
  for (TensorType type : {TensorType::kQ5_0, TensorType::kQ5_1}) {
    SCOPED_TRACE(tensor_type_name(static_cast<uint32_t>(type)));
    check_every_configuration(test::random_llama_bytes("tiny", type), prompt);
    check_every_configuration(test::random_family_writer("phi3", type).to_bytes(), prompt);
    check_every_configuration(test::random_family_writer("gemma2", type).to_bytes(), prompt);
  }
}

// Unpacked matrices take 34 or 36 bytes per 32 values instead of 22 or 24,
// and the budget counts them so; they are unpacked only when the budget
// holds the whole model unpacked (a streamed unit would unpack on every pass).
TEST(Streaming, Q5MatricesAreUnpackedWhenTheBudgetHoldsThemSo) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ5_0);
  const auto run = [&](bool unpack, uint64_t budget) {
    EngineOptions options;
    options.loader.unpack_5bit = unpack;
    options.loader.memory_budget = budget;
    auto engine = Engine::open(make_memory_source(bytes), options);
    engine->evaluate(engine->tokenize("Once upon a time"));
    return engine->loader_stats();
  };
  const LoaderStats packed = run(false, kUnlimitedBudget);
  const LoaderStats unpacked = run(true, kUnlimitedBudget);
  EXPECT_FALSE(packed.unpacked_5bit);
  EXPECT_TRUE(unpacked.unpacked_5bit);
  auto source = make_memory_source(bytes);
  const GgufFile file = GgufFile::parse(*source);
  uint64_t matrix_bytes = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.type == TensorType::kQ5_0) matrix_bytes += t.bytes;
  }
  ASSERT_GT(matrix_bytes, 0u);
  const uint64_t growth = unpacked.resident_bytes - packed.resident_bytes;
  EXPECT_GE(growth, matrix_bytes * 12 / 22);
  // Each unpacked tensor's room is rounded up to the buffers' 64-byte alignment.
  EXPECT_LE(growth, matrix_bytes * 12 / 22 + 64 * 100);

  // A budget that holds the model packed, not unpacked: packed, all resident.
  const uint64_t fits_packed = packed.working_bytes + packed.resident_bytes + growth / 2;
  const LoaderStats tight = run(true, fits_packed);
  EXPECT_FALSE(tight.unpacked_5bit);
  EXPECT_EQ(tight.streamed_units, 0);
  EXPECT_EQ(tight.resident_bytes, packed.resident_bytes);
  // One that holds it unpacked: unpacked.
  EXPECT_TRUE(run(true, unpacked.working_bytes + unpacked.resident_bytes + 4096).unpacked_5bit);
  // Streaming: packed.
  EXPECT_FALSE(run(true, 0).unpacked_5bit);
}

// One file of each family variant the forward pass has: biases (qwen2), Q/K
// norms, windows on 5 of 6 layers and two rope bases (gemma3), soft-caps,
// alternating windows and a tied head (gemma2), fused tensors and LongRoPE
// factors (phi3).
class FamilyStreaming : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyStreaming, EveryBackendModeAndBudgetIsBitIdentical) {
  check_every_configuration(file_bytes(std::string(SIPLLM_FIXTURES_DIR) + "/arch/" + GetParam() + ".gguf"),
                            "Once upon a time, there was a little dog. He liked to run in the park.");
}

TEST_P(FamilyStreaming, ALongPromptIsBitIdenticalInEveryConfigurationToo) {
  // At least kTiledMinQueries tokens: attention takes llama.cpp's tiled path
  // for the whole prompt, however the budget splits it into chunks.
  std::string text;
  for (int i = 0; i < 5; ++i) text += "Once upon a time, there was a little dog. He liked to run in the park. ";
  check_every_configuration(file_bytes(std::string(SIPLLM_FIXTURES_DIR) + "/arch/" + GetParam() + ".gguf"), text,
                            kTiledMinQueries);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyStreaming,
                         ::testing::Values("qwen2-Q8_0", "gemma3-Q4_K_M", "gemma2-Q8_0", "phi3-Q4_K_M"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(Streaming, LayerMajorPrefillReadsEachBlockOnceAndMatchesPerToken) {
  const std::vector<uint8_t> bytes = file_bytes(test::model_path("stories260K.gguf"));
  EngineOptions options;
  options.loader.memory_budget = 0;
  auto layer_major = Engine::open(make_memory_source(bytes), options);
  options.layer_major_prefill = false;
  auto per_token = Engine::open(make_memory_source(bytes), options);

  const std::vector<int32_t> prompt =
      layer_major->tokenize("Once upon a time, there was a girl who liked to sing songs with her cat.");
  const auto p = static_cast<uint64_t>(prompt.size());
  ASSERT_GT(p, 10u);

  const std::vector<float> a = layer_major->evaluate(prompt);
  const LoaderStats sa = layer_major->loader_stats();
  const std::vector<float> b = per_token->evaluate(prompt);
  const LoaderStats sb = per_token->loader_stats();

  EXPECT_EQ(as_bytes(a), as_bytes(b));
  // Every unit (5 blocks and the head) read exactly once...
  for (const UnitCounters& u : sa.units) EXPECT_EQ(u.loads, 1u) << u.name;
  EXPECT_EQ(sa.bytes_read, sum_unit_bytes(sa));
  // ... against P times for the per-token loop.
  for (const UnitCounters& u : sb.units) EXPECT_EQ(u.loads, p) << u.name;
  EXPECT_EQ(sb.bytes_read, p * sum_unit_bytes(sb));
}

TEST(Streaming, ChunkedPrefillStreamsEachBlockOncePerChunkAndIsBitIdentical) {
  const std::vector<uint8_t> bytes = file_bytes(test::model_path("stories260K.gguf"));
  EngineOptions options;
  options.loader.memory_budget = 0;
  auto whole = Engine::open(make_memory_source(bytes), options);
  options.prefill_chunk = 4;
  auto chunked = Engine::open(make_memory_source(bytes), options);
  const std::vector<int32_t> prompt =
      whole->tokenize("One day, a little bird flew over the big green hill and sang.");
  const int chunks = static_cast<int>((prompt.size() + 3) / 4);
  EXPECT_EQ(as_bytes(whole->evaluate(prompt, true)), as_bytes(chunked->evaluate(prompt, true)));
  const LoaderStats s = chunked->loader_stats();
  for (size_t u = 0; u + 1 < s.units.size(); ++u) EXPECT_EQ(s.units[u].loads, static_cast<uint64_t>(chunks));
}

TEST(Streaming, WholeModelBudgetReadsNothingOnTheSecondPass) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  const std::vector<int32_t> prompt = engine->tokenize("Once upon a time");
  engine->evaluate(prompt);
  EXPECT_GT(engine->loader_stats().bytes_read, 0u);
  engine->reset();
  engine->evaluate(prompt);
  EXPECT_EQ(engine->loader_stats().bytes_read, 0u);
}

TEST(Streaming, ZeroBudgetKeepsOnlyTheRingInMemory) {
  for (int buffers : {1, 2, 3}) {
    EngineOptions options;
    options.loader.memory_budget = 0;
    options.loader.n_buffers = buffers;
    auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")), options);
    test::generate_text(*engine, "Once upon a time", test::greedy(20));
    const LoaderStats s = engine->loader_stats();
    uint64_t largest = 0;
    for (const UnitCounters& u : s.units) largest = std::max(largest, u.bytes);
    EXPECT_EQ(s.resident_bytes, 0u);
    EXPECT_EQ(s.peak_weight_bytes, s.ring_bytes);
    EXPECT_LE(s.ring_bytes, static_cast<uint64_t>(buffers) * (largest + 1024));
    // Embedding rows are read one by one, never the whole table.
    EXPECT_LT(s.embedding_bytes_read, 64u * 4u * 40u);
  }
}

TEST(Streaming, BudgetTooSmallForTheRingNamesWhatItNeeds) {
  EngineOptions options;
  options.loader.memory_budget = 1000;
  try {
    Engine::open(open_file_source(test::model_path("stories260K.gguf")), options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfBudget);
    const std::string m = e.what();
    EXPECT_NE(m.find("memory budget of 1000 bytes cannot hold the prefetch ring"), std::string::npos) << m;
    EXPECT_NE(m.find("needs at least"), std::string::npos) << m;
  }
}

TEST(Streaming, ABudgetForOneUnitShrinksTheRingToOneBufferWithTheSameOutput) {
  const std::string path = test::model_path("stories260K.gguf");
  EngineOptions probe;
  probe.loader.memory_budget = 0;
  probe.prefill_chunk = 64;  // the smallest chunk a second buffer is worth
  const LoaderStats p = Engine::open(open_file_source(path), probe)->loader_stats();
  const uint64_t two_buffers = p.ring_bytes;
  EngineOptions options = probe;
  options.loader.memory_budget = p.working_bytes + two_buffers * 3 / 4;  // one buffer and a half
  auto engine = Engine::open(open_file_source(path), options);
  const LoaderStats s = engine->loader_stats();
  EXPECT_EQ(s.ring_bytes, two_buffers / 2);
  EXPECT_EQ(s.resident_units, 0);
  auto unlimited = Engine::open(open_file_source(path));
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", test::greedy(30)),
            test::generate_text(*unlimited, "Once upon a time", test::greedy(30)));
  const LoaderStats after = engine->loader_stats();
  EXPECT_LE(after.peak_weight_bytes + after.working_bytes, options.loader.memory_budget);
}

TEST(Streaming, TheBudgetCoversTheKvCacheAsItGrowsByStreamingResidentWeights) {
  // A budget that holds every weight and the working memory of a short
  // conversation: as the KV cache grows, resident units give way and stream,
  // the budget holds, and the text is the unbudgeted engine's.
  const std::string path = test::model_path("stories260K.gguf");
  EngineOptions probe;
  probe.loader.memory_budget = 0;
  const LoaderStats p = Engine::open(open_file_source(path), probe)->loader_stats();
  EngineOptions options;
  options.loader.memory_budget = p.working_bytes + Engine::open(open_file_source(path))->info().weight_bytes + 16384;
  auto engine = Engine::open(open_file_source(path), options);
  EXPECT_EQ(engine->loader_stats().streamed_units, 0);
  auto unlimited = Engine::open(open_file_source(path));
  GenerateOptions long_run = test::greedy(600);
  long_run.sampling.logit_bias[2] = -1e9f;  // no early EOS
  EXPECT_EQ(test::generate_text(*engine, "Once upon a time", long_run),
            test::generate_text(*unlimited, "Once upon a time", long_run));
  const LoaderStats s = engine->loader_stats();
  EXPECT_GT(s.streamed_units, 0);
  EXPECT_EQ(s.working_bytes, p.working_bytes - KvCache::first_page_bytes(5, 32, KvCacheType::kF16) +
                                 engine->kv_cache_bytes());
  EXPECT_LE(s.resident_bytes + s.ring_bytes + s.working_bytes, options.loader.memory_budget);
}

TEST(Streaming, AConversationTheBudgetCannotHoldIsAClearError) {
  const std::string path = test::model_path("stories260K.gguf");
  EngineOptions probe;
  probe.loader.memory_budget = 0;
  probe.prefill_chunk = 64;
  const LoaderStats p = Engine::open(open_file_source(path), probe)->loader_stats();
  EngineOptions options = probe;
  options.loader.memory_budget = p.working_bytes + p.ring_bytes / 2 + 1024;  // one ring buffer, one KV page
  auto engine = Engine::open(open_file_source(path), options);
  GenerateOptions long_run = test::greedy(400);
  long_run.sampling.logit_bias[2] = -1e9f;
  try {
    test::generate_text(*engine, "Once upon a time", long_run);
    FAIL() << "the conversation fit";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfBudget);
    EXPECT_NE(std::string(e.what()).find("more bytes for the KV cache do not fit"), std::string::npos) << e.what();
  }
  // The engine stays usable for a shorter one.
  engine->reset();
  EXPECT_FALSE(test::generate_text(*engine, "Once upon a time", test::greedy(20)).empty());
}

TEST(Streaming, PrefixReuseMatchesARunFromScratch) {
  const std::string path = test::model_path("stories260K.gguf");
  EngineOptions options;
  options.loader.memory_budget = 0;
  auto chat = Engine::open(open_file_source(path), options);

  // Turn 1.
  std::vector<int32_t> conversation = chat->tokenize("Once upon a time, there was a cat.");
  GenerationStats s1;
  std::vector<int32_t> reply1;
  s1 = chat->generate_tokens(conversation, test::greedy(12), [&](const TokenEvent& e) {
    if (e.token >= 0) reply1.push_back(e.token);
    return true;
  });
  EXPECT_EQ(s1.reused_tokens, 0);
  const size_t cached_after_turn1 = chat->cached_tokens().size();
  conversation.insert(conversation.end(), reply1.begin(), reply1.end());

  // Turn 2: the conversation so far plus new text.
  const std::vector<int32_t> more = chat->tokenize(" The cat was very happy.", false);
  conversation.insert(conversation.end(), more.begin(), more.end());
  std::vector<int32_t> reply2;
  const GenerationStats s2 = chat->generate_tokens(conversation, test::greedy(12), [&](const TokenEvent& e) {
    if (e.token >= 0) reply2.push_back(e.token);
    return true;
  });
  // Only what was not cached was prefilled.
  EXPECT_EQ(static_cast<size_t>(s2.reused_tokens), cached_after_turn1);
  EXPECT_EQ(s2.prompt_tokens - s2.reused_tokens, static_cast<int>(conversation.size() - cached_after_turn1));
  // Each block was streamed once for that prefill, not once per new token.
  EXPECT_EQ(s2.prefill_bytes_read, sum_unit_bytes(s2.loader));

  // The same conversation from scratch gives the same reply.
  auto fresh = Engine::open(open_file_source(path), options);
  std::vector<int32_t> reply_fresh;
  fresh->generate_tokens(conversation, test::greedy(12), [&](const TokenEvent& e) {
    if (e.token >= 0) reply_fresh.push_back(e.token);
    return true;
  });
  EXPECT_EQ(reply2, reply_fresh);
}

TEST(Streaming, EditingEarlierTextTruncatesTheCacheAtTheFirstDifference) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  std::vector<int32_t> tokens = engine->tokenize("Once upon a time, there was a big red ball in the garden.");
  engine->evaluate(tokens);
  std::vector<int32_t> edited = tokens;
  const size_t changed = 6;
  edited[changed] = edited[changed] == 300 ? 301 : 300;
  const std::vector<float> logits = engine->evaluate(edited);
  GenerationStats stats = engine->generate_tokens(edited, test::greedy(1), [](const TokenEvent&) { return true; });
  // generate_tokens after evaluate(edited): everything is cached but the last token.
  EXPECT_EQ(stats.reused_tokens, static_cast<int>(edited.size()) - 1);
  // And the edited evaluation equals a fresh one.
  auto fresh = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  EXPECT_EQ(as_bytes(logits), as_bytes(fresh->evaluate(edited)));
  // Reuse stops exactly at the edit.
  auto counter = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  counter->evaluate(tokens);
  stats = counter->generate_tokens(edited, test::greedy(1), [](const TokenEvent&) { return true; });
  EXPECT_EQ(stats.reused_tokens, static_cast<int>(changed));
}

TEST(Streaming, KvCacheGrowsWithTokensNotWithTheContext) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")));
  ASSERT_EQ(engine->info().context_length(), 2048);
  engine->generate_tokens({1}, test::greedy(5), [](const TokenEvent&) { return true; });
  const size_t small = engine->kv_cache_bytes();
  // 5 layers x (K and V) x one page of 256 positions x kv_dim 32 half floats.
  EXPECT_EQ(small, 5u * 2u * 256u * 32u * 2u);
  engine->reset();
  GenerateOptions options = test::greedy(600);
  options.sampling.logit_bias[2] = -1e9f;  // no early EOS
  engine->generate_tokens({1}, options, [](const TokenEvent&) { return true; });
  EXPECT_EQ(engine->kv_cache_bytes(), 3 * small);  // 600 positions: 3 pages, not 8
}

TEST(Streaming, F32KvCacheTakesTwiceTheMemoryOfF16) {
  EngineOptions options;
  options.kv_cache_type = KvCacheType::kF32;
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")), options);
  engine->generate_tokens({1}, test::greedy(5), [](const TokenEvent&) { return true; });
  EXPECT_EQ(engine->kv_cache_bytes(), 5u * 2u * 256u * 32u * sizeof(float));
}

TEST(Streaming, RingUnderRandomLatenciesMatchesSync) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ8_0);
  EngineOptions sync_options;
  sync_options.loader.mode = LoaderMode::kSync;
  sync_options.loader.memory_budget = 0;
  auto reference = Engine::open(make_memory_source(bytes), sync_options);
  const std::string expected = test::generate_text(*reference, std::vector<int32_t>{1, 50, 60, 70}, test::greedy(24));
  for (int buffers : {1, 2, 3, 5}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      for (int load_threads : {1, 3}) {
        ThrottleOptions t;
        t.latency_ms = 0.5;
        t.jitter = 1.0;
        t.seed = seed;
        EngineOptions options;
        options.loader.n_buffers = buffers;
        options.loader.load_threads = load_threads;
        options.loader.memory_budget = 0;
        options.loader.read_chunk_bytes = 1 << 16;
        auto engine = Engine::open(make_throttled_source(make_memory_source(bytes), t), options);
        EXPECT_EQ(engine->loader_stats().load_threads, load_threads);
        EXPECT_EQ(test::generate_text(*engine, std::vector<int32_t>{1, 50, 60, 70}, test::greedy(24)), expected)
            << buffers << " buffers, " << load_threads << " load threads, seed " << seed;
      }
    }
  }
}

// Unless told, the loader reads as many units side by side as the source
// asks for: one from memory or a file, two where reads wait (a throttle, the
// network); none in sync mode, where the compute thread reads.
TEST(Streaming, LoadThreadsFollowTheSourceUnlessSet) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ8_0);
  EngineOptions options;
  options.loader.memory_budget = 0;
  EXPECT_EQ(Engine::open(make_memory_source(bytes), options)->loader_stats().load_threads, 1);
  EXPECT_EQ(Engine::open(make_throttled_source(make_memory_source(bytes), ThrottleOptions{}), options)
                ->loader_stats()
                .load_threads,
            2);
  options.loader.load_threads = 3;
  EXPECT_EQ(Engine::open(make_memory_source(bytes), options)->loader_stats().load_threads, 3);
  options.loader.mode = LoaderMode::kSync;
  EXPECT_EQ(Engine::open(make_memory_source(bytes), options)->loader_stats().load_threads, 0);
  options.loader.mode = LoaderMode::kRing;
  options.loader.load_threads = -1;
  try {
    Engine::open(make_memory_source(bytes), options);
    FAIL() << "a negative load_threads was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("load_threads"), std::string::npos) << e.what();
  }
}

// Drives the loader directly in orders the transformer never uses, with
// wrong announcements, and checks every acquired unit holds the file's bytes.
class LoaderStress : public ::testing::TestWithParam<int> {};

TEST_P(LoaderStress, RandomOrdersAndWrongAnnouncementsAlwaysYieldTheRightBytes) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ4_0, 3);
  auto inner = make_memory_source(bytes);
  const GgufFile file = GgufFile::parse(*inner);
  const ModelDescription model = describe_model(file);
  ThrottleOptions t;
  t.latency_ms = 0.2;
  t.jitter = 1.0;
  auto source = make_throttled_source(make_memory_source(bytes), t);
  LoaderOptions options;
  options.n_buffers = 3;
  options.load_threads = GetParam();
  options.memory_budget = 0;
  options.read_chunk_bytes = 1 << 16;
  LayerLoader loader(*source, model, MemoryPlan::for_loader(model, options), options);
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>(state >> 33);
  };
  const int units = loader.n_units();
  for (int round = 0; round < 300; ++round) {
    if (next() % 3 == 0) {
      std::vector<int> plan;
      for (int k = 0; k < 4; ++k) plan.push_back(next() % units);
      loader.announce(plan);
    }
    loader.set_continuation(next() % 2 == 0);
    const int unit = next() % units;
    const UnitWeights& w = loader.acquire(unit);
    // Every matrix of the unit holds the file's bytes, in four-row tiles.
    for (const TensorSlice& slice : model.units[static_cast<size_t>(unit)].tensors) {
      if (slice.spec->is_vector()) continue;
      const WeightMatrix& m = w.*slice.spec->matrices[0].matrix;
      std::vector<uint8_t> expected(bytes.begin() + static_cast<long>(slice.offset()),
                                    bytes.begin() + static_cast<long>(slice.offset() + slice.bytes()));
      WeightMatrix row_major = m;
      row_major.tile_block_bytes = 0;
      row_major.data = expected.data();
      ASSERT_TRUE(tile_rows(row_major, expected.data()).tiled());
      ASSERT_TRUE(m.tiled());
      ASSERT_EQ(std::memcmp(m.data, expected.data(), expected.size()), 0)
          << "unit " << unit << " round " << round << " tensor " << slice.tensor->name;
    }
    loader.release(unit);
  }
}

INSTANTIATE_TEST_SUITE_P(LoadThreads, LoaderStress, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_load_threads";
                         });

// A slow source (2 MB/s: every 64 KiB piece takes ~33 ms) that, once armed,
// cancels `engine` from inside the read that reaches `tensor`.
struct CancellingSource {
  std::atomic<Engine*> engine{nullptr};
  std::atomic<bool> armed{false};
  std::atomic<bool> cancelled{false};
  std::atomic<uint64_t> reads_after_cancel{0};

  std::unique_ptr<WeightSource> make(const std::vector<uint8_t>& bytes, const char* tensor) {
    auto probe_source = make_memory_source(bytes);
    const uint64_t cancel_offset = GgufFile::parse(*probe_source).find_tensor(tensor)->offset;
    ThrottleOptions slow;
    slow.bandwidth_mb_per_s = 2;
    return std::make_unique<HookedSource>(
        make_throttled_source(make_memory_source(bytes), slow), [this, cancel_offset](uint64_t offset, size_t length) {
          if (cancelled) ++reads_after_cancel;
          if (armed && offset <= cancel_offset && cancel_offset < offset + length) {
            armed = false;
            cancelled = true;
            engine.load()->cancel();
          }
        });
  }
};

TEST(Streaming, CancellationMidStreamReturnsAndTheEngineStaysUsable) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kF32);
  // Cancelled from inside the loader as the prefetch thread reaches block 2.
  CancellingSource cancelling;
  auto source = cancelling.make(bytes, "blk.2.ffn_up.weight");
  EngineOptions options;
  options.loader.memory_budget = 0;
  options.loader.read_chunk_bytes = 1 << 16;
  auto engine = Engine::open(std::move(source), options);
  cancelling.engine = engine.get();
  cancelling.armed = true;  // once the header has been read
  const GenerationStats stats = engine->generate_tokens({1, 20, 30, 40}, test::greedy(10),
                                                        [](const TokenEvent&) { return true; });
  EXPECT_EQ(stats.stop_reason, StopReason::kCancelled);
  EXPECT_EQ(stats.generated_tokens, 0);
  EXPECT_LT(stats.loader.bytes_read, sum_unit_bytes(stats.loader));  // not even one pass
  EXPECT_LE(cancelling.reads_after_cancel.load(), 2u);  // the piece in flight, at most
  EXPECT_TRUE(engine->cached_tokens().empty());

  // The next request works and matches an engine that was never cancelled.
  auto clean = Engine::open(make_memory_source(bytes), options);
  EXPECT_EQ(test::generate_text(*engine, std::vector<int32_t>{1, 20, 30, 40}, test::greedy(8)),
            test::generate_text(*clean, std::vector<int32_t>{1, 20, 30, 40}, test::greedy(8)));
}

// A cancel that lands while the loader works ahead and no request runs (the
// loads that follow opening a model, a warm-up's): the unit whose load it cut
// short is loaded again by the next request, which used to get the
// cancellation as its error.
TEST(Streaming, CancellationWhileLoadingAheadLeavesTheUnitLoadableAgain) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kF32);
  CancellingSource cancelling;
  auto source = cancelling.make(bytes, "blk.2.ffn_up.weight");
  EngineOptions options;
  options.loader.read_chunk_bytes = 1 << 16;
  options.loader.prefetch_on_open = true;
  auto engine = Engine::open(std::move(source), options);
  cancelling.engine = engine.get();
  cancelling.armed = true;  // block 2 comes later
  while (!cancelling.cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The loader sees the cancel before its next piece, ~33 ms on. The next
  // request clears the cancel: made sooner, it lets the load go on, and
  // this test checks nothing (it cannot fail for that).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  options.loader.prefetch_on_open = false;
  auto clean = Engine::open(make_memory_source(bytes), options);
  EXPECT_EQ(test::generate_text(*engine, std::vector<int32_t>{1, 20, 30, 40}, test::greedy(8)),
            test::generate_text(*clean, std::vector<int32_t>{1, 20, 30, 40}, test::greedy(8)));
}

TEST(Streaming, ReadErrorMidStreamNamesBlockAndOffsetAndEngineRecovers) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ8_0);
  uint64_t bad_offset = 0;
  {
    auto probe = make_memory_source(bytes);
    bad_offset = GgufFile::parse(*probe).find_tensor("blk.3.ffn_gate.weight")->offset;
  }
  for (LoaderMode mode : {LoaderMode::kSync, LoaderMode::kRing}) {
    std::atomic<bool> broken{false};  // breaks after the header is read
    auto source = std::make_unique<HookedSource>(make_memory_source(bytes), [&](uint64_t offset, size_t length) {
      if (broken && offset <= bad_offset && bad_offset < offset + length) {
        throw Error(ErrorKind::kIo, "disk.gguf: read failed at offset " + std::to_string(offset));
      }
    });
    EngineOptions options;
    options.loader.mode = mode;
    options.loader.memory_budget = 0;
    auto engine = Engine::open(std::move(source), options);
    broken = true;
    try {
      engine->generate_tokens({1, 5, 6}, test::greedy(4), [](const TokenEvent&) { return true; });
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      const std::string m = e.what();
      EXPECT_NE(m.find("block 3"), std::string::npos) << m;
      EXPECT_NE(m.find("offset"), std::string::npos) << m;
    }
    broken = false;
    auto clean = Engine::open(make_memory_source(bytes), options);
    EXPECT_EQ(test::generate_text(*engine, std::vector<int32_t>{1, 5, 6}, test::greedy(6)),
              test::generate_text(*clean, std::vector<int32_t>{1, 5, 6}, test::greedy(6)));
  }
}

TEST(Streaming, FileShrinkingUnderTheEngineIsAShortReadError) {
  const std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kF32);
  const TempFile file(bytes, "shrinking.gguf");
  EngineOptions options;
  options.loader.memory_budget = 0;
  auto engine = Engine::open(open_file_source(file.path()), options);
  ASSERT_EQ(::truncate(file.path().c_str(), static_cast<off_t>(bytes.size() / 2)), 0);
  try {
    engine->evaluate({1, 2, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unexpected end of file"), std::string::npos) << m;
    EXPECT_NE(m.find("block "), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
  }
  file.rewrite(bytes);
  auto clean = Engine::open(make_memory_source(bytes), options);
  EXPECT_EQ(as_bytes(engine->evaluate({1, 2, 3})), as_bytes(clean->evaluate({1, 2, 3})));
}

}  // namespace
}  // namespace sipllm

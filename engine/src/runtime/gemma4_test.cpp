// Gemma 4 on llama.cpp's fixture (tests/fixtures/arch/gemma4-*.gguf, the E2B
// layout scaled down: layers 0-3 and 5-8 slide over 8 positions with heads of
// 256, layers 4 and 9 attend fully with heads of 512 and proportional RoPE,
// layers 5-9 reuse the keys and values of layers 3 and 4, per-layer inputs
// of 64): what the description makes of it, how its per-layer token
// embeddings are read, and that every loader mode, budget and prefill chunk
// gives the same logits. (Agreement with llama.cpp's logits:
// tests/reference/check_arch_logits.sh.)
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <utility>

#include "model/gguf.h"
#include "model/model_description.h"
#include "sipllm/engine.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::string fixture(const std::string& quant) {
  return std::string(SIPLLM_FIXTURES_DIR) + "/arch/gemma4-" + quant + ".gguf";
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  const std::string s = test::read_file(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

TEST(Gemma4, TheDescription) {
  auto source = open_file_source(fixture("Q8_0"));
  const GgufFile file = GgufFile::parse(*source);
  const ModelDescription d = describe_model(file, 512);
  ASSERT_EQ(d.shape.n_layers, 10);
  EXPECT_EQ(d.shape.head_dim, 512);
  EXPECT_EQ(d.shape.head_dim_swa, 256);
  EXPECT_EQ(d.shape.hidden_dim, 1024);  // the widest layer's
  EXPECT_EQ(d.shape.n_embd_per_layer, 64);
  EXPECT_EQ(d.shape.attention_scale, 1.0f);
  EXPECT_EQ(d.shape.final_softcap, 30.0f);
  for (int l = 0; l < 10; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const LayerShape& layer = d.layers[static_cast<size_t>(l)];
    const bool full = l == 4 || l == 9;
    EXPECT_EQ(layer.sliding_window, !full);
    EXPECT_EQ(layer.head_dim, full ? 512 : 256);
    EXPECT_EQ(layer.hidden_dim, l < 5 ? 512 : 1024);
    // The last five reuse layer 3's (sliding) or layer 4's (full) and cache nothing.
    EXPECT_EQ(layer.kv_source, l < 5 ? l : full ? 4 : 3);
    EXPECT_EQ(layer.kv_dim, l < 5 ? layer.head_dim : 0);
    const RotarySetup& rotary = d.rotary[static_cast<size_t>(layer.rotary)];
    EXPECT_EQ(rotary.dims, full ? 512 : 256);
    EXPECT_EQ(rotary.freq_base, full ? 1e6f : 1e4f);
    EXPECT_EQ(rotary.factors, full);  // proportional RoPE on the full layers only
    // A shared layer's unit reads no key or value projection.
    std::set<std::string> names;
    for (const TensorSlice& slice : d.units[static_cast<size_t>(l)].tensors) names.insert(slice.tensor->name);
    const std::string blk = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(names.count(blk + "attn_k.weight"), l < 5 ? 1u : 0u);
    EXPECT_EQ(names.count(blk + "proj.weight"), 1u);
    // Block 0 holds the projection of the embedding into per-layer inputs.
    EXPECT_EQ(names.count("per_layer_model_proj.weight"), l == 0 ? 1u : 0u);
    EXPECT_EQ(names.count("per_layer_proj_norm.weight"), l == 0 ? 1u : 0u);
  }
  // The per-layer token embeddings are no unit's: read by row.
  ASSERT_NE(d.per_layer_token_embd, nullptr);
  EXPECT_EQ(d.per_layer_token_embd->dims, (std::vector<uint64_t>{640, 512}));
  for (const UnitTensors& unit : d.units) {
    for (const TensorSlice& slice : unit.tensors) EXPECT_NE(slice.tensor, d.per_layer_token_embd) << unit.name;
  }
  EXPECT_EQ(d.layer_kv_dims(), (std::vector<int>{256, 256, 256, 256, 512, 0, 0, 0, 0, 0}));
}

// A source that records the reads falling in one byte range.
class RecordingSource final : public WeightSource {
 public:
  RecordingSource(std::unique_ptr<WeightSource> inner, uint64_t first, uint64_t end)
      : inner_(std::move(inner)), first_(first), end_(end) {}
  uint64_t size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }
  void read(uint64_t offset, void* dst, size_t length) override {
    if (offset < end_ && offset + length > first_) {
      std::lock_guard<std::mutex> lock(mutex_);
      reads_.push_back({offset, length});
    }
    inner_->read(offset, dst, length);
  }
  std::vector<std::pair<uint64_t, size_t>> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(reads_, {});
  }

 private:
  std::unique_ptr<WeightSource> inner_;
  uint64_t first_, end_;
  std::mutex mutex_;
  std::vector<std::pair<uint64_t, size_t>> reads_;
};

TEST(Gemma4, PerLayerEmbeddingsAreReadByRowOncePerDistinctToken) {
  const std::vector<uint8_t> bytes = file_bytes(fixture("Q8_0"));
  auto probe = make_memory_source(bytes);
  const GgufFile file = GgufFile::parse(*probe);
  const GgufTensorInfo* table = file.find_tensor("per_layer_token_embd.weight");
  ASSERT_NE(table, nullptr);
  const uint64_t row_bytes = table->bytes / 512;  // 640 values in Q8_0
  EXPECT_EQ(row_bytes, 680u);
  for (const uint64_t budget : {kUnlimitedBudget, uint64_t{0}}) {
    SCOPED_TRACE(budget == 0 ? "everything streams" : "everything resident");
    auto recording = std::make_unique<RecordingSource>(make_memory_source(bytes), table->offset,
                                                       table->offset + table->bytes);
    RecordingSource* reads = recording.get();
    EngineOptions options;
    options.loader.memory_budget = budget;
    auto engine = Engine::open(std::move(recording), options);
    // 13 tokens, 12 of them distinct ("a" twice).
    const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 383, 286, 261, 376, 352, 414, 430, 309};
    reads->take();
    engine->evaluate(prompt);
    std::vector<std::pair<uint64_t, size_t>> got = reads->take();
    std::set<int32_t> distinct(prompt.begin(), prompt.end());
    ASSERT_EQ(got.size(), distinct.size());
    std::sort(got.begin(), got.end());
    size_t k = 0;
    for (int32_t token : distinct) {
      EXPECT_EQ(got[k].first, table->offset + static_cast<uint64_t>(token) * row_bytes);
      EXPECT_EQ(got[k].second, row_bytes);
      ++k;
    }
    // A generated token: its one row.
    std::vector<int32_t> longer = prompt;
    longer.push_back(19);
    engine->evaluate(longer);
    got = reads->take();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].first, table->offset + 19 * row_bytes);
    // A token seen before: its row is still in memory (RecentRows), and so
    // are the prompt's when it runs again.
    longer.push_back(403);
    engine->evaluate(longer);
    EXPECT_TRUE(reads->take().empty());
    engine->reset();
    engine->evaluate(prompt);
    EXPECT_TRUE(reads->take().empty());
  }
}

// Logits of every position of a prompt longer than the tiled attention's
// threshold, then of three decode steps.
std::vector<std::vector<float>> transcript(Engine& engine, const std::vector<int32_t>& prompt) {
  std::vector<std::vector<float>> out;
  out.push_back(engine.evaluate(prompt, /*all_positions=*/true));
  std::vector<int32_t> tokens = prompt;
  for (int step = 0; step < 3; ++step) {
    const std::vector<float>& last = out.back();
    const auto vocab = static_cast<ptrdiff_t>(engine.info().n_vocab());
    tokens.push_back(static_cast<int32_t>(std::max_element(last.end() - vocab, last.end()) - (last.end() - vocab)));
    out.push_back(engine.evaluate(tokens));
  }
  return out;
}

TEST(Gemma4, EveryLoaderModeBudgetAndChunkGivesTheSameLogits) {
  for (const char* quant : {"Q8_0", "Q4_K_M"}) {
    SCOPED_TRACE(quant);
    const std::vector<uint8_t> bytes = file_bytes(fixture(quant));
    std::string text;
    for (int i = 0; i < 5; ++i) text += "Once upon a time, there was a little robot. It liked to run in the park. ";
    EngineOptions reference_options;
    reference_options.loader.mode = LoaderMode::kSync;
    auto reference = Engine::open(make_memory_source(bytes), reference_options);
    const std::vector<int32_t> prompt = reference->tokenize(text);
    ASSERT_GT(prompt.size(), 64u);  // the tiled path, and windows of 8 well filled
    const std::vector<std::vector<float>> expected = transcript(*reference, prompt);
    struct Config {
      LoaderMode mode;
      uint64_t budget;
      int chunk;
    };
    for (const Config& c : {Config{LoaderMode::kRing, kUnlimitedBudget, 512}, Config{LoaderMode::kRing, 0, 512},
                            Config{LoaderMode::kSync, 0, 512}, Config{LoaderMode::kRing, kUnlimitedBudget, 5},
                            Config{LoaderMode::kSync, 0, 3}}) {
      SCOPED_TRACE(std::string(c.mode == LoaderMode::kSync ? "sync" : "ring") +
                   (c.budget == 0 ? ", streaming" : ", resident") + ", chunk " + std::to_string(c.chunk));
      EngineOptions options;
      options.loader.mode = c.mode;
      options.loader.memory_budget = c.budget;
      options.prefill_chunk = c.chunk;
      options.threads = 2;
      auto engine = Engine::open(make_memory_source(bytes), options);
      const std::vector<std::vector<float>> got = transcript(*engine, prompt);
      ASSERT_EQ(got.size(), expected.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i] == expected[i]) << (i == 0 ? "prefill" : "decode");
    }
  }
}

}  // namespace
}  // namespace sipllm

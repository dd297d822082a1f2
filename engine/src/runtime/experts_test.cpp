// Mixtures of experts (qwen3moe, qwen35moe, lfm2moe): the routing reaches
// every expert, each expert's rows are its own, bad descriptions are named.
// Their logits against llama.cpp's are the EngineVsLlamaCpp tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::vector<uint8_t> fixture_bytes(const std::string& name) {
  const std::string text = test::read_file(std::string(SIPLLM_SOURCE_DIR) + "/tests/fixtures/arch/" + name);
  return std::vector<uint8_t>(text.begin(), text.end());
}

// On one thread, loading included: what it checks is arithmetic and
// addressing, which the sanitizer runs other than ThreadSanitizer's cover.
std::vector<float> logits_of(const std::vector<uint8_t>& bytes, const std::vector<int32_t>& prompt) {
  EngineOptions options;
  options.threads = 1;
  options.loader.mode = LoaderMode::kSync;
  return Engine::open(make_memory_source(bytes), options)->evaluate(prompt, /*all_positions=*/true);
}

// For every expert of every mixture-of-experts layer, the file with that
// expert's down matrix zeroed (a Q4_K, Q5_K, Q6_K or Q8_0 block whose
// half-float scales are 0 gives zeros) must
// give other logits for a prompt of 256 tokens: some position chose the
// expert, and the rows read for it are its own. An engine that read every
// expert's rows from the first expert's would pass the others unchanged.
// (The fixtures' 13-token prompt leaves some experts unchosen, and 64
// tokens leave two of qwen3moe's last layer.)
TEST(Experts, EveryExpertIsReachedBySomeTokenAndReadFromItsOwnRows) {
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 256; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 37 + i / 7) % 500));
  for (const char* name : {"qwen3moe-Q4_K_M.gguf", "qwen35moe-Q4_K_M.gguf", "lfm2moe-Q4_K_M.gguf"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = fixture_bytes(name);
    const std::vector<float> expected = logits_of(bytes, prompt);
    auto source = make_memory_source(bytes);
    const GgufFile file = GgufFile::parse(*source);
    const ModelInfo info = Engine::open(make_memory_source(bytes))->info();
    const auto experts = static_cast<uint64_t>(info.hyperparameter("n_experts"));
    ASSERT_GT(experts, 1u);
    int layers_checked = 0;
    for (int l = 0; l < info.n_layers(); ++l) {
      const GgufTensorInfo* down = file.find_tensor("blk." + std::to_string(l) + ".ffn_down_exps.weight");
      if (down == nullptr) continue;  // a dense layer (lfm2moe's first two)
      ++layers_checked;
      ASSERT_TRUE(down->type == TensorType::kQ4_K || down->type == TensorType::kQ5_K ||
                  down->type == TensorType::kQ6_K || down->type == TensorType::kQ8_0);
      const uint64_t per_expert = down->bytes / experts;
      for (uint64_t e = 0; e < experts; ++e) {
        std::vector<uint8_t> changed = bytes;
        const uint64_t at = down->offset + e * per_expert;
        std::fill_n(changed.begin() + static_cast<std::ptrdiff_t>(at), per_expert, 0);
        EXPECT_NE(logits_of(changed, prompt), expected) << "layer " << l << " expert " << e;
      }
    }
    EXPECT_GE(layers_checked, 4);
  }
}

// Experts are units of their own: with nothing kept in memory, a pass over
// one position reads each block without its experts, the head, and in each
// expert layer only the expert_used_count experts the position chose; the
// same logits as with everything resident.
TEST(Experts, OnlyTheChosenExpertsAreRead) {
  for (const char* name : {"qwen3moe-Q4_K_M.gguf", "lfm2moe-Q4_K_M.gguf"}) {
    SCOPED_TRACE(name);
    const std::vector<uint8_t> bytes = fixture_bytes(name);
    EngineOptions options;
    options.loader.memory_budget = 0;
    options.loader.mode = LoaderMode::kSync;
    auto streamed = Engine::open(make_memory_source(bytes), options);
    const std::vector<float> logits = streamed->evaluate({1});
    const LoaderStats stats = streamed->loader_stats();
    // Blocks and head whole; per expert layer, its chosen experts (the
    // experts of one layer are as large as each other).
    const auto used = static_cast<uint64_t>(streamed->info().hyperparameter("n_experts_used"));
    uint64_t expected = 0;
    for (const UnitCounters& unit : stats.units) {
      if (unit.name.find(" expert ") == std::string::npos) {
        expected += unit.bytes;
      } else if (unit.name.size() > 9 && unit.name.compare(unit.name.size() - 9, 9, " expert 0") == 0) {
        expected += used * unit.bytes;
      }
    }
    EXPECT_EQ(stats.bytes_read, expected);
    EXPECT_LT(stats.bytes_read, streamed->info().weight_bytes);
    std::printf("%s: %llu bytes read for one position of %llu bytes of weights\n", name,
                static_cast<unsigned long long>(stats.bytes_read),
                static_cast<unsigned long long>(streamed->info().weight_bytes));
    EXPECT_EQ(Engine::open(make_memory_source(bytes))->evaluate({1}), logits);
  }
}

GgufWriter moe_writer(const std::string& family) { return test::random_family_writer(family); }

TEST(Experts, BadDescriptionsAreNamed) {
  const auto refused = [](GgufWriter writer, ErrorKind kind, const std::string& words) {
    const Error e = test::expect_error([&] { Engine::open(make_memory_source(writer.to_bytes())); });
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  };
  GgufWriter writer = moe_writer("qwen3moe");
  EXPECT_NO_THROW(Engine::open(make_memory_source(writer.to_bytes())));
  writer.set_uint32("qwen3moe.expert_used_count", 5);  // of 4
  refused(writer, ErrorKind::kFormat, "qwen3moe.expert_used_count 5 and qwen3moe.expert_count 4");
  writer = moe_writer("qwen3moe");
  writer.set_uint32("qwen3moe.expert_count", 8);  // the tensors hold 4
  refused(writer, ErrorKind::kFormat, "tensor 'blk.0.ffn_gate_inp.weight' has shape");
  writer = moe_writer("qwen3moe");
  writer.set_uint32("qwen3moe.expert_feed_forward_length", 80);  // the tensors' experts are 160 wide
  refused(writer, ErrorKind::kFormat, "ffn_gate_exps.weight' has shape");
  writer = moe_writer("lfm2moe");
  writer.set_uint32("lfm2moe.expert_gating_func", 3);
  refused(writer, ErrorKind::kUnsupported, "lfm2moe.expert_gating_func 3");
  writer = moe_writer("qwen35moe");
  writer.set_uint32("qwen35moe.leading_dense_block_count", 9);
  refused(writer, ErrorKind::kFormat, "leading_dense_block_count 9 is more than the 4 layers");
  // A dense family's file with experts is refused, not run without them.
  writer = test::random_family_writer("qwen3");
  writer.set_uint32("qwen3.expert_count", 4);
  refused(writer, ErrorKind::kUnsupported, "mixture-of-experts qwen3 models");
}

}  // namespace
}  // namespace sipllm

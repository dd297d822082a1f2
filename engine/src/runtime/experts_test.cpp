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
#include "model/model_description.h"
#include "runtime/memory_plan.h"
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

// Under a budget that holds the blocks, the head and a quarter of the
// experts, the experts kept after a prompt are those most of its positions
// chose (loading each expert in turn, a kept expert gives way to one chosen
// by more positions), whatever their layer; the same prompt again reads
// only the others, none of them twice. The logits are those of the whole
// model in memory.
TEST(Experts, APromptKeepsTheExpertsMostOfItsPositionsChose) {
  const std::vector<uint8_t> bytes = fixture_bytes("qwen3moe-Q4_K_M.gguf");
  std::vector<int32_t> prompt = {1};
  for (int i = 1; i < 48; ++i) prompt.push_back(static_cast<int32_t>(3 + (i * 37 + i / 7) % 500));
  EngineOptions options;
  options.threads = 1;
  options.loader.mode = LoaderMode::kSync;
  auto whole = Engine::open(make_memory_source(bytes), options);
  const std::vector<float> expected = whole->evaluate(prompt);
  const LoaderStats everything = whole->loader_stats();

  auto source = make_memory_source(bytes);
  const GgufFile file = GgufFile::parse(*source);
  const ModelDescription model = describe_model(file);
  const int n_experts = model.n_units() - model.first_expert;
  const MemoryPlan unlimited = MemoryPlan::make(model, options, 1);
  uint64_t expert_bytes = 0;  // the largest (Q4_K_M's ffn_down is Q6_K in some layers, Q4_K in others)
  for (int u = model.first_expert; u < model.n_units(); ++u) {
    expert_bytes = std::max<uint64_t>(expert_bytes, unlimited.units[static_cast<size_t>(u)].buffer_bytes);
  }
  const int kept = n_experts / 4;
  uint64_t budget = unlimited.working.total() + unlimited.ring_buffer_bytes + kept * expert_bytes + expert_bytes / 2;
  for (int u = 0; u < model.first_expert; ++u) budget += unlimited.units[static_cast<size_t>(u)].buffer_bytes;
  options.loader.memory_budget = budget;
  const MemoryPlan plan = MemoryPlan::make(model, options, 1);
  ASSERT_EQ(plan.kept_expert_buffers, kept);
  for (int u = 0; u < model.first_expert; ++u) ASSERT_TRUE(plan.units[static_cast<size_t>(u)].resident) << u;

  auto engine = Engine::open(make_memory_source(bytes), options);
  EXPECT_EQ(engine->evaluate(prompt), expected);
  const LoaderStats first = engine->loader_stats();
  uint64_t least_kept = UINT64_MAX, most_other = 0, most_kept = 0;
  uint64_t chosen_read = 0, chosen_not_kept_read = 0;
  int kept_now = 0;
  for (int u = model.first_expert; u < model.n_units(); ++u) {
    const UnitCounters& unit = first.units[static_cast<size_t>(u)];
    EXPECT_EQ(unit.uses, everything.units[static_cast<size_t>(u)].uses) << unit.name;
    if (unit.uses > 0) chosen_read += unit.bytes;
    if (unit.uses > 0 && !unit.resident) chosen_not_kept_read += unit.bytes;
    if (unit.resident) {
      ++kept_now;
      least_kept = std::min(least_kept, unit.uses);
      most_kept = std::max(most_kept, unit.uses);
    } else {
      most_other = std::max(most_other, unit.uses);
    }
  }
  EXPECT_EQ(kept_now, kept);
  EXPECT_GE(least_kept, most_other);
  EXPECT_GT(most_kept, most_other) << "the prompt should choose some experts more than others";
  uint64_t others_read = 0;
  for (int u = 0; u < model.first_expert; ++u) others_read += first.units[static_cast<size_t>(u)].bytes;
  EXPECT_EQ(first.bytes_read, others_read + chosen_read) << "every unit but the unchosen experts, once";

  engine->reset();
  EXPECT_EQ(engine->evaluate(prompt), expected);
  const LoaderStats second = engine->loader_stats();  // this request's
  EXPECT_EQ(second.bytes_read, chosen_not_kept_read);
  EXPECT_EQ(second.resident_hits, static_cast<uint64_t>(model.first_expert + kept));
}

// As the conversation's KV cache grows within the budget, the kept
// experts' buffers give way first (the blocks and the head stay resident),
// the budget holds, and the text is the unbudgeted engine's.
TEST(Experts, KeptExpertsGiveWayFirstAsTheKvCacheGrows) {
  const std::vector<uint8_t> bytes = fixture_bytes("qwen3moe-Q4_K_M.gguf");
  EngineOptions probe;
  probe.loader.memory_budget = 0;
  auto streamed = Engine::open(make_memory_source(bytes), probe);
  const LoaderStats p = streamed->loader_stats();
  const ModelInfo info = streamed->info();
  const auto n_experts = static_cast<int>(info.hyperparameter("n_experts")) * info.n_layers();
  uint64_t others = 0, expert_bytes = 0;
  for (const UnitCounters& unit : p.units) {
    if (unit.name.find(" expert ") == std::string::npos) {
      others += unit.memory_bytes;
    } else {
      expert_bytes = std::max(expert_bytes, unit.memory_bytes);
    }
  }
  EngineOptions options;
  options.loader.memory_budget = p.working_bytes + p.ring_bytes + others + expert_bytes * (n_experts / 2);
  auto engine = Engine::open(make_memory_source(bytes), options);
  const auto count_kept = [&](const LoaderStats& s) {
    int blocks = 0, experts = 0;
    for (const UnitCounters& unit : s.units) {
      if (unit.resident) ++(unit.name.find(" expert ") == std::string::npos ? blocks : experts);
    }
    return std::make_pair(blocks, experts);
  };
  GenerateOptions long_run = test::greedy(300);
  long_run.sampling.logit_bias[info.eos] = -1e9f;  // no early end
  const std::string text = test::generate_text(*engine, "Once upon a time", long_run);
  EXPECT_EQ(text, test::generate_text(*Engine::open(make_memory_source(bytes)), "Once upon a time", long_run));
  const LoaderStats s = engine->loader_stats();
  const auto [blocks, experts] = count_kept(s);
  EXPECT_EQ(blocks, static_cast<int>(s.units.size()) - n_experts) << "every block and the head stay resident";
  EXPECT_GT(experts, 0);
  EXPECT_LT(s.resident_bytes - others, expert_bytes * static_cast<uint64_t>(n_experts / 2))
      << "some kept experts' buffers gave way";
  EXPECT_LE(s.resident_bytes + s.ring_bytes + s.working_bytes, options.loader.memory_budget);
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

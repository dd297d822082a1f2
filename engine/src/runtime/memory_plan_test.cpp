// MemoryPlan: what the budget holds, decided once; the engine's loader
// executes it and its stats report it.
#include "runtime/memory_plan.h"

#include <gtest/gtest.h>

#include <string>

#include "model/gguf.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "test_support.h"

namespace sipllm {
namespace {

// A generated Q4_K model, parsed and described.
struct Generated {
  std::vector<uint8_t> bytes = test::random_llama_bytes("tiny", TensorType::kQ4_K, 4);
  std::unique_ptr<WeightSource> source = make_memory_source(bytes);
  GgufFile file = GgufFile::parse(*source);
  ModelDescription model = describe_model(file);
};

uint64_t planned_bytes(const MemoryPlan& plan, const ModelDescription& model) {
  uint64_t bytes = plan.working.total();
  if (plan.any_streamed()) bytes += static_cast<uint64_t>(plan.ring_buffers) * plan.ring_buffer_bytes;
  for (const UnitPlan& u : plan.units) bytes += u.resident ? u.buffer_bytes : 0;
  bytes += static_cast<uint64_t>(plan.kept_expert_buffers) * plan.kept_expert_bytes;
  if (plan.embedding_resident) bytes += model.token_embd->bytes;
  return bytes;
}

TEST(MemoryPlan, EveryBudgetFromTheSmallestToTheWholeModelHoldsWhatItPlans) {
  const Generated o;
  EngineOptions options;
  options.prefill_chunk = 256;
  const MemoryPlan unlimited = MemoryPlan::make(o.model, options, 2);
  EXPECT_FALSE(unlimited.any_streamed());
  EXPECT_EQ(unlimited.prefill_chunk, 256);
  const uint64_t whole = planned_bytes(unlimited, o.model);

  int previous_resident = -1;
  int previous_chunk = 0;
  uint64_t smallest = 0;
  for (uint64_t budget = whole; budget > 0; budget = budget * 7 / 8) {
    options.loader.memory_budget = budget;
    MemoryPlan plan;
    try {
      plan = MemoryPlan::make(o.model, options, 2);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kOutOfBudget);
      EXPECT_NE(std::string(e.what()).find("needs at least"), std::string::npos) << e.what();
      smallest = budget;
      break;
    }
    EXPECT_LE(planned_bytes(plan, o.model), budget) << "budget " << budget;
    EXPECT_GE(plan.ring_buffers, 1);
    EXPECT_LE(plan.prefill_chunk, 256);
    int resident = 0;
    for (const UnitPlan& u : plan.units) resident += u.resident ? 1 : 0;
    // A smaller budget never keeps more, for the same prefill chunk (a
    // smaller chunk frees activations that weights may then take).
    if (plan.prefill_chunk == previous_chunk) EXPECT_LE(resident, previous_resident) << "budget " << budget;
    previous_resident = resident;
    previous_chunk = plan.prefill_chunk;
  }
  EXPECT_GT(smallest, 0u) << "some budget must be too small for one unit beside the working memory";
  EXPECT_EQ(previous_resident, 0) << "the smallest budgets that fit stream every unit";
}

TEST(MemoryPlan, TheEngineExecutesItAndReportsIt) {
  const Generated o;
  for (const uint64_t budget : {kUnlimitedBudget, uint64_t{0}, o.model.weight_bytes() / 2 + (4u << 20)}) {
    EngineOptions options;
    options.threads = 2;
    options.prefill_chunk = 128;
    options.loader.memory_budget = budget;
    const MemoryPlan plan = MemoryPlan::make(o.model, options, 2);
    auto engine = Engine::open(make_memory_source(o.bytes), options);
    const LoaderStats stats = engine->loader_stats();
    int resident = 0;
    for (size_t u = 0; u < plan.units.size(); ++u) {
      EXPECT_EQ(stats.units[u].resident, plan.units[u].resident) << "unit " << u << " budget " << budget;
      EXPECT_EQ(stats.units[u].memory_bytes, plan.units[u].buffer_bytes);
      resident += plan.units[u].resident ? 1 : 0;
    }
    EXPECT_EQ(stats.resident_units, resident);
    EXPECT_EQ(stats.streamed_units, static_cast<int>(plan.units.size()) - resident);
    EXPECT_EQ(stats.working_bytes, plan.working.total());
    EXPECT_EQ(stats.activation_bytes, plan.working.activations);
    EXPECT_EQ(stats.prefill_chunk, plan.prefill_chunk);
    EXPECT_EQ(stats.unpacked_5bit, plan.unpack_5bit);
    EXPECT_EQ(stats.ring_bytes, plan.any_streamed() ? plan.ring_buffers * plan.ring_buffer_bytes : 0u);
  }
}

}  // namespace
}  // namespace sipllm

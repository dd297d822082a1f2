// Sliding-window layers keep only the keys their window needs (a ring in the
// KV cache), and nothing about that changes a single bit of the output.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sipllm/engine.h"
#include "test_support.h"

namespace sipllm {
namespace {

// gemma3-Q4_K_M: a window of 8 on layers 0-4, layer 5 global, 256-wide
// embeddings, 2 KV heads of 64.
std::string gemma3_fixture() { return std::string(SIPLLM_FIXTURES_DIR) + "/arch/gemma3-Q4_K_M.gguf"; }

std::string as_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::vector<int32_t> long_sequence(Engine& engine, int n) {
  std::vector<int32_t> tokens = {1};
  for (int i = 1; i < n; ++i) tokens.push_back(3 + (i * 37) % 500);
  (void)engine;
  return tokens;
}

TEST(SlidingWindow, ARingOfWindowPlusChunkGivesTheSameBitsAsKeepingEverything) {
  // Engine A runs with prefill chunks of 2 (each sliding layer keeps 9
  // positions and wraps many times), one token at a time; engine B runs the
  // whole sequence in one chunk, so nothing wraps. Every position's logits
  // agree to the bit.
  EngineOptions small_chunks;
  small_chunks.prefill_chunk = 2;
  auto a = Engine::open(open_file_source(gemma3_fixture()), small_chunks);
  auto b = Engine::open(open_file_source(gemma3_fixture()));
  const std::vector<int32_t> tokens = long_sequence(*a, 60);
  const std::vector<float> all = b->evaluate(tokens, /*all_positions=*/true);
  const size_t vocab = all.size() / tokens.size();
  for (size_t n = 5; n <= tokens.size(); n += 5) {
    const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + static_cast<long>(n));
    const std::vector<float> last = a->evaluate(prefix);
    const std::vector<float> expected(all.begin() + static_cast<long>((n - 1) * vocab),
                                      all.begin() + static_cast<long>(n * vocab));
    ASSERT_EQ(as_bytes(last), as_bytes(expected)) << "position " << n - 1;
  }
}

TEST(SlidingWindow, SlidingLayersKeepOnlyWhatTheirWindowNeeds) {
  EngineOptions options;
  options.prefill_chunk = 64;  // sliding layers keep 8 + 64 - 1 positions: one page
  auto engine = Engine::open(open_file_source(gemma3_fixture()), options);
  const std::vector<int32_t> tokens = long_sequence(*engine, 700);
  engine->evaluate(tokens);
  // 6 layers x K and V x pages of 256 positions x 2 KV heads of 64 half floats:
  // the global layer needs 3 pages for 700 positions, each sliding layer one.
  const size_t page = 2u * 256u * 128u * 2u;
  EXPECT_EQ(engine->kv_cache_bytes(), (3u + 5u * 1u) * page);
}

TEST(SlidingWindow, ReuseStopsWhereTheRingHasLostTheKeysTheNextPositionNeeds) {
  EngineOptions options;
  options.prefill_chunk = 16;  // sliding layers keep the last 23 positions
  auto engine = Engine::open(open_file_source(gemma3_fixture()), options);
  auto fresh = Engine::open(open_file_source(gemma3_fixture()), options);
  const std::vector<int32_t> tokens = long_sequence(*engine, 60);
  auto edit_at = [&](size_t at) {
    std::vector<int32_t> edited(tokens.begin(), tokens.begin() + static_cast<long>(at));
    edited.push_back(tokens[at] == 300 ? 301 : 300);
    return edited;
  };
  const auto reused = [&](const std::vector<int32_t>& edited) {
    engine->reset();
    engine->evaluate(tokens);
    const GenerationStats s = engine->generate_tokens(edited, test::greedy(1), [](const TokenEvent&) { return true; });
    return s.reused_tokens;
  };
  // Position 50 attends to 43..50; the ring still holds 37..59: reused.
  EXPECT_EQ(reused(edit_at(50)), 50);
  // Position 30 would need 23..29, long overwritten: everything runs again.
  EXPECT_EQ(reused(edit_at(30)), 0);
  // Either way the result is the fresh one (prompts shorter than
  // kTiledMinQueries: every position attends as one decoded alone would).
  for (size_t at : {50u, 30u}) {
    const std::vector<int32_t> edited = edit_at(at);
    engine->reset();
    engine->evaluate(tokens);
    fresh->reset();
    EXPECT_EQ(as_bytes(engine->evaluate(edited)), as_bytes(fresh->evaluate(edited))) << "edit at " << at;
  }
}

TEST(SlidingWindow, InfoReportsTheWindowAndRopeBases) {
  auto engine = Engine::open(open_file_source(gemma3_fixture()));
  const ModelInfo& m = engine->info();
  EXPECT_EQ(m.architecture, "gemma3");
  EXPECT_EQ(m.hyperparameter("sliding_window"), 8);
  EXPECT_EQ(m.hyperparameter("rope_freq_base"), 1e6);
  EXPECT_EQ(m.hyperparameter("local_rope_freq_base"), 1e4);
  EXPECT_EQ(m.hyperparameter("head_dim"), 64);
}

}  // namespace
}  // namespace sipllm

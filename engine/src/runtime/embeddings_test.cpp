// Engine::embed: texts batched together give the same bits as one at a time,
// pooling picks the positions llama.cpp's pooling types do, and the
// conversation's cache is left as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sipllm/engine.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::string fixture(const std::string& name) { return std::string(SIPLLM_FIXTURES_DIR) + "/arch/" + name + ".gguf"; }

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(Embeddings, ABatchGivesTheSameBitsAsOneTextAtATime) {
  for (const char* name : {"qwen3-Q8_0", "gemma3-Q4_K_M"}) {
    auto engine = Engine::open(open_file_source(fixture(name)));
    const std::vector<std::string> texts = {"Once upon a time there was a little robot", "The cat sat",
                                            "A much longer text, so that the batch holds sequences of other lengths."};
    const std::vector<std::vector<float>> batch = engine->embed(texts);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(batch[i], engine->embed({texts[i]})[0]) << name << " text " << i;
      EXPECT_NEAR(dot(batch[i], batch[i]), 1.0, 1e-5);
      EXPECT_EQ(batch[i].size(), static_cast<size_t>(engine->info().hyperparameter("dim")));
    }
    EXPECT_LT(dot(batch[0], batch[1]), 0.999);  // different texts, different directions
  }
}

TEST(Embeddings, PoolingPicksThePositions) {
  auto engine = Engine::open(open_file_source(fixture("qwen3-Q8_0")));
  const std::string text = "Once upon a time there was a little robot";
  EmbedOptions last, cls, mean;
  last.pooling = Pooling::kLast;
  cls.pooling = Pooling::kCls;
  mean.pooling = Pooling::kMean;
  const std::vector<float> l = engine->embed({text}, last)[0];
  const std::vector<float> c = engine->embed({text}, cls)[0];
  const std::vector<float> m = engine->embed({text}, mean)[0];
  EXPECT_NE(l, c);
  EXPECT_NE(m, c);
  EXPECT_NE(m, l);
  // The first position (BOS) sees only itself: CLS pooling is the same for
  // every text, and for BOS alone all three poolings agree.
  EXPECT_EQ(c, engine->embed({"The cat sat"}, cls)[0]);
  EXPECT_EQ(engine->embed({""}, mean)[0], c);
  EXPECT_EQ(engine->embed({""}, last)[0], c);
  // The model's own choice: this file names none, so the mean.
  EXPECT_EQ(engine->embed({text})[0], m);
}

TEST(Embeddings, TheConversationsCacheIsLeftAsItWas) {
  auto engine = Engine::open(open_file_source(fixture("gemma3-Q4_K_M")));
  const std::vector<int32_t> prompt = engine->tokenize("Once upon a time there was a little robot");
  const std::vector<float> before = engine->evaluate(prompt);
  engine->embed({"Something else entirely, to embed between two turns"});
  EXPECT_EQ(engine->cached_tokens(), prompt);
  // The next turn still builds on the cached prompt, with the same result.
  std::vector<int32_t> longer = prompt;
  longer.push_back(300);
  const GenerationStats s = engine->generate_tokens(longer, test::greedy(1), [](const TokenEvent&) { return true; });
  EXPECT_EQ(s.reused_tokens, static_cast<int>(prompt.size()));
  auto fresh = Engine::open(open_file_source(fixture("gemma3-Q4_K_M")));
  EXPECT_EQ(fresh->evaluate(prompt), before);
}

TEST(Embeddings, EmptyAndTooLongTextsAreClearErrors) {
  EngineOptions options;
  options.context_length = 8;
  auto engine = Engine::open(open_file_source(fixture("qwen3-Q8_0")), options);
  EmbedOptions no_bos;
  no_bos.add_special = false;
  try {
    engine->embed({"fine", ""}, no_bos);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("text 1 to embed has no tokens"), std::string::npos) << e.what();
  }
  try {
    engine->embed({"Once upon a time there was a little robot who lived in a big house"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kContextFull);
  }
}

}  // namespace
}  // namespace sipllm

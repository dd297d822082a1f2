#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "sipllm/error.h"

namespace sipllm {
namespace {

SamplingOptions greedy() {
  SamplingOptions options;
  options.temperature = 0;
  return options;
}

int32_t pick(const SamplingOptions& options, std::vector<float> logits, const std::vector<int32_t>& recent) {
  Sampler sampler(options, static_cast<int>(logits.size()));
  return sampler.sample(logits, recent);
}

// Token 0 leads by 0.1 and has occurred twice: a penalty of more than 0.1
// in all moves the choice to token 1.
TEST(Sampler, FrequencyPenaltyCountsEachOccurrence) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.5f};
  SamplingOptions options = greedy();
  EXPECT_EQ(pick(options, logits, {0, 0}), 0);
  options.frequency_penalty = 0.04f;  // 0.08 in all
  EXPECT_EQ(pick(options, logits, {0, 0}), 0);
  options.frequency_penalty = 0.06f;  // 0.12 in all
  EXPECT_EQ(pick(options, logits, {0, 0}), 1);
}

TEST(Sampler, PresencePenaltyCountsOnce) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.5f};
  SamplingOptions options = greedy();
  options.presence_penalty = 0.08f;
  EXPECT_EQ(pick(options, logits, {0, 0, 0}), 0);
  options.presence_penalty = 0.12f;
  EXPECT_EQ(pick(options, logits, {0, 0, 0}), 1);
  // Only the last repeat_last_n tokens count.
  options.repeat_last_n = 1;
  EXPECT_EQ(pick(options, logits, {0, 0, 2}), 0);
}

TEST(Sampler, NegativePenaltiesFavourRepetition) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.5f};
  SamplingOptions options = greedy();
  options.frequency_penalty = -0.3f;  // +0.6 in all
  EXPECT_EQ(pick(options, logits, {2, 2}), 2);
}

// Probabilities 0.5, 0.2, 0.15, 0.1, 0.05: entropy 1.333 nats; the tokens'
// surprise -ln p is 0.69, 1.61, 1.90, 2.30, 3.00, so by distance from the
// entropy the order is 1 (0.28), 2 (0.56), 0 (0.64), 3, 4. Typical sampling
// at 0.3 keeps tokens 1 and 2 (0.2, then 0.35 > 0.3): never the likeliest.
TEST(Sampler, TypicalPKeepsTheTokensWhoseSurpriseIsClosestToTheEntropy) {
  const std::vector<float> probabilities = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
  std::vector<float> logits;
  for (float p : probabilities) logits.push_back(std::log(p));
  SamplingOptions options;
  options.temperature = 1;
  options.top_k = 0;
  options.top_p = 1;
  options.min_p = 0;
  const auto draws = [&](float typical_p) {
    options.typical_p = typical_p;
    std::vector<int> counts(probabilities.size(), 0);
    for (uint64_t seed = 1; seed <= 400; ++seed) {
      options.seed = seed;
      ++counts[static_cast<size_t>(pick(options, logits, {}))];
    }
    return counts;
  };
  const std::vector<int> typical = draws(0.3f);
  EXPECT_EQ(typical[0] + typical[3] + typical[4], 0);
  // 0.2 : 0.15 of the kept probability.
  EXPECT_GT(typical[1], 180);
  EXPECT_GT(typical[2], 120);
  const std::vector<int> off = draws(1.0f);
  EXPECT_GT(off[0], 150);
  EXPECT_GT(off[4], 0);
  // A share that the first token alone passes keeps it alone.
  const std::vector<int> one = draws(0.1f);
  EXPECT_EQ(one[1], 400);
}

}  // namespace
}  // namespace sipllm

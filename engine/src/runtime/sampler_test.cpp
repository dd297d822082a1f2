#include "runtime/sampler.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sipllm

// The generation options' declared ranges, and the engine holding requests to them.
#include "sipllm/options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "test_support.h"

namespace sipllm {
namespace {

// Sets the option a range names to `value`, through the same list.
void set_option(GenerateOptions& options, std::string_view name, double value) {
#define SIPLLM_SET_OPTION(option_name, member, lowest, highest, excluded) \
  if (name == #option_name) {                                               \
    options.member = static_cast<decltype(options.member)>(value);          \
    return;                                                                 \
  }
  SIPLLM_GENERATE_RANGES(SIPLLM_SET_OPTION)
#undef SIPLLM_SET_OPTION
  FAIL() << "no option " << name;
}

// The refusal of `options`, or "" when they are accepted.
std::string refusal(const GenerateOptions& options, int n_vocab = 0, std::string* option = nullptr) {
  try {
    check_generate_options(options, n_vocab);
    return "";
  } catch (const InvalidOption& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()), e.option() + " " + e.requirement());
    if (option != nullptr) *option = e.option();
    return e.what();
  }
}

TEST(GenerateOptionRanges, TheDefaultsAreWithinThem) {
  EXPECT_EQ(refusal(GenerateOptions{}), "");
}

TEST(GenerateOptionRanges, EachOptionTakesItsBoundsAndRefusesWhatLiesBeyondThemNamingItself) {
  for (const OptionRange& range : kGenerateOptionRanges) {
    SCOPED_TRACE(std::string(range.name));
    // A step that an int or a float field keeps as a different value.
    const double step = range.name == "max_tokens" || range.name == "top_k" || range.name == "repeat_last_n" ? 1 : 1e-3;
    const auto outcome = [&](double value, std::string* option = nullptr) {
      GenerateOptions options;
      set_option(options, range.name, value);
      return refusal(options, 0, option);
    };
    std::string option;
    if (range.lowest_excluded) {
      EXPECT_EQ(outcome(range.lowest + step), "");
      const std::string refused = outcome(range.lowest, &option);
      EXPECT_EQ(option, range.name);
      EXPECT_NE(refused.find(std::string(range.name) + " must be above "), std::string::npos) << refused;
    } else {
      EXPECT_EQ(outcome(range.lowest), "");
      const std::string refused = outcome(range.lowest - step, &option);
      EXPECT_EQ(option, range.name);
      EXPECT_NE(refused.find(std::string(range.name) + " " + range.requirement() + ", not "), std::string::npos)
          << refused;
    }
    if (range.highest != kNoHighest) {
      EXPECT_EQ(outcome(range.highest), "");
      EXPECT_NE(outcome(range.highest + step), "");
    }
    if (step != 1) EXPECT_NE(outcome(std::nan("")), "") << "NaN accepted";
  }
}

TEST(GenerateOptionRanges, TheWordsSayTheRange) {
  GenerateOptions options;
  options.sampling.temperature = 3;
  EXPECT_EQ(refusal(options), "temperature must be from 0 to 2, not 3");
  options = {};
  options.sampling.top_p = 0;
  EXPECT_EQ(refusal(options), "top_p must be above 0 and at most 1, not 0");
  options = {};
  options.max_tokens = -1;
  EXPECT_EQ(refusal(options), "max_tokens must be 0 or more, not -1");
  options = {};
  options.sampling.repeat_penalty = -0.5f;
  EXPECT_EQ(refusal(options), "repeat_penalty must be above 0, not -0.5");
}

TEST(GenerateOptionRanges, LogitBiasesAreFiniteOrBanAndNameTokensOfTheVocabulary) {
  GenerateOptions options;
  options.sampling.logit_bias = {{3, 1e9f}, {4, -100}, {5, -std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(refusal(options, 10), "");
  options.sampling.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
  std::string option;
  EXPECT_EQ(refusal(options, 10, &option),
            "logit_bias must give each token a finite bias, or -Infinity (which bans it), not inf (token 3)");
  EXPECT_EQ(option, "logit_bias");
  options.sampling.logit_bias = {{3, std::nanf("")}};
  EXPECT_NE(refusal(options, 10), "");
  options.sampling.logit_bias = {{10, 1}};
  EXPECT_EQ(refusal(options, 10),
            "logit_bias names token 10, which is not a token id of this model (its vocabulary has 10)");
  options.sampling.logit_bias = {{-1, 1}};
  EXPECT_NE(refusal(options, 10), "");
  EXPECT_EQ(refusal(options, 0), "") << "without a vocabulary, token ids are not checked";
}

TEST(GenerateOptionRanges, TheEngineRefusesARequestOutsideThemBeforeAnyWork) {
  auto engine = Engine::open(open_file_source(test::model_path("stories260K.gguf")), {});
  const std::vector<int32_t> prompt = {1};
  for (const auto& spoil : std::vector<std::function<void(GenerateOptions&)>>{
           [](GenerateOptions& o) { o.sampling.typical_p = 0; },
           [](GenerateOptions& o) { o.sampling.top_p = -0.5f; },
           [](GenerateOptions& o) { o.sampling.logit_bias = {{1 << 20, 1}}; },
       }) {
    GenerateOptions options = test::greedy(4);
    spoil(options);
    int tokens = 0;
    EXPECT_THROW(engine->generate_tokens(prompt, options, [&](const TokenEvent&) { ++tokens; return true; }),
                 InvalidOption);
    EXPECT_EQ(tokens, 0);
    EXPECT_TRUE(engine->cached_tokens().empty());
  }
}

}  // namespace
}  // namespace sipllm

#include "sipllm/options.h"

#include <cmath>
#include <cstdio>

#include "sipllm/error.h"

namespace sipllm {
namespace {

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

void check_range(const OptionRange& range, double value) {
  const bool above_lowest = range.lowest_excluded ? value > range.lowest : value >= range.lowest;
  if (!(above_lowest && value <= range.highest)) {  // NaN fails both
    throw InvalidOption(std::string(range.name), range.requirement() + ", not " + number_text(value));
  }
}

}  // namespace

std::string OptionRange::requirement() const {
  const std::string low = number_text(lowest);
  if (highest == kNoHighest) return lowest_excluded ? "must be above " + low : "must be " + low + " or more";
  const std::string high = number_text(highest);
  return lowest_excluded ? "must be above " + low + " and at most " + high : "must be from " + low + " to " + high;
}

void check_generate_options(const GenerateOptions& options, int n_vocab) {
  size_t i = 0;
#define SIPLLM_CHECK_RANGE(name, member, lowest, highest, excluded) \
  check_range(kGenerateOptionRanges[i++], static_cast<double>(options.member));
  SIPLLM_GENERATE_RANGES(SIPLLM_CHECK_RANGE)
#undef SIPLLM_CHECK_RANGE
  for (const auto& [token, bias] : options.sampling.logit_bias) {
    if (n_vocab > 0 && (token < 0 || token >= n_vocab)) {
      throw InvalidOption("logit_bias", "names token " + std::to_string(token) +
                                            ", which is not a token id of this model (its vocabulary has " +
                                            std::to_string(n_vocab) + ")");
    }
    if (!std::isfinite(bias) && bias != -INFINITY) {
      throw InvalidOption("logit_bias", "must give each token a finite bias, or -Infinity (which bans it), not " +
                                            number_text(bias) + " (token " + std::to_string(token) + ")");
    }
  }
}

}  // namespace sipllm

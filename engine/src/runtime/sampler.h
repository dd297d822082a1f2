// Picks the next token from logits.
//
// Order, as in llama.cpp: logit bias, repetition, presence and frequency
// penalties, then the token
// filter (a grammar) if any, then greedy when the temperature is <= 0;
// otherwise top-k, softmax at the temperature, top-p, min-p, and a draw from
// a seeded generator. The same seed and the same logits give the same tokens
// on every platform: the generator and the draw are done here, not by the
// standard library's distributions.
#pragma once

#include <cstdint>
#include <vector>

#include "sipllm/options.h"

namespace sipllm {

// Which tokens may be sampled next. The result is always that of setting
// every token it does not allow to -infinity before the sampling steps; the
// sampler asks about single tokens where that settles the draw (the greedy
// choice, the first top-k tokens) and for the whole mask otherwise.
class TokenFilter {
 public:
  virtual ~TokenFilter() = default;
  virtual bool allows(int32_t token) = 0;
  // Sets the logit of every token it does not allow to -infinity.
  virtual void apply(std::vector<float>& logits) = 0;
};

class Sampler {
 public:
  // `options` within their ranges (check_generate_options, which the engine
  // calls on every request).
  Sampler(const SamplingOptions& options, int n_vocab);

  // `recent` are the tokens of the context so far (the penalty looks at the
  // last repeat_last_n). Modifies `logits`. With a filter that allows no
  // token, throws Error(kInvalidArgument).
  int32_t sample(std::vector<float>& logits, const std::vector<int32_t>& recent,
                 TokenFilter* filter = nullptr);

  uint64_t seed() const { return seed_; }

 private:
  double next_uniform();  // [0, 1)

  SamplingOptions options_;
  int n_vocab_;
  uint64_t seed_;
  uint64_t state_;
};

}  // namespace sipllm

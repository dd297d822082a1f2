// Picks the next token from logits.
//
// Order, as in llama.cpp: logit bias, repetition penalty, then greedy when
// the temperature is <= 0; otherwise top-k, softmax at the temperature,
// top-p, min-p, and a draw from a seeded generator. The same seed and the same
// logits give the same tokens on every platform: the generator and the draw
// are done here, not by the standard library's distributions.
#pragma once

#include <cstdint>
#include <vector>

#include "sipllm/engine.h"

namespace sipllm {

class Sampler {
 public:
  Sampler(const SamplingOptions& options, int n_vocab);

  // `recent` are the tokens of the context so far (the penalty looks at the
  // last repeat_last_n). Modifies `logits`.
  int32_t sample(std::vector<float>& logits, const std::vector<int32_t>& recent);

  uint64_t seed() const { return seed_; }

 private:
  double next_uniform();  // [0, 1)

  SamplingOptions options_;
  int n_vocab_;
  uint64_t seed_;
  uint64_t state_;
};

}  // namespace sipllm

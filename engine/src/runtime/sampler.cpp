#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <unordered_map>

#include "sipllm/error.h"

namespace sipllm {

Sampler::Sampler(const SamplingOptions& options, int n_vocab)
    : options_(options), n_vocab_(n_vocab) {
  if (options.seed) {
    seed_ = *options.seed;
  } else {
    std::random_device device;
    seed_ = (static_cast<uint64_t>(device()) << 32) ^ device();
  }
  state_ = seed_;
}

// splitmix64: tiny, well mixed, identical everywhere.
double Sampler::next_uniform() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::vector<float>& logits, const std::vector<int32_t>& recent, TokenFilter* filter) {
  for (const auto& [token, bias] : options_.logit_bias) {
    if (token >= 0 && token < n_vocab_) logits[static_cast<size_t>(token)] += bias;
  }
  const bool additive = options_.presence_penalty != 0.0f || options_.frequency_penalty != 0.0f;
  if ((options_.repeat_penalty != 1.0f || additive) && options_.repeat_last_n != 0) {
    const size_t window = options_.repeat_last_n < 0
                              ? recent.size()
                              : std::min(recent.size(), static_cast<size_t>(options_.repeat_last_n));
    std::unordered_map<int32_t, int> counts;
    for (auto it = recent.end() - static_cast<std::ptrdiff_t>(window); it != recent.end(); ++it) ++counts[*it];
    for (const auto& [token, count] : counts) {
      if (token < 0 || token >= n_vocab_) continue;
      float& l = logits[static_cast<size_t>(token)];
      if (options_.repeat_penalty != 1.0f) l = l > 0 ? l / options_.repeat_penalty : l * options_.repeat_penalty;
      // OpenAI's presence and frequency penalties, as llama.cpp applies them.
      l -= static_cast<float>(count) * options_.frequency_penalty + options_.presence_penalty;
    }
  }

  const auto first_max = [&] {
    // First maximum wins ties, so the choice is deterministic.
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  const float kNone = -std::numeric_limits<float>::infinity();
  const auto nothing_allowed = [] {
    return Error(ErrorKind::kInvalidArgument,
                 "the grammar allows no token of the vocabulary here (it expects text no token spells)");
  };

  if (options_.temperature <= 0) {
    int32_t best = first_max();
    // The best token, if allowed, is also the best of the allowed ones.
    if (filter != nullptr && !filter->allows(best)) {
      filter->apply(logits);
      best = first_max();
      if (logits[static_cast<size_t>(best)] == kNone) throw nothing_allowed();
    }
    return best;
  }

  std::vector<int32_t> ids(static_cast<size_t>(n_vocab_));
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) {
    const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
    return la > lb || (la == lb && a < b);
  };
  size_t keep = ids.size();
  bool ranked = false;
  if (filter != nullptr && options_.top_k > 0 && static_cast<size_t>(options_.top_k) < keep) {
    // Masking first and then taking the top k keeps the first k allowed
    // tokens in logit order: look for them among the best 4k before masking
    // the whole vocabulary.
    const size_t k = static_cast<size_t>(options_.top_k);
    const size_t window = std::min(ids.size(), std::max<size_t>(4 * k, 64));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(window), ids.end(), by_logit);
    std::vector<int32_t> allowed;
    for (size_t i = 0; i < window && allowed.size() < k; ++i) {
      if (filter->allows(ids[i])) allowed.push_back(ids[i]);
    }
    if (allowed.size() == k) {
      ids = std::move(allowed);
      keep = k;
      ranked = true;
    } else {
      std::iota(ids.begin(), ids.end(), 0);
    }
  }
  if (!ranked) {
    if (filter != nullptr) filter->apply(logits);
    if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < keep) {
      keep = static_cast<size_t>(options_.top_k);
      std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), by_logit);
    } else {
      std::sort(ids.begin(), ids.end(), by_logit);
    }
    ids.resize(keep);
  }
  if (filter != nullptr && logits[static_cast<size_t>(ids[0])] == kNone) throw nothing_allowed();

  std::vector<double> probs(keep);
  const double max = logits[static_cast<size_t>(ids[0])];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((logits[static_cast<size_t>(ids[i])] - max) / options_.temperature);
    sum += probs[i];
  }
  for (double& p : probs) p /= sum;
  // Tokens of probability 0 (masked, or banned by a bias) must never be
  // drawn, not even by the rounding fallback below.
  while (keep > 1 && probs[keep - 1] == 0) --keep;

  if (options_.typical_p < 1.0f && keep > 1) {
    // As llama.cpp's typical sampler, between top_k and top_p: the tokens
    // whose surprise (-log p) is closest to the entropy, in that order, until
    // their probability passes typical_p; kept in probability order, and
    // their probabilities renormalized, for the filters that follow.
    double entropy = 0;
    for (size_t i = 0; i < keep; ++i) entropy -= probs[i] > 0 ? probs[i] * std::log(probs[i]) : 0;
    std::vector<size_t> order(keep);
    std::iota(order.begin(), order.end(), size_t{0});
    const auto distance = [&](size_t i) { return std::fabs(-std::log(probs[i]) - entropy); };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return distance(a) < distance(b); });
    double cumulative = 0;
    size_t n = 0;
    while (n < keep) {
      cumulative += probs[order[n++]];
      if (cumulative > options_.typical_p) break;
    }
    order.resize(n);
    std::sort(order.begin(), order.end());
    double kept = 0;
    for (size_t k = 0; k < n; ++k) {
      ids[k] = ids[order[k]];
      probs[k] = probs[order[k]];
      kept += probs[k];
    }
    keep = n;
    for (size_t k = 0; k < keep; ++k) probs[k] /= kept;
  }
  if (options_.top_p < 1.0f) {
    double cumulative = 0;
    size_t n = 0;
    while (n < keep) {
      cumulative += probs[n++];
      if (cumulative >= options_.top_p) break;
    }
    keep = n;
  }
  if (options_.min_p > 0) {
    const double threshold = probs[0] * options_.min_p;
    size_t n = 1;
    while (n < keep && probs[n] >= threshold) ++n;
    keep = n;
  }

  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += probs[i];
  double r = next_uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= probs[i];
    if (r < 0) return ids[i];
  }
  return ids[keep - 1];
}

}  // namespace sipllm

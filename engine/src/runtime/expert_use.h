// How much each expert of a mixture of experts has been used lately: what
// decides which experts stay in memory under a budget that cannot hold them
// all (LayerLoader's kept experts).
//
// An expert's score is the positions that chose it, each counting half as
// much for every kHalfLifePositions positions the model has run since: a
// frequency that fades, rather than the last use alone (least recently used)
// or a count since the start (least frequently used). A prompt routes nearly
// every expert once per chunk, so recency alone would keep whichever layers
// came last; but the experts most of a prompt's positions chose are the ones
// its continuation tends to choose, so they outweigh a single token's choice,
// and still give way as the conversation moves on.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace sipllm {

class ExpertUse {
 public:
  static constexpr double kHalfLifePositions = 256;

  // Experts numbered layer by layer, `per_layer` to a layer.
  ExpertUse(int n_experts, int per_layer)
      : per_layer_(per_layer > 0 ? per_layer : 1),
        value_(static_cast<size_t>(n_experts), 0.0),
        pass_uses_(static_cast<size_t>(n_experts), 0.0),
        pass_of_uses_(static_cast<size_t>(n_experts), 0),
        pass_of_layer_(static_cast<size_t>(n_experts / per_layer_), 0) {}

  // A pass over `positions` more positions begins: earlier uses count for less.
  void begin_pass(int positions) {
    ++pass_;
    since_base_ += positions;
    factor_ = std::exp2(-static_cast<double>(since_base_) / kHalfLifePositions);
    if (factor_ < 0x1p-32) {  // values stay finite: rescaled to now
      for (double& v : value_) v *= factor_;
      since_base_ = 0;
      factor_ = 1;
    }
  }
  // One layer has routed this pass: positions[i] of its positions chose experts[i].
  void routed(const std::vector<int>& experts, const std::vector<int>& positions) {
    for (size_t i = 0; i < experts.size(); ++i) {
      const auto e = static_cast<size_t>(experts[i]);
      value_[e] += positions[i] / factor_;
      if (pass_of_uses_[e] != pass_) pass_uses_[e] = 0;
      pass_uses_[e] += positions[i];
      pass_of_uses_[e] = pass_;
      pass_of_layer_[e / static_cast<size_t>(per_layer_)] = pass_;
    }
  }
  double score(int expert) const { return value_[static_cast<size_t>(expert)] * factor_; }
  // Whether `incoming` has been used more lately than `kept`, so takes its
  // place. Within a pass, an expert whose layer has not routed yet has not
  // had this pass's uses counted: it is compared with what `incoming` had
  // before this pass's (else a prompt's first layers would push out the
  // experts its later layers are about to use again).
  bool outweighs(int incoming, int kept) const {
    const auto k = static_cast<size_t>(kept);
    if (pass_of_layer_[k / static_cast<size_t>(per_layer_)] == pass_) return score(incoming) > score(kept);
    const auto i = static_cast<size_t>(incoming);
    return score(incoming) - (pass_of_uses_[i] == pass_ ? pass_uses_[i] : 0.0) > score(kept);
  }

 private:
  int per_layer_;
  std::vector<double> value_;  // scores as of the base time (since_base_ positions ago)
  std::vector<double> pass_uses_;
  std::vector<uint64_t> pass_of_uses_, pass_of_layer_;
  uint64_t pass_ = 0;
  uint64_t since_base_ = 0;
  double factor_ = 1;  // 2^(-since_base_ / kHalfLifePositions)
};

}  // namespace sipllm

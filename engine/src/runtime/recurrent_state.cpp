#include "runtime/recurrent_state.h"

#include <algorithm>
#include <cstring>

namespace sipllm {

RecurrentState::RecurrentState(const ModelDescription& model)
    : RecurrentState(model, std::vector<bool>(model.layers.size(), true)) {}

RecurrentState::RecurrentState(const ModelDescription& model, const std::vector<bool>& kept) {
  size_t total = 0;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const LayerShape& layer = model.layers[l];
    layer_offset_.push_back(total);
    conv_offset_.push_back(total);
    if (kept[l]) total += static_cast<size_t>(layer.conv_state);
    matrix_offset_.push_back(total);
    if (kept[l]) total += static_cast<size_t>(layer.matrix_state);
    layer_floats_.push_back(total - layer_offset_.back());
  }
  live_.assign(total, 0.0f);
}

size_t RecurrentState::bytes_with_checkpoint(const ModelDescription& model) {
  size_t floats = 0;
  for (const LayerShape& layer : model.layers) {
    floats += static_cast<size_t>(layer.conv_state) + static_cast<size_t>(layer.matrix_state);
  }
  return 2 * floats * sizeof(float);
}

void RecurrentState::clear(bool forget_checkpoint) {
  std::fill(live_.begin(), live_.end(), 0.0f);
  position_ = 0;
  if (forget_checkpoint) {
    checkpoint_.clear();
    checkpoint_.shrink_to_fit();
    checkpoint_position_ = -1;
    pending_ = -1;
  }
}

void RecurrentState::begin_checkpoint(int position) {
  if (empty()) return;
  checkpoint_position_ = -1;
  pending_ = position;
  checkpoint_.resize(live_.size());
}

void RecurrentState::snapshot_layer(int layer) {
  const auto l = static_cast<size_t>(layer);
  std::memcpy(checkpoint_.data() + layer_offset_[l], live_.data() + layer_offset_[l], layer_floats_[l] * sizeof(float));
}

void RecurrentState::commit_checkpoint() {
  checkpoint_position_ = pending_;
  pending_ = -1;
}

int RecurrentState::resume(int common) {
  pending_ = -1;
  if (empty()) return common;
  if (position_ == common) return common;
  if (checkpoint_position_ >= 0 && checkpoint_position_ <= common) {
    live_ = checkpoint_;
    position_ = checkpoint_position_;
    return position_;
  }
  clear(false);
  return 0;
}

}  // namespace sipllm

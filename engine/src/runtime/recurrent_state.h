// The per-sequence memory of a hybrid model's recurrent layers, beside its
// KV cache: each layer's convolution history and DeltaNet state matrices.
//
// Unlike the KV cache, a state cannot be cut back to an earlier position: it
// holds the whole sequence folded in. So a reuse of a prefix (the common
// start of the cached tokens and a new request's) resumes from the live
// state when the prefix is everything absorbed, else from a checkpoint: a
// copy of the state taken during a prefill at the position before its last
// token (the last token always runs again, for its logits), so that a
// request repeating or extending the last prompt resumes there. Failing
// both, the sequence runs again from position 0.
//
// A model with no recurrent layer has an empty state: every position can be
// resumed from.
#pragma once

#include <cstddef>
#include <vector>

#include "model/model_description.h"

namespace sipllm {

class RecurrentState {
 public:
  explicit RecurrentState(const ModelDescription& model);
  // The state of the layers `kept` marks alone; the others hold none (the
  // kernel warm-up's: one layer of each kind).
  RecurrentState(const ModelDescription& model, const std::vector<bool>& kept);

  bool empty() const { return live_.empty(); }
  // Layer l's convolution history (conv_kernel - 1 rows, oldest first) and
  // DeltaNet state matrices (LayerShape::conv_state and matrix_state floats).
  float* conv(int layer) { return live_.data() + conv_offset_[static_cast<size_t>(layer)]; }
  float* matrices(int layer) { return live_.data() + matrix_offset_[static_cast<size_t>(layer)]; }

  // Positions the live state has absorbed; -1 when a run failed partway and
  // it is lost.
  int position() const { return position_; }
  void set_position(int position) { position_ = position; }
  // The state before position 0; forgets the checkpoint too when `forget`.
  void clear(bool forget_checkpoint);

  // A checkpoint of the state at `position`, written layer by layer while a
  // run passes that position (snapshot_layer), valid once the run completes
  // (commit_checkpoint); the previous one is gone from begin_checkpoint on.
  void begin_checkpoint(int position);
  int pending_checkpoint() const { return pending_; }
  void snapshot_layer(int layer);
  void commit_checkpoint();

  // The most positions of `common` (those the caller's KV cache can keep) a
  // continuation can start from, with the live state set to match: common
  // itself when the live state is there, else the checkpoint's position when
  // it is at most common, else 0 (a cleared state).
  int resume(int common);

  // Bytes of the live state; of it and its checkpoint as allocated; as a
  // budget must count them.
  size_t bytes() const { return live_.size() * sizeof(float); }
  size_t allocated_bytes() const { return (live_.capacity() + checkpoint_.capacity()) * sizeof(float); }
  static size_t bytes_with_checkpoint(const ModelDescription& model);

 private:
  std::vector<size_t> conv_offset_, matrix_offset_;
  std::vector<size_t> layer_offset_, layer_floats_;  // each layer's whole state
  std::vector<float> live_;
  std::vector<float> checkpoint_;
  int position_ = 0;
  int checkpoint_position_ = -1;
  int pending_ = -1;
};

}  // namespace sipllm

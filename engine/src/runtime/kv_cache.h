// Keys and values of every processed position, per layer.
//
// Storage grows in pages of `page_positions` positions as tokens arrive, up to
// the context length, so memory follows the conversation, not the model's
// maximum context. Pages are never moved, so growing copies nothing.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace sipllm {

class KvCache {
 public:
  static constexpr int kDefaultPagePositions = 256;

  KvCache(int n_layers, int kv_dim, int context_length,
          int page_positions = kDefaultPagePositions);

  int context_length() const { return context_length_; }
  int kv_dim() const { return kv_dim_; }

  // Makes room for positions [0, n_positions). Throws if beyond the context.
  void reserve(int n_positions);

  float* key(int layer, int pos) { return slot(keys_, layer, pos); }
  float* value(int layer, int pos) { return slot(values_, layer, pos); }
  const float* key(int layer, int pos) const { return slot(keys_, layer, pos); }
  const float* value(int layer, int pos) const { return slot(values_, layer, pos); }

  // Positions whose keys and values are final, for every layer.
  int filled() const { return filled_; }
  void set_filled(int n) { filled_ = n; }

  // Bytes allocated for keys and values.
  size_t allocated_bytes() const;

 private:
  using Pages = std::vector<std::vector<std::unique_ptr<float[]>>>;  // [layer][page]
  float* slot(const Pages& pages, int layer, int pos) const {
    return pages[static_cast<size_t>(layer)][static_cast<size_t>(pos / page_positions_)].get() +
           static_cast<size_t>(pos % page_positions_) * static_cast<size_t>(kv_dim_);
  }

  int n_layers_;
  int kv_dim_;
  int context_length_;
  int page_positions_;
  int filled_ = 0;
  Pages keys_;
  Pages values_;
};

}  // namespace sipllm

// Keys and values of every processed position, per layer, in F16 (llama.cpp's
// default, half the memory) or F32.
//
// Storage grows in pages of `page_positions` positions as tokens arrive, so
// memory follows the conversation, not the model's maximum context. Pages are
// never moved, so growing copies nothing.
//
// A layer may keep only its last `capacity` positions (a sliding-window
// layer needs no more than its window, plus the positions one prefill chunk
// writes before it attends): position p then lives in slot p % capacity, and
// older keys are overwritten once the conversation outgrows the capacity.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "sipllm/options.h"

namespace sipllm {

class KvCache {
 public:
  static constexpr int kDefaultPagePositions = 256;

  // layer_kv_dims[l]: floats of a key (and of a value) in layer l; 0: the
  // layer keeps none (a recurrent layer of a hybrid model).
  // layer_capacity[l]: positions layer l keeps (0 or >= context_length: all).
  // page_positions: a power of two.
  KvCache(std::vector<int> layer_kv_dims, int context_length, KvCacheType type = KvCacheType::kF16,
          std::vector<int> layer_capacity = {}, int page_positions = kDefaultPagePositions);
  // Every layer alike.
  KvCache(int n_layers, int kv_dim, int context_length, KvCacheType type = KvCacheType::kF16,
          std::vector<int> layer_capacity = {}, int page_positions = kDefaultPagePositions)
      : KvCache(std::vector<int>(static_cast<size_t>(n_layers), kv_dim), context_length, type,
                std::move(layer_capacity), page_positions) {}

  int context_length() const { return context_length_; }
  KvCacheType type() const { return type_; }

  // Makes room for positions [0, n_positions). Throws if beyond the context.
  void reserve(int n_positions);
  // Bytes reserve(n_positions) would add.
  size_t growth_bytes(int n_positions) const;
  // Bytes of the first page of every layer (what reserve(1) allocates).
  static size_t first_page_bytes(const std::vector<int>& layer_kv_dims, KvCacheType type,
                                 int page_positions = kDefaultPagePositions);
  static size_t first_page_bytes(int n_layers, int kv_dim, KvCacheType type,
                                 int page_positions = kDefaultPagePositions) {
    return first_page_bytes(std::vector<int>(static_cast<size_t>(n_layers), kv_dim), type, page_positions);
  }

  // Where the key and value rows of `pos` in `layer` go (kv_dim elements of
  // the cache's type each): store_kv (kernels/attention.h) fills them.
  void* key_row(int layer, int pos) { return const_cast<void*>(row(keys_, layer, pos, element_bytes())); }
  void* value_row(int layer, int pos) { return const_cast<void*>(row(values_, layer, pos, element_bytes())); }
  int kv_dim(int layer) const { return kv_dims_[static_cast<size_t>(layer)]; }
  // Called by a writer that rounded a value to an infinite or NaN half.
  void note_non_finite_half() { non_finite_half_.store(true, std::memory_order_relaxed); }

  // The rows as stored: T is float for an F32 cache, uint16_t (half-float
  // bits) for an F16 one.
  template <class T>
  const T* key(int layer, int pos) const {
    return static_cast<const T*>(row(keys_, layer, pos, sizeof(T)));
  }
  template <class T>
  const T* value(int layer, int pos) const {
    return static_cast<const T*>(row(values_, layer, pos, sizeof(T)));
  }

  // Whether every half float stored so far is finite (true for an F32
  // cache): then reading them back needs no case for infinities and NaN.
  bool halves_finite() const { return !non_finite_half_.load(std::memory_order_relaxed); }

  // Positions whose keys and values are final, for every layer.
  int filled() const { return filled_; }
  void set_filled(int n) { filled_ = n; }

  // How much of the first `common` filled positions a new evaluation can
  // build on: all of them, unless a layer that keeps only its last positions
  // has already overwritten keys that position `common` would attend to
  // (then 0: the whole sequence runs again). `layer_window` is what each such
  // layer's queries see.
  int reusable_prefix(int common, const std::vector<int>& layer_window) const;

  // Bytes allocated for keys and values.
  size_t allocated_bytes() const;

 private:
  using Pages = std::vector<std::vector<std::unique_ptr<uint8_t[]>>>;  // [layer][page]
  const void* row(const Pages& pages, int layer, int pos, size_t element_bytes) const {
    const auto l = static_cast<size_t>(layer);
    const int s = pos < capacity_[l] ? pos : pos % capacity_[l];
    // Attention asks for every row it reads: a shift, not a division.
    return pages[l][static_cast<size_t>(s >> page_shift_)].get() +
           static_cast<size_t>(s & (page_positions_ - 1)) * static_cast<size_t>(kv_dims_[l]) * element_bytes;
  }
  size_t element_bytes() const { return type_ == KvCacheType::kF16 ? 2 : 4; }
  size_t page_bytes(size_t layer) const {
    return static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dims_[layer]) * element_bytes();
  }

  int n_layers_;
  std::vector<int> kv_dims_;
  int context_length_;
  KvCacheType type_;
  int page_positions_;  // a power of two
  int page_shift_;      // its log2
  int filled_ = 0;
  std::vector<int> capacity_;  // per layer, in positions
  Pages keys_;
  Pages values_;
  std::atomic<bool> non_finite_half_{false};  // set by writers, which threads run side by side
};

}  // namespace sipllm

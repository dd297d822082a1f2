#include "runtime/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "kernels/elementwise.h"
#include "sipllm/error.h"

namespace sipllm {

KvCache::KvCache(int n_layers, int kv_dim, int context_length, KvCacheType type, std::vector<int> layer_capacity,
                 int page_positions)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      context_length_(context_length),
      type_(type),
      page_positions_(page_positions),
      page_shift_(std::countr_zero(static_cast<unsigned>(page_positions))),
      capacity_(static_cast<size_t>(n_layers), context_length),
      keys_(static_cast<size_t>(n_layers)),
      values_(static_cast<size_t>(n_layers)) {
  if (page_positions <= 0 || !std::has_single_bit(static_cast<unsigned>(page_positions))) {
    throw Error(ErrorKind::kInvalidArgument,
                "KV cache pages of " + std::to_string(page_positions) + " positions: not a power of two");
  }
  for (size_t l = 0; l < layer_capacity.size() && l < capacity_.size(); ++l) {
    if (layer_capacity[l] > 0) capacity_[l] = std::min(layer_capacity[l], context_length);
  }
}

void KvCache::reserve(int n_positions) {
  if (n_positions > context_length_) {
    throw Error(ErrorKind::kContextFull, "position " + std::to_string(n_positions - 1) +
                                             " is beyond the context length " +
                                             std::to_string(context_length_));
  }
  const size_t page_bytes = static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dim_) * element_bytes();
  for (int l = 0; l < n_layers_; ++l) {
    const int kept = std::min(n_positions, capacity_[static_cast<size_t>(l)]);
    const auto pages_needed = static_cast<size_t>((kept + page_positions_ - 1) / page_positions_);
    auto& k = keys_[static_cast<size_t>(l)];
    auto& v = values_[static_cast<size_t>(l)];
    while (k.size() < pages_needed) {
      k.push_back(std::make_unique<uint8_t[]>(page_bytes));
      v.push_back(std::make_unique<uint8_t[]>(page_bytes));
    }
  }
}

size_t KvCache::first_page_bytes(int n_layers, int kv_dim, KvCacheType type, int page_positions) {
  return 2 * static_cast<size_t>(n_layers) * static_cast<size_t>(page_positions) * static_cast<size_t>(kv_dim) *
         (type == KvCacheType::kF16 ? 2 : 4);
}

size_t KvCache::growth_bytes(int n_positions) const {
  const size_t page_bytes = static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dim_) * element_bytes();
  size_t bytes = 0;
  for (int l = 0; l < n_layers_; ++l) {
    const int kept = std::min(std::min(n_positions, context_length_), capacity_[static_cast<size_t>(l)]);
    const auto pages_needed = static_cast<size_t>((kept + page_positions_ - 1) / page_positions_);
    const size_t have = keys_[static_cast<size_t>(l)].size();
    if (pages_needed > have) bytes += 2 * (pages_needed - have) * page_bytes;
  }
  return bytes;
}

void KvCache::store(int layer, int pos, const float* key, const float* value) {
  auto* k = const_cast<void*>(row(keys_, layer, pos, element_bytes()));
  auto* v = const_cast<void*>(row(values_, layer, pos, element_bytes()));
  if (type_ == KvCacheType::kF32) {
    std::memcpy(k, key, static_cast<size_t>(kv_dim_) * sizeof(float));
    std::memcpy(v, value, static_cast<size_t>(kv_dim_) * sizeof(float));
    return;
  }
  auto* k16 = static_cast<uint16_t*>(k);
  auto* v16 = static_cast<uint16_t*>(v);
  const bool key_non_finite = floats_to_halves(key, k16, kv_dim_);
  if (floats_to_halves(value, v16, kv_dim_) || key_non_finite) non_finite_half_.store(true, std::memory_order_relaxed);
}

int KvCache::reusable_prefix(int common, const std::vector<int>& layer_window) const {
  for (size_t l = 0; l < capacity_.size(); ++l) {
    if (capacity_[l] >= context_length_) continue;
    // Kept: the last capacity positions written, [filled - capacity, filled).
    // Position `common` attends to [common - window + 1, common].
    const int oldest_kept = std::max(0, filled_ - capacity_[l]);
    const int window = l < layer_window.size() && layer_window[l] > 0 ? layer_window[l] : context_length_;
    if (std::max(0, common - window + 1) < oldest_kept) return 0;
  }
  return common;
}

size_t KvCache::allocated_bytes() const {
  size_t pages = 0;
  for (const auto& layer : keys_) pages += layer.size();
  return 2 * pages * static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dim_) * element_bytes();
}

}  // namespace sipllm

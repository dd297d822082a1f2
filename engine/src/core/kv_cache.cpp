#include "core/kv_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "sipllm/error.h"

namespace sipllm {

KvCache::KvCache(std::vector<int> layer_kv_dims, int context_length, KvCacheType type, std::vector<int> layer_capacity,
                 int page_positions)
    : n_layers_(static_cast<int>(layer_kv_dims.size())),
      kv_dims_(std::move(layer_kv_dims)),
      context_length_(context_length),
      type_(type),
      page_positions_(page_positions),
      page_shift_(std::countr_zero(static_cast<unsigned>(page_positions))),
      capacity_(kv_dims_.size(), context_length),
      keys_(kv_dims_.size()),
      values_(kv_dims_.size()) {
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
  for (int l = 0; l < n_layers_; ++l) {
    if (kv_dims_[static_cast<size_t>(l)] == 0) continue;
    const size_t page_bytes = this->page_bytes(static_cast<size_t>(l));
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

size_t KvCache::first_page_bytes(const std::vector<int>& layer_kv_dims, KvCacheType type, int page_positions) {
  size_t floats = 0;
  for (int kv_dim : layer_kv_dims) floats += static_cast<size_t>(kv_dim);
  return 2 * static_cast<size_t>(page_positions) * floats * (type == KvCacheType::kF16 ? 2 : 4);
}

size_t KvCache::growth_bytes(int n_positions) const {
  size_t bytes = 0;
  for (int l = 0; l < n_layers_; ++l) {
    if (kv_dims_[static_cast<size_t>(l)] == 0) continue;
    const size_t page_bytes = this->page_bytes(static_cast<size_t>(l));
    const int kept = std::min(std::min(n_positions, context_length_), capacity_[static_cast<size_t>(l)]);
    const auto pages_needed = static_cast<size_t>((kept + page_positions_ - 1) / page_positions_);
    const size_t have = keys_[static_cast<size_t>(l)].size();
    if (pages_needed > have) bytes += 2 * (pages_needed - have) * page_bytes;
  }
  return bytes;
}

int KvCache::reusable_prefix(int common, const std::vector<int>& layer_window) const {
  for (size_t l = 0; l < capacity_.size(); ++l) {
    if (capacity_[l] >= context_length_ || kv_dims_[l] == 0) continue;
    // Kept: the last capacity positions written, [filled - capacity, filled).
    // Position `common` attends to [common - window + 1, common].
    const int oldest_kept = std::max(0, filled_ - capacity_[l]);
    const int window = l < layer_window.size() && layer_window[l] > 0 ? layer_window[l] : context_length_;
    if (std::max(0, common - window + 1) < oldest_kept) return 0;
  }
  return common;
}

size_t KvCache::allocated_bytes() const {
  size_t bytes = 0;
  for (size_t l = 0; l < keys_.size(); ++l) bytes += 2 * keys_[l].size() * page_bytes(l);
  return bytes;
}

}  // namespace sipllm

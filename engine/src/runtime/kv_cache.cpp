#include "runtime/kv_cache.h"

#include <string>

#include "sipllm/error.h"

namespace sipllm {

KvCache::KvCache(int n_layers, int kv_dim, int context_length, int page_positions)
    : n_layers_(n_layers),
      kv_dim_(kv_dim),
      context_length_(context_length),
      page_positions_(page_positions),
      keys_(static_cast<size_t>(n_layers)),
      values_(static_cast<size_t>(n_layers)) {}

void KvCache::reserve(int n_positions) {
  if (n_positions > context_length_) {
    throw Error(ErrorKind::kContextFull, "position " + std::to_string(n_positions - 1) +
                                             " is beyond the context length " +
                                             std::to_string(context_length_));
  }
  const size_t pages_needed =
      static_cast<size_t>((n_positions + page_positions_ - 1) / page_positions_);
  const size_t page_floats = static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dim_);
  for (int l = 0; l < n_layers_; ++l) {
    auto& k = keys_[static_cast<size_t>(l)];
    auto& v = values_[static_cast<size_t>(l)];
    while (k.size() < pages_needed) {
      k.push_back(std::make_unique<float[]>(page_floats));
      v.push_back(std::make_unique<float[]>(page_floats));
    }
  }
}

size_t KvCache::allocated_bytes() const {
  size_t pages = 0;
  for (const auto& layer : keys_) pages += layer.size();
  return 2 * pages * static_cast<size_t>(page_positions_) * static_cast<size_t>(kv_dim_) *
         sizeof(float);
}

}  // namespace sipllm

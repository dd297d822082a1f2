// The rows a table read by the row (token_embd when not in memory, Gemma 4's
// per_layer_token_embd) gave most recently, kept in memory so that a token
// seen again is not read again: over a network, a row is a request. Up to
// `capacity` rows; the least recently used one makes room.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

namespace sipllm {

class RecentRows {
 public:
  // Rows of at most `max_bytes` together: between 16 and 1024 of them.
  static size_t capacity_for(size_t row_bytes, size_t max_bytes = size_t{4} << 20) {
    const size_t rows = row_bytes == 0 ? 0 : max_bytes / row_bytes;
    return rows < 16 ? 16 : rows > 1024 ? 1024 : rows;
  }

  RecentRows(size_t row_bytes, size_t capacity)
      : row_bytes_(row_bytes), data_(row_bytes * capacity), token_of_(capacity, -1), last_use_(capacity, 0) {}

  // The row of `token`, marked as used now; null when it is not kept. The
  // pointer holds until the next put().
  const uint8_t* find(int32_t token) {
    const auto found = slot_of_.find(token);
    if (found == slot_of_.end()) return nullptr;
    last_use_[found->second] = ++clock_;
    return data_.data() + found->second * row_bytes_;
  }

  void put(int32_t token, const uint8_t* row) {
    if (token_of_.empty() || slot_of_.count(token) != 0) return;
    size_t slot = 0;
    for (size_t s = 1; s < last_use_.size(); ++s) {
      if (last_use_[s] < last_use_[slot]) slot = s;
    }
    if (token_of_[slot] >= 0) slot_of_.erase(token_of_[slot]);
    token_of_[slot] = token;
    slot_of_[token] = slot;
    last_use_[slot] = ++clock_;
    std::memcpy(data_.data() + slot * row_bytes_, row, row_bytes_);
  }

  size_t bytes() const { return data_.size(); }

 private:
  size_t row_bytes_;
  std::vector<uint8_t> data_;
  std::vector<int32_t> token_of_;   // per slot; -1: free
  std::vector<uint64_t> last_use_;  // per slot; 0: never (free slots go first)
  std::unordered_map<int32_t, size_t> slot_of_;
  uint64_t clock_ = 0;
};

}  // namespace sipllm

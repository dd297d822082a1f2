// The weights of one stream unit (a transformer block, or a piece of the
// output head) as the forward pass reads them: by name, each in its file type.
// A member is empty (null) when the unit has no such tensor; a fused tensor
// (Phi-3's attn_qkv, its gate+up ffn_up) fills several members, each a range
// of its rows, so the forward pass never knows the difference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/tensor_type.h"

namespace sipllm {

// A matrix of `rows` rows of `cols` elements each, in the file's type.
struct WeightMatrix {
  TensorType type = TensorType::kF32;
  int rows = 0;
  int cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;

  explicit operator bool() const { return data != nullptr; }
  // Rows [first, first + count) of this matrix.
  WeightMatrix row_range(int first, int count) const {
    WeightMatrix m = *this;
    m.rows = count;
    m.data = data + static_cast<size_t>(first) * row_bytes;
    return m;
  }
};

struct UnitWeights {
  // Attention.
  const float* attn_norm = nullptr;
  WeightMatrix attn_q, attn_k, attn_v;
  const float* attn_q_bias = nullptr;
  const float* attn_k_bias = nullptr;
  const float* attn_v_bias = nullptr;
  const float* attn_q_norm = nullptr;  // one head's worth, applied to every head
  const float* attn_k_norm = nullptr;
  WeightMatrix attn_output;
  const float* post_attention_norm = nullptr;

  // Feed-forward.
  const float* ffn_norm = nullptr;
  WeightMatrix ffn_gate, ffn_up, ffn_down;
  const float* post_ffw_norm = nullptr;

  // A piece of the output head: the final norm (first piece only) and some
  // rows of the output matrix.
  const float* output_norm = nullptr;
  WeightMatrix output;
};

}  // namespace sipllm

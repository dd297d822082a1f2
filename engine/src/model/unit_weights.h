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
//
// Its blocks lie in one of two layouts. Row-major, as in the file: row after
// row. Or in tiles of four rows (tile_rows() in kernels/matmul.h arranges a
// quantized matrix so when it is loaded): each tile holds block 0 of its four
// rows, then block 1 of each, and so on; the last tile, of the rows left
// over, likewise. The kernels read four rows at a time, and a tile is what
// they read, in order: one sequential stream, which the hardware prefetchers
// follow, where four rows side by side are four streams they lose. A tile
// takes the bytes its rows take row-major, so rows [4k, 4k + 4) are in the
// same place in both layouts. (For some types a whole tile's four blocks of
// a group are rearranged further, their values interleaved: tile_rows() says
// how; matrix_block() reads a block back in either case.)
struct WeightMatrix {
  static constexpr int kTileRows = 4;

  TensorType type = TensorType::kF32;
  int rows = 0;
  int cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  size_t tile_block_bytes = 0;  // 0: row-major; else tiled, with blocks of this many bytes

  bool tiled() const { return tile_block_bytes != 0; }

  explicit operator bool() const { return data != nullptr; }
  // Rows [first, first + count) of a row-major matrix.
  WeightMatrix row_range(int first, int count) const {
    WeightMatrix m = *this;
    m.rows = count;
    m.data = data + static_cast<size_t>(first) * row_bytes;
    return m;
  }
  // Where row r's first block is, and the bytes from each of its blocks to
  // the next.
  const uint8_t* row_start(int r) const {
    if (!tiled()) return data + static_cast<size_t>(r) * row_bytes;
    const int tile = r / kTileRows * kTileRows;
    return data + static_cast<size_t>(tile) * row_bytes + static_cast<size_t>(r - tile) * tile_block_bytes;
  }
  size_t block_stride(int r) const {
    if (!tiled()) return tensor_type_traits(type).block_bytes;
    const int tile = r / kTileRows * kTileRows;
    return static_cast<size_t>(rows - tile < kTileRows ? rows - tile : kTileRows) * tile_block_bytes;
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

  // A recurrent layer: its causal convolution's taps (conv_kernel per
  // channel, the last for the current position)...
  const float* conv_weight = nullptr;
  // ...in a DeltaNet layer (Qwen3.5) over the fused q, k, v, with the
  // output gate z, the per-head decay (ssm_a * softplus(alpha x + dt_bias))
  // and update strength (sigmoid(beta x)), the output's norm and projection;
  WeightMatrix ssm_qkv, ssm_gate, ssm_alpha, ssm_beta;
  const float* ssm_dt_bias = nullptr;
  const float* ssm_a = nullptr;
  const float* ssm_norm = nullptr;  // one value head's worth, applied to every head
  WeightMatrix ssm_out;
  // ...in a short-convolution layer (LFM2), its projections in (B, C, x)
  // and out.
  WeightMatrix conv_in, conv_out;

  // Feed-forward.
  const float* ffn_norm = nullptr;
  WeightMatrix ffn_gate, ffn_up, ffn_down;
  const float* post_ffw_norm = nullptr;
  // ...or a mixture of experts: the router (a logit per expert), every
  // expert's gate, up and down matrices (expert e's rows the e-th run of
  // rows / expert_count), LFM2-MoE's bias of the choice, Qwen3.5-MoE's shared
  // expert and the vector of its sigmoid gate.
  WeightMatrix ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps;
  const float* expert_bias = nullptr;
  WeightMatrix ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
  const float* shared_expert_gate = nullptr;

  // Gemma 4's per-layer inputs: the projection of the embedding into every
  // layer's input and its norm (block 0 only), then in each block the branch
  // after the feed-forward, x += post_norm(proj(gelu(gate x) * input)), and
  // the scale of the layer's output.
  WeightMatrix per_layer_model_proj;
  const float* per_layer_proj_norm = nullptr;
  WeightMatrix per_layer_gate, per_layer_proj;
  const float* per_layer_post_norm = nullptr;
  const float* layer_output_scale = nullptr;

  // A piece of the output head: the final norm (first piece only) and some
  // rows of the output matrix.
  const float* output_norm = nullptr;
  WeightMatrix output;
};

}  // namespace sipllm

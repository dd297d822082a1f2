// The arithmetic of the forward pass, on prepared weights.
//
// Every function computes each output element with a fixed order of
// operations that depends only on the shapes: not on the thread count, not on
// how many positions are processed together. That is what makes layer-major
// prefill bit-identical to one token at a time, and 1 thread identical to N.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tensor_type.h"

namespace sipllm {

class ThreadPool;

// A matrix of `rows` rows of `cols` elements each, in the file's type.
struct WeightMatrix {
  TensorType type = TensorType::kF32;
  int rows = 0;
  int cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
};

// y[p * y_stride + r] = dot(W[r], x[p]) for p < n_positions; x is
// n_positions x cols, row-major. y_stride defaults to w.rows. Rows are split
// across the pool; each weight row is read once for all positions.
void matmul(const WeightMatrix& w, const float* x, int n_positions, float* y, ThreadPool& pool,
            int y_stride = 0);

// Copies row `row` of `w` out as floats.
void dequantize_matrix_row(const WeightMatrix& w, int row, float* out);

// out = x / sqrt(mean(x^2) + eps) * weight
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);

// Rotates adjacent pairs (2i, 2i+1) of the first rope_dims elements of each
// head by pos * freq_base^(-2i/rope_dims): ggml's "normal" rope, which llama
// GGUF files are converted for.
void rope(float* vec, int n_heads, int head_dim, int rope_dims, int pos, float freq_base);

// In place softmax over x[0..n).
void softmax(float* x, int n);

// gate[i] = silu(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int n);

}  // namespace sipllm

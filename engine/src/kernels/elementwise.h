// The per-position vector operations of the forward pass, SIMD, each with its
// plain scalar reference. Each result depends only on its own inputs (never
// on a batch), which keeps prefill bit-identical to one token at a time.
#pragma once

namespace sipllm {

// out = x / sqrt(mean(x^2) + eps) * weight
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
void rmsnorm_reference(float* out, const float* x, const float* weight, int n, float eps);

// ggml's "normal" rope, which llama GGUF files are converted for: rotates the
// adjacent pairs (2i, 2i+1) of the first rope_dims elements of each head by
// the angle pos * freq_base^(-2i/rope_dims).
//
// rope_angles() writes the table of a position (2 * rope_dims floats: for
// pair i, cos, cos, -sin, sin), computed in double; one table serves every
// head and layer of the position. rope_rotate() applies it; it equals
// rope_reference() bit for bit.
void rope_angles(int pos, int rope_dims, float freq_base, float* table);
void rope_rotate(float* vec, int n_heads, int head_dim, int rope_dims, const float* table);
void rope_reference(float* vec, int n_heads, int head_dim, int rope_dims, int pos, float freq_base);

// In place softmax over x[0..n).
void softmax(float* x, int n);
void softmax_reference(float* x, int n);

// gate[i] = silu(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int n);
void swiglu_reference(float* gate, const float* up, int n);

// x[i] += y[i]
void add_in_place(float* x, const float* y, int n);

}  // namespace sipllm

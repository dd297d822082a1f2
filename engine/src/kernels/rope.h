// Rotary position embedding, as ggml computes it for the GGUF files users
// have (ggml_rope_ext without YaRN): for pair i of the first `dims` elements
// of each head, the angle
//
//   theta_i = pos * freq_scale * freq_base^(-2i / dims) / factor_i
//
// (factor_i from per-pair frequency divisors such as Llama 3's rope_freqs or
// Phi-3's LongRoPE factors, else 1), and the pair turns by theta_i with cos
// and sin both multiplied by attn_factor. The pairs are adjacent elements
// (2i, 2i+1) in ggml's "normal" style, (i, i + dims/2) in NEOX style.
//
// The angles are computed in float as ggml computes them (the powers of
// freq_base^(-2/dims) as a running product), so they are llama.cpp's to the
// bit; cos and sin in double, rounded once. rope_table() writes the table of
// one position (2 * dims floats); one table serves every head and every
// layer with the same setup. rope_rotate() applies it and equals
// rope_reference() bit for bit. dims is at most 1024.
#pragma once

#include "model/rope_style.h"

namespace sipllm {

struct RopeParams {
  int dims = 0;  // rotating elements of each head (even)
  RopeStyle style = RopeStyle::kNormal;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  float attn_factor = 1.0f;
  const float* factors = nullptr;  // dims / 2 divisors, or null
};

void rope_table(int pos, const RopeParams& p, float* table);
void rope_rotate(float* vec, int n_heads, int head_dim, const RopeParams& p, const float* table);
void rope_reference(float* vec, int n_heads, int head_dim, int pos, const RopeParams& p);

}  // namespace sipllm

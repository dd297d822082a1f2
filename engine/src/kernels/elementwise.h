// The per-position vector operations of the forward pass, SIMD, each with its
// plain scalar reference. Each result depends only on its own inputs (never
// on a batch), which keeps prefill bit-identical to one token at a time.
#pragma once

#include <cstdint>

namespace sipllm {

// out = x / sqrt(mean(x^2) + eps) * weight
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
void rmsnorm_reference(float* out, const float* x, const float* weight, int n, float eps);

// In place softmax over x[0..n).
void softmax(float* x, int n);
void softmax_reference(float* x, int n);

// gate[i] = silu(gate[i]) * up[i]
void swiglu(float* gate, const float* up, int n);
void swiglu_reference(float* gate, const float* up, int n);

// gate[i] = gelu(gate[i]) * up[i], with GELU's tanh form
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Gemma), as ggml computes
// it on a CPU (its table of half floats): x rounded to a half float, GELU of
// it rounded to a half float; 0 below -10 and x above 10.
void gelu_tanh_glu(float* gate, const float* up, int n);
void gelu_tanh_glu_reference(float* gate, const float* up, int n);

// x[i] = cap * tanh(x[i] / cap) (Gemma 2's soft-capping of logits).
void softcap(float* x, int n, float cap);
void softcap_reference(float* x, int n, float cap);

// out[i] = x[i] as a half float (half.h's float_to_fp16); true where one of
// them is infinite or NaN.
bool floats_to_halves(const float* x, uint16_t* out, int n);
bool floats_to_halves_reference(const float* x, uint16_t* out, int n);

// x[i] += y[i]
void add_in_place(float* x, const float* y, int n);

// x[i] *= s
void scale_in_place(float* x, int n, float s);

}  // namespace sipllm

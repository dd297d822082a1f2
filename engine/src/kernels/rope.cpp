#include "kernels/rope.h"

#include <cmath>

#include "kernels/simd.h"

namespace sipllm {
namespace {

// The rotations of every pair at `pos`, with ggml's float arithmetic (the
// angle of pair i is pos times the i-th power of base^(-2/dims), formed as a
// running product), so the angles are the ones llama.cpp uses, to the bit.
void pair_rotations(int pos, const RopeParams& p, float* c, float* s) {
  const float step = std::pow(p.freq_base, -2.0f / static_cast<float>(p.dims));
  float theta_base = static_cast<float>(pos);
  for (int i = 0; i < p.dims / 2; ++i) {
    const float theta = p.freq_scale * (p.factors != nullptr ? theta_base / p.factors[i] : theta_base);
    c[i] = static_cast<float>(std::cos(static_cast<double>(theta))) * p.attn_factor;
    s[i] = static_cast<float>(std::sin(static_cast<double>(theta))) * p.attn_factor;
    theta_base *= step;
  }
}

constexpr int kMaxPairs = 512;

}  // namespace

void rope_table(int pos, const RopeParams& p, float* table) {
  const int pairs = p.dims / 2;
  float cos[kMaxPairs], sin[kMaxPairs];
  pair_rotations(pos, p, cos, sin);
  for (int i = 0; i < pairs; ++i) {
    const float c = cos[i], s = sin[i];
    if (p.style == RopeStyle::kNormal) {
      // For pair i: cos, cos, -sin, sin, so two pairs rotate per vector.
      table[4 * i] = c;
      table[4 * i + 1] = c;
      table[4 * i + 2] = -s;
      table[4 * i + 3] = s;
    } else {
      // All the cosines, then all the sines.
      table[i] = c;
      table[pairs + i] = s;
    }
  }
}

void rope_rotate(float* vec, int n_heads, int head_dim, const RopeParams& p, const float* table) {
  const int pairs = p.dims / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
    if (p.style == RopeStyle::kNormal) {
      // Two pairs per vector: [a0 b0 a1 b1] * [c0 c0 c1 c1] + [b0 a0 b1 a1] * [-s0 s0 -s1 s1].
      const int pairs2 = pairs & ~1;
      for (int i = 0; i < pairs2; i += 2) {
        const v128_t t0 = simd::load(table + 4 * i), t1 = simd::load(table + 4 * i + 4);
        const v128_t c = wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5);
        const v128_t s = wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7);
        const v128_t x = simd::load(v + 2 * i);
        const v128_t swapped = wasm_i32x4_shuffle(x, x, 1, 0, 3, 2);
        simd::store(v + 2 * i, wasm_f32x4_add(wasm_f32x4_mul(x, c), wasm_f32x4_mul(swapped, s)));
      }
      for (int i = pairs2; i < pairs; ++i) {
        const float* t = table + 4 * i;
        const float v0 = v[2 * i], v1 = v[2 * i + 1];
        v[2 * i] = v0 * t[0] + v1 * t[2];
        v[2 * i + 1] = v1 * t[1] + v0 * t[3];
      }
    } else {
      // Four pairs per step: the first halves in one vector, the second in another.
      const float* cos = table;
      const float* sin = table + pairs;
      const int pairs4 = pairs & ~3;
      for (int i = 0; i < pairs4; i += 4) {
        const v128_t c = simd::load(cos + i), s = simd::load(sin + i);
        const v128_t a = simd::load(v + i), b = simd::load(v + pairs + i);
        simd::store(v + i, wasm_f32x4_sub(wasm_f32x4_mul(a, c), wasm_f32x4_mul(b, s)));
        simd::store(v + pairs + i, wasm_f32x4_add(wasm_f32x4_mul(b, c), wasm_f32x4_mul(a, s)));
      }
      for (int i = pairs4; i < pairs; ++i) {
        const float a = v[i], b = v[pairs + i], minus_s = -sin[i];
        v[i] = a * cos[i] + b * minus_s;
        v[pairs + i] = b * cos[i] + a * sin[i];
      }
    }
  }
}

void rope_reference(float* vec, int n_heads, int head_dim, int pos, const RopeParams& p) {
  const int pairs = p.dims / 2;
  float cos[kMaxPairs], sin[kMaxPairs];
  pair_rotations(pos, p, cos, sin);
  for (int i = 0; i < pairs; ++i) {
    const float c = cos[i], s = sin[i];
    // a c - b s written as a c + b (-s) in the normal style: a subtraction
    // next to an addition is what GCC 12 fuses into vfmaddsub even with
    // -ffp-contract=off, and the reference must not be fused.
    const float minus_s = -s;
    for (int h = 0; h < n_heads; ++h) {
      float* v = vec + static_cast<size_t>(h) * head_dim;
      const int first = p.style == RopeStyle::kNormal ? 2 * i : i;
      const int second = p.style == RopeStyle::kNormal ? 2 * i + 1 : pairs + i;
      const float a = v[first];
      const float b = v[second];
      v[first] = a * c + b * minus_s;
      v[second] = b * c + a * s;
    }
  }
}

}  // namespace sipllm

#include "kernels/elementwise.h"

#include <cmath>

#include "kernels/simd.h"

namespace sipllm {

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  const int n4 = n & ~3;
  v128_t squares = wasm_f32x4_splat(0.0f);
  for (int i = 0; i < n4; i += 4) {
    const v128_t v = simd::load(x + i);
    squares = wasm_f32x4_add(squares, wasm_f32x4_mul(v, v));
  }
  float ss = simd::sum_f32(squares);
  for (int i = n4; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const v128_t scale4 = wasm_f32x4_splat(scale);
  for (int i = 0; i < n4; i += 4) {
    simd::store(out + i, wasm_f32x4_mul(wasm_f32x4_mul(simd::load(x + i), scale4), simd::load(weight + i)));
  }
  for (int i = n4; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rmsnorm_reference(float* out, const float* x, const float* weight, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double scale = 1.0 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * scale * weight[i]);
}

void rope_angles(int pos, int rope_dims, float freq_base, float* table) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dims);
    const double angle = pos * freq;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    table[4 * i] = c;
    table[4 * i + 1] = c;
    table[4 * i + 2] = -s;
    table[4 * i + 3] = s;
  }
}

void rope_rotate(float* vec, int n_heads, int head_dim, int rope_dims, const float* table) {
  // Two pairs per vector: [a0 b0 a1 b1] * [c0 c0 c1 c1] + [b0 a0 b1 a1] * [-s0 s0 -s1 s1].
  const int pairs = rope_dims / 2;
  const int pairs2 = pairs & ~1;
  for (int h = 0; h < n_heads; ++h) {
    float* v = vec + static_cast<size_t>(h) * static_cast<size_t>(head_dim);
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
  }
}

void rope_reference(float* vec, int n_heads, int head_dim, int rope_dims, int pos, float freq_base) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dims);
    const double angle = pos * freq;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    // v0 c - v1 s written as v0 c + v1 (-s): a subtraction next to an
    // addition is what GCC 12 fuses into vfmaddsub even with
    // -ffp-contract=off, and the reference must not be fused.
    const float minus_s = -s;
    for (int h = 0; h < n_heads; ++h) {
      float* v = vec + static_cast<size_t>(h) * head_dim + 2 * i;
      const float v0 = v[0];
      const float v1 = v[1];
      v[0] = v0 * c + v1 * minus_s;
      v[1] = v1 * c + v0 * s;
    }
  }
}

namespace {

// Applies f to x[0..n) four lanes at a time; the last partial vector goes
// through a padded copy so every element sees the same arithmetic.
template <class F>
void map4(float* x, const float* y, int n, F f) {
  const int n4 = n & ~3;
  for (int i = 0; i < n4; i += 4) simd::store(x + i, f(simd::load(x + i), y ? simd::load(y + i) : wasm_f32x4_splat(0.0f)));
  if (n4 < n) {
    alignas(16) float xs[4] = {0, 0, 0, 0};
    alignas(16) float ys[4] = {0, 0, 0, 0};
    for (int i = n4; i < n; ++i) {
      xs[i - n4] = x[i];
      if (y) ys[i - n4] = y[i];
    }
    simd::store(xs, f(simd::load(xs), simd::load(ys)));
    for (int i = n4; i < n; ++i) x[i] = xs[i - n4];
  }
}

}  // namespace

void softmax(float* x, int n) {
  const int n4 = n & ~3;
  float max = x[0];
  if (n4 > 0) {
    v128_t m = simd::load(x);
    for (int i = 4; i < n4; i += 4) m = wasm_f32x4_pmax(m, simd::load(x + i));
    max = simd::max_f32(m);
  }
  for (int i = n4; i < n; ++i) max = max < x[i] ? x[i] : max;
  const v128_t max4 = wasm_f32x4_splat(max);
  map4(x, nullptr, n, [&](v128_t v, v128_t) { return simd::exp_f32x4(wasm_f32x4_sub(v, max4)); });
  v128_t sum4 = wasm_f32x4_splat(0.0f);
  for (int i = 0; i < n4; i += 4) sum4 = wasm_f32x4_add(sum4, simd::load(x + i));
  float sum = simd::sum_f32(sum4);
  for (int i = n4; i < n; ++i) sum += x[i];
  const v128_t inverse = wasm_f32x4_splat(1.0f / sum);
  map4(x, nullptr, n, [&](v128_t v, v128_t) { return wasm_f32x4_mul(v, inverse); });
}

void softmax_reference(float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - max) / sum);
}

void swiglu(float* gate, const float* up, int n) {
  const v128_t one = wasm_f32x4_splat(1.0f);
  map4(gate, up, n, [&](v128_t g, v128_t u) {
    const v128_t silu = wasm_f32x4_div(g, wasm_f32x4_add(one, simd::exp_f32x4(wasm_f32x4_neg(g))));
    return wasm_f32x4_mul(silu, u);
  });
}

void swiglu_reference(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_in_place(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace sipllm

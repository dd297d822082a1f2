#include "kernels/elementwise.h"

#include <cmath>

#include "kernels/simd.h"
#include "model/half.h"

namespace sipllm {

// As ggml's rms_norm: each square rounded to float, their sum held in
// double, the mean rounded to float.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  const int n4 = n & ~3;
  v128_t low = wasm_f64x2_splat(0.0), high = low;
  for (int i = 0; i < n4; i += 4) {
    const v128_t v = simd::load(x + i);
    const v128_t squares = wasm_f32x4_mul(v, v);
    low = wasm_f64x2_add(low, wasm_f64x2_promote_low_f32x4(squares));
    high = wasm_f64x2_add(high, wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle(squares, squares, 2, 3, 0, 1)));
  }
  const v128_t sums = wasm_f64x2_add(low, high);
  double ss = wasm_f64x2_extract_lane(sums, 0) + wasm_f64x2_extract_lane(sums, 1);
  for (int i = n4; i < n; ++i) ss += static_cast<double>(x[i] * x[i]);
  const auto mean = static_cast<float>(ss / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
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
  const simd::ExpF32x4 exp4;
  map4(x, nullptr, n, [&](v128_t v, v128_t) { return exp4(wasm_f32x4_sub(v, max4)); });
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
  const simd::ExpF32x4 exp4;
  map4(gate, up, n, [&](v128_t g, v128_t u) {
    const v128_t silu = wasm_f32x4_div(g, wasm_f32x4_add(one, exp4(wasm_f32x4_neg(g))));
    return wasm_f32x4_mul(silu, u);
  });
}

void swiglu_reference(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

namespace {

// tanh(y) = 1 - 2 / (1 + exp(2y)): exact at both ends (exp overflowing to
// infinity gives 1, underflowing to 0 gives -1).
v128_t tanh_f32x4(v128_t y, const simd::ExpF32x4& exp4) {
  const v128_t one = wasm_f32x4_splat(1.0f);
  const v128_t e = exp4(wasm_f32x4_add(y, y));
  return wasm_f32x4_sub(one, wasm_f32x4_div(wasm_f32x4_splat(2.0f), wasm_f32x4_add(one, e)));
}

constexpr float kGeluCoefficient = 0.044715f;
constexpr float kGeluSaturation = 10.0f;
constexpr double kSqrtTwoOverPi = 0.79788456080286535588;

}  // namespace

void gelu_tanh_glu(float* gate, const float* up, int n) {
  // 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y)): no cancellation where tanh
  // nears -1.
  const v128_t one = wasm_f32x4_splat(1.0f);
  const v128_t c = wasm_f32x4_splat(kGeluCoefficient);
  const v128_t minus_2s = wasm_f32x4_splat(static_cast<float>(-2 * kSqrtTwoOverPi));
  const v128_t low = wasm_f32x4_splat(-kGeluSaturation), high = wasm_f32x4_splat(kGeluSaturation);
  const simd::HalfRounding round_to_f16;
  const simd::ExpF32x4 exp4;
  map4(gate, up, n, [&](v128_t g, v128_t u) {
    const v128_t x = round_to_f16(g);
    const v128_t cube = wasm_f32x4_mul(wasm_f32x4_mul(x, x), x);
    const v128_t e = exp4(wasm_f32x4_mul(minus_2s, wasm_f32x4_add(x, wasm_f32x4_mul(c, cube))));
    v128_t gelu = round_to_f16(wasm_f32x4_div(x, wasm_f32x4_add(one, e)));
    gelu = wasm_v128_bitselect(wasm_f32x4_splat(0.0f), gelu, wasm_f32x4_le(g, low));
    gelu = wasm_v128_bitselect(g, gelu, wasm_f32x4_ge(g, high));
    return wasm_f32x4_mul(gelu, u);
  });
}

void gelu_tanh_glu_reference(float* gate, const float* up, int n) {
  const auto round_f16 = [](double v) { return fp16_to_float(float_to_fp16(static_cast<float>(v))); };
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    double gelu = g;
    if (g <= -kGeluSaturation) {
      gelu = 0;
    } else if (g < kGeluSaturation) {
      const double x = round_f16(g);
      gelu = round_f16(0.5 * x * (1.0 + std::tanh(kSqrtTwoOverPi * (x + kGeluCoefficient * x * x * x))));
    }
    gate[i] = static_cast<float>(gelu * up[i]);
  }
}

void softcap(float* x, int n, float cap) {
  const v128_t cap4 = wasm_f32x4_splat(cap);
  const v128_t inverse = wasm_f32x4_splat(1.0f / cap);
  const simd::ExpF32x4 exp4;
  map4(x, nullptr, n,
       [&](v128_t v, v128_t) { return wasm_f32x4_mul(cap4, tanh_f32x4(wasm_f32x4_mul(v, inverse), exp4)); });
}

void softcap_reference(float* x, int n, float cap) {
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

bool floats_to_halves(const float* x, uint16_t* out, int n) {
  const simd::HalfRounding rounding;
  const int n8 = n & ~7;
  v128_t largest = wasm_i32x4_splat(0);  // of the halves' magnitudes
  const v128_t magnitude = wasm_i32x4_splat(0x7fff);
  for (int i = 0; i < n8; i += 8) {
    const v128_t low = rounding.bits_simd128(simd::load(x + i));
    const v128_t high = rounding.bits_simd128(simd::load(x + i + 4));
    largest = wasm_u32x4_max(largest, wasm_u32x4_max(wasm_v128_and(low, magnitude), wasm_v128_and(high, magnitude)));
    simd::store(out + i, wasm_u16x8_narrow_i32x4(low, high));
  }
  const bool non_finite = wasm_v128_any_true(wasm_u32x4_ge(largest, wasm_i32x4_splat(0x7c00)));
  return floats_to_halves_reference(x + n8, out + n8, n - n8) || non_finite;
}

bool floats_to_halves_reference(const float* x, uint16_t* out, int n) {
  bool non_finite = false;  // an exponent of all ones
  for (int i = 0; i < n; ++i) {
    out[i] = float_to_fp16(x[i]);
    non_finite = non_finite || (out[i] & 0x7c00u) == 0x7c00u;
  }
  return non_finite;
}

void add_in_place(float* x, const float* y, int n) {
  for (int i = 0; i < n; ++i) x[i] += y[i];
}

void scale_in_place(float* x, int n, float s) {
  for (int i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace sipllm

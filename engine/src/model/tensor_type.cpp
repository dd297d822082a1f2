#include "model/tensor_type.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "model/half.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

constexpr TensorTypeTraits kF32Traits{"F32", 1, 4};
constexpr TensorTypeTraits kF16Traits{"F16", 1, 2};
constexpr TensorTypeTraits kBF16Traits{"BF16", 1, 2};
constexpr TensorTypeTraits kQ4_0Traits{"Q4_0", kQK4_0, sizeof(BlockQ4_0)};
constexpr TensorTypeTraits kQ4_1Traits{"Q4_1", kQK4_1, sizeof(BlockQ4_1)};
constexpr TensorTypeTraits kQ5_0Traits{"Q5_0", kQK5_0, sizeof(BlockQ5_0)};
constexpr TensorTypeTraits kQ5_1Traits{"Q5_1", kQK5_1, sizeof(BlockQ5_1)};
constexpr TensorTypeTraits kQ8_0Traits{"Q8_0", kQK8_0, sizeof(BlockQ8_0)};
constexpr TensorTypeTraits kQ4_KTraits{"Q4_K", kQK_K, sizeof(BlockQ4_K)};
constexpr TensorTypeTraits kQ5_KTraits{"Q5_K", kQK_K, sizeof(BlockQ5_K)};
constexpr TensorTypeTraits kQ6_KTraits{"Q6_K", kQK_K, sizeof(BlockQ6_K)};
constexpr TensorTypeTraits kQ8_KTraits{"Q8_K", kQK_K, sizeof(BlockQ8_K)};
constexpr TensorTypeTraits kQ5_0UnpackedTraits{"Q5_0 unpacked", kQK5_0, sizeof(BlockQ5_0Unpacked)};
constexpr TensorTypeTraits kQ5_1UnpackedTraits{"Q5_1 unpacked", kQK5_1, sizeof(BlockQ5_1Unpacked)};

// Blocks are read with memcpy from possibly unaligned file buffers.
template <typename Block>
Block load_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

template <typename Block>
void store_block(const Block& b, uint8_t* p) {
  std::memcpy(p, &b, sizeof b);
}

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void store_u32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Round to nearest, ties to even, independent of the FPU rounding mode: adding
// 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. Valid for
// |x| <= 2^22, which every caller guarantees. Same results as ggml's helper.
int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  uint32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}

// ---- 32-element blocks -------------------------------------------------------------

void dequantize_q4_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_0; ++i) {
    const auto b = load_block<BlockQ4_0>(src + i * sizeof(BlockQ4_0));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      out[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
      out[j + kQK4_0 / 2] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_1; ++i) {
    const auto b = load_block<BlockQ4_1>(src + i * sizeof(BlockQ4_1));
    const float d = fp16_to_float(b.d);
    const float m = fp16_to_float(b.m);
    float* out = dst + i * kQK4_1;
    for (int j = 0; j < kQK4_1 / 2; ++j) {
      out[j] = static_cast<float>(b.qs[j] & 0x0f) * d + m;
      out[j + kQK4_1 / 2] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_0; ++i) {
    const auto b = load_block<BlockQ5_0>(src + i * sizeof(BlockQ5_0));
    const float d = fp16_to_float(b.d);
    const uint32_t qh = load_u32(b.qh);
    float* out = dst + i * kQK5_0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      out[j] = static_cast<float>(lo - 16) * d;
      out[j + kQK5_0 / 2] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_1; ++i) {
    const auto b = load_block<BlockQ5_1>(src + i * sizeof(BlockQ5_1));
    const float d = fp16_to_float(b.d);
    const float m = fp16_to_float(b.m);
    const uint32_t qh = load_u32(b.qh);
    float* out = dst + i * kQK5_1;
    for (int j = 0; j < kQK5_1 / 2; ++j) {
      const int lo = (b.qs[j] & 0x0f) | static_cast<int>((qh >> j) & 1u) << 4;
      const int hi = (b.qs[j] >> 4) | static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      out[j] = static_cast<float>(lo) * d + m;
      out[j + kQK5_1 / 2] = static_cast<float>(hi) * d + m;
    }
  }
}

// Each value of a Q5_0 or Q5_1 block as it reads (0..31), in element order.
void five_bit_values(const uint8_t qs[16], uint32_t qh, uint8_t q[32]) {
  for (int j = 0; j < 16; ++j) {
    q[j] = static_cast<uint8_t>((qs[j] & 0x0f) | ((qh >> j) & 1u) << 4);
    q[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4);
  }
}

void dequantize_q5_0_unpacked(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_0; ++i) {
    const auto b = load_block<BlockQ5_0Unpacked>(src + i * sizeof(BlockQ5_0Unpacked));
    const float d = fp16_to_float(b.d);
    for (int j = 0; j < kQK5_0; ++j) dst[i * kQK5_0 + j] = static_cast<float>(b.q[j] - 16) * d;
  }
}

void dequantize_q5_1_unpacked(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_1; ++i) {
    const auto b = load_block<BlockQ5_1Unpacked>(src + i * sizeof(BlockQ5_1Unpacked));
    const float d = fp16_to_float(b.d);
    const float m = fp16_to_float(b.m);
    for (int j = 0; j < kQK5_1; ++j) dst[i * kQK5_1 + j] = static_cast<float>(b.q[j]) * d + m;
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK8_0; ++i) {
    const auto b = load_block<BlockQ8_0>(src + i * sizeof(BlockQ8_0));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK8_0;
    for (int j = 0; j < kQK8_0; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// Symmetric blocks (Q4_0, Q5_0): the element of largest magnitude maps to
// the most negative level -2^(bits-1), keeping its sign; the returned scale
// may be negative.
float symmetric_scale(const float* x, int n, float most_negative_level) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max / most_negative_level;
}

void quantize_q4_0(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_0; ++i) {
    const float* x = src + i * kQK4_0;
    const float d = symmetric_scale(x, kQK4_0, -8);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = float_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      // Truncation after +8.5 rounds half up; the opposite extreme (+8) clamps to 15.
      const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
      const int hi = std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q5_0(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_0; ++i) {
    const float* x = src + i * kQK5_0;
    const float d = symmetric_scale(x, kQK5_0, -16);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ5_0 b;
    b.d = float_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK5_0 / 2; ++j) {
      const int lo = std::min(31, static_cast<int>(x[j] * id + 16.5f));
      const int hi = std::min(31, static_cast<int>(x[j + kQK5_0 / 2] * id + 16.5f));
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kQK5_0 / 2);
    }
    store_u32(qh, b.qh);
    store_block(b, dst + i * sizeof b);
  }
}

// Asymmetric blocks (Q4_1, Q5_1): the range [min, max] spans the levels 0..nmax.
template <typename Block, int kBits>
void quantize_with_min(const float* src, uint8_t* dst, size_t n) {
  constexpr int kBlock = 32;
  constexpr int nmax = (1 << kBits) - 1;
  for (size_t i = 0; i < n / kBlock; ++i) {
    const float* x = src + i * kBlock;
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < kBlock; ++j) {
      min = std::min(min, x[j]);
      max = std::max(max, x[j]);
    }
    const float d = (max - min) / nmax;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    Block b{};
    b.d = float_to_fp16(d);
    b.m = float_to_fp16(min);
    uint32_t qh = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = std::min(nmax, static_cast<int>((x[j] - min) * id + 0.5f));
      const int hi = std::min(nmax, static_cast<int>((x[j + kBlock / 2] - min) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j;
      qh |= static_cast<uint32_t>(hi >> 4) << (j + kBlock / 2);
    }
    if constexpr (kBits == 5) store_u32(qh, b.qh);
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q8_0(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK8_0; ++i) {
    const float* x = src + i * kQK8_0;
    float amax = 0;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = float_to_fp16(d);
    // Ties away from zero, as roundf.
    for (int j = 0; j < kQK8_0; ++j) b.qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
    store_block(b, dst + i * sizeof b);
  }
}

// ---- K-quants ----------------------------------------------------------------------

// Q4_K and Q5_K: eight sub-blocks of 32 with 6-bit scales and mins; Q5_K
// adds a fifth bit per value from qh (bit 2c for the low nibbles of chunk c,
// bit 2c + 1 for the high ones).
template <class Block, bool kFifthBit>
void dequantize_q45_k(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<Block>(src + i * sizeof(Block));
    const float d = fp16_to_float(b.d);
    const float dmin = fp16_to_float(b.dmin);
    float* out = dst + i * kQK_K;
    for (int c = 0; c < 4; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      const KScaleMin lo = k_quant_scale_min(b.scales, 2 * c);
      const KScaleMin hi = k_quant_scale_min(b.scales, 2 * c + 1);
      const float d_lo = d * lo.scale, m_lo = dmin * lo.min;
      const float d_hi = d * hi.scale, m_hi = dmin * hi.min;
      for (int l = 0; l < 32; ++l) {
        int q_lo = q[l] & 0x0f;
        int q_hi = q[l] >> 4;
        if constexpr (kFifthBit) {
          q_lo |= ((b.qh[l] >> (2 * c)) & 1) << 4;
          q_hi |= ((b.qh[l] >> (2 * c + 1)) & 1) << 4;
        }
        out[64 * c + l] = d_lo * static_cast<float>(q_lo) - m_lo;
        out[64 * c + 32 + l] = d_hi * static_cast<float>(q_hi) - m_hi;
      }
    }
  }
}

void dequantize_q6_k(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ6_K>(src + i * sizeof(BlockQ6_K));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK_K;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      float* y = out + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q2 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q3 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        const int8_t* sc = b.scales + 8 * h + l / 16;
        y[l] = d * static_cast<float>(sc[0]) * static_cast<float>(q0);
        y[l + 32] = d * static_cast<float>(sc[2]) * static_cast<float>(q1);
        y[l + 64] = d * static_cast<float>(sc[4]) * static_cast<float>(q2);
        y[l + 96] = d * static_cast<float>(sc[6]) * static_cast<float>(q3);
      }
    }
  }
}

void dequantize_q8_k(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = load_block<BlockQ8_K>(src + i * sizeof(BlockQ8_K));
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b.d * static_cast<float>(b.qs[j]);
  }
}

// Fits x ~ scale * L - min_offset with L in 0..nmax (min_offset >= 0) by
// weighted least squares over a sweep of candidate scales, keeping the best
// (ggml's make_qkx2_quants). Writes L, returns the scale and sets *min_offset.
float fit_scale_and_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                        float* min_offset, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;  // the offset only ever lowers the levels
  if (max == min) {
    std::fill(L, L + n, 0);
    *min_offset = -min;
    return 0;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t candidate[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      candidate[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * candidate[i] + this_min - x[i];
        error += weights[i] * (diff * diff);
      }
      if (error < best_error) {
        std::copy(candidate, candidate + n, L);
        best_error = error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *min_offset = -min;
  return scale;
}

// Fits x ~ scale * (L - nmax) with L in 0..2*nmax-1, weighting each element by
// x^2, over a sweep of candidate scales (ggml's make_qx_quants, rmse_type 1).
float fit_symmetric_scale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < 1e-15f) {  // all zero
    std::fill(L, L + n, 0);
    return 0;
  }
  auto level = [nmax](float v) { return std::clamp(nearest_int(v), -nmax, nmax - 1); };
  float iscale = -nmax / max;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale * x[i]);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale * x[i]);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    // Least squares: the error falls as sum_lx^2 / sum_l2 rises.
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + level(iscale * x[i]));
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Packs eight 6-bit scales and mins as k_quant_scale_min unpacks them.
void pack_k_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* scales) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | ((lm[j] & 0x0f) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Q4_K and Q5_K share everything but the level count and the fit's sweep.
// Returns the levels of the 256 elements in L; the caller packs them.
template <typename Block>
void quantize_k_block_with_min(const float* x, int nmax, float rmin, int nstep, Block& b, uint8_t* L) {
  float scales[8], mins[8], weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    // Weights favour larger elements, with a floor at the sub-block's RMS.
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_and_min(32, nmax, xs, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::clamp(nearest_int(inv_scale * scales[j]), 0, 63));
    lm[j] = static_cast<uint8_t>(std::clamp(nearest_int(inv_min * mins[j]), 0, 63));
  }
  pack_k_scales(ls, lm, b.scales);
  b.d = float_to_fp16(max_scale / 63.0f);
  b.dmin = float_to_fp16(max_min / 63.0f);
  // Re-pick every level against the scales as stored (rounded to 6 bits and fp16).
  for (int j = 0; j < 8; ++j) {
    const KScaleMin sm = k_quant_scale_min(b.scales, j);
    const float d = fp16_to_float(b.d) * sm.scale;
    if (d == 0) continue;
    const float dm = fp16_to_float(b.dmin) * sm.min;
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
}

void quantize_q4_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    BlockQ4_K b{};
    uint8_t L[kQK_K];
    quantize_k_block_with_min(src + i * kQK_K, 15, -1.0f, 20, b, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
      }
    }
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q5_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    BlockQ5_K b{};
    uint8_t L[kQK_K];
    quantize_k_block_with_min(src + i * kQK_K, 31, -0.5f, 15, b, L);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
        b.qs[32 * c + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
        b.qh[l] |= static_cast<uint8_t>((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
      }
    }
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q6_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ6_K b{};
    int8_t L[kQK_K];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_symmetric_scale(16, 32, x + 16 * s, L + 16 * s);
      if (std::fabs(scales[s]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    if (max_abs_scale >= 1e-15f) {
      // The largest sub-block scale maps to -128, keeping its sign.
      const float iscale = -128.0f / max_scale;
      b.d = float_to_fp16(1 / iscale);
      for (int s = 0; s < 16; ++s) {
        b.scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[s])));
      }
      for (int s = 0; s < 16; ++s) {
        const float d = fp16_to_float(b.d) * b.scales[s];
        if (d == 0) continue;
        for (int l = 0; l < 16; ++l) {
          L[16 * s + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * s + l] / d), -32, 31) + 32);
        }
      }
      for (int h = 0; h < 2; ++h) {
        const int8_t* Lh = L + 128 * h;
        for (int l = 0; l < 32; ++l) {
          const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
          b.ql[64 * h + l] = static_cast<uint8_t>((q0 & 0x0f) | ((q2 & 0x0f) << 4));
          b.ql[64 * h + l + 32] = static_cast<uint8_t>((q1 & 0x0f) | ((q3 & 0x0f) << 4));
          b.qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | (q1 >> 4) << 2 | (q2 >> 4) << 4 | (q3 >> 4) << 6);
        }
      }
    }  // else: an all-zero block stays all zero
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q8_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ8_K b{};
    float max = 0, amax = 0;
    for (int j = 0; j < kQK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax != 0) {
      // -127 rather than -128 keeps every level's negation representable.
      const float iscale = -127.0f / max;
      for (int j = 0; j < kQK_K; ++j) b.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
      for (int g = 0; g < kQK_K / 16; ++g) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
        b.bsums[g] = static_cast<int16_t>(sum);
      }
      b.d = 1 / iscale;
    }
    store_block(b, dst + i * sizeof b);
  }
}

// The types no file holds: the engine's own in-memory forms.
bool in_memory_only(TensorType type) {
  return type == TensorType::kQ8_K || type == TensorType::kQ5_0Unpacked || type == TensorType::kQ5_1Unpacked;
}

const TensorTypeTraits* traits_of(TensorType type) {
  switch (type) {
    case TensorType::kF32: return &kF32Traits;
    case TensorType::kF16: return &kF16Traits;
    case TensorType::kBF16: return &kBF16Traits;
    case TensorType::kQ4_0: return &kQ4_0Traits;
    case TensorType::kQ4_1: return &kQ4_1Traits;
    case TensorType::kQ5_0: return &kQ5_0Traits;
    case TensorType::kQ5_1: return &kQ5_1Traits;
    case TensorType::kQ8_0: return &kQ8_0Traits;
    case TensorType::kQ4_K: return &kQ4_KTraits;
    case TensorType::kQ5_K: return &kQ5_KTraits;
    case TensorType::kQ6_K: return &kQ6_KTraits;
    case TensorType::kQ8_K: return &kQ8_KTraits;
    case TensorType::kQ5_0Unpacked: return &kQ5_0UnpackedTraits;
    case TensorType::kQ5_1Unpacked: return &kQ5_1UnpackedTraits;
  }
  return nullptr;
}

}  // namespace

const TensorTypeTraits* tensor_type_traits(uint32_t type_id) {
  const auto type = static_cast<TensorType>(type_id);
  return in_memory_only(type) ? nullptr : traits_of(type);
}

const TensorTypeTraits& tensor_type_traits(TensorType type) { return *traits_of(type); }

std::string tensor_type_name(uint32_t type_id) {
  if (in_memory_only(static_cast<TensorType>(type_id))) return traits_of(static_cast<TensorType>(type_id))->name;
  // ggml's names for the types this engine does not read, so errors can say
  // "Q2_K" rather than a number.
  static const char* const kGgmlNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0",    "Q5_1",    "Q8_0", "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",  "IQ3_XXS",
      "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
      "IQ1_M", "BF16"};
  if (type_id < sizeof(kGgmlNames) / sizeof(kGgmlNames[0])) return kGgmlNames[type_id];
  return "type " + std::to_string(type_id);
}

void dequantize_row(TensorType type, const void* src, float* dst, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, bytes, n * sizeof(float));
      return;
    case TensorType::kF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = fp16_to_float(h);
      }
      return;
    case TensorType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        dst[i] = bf16_to_float(h);
      }
      return;
    case TensorType::kQ4_0: dequantize_q4_0(bytes, dst, n); return;
    case TensorType::kQ4_1: dequantize_q4_1(bytes, dst, n); return;
    case TensorType::kQ5_0: dequantize_q5_0(bytes, dst, n); return;
    case TensorType::kQ5_1: dequantize_q5_1(bytes, dst, n); return;
    case TensorType::kQ8_0: dequantize_q8_0(bytes, dst, n); return;
    case TensorType::kQ4_K: dequantize_q45_k<BlockQ4_K, false>(bytes, dst, n); return;
    case TensorType::kQ5_K: dequantize_q45_k<BlockQ5_K, true>(bytes, dst, n); return;
    case TensorType::kQ6_K: dequantize_q6_k(bytes, dst, n); return;
    case TensorType::kQ8_K: dequantize_q8_k(bytes, dst, n); return;
    case TensorType::kQ5_0Unpacked: dequantize_q5_0_unpacked(bytes, dst, n); return;
    case TensorType::kQ5_1Unpacked: dequantize_q5_1_unpacked(bytes, dst, n); return;
  }
}

TensorType unpacked_type(TensorType type) {
  if (type == TensorType::kQ5_0) return TensorType::kQ5_0Unpacked;
  if (type == TensorType::kQ5_1) return TensorType::kQ5_1Unpacked;
  return type;
}

namespace {

template <typename Packed, typename Unpacked>
void unpack_5bit(const uint8_t* src, uint8_t* dst, size_t n_blocks) {
  // Through a copy of a few blocks at a time, each copy read whole before
  // any of its blocks' unpacked bytes, which may land on it, are written.
  // (Block by block through a local variable, the WebAssembly build's
  // optimised code got blocks wrong in place.)
  constexpr size_t kChunk = 32;
  Packed chunk[kChunk];
  for (size_t first = 0; first < n_blocks; first += kChunk) {
    const size_t n = std::min(kChunk, n_blocks - first);
    std::memcpy(chunk, src + first * sizeof(Packed), n * sizeof(Packed));
    for (size_t i = 0; i < n; ++i) {
      Unpacked out;
      std::memcpy(&out, &chunk[i], offsetof(Packed, qh));  // the scale, and the minimum if any
      five_bit_values(chunk[i].qs, load_u32(chunk[i].qh), out.q);
      std::memcpy(dst + (first + i) * sizeof out, &out, sizeof out);
    }
  }
}

}  // namespace

void unpack_5bit_blocks(TensorType type, const uint8_t* src, uint8_t* dst, size_t n_blocks) {
  if (type == TensorType::kQ5_0) return unpack_5bit<BlockQ5_0, BlockQ5_0Unpacked>(src, dst, n_blocks);
  if (type == TensorType::kQ5_1) return unpack_5bit<BlockQ5_1, BlockQ5_1Unpacked>(src, dst, n_blocks);
  throw Error(ErrorKind::kInvalidArgument, tensor_type_name(static_cast<uint32_t>(type)) + " has no unpacked form");
}

void quantize_row(TensorType type, const float* src, void* dst, size_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::kF32:
      std::memcpy(bytes, src, n * sizeof(float));
      return;
    case TensorType::kF16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_fp16(src[i]);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case TensorType::kBF16:
      for (size_t i = 0; i < n; ++i) {
        // Round to nearest even on the dropped 16 bits (NaN stays NaN).
        uint32_t bits = float_to_bits(src[i]);
        const uint16_t h = (bits & 0x7fffffffu) > 0x7f800000u
                               ? static_cast<uint16_t>((bits >> 16) | 0x40u)
                               : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
        std::memcpy(bytes + 2 * i, &h, 2);
      }
      return;
    case TensorType::kQ4_0: quantize_q4_0(src, bytes, n); return;
    case TensorType::kQ4_1: quantize_with_min<BlockQ4_1, 4>(src, bytes, n); return;
    case TensorType::kQ5_0: quantize_q5_0(src, bytes, n); return;
    case TensorType::kQ5_1: quantize_with_min<BlockQ5_1, 5>(src, bytes, n); return;
    case TensorType::kQ8_0: quantize_q8_0(src, bytes, n); return;
    case TensorType::kQ4_K: quantize_q4_k(src, bytes, n); return;
    case TensorType::kQ5_K: quantize_q5_k(src, bytes, n); return;
    case TensorType::kQ6_K: quantize_q6_k(src, bytes, n); return;
    case TensorType::kQ8_K: quantize_q8_k(src, bytes, n); return;
    case TensorType::kQ5_0Unpacked:
    case TensorType::kQ5_1Unpacked: {
      const TensorType packed = type == TensorType::kQ5_0Unpacked ? TensorType::kQ5_0 : TensorType::kQ5_1;
      std::vector<uint8_t> blocks(tensor_bytes(tensor_type_traits(packed), n));
      quantize_row(packed, src, blocks.data(), n);
      unpack_5bit_blocks(packed, blocks.data(), bytes, n / kQK5_0);
      return;
    }
  }
}

}  // namespace sipllm

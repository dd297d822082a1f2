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

// Below this a group's largest magnitude counts as zero (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

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

// The element of largest magnitude (the first of equals), as ggml's
// quantizers find it; 0 when all are zero.
float largest_magnitude(const float* x, int n) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// ---- 32-element blocks -------------------------------------------------------------

void dequantize_q4_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_0; ++i) {
    const auto b = read_block<BlockQ4_0>(src + i * sizeof(BlockQ4_0));
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
    const auto b = read_block<BlockQ4_1>(src + i * sizeof(BlockQ4_1));
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
    const auto b = read_block<BlockQ5_0>(src + i * sizeof(BlockQ5_0));
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
    const auto b = read_block<BlockQ5_1>(src + i * sizeof(BlockQ5_1));
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
    const auto b = read_block<BlockQ5_0Unpacked>(src + i * sizeof(BlockQ5_0Unpacked));
    const float d = fp16_to_float(b.d);
    for (int j = 0; j < kQK5_0; ++j) dst[i * kQK5_0 + j] = static_cast<float>(b.q[j] - 16) * d;
  }
}

void dequantize_q5_1_unpacked(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK5_1; ++i) {
    const auto b = read_block<BlockQ5_1Unpacked>(src + i * sizeof(BlockQ5_1Unpacked));
    const float d = fp16_to_float(b.d);
    const float m = fp16_to_float(b.m);
    for (int j = 0; j < kQK5_1; ++j) dst[i * kQK5_1 + j] = static_cast<float>(b.q[j]) * d + m;
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK8_0; ++i) {
    const auto b = read_block<BlockQ8_0>(src + i * sizeof(BlockQ8_0));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK8_0;
    for (int j = 0; j < kQK8_0; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// Symmetric blocks (Q4_0, Q5_0): the element of largest magnitude maps to
// the most negative level -2^(bits-1), keeping its sign; the returned scale
// may be negative.
float symmetric_scale(const float* x, int n, float most_negative_level) {
  return largest_magnitude(x, n) / most_negative_level;
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
    const auto b = read_block<Block>(src + i * sizeof(Block));
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
    const auto b = read_block<BlockQ6_K>(src + i * sizeof(BlockQ6_K));
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
    const auto b = read_block<BlockQ8_K>(src + i * sizeof(BlockQ8_K));
    for (int j = 0; j < kQK_K; ++j) dst[i * kQK_K + j] = b.d * static_cast<float>(b.qs[j]);
  }
}

// Q2_K and Q3_K: per half h and shift s, bits 2s..2s+1 of qs[32h + l] are
// element 128h + 32s + l (see tensor_type.h). Each element's float as ggml
// computes it: the sub-block's float factor first, then one product.
void dequantize_q2_k(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = read_block<BlockQ2_K>(src + i * sizeof(BlockQ2_K));
    const float d = fp16_to_float(b.d), dmin = fp16_to_float(b.dmin);
    float* out = dst + i * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {
      const uint8_t sc = b.scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
      out[e] = dl * static_cast<float>(k_quant_low_2bits(b.qs, e)) - ml;
    }
  }
}

void dequantize_q3_k(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = read_block<BlockQ3_K>(src + i * sizeof(BlockQ3_K));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK_K;
    for (int e = 0; e < kQK_K; ++e) {
      const float dl = d * static_cast<float>(q3_k_scale(b.scales, e / 16) - 32);
      const int q = k_quant_low_2bits(b.qs, e) | q3_k_high_bit(b.hmask, e) << 2;
      out[e] = dl * static_cast<float>(q - 4);
    }
  }
}

void dequantize_iq4_nl(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_NL; ++i) {
    const auto b = read_block<BlockIQ4_NL>(src + i * sizeof(BlockIQ4_NL));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK4_NL;
    for (int j = 0; j < kQK4_NL / 2; ++j) {
      out[j] = d * static_cast<float>(kIq4Levels[b.qs[j] & 0x0f]);
      out[j + kQK4_NL / 2] = d * static_cast<float>(kIq4Levels[b.qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const auto b = read_block<BlockIQ4_XS>(src + i * sizeof(BlockIQ4_XS));
    const float d = fp16_to_float(b.d);
    for (int g = 0; g < kQK_K / 32; ++g) {
      const float dl = d * static_cast<float>(iq4_xs_scale(b, g) - 32);
      float* out = dst + i * kQK_K + 32 * g;
      for (int j = 0; j < 16; ++j) {
        out[j] = dl * static_cast<float>(kIq4Levels[b.qs[16 * g + j] & 0x0f]);
        out[j + 16] = dl * static_cast<float>(kIq4Levels[b.qs[16 * g + j] >> 4]);
      }
    }
  }
}

void dequantize_mxfp4(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_MXFP4; ++i) {
    const auto b = read_block<BlockMXFP4>(src + i * sizeof(BlockMXFP4));
    const float d = e8m0_half(b.e);
    float* out = dst + i * kQK_MXFP4;
    for (int j = 0; j < kQK_MXFP4 / 2; ++j) {
      out[j] = static_cast<float>(kMxfp4Levels[b.qs[j] & 0x0f]) * d;
      out[j + kQK_MXFP4 / 2] = static_cast<float>(kMxfp4Levels[b.qs[j] >> 4]) * d;
    }
  }
}

// Fits x ~ scale * L - min_offset with L in 0..nmax (min_offset >= 0) by
// weighted least squares over a sweep of candidate scales, keeping the one
// of least weighted squared (or, with absolute_errors, absolute) error
// (ggml's make_qkx2_quants). Writes L, returns the scale and sets *min_offset.
float fit_scale_and_min(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                        float* min_offset, float rmin, float rdelta, int nstep, bool absolute_errors = false) {
  const auto error_of = [absolute_errors](float diff) { return absolute_errors ? std::fabs(diff) : diff * diff; };
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
    best_error += weights[i] * error_of(diff);
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
        error += weights[i] * error_of(diff);
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
  const float max = largest_magnitude(x, n);
  if (std::fabs(max) < kGroupMaxEps) {  // all zero
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
    for (int s = 0; s < 16; ++s) scales[s] = fit_symmetric_scale(16, 32, x + 16 * s, L + 16 * s);
    const float max_scale = largest_magnitude(scales, 16);
    if (std::fabs(max_scale) >= kGroupMaxEps) {
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

// ---- Q2_K and Q3_K (ggml's quantize_row_q2_K_ref and quantize_row_q3_K_ref) ------

// 256 values of two bits (Q3_K's low two) as Q2_K and Q3_K lay them out.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* v = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(v[0] | v[32] << 2 | v[64] << 4 | v[96] << 6);
    }
  }
}

void quantize_q2_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ2_K b{};
    uint8_t L[kQK_K];
    float weights[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_scale_and_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = 15.0f / max_scale;
      for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      b.d = float_to_fp16(max_scale / 15.0f);
    } else {
      b.d = float_to_fp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = 15.0f / max_min;
      for (int j = 0; j < 16; ++j) b.scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      b.dmin = float_to_fp16(max_min / 15.0f);
    } else {
      b.dmin = float_to_fp16(0.0f);
    }
    // Each value again against the scales as stored.
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_float(b.d) * static_cast<float>(b.scales[j] & 0x0f);
      if (d == 0) continue;
      const float dm = fp16_to_float(b.dmin) * static_cast<float>(b.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<uint8_t>(std::clamp(nearest_int((x[16 * j + l] + dm) / d), 0, 3));
      }
    }
    pack_2bit(L, b.qs);
    store_block(b, dst + i * sizeof b);
  }
}

// Fits x ~ scale * L with L in -nmax..nmax-1 by least squares weighted by x^2,
// then moves single levels while that lowers the error, up to five rounds
// (ggml's make_q3_quants). Writes L + nmax, returns the scale.
float fit_q3_scale(int n, int nmax, const float* x, int8_t* L) {
  const float max = largest_magnitude(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int round = 0; round < 5; ++round) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        const int l = std::clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (l != L[i]) {
          slx += w * x[i] * l;
          sl2 += w * l * l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(l);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

void quantize_q3_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ3_K b{};
    int8_t L[kQK_K];
    float scales[16];
    for (int j = 0; j < 16; ++j) scales[j] = fit_q3_scale(16, 4, x + 16 * j, L + 16 * j);
    const float max_scale = largest_magnitude(scales, 16);
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = std::clamp<int>(static_cast<int8_t>(nearest_int(iscale * scales[j])), -32, 31) + 32;
        if (j < 8) {
          b.scales[j] = static_cast<uint8_t>(l & 0x0f);
        } else {
          b.scales[j - 8] |= static_cast<uint8_t>((l & 0x0f) << 4);
        }
        b.scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      b.d = float_to_fp16(1 / iscale);
    } else {
      b.d = float_to_fp16(0.0f);
    }
    // Each value again against the scales as stored.
    for (int j = 0; j < 16; ++j) {
      const float d = fp16_to_float(b.d) * static_cast<float>(q3_k_scale(b.scales, j) - 32);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        L[16 * j + l] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + l] / d), -4, 3) + 4);
      }
    }
    // The third bit of element e is bit e / 32 of hmask[e % 32].
    uint8_t low[kQK_K];
    for (int e = 0; e < kQK_K; ++e) {
      if (L[e] > 3) b.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      low[e] = static_cast<uint8_t>(L[e] > 3 ? L[e] - 4 : L[e]);
    }
    pack_2bit(low, b.qs);
    store_block(b, dst + i * sizeof b);
  }
}

// ---- IQ4_NL, IQ4_XS, MXFP4 --------------------------------------------------------

// The index of the level nearest x (levels ascending; the lower on a tie
// only when strictly nearer, as ggml's best_index_int8).
int nearest_level(const int8_t (&levels)[16], float x) {
  if (x <= levels[0]) return 0;
  if (x >= levels[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < levels[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - levels[hi - 1] < levels[hi] - x ? hi - 1 : hi;
}

// ggml's quantize_row_iq4_nl_impl without an importance matrix, with seven
// tries each side: each block of 32 gets the best of fifteen scales near the
// one that maps its largest value to the lowest level; in a super-block
// (IQ4_XS) those scales are then stored in six bits of one fp16 scale.
void quantize_iq4_super_block(int super_block, const float* x, uint16_t* d_out, uint8_t* qs, uint16_t* scales_h,
                              uint8_t* scales_l) {
  constexpr int kBlock = 32, kTries = 7;
  const int8_t (&levels)[16] = kIq4Levels;
  uint8_t L[kQK_K];
  float scales[kQK_K / kBlock];
  float weight[kBlock];
  for (int ib = 0; ib < super_block / kBlock; ++ib) {
    const float* xb = x + ib * kBlock;
    uint8_t* Lb = L + ib * kBlock;
    for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
    const float max = largest_magnitude(xb, kBlock);
    if (std::fabs(max) < kGroupMaxEps) {
      scales[ib] = 0;
      continue;
    }
    float d = -max / levels[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int l = nearest_level(levels, id * xb[j]);
      Lb[j] = static_cast<uint8_t>(l);
      const float q = levels[l], w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int t = -kTries; t <= kTries; ++t) {
      id = static_cast<float>(t + levels[0]) / max;
      sumqx = sumq2 = 0;
      for (int j = 0; j < kBlock; ++j) {
        const float q = levels[nearest_level(levels, id * xb[j])], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
      }
      if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
        d = sumqx / sumq2;
        best = d * sumqx;
      }
    }
    scales[ib] = d;
  }
  if (super_block > kBlock) {
    const float max_scale = largest_magnitude(scales, super_block / kBlock);
    *scales_h = 0;
    const float d = -max_scale / 32;
    *d_out = float_to_fp16(d);
    const float id = d != 0 ? 1 / d : 0.0f;
    for (int ib = 0; ib < super_block / kBlock; ++ib) {
      int l = std::clamp(nearest_int(id * scales[ib]), -32, 31);
      const float dl = d * l;
      const float idl = dl != 0 ? 1 / dl : 0.0f;
      for (int j = 0; j < kBlock; ++j) L[ib * kBlock + j] = static_cast<uint8_t>(nearest_level(levels, idl * x[ib * kBlock + j]));
      l += 32;
      if (ib % 2 == 0) {
        scales_l[ib / 2] = static_cast<uint8_t>(l & 0x0f);
      } else {
        scales_l[ib / 2] |= static_cast<uint8_t>((l & 0x0f) << 4);
      }
      *scales_h = static_cast<uint16_t>(*scales_h | (l >> 4) << (2 * ib));
    }
  } else {
    *d_out = float_to_fp16(scales[0]);
    const float id = scales[0] != 0 ? 1 / scales[0] : 0.0f;
    for (int j = 0; j < super_block; ++j) L[j] = static_cast<uint8_t>(nearest_level(levels, id * x[j]));
  }
  for (int i = 0; i < super_block / 32; ++i) {
    for (int j = 0; j < 16; ++j) qs[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | L[32 * i + 16 + j] << 4);
  }
}

void quantize_iq4_nl(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_NL; ++i) {
    BlockIQ4_NL b{};
    quantize_iq4_super_block(kQK4_NL, src + i * kQK4_NL, &b.d, b.qs, nullptr, nullptr);
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_iq4_xs(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    BlockIQ4_XS b{};
    quantize_iq4_super_block(kQK_K, src + i * kQK_K, &b.d, b.qs, &b.scales_h, b.scales_l);
    store_block(b, dst + i * sizeof b);
  }
}

// ggml's quantize_row_mxfp4_ref: the exponent that puts the largest value
// near the top level, then each value's nearest level (the first on a tie).
void quantize_mxfp4(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_MXFP4; ++i) {
    const float* x = src + i * kQK_MXFP4;
    BlockMXFP4 b{};
    float amax = 0;
    for (int j = 0; j < kQK_MXFP4; ++j) amax = std::max(amax, std::fabs(x[j]));
    b.e = amax > 0 ? static_cast<uint8_t>(static_cast<int>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = e8m0_half(b.e);
    const auto nearest = [d](float v) {
      int best = 0;
      float best_error = std::fabs(kMxfp4Levels[0] * d - v);
      for (int l = 1; l < 16; ++l) {
        const float error = std::fabs(kMxfp4Levels[l] * d - v);
        if (error < best_error) {
          best = l;
          best_error = error;
        }
      }
      return best;
    };
    for (int j = 0; j < kQK_MXFP4 / 2; ++j) {
      b.qs[j] = static_cast<uint8_t>(nearest(x[j]) | nearest(x[j + kQK_MXFP4 / 2]) << 4);
    }
    store_block(b, dst + i * sizeof b);
  }
}

void quantize_q8_k(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK_K; ++i) {
    const float* x = src + i * kQK_K;
    BlockQ8_K b{};
    const float max = largest_magnitude(x, kQK_K);
    if (max != 0) {
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

// ---- Plain floats ------------------------------------------------------------------

void dequantize_f32(const uint8_t* src, float* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

void quantize_f32(const float* src, uint8_t* dst, size_t n) { std::memcpy(dst, src, n * sizeof(float)); }

// F16 and BF16: 16 bits an element, widened by kWiden.
template <float (*kWiden)(uint16_t)>
void dequantize_16bit(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = kWiden(h);
  }
}

void quantize_f16(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = float_to_fp16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void quantize_bf16(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    // Round to nearest even on the dropped 16 bits (NaN stays NaN).
    const uint32_t bits = float_to_bits(src[i]);
    const uint16_t h = (bits & 0x7fffffffu) > 0x7f800000u
                           ? static_cast<uint16_t>((bits >> 16) | 0x40u)
                           : static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

// The unpacked types are written as their packed form, then unpacked.
template <TensorType kPacked, typename Packed>
void quantize_unpacked(const float* src, uint8_t* dst, size_t n) {
  std::vector<uint8_t> blocks(n / kQK5_0 * sizeof(Packed));
  quantize_row(kPacked, src, blocks.data(), n);
  unpack_5bit_blocks(kPacked, blocks.data(), dst, n / kQK5_0);
}

// ---- The table ---------------------------------------------------------------------

using T = TensorType;
constexpr TensorTypeTraits kTypes[] = {
    // type, name, block elements, block bytes, in files, to float, from float, row fallback, llama file type
    {T::kF32, "F32", 1, 4, true, dequantize_f32, quantize_f32, T::kF16, 0},
    {T::kF16, "F16", 1, 2, true, dequantize_16bit<fp16_to_float>, quantize_f16, T::kF16, 1},
    {T::kBF16, "BF16", 1, 2, true, dequantize_16bit<bf16_to_float>, quantize_bf16, T::kF16, 32},
    {T::kQ4_0, "Q4_0", kQK4_0, sizeof(BlockQ4_0), true, dequantize_q4_0, quantize_q4_0, T::kF16, 2},
    {T::kQ4_1, "Q4_1", kQK4_1, sizeof(BlockQ4_1), true, dequantize_q4_1, quantize_with_min<BlockQ4_1, 4>, T::kF16, 3},
    {T::kQ5_0, "Q5_0", kQK5_0, sizeof(BlockQ5_0), true, dequantize_q5_0, quantize_q5_0, T::kF16, 8},
    {T::kQ5_1, "Q5_1", kQK5_1, sizeof(BlockQ5_1), true, dequantize_q5_1, quantize_with_min<BlockQ5_1, 5>, T::kF16, 9},
    {T::kQ8_0, "Q8_0", kQK8_0, sizeof(BlockQ8_0), true, dequantize_q8_0, quantize_q8_0, T::kF16, 7},
    {T::kQ2_K, "Q2_K", kQK_K, sizeof(BlockQ2_K), true, dequantize_q2_k, quantize_q2_k, T::kIQ4_NL, 10},
    {T::kQ3_K, "Q3_K", kQK_K, sizeof(BlockQ3_K), true, dequantize_q3_k, quantize_q3_k, T::kIQ4_NL, 11},
    {T::kQ4_K, "Q4_K", kQK_K, sizeof(BlockQ4_K), true, dequantize_q45_k<BlockQ4_K, false>, quantize_q4_k, T::kQ5_0, 14},
    {T::kQ5_K, "Q5_K", kQK_K, sizeof(BlockQ5_K), true, dequantize_q45_k<BlockQ5_K, true>, quantize_q5_k, T::kQ5_1, 16},
    {T::kQ6_K, "Q6_K", kQK_K, sizeof(BlockQ6_K), true, dequantize_q6_k, quantize_q6_k, T::kQ8_0, 18},
    {T::kIQ4_NL, "IQ4_NL", kQK4_NL, sizeof(BlockIQ4_NL), true, dequantize_iq4_nl, quantize_iq4_nl, T::kF16, 25},
    {T::kIQ4_XS, "IQ4_XS", kQK_K, sizeof(BlockIQ4_XS), true, dequantize_iq4_xs, quantize_iq4_xs, T::kIQ4_NL, 30},
    {T::kMXFP4, "MXFP4", kQK_MXFP4, sizeof(BlockMXFP4), true, dequantize_mxfp4, quantize_mxfp4, T::kF16, 38},
    {T::kQ8_K, "Q8_K", kQK_K, sizeof(BlockQ8_K), false, dequantize_q8_k, quantize_q8_k, T::kF16, kNoFileType},
    {T::kQ5_0Unpacked, "Q5_0 unpacked", kQK5_0, sizeof(BlockQ5_0Unpacked), false, dequantize_q5_0_unpacked,
     quantize_unpacked<T::kQ5_0, BlockQ5_0>, T::kF16, kNoFileType},
    {T::kQ5_1Unpacked, "Q5_1 unpacked", kQK5_1, sizeof(BlockQ5_1Unpacked), false, dequantize_q5_1_unpacked,
     quantize_unpacked<T::kQ5_1, BlockQ5_1>, T::kF16, kNoFileType},
};

// kTypes indexed by type id (rows with no name: no such type).
struct TypeIndex {
  TensorTypeTraits by_id[kTensorTypeIdLimit] = {};
  constexpr TypeIndex() {
    for (const TensorTypeTraits& t : kTypes) by_id[static_cast<uint32_t>(t.type)] = t;
  }
};
constexpr TypeIndex kTypeIndex;

const TensorTypeTraits* find_type(uint32_t type_id) {
  if (type_id >= kTensorTypeIdLimit || kTypeIndex.by_id[type_id].name == nullptr) return nullptr;
  return &kTypeIndex.by_id[type_id];
}

}  // namespace

const TensorTypeTraits* tensor_type_traits(uint32_t type_id) {
  const TensorTypeTraits* traits = find_type(type_id);
  return traits != nullptr && traits->in_files ? traits : nullptr;
}

const TensorTypeTraits& tensor_type_traits(TensorType type) {
  const TensorTypeTraits* traits = find_type(static_cast<uint32_t>(type));
  if (traits == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, "no tensor type " + std::to_string(static_cast<uint32_t>(type)));
  }
  return *traits;
}

std::string tensor_type_name(uint32_t type_id) {
  if (const TensorTypeTraits* traits = find_type(type_id)) return traits->name;
  // ggml's names for the types this engine does not read, so errors can say
  // "IQ2_XXS" rather than a number.
  static const char* const kGgmlNames[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0",    "Q5_1",    "Q8_0", "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",  "IQ3_XXS",
      "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
      "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
      "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (type_id < sizeof(kGgmlNames) / sizeof(kGgmlNames[0])) return kGgmlNames[type_id];
  return "type " + std::to_string(type_id);
}

void dequantize_row(TensorType type, const void* src, float* dst, size_t n) {
  tensor_type_traits(type).to_float(static_cast<const uint8_t*>(src), dst, n);
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
  tensor_type_traits(type).from_float(src, static_cast<uint8_t*>(dst), n);
}

}  // namespace sipllm

// Q2_K, Q3_K, IQ4_XS (with Q8_K activations) and IQ4_NL, MXFP4 (with Q8_0
// activations): each weight block is first unpacked to signed 8-bit values
// and integer group scales (and Q2_K's group mins), straight from the layout
// description in tensor_type.h, then multiplied with the activations by
// integer dot products. Per block, for row r and position p:
//   A = sum over groups g of scale_g * (sum of value * x_q over g)
//   B = sum over groups g of min_g * (sum of x_q over g)          (Q2_K)
//   acc += (float)A * (d * d_x) - (float)B * (dmin * d_x)
// A fits int32 with room: |A| <= 8 * 32 * 32 * 127 * 127 (IQ4_XS) < 2^28.
//
// A block is unpacked once for every position of the call (prefill), so its
// cost is the decode's. The SIMD form differs from the reference only in how
// it sums the integer products (exact either way), so the two agree bit for
// bit.
#include <cstddef>
#include <cstring>

#include "kernels/quant_dot.h"
#include "kernels/row_tiles.h"
#include "kernels/simd.h"
#include "model/half.h"

namespace sipllm {
namespace {

// A block as integers. Groups of kGroup elements share a scale (and a min).
struct IntBlock {
  alignas(16) int8_t value[kQK_K];
  int32_t scale[16];
  int32_t min[16];
  float d, dmin;
};

struct Q2_KFormat {
  static constexpr ActivationFormat kActivations = ActivationFormat::kQ8_K;
  static constexpr int kElements = kQK_K, kGroup = 16;
  static constexpr bool kHasMin = true;
  static void unpack(const uint8_t* p, IntBlock* out) {
    const auto b = read_block<BlockQ2_K>(p);
    out->d = fp16_to_float(b.d);
    out->dmin = fp16_to_float(b.dmin);
    for (int g = 0; g < 16; ++g) {
      out->scale[g] = b.scales[g] & 0x0f;
      out->min[g] = b.scales[g] >> 4;
    }
    for (int e = 0; e < kQK_K; ++e) out->value[e] = static_cast<int8_t>(k_quant_low_2bits(b.qs, e));
  }
};

struct Q3_KFormat {
  static constexpr ActivationFormat kActivations = ActivationFormat::kQ8_K;
  static constexpr int kElements = kQK_K, kGroup = 16;
  static constexpr bool kHasMin = false;
  static void unpack(const uint8_t* p, IntBlock* out) {
    const auto b = read_block<BlockQ3_K>(p);
    out->d = fp16_to_float(b.d);
    out->dmin = 0.0f;
    for (int g = 0; g < 16; ++g) out->scale[g] = q3_k_scale(b.scales, g) - 32;
    for (int e = 0; e < kQK_K; ++e) {
      out->value[e] = static_cast<int8_t>((k_quant_low_2bits(b.qs, e) | q3_k_high_bit(b.hmask, e) << 2) - 4);
    }
  }
};

struct IQ4_XSFormat {
  static constexpr ActivationFormat kActivations = ActivationFormat::kQ8_K;
  static constexpr int kElements = kQK_K, kGroup = 32;
  static constexpr bool kHasMin = false;
  static void unpack(const uint8_t* p, IntBlock* out) {
    const auto b = read_block<BlockIQ4_XS>(p);
    out->d = fp16_to_float(b.d);
    out->dmin = 0.0f;
    for (int g = 0; g < 8; ++g) {
      out->scale[g] = iq4_xs_scale(b, g) - 32;
      for (int j = 0; j < 16; ++j) {
        out->value[32 * g + j] = kIq4Levels[b.qs[16 * g + j] & 0x0f];
        out->value[32 * g + 16 + j] = kIq4Levels[b.qs[16 * g + j] >> 4];
      }
    }
  }
};

// IQ4_NL and MXFP4: one group, scale 1, sixteen levels laid out as Q4_0's
// values, and a block scale read by kScale.
template <typename Block, const int8_t (&kLevels)[16], float (*kScale)(const Block&)>
struct Levels32Format {
  static constexpr ActivationFormat kActivations = ActivationFormat::kQ8_0;
  static constexpr int kElements = 32, kGroup = 32;
  static constexpr bool kHasMin = false;
  static void unpack(const uint8_t* p, IntBlock* out) {
    const auto b = read_block<Block>(p);
    out->d = kScale(b);
    out->dmin = 0.0f;
    out->scale[0] = 1;
    for (int j = 0; j < 16; ++j) {
      out->value[j] = kLevels[b.qs[j] & 0x0f];
      out->value[16 + j] = kLevels[b.qs[j] >> 4];
    }
  }
};
float iq4_nl_scale(const BlockIQ4_NL& b) { return fp16_to_float(b.d); }
float mxfp4_scale(const BlockMXFP4& b) { return e8m0_half(b.e); }
using IQ4_NLFormat = Levels32Format<BlockIQ4_NL, kIq4Levels, iq4_nl_scale>;
using MXFP4Format = Levels32Format<BlockMXFP4, kMxfp4Levels, mxfp4_scale>;

// Sum of value * x over n elements (a multiple of 16), in four int32 lanes
// added up at the end: exact, as the reference's one by one.
inline int32_t dot_simd(const int8_t* w, const int16_t* x, int n) {
  v128_t acc = wasm_i32x4_splat(0);
  for (int e = 0; e < n; e += 16) {
    const v128_t wv = simd::load(w + e);
    acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_low_i8x16(wv), simd::load(x + e)));
    acc = wasm_i32x4_add(acc, wasm_i32x4_dot_i16x8(wasm_i16x8_extend_high_i8x16(wv), simd::load(x + e + 8)));
  }
  return wasm_i32x4_extract_lane(acc, 0) + wasm_i32x4_extract_lane(acc, 1) + wasm_i32x4_extract_lane(acc, 2) +
         wasm_i32x4_extract_lane(acc, 3);
}

inline int32_t dot_reference(const int8_t* w, const int16_t* x, int n) {
  int32_t sum = 0;
  for (int e = 0; e < n; ++e) sum += w[e] * x[e];
  return sum;
}

// Rows [row_begin, row_end), every position; each block unpacked once.
template <class F, bool kSimd>
void rows_unpacked(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x, float* y,
                   size_t y_stride) {
  if constexpr (kSimd) check_tile_start(w, row_begin);  // as every SIMD kernel
  const QuantizedActivations& q = *x.q;
  const int n_blocks = w.cols / F::kElements;
  const int activation_blocks_per_block = F::kElements / q.block;  // 1 for each format here
  static_assert(F::kElements % 16 == 0 && F::kGroup % 16 == 0, "groups are whole chunks of 16");
  IntBlock block;
  for (int r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.row_start(r);
    const size_t stride = w.block_stride(r);
    for (int p = 0; p < x.n_positions; ++p) y[static_cast<size_t>(p) * y_stride + static_cast<size_t>(r)] = 0.0f;
    for (int b = 0; b < n_blocks; ++b) {
      F::unpack(row + static_cast<size_t>(b) * stride, &block);
      for (int p = 0; p < x.n_positions; ++p) {
        const int16_t* xq = q.q_row(p) + static_cast<size_t>(b) * F::kElements;
        int32_t a = 0, bsum = 0;
        for (int g = 0; g < F::kElements / F::kGroup; ++g) {
          const int8_t* wv = block.value + g * F::kGroup;
          const int32_t sum = kSimd ? dot_simd(wv, xq + g * F::kGroup, F::kGroup)
                                    : dot_reference(wv, xq + g * F::kGroup, F::kGroup);
          a += block.scale[g] * sum;
        }
        if constexpr (F::kHasMin) {
          const int32_t* xs16 = q.sums16_row(p) + static_cast<size_t>(b) * (F::kElements / 16);
          for (int g = 0; g < F::kElements / 16; ++g) bsum += block.min[g] * xs16[g];
        }
        const float dx = q.d_row(p)[b * activation_blocks_per_block];
        float term = static_cast<float>(a) * (block.d * dx);
        if constexpr (F::kHasMin) term = term - static_cast<float>(bsum) * (block.dmin * dx);
        float& out = y[static_cast<size_t>(p) * y_stride + static_cast<size_t>(r)];
        out = out + term;
      }
    }
  }
}

template <class F>
constexpr MatmulKernel unpacked_kernel() {
  return MatmulKernel{F::kActivations, rows_unpacked<F, true>, rows_unpacked<F, false>};
}

}  // namespace

const MatmulKernel kMatmulQ2_K = unpacked_kernel<Q2_KFormat>();
const MatmulKernel kMatmulQ3_K = unpacked_kernel<Q3_KFormat>();
const MatmulKernel kMatmulIQ4_XS = unpacked_kernel<IQ4_XSFormat>();
const MatmulKernel kMatmulIQ4_NL = unpacked_kernel<IQ4_NLFormat>();
const MatmulKernel kMatmulMXFP4 = unpacked_kernel<MXFP4Format>();

}  // namespace sipllm

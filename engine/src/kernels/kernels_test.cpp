// The SIMD kernels against their scalar references: bit for bit where the
// arithmetic is integer (or replicates a fixed float order), within stated
// tolerances where floats are summed in another order, on awkward sizes.
// Also what the engine's determinism rests on: a result does not depend on
// how many positions share a call, which rows share a tile, or the threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "model/half.h"
#include "kernels/activation_quant.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "kernels/simd.h"
#include "core/kv_cache.h"
#include "sipllm/error.h"
#include "model/tensor_type.h"
#include "core/thread_pool.h"

namespace sipllm {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Equal as bit patterns (so -0 differs from 0 and NaNs are compared too).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (bits_of(a[i]) != bits_of(b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// ---- Half floats -------------------------------------------------------------

TEST(KernelsFp16, FastConversionEqualsExactForEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float exact = fp16_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(simd::fp16_to_f32(static_cast<uint16_t>(h))), bits_of(exact)) << "fp16 0x" << std::hex << h;
  }
  for (uint32_t h = 0; h < 65536; h += 4) {
    const v128_t lanes = wasm_i32x4_make(static_cast<int32_t>(h), static_cast<int32_t>(h + 1),
                                         static_cast<int32_t>(h + 2), static_cast<int32_t>(h + 3));
    alignas(16) float exact_form[4], scaled_form[4];
    simd::store(exact_form, simd::fp16x4_to_f32x4_simd128(lanes));
    const v128_t sign_extended = wasm_i32x4_shr(wasm_i32x4_shl(lanes, 16), 16);
    simd::store(scaled_form, simd::finite_fp16x4_to_scaled_f32x4_simd128(sign_extended));
    for (uint32_t j = 0; j < 4; ++j) {
      const float exact = fp16_to_float(static_cast<uint16_t>(h + j));
      ASSERT_EQ(bits_of(exact_form[j]), bits_of(exact)) << "fp16 0x" << std::hex << h + j;
      if (!std::isfinite(exact)) continue;
      // Exactly the value over 2^112, subnormal halves included: products
      // with a factor scaled by 2^112 are those with the value.
      ASSERT_EQ(bits_of(scaled_form[j] * 0x1p112f), bits_of(exact)) << "fp16 0x" << std::hex << h + j;
      ASSERT_EQ(bits_of(scaled_form[j]), bits_of(std::ldexp(exact, -112))) << "fp16 0x" << std::hex << h + j;
    }
    alignas(16) float out[4], converted[4];
    simd::store(out, simd::fp16x4_to_f32x4(lanes));
    simd::store(converted, simd::HalvesToFloats{}(static_cast<uint16_t>(h), static_cast<uint16_t>(h + 1),
                                                  static_cast<uint16_t>(h + 2), static_cast<uint16_t>(h + 3)));
    for (uint32_t j = 0; j < 4; ++j) {
      const float exact = fp16_to_float(static_cast<uint16_t>(h + j));
      if (std::isnan(exact)) {  // a hardware conversion quiets a signalling NaN
        ASSERT_TRUE(std::isnan(out[j])) << "fp16 0x" << std::hex << h + j;
        ASSERT_TRUE(std::isnan(converted[j])) << "fp16 0x" << std::hex << h + j;
      } else {
        ASSERT_EQ(bits_of(out[j]), bits_of(exact)) << "fp16 0x" << std::hex << h + j;
        ASSERT_EQ(bits_of(converted[j]), bits_of(exact)) << "fp16 0x" << std::hex << h + j;
      }
    }
  }
  // One infinity among finite halves: the whole group takes the slow path.
  alignas(16) float mixed[4];
  simd::store(mixed, simd::HalvesToFloats{}(0x3c00, 0x7c00, 0x0001, 0xc000));
  EXPECT_EQ(mixed[0], 1.0f);
  EXPECT_EQ(mixed[1], INFINITY);
  EXPECT_EQ(mixed[2], 0x1p-24f);
  EXPECT_EQ(mixed[3], -2.0f);
  // The loading form, four at a time from memory.
  for (uint32_t h = 0; h < 65536; h += 4) {
    const uint16_t halves[4] = {static_cast<uint16_t>(h), static_cast<uint16_t>(h + 1), static_cast<uint16_t>(h + 2),
                                static_cast<uint16_t>(h + 3)};
    alignas(16) float out[4];
    simd::store(out, simd::load_fp16x4(halves));
    alignas(16) float scaled[4];
    simd::store(scaled, simd::load_finite_fp16x4_scaled(halves));
    for (uint32_t j = 0; j < 4; ++j) {
      const float exact = fp16_to_float(halves[j]);
      if (std::isnan(exact)) {
        ASSERT_TRUE(std::isnan(out[j])) << "fp16 0x" << std::hex << halves[j];
      } else {
        ASSERT_EQ(bits_of(out[j]), bits_of(exact)) << "fp16 0x" << std::hex << halves[j];
      }
      if (std::isfinite(exact)) {
        ASSERT_EQ(bits_of(scaled[j] * simd::kHalfLoadScale), bits_of(exact)) << "fp16 0x" << std::hex << halves[j];
      }
    }
  }
}

TEST(KernelsExp, WithinThreeUlpOfStdExp) {
  for (float x = -87.0f; x <= 88.5f; x += 0.0137f) {
    alignas(16) float out[4];
    simd::store(out, simd::exp_f32x4(wasm_f32x4_splat(x)));
    const double exact = std::exp(static_cast<double>(x));
    ASSERT_NEAR(out[0], exact, exact * 3.6e-7) << "x = " << x;
  }
  alignas(16) float out[4];
  simd::store(out, simd::exp_f32x4(wasm_f32x4_make(-1000.0f, 0.0f, -100.0f, 1000.0f)));
  EXPECT_LT(out[0], 1.2e-38f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_LT(out[2], 1.2e-38f);
  EXPECT_GT(out[3], 3e38f);
  // NaN stays NaN (a softmax over a NaN score must not hide it); the
  // infinities are taken as the range's ends.
  simd::store(out, simd::exp_f32x4(wasm_f32x4_make(NAN, -NAN, -INFINITY, INFINITY)));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_LT(out[2], 1.2e-38f);
  EXPECT_GT(out[3], 3e38f);
}

// ---- Activation quantization ---------------------------------------------------

TEST(KernelsActivationQuant, SimdEqualsReferenceAndStaysWithinHalfAStep) {
  std::mt19937 rng(7);
  struct Case {
    ActivationFormat format;
    int cols;
  };
  for (const Case c : {Case{ActivationFormat::kQ8_0, 32}, Case{ActivationFormat::kQ8_0, 96},
                       Case{ActivationFormat::kQ8_0, 576}, Case{ActivationFormat::kQ8_0, 4864},
                       Case{ActivationFormat::kQ8_K, 256}, Case{ActivationFormat::kQ8_K, 1536}}) {
    const int block = activation_block(c.format);
    for (float scale : {1.0f, 1e-3f, 300.0f}) {
      std::vector<float> x = random_floats(rng, static_cast<size_t>(c.cols), scale);
      for (int i = 0; i < block; ++i) x[static_cast<size_t>(i)] = 0.0f;  // an all-zero block
      x[static_cast<size_t>(block) % x.size()] = 1e-30f;                  // a tiny value
      if (scale == 1.0f && c.cols >= 2 * block) {
        // Ties, which go to even: 127 the block's largest, so its values
        // are rounded as they are.
        const float ties[] = {127.0f, 2.5f, -2.5f, 3.5f, -3.5f, 0.5f, -0.5f, 126.5f, -125.5f};
        for (size_t i = 0; i < std::size(ties); ++i) x[static_cast<size_t>(block) + 1 + i] = ties[i];
      }
      std::vector<int16_t> q(x.size()), q_ref(x.size());
      std::vector<float> d(x.size() / static_cast<size_t>(block)), d_ref(d.size());
      std::vector<int32_t> sums(x.size() / 32), sums_ref(sums.size());
      quantize_activation_row(x.data(), c.cols, c.format, q.data(), d.data(), sums.data());
      quantize_activation_row_reference(x.data(), c.cols, c.format, q_ref.data(), d_ref.data(), sums_ref.data());
      SCOPED_TRACE("block " + std::to_string(block) + ", cols " + std::to_string(c.cols));
      EXPECT_EQ(q, q_ref);
      EXPECT_TRUE(same_bits(d, d_ref));
      EXPECT_EQ(sums, sums_ref);
      for (size_t i = 0; i < x.size(); ++i) {
        // Values round with the exact step, max|x| / 127; Q8_0 then keeps it
        // as a half float (as ggml's block_q8_0 does), which moves every
        // product of the block by at most 127 times that rounding.
        const size_t b = i / static_cast<size_t>(block);
        float amax = 0;
        for (size_t j = b * static_cast<size_t>(block); j < (b + 1) * static_cast<size_t>(block); ++j) {
          amax = std::max(amax, std::fabs(x[j]));
        }
        const float exact = amax / 127.0f;
        const float stored = d[b];
        ASSERT_LE(std::abs(q[i]), 127);
        ASSERT_LE(std::fabs(x[i] - stored * q[i]),
                  exact * 0.5f * (1 + 1e-5f) + 127 * std::fabs(exact - stored) + 1e-37f) << i;
        if (c.format == ActivationFormat::kQ8_K) ASSERT_NEAR(stored, exact, exact * 1e-6f);
      }
      if (c.cols >= 64) {
        int32_t s = 0;
        for (int i = 0; i < 32; ++i) s += q[static_cast<size_t>(i) + 32];
        EXPECT_EQ(sums[1], s);
      }
    }
  }
}

// A block whose largest value is below 127 / FLT_MAX (a hostile model's
// activations, found by fuzzing) has no finite rounding factor: it rounds to
// zeros with a zero scale, like an all-zero block, instead of to saturated
// integers whose sum overflows.
TEST(KernelsActivationQuant, BlocksTooSmallToScaleRoundToZero) {
  for (ActivationFormat format : {ActivationFormat::kQ8_0, ActivationFormat::kQ8_K}) {
    const int block = activation_block(format);
    std::vector<float> x(static_cast<size_t>(2 * block));
    for (int i = 0; i < block; ++i) {
      x[static_cast<size_t>(i)] = (i % 2 ? -1 : 1) * (i % 3 ? 1e-38f : std::numeric_limits<float>::denorm_min());
      x[static_cast<size_t>(block + i)] = static_cast<float>(i - block / 2);  // an ordinary block after it
    }
    std::vector<int16_t> q(x.size()), q_ref(x.size());
    std::vector<float> d(2), d_ref(2);
    std::vector<int32_t> sums(x.size() / 32), sums_ref(sums.size());
    quantize_activation_row(x.data(), 2 * block, format, q.data(), d.data(), sums.data());
    quantize_activation_row_reference(x.data(), 2 * block, format, q_ref.data(), d_ref.data(), sums_ref.data());
    EXPECT_EQ(q, q_ref);
    EXPECT_TRUE(same_bits(d, d_ref));
    EXPECT_EQ(sums, sums_ref);
    for (int i = 0; i < block; ++i) ASSERT_EQ(q[static_cast<size_t>(i)], 0) << i;
    EXPECT_EQ(d[0], 0.0f);
    for (size_t r = 0; r < static_cast<size_t>(block / 32); ++r) EXPECT_EQ(sums[r], 0);
    // The next block is quantized as usual.
    EXPECT_GT(d[1], 0.0f);
    EXPECT_EQ(q[static_cast<size_t>(block)], -127);
  }
}

// ---- Matrix products ---------------------------------------------------------------

struct TestMatrix {
  TensorType type;
  int rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // rows x cols
  WeightMatrix view() const {
    WeightMatrix w;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    w.data = bytes.data();
    w.row_bytes = bytes.size() / static_cast<size_t>(rows);
    return w;
  }
};

// Weights quantized from random floats (as in a real file) or, with
// raw_bits, arbitrary block bytes with finite scales (every bit pattern of
// the quantized values, such as Q8_0's -128, gets exercised).
TestMatrix make_matrix(TensorType type, int rows, int cols, std::mt19937& rng, bool raw_bits) {
  const TensorTypeTraits& traits = tensor_type_traits(type);
  TestMatrix m{type, rows, cols, {}, {}};
  const size_t row_bytes = tensor_bytes(traits, static_cast<uint64_t>(cols));
  if (raw_bits && (type == TensorType::kQ5_0Unpacked || type == TensorType::kQ5_1Unpacked)) {
    // Every bit pattern of the packed form, unpacked as the loader does.
    const TensorType packed = type == TensorType::kQ5_0Unpacked ? TensorType::kQ5_0 : TensorType::kQ5_1;
    TestMatrix p = make_matrix(packed, rows, cols, rng, true);
    m.bytes.resize(row_bytes * static_cast<size_t>(rows));
    unpack_5bit_blocks(packed, p.bytes.data(), m.bytes.data(), static_cast<size_t>(rows) * cols / 32);
    m.dequantized = std::move(p.dequantized);
    return m;
  }
  m.bytes.resize(row_bytes * static_cast<size_t>(rows));
  if (raw_bits && traits.block_elements > 1) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
    for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
    // The fp16 fields a block may have: K-quants know their own offsets.
    const size_t blocks = m.bytes.size() / traits.block_bytes;
    for (size_t i = 0; i < blocks; ++i) {
      uint8_t* block = m.bytes.data() + i * traits.block_bytes;
      const uint16_t d = float_to_fp16(scale(rng));
      const uint16_t min = float_to_fp16(scale(rng));
      switch (type) {
        case TensorType::kQ4_1:
        case TensorType::kQ5_1:
        case TensorType::kQ4_K:
        case TensorType::kQ5_K:
          std::memcpy(block, &d, 2);
          std::memcpy(block + 2, &min, 2);
          break;
        case TensorType::kQ6_K:
          std::memcpy(block + offsetof(BlockQ6_K, d), &d, 2);
          break;
        case TensorType::kQ2_K:
          std::memcpy(block + offsetof(BlockQ2_K, d), &d, 2);
          std::memcpy(block + offsetof(BlockQ2_K, dmin), &min, 2);
          break;
        case TensorType::kQ3_K:
          std::memcpy(block + offsetof(BlockQ3_K, d), &d, 2);
          break;
        case TensorType::kMXFP4:
          block[0] = static_cast<uint8_t>(118 + block[0] % 8);  // 2^-10 .. 2^-3
          break;
        default:
          std::memcpy(block, &d, 2);
      }
    }
  } else {
    const std::vector<float> w = random_floats(rng, static_cast<size_t>(rows) * cols, 0.05f);
    for (int r = 0; r < rows; ++r) {
      quantize_row(type, w.data() + static_cast<size_t>(r) * cols, m.bytes.data() + static_cast<size_t>(r) * row_bytes,
                   static_cast<size_t>(cols));
    }
  }
  m.dequantized.resize(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    dequantize_row(type, m.bytes.data() + static_cast<size_t>(r) * row_bytes,
                   m.dequantized.data() + static_cast<size_t>(r) * cols, static_cast<size_t>(cols));
  }
  return m;
}

// Runs a kernel (SIMD or reference) over rows [row_begin, row_end).
std::vector<float> run_kernel(MatmulRowsFn fn, const WeightMatrix& w, int row_begin, int row_end,
                              const std::vector<float>& x, int n_positions, const MatmulKernel& kernel,
                              size_t y_stride) {
  ActivationView view;
  view.n_positions = n_positions;
  view.cols = w.cols;
  view.f32 = x.data();
  QuantizedActivations q;
  if (kernel.activations != ActivationFormat::kF32) {
    quantize_activations(x.data(), n_positions, w.cols, kernel.activations, &q);
    view.q = &q;
  }
  std::vector<float> y(y_stride * static_cast<size_t>(n_positions), -7.0f);
  fn(w, row_begin, row_end, view, y.data(), y_stride);
  return y;
}

bool is_integer_type(TensorType t) {
  return t != TensorType::kF32 && t != TensorType::kF16 && t != TensorType::kBF16;
}

std::vector<TensorType> kernel_types() {
  std::vector<TensorType> types;
  for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
    const auto t = static_cast<TensorType>(id);
    if (find_matmul_kernel(t) != nullptr) types.push_back(t);
  }
  return types;
}

std::string type_name(TensorType t) { return tensor_type_name(static_cast<uint32_t>(t)); }

// Row lengths to try: awkward ones where the format allows them.
std::vector<int> test_cols(TensorType t) {
  const uint32_t block = tensor_type_traits(t).block_elements;
  if (block == 1) return {1, 3, 4, 7, 33, 64, 101};
  if (block == 32) return {32, 96, 160, 576};
  // 33 super-blocks: one more than the decode kernel sums per pass.
  return {256, 768, 256 * 33};
}

class MatmulKernelTest : public ::testing::TestWithParam<TensorType> {};

// SIMD against reference over rows and positions of awkward counts, for a
// sub-range of rows and a y stride wider than the rows.
TEST_P(MatmulKernelTest, SimdMatchesReference) {
  const TensorType type = GetParam();
  const MatmulKernel& kernel = *find_matmul_kernel(type);
  std::mt19937 rng(11);
  for (int cols : test_cols(type)) {
    for (int rows : {1, 3, 4, 5, 17}) {
      for (bool raw : {false, true}) {
        const TestMatrix m = make_matrix(type, rows, cols, rng, raw);
        const WeightMatrix w = m.view();
        for (int n_positions : {1, 2, 3, 4, 5, 9, 70}) {
          const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * cols);
          const int row_begin = rows > 4 ? 1 : 0;
          const size_t stride = static_cast<size_t>(rows) + 3;
          const std::vector<float> y = run_kernel(kernel.rows, w, row_begin, rows, x, n_positions, kernel, stride);
          const std::vector<float> ref = run_kernel(kernel.reference, w, row_begin, rows, x, n_positions, kernel, stride);
          SCOPED_TRACE(type_name(type) + (raw ? " raw bits" : " quantized") + ", rows " + std::to_string(rows) +
                       ", cols " + std::to_string(cols) + ", positions " + std::to_string(n_positions));
          if (is_integer_type(type)) {
            ASSERT_TRUE(same_bits(y, ref));
            continue;
          }
          for (int p = 0; p < n_positions; ++p) {
            for (size_t r = 0; r < stride; ++r) {
              const size_t i = static_cast<size_t>(p) * stride + r;
              if (static_cast<int>(r) < row_begin || static_cast<int>(r) >= rows) {
                ASSERT_EQ(y[i], -7.0f) << "wrote outside its rows";
                continue;
              }
              double magnitude = 0;
              for (int k = 0; k < cols; ++k) {
                magnitude += std::fabs(m.dequantized[r * static_cast<size_t>(cols) + static_cast<size_t>(k)] *
                                       x[static_cast<size_t>(p) * cols + static_cast<size_t>(k)]);
              }
              // Float sums in another order: within (n + 8) roundings of the magnitudes.
              ASSERT_NEAR(y[i], ref[i], (cols + 8) * 6e-8 * magnitude + 1e-30) << "row " << r << ", position " << p;
            }
          }
        }
      }
    }
  }
}

// The reference itself against the dequantized weights (tensor_type's
// dequantize_row) times the dequantized activations, in double: equal up to
// float rounding, so every unpacked bit is checked.
TEST_P(MatmulKernelTest, ReferenceComputesTheProductOfTheDequantizedWeights) {
  const TensorType type = GetParam();
  const MatmulKernel& kernel = *find_matmul_kernel(type);
  std::mt19937 rng(13);
  for (int cols : test_cols(type)) {
    for (bool raw : {false, true}) {
      const int rows = 6, n_positions = 3;
      const TestMatrix m = make_matrix(type, rows, cols, rng, raw);
      const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * cols);
      const std::vector<float> y =
          run_kernel(kernel.reference, m.view(), 0, rows, x, n_positions, kernel, static_cast<size_t>(rows));
      // The activations as the integer kernels see them.
      std::vector<double> xs(x.begin(), x.end());
      if (kernel.activations != ActivationFormat::kF32) {
        QuantizedActivations q;
        quantize_activations(x.data(), n_positions, cols, kernel.activations, &q);
        const int block = activation_block(kernel.activations);
        for (int p = 0; p < n_positions; ++p) {
          for (int k = 0; k < cols; ++k) {
            xs[static_cast<size_t>(p) * cols + static_cast<size_t>(k)] =
                static_cast<double>(q.d_row(p)[k / block]) * q.q_row(p)[k];
          }
        }
      }
      for (int p = 0; p < n_positions; ++p) {
        for (int r = 0; r < rows; ++r) {
          double exact = 0, magnitude = 0;
          for (int k = 0; k < cols; ++k) {
            const double product = m.dequantized[static_cast<size_t>(r) * cols + static_cast<size_t>(k)] *
                                   xs[static_cast<size_t>(p) * cols + static_cast<size_t>(k)];
            exact += product;
            magnitude += std::fabs(product);
          }
          // A few float roundings per block (the scales' products, the sums),
          // each relative to the magnitudes involved.
          ASSERT_NEAR(y[static_cast<size_t>(p) * rows + static_cast<size_t>(r)], exact, magnitude * 2e-6 + 1e-12)
              << type_name(type) << (raw ? " raw bits" : "") << ", cols " << cols << ", row " << r << ", position " << p;
        }
      }
    }
  }
}

// What layer-major prefill and the thread count rely on: (row, position)
// comes out the same alone or in a batch, in any tile, on any thread count.
TEST_P(MatmulKernelTest, ResultDoesNotDependOnBatchOrThreads) {
  const TensorType type = GetParam();
  std::mt19937 rng(17);
  const int cols = test_cols(type).back();
  // Enough rows that even one position is split across threads.
  const int rows = 301, n_positions = 23;
  const TestMatrix m = make_matrix(type, rows, cols, rng, false);
  const WeightMatrix w = m.view();
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * cols);

  ThreadPool one(1), three(3);
  std::vector<float> batch1(static_cast<size_t>(rows) * n_positions), batch3(batch1.size());
  matmul(w, x.data(), n_positions, batch1.data(), one);
  matmul(w, x.data(), n_positions, batch3.data(), three);
  EXPECT_TRUE(same_bits(batch1, batch3));

  for (int p = 0; p < n_positions; ++p) {
    std::vector<float> single(static_cast<size_t>(rows));
    matmul(w, x.data() + static_cast<size_t>(p) * cols, 1, single.data(), three);
    const std::vector<float> from_batch(batch1.begin() + static_cast<long>(p) * rows,
                                        batch1.begin() + static_cast<long>(p + 1) * rows);
    ASSERT_TRUE(same_bits(single, from_batch)) << "position " << p;
  }
  // Rows computed in another grouping (starting at an odd row).
  const MatmulKernel& kernel = *find_matmul_kernel(type);
  const std::vector<float> shifted = run_kernel(kernel.rows, w, 3, rows, x, n_positions, kernel, static_cast<size_t>(rows));
  for (int p = 0; p < n_positions; ++p) {
    for (int r = 3; r < rows; ++r) {
      const size_t i = static_cast<size_t>(p) * rows + static_cast<size_t>(r);
      ASSERT_EQ(bits_of(shifted[i]), bits_of(batch1[i])) << "row " << r << ", position " << p;
    }
  }
}

// The tiled layout (tile_rows) moves blocks, never what is computed with
// them: every kernel, SIMD and reference, gives the bits it gives row-major,
// and a row reads back the same.
TEST_P(MatmulKernelTest, TiledMatrixGivesTheSameBits) {
  const TensorType type = GetParam();
  const MatmulKernel& kernel = *find_matmul_kernel(type);
  std::mt19937 rng(23);
  for (int cols : test_cols(type)) {
    for (int rows : {1, 3, 4, 5, 17}) {
      const TestMatrix m = make_matrix(type, rows, cols, rng, true);
      std::vector<uint8_t> bytes = m.bytes;
      const WeightMatrix tiled = tile_rows(m.view(), bytes.data());
      SCOPED_TRACE(type_name(type) + ", rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
      if (!is_integer_type(type)) {
        EXPECT_FALSE(tiled.tiled()) << "float kernels read rows as they are";
        EXPECT_EQ(bytes, m.bytes);
        continue;
      }
      ASSERT_TRUE(tiled.tiled());
      if (rows > 1 && cols > static_cast<int>(tensor_type_traits(type).block_elements)) EXPECT_NE(bytes, m.bytes);
      for (int r = 0; r < rows; ++r) {
        std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
        dequantize_matrix_row(m.view(), r, a.data());
        dequantize_matrix_row(tiled, r, b.data());
        ASSERT_TRUE(same_bits(a, b)) << "row " << r;
      }
      for (int n_positions : {1, 4, 5, 8, 13}) {  // 8, 13: tiles of two quads, then one, then one position
        const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * cols);
        for (int row_begin : {0, 4}) {
          if (row_begin >= rows) continue;
          for (MatmulRowsFn fn : {kernel.rows, kernel.reference}) {
            const auto stride = static_cast<size_t>(rows);
            ASSERT_TRUE(same_bits(run_kernel(fn, tiled, row_begin, rows, x, n_positions, kernel, stride),
                                  run_kernel(fn, m.view(), row_begin, rows, x, n_positions, kernel, stride)))
                << "positions " << n_positions << ", from row " << row_begin;
          }
        }
      }
    }
  }
  if (!is_integer_type(type)) return;
  // Split across threads, as matmul() splits rows.
  const int cols = test_cols(type).back(), rows = 301, n_positions = 3;
  const TestMatrix m = make_matrix(type, rows, cols, rng, false);
  std::vector<uint8_t> bytes = m.bytes;
  const WeightMatrix tiled = tile_rows(m.view(), bytes.data());
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * cols);
  ThreadPool three(3);
  for (int n : {1, n_positions}) {
    std::vector<float> y(static_cast<size_t>(rows) * n), y_tiled(y.size());
    matmul(m.view(), x.data(), n, y.data(), three);
    matmul(tiled, x.data(), n, y_tiled.data(), three);
    EXPECT_TRUE(same_bits(y, y_tiled)) << n << " positions";
  }
  // A kernel never starts inside a tile: its rows would be misread.
  try {
    run_kernel(kernel.rows, tiled, 1, rows, x, 1, kernel, static_cast<size_t>(rows));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulKernelTest, ::testing::ValuesIn(kernel_types()),
                         [](const ::testing::TestParamInfo<TensorType>& info) {
                           std::string name = type_name(info.param);  // "Q5_0 unpacked": Q5_0_unpacked
                           std::replace(name.begin(), name.end(), ' ', '_');
                           return name;
                         });

// The loader's SIMD unpacking writes the reference's bytes, out of place and
// in place (the packed blocks at the end of the room), for every bit pattern.
TEST(KernelsMatmul, SimdUnpackingMatchesTheReference) {
  std::mt19937 rng(29);
  for (const TensorType packed : {TensorType::kQ5_0, TensorType::kQ5_1}) {
    const size_t packed_bytes = tensor_type_traits(packed).block_bytes;
    const size_t unpacked_bytes = tensor_type_traits(unpacked_type(packed)).block_bytes;
    for (size_t n : {1, 31, 32, 33, 100}) {
      std::vector<uint8_t> raw(n * packed_bytes);
      for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> expected(n * unpacked_bytes), got(expected.size());
      unpack_5bit_blocks(packed, raw.data(), expected.data(), n);
      unpack_5bit_blocks_simd(packed, raw.data(), got.data(), n);
      EXPECT_EQ(got, expected) << type_name(packed) << ", " << n << " blocks";
      std::vector<uint8_t> room(expected.size());
      std::copy(raw.begin(), raw.end(), room.end() - static_cast<long>(raw.size()));
      unpack_5bit_blocks_simd(packed, room.data() + room.size() - raw.size(), room.data(), n);
      EXPECT_EQ(room, expected) << type_name(packed) << ", " << n << " blocks in place";
    }
  }
}

// The unpacked forms give the packed forms' results bit for bit: the same
// integer sums, the same float operations.
TEST(KernelsMatmul, UnpackedQ5MatricesGiveThePackedResults) {
  std::mt19937 rng(23);
  ThreadPool pool(2);
  for (const TensorType packed : {TensorType::kQ5_0, TensorType::kQ5_1}) {
    for (int n_positions : {1, 5, 64}) {
      const TestMatrix m = make_matrix(packed, 37, 576, rng, false);
      std::vector<uint8_t> unpacked(tensor_bytes(tensor_type_traits(unpacked_type(packed)), 37 * 576));
      unpack_5bit_blocks(packed, m.bytes.data(), unpacked.data(), 37 * 576 / 32);
      WeightMatrix w = m.view();
      WeightMatrix u = w;
      u.type = unpacked_type(packed);
      u.row_bytes = unpacked.size() / 37;
      u.data = unpacked.data();
      std::vector<uint8_t> tiled_bytes = m.bytes;
      w = tile_rows(w, tiled_bytes.data());
      u = tile_rows(u, unpacked.data());
      const std::vector<float> x = random_floats(rng, static_cast<size_t>(n_positions) * 576);
      std::vector<float> y(37 * static_cast<size_t>(n_positions)), y_unpacked(y.size());
      matmul(w, x.data(), n_positions, y.data(), pool);
      matmul(u, x.data(), n_positions, y_unpacked.data(), pool);
      EXPECT_TRUE(same_bits(y, y_unpacked)) << type_name(packed) << " x" << n_positions;
    }
  }
}

TEST(KernelsMatmul, EveryFileTypeHasAKernel) {
  int file_types = 0;
  for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
    if (tensor_type_traits(id) == nullptr) continue;
    ++file_types;
    EXPECT_NE(find_matmul_kernel(static_cast<TensorType>(id)), nullptr) << tensor_type_name(id);
  }
  EXPECT_EQ(file_types, 16);
}

TEST(KernelsMatmul, UnsupportedTypeIsAClearError) {
  const uint8_t bytes[256] = {};
  WeightMatrix w;
  w.type = static_cast<TensorType>(16);  // IQ2_XXS
  w.rows = 1;
  w.cols = 256;
  w.data = bytes;
  w.row_bytes = sizeof bytes;
  ThreadPool pool(1);
  std::vector<float> x(256), y(1);
  try {
    matmul(w, x.data(), 1, y.data(), pool);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos) << e.what();
  }
}

TEST(KernelsMatmul, QuantizedActivationsAreSharedBetweenProducts) {
  std::mt19937 rng(19);
  const TestMatrix a = make_matrix(TensorType::kQ8_0, 8, 64, rng, false);
  const TestMatrix b = make_matrix(TensorType::kQ4_0, 8, 64, rng, false);
  const std::vector<float> x = random_floats(rng, 2 * 64);
  ThreadPool pool(2);
  Activations shared;
  shared.reset(x.data(), 2, 64);
  std::vector<float> ya(16), yb(16), ya_alone(16), yb_alone(16);
  matmul(a.view(), shared, ya.data(), pool);
  const int16_t* first = shared.quantized(ActivationFormat::kQ8_0, pool).q.data();
  matmul(b.view(), shared, yb.data(), pool);
  EXPECT_EQ(shared.quantized(ActivationFormat::kQ8_0, pool).q.data(), first);  // not made again
  matmul(a.view(), x.data(), 2, ya_alone.data(), pool);
  matmul(b.view(), x.data(), 2, yb_alone.data(), pool);
  EXPECT_TRUE(same_bits(ya, ya_alone));
  EXPECT_TRUE(same_bits(yb, yb_alone));
}

// What working memory counts for quantized activations is what they hold;
// the quads, where kernels read them, hold each whole quad's rows as they are.
TEST(KernelsMatmul, QuantizedActivationsHoldWhatIsCounted) {
  std::mt19937 rng(29);
  for (const ActivationFormat format : {ActivationFormat::kQ8_0, ActivationFormat::kQ8_K}) {
    for (int n : {1, 4, 9}) {
      const int cols = 512;
      const std::vector<float> x = random_floats(rng, static_cast<size_t>(n) * cols);
      QuantizedActivations q;
      quantize_activations(x.data(), n, cols, format, &q);
      const size_t held = q.q.size() * 2 + q.q8.size() + 4 * (q.d.size() + q.sums.size() + q.sums16.size()) +
                          q.q8_quads.size() + 4 * (q.d_quads.size() + q.sums_quads.size());
      EXPECT_LE(held, static_cast<size_t>(n) * quantized_bytes_per_position(format, cols)) << n << " positions";
      if (n % 4 == 0) EXPECT_EQ(held, static_cast<size_t>(n) * quantized_bytes_per_position(format, cols));
      for (int p = 0; p + 4 <= n && q.in_quads(p); p += 4) {
        for (int b = 0; b < cols / 32; ++b) {
          for (int j = 0; j < 4; ++j) {
            const int8_t* row = q.q8_row(p + j) + 32 * b;
            const int8_t* quad = q.q8_quad(p) + 128 * b;
            for (int v = 0; v < 32; ++v) {
              ASSERT_EQ(quad[QuantizedActivations::quad_offset(j, v)], row[v])
                  << "position " << p + j << ", block " << b << ", value " << v;
            }
            ASSERT_EQ(q.d_quad(p)[4 * b + j], q.d_row(p + j)[b]);
            ASSERT_EQ(q.sums_quad(p)[4 * b + j], q.sums_row(p + j)[b]);
          }
        }
      }
      if (!keeps_quads(format)) EXPECT_TRUE(q.q8_quads.empty());
      if (keeps_quads(format)) EXPECT_EQ(q.q8_quads.size(), static_cast<size_t>(n / 4) * (cols / 32) * 128);
      if (keeps_quads(format)) EXPECT_FALSE(q.in_quads(4 * (n / 4)));
    }
  }
}

// ---- Element-wise operations -------------------------------------------------------

const int kSizes[] = {1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 1536};

TEST(KernelsElementwise, RmsnormMatchesReference) {
  std::mt19937 rng(23);
  for (int n : kSizes) {
    const std::vector<float> x = random_floats(rng, static_cast<size_t>(n), 3.0f);
    const std::vector<float> weight = random_floats(rng, static_cast<size_t>(n));
    std::vector<float> out(x.size()), ref(x.size());
    rmsnorm(out.data(), x.data(), weight.data(), n, 1e-5f);
    rmsnorm_reference(ref.data(), x.data(), weight.data(), n, 1e-5f);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(out[i], ref[i], std::fabs(ref[i]) * 2e-6 + 1e-30) << n;
  }
}

TEST(KernelsElementwise, RopeEqualsReferenceExactly) {
  std::mt19937 rng(29);
  struct Shape {
    int heads, head_dim, rope_dims;
  };
  const std::vector<float> factors = random_floats(rng, 32, 0.5f);
  std::vector<float> divisors;
  for (float f : factors) divisors.push_back(1.5f + f);  // in [1, 2)
  for (const RopeStyle style : {RopeStyle::kNormal, RopeStyle::kNeox}) {
    for (const Shape s : {Shape{9, 64, 64}, Shape{2, 8, 8}, Shape{3, 10, 10}, Shape{4, 64, 32}, Shape{1, 6, 6},
                          Shape{2, 20, 12}}) {
      for (int pos : {0, 1, 17, 4000}) {
        for (float base : {10000.0f, 1000000.0f}) {
          for (int variant = 0; variant < 2; ++variant) {
            RopeParams p;
            p.dims = s.rope_dims;
            p.style = style;
            p.freq_base = base;
            if (variant == 1) {  // every optional term at once
              p.freq_scale = 0.25f;
              p.attn_factor = 1.1902f;
              p.factors = divisors.data();
            }
            std::vector<float> v = random_floats(rng, static_cast<size_t>(s.heads) * s.head_dim);
            std::vector<float> ref = v;
            std::vector<float> table(2 * static_cast<size_t>(s.rope_dims));
            rope_table(pos, p, table.data());
            rope_rotate(v.data(), s.heads, s.head_dim, p, table.data());
            rope_reference(ref.data(), s.heads, s.head_dim, pos, p);
            ASSERT_TRUE(same_bits(v, ref)) << "head_dim " << s.head_dim << ", pos " << pos << ", variant " << variant;
          }
        }
      }
    }
  }
}

TEST(KernelsElementwise, RopeStylesPairDifferentElements) {
  // Position 1, one pair turning by a known angle: which elements move tells
  // the styles apart.
  RopeParams p;
  p.dims = 4;
  std::vector<float> normal = {1, 0, 0, 0}, neox = {1, 0, 0, 0};
  rope_reference(normal.data(), 1, 4, 1, p);
  p.style = RopeStyle::kNeox;
  rope_reference(neox.data(), 1, 4, 1, p);
  EXPECT_FLOAT_EQ(normal[0], std::cos(1.0f));
  EXPECT_FLOAT_EQ(normal[1], std::sin(1.0f));  // its partner is the next element
  EXPECT_EQ(normal[2], 0.0f);
  EXPECT_FLOAT_EQ(neox[0], std::cos(1.0f));
  EXPECT_EQ(neox[1], 0.0f);
  EXPECT_FLOAT_EQ(neox[2], std::sin(1.0f));  // its partner is half the rotary width away
}

TEST(KernelsElementwise, SoftmaxMatchesReference) {
  std::mt19937 rng(31);
  for (int n : kSizes) {
    for (float scale : {1.0f, 30.0f}) {
      std::vector<float> x = random_floats(rng, static_cast<size_t>(n), scale);
      std::vector<float> ref = x;
      softmax(x.data(), n);
      softmax_reference(ref.data(), n);
      for (int i = 0; i < n; ++i) ASSERT_NEAR(x[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], ref[static_cast<size_t>(i)] * 2e-6 + 1e-9) << n;
    }
  }
}

TEST(KernelsElementwise, SwigluMatchesReference) {
  std::mt19937 rng(37);
  for (int n : kSizes) {
    std::vector<float> gate = random_floats(rng, static_cast<size_t>(n), 4.0f);
    const std::vector<float> up = random_floats(rng, static_cast<size_t>(n));
    if (n > 2) gate[1] = -100.0f;  // exp(-g) far beyond the float range
    std::vector<float> ref = gate;
    swiglu(gate.data(), up.data(), n);
    swiglu_reference(ref.data(), up.data(), n);
    for (int i = 0; i < n; ++i) {
      ASSERT_NEAR(gate[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], std::fabs(ref[static_cast<size_t>(i)]) * 2e-6 + 1e-30) << n;
    }
  }
}

TEST(KernelsElementwise, FloatsToHalvesMatchReference) {
  std::mt19937 rng(41);
  for (int n : kSizes) {
    // Over the halves' whole range, with one special value (or none) at a
    // place that moves from size to size: in a vector of eight, in the tail.
    std::vector<float> x = random_floats(rng, static_cast<size_t>(n), 60000.0f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] *= 1e-9f;  // subnormal halves and zeros
    for (const float special : {0.0f, INFINITY, -INFINITY, NAN, 65520.0f}) {
      std::vector<float> with = x;
      if (n > 0 && special != 0.0f) with[static_cast<size_t>(n) * 7 / 10] = special;
      std::vector<uint16_t> out(static_cast<size_t>(n)), ref(static_cast<size_t>(n));
      const bool non_finite = floats_to_halves(with.data(), out.data(), n);
      ASSERT_EQ(non_finite, floats_to_halves_reference(with.data(), ref.data(), n)) << n << " " << special;
      ASSERT_EQ(out, ref) << n << " " << special;
    }
  }
}

TEST(KernelsElementwise, GeluTanhGluMatchesReference) {
  std::mt19937 rng(43);
  for (int n : kSizes) {
    std::vector<float> gate = random_floats(rng, static_cast<size_t>(n), 4.0f);
    const std::vector<float> up = random_floats(rng, static_cast<size_t>(n));
    if (n > 2) gate[1] = -100.0f;  // tanh saturates
    if (n > 3) gate[2] = 100.0f;
    std::vector<float> ref = gate;
    gelu_tanh_glu(gate.data(), up.data(), n);
    gelu_tanh_glu_reference(ref.data(), up.data(), n);
    for (int i = 0; i < n; ++i) {
      // Both round GELU to a half float; they may land one half-float step apart.
      ASSERT_NEAR(gate[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], std::fabs(ref[static_cast<size_t>(i)]) * 1e-3 + 1e-7) << n;
    }
  }
  // GELU itself at known points: 0, and x -> x for large x.
  std::vector<float> x = {0.0f, 1.0f, 20.0f}, ones = {1, 1, 1};
  gelu_tanh_glu_reference(x.data(), ones.data(), 3);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], 0.841192f, 5e-4);
  EXPECT_FLOAT_EQ(x[2], 20.0f);
}

TEST(KernelsElementwise, SoftcapMatchesReferenceAndBoundsValues) {
  std::mt19937 rng(47);
  for (int n : kSizes) {
    std::vector<float> x = random_floats(rng, static_cast<size_t>(n), 40.0f);
    std::vector<float> ref = x;
    softcap(x.data(), n, 5.0f);
    softcap_reference(ref.data(), n, 5.0f);
    for (int i = 0; i < n; ++i) {
      ASSERT_NEAR(x[static_cast<size_t>(i)], ref[static_cast<size_t>(i)], 2e-6 * 5) << n;
      ASSERT_LE(std::fabs(x[static_cast<size_t>(i)]), 5.0f);
    }
  }
}

TEST(KernelsSimd, RoundToF16EqualsTheHalfFloatRoundTrip) {
  // Every half float, the midpoints between neighbours (ties go to even), and
  // random floats over the whole range.
  std::vector<float> values;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    values.push_back(f);
    values.push_back(std::nextafter(f, INFINITY));
    values.push_back(std::nextafter(f, -INFINITY));
    if ((h & 0x7c00u) != 0x7c00u && (h & 0x7fffu) != 0x7bffu) {
      values.push_back((f + fp16_to_float(static_cast<uint16_t>(h + 1))) / 2);
    }
  }
  std::mt19937 rng(59);
  for (int i = 0; i < 100000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    values.push_back(f);
  }
  values.resize((values.size() + 3) / 4 * 4, 0.0f);
  // Both forms: the platform's, and the SIMD128 one WebAssembly runs.
  const simd::HalfRounding rounding;
  for (bool simd128 : {false, true}) {
    for (size_t i = 0; i < values.size(); i += 4) {
      const v128_t x = simd::load(&values[i]);
      alignas(16) float out[4];
      simd::store(out, simd128 ? rounding.simd128(x) : rounding(x));
      for (size_t j = 0; j < 4; ++j) {
        const float expected = fp16_to_float(float_to_fp16(values[i + j]));
        if (std::isnan(expected)) {
          ASSERT_TRUE(std::isnan(out[j])) << values[i + j];
        } else {
          ASSERT_EQ(float_to_bits(out[j]), float_to_bits(expected)) << values[i + j];
        }
      }
    }
  }
  // The half floats' bits.
  for (size_t i = 0; i < values.size(); i += 4) {
    alignas(16) uint32_t bits[4];
    simd::store(bits, rounding.bits_simd128(simd::load(&values[i])));
    for (size_t j = 0; j < 4; ++j) ASSERT_EQ(bits[j], float_to_fp16(values[i + j])) << values[i + j];
  }
  // The shorter form: past_range() for what the round trip takes out of
  // the half floats' range (beyond 65504, infinity, NaN; the platform's form
  // may round those exactly instead), the same bits for everything else.
  // Both forms, a value in every lane.
  for (bool simd128 : {false, true}) {
    for (const float value : values) {
      const float expected = fp16_to_float(float_to_fp16(value));
      const bool in_range = std::fabs(expected) <= 65504.0f;  // false for NaN
      v128_t largest = wasm_i32x4_splat(0);
      const v128_t x = wasm_f32x4_splat(value);
      alignas(16) float out[4];
      simd::store(out, simd128 ? rounding.in_range_simd128(x, largest) : rounding.in_range(x, largest));
      const bool past = rounding.past_range(largest);
      ASSERT_TRUE(simd128 ? past == !in_range : (!past || !in_range)) << value;
      if (past) continue;
      for (const float lane : out) {
        ASSERT_TRUE(float_to_bits(lane) == float_to_bits(expected) || (std::isnan(lane) && std::isnan(expected)))
            << value;
      }
    }
  }
}

TEST(KernelsSimd, ByteDotProductsAddEveryProductExactly) {
  // Unsigned times signed bytes over both whole byte ranges; [0, 127] times
  // activations in [-127, 127] as the quantiser writes them; and signed times
  // signed bytes the way the Q8_0 kernel takes them, one side shifted to
  // unsigned and 128 times the other's sum taken away. Every lane sum
  // against the scalar one.
  std::mt19937 rng(61);
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(16) uint8_t u8[16];
    alignas(16) int8_t w[16], u7[16], x8[16];
    alignas(16) int16_t x16[16];
    int32_t mixed_sum = 1000, u7_sum = 1000, signed_sum = 1000, w_sum = 0;
    for (int i = 0; i < 16; ++i) {
      u8[i] = static_cast<uint8_t>(trial < 2 ? (trial == 0 ? 255 : 0) : rng() % 256);
      w[i] = static_cast<int8_t>(trial < 2 ? (trial == 0 ? -128 : 127) : static_cast<int>(rng() % 256) - 128);
      u7[i] = static_cast<int8_t>(trial < 2 ? 127 : rng() % 128);
      x8[i] = static_cast<int8_t>(trial < 2 ? (trial == 0 ? 127 : -127) : static_cast<int>(rng() % 255) - 127);
      x16[i] = x8[i];
      mixed_sum += u8[i] * w[i];
      u7_sum += u7[i] * x8[i];
      signed_sum += w[i] * x8[i];
      w_sum += w[i];
    }
    const v128_t start = wasm_i32x4_make(1000, 0, 0, 0);
    alignas(16) int32_t lanes[3][4];
    simd::store(lanes[0], simd::dot_u8i8x16_add(simd::load(u8), simd::load(w), start));
    simd::store(lanes[1], simd::dot_u7x16_add(simd::load(u7), x8, x16, start));
    simd::store(lanes[2], simd::dot_u8i8x16_add(simd::shift_to_unsigned(simd::load(x8)), simd::load(w), start));
    ASSERT_EQ(lanes[0][0] + lanes[0][1] + lanes[0][2] + lanes[0][3], mixed_sum) << trial;
    ASSERT_EQ(lanes[1][0] + lanes[1][1] + lanes[1][2] + lanes[1][3], u7_sum) << trial;
    ASSERT_EQ(lanes[2][0] + lanes[2][1] + lanes[2][2] + lanes[2][3] - 128 * w_sum, signed_sum) << trial;
  }
  // Six-bit values, 32 and 16 at a time, against activations over the whole
  // signed byte range (the int16 pair sums' worst case included).
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(16) uint8_t u6[32];
    alignas(16) int8_t x8[32];
    alignas(16) int16_t x16[32];
    int32_t sum32 = 1000, sum16 = 1000;
    for (int i = 0; i < 32; ++i) {
      u6[i] = static_cast<uint8_t>(trial < 2 ? 63 : rng() % 64);
      x8[i] = static_cast<int8_t>(trial < 2 ? (trial == 0 ? 127 : -128) : static_cast<int>(rng() % 256) - 128);
      x16[i] = x8[i];
      sum32 += u6[i] * x8[i];
      if (i < 16) sum16 += u6[i] * x8[i];
    }
    const v128_t start = wasm_i32x4_make(1000, 0, 0, 0);
    alignas(16) int32_t lanes[2][4];
    simd::store(lanes[0], simd::dot_u6x32_add(simd::load(u6), simd::load(u6 + 16), x8, x16, start));
    simd::store(lanes[1], simd::dot_u6x16_add(simd::load(u6), x8, x16, start));
    ASSERT_EQ(lanes[0][0] + lanes[0][1] + lanes[0][2] + lanes[0][3], sum32) << trial;
    ASSERT_EQ(lanes[1][0] + lanes[1][1] + lanes[1][2] + lanes[1][3], sum16) << trial;
  }
}

// LaneDots, as the kernels of interleaved tiles use it: kPairs pairs of
// vectors of values up to kMaxLevel, four activations repeated in every lane
// (the whole signed byte range, the int16 sums' worst case included); each
// lane against its row's scalar sum.
template <int kMaxLevel>
void check_lane_dots(std::mt19937& rng) {
  using Dots = simd::LaneDots<kMaxLevel>;
  static_assert(Dots::kPairs >= 1);
  for (int trial = 0; trial < 2000; ++trial) {
    Dots dots;
    int32_t expected[4] = {};
    for (int n = 0; n < Dots::kPairs; ++n) {
      alignas(16) uint8_t u[2][16];
      alignas(16) int8_t x[2][16];
      for (int k = 0; k < 2; ++k) {
        for (int t = 0; t < 4; ++t) {
          x[k][t] = static_cast<int8_t>(trial < 2 ? (trial == 0 ? 127 : -128) : static_cast<int>(rng() % 256) - 128);
        }
        for (int i = 0; i < 16; ++i) {
          u[k][i] = static_cast<uint8_t>(trial < 2 ? kMaxLevel : rng() % (kMaxLevel + 1));
          x[k][i] = x[k][i % 4];
          expected[i / 4] += u[k][i] * x[k][i];
        }
      }
      dots.add(simd::load(u[0]), simd::load(x[0]), simd::load(u[1]), simd::load(x[1]));
    }
    alignas(16) int32_t lanes[4];
    simd::store(lanes, dots.sum());
    for (int i = 0; i < 4; ++i) ASSERT_EQ(lanes[i], expected[i]) << "trial " << trial << ", lane " << i;
  }
}

// Natively with AVX-512 and F16C, attention's sixteen-lane helpers against
// the 128-bit loops they stand for, bit for bit: values and sums in half
// floats up to past their range (infinity), rescalings, keys of every scale.
TEST(KernelsSimd, WideHalfHelpersEqualThe128BitLoops) {
#if defined(SIPLLM_WIDE_HALVES)
  std::mt19937 rng(77);
  const simd::HalfRounding round_to_f16;
  for (const float scale : {1e-6f, 1.0f, 300.0f, 4000.0f}) {
    constexpr int kKeys = 200;
    std::vector<uint16_t> values(kKeys * 16);
    const std::vector<float> floats = random_floats(rng, values.size(), scale);
    for (size_t i = 0; i < values.size(); ++i) values[i] = float_to_fp16(floats[i]);
    const std::vector<float> weights = random_floats(rng, kKeys);
    simd::HalfSum16 wide;
    v128_t narrow[4] = {wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f),
                        wasm_f32x4_splat(0.0f)};
    for (int t = 0; t < kKeys; ++t) {
      if (t % 17 == 5) {
        const float r = 0.25f + static_cast<float>(t % 3) * 0.3f;
        wide.rescale(r);
        for (v128_t& n : narrow) n = round_to_f16(wasm_f32x4_mul(n, wasm_f32x4_splat(r)));
      }
      const uint16_t* v = &values[static_cast<size_t>(t) * 16];
      wide.add(simd::Halves16::load(v), weights[static_cast<size_t>(t)]);
      for (int j = 0; j < 4; ++j) {
        narrow[j] = round_to_f16(wasm_f32x4_add(
            narrow[j], wasm_f32x4_mul(simd::load_fp16x4(v + 4 * j), wasm_f32x4_splat(weights[static_cast<size_t>(t)]))));
      }
    }
    std::vector<float> wide_out(16), narrow_out(16);
    wide.store(wide_out.data());
    for (int j = 0; j < 4; ++j) simd::store(narrow_out.data() + 4 * j, narrow[j]);
    EXPECT_TRUE(same_bits(wide_out, narrow_out)) << "scale " << scale;

    // Four rows of 64 halves dotted with three queries.
    constexpr int kDim = 64;
    std::vector<uint16_t> rows(4 * kDim);
    const std::vector<float> row_floats = random_floats(rng, rows.size(), scale);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = float_to_fp16(row_floats[i]);
    const std::vector<float> q = random_floats(rng, 3 * kDim);
    const uint16_t* row[4] = {&rows[0], &rows[kDim], &rows[2 * kDim], &rows[3 * kDim]};
    const float* queries[3] = {&q[0], &q[kDim], &q[2 * kDim]};
    v128_t acc[3][4];
    simd::half_rows4_dots<3>(row, queries, kDim, acc);
    for (int g = 0; g < 3; ++g) {
      for (int k = 0; k < 4; ++k) {
        v128_t expected = wasm_f32x4_splat(0.0f);
        for (int d = 0; d < kDim; d += 4) {
          expected = wasm_f32x4_add(expected, wasm_f32x4_mul(simd::load(queries[g] + d), simd::load_fp16x4(row[k] + d)));
        }
        std::vector<float> got(4), want(4);
        simd::store(got.data(), acc[g][k]);
        simd::store(want.data(), expected);
        EXPECT_TRUE(same_bits(got, want)) << "scale " << scale << ", query " << g << ", row " << k;
      }
    }
  }
#else
  GTEST_SKIP() << "attention's sixteen-lane helpers are native AVX-512 and F16C only";
#endif
}

TEST(KernelsSimd, DotPeakCountsTheMultiplyAddsOfItsInstruction) {
  // Twelve accumulators, each step as many products as the kernels'
  // instruction does: 64 on 512 bits, 16 with 8-bit products, 8 as int16.
  const uint64_t per_step = simd::kWideGroups ? 64 : simd::kByteDot ? 16 : 8;
  EXPECT_EQ(simd::dot_peak_rounds(1, 1), 12 * per_step);
  EXPECT_EQ(simd::dot_peak_rounds(100, 7), 100 * 12 * per_step);
  EXPECT_EQ(simd::dot_peak_rounds(0, 1), 0u);
  ThreadPool pool(2);
  const double peak = measure_dot_peak(pool, 0.004);
  EXPECT_TRUE(peak > 0 && std::isfinite(peak)) << peak;
}

TEST(KernelsSimd, LaneDotsSumEachRowInItsLane) {
  std::mt19937 rng(67);
  check_lane_dots<15>(rng);
  check_lane_dots<31>(rng);
}

// A tile that interleaves its rows' values lies as tile_rows() documents
// it: the four scales, then each row's values 4 bytes at a time.
TEST(KernelsMatmul, InterleavedTilesLieAsDocumented) {
  std::mt19937 rng(71);
  const TestMatrix m = make_matrix(TensorType::kQ4_1, 5, 64, rng, true);
  std::vector<uint8_t> bytes = m.bytes;
  const WeightMatrix tiled = tile_rows(m.view(), bytes.data());
  ASSERT_EQ(interleaved_values_from(TensorType::kQ4_1), offsetof(BlockQ4_1, qs));
  const size_t block = sizeof(BlockQ4_1), row_bytes = 2 * block;
  for (size_t b = 0; b < 2; ++b) {
    const uint8_t* group = bytes.data() + b * 4 * block;
    for (size_t i = 0; i < 4; ++i) {
      const uint8_t* original = m.bytes.data() + i * row_bytes + b * block;
      EXPECT_EQ(std::memcmp(group + 2 * i, original + offsetof(BlockQ4_1, d), 2), 0) << "scale of row " << i;
      EXPECT_EQ(std::memcmp(group + 8 + 2 * i, original + offsetof(BlockQ4_1, m), 2), 0) << "minimum of row " << i;
      for (size_t k = 0; k < 4; ++k) {
        EXPECT_EQ(std::memcmp(group + 16 + 16 * k + 4 * i, original + offsetof(BlockQ4_1, qs) + 4 * k, 4), 0)
            << "values " << 4 * k << ".. of row " << i;
      }
    }
  }
  // The fifth row, a tile of its own, keeps its blocks whole.
  EXPECT_EQ(std::memcmp(bytes.data() + 4 * row_bytes, m.bytes.data() + 4 * row_bytes, row_bytes), 0);
  uint8_t scratch[sizeof(BlockQ4_1)];
  for (int r = 0; r < 5; ++r) {
    for (int b = 0; b < 2; ++b) {
      EXPECT_EQ(std::memcmp(matrix_block(tiled, r, b, scratch), m.bytes.data() + r * row_bytes + b * block, block), 0);
    }
  }
}

// ---- Attention ---------------------------------------------------------------------

TEST(KernelsAttention, MatchesReferenceAndIsBatchAndThreadInvariant) {
  std::mt19937 rng(41);
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  struct Variant {
    float softcap;
    int window;
  };
  for (const AttentionPath path : {AttentionPath::kOneChunk, AttentionPath::kTiled})
  for (const KvCacheType type : {KvCacheType::kF16, KvCacheType::kF32})
  for (const Shape s : {Shape{9, 3, 64}, Shape{8, 4, 8}, Shape{2, 1, 6}, Shape{14, 2, 64}})
  for (const Variant variant : {Variant{0, 0}, Variant{5.0f, 0}, Variant{0, 8}, Variant{3.0f, 33}}) {
    const AttentionShape shape{.n_heads = s.heads, .n_kv_heads = s.kv_heads, .head_dim = s.head_dim,
                               .scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim)),
                               .softcap = variant.softcap, .window = variant.window};
    const int kv_dim = s.kv_heads * s.head_dim, dim = s.heads * s.head_dim;
    const int n = 70;  // crosses a cache page of 64
    KvCache cache(2, kv_dim, 256, type, {}, 64);
    cache.reserve(n);
    for (int t = 0; t < n; ++t) {
      const std::vector<float> k = random_floats(rng, static_cast<size_t>(kv_dim), 2.0f);
      const std::vector<float> v = random_floats(rng, static_cast<size_t>(kv_dim));
      store_kv(cache, 1, t, k.data(), v.data());
    }
    const std::vector<float> q = random_floats(rng, static_cast<size_t>(n) * dim);
    ThreadPool one(1), three(3);
    std::vector<float> scratch;
    std::vector<float> batch(q.size()), batch3(q.size());
    attention(q.data(), n, 0, cache, 1, shape, batch.data(), one, scratch, path);
    attention(q.data(), n, 0, cache, 1, shape, batch3.data(), three, scratch, path);
    EXPECT_TRUE(same_bits(batch, batch3));

    std::vector<float> scores(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      std::vector<float> single(static_cast<size_t>(dim));
      attention(q.data() + static_cast<size_t>(i) * dim, 1, i, cache, 1, shape, single.data(), three, scratch, path);
      ASSERT_TRUE(same_bits(single, std::vector<float>(batch.begin() + static_cast<long>(i) * dim,
                                                       batch.begin() + static_cast<long>(i + 1) * dim)))
          << "position " << i;
      for (int h = 0; h < s.heads; ++h) {
        std::vector<float> ref(static_cast<size_t>(s.head_dim));
        const size_t offset = static_cast<size_t>(i) * dim + static_cast<size_t>(h) * s.head_dim;
        attend_reference(q.data() + offset, i, h, cache, 1, shape, ref.data(), scores.data(), path);
        for (int d = 0; d < s.head_dim; ++d) {
          // With an F16 cache the one-chunk path sums the values in half
          // floats, as ggml does; the tiled path keeps floats.
          const double tolerance = type == KvCacheType::kF16 && path == AttentionPath::kOneChunk ? 1e-2 : 2e-5;
          ASSERT_NEAR(batch[offset + static_cast<size_t>(d)], ref[static_cast<size_t>(d)], tolerance)
              << "position " << i << ", head " << h << ", element " << d << ", window " << variant.window
              << (path == AttentionPath::kTiled ? ", tiled" : "");
        }
      }
    }
  }
}

TEST(KernelsAttention, OneQueryOverAnF16CacheSumsValuesAsGgmlDoes) {
  // ggml's one-chunk flash attention, bit for bit: each head's online
  // softmax key by key, its weighted sum of values kept in half floats,
  // rounded after every rescaling (where the maximum rose) and every key, then
  // divided by the sum of weights. Keys with one non-zero element and queries
  // whose only element is plus or minus a power of two make every score
  // exact, so the expected bits come from that description alone. 84
  // elements per head cover every width the sums go in (natively 64, 16 and 4
  // at a time, in 128-bit builds 8 and 4); 150 positions cross pages of 64.
  std::mt19937 rng(43);
  const int head_dim = 84, n = 150;
  const AttentionShape shape{.n_heads = 3, .n_kv_heads = 1, .head_dim = head_dim, .scale = 0.25f};
  KvCache cache(1, head_dim, 256, KvCacheType::kF16, {}, 64);
  cache.reserve(n);
  std::vector<float> k(head_dim, 0.0f), v;
  std::uniform_real_distribution<float> key(-12.0f, 12.0f);
  for (int t = 0; t < n; ++t) {
    k[0] = fp16_to_float(float_to_fp16(key(rng)));
    v = random_floats(rng, head_dim);
    store_kv(cache, 0, t, k.data(), v.data());
  }
  const float head_factor[3] = {1.0f, -0.5f, 2.0f};
  std::vector<float> q(static_cast<size_t>(3 * head_dim), 0.0f);
  for (int h = 0; h < 3; ++h) q[static_cast<size_t>(h * head_dim)] = head_factor[h];
  const auto half = [](float x) { return fp16_to_float(float_to_fp16(x)); };
  ThreadPool one(1);
  std::vector<float> scratch, out(q.size());
  for (const int pos : {0, 5, 70, 149}) {
    attention(q.data(), 1, pos, cache, 0, shape, out.data(), one, scratch);
    int rises = 0;
    for (int h = 0; h < 3; ++h) {
      float max = -INFINITY, sum = 0.0f;
      std::vector<float> acc(head_dim, 0.0f);
      for (int t = 0; t <= pos; ++t) {
        const float score = head_factor[h] * fp16_to_float(cache.key<uint16_t>(0, t)[0]) * shape.scale;
        float weight = 1.0f, rescale = 1.0f;
        if (score > max) {
          rescale = std::exp(max - score);
          max = score;
          rises += t > 0;
        } else {
          weight = std::exp(score - max);
        }
        sum = sum * rescale + weight;
        for (int d = 0; d < head_dim; ++d) {
          const auto i = static_cast<size_t>(d);
          if (rescale != 1.0f) acc[i] = half(acc[i] * rescale);
          acc[i] = half(acc[i] + fp16_to_float(cache.value<uint16_t>(0, t)[d]) * weight);
        }
      }
      const float inverse = 1.0f / sum;
      for (int d = 0; d < head_dim; ++d) {
        const float expected = acc[static_cast<size_t>(d)] * inverse;
        const float got = out[static_cast<size_t>(h * head_dim + d)];
        ASSERT_EQ(std::memcmp(&got, &expected, sizeof got), 0)
            << "position " << pos << ", head " << h << ", element " << d << ": " << got << " against " << expected;
      }
    }
    if (pos == 149) EXPECT_GT(rises, 6) << "the maximum should rise after the first key now and then";
  }
}

TEST(KernelsAttention, AnF16CacheKnowsWhetherItsHalvesAreFinite) {
  // Attention reads an F16 cache with fewer operations while it holds no
  // infinity and no NaN; a value past the largest half float becomes one.
  const int kv_dim = 8;
  KvCache cache(1, kv_dim, 16, KvCacheType::kF16, {}, 4);
  cache.reserve(3);
  std::vector<float> k(kv_dim, 1.5f), v(kv_dim, -0.25f);
  store_kv(cache, 0, 0, k.data(), v.data());
  EXPECT_TRUE(cache.halves_finite());
  v[5] = 70000.0f;
  store_kv(cache, 0, 1, k.data(), v.data());
  EXPECT_FALSE(cache.halves_finite());
  v[5] = 1.0f;
  store_kv(cache, 0, 2, k.data(), v.data());
  EXPECT_FALSE(cache.halves_finite()) << "position 1 still holds the infinity";

  // Read as an infinity, not as a large number: element 5 of the output is
  // infinite, the others are what the reference gives.
  const AttentionShape shape{.n_heads = 1, .n_kv_heads = 1, .head_dim = kv_dim, .scale = 0.1f};
  const std::vector<float> q(kv_dim, 0.5f);
  std::vector<float> out(kv_dim), ref(kv_dim), scores(3), scratch;
  ThreadPool one(1);
  attention(q.data(), 1, 2, cache, 0, shape, out.data(), one, scratch);
  attend_reference(q.data(), 2, 0, cache, 0, shape, ref.data(), scores.data());
  for (int d = 0; d < kv_dim; ++d) {
    const auto i = static_cast<size_t>(d);
    if (d == 5) {
      EXPECT_TRUE(std::isinf(out[i]) && std::isinf(ref[i])) << out[i] << " " << ref[i];
    } else {
      EXPECT_NEAR(out[i], ref[i], 1e-2) << d;
    }
  }

  KvCache floats(1, kv_dim, 16, KvCacheType::kF32, {}, 4);
  floats.reserve(1);
  v[5] = INFINITY;
  store_kv(floats, 0, 0, k.data(), v.data());
  EXPECT_TRUE(floats.halves_finite());
}

TEST(KernelsAttention, KvCachePagesAreAPowerOfTwoPositions) {
  // Rows are found with a shift and a mask, which only a power of two allows.
  for (const int page : {0, -4, 3, 48, 100}) {
    try {
      KvCache cache(1, 8, 256, KvCacheType::kF16, {}, page);
      FAIL() << "pages of " << page << " positions were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("power of two"), std::string::npos) << e.what();
    }
  }
  KvCache cache(1, 8, 256, KvCacheType::kF32, {}, 16);
  cache.reserve(40);
  for (int t = 0; t < 40; ++t) {
    const std::vector<float> row(8, static_cast<float>(t));
    store_kv(cache, 0, t, row.data(), row.data());
  }
  for (int t = 0; t < 40; ++t) EXPECT_EQ(cache.key<float>(0, t)[7], static_cast<float>(t)) << t;
}

TEST(KernelsAttention, SlidingWindowSeesOnlyTheWindowAndARingCacheSuffices) {
  // Keys that differ only outside the window must not change the result, and
  // a cache keeping just window + chunk - 1 positions gives the same bits as
  // one keeping all of them.
  std::mt19937 rng(53);
  const int heads = 4, kv_heads = 2, head_dim = 16, kv_dim = kv_heads * head_dim, dim = heads * head_dim;
  const int window = 8, chunk = 5, n = 40;
  const AttentionShape shape{.n_heads = heads, .n_kv_heads = kv_heads, .head_dim = head_dim, .scale = 0.25f,
                             .window = window};
  KvCache full(1, kv_dim, 256, KvCacheType::kF16, {}, 4);
  KvCache ring(1, kv_dim, 256, KvCacheType::kF16, {window + chunk - 1}, 4);
  KvCache other(1, kv_dim, 256, KvCacheType::kF16, {}, 4);
  const std::vector<float> q = random_floats(rng, static_cast<size_t>(n) * dim);
  ThreadPool pool(2);
  std::vector<float> scratch, out_full(q.size()), out_ring(q.size()), out_other(q.size());
  for (int first = 0; first < n; first += chunk) {
    for (KvCache* c : {&full, &ring, &other}) c->reserve(first + chunk);
    for (int t = first; t < first + chunk; ++t) {
      const std::vector<float> k = random_floats(rng, static_cast<size_t>(kv_dim), 2.0f);
      const std::vector<float> v = random_floats(rng, static_cast<size_t>(kv_dim));
      for (KvCache* c : {&full, &ring, &other}) store_kv(*c, 0, t, k.data(), v.data());
    }
    const size_t offset = static_cast<size_t>(first) * dim;
    attention(q.data() + offset, chunk, first, full, 0, shape, out_full.data() + offset, pool, scratch);
    attention(q.data() + offset, chunk, first, ring, 0, shape, out_ring.data() + offset, pool, scratch);
  }
  EXPECT_TRUE(same_bits(out_full, out_ring));
  // Scramble everything older than the last position's window.
  for (int t = 0; t < n - window; ++t) {
    const std::vector<float> junk = random_floats(rng, static_cast<size_t>(kv_dim), 50.0f);
    store_kv(other, 0, t, junk.data(), junk.data());
  }
  const size_t last = static_cast<size_t>(n - 1) * dim;
  attention(q.data() + last, 1, n - 1, other, 0, shape, out_other.data() + last, pool, scratch);
  EXPECT_TRUE(same_bits(std::vector<float>(out_full.begin() + static_cast<long>(last), out_full.end()),
                        std::vector<float>(out_other.begin() + static_cast<long>(last), out_other.end())));
  EXPECT_LT(ring.allocated_bytes(), full.allocated_bytes());
}

}  // namespace
}  // namespace sipllm

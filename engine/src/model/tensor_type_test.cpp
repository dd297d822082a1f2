#include "model/tensor_type.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/half.h"

namespace sipllm {
namespace {

// Independent fp16 decoding: sign * 2^(e-15) * (1 + m/1024), or subnormal.
double fp16_by_formula(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 0) return sign * std::ldexp(m, -24);
  if (e == 31) return m == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(1024 + m, e - 25);
}

TEST(Half, EveryFp16ValueDecodesExactly) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double expected = fp16_by_formula(static_cast<uint16_t>(h));
    const float got = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << "fp16 bits " << h;
    }
  }
}

TEST(Half, EncodeRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_fp16(f), h) << "fp16 bits " << h;
  }
}

TEST(Half, EncodeRoundsToNearestEven) {
  // 1 + 2^-11 lies exactly between 1 and 1 + 2^-10: ties go to the even one (1).
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // rounds up to infinity
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even (0)
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Half, Bf16IsTheTopHalfOfAFloat) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
  EXPECT_EQ(bf16_to_float(0x3e20), 0.15625f);
}

template <typename Block>
std::vector<uint8_t> bytes_of(const Block& b) {
  std::vector<uint8_t> out(sizeof b);
  std::memcpy(out.data(), &b, sizeof b);
  return out;
}

TEST(TensorType, Q8_0HandBuiltBlock) {
  BlockQ8_0 b{};
  b.d = float_to_fp16(0.5f);
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<int8_t>(i * 8 - 128);  // -128 .. 120
  const std::vector<uint8_t> raw = bytes_of(b);
  // The layout is byte-exact: 2 bytes of scale, then the 32 quants.
  ASSERT_EQ(raw.size(), 34u);
  EXPECT_EQ(raw[0], 0x00);
  EXPECT_EQ(raw[1], 0x38);  // 0.5 in fp16 is 0x3800, little-endian
  EXPECT_EQ(static_cast<int8_t>(raw[2]), -128);
  std::vector<float> out(32);
  dequantize_row(TensorType::kQ8_0, raw.data(), out.data(), 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(i * 8 - 128)) << i;
}

TEST(TensorType, Q4_0HandBuiltBlock) {
  // Scale 2, qs[j] = low nibble j, high nibble 15 - j: element j = (j - 8) * 2,
  // element j + 16 = (15 - j - 8) * 2.
  std::vector<uint8_t> raw(18);
  const uint16_t d = float_to_fp16(2.0f);
  std::memcpy(raw.data(), &d, 2);
  for (int j = 0; j < 16; ++j) raw[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> out(32);
  dequantize_row(TensorType::kQ4_0, raw.data(), out.data(), 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], static_cast<float>((j - 8) * 2)) << j;
    EXPECT_EQ(out[j + 16], static_cast<float>((7 - j) * 2)) << j;
  }
}

TEST(TensorType, F16AndBf16Rows) {
  const uint16_t f16[3] = {0x3c00, 0xc000, 0x3555};  // 1, -2, 0.333251953125
  const uint16_t bf16[3] = {0x3f80, 0xc000, 0x4049};  // 1, -2, 3.140625
  float out[3];
  dequantize_row(TensorType::kF16, f16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.333251953125f);
  dequantize_row(TensorType::kBF16, bf16, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 3.140625f);
}

TEST(TensorType, TraitsMatchGgml) {
  EXPECT_EQ(tensor_type_traits(TensorType::kQ8_0).block_bytes, 34u);
  EXPECT_EQ(tensor_type_traits(TensorType::kQ4_0).block_bytes, 18u);
  EXPECT_EQ(tensor_type_traits(TensorType::kBF16).block_bytes, 2u);
  EXPECT_EQ(tensor_type_traits(10), nullptr);  // Q2_K: not read
  EXPECT_EQ(tensor_type_name(10), "Q2_K");
  EXPECT_EQ(tensor_type_name(12), "Q4_K");
  EXPECT_EQ(tensor_type_name(999), "type 999");
}

}  // namespace
}  // namespace sipllm

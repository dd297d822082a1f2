#include "model/tensor_type.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/half.h"
#include "sipllm/error.h"
#include "test_support.h"

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
  EXPECT_EQ(tensor_type_traits(10)->block_bytes, 84u);  // Q2_K
  EXPECT_EQ(tensor_type_traits(16), nullptr);  // IQ2_XXS: not read
  EXPECT_EQ(tensor_type_traits(15), nullptr);  // Q8_K: in memory only
  EXPECT_EQ(tensor_type_name(16), "IQ2_XXS");
  EXPECT_EQ(tensor_type_name(39), "MXFP4");
  EXPECT_EQ(tensor_type_name(12), "Q4_K");
  EXPECT_EQ(tensor_type_name(999), "type 999");
}

// Every row of the table sits at its own id, and says what it is.
TEST(TensorType, TheTableIsIndexedByIdAndComplete) {
  int readable = 0;
  for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
    const TensorTypeTraits* traits = tensor_type_traits(id);
    if (traits == nullptr) continue;
    ++readable;
    SCOPED_TRACE(traits->name);
    EXPECT_EQ(static_cast<uint32_t>(traits->type), id);
    EXPECT_EQ(&tensor_type_traits(traits->type), traits);
    EXPECT_EQ(tensor_type_name(id), traits->name);
    EXPECT_NE(traits->to_float, nullptr);
    EXPECT_GT(traits->block_bytes, 0u);
    EXPECT_NE(traits->llama_file_type, kNoFileType);
    EXPECT_EQ(tensor_type_traits(traits->row_fallback).block_elements == 1 ||
                  tensor_type_traits(traits->row_fallback).block_elements < traits->block_elements,
              true)
        << "a fallback takes shorter rows";
  }
  EXPECT_EQ(readable, 16);  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL IQ4_XS MXFP4
  for (TensorType t : {TensorType::kQ8_K, TensorType::kQ5_0Unpacked, TensorType::kQ5_1Unpacked}) {
    EXPECT_FALSE(tensor_type_traits(t).in_files);
    EXPECT_EQ(tensor_type_traits(static_cast<uint32_t>(t)), nullptr);
  }
}

TEST(TensorType, AnUnknownTypeIsAClearError) {
  std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> out(1024);
  try {
    quantize_row(static_cast<TensorType>(16), x.data(), out.data(), x.size());  // IQ2_XXS: not in the table
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
}

// llama.cpp's own quantizations of a few rows and its dequantizations of them
// (tests/fixtures/quant, made with ggml's library): the engine reads every
// block to the same floats, bit for bit.
TEST(TensorType, DequantizationIsLlamaCppsBitForBit) {
  for (const char* name : {"Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4"}) {
    SCOPED_TRACE(name);
    const test::GgmlOracle o = test::read_ggml_oracle(name);
    const TensorTypeTraits* traits = tensor_type_traits(o.type_id);
    ASSERT_NE(traits, nullptr);
    EXPECT_EQ(std::string(traits->name), name);
    ASSERT_EQ(tensor_bytes(*traits, o.cols), o.row_bytes);
    std::vector<float> ours(o.floats.size(), -7.0f);
    for (uint32_t r = 0; r < o.rows; ++r) {
      dequantize_row(traits->type, o.bytes.data() + static_cast<size_t>(r) * o.row_bytes,
                     ours.data() + static_cast<size_t>(r) * o.cols, o.cols);
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < ours.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &ours[i], 4);
      std::memcpy(&b, &o.floats[i], 4);
      ASSERT_EQ(a, b) << "element " << i << ": " << ours[i] << " against llama.cpp's " << o.floats[i];
      nonzero += o.floats[i] != 0.0f;
    }
    EXPECT_GT(nonzero, ours.size() / 2) << "the oracle's rows are mostly zeros: it tests little";
  }
}

// And quantizes the same floats to the same bytes, as llama-quantize does
// without an importance matrix: files the generator writes in these types
// are what llama.cpp would write.
TEST(TensorType, QuantizationIsLlamaCppsBitForBit) {
  for (const char* name : {"Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4"}) {
    SCOPED_TRACE(name);
    const test::GgmlOracle o = test::read_ggml_oracle(name);
    const TensorTypeTraits& traits = *tensor_type_traits(o.type_id);
    ASSERT_NE(traits.from_float, nullptr);
    for (uint32_t r = 0; r < o.rows; ++r) {
      std::vector<uint8_t> ours(o.row_bytes, 0xee);
      quantize_row(traits.type, o.inputs.data() + static_cast<size_t>(r) * o.cols, ours.data(), o.cols);
      const uint8_t* theirs = o.bytes.data() + static_cast<size_t>(r) * o.row_bytes;
      for (uint32_t i = 0; i < o.row_bytes; ++i) {
        ASSERT_EQ(ours[i], theirs[i]) << "row " << r << ", byte " << i << " (block " << i / traits.block_bytes
                                      << ", byte " << i % traits.block_bytes << " of it)";
      }
    }
  }
}

}  // namespace
}  // namespace sipllm

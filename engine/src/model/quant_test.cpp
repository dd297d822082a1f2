// The block quant formats: hand-built blocks decode to values worked out here
// from the layout description, quantize-then-dequantize stays within each
// format's error bound, and files with a block that does not fit or a type
// the engine cannot read are refused with an Error naming tensor and type.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/half.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "model/tensor_type.h"
#include "test_support.h"

namespace sipllm {
namespace {

std::vector<float> dequantize(TensorType type, const std::vector<uint8_t>& raw, size_t n) {
  std::vector<float> out(n);
  dequantize_row(type, raw.data(), out.data(), n);
  return out;
}

std::vector<uint8_t> quantize(TensorType type, const std::vector<float>& x) {
  std::vector<uint8_t> raw(tensor_bytes(tensor_type_traits(type), x.size()));
  quantize_row(type, x.data(), raw.data(), x.size());
  return raw;
}

void put_u16(std::vector<uint8_t>& raw, size_t offset, uint16_t v) {
  raw[offset] = static_cast<uint8_t>(v & 0xff);
  raw[offset + 1] = static_cast<uint8_t>(v >> 8);
}

uint16_t get_u16(const std::vector<uint8_t>& raw, size_t offset) {
  return static_cast<uint16_t>(raw[offset] | raw[offset + 1] << 8);
}

// A fixed, uneven byte pattern for the quant fields.
uint8_t pattern(int i) { return static_cast<uint8_t>((i * 73 + 41) ^ (i >> 2)); }

// ---- Hand-built blocks ------------------------------------------------------------
// Every scale below is a power of two, so each expected value is exact.

TEST(QuantFormats, TraitsMatchGgml) {
  struct Expected {
    uint32_t id;
    const char* name;
    uint32_t block_elements, block_bytes;
  };
  // ggml-common.h: sizes follow from the field lists.
  const Expected expected[] = {
      {3, "Q4_1", 32, 2 + 2 + 16},   {6, "Q5_0", 32, 2 + 4 + 16},         {7, "Q5_1", 32, 2 + 2 + 4 + 16},
      {12, "Q4_K", 256, 2 + 2 + 12 + 128}, {13, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
      {14, "Q6_K", 256, 128 + 64 + 16 + 2}, {10, "Q2_K", 256, 16 + 64 + 2 + 2},
      {11, "Q3_K", 256, 32 + 64 + 12 + 2}, {20, "IQ4_NL", 32, 2 + 16}, {23, "IQ4_XS", 256, 2 + 2 + 4 + 128},
      {39, "MXFP4", 32, 1 + 16},
  };
  for (const Expected& e : expected) {
    const TensorTypeTraits* t = tensor_type_traits(e.id);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_STREQ(t->name, e.name);
    EXPECT_EQ(t->block_elements, e.block_elements) << e.name;
    EXPECT_EQ(t->block_bytes, e.block_bytes) << e.name;
    EXPECT_EQ(tensor_type_name(e.id), e.name);
  }
  // Q8_K exists for activations only: never accepted from a file.
  EXPECT_EQ(tensor_type_traits(15), nullptr);
  EXPECT_EQ(tensor_type_traits(TensorType::kQ8_K).block_bytes, 4u + 256u + 16u * 2u);
  EXPECT_EQ(tensor_type_traits(TensorType::kQ8_K).block_elements, 256u);
  for (uint32_t unsupported : {4u, 5u, 9u, 16u, 17u, 18u, 19u, 21u, 22u, 29u, 31u, 34u, 35u, 40u}) {
    EXPECT_EQ(tensor_type_traits(unsupported), nullptr) << tensor_type_name(unsupported);
  }
}

TEST(QuantFormats, Q4_1HandBuiltBlock) {
  // d = 0.5, m = -3; qs[j] = j | (15 - j) << 4.
  std::vector<uint8_t> raw(20);
  put_u16(raw, 0, 0x3800);  // 0.5
  put_u16(raw, 2, 0xc200);  // -3
  for (int j = 0; j < 16; ++j) raw[4 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  const std::vector<float> out = dequantize(TensorType::kQ4_1, raw, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * j - 3) << j;
    EXPECT_EQ(out[j + 16], 0.5f * (15 - j) - 3) << j;
  }
  EXPECT_EQ(out[0], -3.0f);
  EXPECT_EQ(out[16], 4.5f);  // 15 * 0.5 - 3
}

// Q5_0 and Q5_1: element e has low bits from nibble (e < 16 ? low of qs[e] :
// high of qs[e - 16]) and its fifth bit at bit e of the little-endian qh.
int five_bit_level(const std::vector<uint8_t>& raw, size_t qh_at, size_t qs_at, int e) {
  const uint8_t byte = raw[qs_at + (e % 16)];
  const int low = e < 16 ? byte & 0x0f : byte >> 4;
  const int high = (raw[qh_at + e / 8] >> (e % 8)) & 1;
  return low + 16 * high;
}

TEST(QuantFormats, Q5_0HandBuiltBlock) {
  std::vector<uint8_t> raw(22);
  put_u16(raw, 0, 0x3400);  // 0.25
  const uint8_t qh[4] = {0xa5, 0x3c, 0x0f, 0xf1};
  std::memcpy(raw.data() + 2, qh, 4);
  for (int j = 0; j < 16; ++j) raw[6 + j] = pattern(j);
  const std::vector<float> out = dequantize(TensorType::kQ5_0, raw, 32);
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(out[e], 0.25f * (five_bit_level(raw, 2, 6, e) - 16)) << e;
  }
  // Element 0: low nibble of pattern(0) = 41 = 0x29 is 9, bit 0 of 0xa5 is 1:
  // level 25, value (25 - 16) * 0.25.
  EXPECT_EQ(out[0], 2.25f);
  // Element 31: high nibble of pattern(15) = (15*73+41) ^ 3 = 1136 ^ 3 -> 0x73
  // is 7, bit 7 of 0xf1 is 1: level 23.
  EXPECT_EQ(out[31], 0.25f * 7);
}

TEST(QuantFormats, Q5_1HandBuiltBlock) {
  std::vector<uint8_t> raw(24);
  put_u16(raw, 0, 0x3000);  // 0.125
  put_u16(raw, 2, 0xbc00);  // -1
  const uint8_t qh[4] = {0x5a, 0xc3, 0xf0, 0x18};
  std::memcpy(raw.data() + 4, qh, 4);
  for (int j = 0; j < 16; ++j) raw[8 + j] = pattern(j + 5);
  const std::vector<float> out = dequantize(TensorType::kQ5_1, raw, 32);
  for (int e = 0; e < 32; ++e) {
    EXPECT_EQ(out[e], 0.125f * five_bit_level(raw, 4, 8, e) - 1.0f) << e;
  }
}

// Unpacking keeps the scale (and minimum) and puts each level in a byte of
// its own: the same values, blocks of 34 and 36 bytes. In place too, when
// the packed blocks lie at the end of the room the unpacked ones take.
TEST(QuantFormats, Q5BlocksUnpackToALevelPerByte) {
  for (const TensorType packed : {TensorType::kQ5_0, TensorType::kQ5_1}) {
    const TensorType unpacked = unpacked_type(packed);
    ASSERT_NE(unpacked, packed);
    EXPECT_EQ(tensor_type_traits(static_cast<uint32_t>(unpacked)), nullptr) << "no file holds it";
    const size_t packed_bytes = tensor_type_traits(packed).block_bytes;
    const size_t unpacked_bytes = tensor_type_traits(unpacked).block_bytes;
    EXPECT_EQ(unpacked_bytes, packed_bytes + 12);
    const size_t levels_at = unpacked_bytes - 32;
    const size_t qh_at = packed_bytes - 20;
    constexpr size_t kBlocks = 7;
    std::vector<uint8_t> raw(kBlocks * packed_bytes);
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = pattern(static_cast<int>(i));
    for (size_t b = 0; b < kBlocks; ++b) {  // finite scales and minimums
      put_u16(raw, b * packed_bytes, 0x3400);
      if (packed == TensorType::kQ5_1) put_u16(raw, b * packed_bytes + 2, 0xbc00);
    }

    std::vector<uint8_t> out(kBlocks * unpacked_bytes);
    unpack_5bit_blocks(packed, raw.data(), out.data(), kBlocks);
    for (size_t b = 0; b < kBlocks; ++b) {
      const std::vector<uint8_t> block(raw.begin() + static_cast<long>(b * packed_bytes),
                                       raw.begin() + static_cast<long>((b + 1) * packed_bytes));
      const uint8_t* u = out.data() + b * unpacked_bytes;
      EXPECT_EQ(std::memcmp(u, block.data(), levels_at), 0) << "scale and minimum, block " << b;
      for (int e = 0; e < 32; ++e) {
        ASSERT_EQ(u[levels_at + static_cast<size_t>(e)], five_bit_level(block, qh_at, qh_at + 4, e))
            << tensor_type_traits(packed).name << " block " << b << " element " << e;
      }
    }
    EXPECT_EQ(dequantize(unpacked, out, kBlocks * 32), dequantize(packed, raw, kBlocks * 32));

    // In place: packed at the end of the room, unpacked from its start.
    std::vector<uint8_t> room(out.size(), 0);
    std::copy(raw.begin(), raw.end(), room.end() - static_cast<long>(raw.size()));
    unpack_5bit_blocks(packed, room.data() + room.size() - raw.size(), room.data(), kBlocks);
    EXPECT_EQ(room, out);

    // Quantizing to the unpacked type is quantizing, then unpacking.
    const std::vector<float> x = {0.5f, -1.0f, 0.25f, 2.0f, -0.75f, 0.0f, 1.5f, -2.0f, 0.125f, 1.0f, -0.5f,
                                  0.375f, -1.25f, 0.875f, -0.0625f, 1.75f, 0.3f, -0.6f, 0.9f, -1.2f, 1.5f,
                                  -1.8f, 2.1f, -0.2f, 0.4f, -0.8f, 1.6f, -0.1f, 0.7f, -1.4f, 1.1f, -0.9f};
    std::vector<uint8_t> expected(unpacked_bytes);
    unpack_5bit_blocks(packed, quantize(packed, x).data(), expected.data(), 1);
    EXPECT_EQ(quantize(unpacked, x), expected);
  }
  std::vector<uint8_t> block(64);
  EXPECT_THROW(unpack_5bit_blocks(TensorType::kQ4_0, block.data(), block.data(), 1), Error);
}

// Q4_K / Q5_K scales, packed by bytes: for i in 0..3,
//   byte i     = scale[i] | (scale[i + 4] >> 4) << 6
//   byte i + 4 = min[i]   | (min[i + 4] >> 4) << 6
//   byte i + 8 = (scale[i + 4] & 15) | (min[i + 4] & 15) << 4
void pack_scales_by_bytes(const int* scale, const int* min, uint8_t* bytes) {
  for (int i = 0; i < 4; ++i) {
    bytes[i] = static_cast<uint8_t>(scale[i] | (scale[i + 4] >> 4) << 6);
    bytes[i + 4] = static_cast<uint8_t>(min[i] | (min[i + 4] >> 4) << 6);
    bytes[i + 8] = static_cast<uint8_t>((scale[i + 4] & 15) | (min[i + 4] & 15) << 4);
  }
}

// Sub-block scale and min decoded the same way, byte by byte.
void unpack_scales_by_bytes(const uint8_t* bytes, int* scale, int* min) {
  for (int i = 0; i < 4; ++i) {
    scale[i] = bytes[i] & 63;
    min[i] = bytes[i + 4] & 63;
    scale[i + 4] = (bytes[i + 8] & 15) | (bytes[i] >> 6) << 4;
    min[i + 4] = (bytes[i + 8] >> 4) | (bytes[i + 4] >> 6) << 4;
  }
}

TEST(QuantFormats, KQuantScalePacking) {
  // Values above 15 in the upper four sub-blocks exercise the split high bits.
  const int scale[8] = {1, 17, 42, 63, 33, 48, 63, 5};
  const int min[8] = {0, 63, 9, 31, 62, 16, 47, 20};
  uint8_t bytes[12];
  pack_scales_by_bytes(scale, min, bytes);
  int s2[8], m2[8];
  unpack_scales_by_bytes(bytes, s2, m2);
  for (int j = 0; j < 8; ++j) {
    const KScaleMin sm = k_quant_scale_min(bytes, j);
    EXPECT_EQ(sm.scale, scale[j]) << j;
    EXPECT_EQ(sm.min, min[j]) << j;
    EXPECT_EQ(s2[j], scale[j]);
    EXPECT_EQ(m2[j], min[j]);
  }
}

TEST(QuantFormats, Q4_KHandBuiltBlock) {
  const int scale[8] = {1, 17, 42, 63, 33, 48, 63, 5};
  const int min[8] = {0, 63, 9, 31, 62, 16, 47, 20};
  std::vector<uint8_t> raw(144);
  put_u16(raw, 0, 0x3000);  // d = 0.125
  put_u16(raw, 2, 0x2c00);  // dmin = 0.0625
  pack_scales_by_bytes(scale, min, raw.data() + 4);
  for (int i = 0; i < 128; ++i) raw[16 + i] = pattern(i);
  const std::vector<float> out = dequantize(TensorType::kQ4_K, raw, 256);
  for (int e = 0; e < 256; ++e) {
    // Chunk c of 64: its first 32 elements are the low nibbles of qs[32c ..
    // 32c + 31] (sub-block 2c), the next 32 the high nibbles (sub-block 2c + 1).
    const int c = e / 64, r = e % 64, sub = e / 32;
    const uint8_t byte = raw[16 + 32 * c + r % 32];
    const int q = r < 32 ? byte & 0x0f : byte >> 4;
    EXPECT_EQ(out[e], 0.125f * scale[sub] * q - 0.0625f * min[sub]) << e;
  }
  // Element 0: low nibble of pattern(0) = 0x29 is 9: 0.125 * 1 * 9 - 0.
  EXPECT_EQ(out[0], 1.125f);
  // Element 32: high nibble 2, sub-block 1: 0.125 * 17 * 2 - 0.0625 * 63.
  EXPECT_EQ(out[32], 4.25f - 3.9375f);
}

TEST(QuantFormats, Q5_KHandBuiltBlock) {
  const int scale[8] = {7, 60, 2, 33, 63, 18, 40, 1};
  const int min[8] = {5, 0, 63, 12, 17, 50, 3, 63};
  std::vector<uint8_t> raw(176);
  put_u16(raw, 0, 0x2c00);  // d = 0.0625
  put_u16(raw, 2, 0x3400);  // dmin = 0.25
  pack_scales_by_bytes(scale, min, raw.data() + 4);
  for (int i = 0; i < 32; ++i) raw[16 + i] = pattern(i + 200);  // qh
  for (int i = 0; i < 128; ++i) raw[48 + i] = pattern(i);       // qs
  const std::vector<float> out = dequantize(TensorType::kQ5_K, raw, 256);
  for (int e = 0; e < 256; ++e) {
    // As Q4_K, and the fifth bit of element e is bit (e / 32) of qh[e % 32].
    const int c = e / 64, r = e % 64, sub = e / 32;
    const uint8_t byte = raw[48 + 32 * c + r % 32];
    const int low = r < 32 ? byte & 0x0f : byte >> 4;
    const int high = (raw[16 + e % 32] >> sub) & 1;
    EXPECT_EQ(out[e], 0.0625f * scale[sub] * (low + 16 * high) - 0.25f * min[sub]) << e;
  }
}

TEST(QuantFormats, Q6_KHandBuiltBlock) {
  std::vector<uint8_t> raw(210);
  for (int i = 0; i < 128; ++i) raw[i] = pattern(i);            // ql
  for (int i = 0; i < 64; ++i) raw[128 + i] = pattern(i + 99);  // qh
  const int8_t scales[16] = {-128, 127, 1, -1, 64, -37, 0, 12, 99, -100, 5, -6, 77, 3, -2, 110};
  std::memcpy(raw.data() + 192, scales, 16);
  put_u16(raw, 208, 0x2000);  // d = 2^-7
  const std::vector<float> out = dequantize(TensorType::kQ6_K, raw, 256);
  const float d = 1.0f / 128;
  for (int e = 0; e < 256; ++e) {
    // Half h of 128 uses ql[64h ..] and qh[32h ..]; quarter k of the half
    // (32 elements each) takes the low (k < 2) or high nibble of
    // ql[64h + 32 * (k % 2) + l] and bits 2k, 2k+1 of qh[32h + l].
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = raw[64 * h + 32 * (k % 2) + l];
    const int low = k < 2 ? lbyte & 0x0f : lbyte >> 4;
    const int high = (raw[128 + 32 * h + l] >> (2 * k)) & 3;
    EXPECT_EQ(out[e], d * scales[e / 16] * (low + 16 * high - 32)) << e;
  }
}

TEST(QuantFormats, Q8_KHandBuiltBlock) {
  std::vector<uint8_t> raw(292);
  const float d = 0.25f;
  std::memcpy(raw.data(), &d, 4);
  for (int i = 0; i < 256; ++i) raw[4 + i] = pattern(i);
  const std::vector<float> out = dequantize(TensorType::kQ8_K, raw, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(out[e], 0.25f * static_cast<int8_t>(pattern(e))) << e;
}

// ---- Round trips ------------------------------------------------------------------------

// Several shapes of data, so blocks see both even and very uneven sub-blocks.
std::vector<float> test_data(size_t n, int kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> gauss(0, 1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[i] = uniform(rng); break;
      case 1: x[i] = 0.02f * gauss(rng); break;                           // weight-like
      case 2: x[i] = gauss(rng) * std::pow(10.0f, float((i / 16) % 4) - 2); break;  // 1e-2 .. 10 per 16
      case 3: x[i] = std::fabs(gauss(rng)) + float(i / 32); break;        // all positive, rising
      default: x[i] = (i % 64 < 32 ? 0.0f : 0.3f); break;                 // zero and constant runs
    }
  }
  return x;
}

constexpr double kFp16RelativeError = 1.0 / 2048;  // half an ulp of an fp16 significand

struct RoundTripCase {
  TensorType type;
  std::vector<size_t> sizes;
};

// Checks every block of x against x' = dequantize(quantize(x)) with the bound
// `check(block of x, block of x', block bytes)`.
void round_trip(TensorType type, const std::vector<size_t>& sizes,
                const std::function<void(const float*, const float*, const uint8_t*, const std::string&)>& check) {
  const TensorTypeTraits& traits = tensor_type_traits(type);
  for (size_t n : sizes) {
    for (int kind = 0; kind < 5; ++kind) {
      const std::vector<float> x = test_data(n, kind, static_cast<uint32_t>(n * 7 + kind));
      const std::vector<uint8_t> raw = quantize(type, x);
      ASSERT_EQ(raw.size(), n / traits.block_elements * traits.block_bytes);
      const std::vector<float> y = dequantize(type, raw, n);
      for (size_t b = 0; b < n / traits.block_elements; ++b) {
        const std::string where = std::string(traits.name) + " n=" + std::to_string(n) +
                                  " kind=" + std::to_string(kind) + " block " + std::to_string(b);
        check(x.data() + b * traits.block_elements, y.data() + b * traits.block_elements,
              raw.data() + b * traits.block_bytes, where);
      }
    }
  }
}

const std::vector<size_t> kSmallBlockSizes = {32, 64, 96, 320, 4096};
const std::vector<size_t> kSuperBlockSizes = {256, 512, 768, 2560};

float abs_max(const float* x, int n) {
  float a = 0;
  for (int i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

TEST(QuantRoundTrip, Q8_0) {
  // Step s = amax / 127. Rounding to the nearest level errs by s/2; storing
  // the scale in fp16 moves level q (|q| <= 127) by at most 127 * s * 2^-11.
  round_trip(TensorType::kQ8_0, kSmallBlockSizes, [](const float* x, const float* y, const uint8_t*, const std::string& at) {
    const double s = abs_max(x, 32) / 127.0;
    for (int i = 0; i < 32; ++i) {
      ASSERT_LE(std::fabs(x[i] - y[i]), s * (0.5 + 127 * kFp16RelativeError) + 1e-7 * s) << at << " element " << i;
    }
  });
}

// Q4_0 / Q5_0: the element of largest magnitude maps to level -L (L = 8 or
// 16) with step s = amax / L; the opposite extreme, +L, is clamped to L - 1,
// so elements beyond (L - 1/2) s err by up to s, the others by s/2; the fp16
// scale adds at most L * s * 2^-11.
void check_symmetric(int levels, const float* x, const float* y, const std::string& at) {
  const double s = abs_max(x, 32) / levels;
  for (int i = 0; i < 32; ++i) {
    const double rounding = std::max(0.5 * s, std::fabs(x[i]) - (levels - 1) * s);
    ASSERT_LE(std::fabs(x[i] - y[i]), rounding + levels * s * kFp16RelativeError + 1e-7 * s)
        << at << " element " << i;
  }
}

TEST(QuantRoundTrip, Q4_0) {
  round_trip(TensorType::kQ4_0, kSmallBlockSizes, [](const float* x, const float* y, const uint8_t*, const std::string& at) {
    check_symmetric(8, x, y, at);
  });
}

TEST(QuantRoundTrip, Q5_0) {
  round_trip(TensorType::kQ5_0, kSmallBlockSizes, [](const float* x, const float* y, const uint8_t*, const std::string& at) {
    check_symmetric(16, x, y, at);
  });
}

// Q4_1 / Q5_1: levels 0..nmax span [min, max] with step s = (max - min) / nmax;
// rounding errs by s/2, the fp16 scale by nmax * s * 2^-11 and the fp16 min by
// |min| * 2^-11.
void check_with_min(int nmax, const float* x, const float* y, const std::string& at) {
  const float min = *std::min_element(x, x + 32), max = *std::max_element(x, x + 32);
  const double s = (max - min) / static_cast<double>(nmax);
  const double bound = 0.5 * s + (nmax * s + std::fabs(min)) * kFp16RelativeError + 1e-6 * (s + std::fabs(min));
  for (int i = 0; i < 32; ++i) ASSERT_LE(std::fabs(x[i] - y[i]), bound) << at << " element " << i;
}

TEST(QuantRoundTrip, Q4_1) {
  round_trip(TensorType::kQ4_1, kSmallBlockSizes, [](const float* x, const float* y, const uint8_t*, const std::string& at) {
    check_with_min(15, x, y, at);
  });
}

TEST(QuantRoundTrip, Q5_1) {
  round_trip(TensorType::kQ5_1, kSmallBlockSizes, [](const float* x, const float* y, const uint8_t*, const std::string& at) {
    check_with_min(31, x, y, at);
  });
}

// Q4_K / Q5_K. Two checks per element:
// 1. It decodes to the level of its sub-block nearest to the input, using
//    the scale and min as stored (decoded here from the bytes): the
//    quantizer re-picks every level after rounding the scales.
// 2. Its error is at most R_j / nmax + R_max / 63, where R_j is the range of
//    its sub-block including zero (the fitted min is never above zero) and
//    R_max the largest R_j in the super-block: half a step from rounding, up
//    to half a step more where the least-squares fit trims the extremes of a
//    sub-block, and the 6-bit rounding of the sub-block's scale and min,
//    whose units are 1/63 of the super-block's largest (at most
//    nmax * (s_max / 63) / 2 + (m_max / 63) / 2 <= R_max / 63).
void check_k_with_min(int nmax, bool has_high_bits, const float* x, const float* y,
                      const uint8_t* block, const std::string& at) {
  const std::vector<uint8_t> raw(block, block + (has_high_bits ? 176 : 144));
  const float d = fp16_to_float(get_u16(raw, 0)), dmin = fp16_to_float(get_u16(raw, 2));
  int scale[8], min[8];
  unpack_scales_by_bytes(raw.data() + 4, scale, min);
  double range[8], range_max = 0;
  for (int j = 0; j < 8; ++j) {
    const float lo = std::min(0.0f, *std::min_element(x + 32 * j, x + 32 * j + 32));
    const float hi = *std::max_element(x + 32 * j, x + 32 * j + 32);
    range[j] = hi - lo;
    range_max = std::max(range_max, range[j]);
  }
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    const float step = d * static_cast<float>(scale[j]);
    const float offset = dmin * static_cast<float>(min[j]);
    const double err = std::fabs(x[e] - y[e]);
    if (step != 0) {
      double nearest = INFINITY;
      for (int q = 0; q <= nmax; ++q) nearest = std::min(nearest, static_cast<double>(std::fabs(x[e] - (step * q - offset))));
      ASSERT_LE(err, nearest + 1e-6 * (std::fabs(x[e]) + step * nmax + offset)) << at << " element " << e;
    }
    ASSERT_LE(err, range[j] / nmax + range_max / 63 + 1e-6 * range_max) << at << " element " << e;
  }
}

TEST(QuantRoundTrip, Q4_K) {
  round_trip(TensorType::kQ4_K, kSuperBlockSizes, [](const float* x, const float* y, const uint8_t* b, const std::string& at) {
    check_k_with_min(15, false, x, y, b, at);
  });
}

TEST(QuantRoundTrip, Q5_K) {
  round_trip(TensorType::kQ5_K, kSuperBlockSizes, [](const float* x, const float* y, const uint8_t* b, const std::string& at) {
    check_k_with_min(31, true, x, y, b, at);
  });
}

// Q6_K: symmetric levels -32..31 per sub-block of 16 with step d * scale_j.
// 1. Each element decodes to the nearest level of its sub-block as stored.
// 2. Its error is at most A_j / 32 + A_max / 128 (A_j = the sub-block's
//    largest magnitude): half a step from rounding plus up to half a step
//    where the fit trims the extremes, and the 8-bit rounding of the scale,
//    whose unit is 1/128 of the largest (32 levels * (s_max / 128) / 2).
TEST(QuantRoundTrip, Q6_K) {
  round_trip(TensorType::kQ6_K, kSuperBlockSizes, [](const float* x, const float* y, const uint8_t* block, const std::string& at) {
    const std::vector<uint8_t> raw(block, block + 210);
    const float d = fp16_to_float(get_u16(raw, 208));
    double amax_max = 0;
    for (int j = 0; j < 16; ++j) amax_max = std::max(amax_max, static_cast<double>(abs_max(x + 16 * j, 16)));
    for (int e = 0; e < 256; ++e) {
      const int j = e / 16;
      const float step = d * static_cast<float>(static_cast<int8_t>(raw[192 + j]));
      const double err = std::fabs(x[e] - y[e]);
      if (step != 0) {
        double nearest = INFINITY;
        for (int q = -32; q <= 31; ++q) nearest = std::min(nearest, static_cast<double>(std::fabs(x[e] - step * q)));
        ASSERT_LE(err, nearest + 1e-6 * (std::fabs(x[e]) + std::fabs(step) * 32)) << at << " element " << e;
      }
      ASSERT_LE(err, abs_max(x + 16 * j, 16) / 32.0 + amax_max / 128 + 1e-6 * amax_max) << at << " element " << e;
    }
  });
}

TEST(QuantRoundTrip, Q8_K) {
  // Step s = amax / 127 with a float scale: rounding errs by s/2. bsums[g] is
  // the sum of the 16 quants of group g.
  round_trip(TensorType::kQ8_K, kSuperBlockSizes, [](const float* x, const float* y, const uint8_t* block, const std::string& at) {
    const double s = abs_max(x, 256) / 127.0;
    for (int e = 0; e < 256; ++e) ASSERT_LE(std::fabs(x[e] - y[e]), s * (0.5 + 1e-5)) << at << " element " << e;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += static_cast<int8_t>(block[4 + 16 * g + l]);
      int16_t bsum;
      std::memcpy(&bsum, block + 4 + 256 + 2 * g, 2);
      ASSERT_EQ(bsum, sum) << at << " group " << g;
    }
  });
}

TEST(QuantRoundTrip, AllZeroBlocksStayZero) {
  for (TensorType type : {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1,
                          TensorType::kQ8_0, TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,
                          TensorType::kQ8_K}) {
    const std::vector<float> zeros(512, 0.0f);
    const std::vector<float> y = dequantize(type, quantize(type, zeros), zeros.size());
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_EQ(y[i], 0.0f) << tensor_type_traits(type).name << " element " << i;
    }
  }
}

// ---- Files whose blocks do not fit, or whose type the engine cannot read ------------

std::string parse_error(GgufWriter& writer) {
  auto source = make_memory_source(writer.to_bytes(), "bad.gguf");
  try {
    GgufFile::parse(*source);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(QuantFiles, RowLengthThatDoesNotFitTheBlockNamesTensorAndType) {
  GgufWriter writer = test::random_llama_writer("tiny");
  // 320 is a multiple of 32 but not of Q4_K's 256.
  writer.add_tensor("blk.0.odd.weight", {320, 2}, static_cast<uint32_t>(TensorType::kQ4_K), 2 * 144,
                    [](std::vector<uint8_t>& out) { out.assign(2 * 144, 0); });
  const std::string message = parse_error(writer);
  EXPECT_NE(message.find("blk.0.odd.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("Q4_K"), std::string::npos) << message;
  EXPECT_NE(message.find("320"), std::string::npos) << message;
  EXPECT_NE(message.find("256"), std::string::npos) << message;
}

TEST(QuantFiles, RowLengthThatDoesNotFitASmallBlock) {
  GgufWriter writer = test::random_llama_writer("tiny");
  writer.add_tensor("blk.1.odd.weight", {48}, static_cast<uint32_t>(TensorType::kQ5_1), 48,
                    [](std::vector<uint8_t>& out) { out.assign(48, 0); });
  const std::string message = parse_error(writer);
  EXPECT_NE(message.find("blk.1.odd.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("Q5_1"), std::string::npos) << message;
}

TEST(QuantFiles, UnsupportedTypesNameTensorAndType) {
  struct Case {
    uint32_t id;
    const char* name;
    uint64_t bytes;  // of 256 elements
  };
  // IQ2_XXS, IQ3_S and IQ1_S are real file types the engine does not read;
  // Q8_K exists only in memory.
  for (const Case& c : {Case{16, "IQ2_XXS", 66}, Case{21, "IQ3_S", 110}, Case{19, "IQ1_S", 50}, Case{15, "Q8_K", 292}}) {
    GgufWriter writer = test::random_llama_writer("tiny");
    writer.add_tensor("blk.0.attn_q.extra", {256}, c.id, c.bytes,
                      [n = c.bytes](std::vector<uint8_t>& out) { out.assign(n, 0); });
    const std::string message = parse_error(writer);
    EXPECT_NE(message.find("blk.0.attn_q.extra"), std::string::npos) << message;
    EXPECT_NE(message.find(c.name), std::string::npos) << message;
  }
}

TEST(QuantFiles, TheEngineRefusesARealTensorOfAnUnsupportedType) {
  // The whole model's ffn_down in IQ2_XXS: Engine::open reports the first such tensor.
  auto vocab_source = open_file_source(test::model_path("stories260K.gguf"));
  const GgufFile vocab = GgufFile::parse(*vocab_source);
  GeneratorOptions options;
  options.shape = shape_preset("tiny-k");
  options.type = TensorType::kQ4_K;
  GgufWriter good;
  build_random_model(vocab, options, good);
  const GgufFile parsed = GgufFile::parse(*make_memory_source(good.to_bytes(), "good.gguf"));
  // Rebuild the same file with one tensor's type id swapped for IQ2_XXS
  // (same block size, fewer bytes).
  GgufWriter bad;
  for (const auto& [key, value] : parsed.metadata()) bad.set_value(key, value);
  for (const GgufTensorInfo& t : parsed.tensors()) {
    const bool swap = t.name == "blk.1.ffn_down.weight";
    const uint32_t id = swap ? 16u : t.type_id;
    const uint64_t bytes = swap ? t.elements / 256 * 66 : t.bytes;
    bad.add_tensor(t.name, t.dims, id, bytes, [bytes](std::vector<uint8_t>& out) { out.assign(bytes, 0); });
  }
  try {
    Engine::open(make_memory_source(bad.to_bytes(), "bad.gguf"));
    FAIL() << "the model opened";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported) << message;
    EXPECT_NE(message.find("blk.1.ffn_down.weight"), std::string::npos) << message;
    EXPECT_NE(message.find("IQ2_XXS"), std::string::npos) << message;
  }
}

// A file whose matrices are of a type the engine reads but does not write
// (their blocks taken from llama.cpp's quantizations, tests/fixtures/quant)
// runs as the same file with those matrices as floats: the engine's
// dequantization of the blocks, itself llama.cpp's bit for bit. The integer
// kernels round the activations to 8 bits, the float ones do not, so the
// logits differ by that rounding only: measured 0.006 (IQ4_XS) to 0.10 (Q2_K,
// whose mins make each product a difference of larger terms) of their sd,
// where a block misread gives logits unrelated to the float file's (about
// 1.4 of the sd).
TEST(QuantFiles, FilesOfTypesTheEngineOnlyReadsRunAsTheirDequantizedWeights) {
  auto vocab_source = open_file_source(test::model_path("stories260K.gguf"));
  const GgufFile vocab = GgufFile::parse(*vocab_source);
  GeneratorOptions options;
  options.shape = shape_preset("tiny-k");
  options.type = TensorType::kF32;
  GgufWriter base;
  build_random_model(vocab, options, base);
  const std::vector<uint8_t> base_bytes = base.to_bytes();
  const GgufFile parsed = GgufFile::parse(*make_memory_source(base_bytes, "base.gguf"));
  for (const char* name : {"Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", "MXFP4"}) {
    SCOPED_TRACE(name);
    const test::GgmlOracle oracle = test::read_ggml_oracle(name);
    const TensorTypeTraits& traits = *tensor_type_traits(oracle.type_id);
    const size_t pool_blocks = oracle.bytes.size() / traits.block_bytes;
    GgufWriter quantized, floats;
    for (const auto& [key, value] : parsed.metadata()) {
      quantized.set_value(key, value);
      floats.set_value(key, value);
    }
    int converted = 0;
    for (const GgufTensorInfo& t : parsed.tensors()) {
      const bool convert = t.dims.size() == 2 && t.dims[0] % traits.block_elements == 0;
      if (!convert) {
        const std::vector<uint8_t> bytes(base_bytes.begin() + static_cast<std::ptrdiff_t>(t.offset),
                                         base_bytes.begin() + static_cast<std::ptrdiff_t>(t.offset + t.bytes));
        const auto copy = [bytes](std::vector<uint8_t>& out) { out = bytes; };
        quantized.add_tensor(t.name, t.dims, t.type_id, t.bytes, copy);
        floats.add_tensor(t.name, t.dims, t.type_id, t.bytes, copy);
        continue;
      }
      ++converted;
      // The oracle's blocks, each row starting elsewhere in the pool.
      const uint64_t row_blocks = t.dims[0] / traits.block_elements;
      std::vector<uint8_t> blocks(row_blocks * t.dims[1] * traits.block_bytes);
      for (uint64_t r = 0; r < t.dims[1]; ++r) {
        for (uint64_t b = 0; b < row_blocks; ++b) {
          const size_t from = static_cast<size_t>((r * 7 + b + static_cast<uint64_t>(converted)) % pool_blocks);
          std::memcpy(blocks.data() + (r * row_blocks + b) * traits.block_bytes,
                      oracle.bytes.data() + from * traits.block_bytes, traits.block_bytes);
        }
      }
      std::vector<float> values(t.elements);
      dequantize_row(traits.type, blocks.data(), values.data(), values.size());
      std::vector<uint8_t> value_bytes(values.size() * 4);
      std::memcpy(value_bytes.data(), values.data(), value_bytes.size());
      quantized.add_tensor(t.name, t.dims, oracle.type_id, blocks.size(),
                           [blocks](std::vector<uint8_t>& out) { out = blocks; });
      floats.add_tensor(t.name, t.dims, static_cast<uint32_t>(TensorType::kF32), value_bytes.size(),
                        [value_bytes](std::vector<uint8_t>& out) { out = value_bytes; });
    }
    EXPECT_GE(converted, 7) << "the attention and feed-forward matrices, and the head";
    auto quantized_engine = Engine::open(make_memory_source(quantized.to_bytes(), "quantized.gguf"));
    auto float_engine = Engine::open(make_memory_source(floats.to_bytes(), "floats.gguf"));
    const std::vector<int32_t> prompt = quantized_engine->tokenize("Once upon a time, there was a");
    const std::vector<float> q = quantized_engine->evaluate(prompt, true);
    const std::vector<float> f = float_engine->evaluate(prompt, true);
    ASSERT_EQ(q.size(), f.size());
    const size_t n_vocab = q.size() / prompt.size();
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      double mean = 0, var = 0, diff = 0;
      for (size_t v = 0; v < n_vocab; ++v) mean += f[p * n_vocab + v];
      mean /= static_cast<double>(n_vocab);
      for (size_t v = 0; v < n_vocab; ++v) {
        const double d = f[p * n_vocab + v] - mean, e = q[p * n_vocab + v] - f[p * n_vocab + v];
        var += d * d;
        diff += e * e;
      }
      ASSERT_GT(var, 0.0);
      worst = std::max(worst, std::sqrt(diff / var));
    }
    RecordProperty(std::string(name) + "_worst_rms_over_sd", std::to_string(worst));
    std::printf("%s: logits' RMS difference at most %.4f of their sd\n", name, worst);
    EXPECT_LT(worst, 0.25);
    EXPECT_GT(worst, 0.0) << "the integer kernels round the activations: some difference is expected";
  }
}

}  // namespace
}  // namespace sipllm

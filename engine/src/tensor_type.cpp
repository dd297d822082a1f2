#include "tensor_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "half.h"

namespace sipllm {
namespace {

constexpr TensorTypeTraits kF32Traits{"F32", 1, 4};
constexpr TensorTypeTraits kF16Traits{"F16", 1, 2};
constexpr TensorTypeTraits kBF16Traits{"BF16", 1, 2};
constexpr TensorTypeTraits kQ4_0Traits{"Q4_0", kQK4_0, sizeof(BlockQ4_0)};
constexpr TensorTypeTraits kQ8_0Traits{"Q8_0", kQK8_0, sizeof(BlockQ8_0)};

// Blocks are read with memcpy from possibly unaligned file buffers.
template <typename Block>
Block load_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

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

void dequantize_q8_0(const uint8_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n / kQK8_0; ++i) {
    const auto b = load_block<BlockQ8_0>(src + i * sizeof(BlockQ8_0));
    const float d = fp16_to_float(b.d);
    float* out = dst + i * kQK8_0;
    for (int j = 0; j < kQK8_0; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void quantize_q4_0(const float* src, uint8_t* dst, size_t n) {
  for (size_t i = 0; i < n / kQK4_0; ++i) {
    const float* x = src + i * kQK4_0;
    // The element of largest magnitude maps to -8, keeping its sign.
    float amax = 0, max = 0;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8;
    const float id = d != 0 ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = float_to_fp16(d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j] * id + 8.5f)));
      const auto hi = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f)));
      b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
    }
    std::memcpy(dst + i * sizeof b, &b, sizeof b);
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
    for (int j = 0; j < kQK8_0; ++j) b.qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
    std::memcpy(dst + i * sizeof b, &b, sizeof b);
  }
}

}  // namespace

const TensorTypeTraits* tensor_type_traits(uint32_t type_id) {
  switch (static_cast<TensorType>(type_id)) {
    case TensorType::kF32: return &kF32Traits;
    case TensorType::kF16: return &kF16Traits;
    case TensorType::kBF16: return &kBF16Traits;
    case TensorType::kQ4_0: return &kQ4_0Traits;
    case TensorType::kQ8_0: return &kQ8_0Traits;
  }
  return nullptr;
}

const TensorTypeTraits& tensor_type_traits(TensorType type) {
  return *tensor_type_traits(static_cast<uint32_t>(type));
}

std::string tensor_type_name(uint32_t type_id) {
  // ggml's names for the types this engine does not (yet) read, so errors can
  // say "Q4_K" rather than a number.
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
    case TensorType::kQ8_0: dequantize_q8_0(bytes, dst, n); return;
  }
}

}  // namespace sipllm

namespace sipllm {

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
    case TensorType::kQ8_0: quantize_q8_0(src, bytes, n); return;
  }
}

}  // namespace sipllm

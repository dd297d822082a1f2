// The on-disk truth about tensor element types: ggml type ids, block sizes and
// the byte layout of every block. Everything else in the engine learns these
// facts from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sipllm {

// Values are ggml's `enum ggml_type`, as stored in GGUF tensor infos.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kBF16 = 30,
};

struct TensorTypeTraits {
  const char* name;
  uint32_t block_elements;  // elements per block (1 for plain floats)
  uint32_t block_bytes;     // bytes per block
};

// nullptr when the engine does not support the type id.
const TensorTypeTraits* tensor_type_traits(uint32_t type_id);
const TensorTypeTraits& tensor_type_traits(TensorType type);
std::string tensor_type_name(uint32_t type_id);  // "Q8_0", or "type 12" if unknown

// Bytes taken by `elements` elements (must be a whole number of blocks).
inline uint64_t tensor_bytes(const TensorTypeTraits& traits, uint64_t elements) {
  return elements / traits.block_elements * traits.block_bytes;
}

// ---- Block layouts (byte-exact with ggml) ----------------------------------

constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale
  uint8_t qs[kQK4_0 / 2];  // element j in the low nibble of qs[j], j + 16 in the high
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// Expands `n` elements (a whole number of blocks) of `type` at `src` to floats.
void dequantize_row(TensorType type, const void* src, float* dst, size_t n);

// Encodes `n` floats (a whole number of blocks) as `type`, rounding as ggml's
// reference quantizers do. Writes tensor_bytes(traits, n) bytes.
void quantize_row(TensorType type, const float* src, void* dst, size_t n);

}  // namespace sipllm

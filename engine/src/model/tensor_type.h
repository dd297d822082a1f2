// The on-disk truth about tensor element types: ggml type ids, block sizes and
// the byte layout of every block. Everything else in the engine learns these
// facts from here. Layouts follow ggml's ggml-common.h byte for byte; the
// rounding of the quantizers follows ggml's reference quantizers
// (quantize_row_*_ref), so generated files look like real ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace sipllm {

// Values are ggml's `enum ggml_type`, as stored in GGUF tensor infos.
enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  // ggml's 8-bit activation type for K-quant dot products. It lives only in
  // memory: tensor_type_traits(uint32_t) refuses it, so no file can use it.
  kQ8_K = 15,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kBF16 = 30,
  kMXFP4 = 39,
  // Q5_0 and Q5_1 with each 5-bit value in a byte of its own (see
  // unpack_5bit_blocks), a form the loader may keep them in for faster
  // kernels. In memory only, like Q8_K; ids past ggml's.
  kQ5_0Unpacked = 64 + 6,
  kQ5_1Unpacked = 64 + 7,
};

// Type ids are below this (the in-memory ones included): tables of types
// are arrays indexed by id.
constexpr uint32_t kTensorTypeIdLimit = 72;

// Expands n elements (a whole number of blocks) to floats; encodes n floats.
using ToFloatFn = void (*)(const uint8_t* src, float* dst, size_t n);
using FromFloatFn = void (*)(const float* src, uint8_t* dst, size_t n);

// Everything the engine knows about a type, in one row of one table (see
// tensor_type.cpp), as ggml keeps one traits row per type. The kernels keep
// a parallel table (kernels/matmul.cpp).
struct TensorTypeTraits {
  TensorType type = TensorType::kF32;
  const char* name = nullptr;   // nullptr: no type has this id
  uint32_t block_elements = 0;  // elements per block (1 for plain floats)
  uint32_t block_bytes = 0;     // bytes per block
  bool in_files = false;        // a file may hold it (false: the engine's in-memory forms)
  // The scalar dequantisation: bit for bit ggml's dequantize_row_*, and the
  // reference every kernel is tested against.
  ToFloatFn to_float = nullptr;
  // ggml's reference quantizer, bit for bit (quantize_row_*_ref; IQ4_NL's
  // and IQ4_XS's without an importance matrix), so that generated files are
  // what llama-quantize writes.
  FromFloatFn from_float = nullptr;
  // What llama-quantize writes instead when rows are not a whole number of
  // blocks (its tensor_type_fallback; F16 when that does not fit either).
  TensorType row_fallback = TensorType::kF16;
  // llama.cpp's general.file_type of a file all of this type (its
  // llama_ftype); kNoFileType for the in-memory types.
  uint32_t llama_file_type = 0;
};
constexpr uint32_t kNoFileType = ~0u;

// The traits of a type id read from a file; nullptr when the engine cannot
// read that type from a file (unknown ids, ggml's other IQ and ternary
// types, and the in-memory types).
const TensorTypeTraits* tensor_type_traits(uint32_t type_id);
// The traits of any TensorType, the in-memory ones included.
const TensorTypeTraits& tensor_type_traits(TensorType type);
std::string tensor_type_name(uint32_t type_id);  // "Q8_0", or "type 99" if unknown

// Bytes taken by `elements` elements (must be a whole number of blocks).
inline uint64_t tensor_bytes(const TensorTypeTraits& traits, uint64_t elements) {
  return elements / traits.block_elements * traits.block_bytes;
}

// ---- Block layouts (byte-exact with ggml) ----------------------------------
//
// Scales marked fp16 are IEEE half floats (half.h). All multi-byte fields are
// little-endian; blocks have no padding, and a file gives no alignment
// guarantee beyond 2 bytes, so read them with memcpy (read_block).
template <typename Block>
Block read_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof b);
  return b;
}

// Element j of a 32-element block sits in the low nibble of qs[j] (j < 16) or
// the high nibble of qs[j - 16] (j >= 16): the "half split" of Q4_0, Q4_1,
// Q5_0 and Q5_1. In Q5_0 and Q5_1, bit j of the little-endian 32-bit qh is
// the fifth bit of element j.

constexpr int kQK4_0 = 32;
struct BlockQ4_0 {
  uint16_t d;              // fp16 scale; x = d * (q - 8)
  uint8_t qs[kQK4_0 / 2];  // q in 0..15
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");
static_assert(offsetof(BlockQ4_0, qs) == 2, "Q4_0 layout");

constexpr int kQK4_1 = 32;
struct BlockQ4_1 {
  uint16_t d;              // fp16 scale; x = d * q + m
  uint16_t m;              // fp16 minimum
  uint8_t qs[kQK4_1 / 2];  // q in 0..15
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");
static_assert(offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ4_1, qs) == 4, "Q4_1 layout");

constexpr int kQK5_0 = 32;
struct BlockQ5_0 {
  uint16_t d;              // fp16 scale; x = d * (q - 16)
  uint8_t qh[4];           // fifth bits, bit j for element j
  uint8_t qs[kQK5_0 / 2];  // low four bits
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");
static_assert(offsetof(BlockQ5_0, qh) == 2 && offsetof(BlockQ5_0, qs) == 6, "Q5_0 layout");

constexpr int kQK5_1 = 32;
struct BlockQ5_1 {
  uint16_t d;              // fp16 scale; x = d * q + m
  uint16_t m;              // fp16 minimum
  uint8_t qh[4];           // fifth bits, bit j for element j
  uint8_t qs[kQK5_1 / 2];  // low four bits
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");
static_assert(offsetof(BlockQ5_1, m) == 2 && offsetof(BlockQ5_1, qh) == 4 &&
                  offsetof(BlockQ5_1, qs) == 8,
              "Q5_1 layout");

constexpr int kQK8_0 = 32;
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale; x = d * q
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");
static_assert(offsetof(BlockQ8_0, qs) == 2, "Q8_0 layout");

// Q5_0 and Q5_1 unpacked: the same scale (and minimum), then element j's
// 5-bit q in byte q[j]. 12 bytes more per block, but a kernel reads the
// values as they are, where the packed form costs WebAssembly's SIMD, which
// has no instruction for it, more to spread the fifth bits than the dot
// product takes.
struct BlockQ5_0Unpacked {
  uint16_t d;  // fp16 scale; x = d * (q - 16)
  uint8_t q[kQK5_0];
};
static_assert(sizeof(BlockQ5_0Unpacked) == 34, "Q5_0 unpacked block is 34 bytes");

struct BlockQ5_1Unpacked {
  uint16_t d;  // fp16 scale; x = d * q + m
  uint16_t m;  // fp16 minimum
  uint8_t q[kQK5_1];
};
static_assert(sizeof(BlockQ5_1Unpacked) == 36, "Q5_1 unpacked block is 36 bytes");
static_assert(offsetof(BlockQ5_0Unpacked, q) == 2 && offsetof(BlockQ5_1Unpacked, m) == 2 &&
                  offsetof(BlockQ5_1Unpacked, q) == 4,
              "Q5_0 and Q5_1 unpacked layouts");

// ---- K-quants: super-blocks of 256 elements --------------------------------

constexpr int kQK_K = 256;
constexpr int kKScaleBytes = 12;

// Q4_K: eight sub-blocks of 32 with a 6-bit scale and a 6-bit min each;
// element x = d * scale_j * q - dmin * min_j, q in 0..15.
// The 256 elements are four chunks of 64: in chunk c, qs[32c + l] holds
// element 64c + l in its low nibble (sub-block 2c) and element 64c + 32 + l
// in its high nibble (sub-block 2c + 1).
struct BlockQ4_K {
  uint16_t d;                     // fp16 scale of the scales
  uint16_t dmin;                  // fp16 scale of the mins
  uint8_t scales[kKScaleBytes];   // packed 6-bit scales and mins: k_quant_scale_min
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");
static_assert(offsetof(BlockQ4_K, dmin) == 2 && offsetof(BlockQ4_K, scales) == 4 &&
                  offsetof(BlockQ4_K, qs) == 16,
              "Q4_K layout");

// Q5_K: Q4_K plus a fifth bit per element, q in 0..31. The nibbles are laid
// out as in Q4_K; bit 2c of qh[l] is the fifth bit of element 64c + l and bit
// 2c + 1 that of element 64c + 32 + l.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kKScaleBytes];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");
static_assert(offsetof(BlockQ5_K, scales) == 4 && offsetof(BlockQ5_K, qh) == 16 &&
                  offsetof(BlockQ5_K, qs) == 48,
              "Q5_K layout");

// Q6_K: sixteen sub-blocks of 16 with a signed 8-bit scale each; element
// e = d * scales[e / 16] * (q - 32), q in 0..63. The 256 elements are two
// halves of 128 using ql + 64h, qh + 32h; within half h, for l in 0..31:
//   element 128h +      l: low  nibble of ql[l],      bits 0-1 of qh[l]
//   element 128h + 32 + l: low  nibble of ql[l + 32], bits 2-3 of qh[l]
//   element 128h + 64 + l: high nibble of ql[l],      bits 4-5 of qh[l]
//   element 128h + 96 + l: high nibble of ql[l + 32], bits 6-7 of qh[l]
// (the two bits from qh are bits 4-5 of q).
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  uint16_t d;  // fp16 super-block scale
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");
static_assert(offsetof(BlockQ6_K, qh) == 128 && offsetof(BlockQ6_K, scales) == 192 &&
                  offsetof(BlockQ6_K, d) == 208,
              "Q6_K layout");

// Q2_K: sixteen sub-blocks of 16, each with a 4-bit scale (low nibble of
// scales[j]) and a 4-bit min (high nibble); element x = d * scale_j * q -
// dmin * min_j, q in 0..3. The 256 elements are two halves of 128 using
// qs + 32h; within half h, bits 2s-2s+1 of qs[l] (l in 0..31) are element
// 128h + 32s + l, of sub-block 8h + 2s + l / 16.
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  uint16_t d;     // fp16 scale of the scales
  uint16_t dmin;  // fp16 scale of the mins
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");
static_assert(offsetof(BlockQ2_K, qs) == 16 && offsetof(BlockQ2_K, d) == 80, "Q2_K layout");

// Q3_K: sixteen sub-blocks of 16 with a 6-bit scale each (q3_k_scale);
// element x = d * (scale_j - 32) * (q - 4), q in 0..7. The low two bits of
// q lie as Q2_K's do; the third is bit 4h + s of hmask[l] for the element
// 128h + 32s + l.
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[kKScaleBytes];
  uint16_t d;  // fp16 scale of the scales
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");
static_assert(offsetof(BlockQ3_K, qs) == 32 && offsetof(BlockQ3_K, scales) == 96 && offsetof(BlockQ3_K, d) == 108,
              "Q3_K layout");

// Q3_K's third bit of element e (0..255): bit e / 32 of hmask[e % 32].
inline int q3_k_high_bit(const uint8_t* hmask, int e) { return (hmask[e % 32] >> (e / 32)) & 1; }

// The 6-bit scale of sub-block j (0..15) of a Q3_K block: its low four bits
// are the low (j < 8) or high nibble of scales[j % 8], its top two bits
// bits 2(j / 4)..2(j / 4) + 1 of scales[8 + j % 4].
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int low = (scales[j % 8] >> (j < 8 ? 0 : 4)) & 0x0f;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | high << 4;
}

// The two low bits of element e (0..255) of a Q2_K or Q3_K block's qs.
inline int k_quant_low_2bits(const uint8_t* qs, int e) {
  return (qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3;
}

// IQ4_NL and IQ4_XS map each 4-bit index to one of sixteen non-uniform levels.
constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// IQ4_NL: x = d * kIq4Levels[index], the indices as Q4_0's values (the half split).
constexpr int kQK4_NL = 32;
struct BlockIQ4_NL {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block is 18 bytes");

// IQ4_XS: eight sub-blocks of 32 as IQ4_NL's blocks, with a 6-bit scale each
// instead of an fp16 one: x = d * (scale_j - 32) * kIq4Levels[index]. Scale j
// takes its low four bits from nibble j % 2 of scales_l[j / 2], its top two
// from bits 2j..2j + 1 of scales_h.
struct BlockIQ4_XS {
  uint16_t d;         // fp16 scale of the scales
  uint16_t scales_h;  // little-endian
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block is 136 bytes");
static_assert(offsetof(BlockIQ4_XS, scales_l) == 4 && offsetof(BlockIQ4_XS, qs) == 8, "IQ4_XS layout");
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0x0f) | ((b.scales_h >> (2 * j)) & 3) << 4;
}

// MXFP4 (OCP microscaling FP4): a shared power-of-two scale e (E8M0) and 4-bit
// E2M1 values, stored doubled as kMxfp4Levels; x = e8m0_half(e) * level. The
// values lie as Q4_0's (the half split).
constexpr int kQK_MXFP4 = 32;
constexpr int8_t kMxfp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK_MXFP4 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block is 17 bytes");

// Half of 2^(e - 127), as a float (exact; e = 0 and 1 give subnormals), which
// makes up for kMxfp4Levels being twice the E2M1 values.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Q8_K: activations quantized for K-quant dot products. A float (not fp16)
// scale, x = d * q, and bsums[i] = sum of qs[16i .. 16i + 15], which lets a
// dot product apply the weights' per-sub-block mins without touching qs.
struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "Q8_K block is 292 bytes");
static_assert(offsetof(BlockQ8_K, qs) == 4 && offsetof(BlockQ8_K, bsums) == 260, "Q8_K layout");

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K or Q5_K block.
// For j < 4 they are the low six bits of scales[j] and scales[j + 4]; for
// j >= 4 their low four bits are the two nibbles of scales[j + 4] and their
// top two bits the top two bits of scales[j - 4] and scales[j].
struct KScaleMin {
  uint8_t scale;
  uint8_t min;
};
inline KScaleMin k_quant_scale_min(const uint8_t* scales, int j) {
  if (j < 4) return {static_cast<uint8_t>(scales[j] & 63), static_cast<uint8_t>(scales[j + 4] & 63)};
  return {static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4)),
          static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

// The unpacked form of Q5_0 or Q5_1; any other type itself.
TensorType unpacked_type(TensorType type);

// Rewrites `n_blocks` blocks of Q5_0 or Q5_1 at `src` in their unpacked form
// at `dst`. The two may overlap when the unpacked blocks end no later than
// the packed ones (dst + n_blocks * unpacked size <= src + n_blocks * packed
// size): blocks are rewritten first to last, each read before it is
// written, so a tensor read into the end of its room unpacks in place.
void unpack_5bit_blocks(TensorType type, const uint8_t* src, uint8_t* dst, size_t n_blocks);

// Expands `n` elements (a whole number of blocks) of `type` at `src` to
// floats: the type's to_float.
void dequantize_row(TensorType type, const void* src, float* dst, size_t n);

// Encodes `n` floats (a whole number of blocks) as `type`, rounding as ggml's
// reference quantizers do. Writes tensor_bytes(traits, n) bytes. For Q8_K the
// bsums are filled in; the unpacked types are quantized as their packed form,
// then unpacked.
void quantize_row(TensorType type, const float* src, void* dst, size_t n);

}  // namespace sipllm

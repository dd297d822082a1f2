// Weights in 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, and Q5_0 and
// Q5_1 unpacked) times Q8_0 activations.
//
// Per block, the block's integer sum of weight values times activation
// values is exact: Q8_0's signed bytes are widened to int16 and multiplied
// with the int16 activations by i32x4.dot_i16x8 (where the 8-bit dot product
// is exact, simd::exact_byte_dot(), they go to simd::dot_u8i8x16_add as they
// are); the other formats' unsigned
// values (at most five bits) go to simd::dot_u6x32_add, 8-bit dot products
// where the platform has them. (Q4_0 and Q5_0 unpack q and subtract
// offset * sum(x_q) once: the same sum of (q - offset) * x_q, in fewer
// operations.)
// Then, for row r and position p, in block order:
//   acc += (float)isum * (d_w * d_x)                      (Q4_0, Q5_0, Q8_0)
//   acc += (float)isum * (d_w * d_x) + m_w * (d_x * sum_x) (Q4_1, Q5_1)
// Four rows share a tile, one per lane; a few positions share each unpacked
// block. Where a tile interleaves its rows' values (Q4_0, Q4_1 and the
// unpacked 5-bit types; see tile_rows()), the integer sums come out one row
// per lane; otherwise each row's lanes are summed and transposed. Natively,
// on a CPU with 512-bit VNNI, interleaved tiles take one block per register
// (simd::WideGroup) and four positions per register (simd::QuadAccumulator),
// Q8_0's four positions per register (simd::WholeBlockQuadAccumulator).
// With the exact 8-bit dot product in 128-bit registers (WebAssembly's
// relaxed SIMD where the engine gives it, VNNI without 512-bit tiles),
// interleaved tiles and Q8_0's take two quads of positions at once, a
// position per lane and each row's values broadcast (dot_rows4_quads). All
// give the same sums and the same float operations. The references compute
// exactly this, one element at a time.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "model/half.h"
#include "kernels/quant_dot.h"
#include "kernels/row_tiles.h"
#include "kernels/simd.h"

namespace sipllm {
namespace {

constexpr int kBlock = 32;

// ---- The formats: SIMD unpacking and its scalar reference ---------------------
//
// unpack() writes a block's 32 signed values as four i16x8 in element order
// (Q8_0), unpack_bytes() a block's 32 unsigned values as two u8x16 (the
// others); unpack_reference() the same values one by one, from the layout
// description in tensor_type.h.

// (A loop passes its mask, made once with simd::opaque: V8 builds a
// constant anew in every iteration, in three instructions.)
inline v128_t low_nibbles(v128_t bytes, v128_t mask = wasm_i8x16_splat(0x0f)) { return wasm_v128_and(bytes, mask); }
// A 16-bit shift then a mask: wasm has no 8-bit shift instruction, and
// engines emulate i8x16.shr_u with more than these two.
inline v128_t high_nibbles(v128_t bytes, v128_t mask = wasm_i8x16_splat(0x0f)) {
  return low_nibbles(wasm_u16x8_shr(bytes, 4), mask);
}

// Four rows' 4-bit values as a tile interleaves them (tile_rows()), for
// Q4_0 and Q4_1: vector v of u holds values 4v..4v+3 of each row (byte j of
// a row's qs holds values j and j + 16).
inline void unpack_nibbles_interleaved(const uint8_t* values, v128_t nibble_mask, v128_t u[8]) {
  for (int k = 0; k < 4; ++k) {
    const v128_t bytes = simd::load(values + 16 * k);
    u[k] = low_nibbles(bytes, nibble_mask);
    u[4 + k] = high_nibbles(bytes, nibble_mask);
  }
}

// kFifthBitBytes[b] has byte j equal to 16 where bit j of b is set, else 0:
// eight fifth bits become eight byte values with one table lookup.
constexpr std::array<uint64_t, 256> fifth_bit_bytes() {
  std::array<uint64_t, 256> table{};
  for (int b = 0; b < 256; ++b) {
    for (int j = 0; j < 8; ++j) {
      if ((b >> j) & 1) table[static_cast<size_t>(b)] |= uint64_t{16} << (8 * j);
    }
  }
  return table;
}
constexpr std::array<uint64_t, 256> kFifthBitBytes = fifth_bit_bytes();

// 16 in byte j where bit j + 8 * kFirstByte of qh is set (j < 16).
template <int kFirstByte>
v128_t fifth_bits(uint32_t qh) {
  return wasm_i64x2_make(static_cast<int64_t>(kFifthBitBytes[(qh >> (8 * kFirstByte)) & 0xff]),
                         static_cast<int64_t>(kFifthBitBytes[(qh >> (8 * kFirstByte + 8)) & 0xff]));
}

struct Q8_0Format {
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static constexpr size_t kValuesFrom = 0;  // tiles keep its blocks whole
  static constexpr bool kSignedBytes = true;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 0;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t*) { return 0; }
  static void unpack(const uint8_t* b, v128_t w[4]) {
    const uint8_t* qs = b + offsetof(BlockQ8_0, qs);
    w[0] = simd::load_i8x8_to_i16x8(qs);
    w[1] = simd::load_i8x8_to_i16x8(qs + 8);
    w[2] = simd::load_i8x8_to_i16x8(qs + 16);
    w[3] = simd::load_i8x8_to_i16x8(qs + 24);
  }
  // The same values as two i8x16, for a signed 8-bit dot product.
  static void unpack_signed_bytes(const uint8_t* b, v128_t w[2]) {
    w[0] = simd::load(b + offsetof(BlockQ8_0, qs));
    w[1] = simd::load(b + offsetof(BlockQ8_0, qs) + 16);
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ8_0>(b).d); }
  static float min_reference(const uint8_t*) { return 0.0f; }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<BlockQ8_0>(b);
    for (int j = 0; j < kBlock; ++j) q[j] = block.qs[j];
  }
};

struct Q4_0Format {
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static constexpr size_t kValuesFrom = offsetof(BlockQ4_0, qs);
  static constexpr int kMaxLevel = 15;
  static constexpr bool kSignedBytes = false;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 8;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t*) { return 0; }
  // The unsigned nibbles; the kernel subtracts 8 * sum(x) instead of 8 from
  // every value.
  static void unpack_bytes(const uint8_t* b, v128_t u[2]) {
    const v128_t bytes = simd::load(b + offsetof(BlockQ4_0, qs));
    u[0] = low_nibbles(bytes);
    u[1] = high_nibbles(bytes);
  }
  static void unpack_interleaved(const uint8_t* values, v128_t nibble_mask, v128_t u[8]) {
    unpack_nibbles_interleaved(values, nibble_mask, u);
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ4_0>(b).d); }
  static float min_reference(const uint8_t*) { return 0.0f; }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<BlockQ4_0>(b);
    for (int j = 0; j < kBlock / 2; ++j) {
      q[j] = static_cast<int16_t>((block.qs[j] & 0x0f) - 8);
      q[j + kBlock / 2] = static_cast<int16_t>((block.qs[j] >> 4) - 8);
    }
  }
};

struct Q4_1Format {
  static constexpr size_t kBytes = sizeof(BlockQ4_1);
  static constexpr size_t kValuesFrom = offsetof(BlockQ4_1, qs);
  static constexpr int kMaxLevel = 15;
  static constexpr bool kSignedBytes = false;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ4_1, m)); }
  static void unpack_bytes(const uint8_t* b, v128_t u[2]) {
    const v128_t bytes = simd::load(b + offsetof(BlockQ4_1, qs));
    u[0] = low_nibbles(bytes);
    u[1] = high_nibbles(bytes);
  }
  static void unpack_interleaved(const uint8_t* values, v128_t nibble_mask, v128_t u[8]) {
    unpack_nibbles_interleaved(values, nibble_mask, u);
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ4_1>(b).d); }
  static float min_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ4_1>(b).m); }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<BlockQ4_1>(b);
    for (int j = 0; j < kBlock / 2; ++j) {
      q[j] = static_cast<int16_t>(block.qs[j] & 0x0f);
      q[j + kBlock / 2] = static_cast<int16_t>(block.qs[j] >> 4);
    }
  }
};

uint32_t read_qh(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  return qh;
}

struct Q5_0Format {
  static constexpr size_t kBytes = sizeof(BlockQ5_0);
  static constexpr size_t kValuesFrom = 0;  // tiles keep its blocks whole (the loader unpacks it where it can)
  static constexpr bool kSignedBytes = false;
  static constexpr bool kHasMin = false;
  static constexpr int kOffset = 16;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t*) { return 0; }
  // The unsigned five-bit values; the kernel subtracts 16 * sum(x).
  static void unpack_bytes(const uint8_t* b, v128_t u[2]) {
    const uint32_t qh = read_qh(b + offsetof(BlockQ5_0, qh));
    const v128_t bytes = simd::load(b + offsetof(BlockQ5_0, qs));
    u[0] = wasm_v128_or(low_nibbles(bytes), fifth_bits<0>(qh));
    u[1] = wasm_v128_or(high_nibbles(bytes), fifth_bits<2>(qh));
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ5_0>(b).d); }
  static float min_reference(const uint8_t*) { return 0.0f; }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<BlockQ5_0>(b);
    const uint32_t qh = read_qh(block.qh);
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = (block.qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (block.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      q[j] = static_cast<int16_t>(lo - 16);
      q[j + kBlock / 2] = static_cast<int16_t>(hi - 16);
    }
  }
};

struct Q5_1Format {
  static constexpr size_t kBytes = sizeof(BlockQ5_1);
  static constexpr size_t kValuesFrom = 0;  // tiles keep its blocks whole (the loader unpacks it where it can)
  static constexpr bool kSignedBytes = false;
  static constexpr bool kHasMin = true;
  static constexpr int kOffset = 0;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ5_1, m)); }
  static void unpack_bytes(const uint8_t* b, v128_t u[2]) {
    const uint32_t qh = read_qh(b + offsetof(BlockQ5_1, qh));
    const v128_t bytes = simd::load(b + offsetof(BlockQ5_1, qs));
    u[0] = wasm_v128_or(low_nibbles(bytes), fifth_bits<0>(qh));
    u[1] = wasm_v128_or(high_nibbles(bytes), fifth_bits<2>(qh));
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ5_1>(b).d); }
  static float min_reference(const uint8_t* b) { return fp16_to_float(read_block<BlockQ5_1>(b).m); }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<BlockQ5_1>(b);
    const uint32_t qh = read_qh(block.qh);
    for (int j = 0; j < kBlock / 2; ++j) {
      q[j] = static_cast<int16_t>((block.qs[j] & 0x0f) | (((qh >> j) & 1u) << 4));
      q[j + kBlock / 2] = static_cast<int16_t>((block.qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    }
  }
};

// The unpacked forms of Q5_0 and Q5_1: the values as they lie, one per
// byte, after the scale (and Q5_1's minimum, the next two bytes).
template <typename Block, bool kMin>
struct Q5UnpackedFormat {
  static constexpr size_t kBytes = sizeof(Block);
  static constexpr size_t kValuesFrom = offsetof(Block, q);
  static constexpr int kMaxLevel = 31;
  static constexpr bool kSignedBytes = false;
  static constexpr bool kHasMin = kMin;
  static constexpr int kOffset = kMin ? 0 : 16;
  static uint16_t scale_bits(const uint8_t* b) { return simd::load_u16(b); }
  static uint16_t min_bits(const uint8_t* b) { return kMin ? simd::load_u16(b + 2) : 0; }
  static void unpack_bytes(const uint8_t* b, v128_t u[2]) {
    u[0] = simd::load(b + offsetof(Block, q));
    u[1] = simd::load(b + offsetof(Block, q) + 16);
  }
  static void unpack_interleaved(const uint8_t* values, v128_t /*nibble_mask*/, v128_t u[8]) {
    for (int k = 0; k < 8; ++k) u[k] = simd::load(values + 16 * k);
  }
  static float scale_reference(const uint8_t* b) { return fp16_to_float(read_block<Block>(b).d); }
  static float min_reference(const uint8_t* b) { return kMin ? fp16_to_float(simd::load_u16(b + 2)) : 0.0f; }
  static void unpack_reference(const uint8_t* b, int16_t q[kBlock]) {
    const auto block = read_block<Block>(b);
    for (int j = 0; j < kBlock; ++j) q[j] = static_cast<int16_t>(block.q[j] - kOffset);
  }
};
using Q5_0UnpackedFormat = Q5UnpackedFormat<BlockQ5_0Unpacked, false>;
using Q5_1UnpackedFormat = Q5UnpackedFormat<BlockQ5_1Unpacked, true>;

// Q5_0 or Q5_1 blocks unpacked with the kernels' own unpacking, a chunk of
// blocks at a time through a copy, so that in place works as
// unpack_5bit_blocks (the reference) promises.
template <class Packed, class Unpacked, class F>
void unpack_blocks(const uint8_t* src, uint8_t* dst, size_t n_blocks) {
  constexpr size_t kChunk = 32;
  uint8_t chunk[kChunk * sizeof(Packed)];
  for (size_t first = 0; first < n_blocks; first += kChunk) {
    const size_t n = std::min(kChunk, n_blocks - first);
    std::memcpy(chunk, src + first * sizeof(Packed), n * sizeof(Packed));
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* block = chunk + i * sizeof(Packed);
      uint8_t* out = dst + (first + i) * sizeof(Unpacked);
      v128_t u[2];
      F::unpack_bytes(block, u);
      std::memcpy(out, block, offsetof(Packed, qh));  // the scale, and the minimum if any
      simd::store(out + offsetof(Unpacked, q), u[0]);
      simd::store(out + offsetof(Unpacked, q) + 16, u[1]);
    }
  }
}

// ---- The SIMD kernel ---------------------------------------------------------

// acc plus one block's terms for four rows (lane i: row i) and a position:
// isum_i the rows' integer sums of values times activations, dw4 and mw4
// the rows' scales and minimums, dx and sx the activations' scale and sum.
template <class F>
v128_t add_block(v128_t acc, v128_t isum_i, v128_t dw4, v128_t mw4, float dx, int32_t sx_q) {
  if (F::kOffset != 0) isum_i = wasm_i32x4_sub(isum_i, wasm_i32x4_splat(F::kOffset * sx_q));
  const v128_t isum = wasm_f32x4_convert_i32x4(isum_i);
  v128_t term = wasm_f32x4_mul(isum, wasm_f32x4_mul(dw4, wasm_f32x4_splat(dx)));
  if (F::kHasMin) {
    const float sx = dx * static_cast<float>(sx_q);
    term = wasm_f32x4_add(term, wasm_f32x4_mul(mw4, wasm_f32x4_splat(sx)));
  }
  return wasm_f32x4_add(acc, term);
}

#if defined(SIPLLM_WIDE_GROUPS)
// dot_rows4 for four positions in quads (QuantizedActivations::q8_quad), in
// the quarters of 512-bit registers: a tile that interleaves its rows' values
// (simd::QuadAccumulator) or Q8_0's, which keeps blocks whole
// (simd::WholeBlockQuadAccumulator).
template <class F>
void dot_rows4_quad(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p0, v128_t acc[4]) {
  const auto [x8, xd, xs] = x.quad(p0);
  const simd::HalvesToFloats halves;
  std::conditional_t<F::kSignedBytes, simd::WholeBlockQuadAccumulator, simd::QuadAccumulator> sums;
  for (int b = 0; b < n_blocks; ++b) {
    if constexpr (F::kSignedBytes) {
      const uint8_t* block[4];
      const uint8_t* values[4];
      for (int i = 0; i < 4; ++i) {
        block[i] = tile.row[i] + static_cast<size_t>(b) * tile.block_stride;
        values[i] = block[i] + offsetof(BlockQ8_0, qs);
      }
      const v128_t dw4 = halves(F::scale_bits(block[0]), F::scale_bits(block[1]), F::scale_bits(block[2]),
                                F::scale_bits(block[3]));
      sums.add_block(values, x8 + 128 * b, dw4, xd + 4 * b, xs + 4 * b);
    } else {
      const uint8_t* group = tile.row[0] + static_cast<size_t>(b) * tile.block_stride;
      const v128_t dw4 = halves(group);
      const v128_t mw4 = F::kHasMin ? halves(group + 8) : wasm_f32x4_splat(0.0f);
      sums.template add_block<F::kMaxLevel == 15, F::kOffset, F::kHasMin>(group + 4 * F::kValuesFrom, x8 + 128 * b,
                                                                          dw4, mw4, xd + 4 * b, xs + 4 * b);
    }
  }
  sums.store(acc);
}
#endif

// A tile's scales (and minimums) as floats, four per block each (lane i:
// row i), converted once for all the tile's quads of positions: from an
// interleaved tile's groups, or from each row's whole blocks (Q8_0).
class TileScales {
 public:
  template <class F>
  static constexpr int floats_per_block() { return F::kHasMin ? 8 : 4; }

  // Those of `tile`, converted if it is not the last tile asked for.
  template <class F>
  const float* of(const RowTile& tile, int n_blocks) {
    if (tile.row[0] == tile_) return floats_.data();
    tile_ = tile.row[0];
    floats_.resize(static_cast<size_t>(floats_per_block<F>() * n_blocks));
    const simd::HalvesToFloats halves;
    for (int b = 0; b < n_blocks; ++b) {
      const size_t offset = static_cast<size_t>(b) * tile.block_stride;
      float* out = floats_.data() + floats_per_block<F>() * b;
      if constexpr (F::kValuesFrom != 0) {  // tiles that interleave their rows
        simd::store(out, halves(tile.row[0] + offset));
        if (F::kHasMin) simd::store(out + 4, halves(tile.row[0] + offset + 8));
      } else {
        static_assert(!F::kHasMin, "whole-block tiles here are Q8_0's");
        simd::store(out, halves(F::scale_bits(tile.row[0] + offset), F::scale_bits(tile.row[1] + offset),
                                F::scale_bits(tile.row[2] + offset), F::scale_bits(tile.row[3] + offset)));
      }
    }
    return floats_.data();
  }

 private:
  const uint8_t* tile_ = nullptr;
  std::vector<float> floats_;
};

// Where broadcast_group finds a block's first group of two rows (rows kRow
// and kRow + 1 of a tile) and how far on the next one lies: an interleaved
// tile's values (4-bit ones or unpacked 5-bit ones) hold the four rows'
// groups together, Q8_0's blocks each row's values whole.
template <class F>
struct GroupCursor {
  static constexpr size_t kStep = F::kSignedBytes ? 4 : 16;
  template <int kRow>
  static GroupCursor first(const RowTile& tile, size_t block_offset) {
    if constexpr (F::kSignedBytes) {
      return {{tile.row[kRow] + block_offset + offsetof(BlockQ8_0, qs),
               tile.row[kRow + 1] + block_offset + offsetof(BlockQ8_0, qs)}};
    } else {
      const uint8_t* values = tile.row[0] + block_offset + 4 * F::kValuesFrom;
      return {{values, values}};
    }
  }
  void next() {
    at[0] += kStep;
    if constexpr (F::kSignedBytes) at[1] += kStep;
  }
  const uint8_t* at[2];
};

// The group at `cursor` of two rows (rows kRow and kRow + 1 of a tile) in
// each half of a block, each row's four bytes in all four lanes, as unsigned
// bytes: w[half][i] holds values 16 * half + 4k.. of row kRow + i (group k).
// From an interleaved tile one load serves both rows; Q8_0's signed bytes are
// shifted to unsigned (x + 128: the sign bit flipped, as simd::
// shift_to_unsigned does, with sign_bits made once per tile).
template <class F, int kRow>
void broadcast_group(const GroupCursor<F>& cursor, v128_t nibble_mask, v128_t sign_bits, v128_t w[2][2]) {
  if constexpr (F::kSignedBytes) {
    for (int half = 0; half < 2; ++half) {
      for (int i = 0; i < 2; ++i) {
        w[half][i] = wasm_v128_xor(wasm_v128_load32_splat(cursor.at[i] + 16 * half), sign_bits);
      }
    }
  } else {
    v128_t u[2];
    if constexpr (F::kMaxLevel == 15) {
      const v128_t bytes = simd::load(cursor.at[0]);
      u[0] = low_nibbles(bytes, nibble_mask);
      u[1] = high_nibbles(bytes, nibble_mask);
    } else {
      u[0] = simd::load(cursor.at[0]);  // unpacked 5-bit values, as F::unpack_interleaved
      u[1] = simd::load(cursor.at[0] + 64);
    }
    for (int half = 0; half < 2; ++half) {
      w[half][0] = simd::splat_lane_i32<kRow>(u[half]);
      w[half][1] = simd::splat_lane_i32<kRow + 1>(u[half]);
    }
  }
}

// dot_rows4 for kQuads quads of positions (QuantizedActivations::q8_quad, a
// group's four values of the four positions in 16 bytes), the exact 8-bit dot
// product, in 128-bit registers: WebAssembly's, and natively VNNI's without
// 512-bit tiles. Two rows at a time: each row's four values of a group
// broadcast (broadcast_group) and multiplied with a quad's values of that
// group as they lie, lane j position j, so that each load of activations
// serves two rows and each broadcast kQuads quads. Every lane sums whole
// blocks of one row and position, so each (row, quad) sum starts at
// -offset * sum(x) (Q4_0, unpacked Q5_0; Q8_0's shifted weights: -128 * sum(x))
// and needs no reduction. Two quads per call: Chromium's Q4_0 tiles (x86,
// AVX-VNNI) ran about 12 % faster with one thread than one quad with the
// activations broadcast (32 shuffles per 32 dot products, 16 here).
// The four groups of a block stay a loop: unrolled, LLVM makes each sum's
// eight dot products one expression whose operands WebAssembly's operand
// order puts before them all, and V8, which keeps that order, spilled them
// (50 % slower). The rows' scales come converted to floats (TileScales),
// once per tile instead of once per quad: in WebAssembly a half float's
// conversion is ten instructions and a branch.
// Each pass keeps four chains of dependent dot products, fewer than the
// instruction's latency times its throughput asks for, yet in Chromium no
// shape with eight was faster: each half block in sums of its own, or one
// row per lane with each of eight positions' activations broadcast from
// memory (v128.load32_splat: a load, no shuffle) ran the Q4_0 tiles at the
// same speed or slower (unrolled, 30-50 % slower), and so did the latter
// without its per-block float work: the bound is the loop V8 makes.
template <class F, int kQuads>
void dot_rows4_quads(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p0, const float* scales,
                     v128_t acc[4 * kQuads]) {
  constexpr int kOffset = F::kSignedBytes ? 128 : F::kOffset;
  QuantizedActivations::Quad quads[kQuads];
  for (int q = 0; q < kQuads; ++q) quads[q] = x.quad(p0 + 4 * q);
  const v128_t nibble_mask = simd::opaque(wasm_i8x16_splat(0x0f));
  const v128_t sign_bits = simd::opaque(wasm_i8x16_splat(static_cast<int8_t>(0x80)));
  v128_t sums[4][kQuads];  // row i, quad q: lane j position j
  const auto two_rows = [&](auto first_row) {
    constexpr int kRow = decltype(first_row)::value;
    v128_t f[2][kQuads];
    for (auto& row : f) {
      for (v128_t& v : row) v = wasm_f32x4_splat(0.0f);
    }
    for (int b = 0; b < n_blocks; ++b) {
      const size_t block_offset = static_cast<size_t>(b) * tile.block_stride;
      v128_t s[2][kQuads];
      for (int q = 0; q < kQuads; ++q) {
        s[0][q] = s[1][q] = wasm_i32x4_mul(simd::load(quads[q].sums + 4 * b), wasm_i32x4_splat(-kOffset));
      }
      // Pointers stepped, not indices: Emscripten's LLVM does no loop
      // strength reduction, and V8 computed each address anew.
      auto cursor = GroupCursor<F>::template first<kRow>(tile, block_offset);
      const int8_t* xq[kQuads];
      for (int q = 0; q < kQuads; ++q) xq[q] = quads[q].q8 + 128 * b;
      const int8_t* const xq_end = xq[0] + 64;
      SIPLLM_NO_UNROLL
      for (; xq[0] != xq_end; cursor.next()) {
        v128_t w[2][2];
        broadcast_group<F, kRow>(cursor, nibble_mask, sign_bits, w);
        for (int half = 0; half < 2; ++half) {
          for (int q = 0; q < kQuads; ++q) {
            const v128_t xv = simd::load(xq[q] + 64 * half);
            s[0][q] = simd::dot_u8i8x16_add(w[half][0], xv, s[0][q]);
            s[1][q] = simd::dot_u8i8x16_add(w[half][1], xv, s[1][q]);
          }
        }
        for (const int8_t*& p : xq) p += 16;
      }
      const float* block_scales = scales + TileScales::floats_per_block<F>() * b;
      const v128_t dw4 = simd::load(block_scales);
      const v128_t dw[2] = {simd::splat_lane_i32<kRow>(dw4), simd::splat_lane_i32<kRow + 1>(dw4)};
      for (int q = 0; q < kQuads; ++q) {
        const v128_t dx = simd::load(quads[q].d + 4 * b);
        for (int i = 0; i < 2; ++i) {
          // As add_block: isum * (d_w * d_x), plus m_w * (d_x * sum_x).
          v128_t term = wasm_f32x4_mul(wasm_f32x4_convert_i32x4(s[i][q]), wasm_f32x4_mul(dw[i], dx));
          if constexpr (F::kHasMin) {
            const v128_t mw4 = simd::load(block_scales + 4);
            const v128_t mw = i == 0 ? simd::splat_lane_i32<kRow>(mw4) : simd::splat_lane_i32<kRow + 1>(mw4);
            const v128_t sx = wasm_f32x4_mul(dx, wasm_f32x4_convert_i32x4(simd::load(quads[q].sums + 4 * b)));
            term = wasm_f32x4_add(term, wasm_f32x4_mul(mw, sx));
          }
          f[i][q] = wasm_f32x4_add(f[i][q], term);
        }
      }
    }
    for (int q = 0; q < kQuads; ++q) {
      sums[kRow][q] = f[0][q];
      sums[kRow + 1][q] = f[1][q];
    }
  };
  two_rows(std::integral_constant<int, 0>{});
  two_rows(std::integral_constant<int, 2>{});
  for (int q = 0; q < kQuads; ++q) simd::transpose(sums[0][q], sums[1][q], sums[2][q], sums[3][q], acc + 4 * q);
}

// dot_rows4 for a tile whose rows' values are interleaved (RowTile::
// values_interleaved): each 8-bit dot product gives four rows' sums, one per
// lane, so the sums need no transposing.
template <class F, int kPositions, bool kExactByteDot>
void dot_rows4_interleaved(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p0,
                           v128_t acc[kPositions]) {
#if defined(SIPLLM_WIDE_GROUPS)
  if constexpr (kPositions == 4) {
    if (x.in_quads(p0)) return dot_rows4_quad<F>(tile, n_blocks, x, p0, acc);
  }
#endif
  const int8_t* x8s[kPositions];
  const float* xd[kPositions];
  const int32_t* xs[kPositions];
  for (int j = 0; j < kPositions; ++j) {
    x8s[j] = x.q8_row(p0 + j);
    xd[j] = x.d_row(p0 + j);
    xs[j] = x.sums_row(p0 + j);
    acc[j] = wasm_f32x4_splat(0.0f);
  }
  const simd::HalvesToFloats halves;
  [[maybe_unused]] const v128_t nibble_mask = simd::opaque(wasm_i8x16_splat(0x0f));  // low_nibbles says why
  for (int b = 0; b < n_blocks; ++b) {
    const uint8_t* group = tile.row[0] + static_cast<size_t>(b) * tile.block_stride;
    if (kPositions == 1) tile.prefetch_ahead(group, 4 * F::kBytes);
    // The four rows' scales, then their minimums.
    const v128_t dw4 = halves(group);
    const v128_t mw4 = F::kHasMin ? halves(group + 8) : wasm_f32x4_splat(0.0f);
#if defined(SIPLLM_WIDE_GROUPS)
    const simd::WideGroup wide = F::kMaxLevel == 15 ? simd::WideGroup::nibbles(group + 4 * F::kValuesFrom)
                                                    : simd::WideGroup::bytes(group + 4 * F::kValuesFrom);
    for (int j = 0; j < kPositions; ++j) {
      acc[j] = add_block<F>(acc[j], wide.dot(x8s[j] + b * kBlock), dw4, mw4, xd[j][b], xs[j][b]);
    }
#else
    // The exact dot product into int32 lanes for 4-bit values only: in
    // Chromium (x86, AVX-VNNI) it made Q4_0 and Q4_1 decode 8 % faster and
    // the 5-bit values 10 % slower than the int16 pairs.
    using Dots = simd::LaneDots<F::kMaxLevel, kExactByteDot && F::kMaxLevel <= 15>;
    v128_t u[8];  // u[v]: values 4v..4v+3 of each row
    F::unpack_interleaved(group + 4 * F::kValuesFrom, nibble_mask, u);
    for (int j = 0; j < kPositions; ++j) {
      const int8_t* x8 = x8s[j] + b * kBlock;
      const auto x4 = [&](int v) { return wasm_v128_load32_splat(x8 + 4 * v); };  // values 4v..4v+3
      v128_t isum = wasm_i32x4_splat(0);
      for (int first = 0; first < 8; first += 2 * Dots::kPairs) {
        Dots dots;
        for (int v = first; v < first + 2 * Dots::kPairs && v < 8; v += 2) {
          dots.add(u[v], x4(v), u[v + 1], x4(v + 1));
        }
        isum = first == 0 ? dots.sum() : wasm_i32x4_add(isum, dots.sum());
      }
      acc[j] = add_block<F>(acc[j], isum, dw4, mw4, xd[j][b], xs[j][b]);
    }
#endif
  }
}

// acc[j] lane i = row i's dot product with position p0 + j; kExactByteDot
// is simd::exact_byte_dot().
template <class F, int kPositions, bool kExactByteDot>
void dot_rows4(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p0, v128_t acc[kPositions]) {
  if constexpr (F::kValuesFrom != 0) {
    if (tile.values_interleaved) {
      return dot_rows4_interleaved<F, kPositions, kExactByteDot>(tile, n_blocks, x, p0, acc);
    }
  }
#if defined(SIPLLM_WIDE_GROUPS)
  if constexpr (kPositions == 4 && F::kSignedBytes) {
    if (x.in_quads(p0)) return dot_rows4_quad<F>(tile, n_blocks, x, p0, acc);
  }
#endif
  const int16_t* xq[kPositions];
  const int8_t* x8s[kPositions];
  const float* xd[kPositions];
  const int32_t* xs[kPositions];
  for (int j = 0; j < kPositions; ++j) {
    xq[j] = x.q_row(p0 + j);
    x8s[j] = x.q8_row(p0 + j);
    xd[j] = x.d_row(p0 + j);
    xs[j] = x.sums_row(p0 + j);
    acc[j] = wasm_f32x4_splat(0.0f);
  }
  const simd::HalvesToFloats halves;
  for (int b = 0; b < n_blocks; ++b) {
    const uint8_t* block[4];
    for (int i = 0; i < 4; ++i) block[i] = tile.row[i] + static_cast<size_t>(b) * tile.block_stride;
    if (kPositions == 1) {
      for (int i = 0; i < 4; ++i) tile.prefetch_ahead(block[i], F::kBytes);
    }
    // The four rows' fp16 scales (and minimums), converted together.
    const v128_t dw4 = halves(F::scale_bits(block[0]), F::scale_bits(block[1]), F::scale_bits(block[2]),
                              F::scale_bits(block[3]));
    v128_t mw4 = wasm_f32x4_splat(0.0f);
    if (F::kHasMin) {
      mw4 = halves(F::min_bits(block[0]), F::min_bits(block[1]), F::min_bits(block[2]), F::min_bits(block[3]));
    }
    // Position j's products with the four rows, s[i] for row i, to the float accumulator.
    const auto accumulate = [&](int j, const v128_t s[4]) {
      acc[j] = add_block<F>(acc[j], simd::transpose_sum_i32(s[0], s[1], s[2], s[3]), dw4, mw4, xd[j][b], xs[j][b]);
    };
    if constexpr (F::kSignedBytes && kExactByteDot && kPositions == 1) {
      // sum(w * x) = sum((w + 128) * x) - 128 * sum(x): for one position
      // the weights are shifted (one operation per 16) and the position's
      // sum, once per block, is where every row's lanes start (-32 * sum(x)
      // each), instead of the form below, whose sums of the weights take
      // two more dot products per row and block.
      const int8_t* x8 = x8s[0] + b * kBlock;
      const v128_t x0 = simd::load(x8), x1 = simd::load(x8 + 16);
      const v128_t start = wasm_i32x4_splat(-32 * xs[0][b]);
      v128_t s[4];
      for (int i = 0; i < 4; ++i) {
        v128_t w[2];
        F::unpack_signed_bytes(block[i], w);
        s[i] = simd::dot_u8i8x16_add(simd::shift_to_unsigned(w[1]), x1,
                                     simd::dot_u8i8x16_add(simd::shift_to_unsigned(w[0]), x0, start));
      }
      accumulate(0, s);
    } else if constexpr (F::kSignedBytes && kExactByteDot) {
      // sum(w * x) = sum(w * (x + 128)) - 128 * sum(w): each row's second
      // term, once per block, is where every position's sum starts.
      v128_t w[4][2], start[4];
      const v128_t c128 = wasm_i8x16_splat(static_cast<int8_t>(0x80));
      for (int i = 0; i < 4; ++i) {
        F::unpack_signed_bytes(block[i], w[i]);
        const v128_t sum128 = simd::dot_u8i8x16_add(c128, w[i][1], simd::dot_u8i8x16_add(c128, w[i][0], wasm_i32x4_splat(0)));
        start[i] = wasm_i32x4_sub(wasm_i32x4_splat(0), sum128);
      }
      for (int j = 0; j < kPositions; ++j) {
        const int8_t* x8 = x8s[j] + b * kBlock;
        const v128_t x0 = simd::shift_to_unsigned(simd::load(x8)), x1 = simd::shift_to_unsigned(simd::load(x8 + 16));
        v128_t s[4];
        for (int i = 0; i < 4; ++i) s[i] = simd::dot_u8i8x16_add(x1, w[i][1], simd::dot_u8i8x16_add(x0, w[i][0], start[i]));
        accumulate(j, s);
      }
    } else if constexpr (F::kSignedBytes) {
      v128_t w[4][4];
      for (int i = 0; i < 4; ++i) F::unpack(block[i], w[i]);
      for (int j = 0; j < kPositions; ++j) {
        const int16_t* xb = xq[j] + b * kBlock;
        const v128_t x0 = simd::load(xb), x1 = simd::load(xb + 8);
        const v128_t x2 = simd::load(xb + 16), x3 = simd::load(xb + 24);
        v128_t s[4];
        for (int i = 0; i < 4; ++i) {
          s[i] = wasm_i32x4_add(wasm_i32x4_add(wasm_i32x4_dot_i16x8(w[i][0], x0), wasm_i32x4_dot_i16x8(w[i][1], x1)),
                                wasm_i32x4_add(wasm_i32x4_dot_i16x8(w[i][2], x2), wasm_i32x4_dot_i16x8(w[i][3], x3)));
        }
        accumulate(j, s);
      }
    } else {
      // Unsigned values of at most five bits: 8-bit dot products where the
      // platform has them.
      v128_t u[4][2];
      for (int i = 0; i < 4; ++i) F::unpack_bytes(block[i], u[i]);
      for (int j = 0; j < kPositions; ++j) {
        const int8_t* x8 = x8s[j] + b * kBlock;
        const int16_t* x16 = xq[j] + b * kBlock;
        v128_t s[4];
        for (int i = 0; i < 4; ++i) s[i] = simd::dot_u6x32_add(u[i][0], u[i][1], x8, x16, wasm_i32x4_splat(0));
        accumulate(j, s);
      }
    }
  }
}

template <class F>
void rows_simd(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x, float* y,
               size_t y_stride) {
  const QuantizedActivations& q = *x.q;
  const int n_blocks = w.cols / kBlock;
  [[maybe_unused]] TileScales scales;
  simd::with_exact_byte_dot([&](auto exact) {
    constexpr bool kExact = decltype(exact)::value;
    // Where a tile's quads of positions take dot_rows4_quads: interleaved
    // tiles, and Q8_0's whole blocks.
    constexpr bool kQuadTiles = kExact && !simd::kWideGroups && (F::kValuesFrom != 0 || F::kSignedBytes);
    const auto dot_quads = [&](const RowTile& tile, int p, auto n_quads, v128_t* acc) {
      constexpr int kQuads = decltype(n_quads)::value;
      if constexpr (kQuadTiles) {
        if ((F::kValuesFrom == 0 || tile.values_interleaved) && q.in_quads(p + 4 * kQuads - 4)) {
          // The tile's scales are kept between its quads here: passed down
          // through dot_rows4, they made the one-position path (decode) 2.5 %
          // slower in Chromium.
          return dot_rows4_quads<F, kQuads>(tile, n_blocks, q, p, scales.of<F>(tile, n_blocks), acc);
        }
      }
      for (int j = 0; j < kQuads; ++j) dot_rows4<F, 4, kExact>(tile, n_blocks, q, p + 4 * j, acc + 4 * j);
    };
    for_each_row_tile<8, 4>(
        w, row_begin, row_end, x.n_positions, y, y_stride,
        [&](const RowTile& tile, int p, v128_t* acc) { dot_quads(tile, p, std::integral_constant<int, 2>{}, acc); },
        [&](const RowTile& tile, int p, v128_t* acc) { dot_quads(tile, p, std::integral_constant<int, 1>{}, acc); },
        [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4<F, 1, kExact>(tile, n_blocks, q, p, acc); });
  });
}

// ---- The scalar reference ------------------------------------------------------

template <class F>
void rows_reference(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x,
                    float* y, size_t y_stride) {
  const QuantizedActivations& q = *x.q;
  const int n_blocks = w.cols / kBlock;
  int16_t wq[kBlock];
  uint8_t scratch[F::kBytes];
  for (int r = row_begin; r < row_end; ++r) {
    for (int p = 0; p < x.n_positions; ++p) {
      float acc = 0.0f;
      for (int b = 0; b < n_blocks; ++b) {
        const uint8_t* block = matrix_block(w, r, b, scratch);
        F::unpack_reference(block, wq);
        const int16_t* xq = q.q_row(p) + b * kBlock;
        int32_t isum = 0;
        for (int i = 0; i < kBlock; ++i) isum += wq[i] * xq[i];
        const float dx = q.d_row(p)[b];
        float term = static_cast<float>(isum) * (F::scale_reference(block) * dx);
        if (F::kHasMin) term = term + F::min_reference(block) * (dx * static_cast<float>(q.sums_row(p)[b]));
        acc = acc + term;
      }
      y[static_cast<size_t>(p) * y_stride + static_cast<size_t>(r)] = acc;
    }
  }
}

}  // namespace

void unpack_5bit_blocks_simd(TensorType type, const uint8_t* src, uint8_t* dst, size_t n_blocks) {
  if (type == TensorType::kQ5_0) return unpack_blocks<BlockQ5_0, BlockQ5_0Unpacked, Q5_0Format>(src, dst, n_blocks);
  if (type == TensorType::kQ5_1) return unpack_blocks<BlockQ5_1, BlockQ5_1Unpacked, Q5_1Format>(src, dst, n_blocks);
  unpack_5bit_blocks(type, src, dst, n_blocks);  // which names the type it cannot unpack
}

const MatmulKernel kMatmulQ8_0{ActivationFormat::kQ8_0, rows_simd<Q8_0Format>, rows_reference<Q8_0Format>};
const MatmulKernel kMatmulQ4_0{ActivationFormat::kQ8_0, rows_simd<Q4_0Format>, rows_reference<Q4_0Format>,
                               Q4_0Format::kValuesFrom};
const MatmulKernel kMatmulQ4_1{ActivationFormat::kQ8_0, rows_simd<Q4_1Format>, rows_reference<Q4_1Format>,
                               Q4_1Format::kValuesFrom};
const MatmulKernel kMatmulQ5_0{ActivationFormat::kQ8_0, rows_simd<Q5_0Format>, rows_reference<Q5_0Format>};
const MatmulKernel kMatmulQ5_1{ActivationFormat::kQ8_0, rows_simd<Q5_1Format>, rows_reference<Q5_1Format>};
const MatmulKernel kMatmulQ5_0Unpacked{ActivationFormat::kQ8_0, rows_simd<Q5_0UnpackedFormat>,
                                       rows_reference<Q5_0UnpackedFormat>, Q5_0UnpackedFormat::kValuesFrom};
const MatmulKernel kMatmulQ5_1Unpacked{ActivationFormat::kQ8_0, rows_simd<Q5_1UnpackedFormat>,
                                       rows_reference<Q5_1UnpackedFormat>, Q5_1UnpackedFormat::kValuesFrom};

}  // namespace sipllm

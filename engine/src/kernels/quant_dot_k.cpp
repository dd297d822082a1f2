// K-quant weights (Q4_K, Q5_K, Q6_K: 256-element super-blocks with small
// integer sub-block scales) times Q8_K activations.
//
// Per super-block, everything up to one float expression is integer:
//   A = sum over sub-blocks j of scale_j * (sum of q * x_q over j)
//   B = sum over sub-blocks j of min_j * (sum of x_q over j)   (Q4_K, Q5_K)
// and for row r and position p, in block order:
//   acc += (float)A * (d * d_x) - (float)B * (dmin * d_x)      (Q4_K, Q5_K)
//   acc += (float)A * (d * d_x)                                 (Q6_K)
// A fits int32: |A| <= 8 * 63 * 32 * 31 * 127 (Q5_K) < 2^31, and for Q6_K
// 16 * 128 * 16 * 32 * 127 < 2^31. The SIMD path unpacks each block of four
// rows as described below; the references compute A and B one element at a
// time.
#include <cstddef>
#include <cstring>

#include "model/half.h"
#include "kernels/quant_dot.h"
#include "kernels/row_tiles.h"
#include "kernels/simd.h"

namespace sipllm {
namespace {

// ---- The formats ------------------------------------------------------------------
//
// Each format walks a super-block in chunks of 16 consecutive elements,
// handing each chunk to a sink as a u8x16 or i8x16 with its element offset
// and the index of its scale. Q4_K's and Q5_K's values are unsigned; Q6_K's
// are q - 32 as signed bytes, or q itself (in [0, 63]) when kUnsigned.
// decode_scales() gives the integer scales (and mins); the *_reference
// functions give the same values one element at a time, straight from the
// layout description in tensor_type.h.

struct Scales {
  alignas(16) int32_t scale[16];  // per 32 elements (Q4_K, Q5_K) or 16 (Q6_K)
  alignas(16) int32_t min[8];     // per 32 elements (Q4_K, Q5_K)
};

// The operations the formats' walks are written in: on one row's 16 bytes
// (OneRow), or, natively with 512-bit vectors, on the same 16 bytes of four
// rows side by side, row i in quarter i (FourRows, for decode below). Every
// operation is bytewise or a 16-bit shift whose masks keep bits from crossing
// bytes, so each quarter gets exactly what OneRow gives its row.
struct OneRow {
  using Vec = v128_t;
  using Blocks = const uint8_t*;
  static Vec load(Blocks block, size_t at) { return simd::load(block + at); }
  static Vec splat(int8_t v) { return wasm_i8x16_splat(v); }
  static Vec and_(Vec a, Vec b) { return wasm_v128_and(a, b); }
  static Vec or_(Vec a, Vec b) { return wasm_v128_or(a, b); }
  static Vec sub(Vec a, Vec b) { return wasm_i8x16_sub(a, b); }
  static Vec eq(Vec a, Vec b) { return wasm_i8x16_eq(a, b); }
  template <int kBits>
  static Vec shl16(Vec v) { return wasm_i16x8_shl(v, kBits); }
  template <int kBits>
  static Vec shr16(Vec v) { return wasm_u16x8_shr(v, kBits); }
};

#if defined(SIPLLM_WIDE_GROUPS)
struct FourRows {
  using Vec = __m512i;
  using Blocks = const uint8_t* const*;  // four rows' blocks
  static Vec load(Blocks block, size_t at) {
    const auto part = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(block[i] + at)); };
    __m512i v = _mm512_zextsi128_si512(part(0));
    v = _mm512_maskz_inserti32x4(0xffff, v, part(1), 1);
    v = _mm512_maskz_inserti32x4(0xffff, v, part(2), 2);
    return _mm512_maskz_inserti32x4(0xffff, v, part(3), 3);
  }
  static Vec splat(int8_t v) { return _mm512_set1_epi8(v); }
  static Vec and_(Vec a, Vec b) { return _mm512_and_si512(a, b); }
  static Vec or_(Vec a, Vec b) { return _mm512_or_si512(a, b); }
  static Vec sub(Vec a, Vec b) { return _mm512_sub_epi8(a, b); }
  static Vec eq(Vec a, Vec b) { return _mm512_movm_epi8(_mm512_cmpeq_epi8_mask(a, b)); }
  template <int kBits>
  static Vec shl16(Vec v) { return _mm512_slli_epi16(v, kBits); }
  template <int kBits>
  static Vec shr16(Vec v) { return _mm512_srli_epi16(v, kBits); }
};
#endif

// The high nibble of each byte: a 16-bit shift then a mask (wasm has no
// 8-bit shift instruction; engines emulate i8x16.shr_u with more than two).
template <class L = OneRow>
inline typename L::Vec high_nibbles(typename L::Vec bytes) {
  return L::and_(L::template shr16<4>(bytes), L::splat(0x0f));
}

// Bytes 0-7 of v widened to the int32 arrays out[0..8).
inline void widen_u8_to_i32(v128_t v, int32_t* out) {
  const v128_t w = wasm_u16x8_extend_low_u8x16(v);
  simd::store(out, wasm_u32x4_extend_low_u16x8(w));
  simd::store(out + 4, wasm_u32x4_extend_high_u16x8(w));
}

// The eight 6-bit scales and mins of Q4_K and Q5_K, all at once: as
// little-endian words u0, u1, u2 of the 12 bytes, scales 0-3 are the low six
// bits of u0's bytes, mins 0-3 those of u1's; scales 4-7 take their low four
// bits from u2's low nibbles and their top two from bits 6-7 of u0's bytes,
// mins 4-7 from u2's high nibbles and u1's bits 6-7.
inline void decode_k_scales(const uint8_t* packed, Scales* s) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t scales_lo = u[0] & 0x3f3f3f3fu;
  const uint32_t mins_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t scales_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t mins_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  widen_u8_to_i32(wasm_i32x4_make(static_cast<int32_t>(scales_lo), static_cast<int32_t>(scales_hi), 0, 0), s->scale);
  widen_u8_to_i32(wasm_i32x4_make(static_cast<int32_t>(mins_lo), static_cast<int32_t>(mins_hi), 0, 0), s->min);
}

inline void scale_mins_reference(const uint8_t* packed, Scales* s) {
  for (int j = 0; j < 8; ++j) {
    const KScaleMin sm = k_quant_scale_min(packed, j);
    s->scale[j] = sm.scale;
    s->min[j] = sm.min;
  }
}

struct Q4_KFormat {
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  static constexpr int kGroup = 32;  // elements per scale
  static constexpr bool kHasMin = true;
  static uint16_t d_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ4_K, d)); }
  static uint16_t dmin_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ4_K, dmin)); }
  static void decode_scales(const uint8_t* b, Scales* s) { decode_k_scales(b + offsetof(BlockQ4_K, scales), s); }
  template <bool kUnsigned = false, class L = OneRow, class Sink>
  static void for_each_chunk(typename L::Blocks b, Sink&& sink) {
    constexpr size_t qs = offsetof(BlockQ4_K, qs);
    const auto low = L::splat(0x0f);
    for (int c = 0; c < 4; ++c) {
      const auto v0 = L::load(b, qs + 32 * c), v1 = L::load(b, qs + 32 * c + 16);
      sink(64 * c, L::and_(v0, low), 2 * c);
      sink(64 * c + 16, L::and_(v1, low), 2 * c);
      sink(64 * c + 32, high_nibbles<L>(v0), 2 * c + 1);
      sink(64 * c + 48, high_nibbles<L>(v1), 2 * c + 1);
    }
  }
  static void unpack_reference(const uint8_t* p, int16_t q[kQK_K], Scales* s, float* d, float* dmin) {
    const auto b = read_block<BlockQ4_K>(p);
    *d = fp16_to_float(b.d);
    *dmin = fp16_to_float(b.dmin);
    scale_mins_reference(b.scales, s);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = static_cast<int16_t>(b.qs[32 * c + l] & 0x0f);
        q[64 * c + 32 + l] = static_cast<int16_t>(b.qs[32 * c + l] >> 4);
      }
    }
  }
};

struct Q5_KFormat {
  static constexpr size_t kBytes = sizeof(BlockQ5_K);
  static constexpr int kGroup = 32;
  static constexpr bool kHasMin = true;
  static uint16_t d_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ5_K, d)); }
  static uint16_t dmin_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ5_K, dmin)); }
  static void decode_scales(const uint8_t* b, Scales* s) { decode_k_scales(b + offsetof(BlockQ5_K, scales), s); }
  template <bool kUnsigned = false, class L = OneRow, class Sink>
  static void for_each_chunk(typename L::Blocks b, Sink&& sink) {
    constexpr size_t qs = offsetof(BlockQ5_K, qs), qh = offsetof(BlockQ5_K, qh);
    const auto h0 = L::load(b, qh), h1 = L::load(b, qh + 16);
    const auto low = L::splat(0x0f), sixteen = L::splat(16);
    // 16 where bit `bit` of the qh byte is set.
    auto fifth = [&](typename L::Vec h, int bit) {
      const auto mask = L::splat(static_cast<int8_t>(1 << bit));
      return L::and_(L::eq(L::and_(h, mask), mask), sixteen);
    };
    for (int c = 0; c < 4; ++c) {
      const auto v0 = L::load(b, qs + 32 * c), v1 = L::load(b, qs + 32 * c + 16);
      sink(64 * c, L::or_(L::and_(v0, low), fifth(h0, 2 * c)), 2 * c);
      sink(64 * c + 16, L::or_(L::and_(v1, low), fifth(h1, 2 * c)), 2 * c);
      sink(64 * c + 32, L::or_(high_nibbles<L>(v0), fifth(h0, 2 * c + 1)), 2 * c + 1);
      sink(64 * c + 48, L::or_(high_nibbles<L>(v1), fifth(h1, 2 * c + 1)), 2 * c + 1);
    }
  }
  static void unpack_reference(const uint8_t* p, int16_t q[kQK_K], Scales* s, float* d, float* dmin) {
    const auto b = read_block<BlockQ5_K>(p);
    *d = fp16_to_float(b.d);
    *dmin = fp16_to_float(b.dmin);
    scale_mins_reference(b.scales, s);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        q[64 * c + l] = static_cast<int16_t>((b.qs[32 * c + l] & 0x0f) | (((b.qh[l] >> (2 * c)) & 1) << 4));
        q[64 * c + 32 + l] = static_cast<int16_t>((b.qs[32 * c + l] >> 4) | (((b.qh[l] >> (2 * c + 1)) & 1) << 4));
      }
    }
  }
};

struct Q6_KFormat {
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static constexpr int kGroup = 16;
  static constexpr bool kHasMin = false;
  static uint16_t d_bits(const uint8_t* b) { return simd::load_u16(b + offsetof(BlockQ6_K, d)); }
  static uint16_t dmin_bits(const uint8_t*) { return 0; }
  static void decode_scales(const uint8_t* b, Scales* s) {
    const v128_t bytes = simd::load(b + offsetof(BlockQ6_K, scales));
    const v128_t lo = wasm_i16x8_extend_low_i8x16(bytes), hi = wasm_i16x8_extend_high_i8x16(bytes);
    simd::store(s->scale, wasm_i32x4_extend_low_i16x8(lo));
    simd::store(s->scale + 4, wasm_i32x4_extend_high_i16x8(lo));
    simd::store(s->scale + 8, wasm_i32x4_extend_low_i16x8(hi));
    simd::store(s->scale + 12, wasm_i32x4_extend_high_i16x8(hi));
  }
  template <bool kUnsigned = false, class L = OneRow, class Sink>
  static void for_each_chunk(typename L::Blocks b, Sink&& sink) {
    const auto low = L::splat(0x0f), thirty_two = L::splat(kUnsigned ? 0 : 32);
    for (int h = 0; h < 2; ++h) {
      const size_t ql = offsetof(BlockQ6_K, ql) + 64 * h;
      const size_t qh = offsetof(BlockQ6_K, qh) + 32 * h;
      for (int half = 0; half < 2; ++half) {  // l in [16 half, 16 half + 16)
        const auto a = L::load(b, ql + 16 * half), c = L::load(b, ql + 32 + 16 * half);
        const auto hb = L::load(b, qh + 16 * half);
        // Each pair of high bits moved to bits 4-5 (16-bit shifts are exact
        // here: the masks keep bits from crossing into the next byte).
        const auto bits01 = L::template shl16<4>(L::and_(hb, L::splat(0x03)));
        const auto bits23 = L::template shl16<2>(L::and_(hb, L::splat(0x0c)));
        const auto bits45 = L::and_(hb, L::splat(0x30));
        const auto bits67 = L::template shr16<2>(L::and_(hb, L::splat(static_cast<int8_t>(0xc0))));
        const int e = 128 * h + 16 * half;
        sink(e, L::sub(L::or_(L::and_(a, low), bits01), thirty_two), e / 16);
        sink(e + 32, L::sub(L::or_(L::and_(c, low), bits23), thirty_two), e / 16 + 2);
        sink(e + 64, L::sub(L::or_(high_nibbles<L>(a), bits45), thirty_two), e / 16 + 4);
        sink(e + 96, L::sub(L::or_(high_nibbles<L>(c), bits67), thirty_two), e / 16 + 6);
      }
    }
  }
  static void unpack_reference(const uint8_t* p, int16_t q[kQK_K], Scales* s, float* d, float* dmin) {
    const auto b = read_block<BlockQ6_K>(p);
    *d = fp16_to_float(b.d);
    *dmin = 0.0f;
    for (int g = 0; g < 16; ++g) s->scale[g] = b.scales[g];
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = b.ql[64 * h + l], hi = b.ql[64 * h + 32 + l], bits = b.qh[32 * h + l];
        q[128 * h + l] = static_cast<int16_t>(((lo & 0x0f) | ((bits & 3) << 4)) - 32);
        q[128 * h + 32 + l] = static_cast<int16_t>(((hi & 0x0f) | (((bits >> 2) & 3) << 4)) - 32);
        q[128 * h + 64 + l] = static_cast<int16_t>(((lo >> 4) | (((bits >> 4) & 3) << 4)) - 32);
        q[128 * h + 96 + l] = static_cast<int16_t>(((hi >> 4) | (((bits >> 6) & 3) << 4)) - 32);
      }
    }
  }
};

// Q6_K's values are signed bytes, the others' unsigned.
template <class F>
inline v128_t widen_low(v128_t v) {
  return F::kHasMin ? wasm_u16x8_extend_low_u8x16(v) : wasm_i16x8_extend_low_i8x16(v);
}
template <class F>
inline v128_t widen_high(v128_t v) {
  return F::kHasMin ? wasm_u16x8_extend_high_u8x16(v) : wasm_i16x8_extend_high_i8x16(v);
}

// ---- The SIMD kernel ---------------------------------------------------------
//
// One position (decode): each chunk's unsigned values are multiplied with the
// activations as they are unpacked (simd::dot_u6x32_add: 8-bit dot
// products where the platform has them; the exact one straight into int32
// lanes where simd::exact_byte_dot()), and each sum scaled by an int32
// multiply; Q6_K then takes away 32 * sum of scale * x. Several positions
// (prefill): each block of four rows is unpacked once and serves them all,
// as unsigned bytes multiplied the same way where there is an 8-bit dot
// product, else as int16 values already multiplied by their scale. All give
// the same integer A.

// Lanes of the result sum to A for one row of one block.
template <class F, bool kExactByteDot>
v128_t dot_a_fused(const uint8_t* block, const Scales& s, const int16_t* x16, const int8_t* x8,
                   const int32_t* xsums16) {
  v128_t a = wasm_i32x4_splat(0);
  // Each group's scale in all lanes, shuffled from the scales as
  // decode_scales() stored them. (Splatted from a 4-byte load each, in
  // Chromium the loads became 16-byte ones straddling two of those stores,
  // which the CPU could not forward: a quarter of Q4_K's decode time.)
  constexpr int kGroups = kQK_K / F::kGroup;
  v128_t scale[kGroups];
  for (int g = 0; g < kGroups; g += 4) simd::splat_each_lane_i32(simd::load(s.scale + g), scale + g);
  if constexpr (simd::kByteDot) {
    // A group's chunks (Q4_K's and Q5_K's two, which come one after the
    // other) add up their products before the group's one multiplication by
    // its scale: in Chromium (relaxed SIMD) Q4_K then decoded 1.5 times as
    // fast, and the pair's products added as int16 (simd::dot_u6x32_add)
    // cost fewer instructions again. Where the 8-bit dot product is exact
    // (simd::exact_byte_dot()), the products go straight into int32 lanes
    // instead: in Chromium (AVX-VNNI) Q4_K decoded 8-10 % faster with one
    // thread than through the int16 pairs.
    v128_t first_of_pair = wasm_i32x4_splat(0);
    F::template for_each_chunk<true>(block, [&](int e, v128_t q, int scale_index) {
      v128_t sum;
      if constexpr (F::kGroup == 32) {
        if (e % 32 == 0) {
          first_of_pair = q;
          return;
        }
        if constexpr (kExactByteDot) {
          sum = simd::dot_u8i8x16_add(q, simd::load(x8 + e),
                                      simd::dot_u8i8x16_add(first_of_pair, simd::load(x8 + e - 16), wasm_i32x4_splat(0)));
        } else {
          sum = simd::dot_u6x32_add(first_of_pair, q, x8 + e - 16, x16 + e - 16, wasm_i32x4_splat(0));
        }
      } else {
        static_assert(F::kGroup == 16, "a group is one chunk or two");
        if constexpr (kExactByteDot) {
          sum = simd::dot_u8i8x16_add(q, simd::load(x8 + e), wasm_i32x4_splat(0));
        } else {
          sum = simd::dot_u6x16_add(q, x8 + e, x16 + e, wasm_i32x4_splat(0));
        }
      }
      a = wasm_i32x4_add(a, wasm_i32x4_mul(sum, scale[scale_index]));
    });
  } else {
    // (Plain SIMD128 in Chromium: grouping the chunks measured 10 % slower.)
    F::template for_each_chunk<true>(block, [&](int e, v128_t q, int scale_index) {
      const v128_t sum = simd::dot_u7x16_add(q, x8 + e, x16 + e, wasm_i32x4_splat(0));
      a = wasm_i32x4_add(a, wasm_i32x4_mul(sum, scale[scale_index]));
    });
  }
  if (!F::kHasMin) {  // Q6_K: the values were q, not q - 32
    v128_t offset = wasm_i32x4_splat(0);
    for (int g = 0; g < 16; g += 4) {
      offset = wasm_i32x4_add(offset, wasm_i32x4_mul(simd::load(s.scale + g), simd::load(xsums16 + g)));
    }
    a = wasm_i32x4_sub(a, wasm_i32x4_shl(offset, 5));
  }
  return a;
}

template <class F>
void unpack_scaled(const uint8_t* block, const Scales& s, int16_t* out) {
  F::for_each_chunk(block, [&](int e, v128_t q, int scale_index) {
    const v128_t scale = wasm_i16x8_splat(static_cast<int16_t>(s.scale[scale_index]));
    simd::store(out + e, wasm_i16x8_mul(widen_low<F>(q), scale));
    simd::store(out + e + 8, wasm_i16x8_mul(widen_high<F>(q), scale));
  });
}

// A for four rows (lanes of a[i][j] sum to row i's A) and two positions: each
// loaded weight vector serves both positions, each activation vector all rows.
// (Unused where simd::kByteDot.)
[[maybe_unused]] inline void dot_a_scaled_2(const int16_t (*w)[kQK_K], const int16_t* x0, const int16_t* x1, v128_t a[2]) {
  v128_t acc[4][2];
  for (int i = 0; i < 4; ++i) acc[i][0] = acc[i][1] = wasm_i32x4_splat(0);
  for (int e = 0; e < kQK_K; e += 8) {
    const v128_t xv0 = simd::load(x0 + e), xv1 = simd::load(x1 + e);
    for (int i = 0; i < 4; ++i) {
      const v128_t wv = simd::load(w[i] + e);
      acc[i][0] = wasm_i32x4_add(acc[i][0], wasm_i32x4_dot_i16x8(wv, xv0));
      acc[i][1] = wasm_i32x4_add(acc[i][1], wasm_i32x4_dot_i16x8(wv, xv1));
    }
  }
  a[0] = simd::transpose_sum_i32(acc[0][0], acc[1][0], acc[2][0], acc[3][0]);
  a[1] = simd::transpose_sum_i32(acc[0][1], acc[1][1], acc[2][1], acc[3][1]);
}

// Lanes sum to B (the mins against the activations' sums of 32).
inline v128_t dot_b(const Scales& s, const int32_t* xsums) {
  return wasm_i32x4_add(wasm_i32x4_mul(simd::load(s.min), simd::load(xsums)),
                        wasm_i32x4_mul(simd::load(s.min + 4), simd::load(xsums + 4)));
}

// The four rows' fp16 values at `bits`, converted together.
template <uint16_t (*kBits)(const uint8_t*)>
inline v128_t four_halves(const uint8_t* const block[4], const simd::HalvesToFloats& halves) {
  return halves(kBits(block[0]), kBits(block[1]), kBits(block[2]), kBits(block[3]));
}

// The four rows' scales of a block: d and dmin in lane i are row i's.
template <class F>
struct BlockScales {
  v128_t d, dmin;
  BlockScales(const uint8_t* const block[4], const simd::HalvesToFloats& halves)
      : d(four_halves<F::d_bits>(block, halves)),
        dmin(F::kHasMin ? four_halves<F::dmin_bits>(block, halves) : wasm_f32x4_splat(0.0f)) {}
};

// The block's term for one position added to acc: a4's and b4's lane i are
// row i's A and B.
template <class F>
inline v128_t accumulate_block(v128_t acc, v128_t a4, v128_t b4, const BlockScales<F>& scales, float d_x) {
  const v128_t dx = wasm_f32x4_splat(d_x);
  v128_t term = wasm_f32x4_mul(wasm_f32x4_convert_i32x4(a4), wasm_f32x4_mul(scales.d, dx));
  if (F::kHasMin) {
    term = wasm_f32x4_sub(term, wasm_f32x4_mul(wasm_f32x4_convert_i32x4(b4), wasm_f32x4_mul(scales.dmin, dx)));
  }
  return wasm_f32x4_add(acc, term);
}

// A for four rows and kPositions positions (lane i of a[j]: row i's A at
// position p0 + j) from the rows' unpacked unsigned values q (Q6_K's q, not
// q - 32), each position multiplying them as dot_a_fused does: a group's sum
// of products, times its scale.
template <class F, int kPositions>
void dot_a_bytes(const uint8_t (*q)[kQK_K], const Scales s[4], const QuantizedActivations& x, int p0, int b,
                 v128_t a[kPositions]) {
  const size_t e0 = static_cast<size_t>(b) * kQK_K;
  v128_t rows[kPositions][4];
  for (int i = 0; i < 4; ++i) {
    v128_t row_a[kPositions];
    for (int j = 0; j < kPositions; ++j) row_a[j] = wasm_i32x4_splat(0);
    for (int g = 0; g < kQK_K; g += F::kGroup) {
      v128_t sum[kPositions];
      for (int j = 0; j < kPositions; ++j) sum[j] = wasm_i32x4_splat(0);
      if constexpr (F::kGroup == 32) {
        const v128_t w0 = simd::load(q[i] + g), w1 = simd::load(q[i] + g + 16);
        for (int j = 0; j < kPositions; ++j) {
          sum[j] = simd::dot_u6x32_add(w0, w1, x.q8_row(p0 + j) + e0 + g, x.q_row(p0 + j) + e0 + g, sum[j]);
        }
      } else {
        const v128_t w = simd::load(q[i] + g);
        for (int j = 0; j < kPositions; ++j) {
          sum[j] = simd::dot_u6x16_add(w, x.q8_row(p0 + j) + e0 + g, x.q_row(p0 + j) + e0 + g, sum[j]);
        }
      }
      const v128_t scale = wasm_i32x4_splat(s[i].scale[g / F::kGroup]);
      for (int j = 0; j < kPositions; ++j) row_a[j] = wasm_i32x4_add(row_a[j], wasm_i32x4_mul(sum[j], scale));
    }
    for (int j = 0; j < kPositions; ++j) {
      if (!F::kHasMin) {  // Q6_K: the values were q, not q - 32
        const int32_t* xs16 = x.sums16_row(p0 + j) + b * (kQK_K / 16);
        v128_t offset = wasm_i32x4_splat(0);
        for (int g = 0; g < 16; g += 4) {
          offset = wasm_i32x4_add(offset, wasm_i32x4_mul(simd::load(s[i].scale + g), simd::load(xs16 + g)));
        }
        row_a[j] = wasm_i32x4_sub(row_a[j], wasm_i32x4_shl(offset, 5));
      }
      rows[j][i] = row_a[j];
    }
  }
  for (int j = 0; j < kPositions; ++j) a[j] = simd::transpose_sum_i32(rows[j][0], rows[j][1], rows[j][2], rows[j][3]);
}

#if defined(SIPLLM_WIDE_GROUPS)
// dot_a_bytes for four positions in 512-bit registers (natively, with 512-bit
// VNNI): each 128-bit quarter holds one position's 16 activations and a row's
// 16 weights broadcast to all four, so a row's group of 32 takes two
// vpdpbusd where the 128-bit form takes eight, and a group's activations,
// gathered once, serve the four rows. Its integer sums are exact, so equal
// to dot_a_bytes' bit for bit.
template <class F>
void dot_a_bytes_wide(const uint8_t (*q)[kQK_K], const Scales s[4], const QuantizedActivations& x, int p0, int b,
                      v128_t a[4]) {
  const size_t e0 = static_cast<size_t>(b) * kQK_K;
  const int8_t* xr[4];
  for (int j = 0; j < 4; ++j) xr[j] = x.q8_row(p0 + j) + e0;
  const auto load = [](const void* at) { return _mm_loadu_si128(static_cast<const __m128i*>(at)); };
  __m512i row_a[4];
  for (int i = 0; i < 4; ++i) row_a[i] = _mm512_setzero_si512();
  for (int g = 0; g < kQK_K; g += F::kGroup) {
    __m512i sum[4];
    for (int i = 0; i < 4; ++i) sum[i] = _mm512_setzero_si512();
    for (int c = g; c < g + F::kGroup; c += 16) {
      __m512i xs = _mm512_zextsi128_si512(load(xr[0] + c));
      xs = _mm512_maskz_inserti32x4(0xffff, xs, load(xr[1] + c), 1);
      xs = _mm512_maskz_inserti32x4(0xffff, xs, load(xr[2] + c), 2);
      xs = _mm512_maskz_inserti32x4(0xffff, xs, load(xr[3] + c), 3);
      for (int i = 0; i < 4; ++i) {
        sum[i] = _mm512_dpbusd_epi32(sum[i], _mm512_maskz_broadcast_i32x4(0xffff, load(q[i] + c)), xs);
      }
    }
    for (int i = 0; i < 4; ++i) {
      row_a[i] = _mm512_add_epi32(row_a[i], _mm512_mullo_epi32(sum[i], _mm512_set1_epi32(s[i].scale[g / F::kGroup])));
    }
  }
  v128_t rows[4][4];
  for (int i = 0; i < 4; ++i) {
    rows[0][i] = simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, row_a[i], 0));
    rows[1][i] = simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, row_a[i], 1));
    rows[2][i] = simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, row_a[i], 2));
    rows[3][i] = simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, row_a[i], 3));
    if (!F::kHasMin) {  // Q6_K: the values were q, not q - 32
      for (int j = 0; j < 4; ++j) {
        const int32_t* xs16 = x.sums16_row(p0 + j) + b * (kQK_K / 16);
        v128_t offset = wasm_i32x4_splat(0);
        for (int g = 0; g < 16; g += 4) {
          offset = wasm_i32x4_add(offset, wasm_i32x4_mul(simd::load(s[i].scale + g), simd::load(xs16 + g)));
        }
        rows[j][i] = wasm_i32x4_sub(rows[j][i], wasm_i32x4_shl(offset, 5));
      }
    }
  }
  for (int j = 0; j < 4; ++j) a[j] = simd::transpose_sum_i32(rows[j][0], rows[j][1], rows[j][2], rows[j][3]);
}
#endif

// Several positions (prefill), a multiple of four; each block is unpacked
// once for all of them. With an 8-bit dot product (simd::kByteDot) the values
// stay unsigned bytes, for dot_a_bytes (dot_a_bytes_wide natively), four
// positions at a time: fewer operations. Without one they are widened to int16 already multiplied by
// their scale (|q * scale| <= 4096 fits), and positions take plain dot
// products of those in pairs.
template <class F, int kPositions>
void dot_rows4(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p0, v128_t acc[kPositions]) {
  static_assert(kPositions % 4 == 0, "positions go in fours (and pairs)");
  for (int j = 0; j < kPositions; ++j) acc[j] = wasm_f32x4_splat(0.0f);
  const simd::HalvesToFloats halves;
  Scales s[4];
  for (int b = 0; b < n_blocks; ++b) {
    const uint8_t* block[4];
    for (int i = 0; i < 4; ++i) {
      block[i] = tile.row[i] + static_cast<size_t>(b) * tile.block_stride;
      F::decode_scales(block[i], &s[i]);
    }
    v128_t a4[kPositions];
    if constexpr (simd::kByteDot) {
      alignas(16) uint8_t q[4][kQK_K];
      for (int i = 0; i < 4; ++i) {
        F::template for_each_chunk<true>(block[i], [&](int e, v128_t v, int) { simd::store(q[i] + e, v); });
      }
      for (int j = 0; j < kPositions; j += 4) {
#if defined(SIPLLM_WIDE_GROUPS)
        dot_a_bytes_wide<F>(q, s, x, p0 + j, b, a4 + j);
#else
        dot_a_bytes<F, 4>(q, s, x, p0 + j, b, a4 + j);
#endif
      }
    } else {
      alignas(16) int16_t scaled[4][kQK_K];
      for (int i = 0; i < 4; ++i) unpack_scaled<F>(block[i], s[i], scaled[i]);
      for (int j = 0; j + 1 < kPositions; j += 2) {
        dot_a_scaled_2(scaled, x.q_row(p0 + j) + b * kQK_K, x.q_row(p0 + j + 1) + b * kQK_K, &a4[j]);
      }
    }
    const BlockScales<F> scales(block, halves);
    for (int j = 0; j < kPositions; ++j) {
      v128_t b4 = wasm_i32x4_splat(0);
      if (F::kHasMin) {
        const int32_t* xs = x.sums_row(p0 + j) + b * (kQK_K / 32);
        b4 = simd::transpose_sum_i32(dot_b(s[0], xs), dot_b(s[1], xs), dot_b(s[2], xs), dot_b(s[3], xs));
      }
      acc[j] = accumulate_block<F>(acc[j], a4[j], b4, scales, x.d_row(p0 + j)[b]);
    }
  }
}

#if defined(SIPLLM_WIDE_GROUPS)
// One position (decode) natively with 512-bit VNNI: a block of four rows at
// once, row i's chunk of 16 values in quarter i (FourRows) and the
// position's 16 activations broadcast to all four, so one vpdpbusd takes the
// four rows' chunk where the 128-bit form takes four, and one multiplication
// applies the four rows' scales of a group. The scales are decoded for the
// four rows together and shuffled into place per group. Integer sums, exact:
// the same A and B as dot_a_fused and dot_b, bit for bit.

// Lane i: the sum of quarter i's four lanes.
inline v128_t sums_of_quarters(__m512i v) {
  v = _mm512_add_epi32(v, _mm512_maskz_shuffle_epi32(0xffff, v, _MM_PERM_CDAB));
  v = _mm512_add_epi32(v, _mm512_maskz_shuffle_epi32(0xffff, v, _MM_PERM_BADC));
  const __m512i firsts = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i gathered = _mm512_maskz_permutexvar_epi32(0xffff, firsts, v);
  return simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, gathered, 0));
}

// Q4_K's and Q5_K's scales and mins, bytes 4-15 of each block, for four rows:
// quarter i holds row i's eight scales in bytes 0-7 and eight mins in bytes
// 8-15 (decode_k_scales' words scales_lo, scales_hi, mins_lo, mins_hi).
inline __m512i k_scales_four(const uint8_t* const block[4]) {
  const __m512i raw = FourRows::load(block, 0);  // lane 0: d, dmin; lanes 1-3: u0, u1, u2
  const __m512i u01 = _mm512_maskz_shuffle_epi32(0xffff, raw, _MM_PERM_CCBB);  // u0, u0, u1, u1
  const __m512i u2 = _mm512_maskz_srlv_epi32(0xffff, _mm512_maskz_shuffle_epi32(0xffff, raw, _MM_PERM_DDDD),
                                              _mm512_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4));
  const __m512i lo = _mm512_and_si512(u01, _mm512_set1_epi32(0x3f3f3f3f));
  const __m512i top_bits = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u01, 6), _mm512_set1_epi32(0x03030303));
  const __m512i hi = _mm512_or_si512(_mm512_and_si512(u2, _mm512_set1_epi32(0x0f0f0f0f)),
                                     _mm512_maskz_slli_epi32(0xffff, top_bits, 4));
  return _mm512_mask_blend_epi32(0xaaaa, lo, hi);
}

// Row i's A in lane i of *a4, its B in lane i of *b4 (zero for Q6_K, which has no mins).
template <class F>
void dot_ab_four_rows(const uint8_t* const block[4], const int8_t* x8, const int32_t* xsums16, const int32_t* xsums,
                      v128_t* a4, v128_t* b4) {
  __m512i acc = _mm512_setzero_si512();
  __m512i scales;  // per group g: quarter i's lanes hold row i's scale
  if constexpr (F::kHasMin) {
    scales = k_scales_four(block);
  } else {
    scales = FourRows::load(block, offsetof(BlockQ6_K, scales));  // signed bytes
  }
  const auto scale_of_group = [&](int g) {
    // Byte g of each quarter into each of its int32 lanes: zero-extended
    // (Q4_K's and Q5_K's unsigned scales), or put in the top byte and
    // shifted down with its sign (Q6_K's signed ones).
    if constexpr (F::kHasMin) {
      return _mm512_shuffle_epi8(scales, _mm512_set1_epi32(static_cast<int>(0x80808000u | g)));
    } else {
      const __m512i top = _mm512_shuffle_epi8(scales, _mm512_set1_epi32(static_cast<int>(0x00808080u | (g << 24))));
      return _mm512_maskz_srai_epi32(0xffff, top, 24);
    }
  };
  const auto x_at = [&](int e) {  // activations e..e+15 in every quarter
    return _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8 + e)));
  };
  __m512i first_of_pair = _mm512_setzero_si512();
  F::template for_each_chunk<true, FourRows>(block, [&](int e, __m512i q, int scale_index) {
    __m512i sum;
    if constexpr (F::kGroup == 32) {
      if (e % 32 == 0) {
        first_of_pair = q;
        return;
      }
      sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), first_of_pair, x_at(e - 16)), q, x_at(e));
    } else {
      sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, x_at(e));
    }
    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(sum, scale_of_group(scale_index)));
  });
  const auto broadcast_i16 = [](const int32_t* v) {  // eight sums of activations as int16 (|sum| <= 32 * 128)
    return _mm512_maskz_broadcast_i32x4(0xffff, _mm_packs_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v)),
                                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + 4))));
  };
  if constexpr (F::kHasMin) {
    const __m128i mins_as_i16 =
        _mm_setr_epi8(8, -128, 9, -128, 10, -128, 11, -128, 12, -128, 13, -128, 14, -128, 15, -128);
    const __m512i mins = _mm512_shuffle_epi8(scales, _mm512_maskz_broadcast_i32x4(0xffff, mins_as_i16));
    *b4 = sums_of_quarters(_mm512_madd_epi16(mins, broadcast_i16(xsums)));
  } else {  // Q6_K: the values were q, not q - 32
    const __m512i low = _mm512_srai_epi16(_mm512_unpacklo_epi8(_mm512_setzero_si512(), scales), 8);   // scales 0-7
    const __m512i high = _mm512_srai_epi16(_mm512_unpackhi_epi8(_mm512_setzero_si512(), scales), 8);  // 8-15
    const __m512i offset = _mm512_add_epi32(_mm512_madd_epi16(low, broadcast_i16(xsums16)),
                                            _mm512_madd_epi16(high, broadcast_i16(xsums16 + 8)));
    acc = _mm512_sub_epi32(acc, _mm512_maskz_slli_epi32(0xffff, offset, 5));
    *b4 = wasm_i32x4_splat(0);
  }
  *a4 = sums_of_quarters(acc);
}
#endif

// One position (decode), the same sums in the same order, with the tile's
// bytes read as one ascending stream, which the hardware prefetchers follow:
// a tiled matrix block by block, a row-major one row after row, each whole
// (the four rows are adjacent). (Row-major rows read in step, block by block,
// are four streams, and without a prefetch instruction, as in WebAssembly,
// the kernel waited on memory.) Each block's integer sums wait in `a` and
// `b` until the four rows' ones are combined.
template <class F, bool kExactByteDot>
void dot_rows4_one(const RowTile& tile, int n_blocks, const QuantizedActivations& x, int p, v128_t acc[1]) {
  constexpr int kChunk = 32;  // blocks per pass: 4 KB of sums
  v128_t a[kChunk][4], b[kChunk][4];
  const int16_t* x16 = x.q_row(p);
  const int8_t* x8 = x.q8_row(p);
  const int32_t* xs16 = x.sums16_row(p);
  const int32_t* xs = x.sums_row(p);
  acc[0] = wasm_f32x4_splat(0.0f);
  const simd::HalvesToFloats halves;
#if defined(SIPLLM_WIDE_GROUPS)
  if (tile.block_stride != F::kBytes) {  // tiled: the four rows' blocks one after another
    for (int blk = 0; blk < n_blocks; ++blk) {
      const uint8_t* block[4];
      for (int i = 0; i < 4; ++i) {
        block[i] = tile.row[i] + static_cast<size_t>(blk) * tile.block_stride;
        tile.prefetch_ahead(block[i], F::kBytes);
      }
      v128_t a4, b4;
      dot_ab_four_rows<F>(block, x8 + blk * kQK_K, xs16 + blk * (kQK_K / 16), xs + blk * (kQK_K / 32), &a4, &b4);
      acc[0] = accumulate_block<F>(acc[0], a4, b4, BlockScales<F>(block, halves), x.d_row(p)[blk]);
    }
    return;
  }
#endif
  Scales s;
  for (int first = 0; first < n_blocks; first += kChunk) {
    const int count = n_blocks - first < kChunk ? n_blocks - first : kChunk;
    const auto sum_block = [&](int c, int i) {
      const int blk = first + c;
      const uint8_t* block = tile.row[i] + static_cast<size_t>(blk) * tile.block_stride;
      tile.prefetch_ahead(block, F::kBytes);
      F::decode_scales(block, &s);
      a[c][i] = dot_a_fused<F, kExactByteDot>(block, s, x16 + blk * kQK_K, x8 + blk * kQK_K, xs16 + blk * (kQK_K / 16));
      if (F::kHasMin) b[c][i] = dot_b(s, xs + blk * (kQK_K / 32));
    };
    if (tile.block_stride != F::kBytes) {  // tiled
      for (int c = 0; c < count; ++c) {
        for (int i = 0; i < 4; ++i) sum_block(c, i);
      }
    } else {
      for (int i = 0; i < 4; ++i) {
        for (int c = 0; c < count; ++c) sum_block(c, i);
      }
    }
    for (int c = 0; c < count; ++c) {
      const int blk = first + c;
      const uint8_t* block[4];
      for (int i = 0; i < 4; ++i) block[i] = tile.row[i] + static_cast<size_t>(blk) * tile.block_stride;
      const v128_t b4 = F::kHasMin ? simd::transpose_sum_i32(b[c][0], b[c][1], b[c][2], b[c][3]) : wasm_i32x4_splat(0);
      acc[0] = accumulate_block<F>(acc[0], simd::transpose_sum_i32(a[c][0], a[c][1], a[c][2], a[c][3]), b4,
                                   BlockScales<F>(block, halves), x.d_row(p)[blk]);
    }
  }
}

// Positions per unpacking of a tile's blocks: each block's weights are
// unpacked and its scales decoded once for all of them, then the positions
// go through the dot products four at a time. Native prefill of the
// qwen3.5-0.8b (qwen3-0.6b) shape, Q4_K_M, 2 threads, 512-bit form: 145-165
// (223) tok/s with 4, 184-187 (254-257) with 8, 195-197 (276-277) with 16,
// 204-207 (284) with 32, which leaves up to 31 positions of a prompt to the
// tile of 4.
constexpr int kWidePositions = 16;

template <class F>
void rows_simd(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x, float* y,
               size_t y_stride) {
  const QuantizedActivations& q = *x.q;
  const int n_blocks = w.cols / kQK_K;
  simd::with_exact_byte_dot([&](auto exact) {
    constexpr bool kExact = decltype(exact)::value;
    for_each_row_tile<kWidePositions, 4>(
        w, row_begin, row_end, x.n_positions, y, y_stride,
        [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4<F, kWidePositions>(tile, n_blocks, q, p, acc); },
        [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4<F, 4>(tile, n_blocks, q, p, acc); },
        [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4_one<F, kExact>(tile, n_blocks, q, p, acc); });
  });
}

// ---- The scalar reference ------------------------------------------------------

template <class F>
void rows_reference(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x,
                    float* y, size_t y_stride) {
  const QuantizedActivations& q = *x.q;
  const int n_blocks = w.cols / kQK_K;
  int16_t wq[kQK_K];
  Scales s;
  float d = 0, dmin = 0;
  for (int r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.row_start(r);
    const size_t stride = w.block_stride(r);
    for (int p = 0; p < x.n_positions; ++p) {
      float acc = 0.0f;
      for (int b = 0; b < n_blocks; ++b) {
        F::unpack_reference(row + static_cast<size_t>(b) * stride, wq, &s, &d, &dmin);
        const int16_t* xq = q.q_row(p) + b * kQK_K;
        int32_t a = 0, bsum = 0;
        for (int i = 0; i < kQK_K; ++i) a += s.scale[i / F::kGroup] * (wq[i] * xq[i]);
        if (F::kHasMin) {
          for (int j = 0; j < 8; ++j) bsum += s.min[j] * q.sums_row(p)[b * 8 + j];
        }
        const float dx = q.d_row(p)[b];
        float term = static_cast<float>(a) * (d * dx);
        if (F::kHasMin) term = term - static_cast<float>(bsum) * (dmin * dx);
        acc = acc + term;
      }
      y[static_cast<size_t>(p) * y_stride + static_cast<size_t>(r)] = acc;
    }
  }
}

}  // namespace

const MatmulKernel kMatmulQ4_K{ActivationFormat::kQ8_K, rows_simd<Q4_KFormat>, rows_reference<Q4_KFormat>};
const MatmulKernel kMatmulQ5_K{ActivationFormat::kQ8_K, rows_simd<Q5_KFormat>, rows_reference<Q5_KFormat>};
const MatmulKernel kMatmulQ6_K{ActivationFormat::kQ8_K, rows_simd<Q6_KFormat>, rows_reference<Q6_KFormat>};

}  // namespace sipllm

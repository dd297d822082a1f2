// The one SIMD vocabulary of the kernels: WebAssembly SIMD128 intrinsics.
//
// Under Emscripten they compile to real wasm SIMD; natively SIMDe implements
// the same intrinsics with SSE/AVX (or NEON), so one source is tested and
// benchmarked natively and shipped as wasm. Kernels never use anything else;
// the few helpers below that do keep it out of them: the 8-bit dot products
// (relaxed SIMD's, which SIMDe lacks; natively SSSE3 or VNNI), the
// half-float conversions (F16C natively) and, natively on CPUs with AVX-512
// VNNI, blocks and tiles of four positions in 512-bit registers (WideGroup,
// QuadAccumulator, WholeBlockQuadAccumulator) and, with AVX-512 and F16C,
// attention over a half-float cache sixteen lanes wide (HalfSum16,
// half_rows4_dots): their results equal the 128-bit kernels' bit for bit.
//
// The helpers here keep results exact and independent of how work is split:
// a reduction always combines lanes in the order written below, and the
// scalar references replicate that order where they promise exact equality.
#pragma once

#if defined(__EMSCRIPTEN__)
#include <wasm_simd128.h>
#else
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/wasm/simd128.h>
#if defined(__SSSE3__)
#include <tmmintrin.h>
#endif
#if defined(__F16C__) || defined(__AVXVNNI__) || defined(__AVX512VNNI__)
#include <immintrin.h>
#endif
#endif

#include <cstdint>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace sipllm::simd {

// ---- Loads and stores of unaligned memory ------------------------------------

inline v128_t load(const void* p) { return wasm_v128_load(p); }
inline void store(void* p, v128_t v) { wasm_v128_store(p, v); }

// Eight int8 at p, sign-extended to i16x8 (wasm's v128.load8x8_s). SIMDe's
// own load8x8 makes GCC convert each half separately (four instructions
// instead of one pmovsxbw); the load-then-extend form compiles to one.
inline v128_t load_i8x8_to_i16x8(const void* p) {
#if defined(__EMSCRIPTEN__)
  return wasm_i16x8_load8x8(p);
#else
  return wasm_i16x8_extend_low_i8x16(wasm_v128_load64_zero(p));
#endif
}

// Stores the first `n` (1..4) f32 lanes of v.
inline void store_lanes(v128_t v, float* p, int n) {
  if (n == 4) {
    wasm_v128_store(p, v);
    return;
  }
  alignas(16) float lanes[4];
  wasm_v128_store(lanes, v);
  for (int i = 0; i < n; ++i) p[i] = lanes[i];
}

// ---- Prefetching ----------------------------------------------------------------

// Asks for the cache line at p ahead of its use. The hardware prefetchers do
// not follow the matrix kernels' walk over four rows at a time: from DRAM, a
// one-thread matrix-vector product ran at 5 GB/s without this and at 22-24
// GB/s with it. wasm has no prefetch instruction; a load the compiler must
// keep (volatile) brings the line in just the same.
inline void prefetch(const void* p) {
#if defined(__EMSCRIPTEN__)
  (void)*static_cast<const volatile uint8_t*>(p);
#else
  __builtin_prefetch(p);
#endif
}

// Whether prefetch() is an instruction that never waits for its line. The
// stand-in load does wait (for its turn to retire): spread through a kernel's
// computation such loads stall it, and decode in Chromium ran 15-35 % slower
// than with them in a burst per tile (see RowTile).
#if defined(__EMSCRIPTEN__)
inline constexpr bool kPrefetchNeverWaits = false;
#else
inline constexpr bool kPrefetchNeverWaits = true;
#endif

inline void prefetch_range(const uint8_t* begin, const uint8_t* end) {
  for (const uint8_t* p = begin; p < end; p += 64) prefetch(p);
}

// How far ahead of the rows it computes a matrix kernel prefetches: about
// 8 KB, in whole tiles of four rows.
inline size_t prefetch_rows_ahead(size_t row_bytes) {
  return row_bytes >= 2048 ? 4 : (8192 / row_bytes + 3) / 4 * 4;
}

// Before a run of rows at `row`, its first rows_ahead rows (the kernels
// prefetch the rest as they go: RowTile in row_tiles.h). Nothing at or past
// `end`, the end of the matrix.
inline void prefetch_run_start(const uint8_t* row, size_t row_bytes, const uint8_t* end) {
  const uint8_t* last = row + prefetch_rows_ahead(row_bytes) * row_bytes;
  prefetch_range(row, last < end ? last : end);
}

// ---- Constants built once ------------------------------------------------------

// v, as a value the compiler cannot see through. LLVM rebuilds a v128
// constant at each use, inside loops too (its model counts a constant as
// free), and V8 builds each one with three instructions (a 64-bit load, a
// move, a shuffle): in Chromium one instruction in eight of the Q5_0
// kernel's loop did that.
// A constant made before a loop and passed through here is built once and
// kept in a register (or a stack slot: one load). Natively nothing: GCC
// keeps loop-invariant constants in registers by itself.
inline v128_t opaque(v128_t v) {
#if defined(__EMSCRIPTEN__)
  int64_t low = wasm_i64x2_extract_lane(v, 0), high = wasm_i64x2_extract_lane(v, 1);
  __asm__("" : "+r"(low), "+r"(high));  // (wasm inline assembly takes no v128)
  return wasm_i64x2_make(low, high);
#else
  return v;
#endif
}

// Lane kLane of v's four 32-bit lanes in all four (one shuffle).
template <int kLane>
v128_t splat_lane_i32(v128_t v) {
  return wasm_i32x4_shuffle(v, v, kLane, kLane, kLane, kLane);
}
// out[j]: lane j of v in all four.
inline void splat_each_lane_i32(v128_t v, v128_t out[4]) {
  out[0] = splat_lane_i32<0>(v);
  out[1] = splat_lane_i32<1>(v);
  out[2] = splat_lane_i32<2>(v);
  out[3] = splat_lane_i32<3>(v);
}

// A loop the compiler must not unroll (where its unrolled form is the slower
// one; the kernel says why).
#if defined(__clang__)
#define SIPLLM_NO_UNROLL _Pragma("clang loop unroll(disable)")
#else
#define SIPLLM_NO_UNROLL _Pragma("GCC unroll 1")
#endif

// ---- Byte dot products ------------------------------------------------------------

// acc plus the 16 products u[i] * x[i], where u's bytes are weights in
// [0, 127] and x holds 16 activations as int8 (x8) and as int16 (x16): the
// result's lanes sum to acc's lanes plus those products (how the products are
// spread over the lanes depends on the platform; callers only ever add all
// lanes, which is exact). With an 8-bit dot product instruction (wasm relaxed
// SIMD's i32x4.relaxed_dot_i8x16_i7x16_add_s; natively VNNI's vpdpbusd, the
// instruction engines map that to where the CPU has it, else SSSE3's
// pmaddubsw) it takes x8; without one (plain SIMD128) u is widened and
// multiplied with x16. kByteDot says whether there is one: without it, a
// kernel that widens each weight once for several positions does better.
#if defined(__wasm_relaxed_simd__) || (!defined(__EMSCRIPTEN__) && defined(__SSSE3__))
#define SIPLLM_BYTE_DOT 1
inline constexpr bool kByteDot = true;
#else
inline constexpr bool kByteDot = false;
#endif
#if !defined(__EMSCRIPTEN__) && ((defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__))
#define SIPLLM_VNNI 1
inline constexpr bool kVnni = true;
// acc plus, per i32 lane, the four products of u's unsigned bytes with x's
// signed bytes (vpdpbusd, in its EVEX or VEX form).
inline __m128i dpbusd(__m128i acc, __m128i u, __m128i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm_dpbusd_epi32(acc, u, x);
#else
  return _mm_dpbusd_avx_epi32(acc, u, x);
#endif
}
#else
inline constexpr bool kVnni = false;
#endif

// Whether the 8-bit dot product is exact for unsigned bytes of any value, as
// vpdpbusd is: then signed bytes times signed bytes go through it too
// (dot_u8i8x16_add), and products are added into int32 lanes directly
// (LaneDots). Natively that is VNNI, known when compiling. Relaxed SIMD
// leaves it to the engine: where the second operand's top bit is set, its
// bytes may be read as signed or unsigned, and the int16 pairs may
// saturate. V8 on an x86 CPU with AVX-VNNI emits vpdpbusd (unsigned, exact,
// one instruction with the add; in Chromium on such a CPU the Q8_0 kernel
// ran 16-30 % faster through it); elsewhere an engine may emit pmaddubsw
// (pairs saturate) or read the bytes as signed (ARM's sdot). The proposal
// makes an engine's choice the same throughout an execution, so one probe,
// of the values that tell the three apart, answers for every kernel.
#if defined(__wasm_relaxed_simd__)
inline bool exact_byte_dot() {
  // 127 and -127 times 255: 4 * 255 * 127 in every lane where it is exact;
  // 2 * 32767 where pairs saturate; -4 * 127 where the bytes are signed.
  static const bool exact = [] {
    const v128_t all_ones = opaque(wasm_i8x16_splat(-1)), zero = wasm_i32x4_splat(0);
    const v128_t high = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(opaque(wasm_i8x16_splat(127)), all_ones, zero);
    const v128_t low = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(opaque(wasm_i8x16_splat(-127)), all_ones, zero);
    return wasm_i32x4_all_true(wasm_i32x4_eq(high, wasm_i32x4_splat(4 * 255 * 127))) &&
           wasm_i32x4_all_true(wasm_i32x4_eq(low, wasm_i32x4_splat(-4 * 255 * 127)));
  }();
  return exact;
}
#else
constexpr bool exact_byte_dot() { return kVnni; }
#endif
// f(std::true_type{}) where exact_byte_dot(), else f(std::false_type{}):
// a kernel instantiated for both, chosen once per call.
template <class F>
void with_exact_byte_dot(F&& f) {
#if defined(__wasm_relaxed_simd__)
  if (exact_byte_dot()) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
#else
  f(std::bool_constant<exact_byte_dot()>{});
#endif
}

inline v128_t dot_u7x16_add(v128_t u, const int8_t* x8, const int16_t* x16, v128_t acc) {
#if defined(__wasm_relaxed_simd__)
  (void)x16;
  return wasm_i32x4_relaxed_dot_i8x16_i7x16_add(wasm_v128_load(x8), u, acc);
#elif defined(SIPLLM_VNNI)
  (void)x16;
  return simde_v128_from_m128i(dpbusd(simde_v128_to_m128i(acc), simde_v128_to_m128i(u),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8))));
#elif defined(SIPLLM_BYTE_DOT)
  (void)x16;
  // u * x as pairs of int16 (no saturation: 2 * 127 * 128 < 2^15), then pairs of those as int32.
  const __m128i pairs = _mm_maddubs_epi16(simde_v128_to_m128i(u), _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8)));
  return wasm_i32x4_add(acc, simde_v128_from_m128i(_mm_madd_epi16(pairs, _mm_set1_epi16(1))));
#else
  (void)x8;
  return wasm_i32x4_add(acc, wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(u), load(x16)),
                                            wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(u), load(x16 + 8))));
#endif
}

// acc plus the 32 products u0[i] * x[i] and u1[i] * x[16 + i], u's bytes in
// [0, 63]; lanes spread as in dot_u7x16_add. Where the 8-bit dot product is
// not one instruction (relaxed SIMD's i32x4 form is five in V8 on a CPU
// without AVX-VNNI, SSSE3's three), the pairs of products stay int16 until
// both halves are added: four products of at most 63 * 128 fit in an int16,
// so the sums are exact, and relaxed SIMD's result is the same on every
// platform (nothing saturates).
inline v128_t dot_u6x32_add(v128_t u0, v128_t u1, const int8_t* x8, const int16_t* x16, v128_t acc) {
#if defined(__wasm_relaxed_simd__)
  (void)x16;
  const v128_t pairs = wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load(x8), u0),
                                      wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load(x8 + 16), u1));
  return wasm_i32x4_add(acc, wasm_i32x4_extadd_pairwise_i16x8(pairs));
#elif defined(SIPLLM_BYTE_DOT) && !defined(SIPLLM_VNNI)
  (void)x16;
  const __m128i pairs = _mm_add_epi16(
      _mm_maddubs_epi16(simde_v128_to_m128i(u0), _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8))),
      _mm_maddubs_epi16(simde_v128_to_m128i(u1), _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8 + 16))));
  return wasm_i32x4_add(acc, simde_v128_from_m128i(_mm_madd_epi16(pairs, _mm_set1_epi16(1))));
#else
  return dot_u7x16_add(u1, x8 + 16, x16 + 16, dot_u7x16_add(u0, x8, x16, acc));
#endif
}

// acc plus the 16 products u[i] * x[i], u's bytes in [0, 63], as
// dot_u6x32_add takes them.
inline v128_t dot_u6x16_add(v128_t u, const int8_t* x8, const int16_t* x16, v128_t acc) {
#if defined(__wasm_relaxed_simd__)
  (void)x16;
  const v128_t pairs = wasm_i16x8_relaxed_dot_i8x16_i7x16(wasm_v128_load(x8), u);
  return wasm_i32x4_add(acc, wasm_i32x4_extadd_pairwise_i16x8(pairs));
#else
  return dot_u7x16_add(u, x8, x16, acc);
#endif
}

// acc plus the 16 products u[i] * s[i] of unsigned and signed bytes (any
// values); lanes spread as in dot_u7x16_add. Where exact_byte_dot() that is
// one instruction (vpdpbusd, or relaxed SIMD's dot product, which is right
// only there: the relaxed build calls this nowhere else), and signed bytes
// times signed bytes go through it too, one side shifted to unsigned
// (x + 128, which shift_to_unsigned computes by flipping the sign bit) and
// 128 times the other side's sum taken away. Otherwise both are widened to
// int16 here, which costs more than kernels that widen a weight once for
// several positions: they take this path only where exact_byte_dot() says
// it is the fast one.
inline v128_t dot_u8i8x16_add(v128_t u, v128_t s, v128_t acc) {
#if defined(__wasm_relaxed_simd__)
  return wasm_i32x4_relaxed_dot_i8x16_i7x16_add(s, u, acc);
#elif defined(SIPLLM_VNNI)
  return simde_v128_from_m128i(dpbusd(simde_v128_to_m128i(acc), simde_v128_to_m128i(u), simde_v128_to_m128i(s)));
#else
  return wasm_i32x4_add(acc, wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(u), wasm_i16x8_extend_low_i8x16(s)),
                                            wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(u), wasm_i16x8_extend_high_i8x16(s))));
#endif
}
// Sums of products lane by lane, for weights whose tile holds four rows'
// values interleaved (one row per i32 lane): add(u0, x0, u1, x1) adds, to
// lane i, the products of bytes 4i..4i+3 of u0 (unsigned, at most kMaxLevel)
// with those of x0 (signed: four activations, the same four bytes in every
// lane), and likewise of u1 with x1; sum() is each lane's total. Where the
// 8-bit dot product gives int16 pairs (relaxed SIMD, SSSE3), they are added
// as int16 and widened once in sum(): at most kPairs adds, so that nothing
// overflows (kPairs * 4 * kMaxLevel * 128 < 2^15) and relaxed SIMD's result
// is the same on every platform. Where the dot product is exact (kExact:
// exact_byte_dot()) each product is one instruction into int32 lanes, into
// two accumulators (one chain of dependent vpdpbusd measured 10 % slower in
// the prefill's kernels); plain SIMD128 widens both sides and pairs the
// lanes up in sum().
template <int kMaxLevel, bool kExact = kVnni>
class LaneDots {
 public:
  static constexpr int kPairs = 32767 / (4 * kMaxLevel * 128);

  void add(v128_t u0, v128_t x0, v128_t u1, v128_t x1) {
#if defined(__wasm_relaxed_simd__)
    if constexpr (kExact) {
      sums_ = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(x0, u0, sums_);
      other_ = wasm_i32x4_relaxed_dot_i8x16_i7x16_add(x1, u1, other_);
      return;
    }
    sums_ = wasm_i16x8_add(sums_, wasm_i16x8_add(wasm_i16x8_relaxed_dot_i8x16_i7x16(x0, u0),
                                                 wasm_i16x8_relaxed_dot_i8x16_i7x16(x1, u1)));
#elif defined(SIPLLM_VNNI)
    sums_ = simde_v128_from_m128i(dpbusd(simde_v128_to_m128i(sums_), simde_v128_to_m128i(u0), simde_v128_to_m128i(x0)));
    other_ = simde_v128_from_m128i(dpbusd(simde_v128_to_m128i(other_), simde_v128_to_m128i(u1), simde_v128_to_m128i(x1)));
#elif defined(SIPLLM_BYTE_DOT)
    const __m128i pairs = _mm_add_epi16(_mm_maddubs_epi16(simde_v128_to_m128i(u0), simde_v128_to_m128i(x0)),
                                        _mm_maddubs_epi16(simde_v128_to_m128i(u1), simde_v128_to_m128i(x1)));
    sums_ = wasm_i16x8_add(sums_, simde_v128_from_m128i(pairs));
#else
    // Bytes 0-7 are rows 0 and 1, bytes 8-15 rows 2 and 3: each dot gives a
    // row two lanes, which sum() adds. (x's four bytes repeat, so both of
    // its halves widen alike.)
    const v128_t x0_16 = wasm_i16x8_extend_low_i8x16(x0), x1_16 = wasm_i16x8_extend_low_i8x16(x1);
    sums_ = wasm_i32x4_add(sums_, wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(u0), x0_16),
                                                 wasm_i32x4_dot_i16x8(wasm_u16x8_extend_low_u8x16(u1), x1_16)));
    other_ = wasm_i32x4_add(other_, wasm_i32x4_add(wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(u0), x0_16),
                                                   wasm_i32x4_dot_i16x8(wasm_u16x8_extend_high_u8x16(u1), x1_16)));
#endif
  }
  v128_t sum() const {
#if defined(__wasm_relaxed_simd__)
    if constexpr (kExact) return wasm_i32x4_add(sums_, other_);
    return wasm_i32x4_extadd_pairwise_i16x8(sums_);
#elif defined(SIPLLM_VNNI)
    return wasm_i32x4_add(sums_, other_);
#elif defined(SIPLLM_BYTE_DOT)
    return simde_v128_from_m128i(_mm_madd_epi16(simde_v128_to_m128i(sums_), _mm_set1_epi16(1)));
#else
    return wasm_i32x4_add(wasm_i32x4_shuffle(sums_, other_, 0, 2, 4, 6), wasm_i32x4_shuffle(sums_, other_, 1, 3, 5, 7));
#endif
  }

 private:
  v128_t sums_ = wasm_i32x4_splat(0);
#if defined(SIPLLM_VNNI) || !defined(SIPLLM_BYTE_DOT) || defined(__wasm_relaxed_simd__)
  v128_t other_ = wasm_i32x4_splat(0);
#endif
};

// The same sums for one block of an interleaved tile at once, where the CPU
// has 512-bit VNNI (native builds only; wasm has 128-bit vectors): a group's
// eight vectors (vector v: values 4v..4v+3 of each row) held in two
// registers, and dot(x) the four rows' sums of their 32 values times x[0..31]
// (lane i: row i). Per block and position that is two permutes of x, two
// vpdpbusd and a reduction, where LaneDots takes eight broadcasts and eight
// dot products. The sums are exact, so equal to LaneDots' bit for bit.
// (These 512-bit helpers take the zeroing forms of the intrinsics
// throughout: GCC 12 warns of the plain ones' undefined inputs.)
#if !defined(__EMSCRIPTEN__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define SIPLLM_WIDE_GROUPS 1
inline constexpr bool kWideGroups = true;
class WideGroup {
 public:
  // 64 bytes whose 16-byte chunk k holds vectors k (low nibbles) and k + 4
  // (high nibbles).
  static WideGroup nibbles(const uint8_t* values) {
    const __m512i bytes = _mm512_loadu_si512(values);
    const __m512i mask = _mm512_set1_epi8(0x0f);
    return WideGroup(_mm512_and_si512(bytes, mask), _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask));
  }
  // 128 bytes, the eight vectors in order, values below 128.
  static WideGroup bytes(const uint8_t* values) {
    return WideGroup(_mm512_loadu_si512(values), _mm512_loadu_si512(values + 64));
  }
  // Lane i: row i's sum of its 32 values times x[0..31].
  v128_t dot(const int8_t* x) const {
    const __m512i total = add_quarters(products(x));
    return simde_v128_from_m128i(_mm512_maskz_extracti32x4_epi32(0xf, total, 0));
  }

 private:
  // Quarter k: each row's products with x in vectors k and k + 4.
  __m512i products(const int8_t* x) const {
    // Each quarter k takes activations 4k..4k+3 against the first
    // register, 16 + 4k.. against the second, in all four lanes.
    const __m512i xs = _mm512_maskz_loadu_epi32(0x00ff, x);
    const __m512i x_low =
        _mm512_maskz_permutexvar_epi32(0xffff, _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), xs);
    const __m512i x_high =
        _mm512_maskz_permutexvar_epi32(0xffff, _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7), xs);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), low_, x_low), high_, x_high);
  }
  // Every quarter: the sum of the four.
  static __m512i add_quarters(__m512i v) {
    const __m512i pairs = _mm512_add_epi32(v, _mm512_maskz_shuffle_i64x2(0xff, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_add_epi32(pairs, _mm512_maskz_shuffle_i64x2(0xff, pairs, pairs, _MM_SHUFFLE(2, 3, 0, 1)));
  }

  WideGroup(__m512i low, __m512i high) : low_(low), high_(high) {}
  __m512i low_, high_;
};

// Four positions at once, quarter j of a register holding position j (lane
// i: row i), from activations laid out in quads (QuantizedActivations::
// q8_quad): each 16 bytes of a group's values broadcast to all quarters; a
// block's values 0..15 of the four positions in one register, 16..31 in
// another, from which an in-lane shuffle gives each quarter its position's
// four values. No reduction across quarters is left: a block costs eight
// vpdpbusd and eight in-lane shuffles for sixteen sums, where
// WideGroup::dot takes four cross-lane shuffles for four.
//
// add_block() adds to each position's float accumulator, lane by lane, what
// add_block in quant_dot_32.cpp adds (the same operations in the same order,
// so the same bits): (isum - kOffset * sx) * (dw * dx), plus mw * (dx * sx)
// where the format has a minimum. `values` as WideGroup::nibbles reads them
// (kNibbles) or as WideGroup::bytes; dx4 and sx4 the four positions'
// activation scales and sums.
class QuadAccumulator {
 public:
  template <bool kNibbles, int kOffset, bool kHasMin>
  void add_block(const uint8_t* values, const int8_t* x_quad, v128_t dw4, v128_t mw4, const float* dx4,
                 const int32_t* sx4) {
    static_assert(kOffset == 0 || kOffset == 8 || kOffset == 16, "an offset that is a shift");
    __m512i isum = sums<kNibbles>(values, x_quad);
    const __m512i quarters = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i sx = _mm512_maskz_permutexvar_epi32(0xffff, quarters, _mm512_maskz_loadu_epi32(0x000f, sx4));
    const __m512 dx = _mm512_maskz_permutexvar_ps(0xffff, quarters, _mm512_maskz_loadu_ps(0x000f, dx4));
    if constexpr (kOffset != 0) {
      isum = _mm512_sub_epi32(isum, _mm512_maskz_slli_epi32(0xffff, sx, kOffset == 8 ? 3 : 4));
    }
    const __m512 dw = _mm512_maskz_broadcast_f32x4(0xffff, simde_v128_to_m128(dw4));
    __m512 term = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xffff, isum), _mm512_mul_ps(dw, dx));
    if constexpr (kHasMin) {
      const __m512 mw = _mm512_maskz_broadcast_f32x4(0xffff, simde_v128_to_m128(mw4));
      term = _mm512_add_ps(term, _mm512_mul_ps(mw, _mm512_mul_ps(dx, _mm512_maskz_cvtepi32_ps(0xffff, sx))));
    }
    acc_ = _mm512_add_ps(acc_, term);
  }
  void store(v128_t acc[4]) const {
    acc[0] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, acc_, 0));
    acc[1] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, acc_, 1));
    acc[2] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, acc_, 2));
    acc[3] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, acc_, 3));
  }

 private:
  // The block's integer sums, position j in quarter j.
  template <bool kNibbles>
  static __m512i sums(const uint8_t* values, const int8_t* x_quad) {
    __m512i u[8];  // vector v of the group, in every quarter
    const auto broadcast = [](const uint8_t* p) {
      return _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    };
    if constexpr (kNibbles) {
      const __m512i mask = _mm512_set1_epi8(0x0f);
      for (int k = 0; k < 4; ++k) {
        const __m512i bytes = broadcast(values + 16 * k);
        u[k] = _mm512_and_si512(bytes, mask);
        u[k + 4] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), mask);
      }
    } else {
      for (int v = 0; v < 8; ++v) u[v] = broadcast(values + 16 * v);
    }
    const __m512i x_low = _mm512_loadu_si512(x_quad), x_high = _mm512_loadu_si512(x_quad + 64);
    const auto x = [&](int v) {  // each position's values 4v..4v+3, in its quarter's four lanes
      const __m512i half = v < 4 ? x_low : x_high;
      switch (v % 4) {
        case 0: return _mm512_maskz_shuffle_epi32(0xffff, half, _MM_PERM_AAAA);
        case 1: return _mm512_maskz_shuffle_epi32(0xffff, half, _MM_PERM_BBBB);
        case 2: return _mm512_maskz_shuffle_epi32(0xffff, half, _MM_PERM_CCCC);
        default: return _mm512_maskz_shuffle_epi32(0xffff, half, _MM_PERM_DDDD);
      }
    };
    // Two chains of dependent vpdpbusd, not one.
    __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
    for (int v = 0; v < 8; v += 2) {
      even = _mm512_dpbusd_epi32(even, u[v], x(v));
      odd = _mm512_dpbusd_epi32(odd, u[v + 1], x(v + 1));
    }
    return _mm512_add_epi32(even, odd);
  }

  __m512 acc_ = _mm512_setzero_ps();
};

// Four positions against four rows whose blocks a tile keeps whole (Q8_0's
// signed bytes): the rows' values fill a register a row per quarter, each
// position's values broadcast to every quarter meet them there, and four
// positions' sums of each quarter's lanes, transposed together in-lane, come
// out row by quarter and position by lane. Signed times signed through
// vpdpbusd: the weights shifted to unsigned (w + 128), and 128 * sum(x)
// taken away. add_block() adds (isum * (dw * dx)), as add_block in
// quant_dot_32.cpp does for Q8_0, so the same bits; rows[i] is row i's 32
// values, dw4 the rows' scales, x_quad, dx4 and sx4 the positions' values,
// scales and sums as QuantizedActivations lays them out in quads.
class WholeBlockQuadAccumulator {
 public:
  void add_block(const uint8_t* const rows[4], const int8_t* x_quad, v128_t dw4, const float* dx4,
                 const int32_t* sx4) {
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
    const __m512i w_low = _mm512_xor_si512(row_quarters(rows, 0), flip);
    const __m512i w_high = _mm512_xor_si512(row_quarters(rows, 16), flip);
    __m512i s[4];  // s[j], quarter i: row i's products with position j, four lanes to add
    for (int j = 0; j < 4; ++j) {
      s[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w_low, broadcast(x_quad + 16 * j)),
                                 w_high, broadcast(x_quad + 64 + 16 * j));
    }
    // Within each quarter, lanes (0 + 2, 1 + 3) of positions 0 and 1 (and 2
    // and 3), then each position's total in lane j.
    const __m512i s01 = _mm512_add_epi32(_mm512_maskz_unpacklo_epi32(0xffff, s[0], s[1]),
                                         _mm512_maskz_unpackhi_epi32(0xffff, s[0], s[1]));
    const __m512i s23 = _mm512_add_epi32(_mm512_maskz_unpacklo_epi32(0xffff, s[2], s[3]),
                                         _mm512_maskz_unpackhi_epi32(0xffff, s[2], s[3]));
    const __m512i shifted = _mm512_add_epi32(_mm512_maskz_unpacklo_epi64(0xff, s01, s23),
                                             _mm512_maskz_unpackhi_epi64(0xff, s01, s23));
    const __m512i isum = _mm512_sub_epi32(shifted, _mm512_maskz_slli_epi32(0xffff, broadcast(sx4), 7));
    const __m512i quarters = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512 dw =
        _mm512_maskz_permutexvar_ps(0xffff, quarters, _mm512_maskz_broadcast_f32x4(0xffff, simde_v128_to_m128(dw4)));
    const __m512 dx = _mm512_maskz_broadcast_f32x4(0xffff, _mm_loadu_ps(dx4));
    acc_ = _mm512_add_ps(acc_, _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xffff, isum), _mm512_mul_ps(dw, dx)));
  }
  // acc[j], lane i: row i's sum for position j.
  void store(v128_t acc[4]) const {
    __m128 rows[4];
    rows[0] = _mm512_maskz_extractf32x4_ps(0xf, acc_, 0);
    rows[1] = _mm512_maskz_extractf32x4_ps(0xf, acc_, 1);
    rows[2] = _mm512_maskz_extractf32x4_ps(0xf, acc_, 2);
    rows[3] = _mm512_maskz_extractf32x4_ps(0xf, acc_, 3);
    _MM_TRANSPOSE4_PS(rows[0], rows[1], rows[2], rows[3]);
    for (int j = 0; j < 4; ++j) acc[j] = simde_v128_from_m128(rows[j]);
  }

 private:
  static __m512i broadcast(const void* p) {
    return _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  // Quarter i: bytes offset..offset+15 of rows[i].
  static __m512i row_quarters(const uint8_t* const rows[4], int offset) {
    const auto part = [&](int i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[i] + offset)); };
    __m512i v = _mm512_maskz_broadcast_i32x4(0x000f, part(0));
    v = _mm512_mask_broadcast_i32x4(v, 0x00f0, part(1));
    v = _mm512_mask_broadcast_i32x4(v, 0x0f00, part(2));
    return _mm512_mask_broadcast_i32x4(v, 0xf000, part(3));
  }

  __m512 acc_ = _mm512_setzero_ps();  // quarter i: row i; lane j: position j
};
#else
inline constexpr bool kWideGroups = false;
#endif

inline v128_t shift_to_unsigned(v128_t signed_bytes) {
  return wasm_v128_xor(signed_bytes, wasm_i8x16_splat(static_cast<int8_t>(0x80)));
}

// ---- Reductions ----------------------------------------------------------------

// Lane i of the result is the sum of the four lanes of v_i, added as
// (lane0 + lane2) + (lane1 + lane3). Integer sums are exact in any order; for
// floats the order is the one the scalar references use.
inline v128_t transpose_sum_i32(v128_t v0, v128_t v1, v128_t v2, v128_t v3) {
  const v128_t a = wasm_i32x4_add(wasm_i32x4_shuffle(v0, v1, 0, 4, 1, 5),
                                  wasm_i32x4_shuffle(v0, v1, 2, 6, 3, 7));
  const v128_t b = wasm_i32x4_add(wasm_i32x4_shuffle(v2, v3, 0, 4, 1, 5),
                                  wasm_i32x4_shuffle(v2, v3, 2, 6, 3, 7));
  return wasm_i32x4_add(wasm_i32x4_shuffle(a, b, 0, 1, 4, 5), wasm_i32x4_shuffle(a, b, 2, 3, 6, 7));
}

// out[j]'s lane i: lane j of v_i (a 4x4 transpose of 32-bit lanes).
inline void transpose(v128_t v0, v128_t v1, v128_t v2, v128_t v3, v128_t out[4]) {
  const v128_t a0 = wasm_i32x4_shuffle(v0, v1, 0, 4, 1, 5), a1 = wasm_i32x4_shuffle(v0, v1, 2, 6, 3, 7);
  const v128_t b0 = wasm_i32x4_shuffle(v2, v3, 0, 4, 1, 5), b1 = wasm_i32x4_shuffle(v2, v3, 2, 6, 3, 7);
  out[0] = wasm_i32x4_shuffle(a0, b0, 0, 1, 4, 5);
  out[1] = wasm_i32x4_shuffle(a0, b0, 2, 3, 6, 7);
  out[2] = wasm_i32x4_shuffle(a1, b1, 0, 1, 4, 5);
  out[3] = wasm_i32x4_shuffle(a1, b1, 2, 3, 6, 7);
}

inline v128_t transpose_sum_f32(v128_t v0, v128_t v1, v128_t v2, v128_t v3) {
  const v128_t a = wasm_f32x4_add(wasm_i32x4_shuffle(v0, v1, 0, 4, 1, 5),
                                  wasm_i32x4_shuffle(v0, v1, 2, 6, 3, 7));
  const v128_t b = wasm_f32x4_add(wasm_i32x4_shuffle(v2, v3, 0, 4, 1, 5),
                                  wasm_i32x4_shuffle(v2, v3, 2, 6, 3, 7));
  return wasm_f32x4_add(wasm_i32x4_shuffle(a, b, 0, 1, 4, 5), wasm_i32x4_shuffle(a, b, 2, 3, 6, 7));
}

// The float sum of v's lanes in the order of transpose_sum_f32.
inline float sum_f32(v128_t v) {
  const v128_t pairs = wasm_f32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));  // (0+2), (1+3)
  return wasm_f32x4_extract_lane(pairs, 0) + wasm_f32x4_extract_lane(pairs, 1);
}
inline float sum_f32_reference(const float lanes[4]) {
  return (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
}

inline int32_t sum_i32(v128_t v) {
  const v128_t pairs = wasm_i32x4_add(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  return wasm_i32x4_extract_lane(pairs, 0) + wasm_i32x4_extract_lane(pairs, 1);
}

inline float max_f32(v128_t v) {
  v = wasm_f32x4_max(v, wasm_i32x4_shuffle(v, v, 2, 3, 0, 1));
  v = wasm_f32x4_max(v, wasm_i32x4_shuffle(v, v, 1, 0, 3, 2));
  return wasm_f32x4_extract_lane(v, 0);
}

// ---- Half floats -------------------------------------------------------------

// Exact fp16 -> f32 without tables or F16C: the magnitude bits moved into a
// float's place and rescaled by 2^112 give every finite value (subnormals
// included) exactly; infinities and NaNs get the maximal exponent back.
// Equal to half.h's fp16_to_float for all 65536 inputs (tested).
inline float fp16_to_f32(uint16_t h) {
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  float f;
  if ((h & 0x7c00u) == 0x7c00u) {
    const uint32_t bits = magnitude | 0x7f800000u;
    std::memcpy(&f, &bits, 4);
  } else {
    std::memcpy(&f, &magnitude, 4);
    f *= 0x1p112f;
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= static_cast<uint32_t>(h & 0x8000u) << 16;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Natively, x86's F16C converts between half floats and floats in one
// instruction each (IEEE conversions: the same results as the code below,
// which WebAssembly needs); in attention over an F16 cache the conversions
// were most of the work.
#if !defined(__EMSCRIPTEN__) && defined(__F16C__)
#define SIPLLM_F16C 1
#endif

// Four fp16 values (in the low 16 bits of each i32 lane) to f32x4, exactly as
// fp16_to_f32, in SIMD128 alone (what WebAssembly runs).
inline v128_t fp16x4_to_f32x4_simd128(v128_t h) {
  const v128_t magnitude = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x7fff)), 13);
  const v128_t finite = wasm_f32x4_mul(magnitude, wasm_f32x4_splat(0x1p112f));
  const v128_t special = wasm_v128_or(magnitude, wasm_i32x4_splat(0x7f800000));
  const v128_t is_special =
      wasm_i32x4_eq(wasm_v128_and(h, wasm_i32x4_splat(0x7c00)), wasm_i32x4_splat(0x7c00));
  const v128_t sign = wasm_i32x4_shl(wasm_v128_and(h, wasm_i32x4_splat(0x8000)), 16);
  return wasm_v128_or(wasm_v128_bitselect(special, finite, is_special), sign);
}

// The same (but a signalling NaN may come out quiet).
inline v128_t fp16x4_to_f32x4(v128_t h) {
#if defined(SIPLLM_F16C)
  const __m128i lanes = simde_v128_to_m128i(h);
  return simde_v128_from_m128(_mm_cvtph_ps(_mm_packus_epi32(lanes, lanes)));
#else
  return fp16x4_to_f32x4_simd128(h);
#endif
}

// The four fp16 values at p (any alignment) as f32x4.
inline v128_t load_fp16x4(const void* p) {
#if defined(SIPLLM_F16C)
  return simde_v128_from_m128(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  return fp16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero(p)));
#endif
}

// The four finite fp16 values at p divided by kHalfLoadScale (an infinity
// or a NaN comes out as a large finite number). In SIMD128 a finite half's
// bits, moved into place in a float, give its value times 2^-112, subnormal
// halves included; undoing that would take a multiplication per value. The
// other factor of a product takes it instead (exact for a power of two,
// short of overflow): the product is the same, and each value costs three
// operations.
inline v128_t finite_fp16x4_to_scaled_f32x4_simd128(v128_t sign_extended) {
  // Shifted by 13, the sign-extended half's sign fills bits 28-31: keep bit 31.
  return wasm_v128_and(wasm_i32x4_shl(sign_extended, 13), wasm_i32x4_splat(static_cast<int32_t>(0x8fffffffu)));
}
#if defined(SIPLLM_F16C)
inline constexpr float kHalfLoadScale = 1.0f;
inline v128_t load_finite_fp16x4_scaled(const void* p) { return load_fp16x4(p); }
#else
inline constexpr float kHalfLoadScale = 0x1p112f;
inline v128_t load_finite_fp16x4_scaled(const void* p) {
  return finite_fp16x4_to_scaled_f32x4_simd128(wasm_i32x4_extend_low_i16x8(wasm_v128_load64_zero(p)));
}
#endif

// Four half floats, sign-extended into i32 lanes (h0 in lane 0), to floats,
// exactly as fp16x4_to_f32x4, for a loop that converts many (the weight
// scales of the matrix kernels): its constants are built once (opaque).
class HalvesToFloats {
 public:
  HalvesToFloats()
      : sign_and_magnitude_(opaque(wasm_i32x4_splat(static_cast<int32_t>(0x8fffffffu)))),
        exponent_(opaque(wasm_i32x4_splat(0x7c00))),
        scale_(opaque(wasm_f32x4_splat(0x1p112f))) {}

  v128_t operator()(uint16_t h0, uint16_t h1, uint16_t h2, uint16_t h3) const {
    return convert(wasm_i32x4_make(static_cast<int16_t>(h0), static_cast<int16_t>(h1), static_cast<int16_t>(h2),
                                   static_cast<int16_t>(h3)));
  }
  // The four halves at p.
  v128_t operator()(const uint8_t* p) const {
#if defined(SIPLLM_F16C)
    return load_fp16x4(p);  // F16C's conversion reads them from memory as they are
#else
    return convert(wasm_i32x4_extend_low_i16x8(wasm_v128_load64_zero(p)));
#endif
  }

 private:
  // h: four halves, one per lane, sign-extended to 32 bits.
  v128_t convert(v128_t h) const {
#if defined(SIPLLM_F16C)
    const __m128i lanes = simde_v128_to_m128i(h);
    return simde_v128_from_m128(_mm_cvtph_ps(_mm_packs_epi32(lanes, lanes)));
#else
    // Finite halves (what weight scales are) as
    // finite_fp16x4_to_scaled_f32x4_simd128 reads them, times 2^112: exact.
    // Infinities and NaN take the whole conversion.
    if (wasm_v128_any_true(wasm_i32x4_eq(wasm_v128_and(h, exponent_), exponent_))) {
      return fp16x4_to_f32x4_simd128(h);
    }
    return wasm_f32x4_mul(wasm_v128_and(wasm_i32x4_shl(h, 13), sign_and_magnitude_), scale_);
#endif
  }

  v128_t sign_and_magnitude_, exponent_, scale_;
};

// Eight fp16 values to two f32x4 (low four, high four).
inline void fp16x8_to_f32x4x2(v128_t h, v128_t* lo, v128_t* hi) {
  *lo = fp16x4_to_f32x4(wasm_u32x4_extend_low_u16x8(h));
  *hi = fp16x4_to_f32x4(wasm_u32x4_extend_high_u16x8(h));
}

// Each lane rounded to the nearest half float (ties to even) and back: what
// float -> fp16 -> float gives, subnormals, overflow to infinity and NaN
// included, without the conversions. Its constants are built once, for the
// loops that round many (opaque).
class HalfRounding {
 public:
  HalfRounding()
      : sign_(opaque(wasm_i32x4_splat(static_cast<int32_t>(0x80000000u)))),
        exponent_(opaque(wasm_i32x4_splat(0x7f800000))),
        smallest_binade_(opaque(wasm_i32x4_splat(0x38800000))),
        largest_binade_(opaque(wasm_i32x4_splat(0x47800000))),
        thirteen_binades_(opaque(wasm_i32x4_splat(13 << 23))),
        largest_half_(opaque(wasm_i32x4_splat(0x477fe000))) {}

  // In SIMD128 alone (what WebAssembly runs). Equal to half.h's round trip
  // (tested).
  v128_t simd128(v128_t x) const {
    // Adding c, a power of two 13 binades above |x|, rounds |x| to the 11
    // significant bits a normal half keeps (ties to even: the addition rounds
    // so); taking c away again is exact. Below 2^-14, halves are multiples of
    // 2^-24, and c stays at 2^-1 (13 binades above 2^-14), which rounds to
    // those. From 2^16 on, where every float becomes infinity, c stays at
    // 2^29 (higher, c itself could overflow); infinity and NaN go through
    // both operations unchanged.
    const v128_t magnitude = wasm_v128_andnot(x, sign_);
    const v128_t binade =
        wasm_u32x4_min(wasm_u32x4_max(wasm_v128_and(magnitude, exponent_), smallest_binade_), largest_binade_);
    const v128_t c = wasm_i32x4_add(binade, thirteen_binades_);
    v128_t r = wasm_f32x4_sub(wasm_f32x4_add(magnitude, c), c);
    // What rounds past the largest half (65504) is infinity (exponent_'s
    // bits); NaN's bits are larger still and stay.
    r = wasm_u32x4_max(r, wasm_v128_and(wasm_i32x4_gt(r, largest_half_), exponent_));
    return wasm_v128_or(r, wasm_v128_and(x, sign_));
  }

  // The same, with the conversions where the platform has them.
  v128_t operator()(v128_t x) const {
#if defined(SIPLLM_F16C)
    const __m128i halves = _mm_cvtps_ph(simde_v128_to_m128(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return simde_v128_from_m128(_mm_cvtph_ps(halves));
#else
    return simd128(x);
#endif
  }

  // operator()(x) where that lies in the half floats' range (at most 65504
  // in magnitude), in three SIMD128 operations fewer: c is not capped and
  // nothing becomes infinity. `largest` keeps the largest magnitude's bits
  // rounded so far; a lane past the range, infinity or NaN leaves it
  // past_range(), and then the results are not to be used. (For 2^115 and
  // up, c overflows into the sign bit or to infinity: the lane then gives
  // |x| itself or NaN, past the range either way.)
  v128_t in_range_simd128(v128_t x, v128_t& largest) const {
    const v128_t sign = wasm_v128_and(x, sign_);
    const v128_t magnitude = wasm_v128_xor(x, sign);
    const v128_t c = wasm_i32x4_add(wasm_u32x4_max(wasm_v128_and(magnitude, exponent_), smallest_binade_),
                                    thirteen_binades_);
    const v128_t r = wasm_f32x4_sub(wasm_f32x4_add(magnitude, c), c);
    largest = wasm_u32x4_max(largest, r);
    return wasm_v128_or(r, sign);
  }
  v128_t in_range(v128_t x, [[maybe_unused]] v128_t& largest) const {
#if defined(SIPLLM_F16C)
    return (*this)(x);  // exact everywhere
#else
    return in_range_simd128(x, largest);
#endif
  }
  bool past_range(v128_t largest) const { return wasm_v128_any_true(wasm_u32x4_gt(largest, largest_half_)); }

  // Each lane's half float bits (in the low 16 bits of its 32), in SIMD128
  // alone: half.h's float_to_fp16, NaN included (its sign, then 0x7e00).
  // Rounded first, then times 2^-112: a normal half's value becomes the
  // float whose bits, shifted right by 13, are the half's (the exponent
  // rebiased from 127 to 15), a subnormal one (k * 2^-24) the float
  // subnormal k * 2^13 * 2^-149, shifted, k; both exactly. Infinity stays
  // infinity, whose shifted bits are capped to the half's.
  v128_t bits_simd128(v128_t x) const {
    const v128_t magnitude = wasm_v128_andnot(simd128(x), sign_);
    v128_t bits = wasm_u32x4_shr(wasm_f32x4_mul(magnitude, wasm_f32x4_splat(0x1p-112f)), 13);
    bits = wasm_u32x4_min(bits, wasm_i32x4_splat(0x7c00));
    const v128_t nan = wasm_i32x4_gt(magnitude, exponent_);
    bits = wasm_v128_or(bits, wasm_v128_and(nan, wasm_i32x4_splat(0x0200)));
    return wasm_v128_or(bits, wasm_u32x4_shr(wasm_v128_and(x, sign_), 16));
  }

 private:
  v128_t sign_, exponent_, smallest_binade_, largest_binade_, thirteen_binades_, largest_half_;
};

// ---- Transcendentals -------------------------------------------------------

// e^x for each lane, within 2 ulp of std::exp over the range that matters
// (below -87.3 it gives FLT_MIN; above ~88.7 it saturates to infinity; NaN
// stays NaN).
// Cody-Waite reduction x = n ln2 + r, then a degree-6 polynomial for e^r.
// Its fourteen constants are made once (opaque), for a loop that takes many:
// built at each use, they were half of V8's instructions for it.
class ExpF32x4 {
 public:
  v128_t operator()(v128_t x) const {
    // pmax and pmin with x first keep a NaN (a comparison with it is false,
    // which picks x), in one instruction each; V8 takes seven for max and
    // min, which must order NaNs and zeros whatever the operands.
    x = wasm_f32x4_pmin(wasm_f32x4_pmax(x, lowest_), highest_);
    // n = x / ln 2 rounded to the nearest integer (ties to even), as a float
    // and as an integer: adding 1.5 * 2^23 leaves it in the sum's low bits
    // (|n| < 2^22 here), in three instructions where V8 takes six for
    // nearest and trunc_sat.
    const v128_t shifted = wasm_f32x4_add(wasm_f32x4_mul(x, log2e_), shifter_);
    const v128_t n = wasm_f32x4_sub(shifted, shifter_);
    const v128_t ni = wasm_i32x4_sub(shifted, shifter_);
    v128_t r = wasm_f32x4_sub(x, wasm_f32x4_mul(n, ln2_high_));
    r = wasm_f32x4_sub(r, wasm_f32x4_mul(n, ln2_low_));
    v128_t p = poly_[0];
    for (int i = 1; i < 6; ++i) p = wasm_f32x4_add(wasm_f32x4_mul(p, r), poly_[i]);
    const v128_t r2 = wasm_f32x4_mul(r, r);
    p = wasm_f32x4_add(wasm_f32x4_add(wasm_f32x4_mul(p, r2), r), one_);
    // Scale by 2^n in two steps so that n = 128 (x near the top) and n = -126
    // (x near the bottom) stay representable.
    const v128_t half_n = wasm_i32x4_shr(ni, 1);
    const v128_t scale1 = wasm_i32x4_shl(wasm_i32x4_add(half_n, bias_), 23);
    const v128_t scale2 = wasm_i32x4_shl(wasm_i32x4_add(wasm_i32x4_sub(ni, half_n), bias_), 23);
    return wasm_f32x4_mul(wasm_f32x4_mul(p, scale1), scale2);
  }

 private:
  static v128_t constant(float f) { return opaque(wasm_f32x4_splat(f)); }
  v128_t lowest_ = constant(-87.33654f), highest_ = constant(88.72283f);
  v128_t log2e_ = constant(1.44269504088896341f), shifter_ = constant(0x1.8p23f);
  v128_t ln2_high_ = constant(0.693359375f), ln2_low_ = constant(-2.12194440e-4f);
  v128_t poly_[6] = {constant(1.9875691500e-4f), constant(1.3981999507e-3f), constant(8.3334519073e-3f),
                     constant(4.1665795894e-2f), constant(1.6666665459e-1f), constant(5.0000001201e-1f)};
  v128_t one_ = constant(1.0f);
  v128_t bias_ = opaque(wasm_i32x4_splat(127));
};

inline v128_t exp_f32x4(v128_t x) { return ExpF32x4()(x); }

// ---- Attention over a half-float cache, sixteen lanes wide (natively) --------------
//
// Natively with AVX-512 and F16C, the 128-bit attention loops over an F16
// cache four times as wide: sixteen lanes are four v128_t side by side, each
// lane's operations (conversions, products, sums, roundings) those of the
// 128-bit loop, so the results equal its bit for bit. F16C's conversions
// bound those loops (a rounding after every key is two of them); four times
// as many lanes per instruction took decode attention over 256 keys (9
// heads, 3 KV heads of 64) from 47 to 22 us (with attention.cpp's softmax
// sums apart from its exponentials).
#if defined(SIPLLM_F16C) && defined(__AVX512F__)
#define SIPLLM_WIDE_HALVES 1

// Sixteen half floats as floats.
class Halves16 {
 public:
  static Halves16 load(const uint16_t* p) {
    return Halves16(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  __m512 floats() const { return floats_; }

 private:
  explicit Halves16(__m512 floats) : floats_(floats) {}
  __m512 floats_;
};

// Sixteen sums kept in half floats, as HalfRounding rounds them (round to
// nearest even after every operation).
class HalfSum16 {
 public:
  void rescale(float r) { sum_ = round(_mm512_mul_ps(sum_, _mm512_set1_ps(r))); }
  // sum = round(sum + values * w), as round(wasm_f32x4_add(sum,
  // wasm_f32x4_mul(values, w))) per lane.
  void add(const Halves16& values, float w) {
    sum_ = round(_mm512_add_ps(sum_, _mm512_mul_ps(values.floats(), _mm512_set1_ps(w))));
  }
  void store(float* out) const { _mm512_storeu_ps(out, sum_); }

 private:
  static __m512 round(__m512 x) {
    return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  __m512 sum_ = _mm512_setzero_ps();
};

// Four rows of n half floats (n a multiple of 4) dotted with kGroup float
// vectors, as the 128-bit loop `acc[g] = wasm_f32x4_add(acc[g],
// wasm_f32x4_mul(load(q[g] + d), load_fp16x4(row + d)))` over d = 0, 4, ...
// leaves acc[g] for each row: acc[g][k] is row k's, its lanes not yet summed.
template <int kGroup>
void half_rows4_dots(const uint16_t* const rows[4], const float* const q[], int n, v128_t acc[][4]) {
  __m512 sums[kGroup];
  for (__m512& s : sums) s = _mm512_setzero_ps();
  const auto four = [](const uint16_t* p) {
    int64_t bits;
    std::memcpy(&bits, p, sizeof bits);
    return bits;
  };
  for (int d = 0; d < n; d += 4) {
    // Row k's four halves in 128-bit lane k.
    const __m512 k = _mm512_cvtph_ps(
        _mm256_set_epi64x(four(rows[3] + d), four(rows[2] + d), four(rows[1] + d), four(rows[0] + d)));
    for (int g = 0; g < kGroup; ++g) {
      sums[g] = _mm512_add_ps(sums[g], _mm512_mul_ps(_mm512_broadcast_f32x4(_mm_loadu_ps(q[g] + d)), k));
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    acc[g][0] = simde_v128_from_m128(_mm512_castps512_ps128(sums[g]));
    acc[g][1] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, sums[g], 1));
    acc[g][2] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, sums[g], 2));
    acc[g][3] = simde_v128_from_m128(_mm512_maskz_extractf32x4_ps(0xf, sums[g], 3));
  }
}
#endif

// ---- The ceiling of the 8-bit products --------------------------------------------

// The accumulators of dot_peak_rounds below on 128 bits, the exact 8-bit dot
// product or not (a function of its own, with no references to them: in a
// lambda that captured them LLVM kept them in memory).
template <int kChains, bool kExact>
int32_t dot_peak_rounds_128(uint64_t rounds, v128_t u, v128_t s) {
  v128_t acc[kChains];
  for (v128_t& a : acc) a = wasm_i32x4_splat(0);
  for (uint64_t r = 0; r < rounds; ++r) {
    for (v128_t& a : acc) {
      if constexpr (kExact) {
        a = dot_u8i8x16_add(u, s, a);
      } else {
#if defined(__wasm_relaxed_simd__)
        a = wasm_i16x8_add(a, wasm_i16x8_relaxed_dot_i8x16_i7x16(s, a));
#elif defined(SIPLLM_BYTE_DOT)
        a = wasm_i16x8_add(a, simde_v128_from_m128i(_mm_maddubs_epi16(simde_v128_to_m128i(a), simde_v128_to_m128i(s))));
#else
        a = wasm_i32x4_add(a, wasm_i32x4_dot_i16x8(a, s));
#endif
      }
    }
  }
  int32_t kept = 0;
  for (const v128_t& a : acc) kept += wasm_i32x4_extract_lane(a, 0);
  return kept;
}

// `rounds` rounds of the instruction that does the matrix products' 8-bit
// multiply-adds, with nothing else to do (no loads, no unpacking, no scales),
// on twelve independent accumulators (more than the instruction's latency
// times its throughput, so that one thread issues as many as the core can);
// returns the multiply-adds done. The instruction is the prefill tiles':
// 512-bit vpdpbusd where they are 512-bit (kWideGroups); the exact 8-bit dot
// product where there is one (VNNI; relaxed SIMD where exact_byte_dot()); int16
// pairs of 8-bit products where that is all there is (relaxed SIMD elsewhere,
// SSSE3); SIMD128's 16-bit dot product. Each step takes its accumulator as an
// operand, so no compiler can move the products out of the loop. `seed`
// keeps the values unknown when compiling.
inline uint64_t dot_peak_rounds(uint64_t rounds, int seed) {
  constexpr int kChains = 12;
  int32_t kept = 0;
#if defined(SIPLLM_WIDE_GROUPS)
  const uint64_t per_step = 64;
  const __m512i u = _mm512_set1_epi8(static_cast<char>(seed & 63)), s = _mm512_set1_epi8(static_cast<char>(seed));
  __m512i acc[kChains];
  for (__m512i& a : acc) a = _mm512_setzero_si512();
  for (uint64_t r = 0; r < rounds; ++r) {
    for (__m512i& a : acc) a = _mm512_dpbusd_epi32(a, u, s);
  }
  for (const __m512i& a : acc) kept += _mm_cvtsi128_si32(_mm512_maskz_extracti32x4_epi32(0xf, a, 0));
#else
  const v128_t u = opaque(wasm_i8x16_splat(static_cast<int8_t>(seed & 63)));
  const v128_t s = opaque(wasm_i8x16_splat(static_cast<int8_t>(seed)));
  const bool exact = exact_byte_dot();
  kept = exact ? dot_peak_rounds_128<kChains, true>(rounds, u, s) : dot_peak_rounds_128<kChains, false>(rounds, u, s);
  const uint64_t per_step = exact || kByteDot ? 16 : 8;
#endif
  volatile int32_t sink = kept;  // the products must happen
  (void)sink;
  return rounds * kChains * per_step;
}

}  // namespace sipllm::simd

#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "kernels/elementwise.h"
#include "kernels/simd.h"
#include "model/half.h"
#include "core/thread_pool.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

// Multiply-adds per chunk of (position, head) pairs given to a thread; less
// work than one chunk in total runs on the calling thread.
constexpr size_t kChunkMacs = 1 << 16;
// The largest head the query's F16 copy has room for.
constexpr int kMaxHeadDim = 512;

// The heads of one task share a KV head (grouped-query attention): each key
// and value is read, and converted from F16, once for all of them. At most
// this many, so that their accumulators stay in registers.
constexpr int kMaxGroup = 4;

// Four cache elements as floats divided by kLoadScale<T, kFinite>: a finite
// F16 cache is read without SIMD128's multiplication by 2^112
// (simd::load_finite_fp16x4_scaled), which the other factor of each product
// takes instead; the products are the same.
template <class T, bool kFinite>
constexpr float kLoadScale = std::is_same_v<T, uint16_t> && kFinite ? simd::kHalfLoadScale : 1.0f;

template <bool kFinite>
inline v128_t load4(const float* p) {
  return simd::load(p);
}
template <bool kFinite>
inline v128_t load4(const uint16_t* p) {
  return kFinite ? simd::load_finite_fp16x4_scaled(p) : simd::load_fp16x4(p);
}
inline float element(const float* p, int i) { return p[i]; }
inline float element(const uint16_t* p, int i) { return simd::fp16_to_f32(p[i]); }

// Adds the products of elements [from, n) to `sum`, one by one: the tail of
// a dot product whose first elements went four lanes at a time.
template <class T>
float dot_tail(const float* q, const T* k, int from, int n, float sum) {
  for (int d = from; d < n; ++d) sum += q[d] * element(k, d);
  return sum;
}

// out = sum_t scores[t] * v_t over an F32 cache, in order of t, 16 floats of
// the head at a time.
void weigh_values(const float* scores, int span, const KvCache& cache, int layer, int first, int kv_offset,
                  int head_dim, float* out) {
  const int dim4 = head_dim & ~3;
  for (int d0 = 0; d0 < dim4; d0 += 16) {
    const int width = std::min(16, dim4 - d0);
    v128_t acc[4] = {wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f),
                     wasm_f32x4_splat(0.0f)};
    for (int t = 0; t < span; ++t) {
      const float* v = cache.value<float>(layer, first + t) + kv_offset + d0;
      const v128_t a = wasm_f32x4_splat(scores[t]);
      for (int j = 0; j < width / 4; ++j) acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(a, simd::load(v + 4 * j)));
    }
    for (int j = 0; j < width / 4; ++j) simd::store(out + d0 + 4 * j, acc[j]);
  }
  for (int d = dim4; d < head_dim; ++d) {
    float sum = 0.0f;
    for (int t = 0; t < span; ++t) sum += scores[t] * cache.value<float>(layer, first + t)[kv_offset + d];
    out[d] = sum;
  }
}

// ggml's online softmax over the raw (scaled, capped) scores of one head,
// key by key: a running maximum M and sum S. Where key t raises M, what was
// summed before it is rescaled by exp(M_old - M) and the key weighs 1;
// otherwise it weighs exp(score - M). Replaces scores[t] with key t's weight
// and writes rescale[t] (1 where M stayed); softmax_sums() then gives S.
void online_softmax_weights(float* scores, float* rescale, int span) {
  float max = -INFINITY;
  for (int t = 0; t < span; ++t) {
    const float score = scores[t];
    if (score > max) {
      rescale[t] = std::exp(max - score);
      max = score;
      scores[t] = 1.0f;
    } else {
      rescale[t] = 1.0f;
      scores[t] = std::exp(score - max);
    }
  }
}

// S of online_softmax_weights for kGroup heads (head g's weights at
// weights + g * span, its rescalings at rescales + g * span): S = S *
// rescale[t] + weight[t], key by key. Kept apart from the exponentials and
// the heads side by side, each head's chain of additions waits on no call.
template <int kGroup>
void softmax_sums(const float* weights, const float* rescales, int span, float sums[kGroup]) {
  for (int g = 0; g < kGroup; ++g) sums[g] = 0.0f;
  for (int t = 0; t < span; ++t) {
    for (int g = 0; g < kGroup; ++g) sums[g] = sums[g] * rescales[g * span + t] + weights[g * span + t];
  }
}

// Elements [d0, d0 + 4 * kVectors) of kGroup heads' weighted sums of an F16
// cache's values, as ggml's flash attention computes each (llama.cpp's
// default on a CPU): keys in order, the sum kept in half floats, rounded
// after every rescaling and every key. Head g's weights and rescalings are
// at weights + g * span and rescales + g * span, its sum goes to
// out + g * out_stride. The sums stay in registers across all keys and the
// heads share each value's conversion. Each key's rounding waits for the
// previous one's: with the heads side by side, kGroup * kVectors such
// chains run at once instead of kVectors. Rounded with
// HalfRounding::in_range, and again with the whole rounding (kExact) should
// a sum leave the half floats' range.
template <int kGroup, int kVectors, bool kFinite, bool kExact = false>
void weigh_values_as_ggml_f16_chunk(const float* weights, const float* rescales, int span, const KvCache& cache,
                                    int layer, int first, int offset, const simd::HalfRounding& round_to_f16,
                                    float* out, int out_stride) {
  v128_t largest = wasm_i32x4_splat(0);
  const auto round = [&](v128_t x) { return kExact ? round_to_f16(x) : round_to_f16.in_range(x, largest); };
  v128_t acc[kGroup][kVectors];
  for (int g = 0; g < kGroup; ++g) {
    for (int j = 0; j < kVectors; ++j) acc[g][j] = wasm_f32x4_splat(0.0f);
  }
  for (int t = 0; t < span; ++t) {
    v128_t w[kGroup];
    for (int g = 0; g < kGroup; ++g) {
      // Multiplying by 1 would give back the same halves: only a rise of the
      // maximum rescales.
      const float rescale = rescales[g * span + t];
      if (rescale != 1.0f) {
        const v128_t r = wasm_f32x4_splat(rescale);
        for (int j = 0; j < kVectors; ++j) acc[g][j] = round(wasm_f32x4_mul(acc[g][j], r));
      }
      w[g] = wasm_f32x4_splat(weights[g * span + t] * (kLoadScale<uint16_t, kFinite>));
    }
    const uint16_t* v = cache.value<uint16_t>(layer, first + t) + offset;
    for (int j = 0; j < kVectors; ++j) {
      const v128_t value = load4<kFinite>(v + 4 * j);
      for (int g = 0; g < kGroup; ++g) acc[g][j] = round(wasm_f32x4_add(acc[g][j], wasm_f32x4_mul(value, w[g])));
    }
  }
  if constexpr (!kExact) {
    if (round_to_f16.past_range(largest)) {
      return weigh_values_as_ggml_f16_chunk<kGroup, kVectors, kFinite, true>(weights, rescales, span, cache, layer,
                                                                             first, offset, round_to_f16, out,
                                                                             out_stride);
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    for (int j = 0; j < kVectors; ++j) simd::store(out + g * out_stride + 4 * j, acc[g][j]);
  }
}

#if defined(SIPLLM_WIDE_HALVES)
// weigh_values_as_ggml_f16_chunk for elements [d0, d0 + 16 * kVectors),
// sixteen lanes at a time (natively: simd::HalfSum16): the same sums bit for
// bit. In range or not, F16C rounds them exactly.
template <int kGroup, int kVectors>
void weigh_values_as_ggml_f16_chunk_wide(const float* weights, const float* rescales, int span, const KvCache& cache,
                                         int layer, int first, int offset, float* out, int out_stride) {
  simd::HalfSum16 acc[kGroup][kVectors];
  for (int t = 0; t < span; ++t) {
    for (int g = 0; g < kGroup; ++g) {
      const float rescale = rescales[g * span + t];
      if (rescale != 1.0f) {
        for (int j = 0; j < kVectors; ++j) acc[g][j].rescale(rescale);
      }
    }
    const uint16_t* v = cache.value<uint16_t>(layer, first + t) + offset;
    for (int j = 0; j < kVectors; ++j) {
      const simd::Halves16 values = simd::Halves16::load(v + 16 * j);
      for (int g = 0; g < kGroup; ++g) acc[g][j].add(values, weights[g * span + t]);
    }
  }
  for (int g = 0; g < kGroup; ++g) {
    for (int j = 0; j < kVectors; ++j) acc[g][j].store(out + g * out_stride + 16 * j);
  }
}
#endif

// The sums weigh_values_as_ggml_f16_chunk keeps side by side per head, in
// registers across all keys: with three heads, V8 (15 vector registers)
// spilled twelve sums, and Chromium's decode attention took 1.6 times as
// long as with eight.
constexpr int kValueVectors = 2;

// kGroup heads' weighted sums (as weigh_values_as_ggml_f16_chunk), 64
// elements at a time natively where they are wide, then 4 * kValueVectors,
// then 4, then one by one.
template <int kGroup, bool kFinite>
void weigh_values_as_ggml_f16_group(const float* weights, const float* rescales, int span, const KvCache& cache,
                                    int layer, int first, int kv_offset, int head_dim, float* out) {
  const simd::HalfRounding round_to_f16;
  const int dim4 = head_dim & ~3;
  int d = 0;
#if defined(SIPLLM_WIDE_HALVES)
  const int dim16 = head_dim & ~15;
  for (; d + 64 <= dim16; d += 64) {
    weigh_values_as_ggml_f16_chunk_wide<kGroup, 4>(weights, rescales, span, cache, layer, first, kv_offset + d, out + d,
                                                   head_dim);
  }
  for (; d < dim16; d += 16) {
    weigh_values_as_ggml_f16_chunk_wide<kGroup, 1>(weights, rescales, span, cache, layer, first, kv_offset + d, out + d,
                                                   head_dim);
  }
#endif
  for (; d + 4 * kValueVectors <= dim4; d += 4 * kValueVectors) {
    weigh_values_as_ggml_f16_chunk<kGroup, kValueVectors, kFinite>(weights, rescales, span, cache, layer, first,
                                                                   kv_offset + d, round_to_f16, out + d, head_dim);
  }
  for (; d < dim4; d += 4) {
    weigh_values_as_ggml_f16_chunk<kGroup, 1, kFinite>(weights, rescales, span, cache, layer, first, kv_offset + d,
                                                       round_to_f16, out + d, head_dim);
  }
  for (; d < head_dim; ++d) {
    for (int g = 0; g < kGroup; ++g) {
      float acc = 0.0f;
      for (int t = 0; t < span; ++t) {
        const float rescale = rescales[g * span + t];
        if (rescale != 1.0f) acc = fp16_to_float(float_to_fp16(acc * rescale));
        const float v = element(cache.value<uint16_t>(layer, first + t) + kv_offset, d);
        acc = fp16_to_float(float_to_fp16(acc + v * weights[g * span + t]));
      }
      out[g * head_dim + d] = acc;
    }
  }
}

// The softmax-weighted sums of an F16 cache's values for a group of heads.
// scores[g * span + t] are head g's raw scores (overwritten with weights);
// rescales has room for n_group * span floats; head g's output goes to
// out + g * head_dim.
template <bool kFinite>
void weigh_values_as_ggml_f16(float* scores, float* rescales, int n_group, int span, const KvCache& cache,
                              int layer, int first, int kv_offset, int head_dim, float* out) {
  for (int g = 0; g < n_group; ++g) online_softmax_weights(scores + g * span, rescales + g * span, span);
  float sums[kMaxGroup];
  const auto weigh = [&](auto group) {
    softmax_sums<decltype(group)::value>(scores, rescales, span, sums);
    weigh_values_as_ggml_f16_group<decltype(group)::value, kFinite>(scores, rescales, span, cache, layer, first,
                                                                    kv_offset, head_dim, out);
  };
  switch (n_group) {
    case 1: weigh(std::integral_constant<int, 1>{}); break;
    case 2: weigh(std::integral_constant<int, 2>{}); break;
    case 3: weigh(std::integral_constant<int, 3>{}); break;
    default: weigh(std::integral_constant<int, 4>{}); break;
  }
  for (int g = 0; g < n_group; ++g) {
    const float inverse = sums[g] == 0.0f ? 0.0f : 1.0f / sums[g];
    for (int d = 0; d < head_dim; ++d) out[g * head_dim + d] *= inverse;
  }
}

// Scores of kGroup heads (q: their queries, q_scaled: the same times
// kLoadScale), a key at a time: one accumulator per head, reduced together.
// scores[g * span + t] belongs to head g and position first + t.
template <class T, bool kFinite, int kGroup>
void key_scores(const float (*q)[kMaxHeadDim], const float (*q_scaled)[kMaxHeadDim], int span, const KvCache& cache,
                int layer, int first, int kv_offset, const AttentionShape& shape, float* scores) {
  const int head_dim = shape.head_dim;
  const int dim4 = head_dim & ~3;
  int t = 0;
#if defined(SIPLLM_WIDE_HALVES)
  // Four keys at a time, sixteen lanes wide: the same sums bit for bit.
  if constexpr (std::is_same_v<T, uint16_t>) {
    const float* q4[kGroup];
    for (int g = 0; g < kGroup; ++g) q4[g] = q_scaled[g];
    for (; t + 4 <= span; t += 4) {
      const uint16_t* k[4];
      for (int j = 0; j < 4; ++j) k[j] = cache.key<T>(layer, first + t + j) + kv_offset;
      v128_t acc[kMaxGroup][4];
      for (int g = kGroup; g < kMaxGroup; ++g) {
        for (int j = 0; j < 4; ++j) acc[g][j] = wasm_f32x4_splat(0.0f);
      }
      simd::half_rows4_dots<kGroup>(k, q4, dim4, acc);
      for (int j = 0; j < 4; ++j) {
        alignas(16) float dots[4];
        simd::store(dots, simd::transpose_sum_f32(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
        for (int g = 0; g < kGroup; ++g) {
          scores[g * span + t + j] = dot_tail(q[g], k[j], dim4, head_dim, dots[g]) * shape.scale;
        }
      }
    }
  }
#endif
  for (; t < span; ++t) {
    const T* k = cache.key<T>(layer, first + t) + kv_offset;
    v128_t acc[kMaxGroup];
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = wasm_f32x4_splat(0.0f);
    for (int d = 0; d < dim4; d += 4) {
      const v128_t kv = load4<kFinite>(k + d);
      for (int g = 0; g < kGroup; ++g) acc[g] = wasm_f32x4_add(acc[g], wasm_f32x4_mul(simd::load(q_scaled[g] + d), kv));
    }
    alignas(16) float dots[4];
    simd::store(dots, simd::transpose_sum_f32(acc[0], acc[1], acc[2], acc[3]));
    for (int g = 0; g < kGroup; ++g) scores[g * span + t] = dot_tail(q[g], k, dim4, head_dim, dots[g]) * shape.scale;
  }
}

// Heads [head, head + n_group) of position `pos`, which share a KV head: q
// and out point at the first one's row. `scores` has room for 2 * n_group
// * (pos + 1) floats.
template <class T, bool kFinite>
void attend_typed(const float* q_in, int pos, int head, int n_group, const KvCache& cache, int layer,
                  const AttentionShape& shape, float* out, float* scores) {
  const int head_dim = shape.head_dim;
  const int dim4 = head_dim & ~3;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const int first = shape.first_position(pos);
  const int span = pos + 1 - first;
  constexpr float kScale = kLoadScale<T, kFinite>;

  // Each head's query: for an F16 cache rounded to F16, as ggml does, and
  // for the SIMD lanes times kScale.
  alignas(16) float q[kMaxGroup][kMaxHeadDim], q_scaled[kMaxGroup][kMaxHeadDim];
  const simd::HalfRounding round_to_f16;
  for (int g = 0; g < n_group; ++g) {
    const float* x = q_in + g * head_dim;
    for (int d = 0; d < dim4; d += 4) {
      const v128_t rounded = std::is_same_v<T, uint16_t> ? round_to_f16(simd::load(x + d)) : simd::load(x + d);
      simd::store(q[g] + d, rounded);
      simd::store(q_scaled[g] + d, wasm_f32x4_mul(rounded, wasm_f32x4_splat(kScale)));
    }
    for (int d = dim4; d < head_dim; ++d) {
      q[g][d] = std::is_same_v<T, uint16_t> ? fp16_to_float(float_to_fp16(x[d])) : x[d];
      q_scaled[g][d] = q[g][d] * kScale;
    }
  }

  switch (n_group) {
    case 1: key_scores<T, kFinite, 1>(q, q_scaled, span, cache, layer, first, kv_offset, shape, scores); break;
    case 2: key_scores<T, kFinite, 2>(q, q_scaled, span, cache, layer, first, kv_offset, shape, scores); break;
    case 3: key_scores<T, kFinite, 3>(q, q_scaled, span, cache, layer, first, kv_offset, shape, scores); break;
    default: key_scores<T, kFinite, 4>(q, q_scaled, span, cache, layer, first, kv_offset, shape, scores); break;
  }

  if (shape.softcap > 0) softcap(scores, n_group * span, shape.softcap);
  if constexpr (std::is_same_v<T, uint16_t>) {
    weigh_values_as_ggml_f16<kFinite>(scores, scores + n_group * span, n_group, span, cache, layer, first,
                                      kv_offset, head_dim, out);
  } else {
    for (int g = 0; g < n_group; ++g) {
      softmax(scores + g * span, span);
      weigh_values(scores + g * span, span, cache, layer, first, kv_offset, head_dim, out + g * head_dim);
    }
  }
}

// attend_typed for the cache's type.
void attend_heads(const float* q, int pos, int head, int n_group, const KvCache& cache, int layer,
                  const AttentionShape& shape, float* out, float* scores) {
  if (cache.type() == KvCacheType::kF32) {
    attend_typed<float, true>(q, pos, head, n_group, cache, layer, shape, out, scores);
  } else if (cache.halves_finite()) {
    attend_typed<uint16_t, true>(q, pos, head, n_group, cache, layer, shape, out, scores);
  } else {
    attend_typed<uint16_t, false>(q, pos, head, n_group, cache, layer, shape, out, scores);
  }
}

// ---- The tiled path -------------------------------------------------------------

// Keys (and values) converted to floats together, at positions that are
// multiples of it: ggml's GGML_FA_TILE_KV. The tiles start at the same keys
// whatever the queries, so a query's result does not depend on which others
// share its task.
constexpr int kKeyTile = 64;
// The most positions one task attends for (with every head of a KV head).
constexpr int kQueryTile = 16;

// Floats of a thread's scratch for the tiled path: a tile of keys and one
// of values as floats, two heads' scores, and per query (position and head
// of a task) its running maximum, sum and weighted sum of values.
size_t tiled_scratch_floats(const AttentionShape& shape) {
  const auto dim = static_cast<size_t>(shape.head_dim);
  const auto queries = static_cast<size_t>(kQueryTile) * static_cast<size_t>(shape.n_heads / shape.n_kv_heads);
  return 2 * kKeyTile * dim + 2 * kKeyTile + queries * (dim + 2);
}

// Rows [from, to) of the cache's keys or values of one KV head as floats,
// row t - tile_start of `rows` (head_dim floats each).
template <class T, bool kValues>
void rows_to_floats(const KvCache& cache, int layer, int kv_offset, int head_dim, int tile_start, int from, int to,
                    float* rows) {
  const int dim4 = head_dim & ~3;
  for (int t = from; t < to; ++t) {
    const T* src = (kValues ? cache.value<T>(layer, t) : cache.key<T>(layer, t)) + kv_offset;
    float* dst = rows + static_cast<size_t>(t - tile_start) * static_cast<size_t>(head_dim);
    if constexpr (std::is_same_v<T, float>) {
      std::memcpy(dst, src, static_cast<size_t>(head_dim) * sizeof(float));
    } else {
      for (int d = 0; d < dim4; d += 4) simd::store(dst + d, simd::load_fp16x4(src + d));
      for (int d = dim4; d < head_dim; ++d) dst[d] = element(src, d);
    }
  }
}

// scores[h][t] = q[h] . k_t for kHeads queries and the n keys at `keys`
// (rows of head_dim floats), four keys at a time: the queries share each
// key's loads, and the 4 * kHeads sums run side by side.
template <int kHeads>
void tile_scores(const float* const q[kHeads], const float* keys, int n, int head_dim, float* const scores[kHeads]) {
  const int dim4 = head_dim & ~3;
  const auto key = [&](int t) { return keys + static_cast<size_t>(t) * static_cast<size_t>(head_dim); };
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    v128_t acc[kHeads][4];
    for (int h = 0; h < kHeads; ++h) {
      for (int j = 0; j < 4; ++j) acc[h][j] = wasm_f32x4_splat(0.0f);
    }
    for (int d = 0; d < dim4; d += 4) {
      v128_t k[4];
      for (int j = 0; j < 4; ++j) k[j] = simd::load(key(t + j) + d);
      for (int h = 0; h < kHeads; ++h) {
        const v128_t qd = simd::load(q[h] + d);
        for (int j = 0; j < 4; ++j) acc[h][j] = wasm_f32x4_add(acc[h][j], wasm_f32x4_mul(qd, k[j]));
      }
    }
    for (int h = 0; h < kHeads; ++h) {
      simd::store(scores[h] + t, simd::transpose_sum_f32(acc[h][0], acc[h][1], acc[h][2], acc[h][3]));
      for (int j = 0; j < 4; ++j) scores[h][t + j] = dot_tail(q[h], key(t + j), dim4, head_dim, scores[h][t + j]);
    }
  }
  for (; t < n; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      v128_t acc = wasm_f32x4_splat(0.0f);
      for (int d = 0; d < dim4; d += 4) {
        acc = wasm_f32x4_add(acc, wasm_f32x4_mul(simd::load(q[h] + d), simd::load(key(t) + d)));
      }
      scores[h][t] = dot_tail(q[h], key(t), dim4, head_dim, simd::sum_f32(acc));
    }
  }
}

// sum[h] += sum_t weights[h][t] * v_t for kHeads heads over the n values at
// `values`, kVectors * 4 floats from d0, kept in registers across the keys.
template <int kHeads, int kVectors>
void add_weighted_values_at(const float* const weights[kHeads], const float* values, int n, int head_dim, int d0,
                            float* const sum[kHeads]) {
  v128_t acc[kHeads][kVectors];
  for (int h = 0; h < kHeads; ++h) {
    for (int j = 0; j < kVectors; ++j) acc[h][j] = simd::load(sum[h] + d0 + 4 * j);
  }
  const float* v = values + d0;
  for (int t = 0; t < n; ++t, v += head_dim) {
    v128_t x[kVectors];
    for (int j = 0; j < kVectors; ++j) x[j] = simd::load(v + 4 * j);
    for (int h = 0; h < kHeads; ++h) {
      const v128_t w = wasm_f32x4_splat(weights[h][t]);
      for (int j = 0; j < kVectors; ++j) acc[h][j] = wasm_f32x4_add(acc[h][j], wasm_f32x4_mul(w, x[j]));
    }
  }
  for (int h = 0; h < kHeads; ++h) {
    for (int j = 0; j < kVectors; ++j) simd::store(sum[h] + d0 + 4 * j, acc[h][j]);
  }
}

template <int kHeads>
void add_weighted_values(const float* const weights[kHeads], const float* values, int n, int head_dim,
                         float* const sum[kHeads]) {
  const int dim4 = head_dim & ~3, dim16 = head_dim & ~15;
  int d = 0;
  for (; d < dim16; d += 16) add_weighted_values_at<kHeads, 4>(weights, values, n, head_dim, d, sum);
  for (; d < dim4; d += 4) add_weighted_values_at<kHeads, 1>(weights, values, n, head_dim, d, sum);
  for (; d < head_dim; ++d) {
    for (int h = 0; h < kHeads; ++h) {
      for (int t = 0; t < n; ++t) sum[h][d] += weights[h][t] * values[static_cast<size_t>(t * head_dim + d)];
    }
  }
}

// x[t] = e^(x[t] - max) for t < n; returns their sum (four lanes, then
// the last few).
float exp_minus_and_sum(float* x, int n, float max) {
  const v128_t max4 = wasm_f32x4_splat(max);
  const simd::ExpF32x4 exp4;
  v128_t sum4 = wasm_f32x4_splat(0.0f);
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    const v128_t e = exp4(wasm_f32x4_sub(simd::load(x + t), max4));
    simd::store(x + t, e);
    sum4 = wasm_f32x4_add(sum4, e);
  }
  float sum = simd::sum_f32(sum4);
  if (t < n) {
    alignas(16) float lanes[4] = {max, max, max, max};
    std::copy(x + t, x + n, lanes);
    simd::store(lanes, exp4(wasm_f32x4_sub(simd::load(lanes), max4)));
    for (int i = 0; t + i < n; ++i) {
      x[t + i] = lanes[i];
      sum += lanes[i];
    }
  }
  return sum;
}

// The online softmax's step for one head and one tile: scores (n of them,
// raw) become weights, the head's state (maximum, sum, weighted values) is
// rescaled where the tile raises its maximum.
void softmax_tile_step(float* scores, int n, const AttentionShape& shape, float* state) {
  scale_in_place(scores, n, shape.scale);
  if (shape.softcap > 0) softcap(scores, n, shape.softcap);
  v128_t max4 = wasm_f32x4_splat(-INFINITY);
  int t = 0;
  // pmax: one instruction where V8 takes seven for max (which orders NaNs
  // and zeros); a NaN score leaves the head's result NaN either way.
  for (; t + 4 <= n; t += 4) max4 = wasm_f32x4_pmax(max4, simd::load(scores + t));
  float tile_max = simd::max_f32(max4);
  for (; t < n; ++t) tile_max = std::max(tile_max, scores[t]);
  if (tile_max > state[0]) {
    // 0 before the first key (the maximum was -infinity; exp_f32x4 would
    // give the smallest normal float).
    const v128_t rise = simd::exp_f32x4(wasm_f32x4_splat(state[0] - tile_max));
    const float rescale = state[0] == -INFINITY ? 0.0f : wasm_f32x4_extract_lane(rise, 0);
    state[1] *= rescale;
    scale_in_place(state + 2, shape.head_dim, rescale);
    state[0] = tile_max;
  }
  state[1] += exp_minus_and_sum(scores, n, state[0]);
}

// Every head of KV head `kv_head` for positions [p0, p1) (at most
// kQueryTile), as ggml's tiled flash attention computes them: the query in
// floats, keys and values converted to floats a tile of kKeyTile at a time,
// each tile's scores through an online softmax (a running maximum and sum,
// rescaled where the maximum rises), the weighted sum of values in floats.
template <class T>
void attend_tiled_task(const float* q, int p0, int p1, int start_pos, int kv_head, const KvCache& cache, int layer,
                       const AttentionShape& shape, float* out, float* scratch) {
  const int head_dim = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  const int kv_offset = kv_head * head_dim;
  const size_t dim = static_cast<size_t>(shape.n_heads) * static_cast<size_t>(head_dim);
  float* keys = scratch;
  float* values = keys + static_cast<size_t>(kKeyTile) * static_cast<size_t>(head_dim);
  float* scores = values + static_cast<size_t>(kKeyTile) * static_cast<size_t>(head_dim);
  // After two heads' scores, per query: its maximum, its sum, its weighted
  // sum of values (head_dim floats).
  float* state = scores + 2 * kKeyTile;
  const size_t state_floats = static_cast<size_t>(head_dim) + 2;
  const int n_queries = (p1 - p0) * group;
  for (int i = 0; i < n_queries; ++i) {
    float* s = state + static_cast<size_t>(i) * state_floats;
    s[0] = -INFINITY;
    s[1] = 0.0f;
    std::fill(s + 2, s + state_floats, 0.0f);
  }
  const int lowest = shape.first_position(p0);
  for (int tile = lowest / kKeyTile * kKeyTile; tile < p1; tile += kKeyTile) {
    const int from = std::max(tile, lowest), to = std::min(tile + kKeyTile, p1);
    rows_to_floats<T, false>(cache, layer, kv_offset, head_dim, tile, from, to, keys);
    rows_to_floats<T, true>(cache, layer, kv_offset, head_dim, tile, from, to, values);
    for (int p = p0; p < p1; ++p) {
      // The keys of this tile position p sees.
      const int a = std::max(from, shape.first_position(p)), b = std::min(to, p + 1);
      if (a >= b) continue;
      const int n = b - a;
      const float* tile_keys = keys + static_cast<size_t>(a - tile) * static_cast<size_t>(head_dim);
      const float* tile_values = values + static_cast<size_t>(a - tile) * static_cast<size_t>(head_dim);
      // The heads in pairs: they share each key's and value's loads.
      for (int g = 0; g < group; g += 2) {
        const int heads = std::min(2, group - g);
        const float* qh[2];
        float* head_scores[2];
        float* head_state[2];
        float* head_sums[2];
        for (int i = 0; i < heads; ++i) {
          const int h = kv_head * group + g + i;
          qh[i] = q + static_cast<size_t>(p - start_pos) * dim + static_cast<size_t>(h * head_dim);
          head_scores[i] = scores + i * kKeyTile;
          head_state[i] = state + static_cast<size_t>((p - p0) * group + g + i) * state_floats;
          head_sums[i] = head_state[i] + 2;
        }
        if (heads == 2) {
          tile_scores<2>(qh, tile_keys, n, head_dim, head_scores);
        } else {
          tile_scores<1>(qh, tile_keys, n, head_dim, head_scores);
        }
        for (int i = 0; i < heads; ++i) softmax_tile_step(head_scores[i], n, shape, head_state[i]);
        if (heads == 2) {
          add_weighted_values<2>(head_scores, tile_values, n, head_dim, head_sums);
        } else {
          add_weighted_values<1>(head_scores, tile_values, n, head_dim, head_sums);
        }
      }
    }
  }
  for (int p = p0; p < p1; ++p) {
    for (int g = 0; g < group; ++g) {
      const int h = kv_head * group + g;
      const float* s = state + static_cast<size_t>((p - p0) * group + g) * state_floats;
      float* o = out + static_cast<size_t>(p - start_pos) * dim + static_cast<size_t>(h * head_dim);
      const float inverse = s[1] == 0.0f ? 0.0f : 1.0f / s[1];
      for (int d = 0; d < head_dim; ++d) o[d] = s[2 + d] * inverse;
    }
  }
}

void attention_tiled(const float* q, int n, int start_pos, const KvCache& cache, int layer,
                     const AttentionShape& shape, float* out, ThreadPool& pool, std::vector<float>& scratch) {
  const size_t per_thread = tiled_scratch_floats(shape);
  scratch.resize(static_cast<size_t>(pool.size()) * per_thread);
  // Tasks: a KV head's heads for up to kQueryTile positions, fewer while that
  // leaves fewer than two tasks per thread.
  int positions = kQueryTile;
  const auto tasks_for = [&](int per_task) {
    return static_cast<size_t>((n + per_task - 1) / per_task) * static_cast<size_t>(shape.n_kv_heads);
  };
  while (positions > 1 && tasks_for(positions) < 2 * static_cast<size_t>(pool.size())) positions /= 2;
  const int per_kv_head = (n + positions - 1) / positions;
  pool.parallel_for(tasks_for(positions), 1, [&](size_t begin, size_t end, int thread) {
    float* own = &scratch[static_cast<size_t>(thread) * per_thread];
    for (size_t task = begin; task < end; ++task) {
      const int kv_head = static_cast<int>(task) / per_kv_head;
      const int p0 = start_pos + static_cast<int>(task) % per_kv_head * positions;
      const int p1 = std::min(p0 + positions, start_pos + n);
      if (cache.type() == KvCacheType::kF32) {
        attend_tiled_task<float>(q, p0, p1, start_pos, kv_head, cache, layer, shape, out, own);
      } else {
        attend_tiled_task<uint16_t>(q, p0, p1, start_pos, kv_head, cache, layer, shape, out, own);
      }
    }
  });
}

template <class T>
void attend_reference_typed(const float* q, int pos, int head, const KvCache& cache, int layer,
                            const AttentionShape& shape, float* out, float* scores, bool round_query) {
  const int head_dim = shape.head_dim;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const int first = shape.first_position(pos);
  const int span = pos + 1 - first;
  auto query = [&](int d) {
    return round_query ? fp16_to_float(float_to_fp16(q[d])) : q[d];
  };
  for (int t = 0; t < span; ++t) {
    const T* k = cache.key<T>(layer, first + t) + kv_offset;
    double s = 0;
    for (int d = 0; d < head_dim; ++d) s += static_cast<double>(query(d)) * element(k, d);
    s *= shape.scale;
    if (shape.softcap > 0) s = shape.softcap * std::tanh(s / shape.softcap);
    scores[t] = static_cast<float>(s);
  }
  softmax_reference(scores, span);
  for (int d = 0; d < head_dim; ++d) {
    double sum = 0;
    for (int t = 0; t < span; ++t) {
      sum += static_cast<double>(scores[t]) * element(cache.value<T>(layer, first + t) + kv_offset, d);
    }
    out[d] = static_cast<float>(sum);
  }
}

}  // namespace

void attend_reference(const float* q, int pos, int head, const KvCache& cache, int layer,
                      const AttentionShape& shape, float* out, float* scores, AttentionPath path) {
  if (cache.type() == KvCacheType::kF16) {
    attend_reference_typed<uint16_t>(q, pos, head, cache, layer, shape, out, scores,
                                     path == AttentionPath::kOneChunk);
  } else {
    attend_reference_typed<float>(q, pos, head, cache, layer, shape, out, scores, false);
  }
}

size_t attention_scratch_floats(const AttentionShape& shape, int context_length, int threads) {
  const int group = std::min(shape.n_heads / shape.n_kv_heads, kMaxGroup);
  const size_t one_chunk = static_cast<size_t>(2 * group) * static_cast<size_t>(context_length);
  return std::max(one_chunk, tiled_scratch_floats(shape)) * static_cast<size_t>(threads);
}

void attention(const float* q, int n, int start_pos, const KvCache& cache, int layer,
               const AttentionShape& shape, float* out, ThreadPool& pool, std::vector<float>& scratch,
               AttentionPath path) {
  if (shape.head_dim > kMaxHeadDim) {
    throw Error(ErrorKind::kUnsupported, "attention heads of " + std::to_string(shape.head_dim) +
                                             " elements are larger than the " + std::to_string(kMaxHeadDim) +
                                             " this engine supports");
  }
  if (path == AttentionPath::kTiled) return attention_tiled(q, n, start_pos, cache, layer, shape, out, pool, scratch);
  const int dim = shape.n_heads * shape.head_dim;
  const auto span = static_cast<size_t>(start_pos + n);
  // A task: a position's heads that share a KV head, at most kMaxGroup of
  // them, and fewer while that leaves fewer than two tasks per thread (a
  // decode step has as few tasks as KV heads). Each head's result is the
  // same in any group.
  const int per_kv_head = shape.n_heads / shape.n_kv_heads;
  int group = std::min(per_kv_head, kMaxGroup);
  const auto groups_per_kv_head = [&] { return (per_kv_head + group - 1) / group; };
  while (group > 1 && static_cast<size_t>(n) * static_cast<size_t>(shape.n_kv_heads * groups_per_kv_head()) <
                          2 * static_cast<size_t>(pool.size())) {
    --group;
  }
  const auto tasks_per_position = static_cast<size_t>(shape.n_kv_heads * groups_per_kv_head());
  // Per thread: a task's scores, and an F16 cache's rescalings of them.
  const size_t scratch_per_thread = static_cast<size_t>(2 * group) * span;
  scratch.resize(static_cast<size_t>(pool.size()) * scratch_per_thread);
  const size_t tasks = static_cast<size_t>(n) * tasks_per_position;
  // Scores and weighted values: two multiply-adds per key and head element.
  const size_t seen = shape.window > 0 ? std::min<size_t>(span, static_cast<size_t>(shape.window)) : span;
  const size_t macs_per_task = 2 * seen * static_cast<size_t>(shape.head_dim) * static_cast<size_t>(group);
  const size_t grain = std::max<size_t>(1, kChunkMacs / macs_per_task);
  pool.parallel_for(tasks, grain, [&](size_t begin, size_t end, int thread) {
    float* scores = &scratch[static_cast<size_t>(thread) * scratch_per_thread];
    for (size_t task = begin; task < end; ++task) {
      const int i = static_cast<int>(task / tasks_per_position);
      const auto in_position = static_cast<int>(task % tasks_per_position);
      const int kv_head = in_position / groups_per_kv_head();
      const int h = kv_head * per_kv_head + in_position % groups_per_kv_head() * group;
      const int n_group = std::min(group, (kv_head + 1) * per_kv_head - h);
      const size_t offset = static_cast<size_t>(i) * static_cast<size_t>(dim) +
                            static_cast<size_t>(h) * static_cast<size_t>(shape.head_dim);
      attend_heads(q + offset, start_pos + i, h, n_group, cache, layer, shape, out + offset, scores);
    }
  });
}

void store_kv(KvCache& cache, int layer, int pos, const float* key, const float* value) {
  const int kv_dim = cache.kv_dim(layer);
  void* k = cache.key_row(layer, pos);
  void* v = cache.value_row(layer, pos);
  if (cache.type() == KvCacheType::kF32) {
    std::memcpy(k, key, static_cast<size_t>(kv_dim) * sizeof(float));
    std::memcpy(v, value, static_cast<size_t>(kv_dim) * sizeof(float));
    return;
  }
  const bool key_non_finite = floats_to_halves(key, static_cast<uint16_t*>(k), kv_dim);
  if (floats_to_halves(value, static_cast<uint16_t*>(v), kv_dim) || key_non_finite) cache.note_non_finite_half();
}

}  // namespace sipllm

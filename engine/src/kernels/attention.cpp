#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kernels/elementwise.h"
#include "kernels/simd.h"
#include "model/half.h"
#include "runtime/thread_pool.h"
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
// and writes rescale[t] (1 where M stayed); returns S.
float online_softmax_weights(float* scores, float* rescale, int span) {
  float max = -INFINITY, sum = 0.0f;
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
    sum = sum * rescale[t] + scores[t];
  }
  return sum;
}

// Elements [d0, d0 + 4 * kVectors) of one head's weighted sum of an F16
// cache's values, as ggml's flash attention computes it (llama.cpp's default
// on a CPU): keys in order, the sum kept in half floats, rounded after every
// rescaling and every key. The sum stays in registers across all keys.
// Rounded with HalfRounding::in_range, and again with the whole rounding
// (kExact) should a sum leave the half floats' range.
template <int kVectors, bool kFinite, bool kExact = false>
void weigh_values_as_ggml_f16_chunk(const float* weight, const float* rescale, int span, const KvCache& cache,
                                    int layer, int first, int offset, const simd::HalfRounding& round_to_f16,
                                    float* out) {
  v128_t largest = wasm_i32x4_splat(0);
  const auto round = [&](v128_t x) { return kExact ? round_to_f16(x) : round_to_f16.in_range(x, largest); };
  v128_t acc[kVectors];
  for (int j = 0; j < kVectors; ++j) acc[j] = wasm_f32x4_splat(0.0f);
  for (int t = 0; t < span; ++t) {
    // Multiplying by 1 would give back the same halves: only a rise of the
    // maximum rescales.
    if (rescale[t] != 1.0f) {
      const v128_t r = wasm_f32x4_splat(rescale[t]);
      for (int j = 0; j < kVectors; ++j) acc[j] = round(wasm_f32x4_mul(acc[j], r));
    }
    const uint16_t* v = cache.value<uint16_t>(layer, first + t) + offset;
    const v128_t w = wasm_f32x4_splat(weight[t] * (kLoadScale<uint16_t, kFinite>));
    for (int j = 0; j < kVectors; ++j) {
      acc[j] = round(wasm_f32x4_add(acc[j], wasm_f32x4_mul(load4<kFinite>(v + 4 * j), w)));
    }
  }
  if constexpr (!kExact) {
    if (round_to_f16.past_range(largest)) {
      return weigh_values_as_ggml_f16_chunk<kVectors, kFinite, true>(weight, rescale, span, cache, layer, first,
                                                                     offset, round_to_f16, out);
    }
  }
  for (int j = 0; j < kVectors; ++j) simd::store(out + 4 * j, acc[j]);
}

// The softmax-weighted sums of an F16 cache's values for a group of heads.
// scores[g * span + t] are head g's raw scores (overwritten with weights);
// rescale has room for span floats; head g's output goes to
// out + g * head_dim.
template <bool kFinite>
void weigh_values_as_ggml_f16(float* scores, float* rescale, int n_group, int span, const KvCache& cache,
                              int layer, int first, int kv_offset, int head_dim, float* out) {
  const simd::HalfRounding round_to_f16;
  const int dim4 = head_dim & ~3, dim16 = head_dim & ~15;
  for (int g = 0; g < n_group; ++g) {
    float* weight = scores + g * span;
    const float sum = online_softmax_weights(weight, rescale, span);
    float* o = out + g * head_dim;
    int d = 0;
    for (; d < dim16; d += 16) {
      weigh_values_as_ggml_f16_chunk<4, kFinite>(weight, rescale, span, cache, layer, first, kv_offset + d,
                                                 round_to_f16, o + d);
    }
    for (; d < dim4; d += 4) {
      weigh_values_as_ggml_f16_chunk<1, kFinite>(weight, rescale, span, cache, layer, first, kv_offset + d,
                                                 round_to_f16, o + d);
    }
    for (; d < head_dim; ++d) {
      float acc = 0.0f;
      for (int t = 0; t < span; ++t) {
        if (rescale[t] != 1.0f) acc = fp16_to_float(float_to_fp16(acc * rescale[t]));
        const float v = element(cache.value<uint16_t>(layer, first + t) + kv_offset, d);
        acc = fp16_to_float(float_to_fp16(acc + v * weight[t]));
      }
      o[d] = acc;
    }
    const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (d = 0; d < head_dim; ++d) o[d] *= inverse;
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
  for (int t = 0; t < span; ++t) {
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
// and out point at the first one's row. `scores` has room for (n_group + 1)
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

template <class T>
void attend_reference_typed(const float* q, int pos, int head, const KvCache& cache, int layer,
                            const AttentionShape& shape, float* out, float* scores) {
  const int head_dim = shape.head_dim;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const int first = shape.first_position(pos);
  const int span = pos + 1 - first;
  auto query = [&](int d) {
    return std::is_same_v<T, uint16_t> ? fp16_to_float(float_to_fp16(q[d])) : q[d];
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
                      const AttentionShape& shape, float* out, float* scores) {
  if (cache.type() == KvCacheType::kF16) {
    attend_reference_typed<uint16_t>(q, pos, head, cache, layer, shape, out, scores);
  } else {
    attend_reference_typed<float>(q, pos, head, cache, layer, shape, out, scores);
  }
}

void attention(const float* q, int n, int start_pos, const KvCache& cache, int layer,
               const AttentionShape& shape, float* out, ThreadPool& pool, std::vector<float>& scratch) {
  if (shape.head_dim > kMaxHeadDim) {
    throw Error(ErrorKind::kUnsupported, "attention heads of " + std::to_string(shape.head_dim) +
                                             " elements are larger than the " + std::to_string(kMaxHeadDim) +
                                             " this engine supports");
  }
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
  // Per thread: a task's scores, and an F16 cache's rescalings.
  const size_t scratch_per_thread = static_cast<size_t>(group + 1) * span;
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

}  // namespace sipllm

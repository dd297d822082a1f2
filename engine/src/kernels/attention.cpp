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

// Four cache elements as floats; kFinite: an F16 cache that holds no
// infinity and no NaN (KvCache::halves_finite), read with fewer operations.
template <bool kFinite>
inline v128_t load4(const float* p) {
  return simd::load(p);
}
template <bool kFinite>
inline v128_t load4(const uint16_t* p) {
  return kFinite ? simd::load_finite_fp16x4(p) : simd::load_fp16x4(p);
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

// The softmax-weighted sum of an F16 cache's values as ggml's flash attention
// computes it (llama.cpp's default on a CPU): keys in order, a running
// maximum M and sum S, and the weighted sum kept in half floats, rounded
// after every key. `scores` are the raw (scaled, capped) scores.
template <bool kFinite>
void weigh_values_as_ggml_f16(const float* scores, int span, const KvCache& cache, int layer, int first,
                              int kv_offset, int head_dim, float* out) {
  alignas(16) float acc[kMaxHeadDim] = {};  // values a half float can hold
  const int dim4 = head_dim & ~3;
  float max = -INFINITY, sum = 0.0f;
  for (int t = 0; t < span; ++t) {
    float rescale = 1.0f, weight = 1.0f;
    if (scores[t] > max) {
      rescale = std::exp(max - scores[t]);
      max = scores[t];
      for (int d = 0; d < dim4; d += 4) {
        simd::store(acc + d, simd::round_to_f16(wasm_f32x4_mul(simd::load(acc + d), wasm_f32x4_splat(rescale))));
      }
      for (int d = dim4; d < head_dim; ++d) acc[d] = fp16_to_float(float_to_fp16(acc[d] * rescale));
    } else {
      weight = std::exp(scores[t] - max);
    }
    const uint16_t* v = cache.value<uint16_t>(layer, first + t) + kv_offset;
    const v128_t w = wasm_f32x4_splat(weight);
    for (int d = 0; d < dim4; d += 4) {
      simd::store(acc + d, simd::round_to_f16(wasm_f32x4_add(simd::load(acc + d), wasm_f32x4_mul(load4<kFinite>(v + d), w))));
    }
    for (int d = dim4; d < head_dim; ++d) acc[d] = fp16_to_float(float_to_fp16(acc[d] + element(v, d) * weight));
    sum = sum * rescale + weight;
  }
  const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int d = 0; d < head_dim; ++d) out[d] = acc[d] * inverse;
}

template <class T, bool kFinite>
void attend_typed(const float* q_in, int pos, int head, const KvCache& cache, int layer,
                  const AttentionShape& shape, float* out, float* scores) {
  const int head_dim = shape.head_dim;
  const int dim4 = head_dim & ~3;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const int first = shape.first_position(pos);
  const int span = pos + 1 - first;

  const float* q = q_in;
  alignas(16) float rounded[kMaxHeadDim];
  if (std::is_same_v<T, uint16_t>) {
    for (int d = 0; d < head_dim; ++d) rounded[d] = fp16_to_float(float_to_fp16(q_in[d]));
    q = rounded;
  }

  // Scores, four keys at a time: one accumulator per key, reduced together.
  // scores[t] belongs to position first + t.
  int t = 0;
  for (; t + 4 <= span; t += 4) {
    const T* k[4];
    v128_t acc[4];
    for (int j = 0; j < 4; ++j) {
      k[j] = cache.key<T>(layer, first + t + j) + kv_offset;
      acc[j] = wasm_f32x4_splat(0.0f);
    }
    for (int d = 0; d < dim4; d += 4) {
      const v128_t qv = simd::load(q + d);
      for (int j = 0; j < 4; ++j) acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(qv, load4<kFinite>(k[j] + d)));
    }
    alignas(16) float dots[4];
    simd::store(dots, simd::transpose_sum_f32(acc[0], acc[1], acc[2], acc[3]));
    for (int j = 0; j < 4; ++j) scores[t + j] = dot_tail(q, k[j], dim4, head_dim, dots[j]) * shape.scale;
  }
  for (; t < span; ++t) {
    const T* k = cache.key<T>(layer, first + t) + kv_offset;
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int d = 0; d < dim4; d += 4) acc = wasm_f32x4_add(acc, wasm_f32x4_mul(simd::load(q + d), load4<kFinite>(k + d)));
    scores[t] = dot_tail(q, k, dim4, head_dim, simd::sum_f32(acc)) * shape.scale;
  }

  if (shape.softcap > 0) softcap(scores, span, shape.softcap);
  if constexpr (std::is_same_v<T, uint16_t>) {
    weigh_values_as_ggml_f16<kFinite>(scores, span, cache, layer, first, kv_offset, head_dim, out);
  } else {
    softmax(scores, span);
    weigh_values(scores, span, cache, layer, first, kv_offset, head_dim, out);
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

void attend(const float* q, int pos, int head, const KvCache& cache, int layer,
            const AttentionShape& shape, float* out, float* scores) {
  if (cache.type() == KvCacheType::kF32) {
    attend_typed<float, true>(q, pos, head, cache, layer, shape, out, scores);
  } else if (cache.halves_finite()) {
    attend_typed<uint16_t, true>(q, pos, head, cache, layer, shape, out, scores);
  } else {
    attend_typed<uint16_t, false>(q, pos, head, cache, layer, shape, out, scores);
  }
}

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
  scratch.resize(static_cast<size_t>(pool.size()) * span);
  const size_t tasks = static_cast<size_t>(n) * static_cast<size_t>(shape.n_heads);
  // Scores and weighted values: two multiply-adds per key and head element.
  const size_t seen = shape.window > 0 ? std::min<size_t>(span, static_cast<size_t>(shape.window)) : span;
  const size_t macs_per_task = 2 * seen * static_cast<size_t>(shape.head_dim);
  const size_t grain = std::max<size_t>(1, kChunkMacs / macs_per_task);
  pool.parallel_for(tasks, grain, [&](size_t begin, size_t end, int thread) {
    float* scores = &scratch[static_cast<size_t>(thread) * span];
    for (size_t task = begin; task < end; ++task) {
      const int i = static_cast<int>(task / static_cast<size_t>(shape.n_heads));
      const int h = static_cast<int>(task % static_cast<size_t>(shape.n_heads));
      const size_t offset = static_cast<size_t>(i) * static_cast<size_t>(dim) +
                            static_cast<size_t>(h) * static_cast<size_t>(shape.head_dim);
      attend(q + offset, start_pos + i, h, cache, layer, shape, out + offset, scores);
    }
  });
}

}  // namespace sipllm

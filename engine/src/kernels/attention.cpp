#include "kernels/attention.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/simd.h"
#include "runtime/thread_pool.h"

namespace sipllm {
namespace {

// Multiply-adds per chunk of (position, head) pairs given to a thread; less
// work than one chunk in total runs on the calling thread.
constexpr size_t kChunkMacs = 1 << 16;

// Adds the products of elements [from, n) to `sum`, one by one: the tail of
// a dot product whose first elements went four lanes at a time.
float dot_tail(const float* q, const float* k, int from, int n, float sum) {
  for (int d = from; d < n; ++d) sum += q[d] * k[d];
  return sum;
}

}  // namespace

void attend(const float* q, int pos, int head, const KvCache& cache, int layer,
            const AttentionShape& shape, float* out, float* scores) {
  const int head_dim = shape.head_dim;
  const int dim4 = head_dim & ~3;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int span = pos + 1;

  // Scores, four keys at a time: one accumulator per key, reduced together.
  int t = 0;
  for (; t + 4 <= span; t += 4) {
    const float* k[4];
    v128_t acc[4];
    for (int j = 0; j < 4; ++j) {
      k[j] = cache.key(layer, t + j) + kv_offset;
      acc[j] = wasm_f32x4_splat(0.0f);
    }
    for (int d = 0; d < dim4; d += 4) {
      const v128_t qv = simd::load(q + d);
      for (int j = 0; j < 4; ++j) acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(qv, simd::load(k[j] + d)));
    }
    alignas(16) float dots[4];
    simd::store(dots, simd::transpose_sum_f32(acc[0], acc[1], acc[2], acc[3]));
    for (int j = 0; j < 4; ++j) scores[t + j] = dot_tail(q, k[j], dim4, head_dim, dots[j]) * scale;
  }
  for (; t < span; ++t) {
    const float* k = cache.key(layer, t) + kv_offset;
    v128_t acc = wasm_f32x4_splat(0.0f);
    for (int d = 0; d < dim4; d += 4) acc = wasm_f32x4_add(acc, wasm_f32x4_mul(simd::load(q + d), simd::load(k + d)));
    scores[t] = dot_tail(q, k, dim4, head_dim, simd::sum_f32(acc)) * scale;
  }

  softmax(scores, span);

  // out = sum_t scores[t] * v_t, in order of t, 16 floats of the head at a time.
  for (int d0 = 0; d0 < dim4; d0 += 16) {
    const int width = std::min(16, dim4 - d0);
    v128_t acc[4] = {wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f), wasm_f32x4_splat(0.0f),
                     wasm_f32x4_splat(0.0f)};
    for (int tt = 0; tt < span; ++tt) {
      const float* v = cache.value(layer, tt) + kv_offset + d0;
      const v128_t a = wasm_f32x4_splat(scores[tt]);
      for (int j = 0; j < width / 4; ++j) acc[j] = wasm_f32x4_add(acc[j], wasm_f32x4_mul(a, simd::load(v + 4 * j)));
    }
    for (int j = 0; j < width / 4; ++j) simd::store(out + d0 + 4 * j, acc[j]);
  }
  for (int d = dim4; d < head_dim; ++d) {
    float sum = 0.0f;
    for (int tt = 0; tt < span; ++tt) sum += scores[tt] * cache.value(layer, tt)[kv_offset + d];
    out[d] = sum;
  }
}

void attend_reference(const float* q, int pos, int head, const KvCache& cache, int layer,
                      const AttentionShape& shape, float* out, float* scores) {
  const int head_dim = shape.head_dim;
  const int kv_offset = (head / (shape.n_heads / shape.n_kv_heads)) * head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  for (int t = 0; t <= pos; ++t) {
    const float* k = cache.key(layer, t) + kv_offset;
    double s = 0;
    for (int d = 0; d < head_dim; ++d) s += static_cast<double>(q[d]) * k[d];
    scores[t] = static_cast<float>(s * scale);
  }
  softmax_reference(scores, pos + 1);
  for (int d = 0; d < head_dim; ++d) {
    double sum = 0;
    for (int t = 0; t <= pos; ++t) sum += static_cast<double>(scores[t]) * cache.value(layer, t)[kv_offset + d];
    out[d] = static_cast<float>(sum);
  }
}

void attention(const float* q, int n, int start_pos, const KvCache& cache, int layer,
               const AttentionShape& shape, float* out, ThreadPool& pool, std::vector<float>& scratch) {
  const int dim = shape.n_heads * shape.head_dim;
  const auto span = static_cast<size_t>(start_pos + n);
  scratch.resize(static_cast<size_t>(pool.size()) * span);
  const size_t tasks = static_cast<size_t>(n) * static_cast<size_t>(shape.n_heads);
  // Scores and weighted values: two multiply-adds per key and head element.
  const size_t macs_per_task = 2 * span * static_cast<size_t>(shape.head_dim);
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

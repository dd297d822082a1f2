#include "runtime/transformer.h"

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"

namespace sipllm {
namespace {

// Elements of per-position work (norms, rope, SwiGLU) below which a chunk's
// positions are processed on the calling thread alone.
constexpr size_t kParallelElements = 1 << 14;

}  // namespace

Transformer::Transformer(const ModelLayout& layout, LayerLoader& loader, ThreadPool& pool,
                         int prefill_chunk)
    : layout_(layout),
      config_(layout.config),
      loader_(loader),
      pool_(pool),
      chunk_(std::max(1, prefill_chunk)) {}

void Transformer::prefill(const int32_t* tokens, int n, int start_pos, KvCache& cache,
                          std::vector<float>& logits, bool all_positions) {
  const int n_layers = config_.n_layers;
  const int n_chunks = (n + chunk_ - 1) / chunk_;

  // Tell the loader the whole sequence of units up front, so it can prefetch
  // across chunk boundaries too.
  std::vector<int> plan;
  for (int c = 0; c < n_chunks; ++c) {
    for (int l = 0; l < n_layers; ++l) plan.push_back(l);
    if (all_positions || c == n_chunks - 1) {
      for (int u = layout_.first_head_unit(); u < layout_.n_units(); ++u) plan.push_back(u);
    }
  }
  loader_.announce(plan);

  const auto dim = static_cast<size_t>(config_.dim);
  const auto vocab = static_cast<size_t>(config_.n_vocab);
  logits.assign(all_positions ? static_cast<size_t>(n) * vocab : vocab, 0.0f);

  for (int c = 0; c < n_chunks; ++c) {
    const int first = c * chunk_;
    const int m = std::min(chunk_, n - first);
    const int pos0 = start_pos + first;
    cache.reserve(pos0 + m);

    const size_t rows = static_cast<size_t>(m);
    x_.resize(rows * dim);
    xb_.resize(rows * dim);
    q_.resize(rows * dim);
    k_.resize(rows * static_cast<size_t>(config_.kv_dim()));
    v_.resize(rows * static_cast<size_t>(config_.kv_dim()));
    att_out_.resize(rows * dim);
    proj_.resize(rows * dim);
    gate_.resize(rows * static_cast<size_t>(config_.hidden_dim));
    up_.resize(rows * static_cast<size_t>(config_.hidden_dim));
    const size_t rope_table = 2 * static_cast<size_t>(config_.rope_dims);
    rope_tables_.resize(rows * rope_table);
    for (int i = 0; i < m; ++i) {
      rope_angles(pos0 + i, config_.rope_dims, config_.rope_freq_base, &rope_tables_[static_cast<size_t>(i) * rope_table]);
    }

    loader_.embed(tokens + first, m, x_.data());

    for (int l = 0; l < n_layers; ++l) {
      const UnitView& w = loader_.acquire(l);
      run_block(l, w, m, pos0, cache);
      loader_.release(l);
    }

    if (all_positions) {
      run_head(0, m, &logits[static_cast<size_t>(first) * vocab]);
    } else if (c == n_chunks - 1) {
      run_head(m - 1, 1, logits.data());
    }
  }
}

template <class Fn>
void Transformer::for_each_position(int n, int width, const Fn& fn) {
  const size_t per_chunk = std::max<size_t>(1, kParallelElements / static_cast<size_t>(width));
  pool_.parallel_for(static_cast<size_t>(n), per_chunk, [&](size_t begin, size_t end, int) {
    for (size_t i = begin; i < end; ++i) fn(static_cast<int>(i));
  });
}

void Transformer::run_block(int layer, const UnitView& w, int n, int start_pos, KvCache& cache) {
  const int dim = config_.dim;
  const int kv_dim = config_.kv_dim();
  const int hidden = config_.hidden_dim;
  const auto at = [](std::vector<float>& v, int row, int width) {
    return &v[static_cast<size_t>(row) * static_cast<size_t>(width)];
  };

  // Attention.
  for_each_position(n, dim, [&](int i) {
    rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.vectors[kAttnNorm], dim, config_.rms_eps);
  });
  activations_.reset(xb_.data(), n, dim);
  matmul(w.matrices[kAttnQ], activations_, q_.data(), pool_);
  matmul(w.matrices[kAttnK], activations_, k_.data(), pool_);
  matmul(w.matrices[kAttnV], activations_, v_.data(), pool_);
  for_each_position(n, dim + kv_dim, [&](int i) {
    const int pos = start_pos + i;
    const float* table = at(rope_tables_, i, 2 * config_.rope_dims);
    rope_rotate(at(q_, i, dim), config_.n_heads, config_.head_dim, config_.rope_dims, table);
    rope_rotate(at(k_, i, kv_dim), config_.n_kv_heads, config_.head_dim, config_.rope_dims, table);
    std::copy_n(at(k_, i, kv_dim), kv_dim, cache.key(layer, pos));
    std::copy_n(at(v_, i, kv_dim), kv_dim, cache.value(layer, pos));
  });
  const AttentionShape shape{config_.n_heads, config_.n_kv_heads, config_.head_dim};
  attention(q_.data(), n, start_pos, cache, layer, shape, att_out_.data(), pool_, scores_);
  activations_.reset(att_out_.data(), n, dim);
  matmul(w.matrices[kAttnOutput], activations_, proj_.data(), pool_);
  for_each_position(n, dim, [&](int i) { add_in_place(at(x_, i, dim), at(proj_, i, dim), dim); });

  // Feed-forward.
  for_each_position(n, dim, [&](int i) {
    rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.vectors[kFfnNorm], dim, config_.rms_eps);
  });
  activations_.reset(xb_.data(), n, dim);
  matmul(w.matrices[kFfnGate], activations_, gate_.data(), pool_);
  matmul(w.matrices[kFfnUp], activations_, up_.data(), pool_);
  for_each_position(n, hidden, [&](int i) { swiglu(at(gate_, i, hidden), at(up_, i, hidden), hidden); });
  activations_.reset(gate_.data(), n, hidden);
  matmul(w.matrices[kFfnDown], activations_, proj_.data(), pool_);
  for_each_position(n, dim, [&](int i) { add_in_place(at(x_, i, dim), at(proj_, i, dim), dim); });
}

void Transformer::run_head(int first, int count, float* logits) {
  const int dim = config_.dim;
  int row = 0;
  for (int u = layout_.first_head_unit(); u < layout_.n_units(); ++u) {
    const UnitView& w = loader_.acquire(u);
    if (u == layout_.first_head_unit()) {
      for (int i = 0; i < count; ++i) {
        rmsnorm(&xb_[static_cast<size_t>(i) * dim], &x_[static_cast<size_t>(first + i) * dim],
                w.vectors[kOutputNorm], dim, config_.rms_eps);
      }
    }
    if (u == layout_.first_head_unit()) activations_.reset(xb_.data(), count, dim);
    // This piece's rows of every position's logits.
    const WeightMatrix& output = w.matrices[kOutput];
    matmul(output, activations_, logits + row, pool_, config_.n_vocab);
    row += output.rows;
    loader_.release(u);
  }
}

}  // namespace sipllm

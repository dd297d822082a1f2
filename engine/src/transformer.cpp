#include "transformer.h"

#include <algorithm>
#include <cmath>

#include "kernels.h"

namespace sipllm {

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

    for (int i = 0; i < m; ++i) loader_.embed(tokens[first + i], &x_[static_cast<size_t>(i) * dim]);

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

void Transformer::run_block(int layer, const UnitView& w, int n, int start_pos, KvCache& cache) {
  const int dim = config_.dim;
  const int kv_dim = config_.kv_dim();
  const int hidden = config_.hidden_dim;
  const auto at = [](std::vector<float>& v, int row, int width) {
    return &v[static_cast<size_t>(row) * static_cast<size_t>(width)];
  };

  // Attention.
  for (int i = 0; i < n; ++i) {
    rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.vectors[kAttnNorm], dim, config_.rms_eps);
  }
  matmul(w.matrices[kAttnQ], xb_.data(), n, q_.data(), pool_);
  matmul(w.matrices[kAttnK], xb_.data(), n, k_.data(), pool_);
  matmul(w.matrices[kAttnV], xb_.data(), n, v_.data(), pool_);
  for (int i = 0; i < n; ++i) {
    const int pos = start_pos + i;
    rope(at(q_, i, dim), config_.n_heads, config_.head_dim, config_.rope_dims, pos, config_.rope_freq_base);
    rope(at(k_, i, kv_dim), config_.n_kv_heads, config_.head_dim, config_.rope_dims, pos,
         config_.rope_freq_base);
    std::copy_n(at(k_, i, kv_dim), kv_dim, cache.key(layer, pos));
    std::copy_n(at(v_, i, kv_dim), kv_dim, cache.value(layer, pos));
  }
  attention(layer, n, start_pos, cache);
  matmul(w.matrices[kAttnOutput], att_out_.data(), n, proj_.data(), pool_);
  for (size_t j = 0; j < static_cast<size_t>(n) * static_cast<size_t>(dim); ++j) x_[j] += proj_[j];

  // Feed-forward.
  for (int i = 0; i < n; ++i) {
    rmsnorm(at(xb_, i, dim), at(x_, i, dim), w.vectors[kFfnNorm], dim, config_.rms_eps);
  }
  matmul(w.matrices[kFfnGate], xb_.data(), n, gate_.data(), pool_);
  matmul(w.matrices[kFfnUp], xb_.data(), n, up_.data(), pool_);
  for (int i = 0; i < n; ++i) swiglu(at(gate_, i, hidden), at(up_, i, hidden), hidden);
  matmul(w.matrices[kFfnDown], gate_.data(), n, proj_.data(), pool_);
  for (size_t j = 0; j < static_cast<size_t>(n) * static_cast<size_t>(dim); ++j) x_[j] += proj_[j];
}

void Transformer::attention(int layer, int n, int start_pos, const KvCache& cache) {
  const int n_heads = config_.n_heads;
  const int head_dim = config_.head_dim;
  const int group = n_heads / config_.n_kv_heads;
  const int dim = config_.dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const auto span = static_cast<size_t>(start_pos + n);
  scores_.resize(static_cast<size_t>(pool_.size()) * span);

  pool_.parallel_for(static_cast<size_t>(n) * static_cast<size_t>(n_heads), 1,
                     [&](size_t begin, size_t end, int thread) {
    float* scores = &scores_[static_cast<size_t>(thread) * span];
    for (size_t task = begin; task < end; ++task) {
      const int i = static_cast<int>(task / static_cast<size_t>(n_heads));
      const int h = static_cast<int>(task % static_cast<size_t>(n_heads));
      const int pos = start_pos + i;
      const int kv_offset = (h / group) * head_dim;
      const float* q = &q_[static_cast<size_t>(i) * dim + static_cast<size_t>(h) * head_dim];
      for (int t = 0; t <= pos; ++t) {
        const float* k = cache.key(layer, t) + kv_offset;
        float s = 0;
        for (int d = 0; d < head_dim; ++d) s += q[d] * k[d];
        scores[t] = s * scale;
      }
      softmax(scores, pos + 1);
      float* out = &att_out_[static_cast<size_t>(i) * dim + static_cast<size_t>(h) * head_dim];
      std::fill_n(out, head_dim, 0.0f);
      for (int t = 0; t <= pos; ++t) {
        const float* v = cache.value(layer, t) + kv_offset;
        const float a = scores[t];
        for (int d = 0; d < head_dim; ++d) out[d] += a * v[d];
      }
    }
  });
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
    // This piece's rows of every position's logits.
    const WeightMatrix& output = w.matrices[kOutput];
    matmul(output, xb_.data(), count, logits + row, pool_, config_.n_vocab);
    row += output.rows;
    loader_.release(u);
  }
}

}  // namespace sipllm

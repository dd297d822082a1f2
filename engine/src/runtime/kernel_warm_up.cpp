#include "runtime/kernel_warm_up.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "runtime/layer_loader.h"
#include "core/thread_pool.h"

namespace sipllm {

KernelWarmUp::KernelWarmUp(const ModelDescription& model, KvCacheType kv_cache_type, bool unpack_5bit)
    : model_(model), shape_(model.shape), cache_(1, model.shape.kv_dim(), kPositions, kv_cache_type) {
  rope_.dims = shape_.rope_dims;
  rope_.style = model.family->rope_style;
  rope_.freq_base = shape_.rope_freq_base;
  std::set<std::pair<TensorType, int>> shapes;
  for (const UnitTensors& unit : model.units) {
    for (const TensorSlice& slice : unit.tensors) {
      const GgufTensorInfo* t = slice.tensor;
      if (slice.spec->is_vector() || find_matmul_kernel(t->type) == nullptr) continue;
      // In the type the loader keeps it in.
      shapes.emplace(unpack_5bit ? unpacked_type(t->type) : t->type, static_cast<int>(t->row_length()));
    }
  }
  int max_cols = std::max({shape_.dim, shape_.q_dim(), shape_.hidden_dim});
  for (const auto& [type, cols] : shapes) {
    Matrix m;
    m.w.type = type;
    m.w.rows = kRows;
    m.w.cols = cols;
    m.w.row_bytes =
        static_cast<size_t>(tensor_bytes(tensor_type_traits(type), static_cast<uint64_t>(cols)));
    m.bytes.resize(m.w.row_bytes * kRows);
    // One row quantized, copied to the others: the kernels' work does not
    // depend on the values, and quantizing every row (K-quants search for
    // their scales) took tens of ms on first-run code, which a request that
    // comes right behind the load would wait for.
    std::vector<float> row(static_cast<size_t>(cols));
    fill(row);
    quantize_row(type, row.data(), m.bytes.data(), row.size());
    for (int r = 1; r < kRows; ++r) {
      std::copy_n(m.bytes.data(), m.w.row_bytes, m.bytes.data() + static_cast<size_t>(r) * m.w.row_bytes);
    }
    m.w.data = m.bytes.data();
    m.w = tile_rows(m.w, m.bytes.data());  // as the loader leaves the model's
    matrices_.push_back(std::move(m));
    max_cols = std::max(max_cols, cols);
  }
  const auto positions = static_cast<size_t>(kPositions);
  input_.resize(positions * static_cast<size_t>(max_cols));
  fill(input_);
  x_.resize(input_.size());
  y_.resize(positions * kRows);
  norm_.resize(static_cast<size_t>(shape_.dim));
  fill(norm_);
  xb_.resize(positions * static_cast<size_t>(shape_.dim));
  q_.resize(positions * static_cast<size_t>(shape_.q_dim()));
  k_.resize(positions * static_cast<size_t>(shape_.kv_dim()));
  att_out_.resize(q_.size());
  gate_.resize(positions * static_cast<size_t>(shape_.hidden_dim));
  up_.resize(gate_.size());
  rope_table_.resize(2 * static_cast<size_t>(shape_.rope_dims));
  fill(q_);
  fill(k_);
  fill(up_);
  cache_.reserve(kPositions);
  const auto kv_dim = static_cast<size_t>(shape_.kv_dim());
  for (int pos = 0; pos < kPositions; ++pos) {
    const float* row = &k_[static_cast<size_t>(pos) * kv_dim];
    store_kv(cache_, 0, pos, row, row);
  }
  const GgufTensorInfo* embd = model.token_embd;
  if (embd != nullptr && embd->row_length() == static_cast<uint64_t>(shape_.dim)) {
    embd_type_ = embd->type;
    std::vector<float> row(static_cast<size_t>(shape_.dim));
    fill(row);
    embd_row_.resize(static_cast<size_t>(tensor_bytes(tensor_type_traits(embd->type), row.size())));
    quantize_row(embd->type, row.data(), embd_row_.data(), row.size());
  }
}

void KernelWarmUp::run_round(ThreadPool& pool, const std::function<bool()>& stop) {
  const int dim = shape_.dim;
  const int q_dim = shape_.q_dim();
  const int kv_dim = shape_.kv_dim();
  const int hidden = shape_.hidden_dim;
  const auto at = [](std::vector<float>& v, int row, int width) {
    return &v[static_cast<size_t>(row) * static_cast<size_t>(width)];
  };
  std::copy(input_.begin(), input_.end(), x_.begin());
  for (const int n : {kPositions, 1}) {
    for (const Matrix& m : matrices_) {
      if (stop()) return;
      activations_.reset(x_.data(), n, m.w.cols);
      matmul(m.w, activations_, y_.data(), pool);
    }
  }
  if (stop()) return;
  for (int i = 0; i < kPositions; ++i) {
    rmsnorm(at(xb_, i, dim), at(x_, i, dim), norm_.data(), dim, shape_.rms_eps);
    rope_table(i, rope_, rope_table_.data());
    rope_rotate(at(q_, i, q_dim), shape_.n_heads, shape_.head_dim, rope_, rope_table_.data());
    rope_rotate(at(k_, i, kv_dim), shape_.n_kv_heads, shape_.head_dim, rope_, rope_table_.data());
    if (model_.family->feed_forward == FeedForward::kGeluTanh) {
      gelu_tanh_glu(at(gate_, i, hidden), at(up_, i, hidden), hidden);
    } else {
      swiglu(at(gate_, i, hidden), at(up_, i, hidden), hidden);
    }
    add_in_place(at(x_, i, dim), at(xb_, i, dim), dim);
  }
  AttentionShape shape;
  shape.n_heads = shape_.n_heads;
  shape.n_kv_heads = shape_.n_kv_heads;
  shape.head_dim = shape_.head_dim;
  shape.scale = shape_.attention_scale;
  shape.softcap = shape_.attn_softcap;
  attention(q_.data(), kPositions, 0, cache_, 0, shape, att_out_.data(), pool, scores_, AttentionPath::kTiled);
  attention(q_.data(), 1, kPositions - 1, cache_, 0, shape, att_out_.data(), pool, scores_);
  if (!embd_row_.empty()) {
    dequantize_row(embd_type_, embd_row_.data(), x_.data(), static_cast<size_t>(dim));
  }
}

void KernelWarmUp::fill(std::vector<float>& v) {
  for (float& f : v) {
    seed_ = seed_ * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(seed_)) * (1.0f / 2147483648.0f);
  }
}

}  // namespace sipllm

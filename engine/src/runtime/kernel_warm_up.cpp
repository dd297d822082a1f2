#include "runtime/kernel_warm_up.h"

#include <algorithm>
#include <map>
#include <string>

#include "core/thread_pool.h"

namespace sipllm {
namespace {

}  // namespace

std::vector<int> KernelWarmUp::one_layer_of_each_kind(const ModelDescription& model, const MemoryPlan& plan) {
  std::map<std::string, int> first;
  for (int l = 0; l < model.shape.n_layers; ++l) {
    const LayerShape& layer = model.layers[static_cast<size_t>(l)];
    std::string kind = std::to_string(static_cast<int>(layer.kind)) + "/" + std::to_string(layer.sliding_window) +
                       "/" + std::to_string(layer.rotary) + "/" + std::to_string(layer.kv_source == l);
    const auto add_tensors = [&](int unit) {
      for (const TensorSlice& slice : model.units[static_cast<size_t>(unit)].tensors) {
        if (slice.tensor == nullptr) continue;
        kind += "/" + slice.spec->name + ":" + std::to_string(static_cast<int>(prepared_type(slice, plan.unpack_5bit)));
      }
    };
    add_tensors(l);
    if (layer.experts) add_tensors(model.expert_unit(l, 0));
    first.emplace(kind, l);
  }
  std::vector<int> layers;
  for (const auto& [kind, layer] : first) layers.push_back(layer);
  std::sort(layers.begin(), layers.end());
  return layers;
}

namespace {

// The layers whose cache and state the warm-up needs: those it runs, and
// the layers whose keys they attend over.
std::vector<bool> layers_kept(const ModelDescription& model, const std::vector<int>& layers) {
  std::vector<bool> kept(model.layers.size(), false);
  for (int l : layers) {
    kept[static_cast<size_t>(l)] = true;
    kept[static_cast<size_t>(model.layers[static_cast<size_t>(l)].kv_source)] = true;
  }
  return kept;
}

std::vector<int> kept_kv_dims(const ModelDescription& model, const std::vector<bool>& kept) {
  std::vector<int> dims = model.layer_kv_dims();
  for (size_t l = 0; l < dims.size(); ++l) {
    if (!kept[l]) dims[l] = 0;
  }
  return dims;
}

}  // namespace

KernelWarmUp::KernelWarmUp(const ModelDescription& model, const MemoryPlan& plan, KvCacheType kv_cache_type,
                           Transformer& transformer)
    : model_(model),
      transformer_(transformer),
      positions_(std::min(kPositions, plan.prefill_chunk)),
      layers_(one_layer_of_each_kind(model, plan)),
      cache_(kept_kv_dims(model, layers_kept(model, layers_)), positions_ + 1, kv_cache_type),
      state_(model, layers_kept(model, layers_)) {
  const ModelShape& shape = model.shape;
  // A unit's weights, synthetic: vectors whole, each matrix cut to a few
  // rows (the kernels' work per row does not depend on how many there are,
  // and the rest of its output keeps whatever the activations held).
  const auto synthetic = [&](int unit, int layer) {
    UnitWeights weights;
    for (const TensorSlice& slice : model.units[static_cast<size_t>(unit)].tensors) {
      if (slice.tensor == nullptr) continue;
      const TensorSpec& spec = *slice.spec;
      if (spec.is_vector()) {
        std::vector<float>& v = vectors_.emplace_back(static_cast<size_t>(slice.tensor->elements));
        fill(v.data(), v.size());
        weights.*spec.vector = v.data();
        continue;
      }
      const TensorType type = prepared_type(slice, plan.unpack_5bit);
      const auto cols = static_cast<int>(slice.tensor->row_length());
      for (const TensorSpec::RowRange& part : spec.matrices) {
        const uint64_t rows = spec.matrices.size() == 1
                                  ? slice.rows
                                  : shape.size(part.rows, model.layers[static_cast<size_t>(layer)]);
        weights.*part.matrix = make_matrix(type, static_cast<int>(std::min<uint64_t>(rows, kRows)), cols);
      }
    }
    return weights;
  };
  for (int layer : layers_) {
    Block block{layer, synthetic(layer, layer), UnitWeights{}};
    // An expert layer's experts: one synthetic expert stands for each.
    if (model.layers[static_cast<size_t>(layer)].experts) block.expert = synthetic(model.expert_unit(layer, 0), layer);
    blocks_.push_back(block);
  }
  for (int u = model.first_head_unit(); u < model.end_head_unit(); ++u) {
    for (const TensorSlice& slice : model.units[static_cast<size_t>(u)].tensors) {
      if (slice.tensor == nullptr || slice.spec->is_vector()) continue;
      const TensorType type = prepared_type(slice, plan.unpack_5bit);
      const auto cols = static_cast<int>(slice.tensor->row_length());
      const bool seen = std::any_of(head_.begin(), head_.end(),
                                    [&](const WeightMatrix& m) { return m.type == type && m.cols == cols; });
      if (!seen) head_.push_back(make_matrix(type, static_cast<int>(std::min<uint64_t>(slice.rows, kRows)), cols));
    }
  }
  input_.resize(static_cast<size_t>(positions_) * static_cast<size_t>(shape.dim));
  fill(input_.data(), input_.size());
  logits_.resize(static_cast<size_t>(positions_) * kRows);
  cache_.reserve(positions_ + 1);
  const GgufTensorInfo* embd = model.token_embd;
  if (embd != nullptr && embd->row_length() == static_cast<uint64_t>(shape.dim)) {
    embd_type_ = embd->type;
    std::vector<float> row(static_cast<size_t>(shape.dim));
    fill(row.data(), row.size());
    embd_row_.resize(static_cast<size_t>(tensor_bytes(tensor_type_traits(embd->type), row.size())));
    quantize_row(embd->type, row.data(), embd_row_.data(), row.size());
  }
}

WeightMatrix KernelWarmUp::make_matrix(TensorType type, int rows, int cols) {
  Matrix& m = matrices_.emplace_back();
  m.w.type = type;
  m.w.rows = rows;
  m.w.cols = cols;
  m.w.row_bytes = static_cast<size_t>(tensor_bytes(tensor_type_traits(type), static_cast<uint64_t>(cols)));
  m.bytes.resize(m.w.row_bytes * static_cast<size_t>(rows));
  // One row quantized, copied to the others: the kernels' work does not
  // depend on the values, and quantizing every row (K-quants search for
  // their scales) took tens of ms on first-run code, which a request that
  // comes right behind the load would wait for.
  std::vector<float> row(static_cast<size_t>(cols));
  fill(row.data(), row.size());
  quantize_row(type, row.data(), m.bytes.data(), row.size());
  for (int r = 1; r < rows; ++r) {
    std::copy_n(m.bytes.data(), m.w.row_bytes, m.bytes.data() + static_cast<size_t>(r) * m.w.row_bytes);
  }
  m.w.data = m.bytes.data();
  m.w = tile_rows(m.w, m.bytes.data());  // as the loader leaves the model's
  return m.w;
}

void KernelWarmUp::run_round(ThreadPool& pool, const std::function<bool()>& stop) {
  // From a clean state each round, so that repeated rounds stay finite.
  state_.clear(true);
  for (const Block& block : blocks_) {
    if (stop()) return;
    transformer_.run_synthetic_block(block.layer, block.weights, &block.expert, input_.data(), positions_, 0, cache_, state_, pool);
    if (stop()) return;
    transformer_.run_synthetic_block(block.layer, block.weights, &block.expert, input_.data(), 1, positions_, cache_, state_, pool);
  }
  for (const int n : {positions_, 1}) {
    for (const WeightMatrix& m : head_) {
      if (stop()) return;
      activations_.reset(input_.data(), n, m.cols);
      matmul(m, activations_, logits_.data(), pool);
    }
  }
  if (!embd_row_.empty()) {
    dequantize_row(embd_type_, embd_row_.data(), logits_.data(), static_cast<size_t>(model_.shape.dim));
  }
}

void KernelWarmUp::fill(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    seed_ = seed_ * 1664525u + 1013904223u;
    v[i] = static_cast<float>(static_cast<int32_t>(seed_)) * (1.0f / 2147483648.0f);
  }
}

}  // namespace sipllm

// Runs a model's own forward pass on synthetic weights, so that where code
// is compiled in tiers as it runs (WebAssembly in a browser starts on
// baseline code) the slow first runs happen before the first request rather
// than during it. See Engine::warm_up.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/kv_cache.h"
#include "kernels/activation_quant.h"
#include "kernels/matmul.h"
#include "model/model_description.h"
#include "runtime/memory_plan.h"
#include "runtime/recurrent_state.h"
#include "runtime/transformer.h"

namespace sipllm {

class ThreadPool;

// What warm_up() computes: the model's own blocks (Transformer::run_block,
// through run_synthetic_block), one of each kind (the layers that differ in
// their kind, attention window, tensors or tensor types), on synthetic
// weights of the types the memory plan keeps, each matrix cut to a few rows;
// a prefill-sized batch (enough positions that the kernels take the batched
// paths a prefill takes), then one position (the decode path); and the
// output head's matrix products.
class KernelWarmUp {
 public:
  static constexpr int kPositions = 64;
  static constexpr int kRows = 64;

  // `transformer` is the engine's: its activations (sized for the plan's
  // prefill chunk) serve the warm-up too, so that it takes no memory the
  // plan did not count but the synthetic weights (kRows rows per matrix)
  // and a cache and state for the layers it runs.
  KernelWarmUp(const ModelDescription& model, const MemoryPlan& plan, KvCacheType kv_cache_type,
               Transformer& transformer);

  // One pass over everything, a few milliseconds once the code is optimized
  // (on first-run code, hundreds). Returns early, between two blocks, once
  // `stop` says so: a request waiting for the cores must not wait for a round.
  void run_round(ThreadPool& pool, const std::function<bool()>& stop);

  // The layers it runs: the first of each kind (what the forward pass does
  // with a layer: its kind, window, rotary setup, whether it caches its own
  // keys; and which tensors it has in which types, as `plan` keeps them).
  static std::vector<int> one_layer_of_each_kind(const ModelDescription& model, const MemoryPlan& plan);

 private:
  struct Matrix {
    WeightMatrix w;
    std::vector<uint8_t> bytes;
  };
  struct Block {
    int layer;
    UnitWeights weights;
    UnitWeights expert;  // an expert layer's: what every expert chosen runs
  };

  // A matrix of `rows` rows of synthetic values, in `type` and the kernels' layout.
  WeightMatrix make_matrix(TensorType type, int rows, int cols);
  // Values in [-1, 1) from a fixed sequence: finite, no subnormals.
  void fill(float* v, size_t n);

  const ModelDescription& model_;
  Transformer& transformer_;
  int positions_;  // of the prefill-sized batch: at most the plan's prefill chunk
  std::vector<int> layers_;
  std::vector<Matrix> matrices_;
  std::vector<std::vector<float>> vectors_;
  std::vector<Block> blocks_;
  std::vector<WeightMatrix> head_;
  KvCache cache_;
  RecurrentState state_;
  Activations activations_;
  std::vector<float> input_, logits_;
  TensorType embd_type_ = TensorType::kF32;
  std::vector<uint8_t> embd_row_;
  uint32_t seed_ = 1;
};

}  // namespace sipllm

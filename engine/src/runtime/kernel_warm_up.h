// Runs a model's own kernels on synthetic data shaped like its weights, so
// that where code is compiled in tiers as it runs (WebAssembly in a browser
// starts on baseline code) the slow first runs happen before the first
// request rather than during it. See Engine::warm_up.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/activation_quant.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "model/model_description.h"
#include "core/kv_cache.h"

namespace sipllm {

class ThreadPool;

// What warm_up() computes: the kernels a forward pass of this model calls,
// on synthetic data shaped like its own. Every (weight type, row length) of
// its matrices gets a few rows of quantized weights; activations come in a
// prefill-sized batch (enough positions that the kernels take the batched
// paths a prefill takes) and as a single position (the decode path).
class KernelWarmUp {
 public:
  static constexpr int kPositions = 64;
  static constexpr int kRows = 64;

  // unpack_5bit: whether the loader keeps Q5_0 and Q5_1 unpacked
  // (LayerLoader::unpacks_5bit).
  KernelWarmUp(const ModelDescription& model, KvCacheType kv_cache_type, bool unpack_5bit);

  // One pass over everything, a few milliseconds once the code is optimized
  // (on first-run code, hundreds). Returns early, between two kernels, once
  // `stop` says so: a request waiting for the cores must not wait for a round.
  void run_round(ThreadPool& pool, const std::function<bool()>& stop);

 private:
  struct Matrix {
    WeightMatrix w;
    std::vector<uint8_t> bytes;
  };

  // Values in [-1, 1) from a fixed sequence: finite, no subnormals.
  void fill(std::vector<float>& v);

  const ModelDescription& model_;
  const ModelShape& shape_;
  RopeParams rope_;
  std::vector<Matrix> matrices_;
  Activations activations_;
  std::vector<float> input_, x_, y_, norm_, xb_, q_, k_, att_out_, gate_, up_, rope_table_, scores_;
  KvCache cache_;
  TensorType embd_type_ = TensorType::kF32;
  std::vector<uint8_t> embd_row_;
  uint32_t seed_ = 1;
};

}  // namespace sipllm

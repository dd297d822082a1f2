// The llama forward pass over streamed weights.
//
// prefill() is layer-major: for each block it acquires the block's weights
// once and sweeps every position of the chunk through it, then releases it.
// Position i of a chunk runs after positions 0..i-1 of the same block, so the
// keys and values it attends over are already in the cache: causality holds
// and each position computes exactly what a one-token-at-a-time pass would.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/activation_quant.h"
#include "runtime/kv_cache.h"
#include "runtime/layer_loader.h"
#include "model/model_layout.h"
#include "runtime/thread_pool.h"

namespace sipllm {

class Transformer {
 public:
  Transformer(const ModelLayout& layout, LayerLoader& loader, ThreadPool& pool, int prefill_chunk);

  // Runs tokens[0..n) at positions start_pos.. through the model, writing
  // their keys and values into `cache`. Fills `logits` with the last
  // position's logits, or with every position's (row after row) when
  // all_positions is set.
  void prefill(const int32_t* tokens, int n, int start_pos, KvCache& cache,
               std::vector<float>& logits, bool all_positions);

  int prefill_chunk() const { return chunk_; }

 private:
  void run_block(int layer, const UnitView& w, int n, int start_pos, KvCache& cache);
  // Calls fn(i) for each position i < n of the chunk, spread over the pool
  // when the chunk is long enough to pay for it.
  template <class Fn>
  void for_each_position(int n, int width, const Fn& fn);
  // Final norm and output head for positions first..first+count of the
  // chunk, streaming the head's pieces in turn.
  void run_head(int first, int count, float* logits);

  const ModelLayout& layout_;
  const LlamaConfig& config_;
  LayerLoader& loader_;
  ThreadPool& pool_;
  int chunk_;

  // Activations for one chunk of positions, row-major [position][feature].
  std::vector<float> x_, xb_, q_, k_, v_, att_out_, proj_, gate_, up_;
  std::vector<float> rope_tables_;   // [position][2 * rope_dims]: see rope_angles()
  Activations activations_;          // the current matmul input, quantized once for all its users
  std::vector<float> scores_;        // [thread][context position]
};

}  // namespace sipllm

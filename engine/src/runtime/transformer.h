// The forward pass over streamed weights, for every family the model
// description knows (model/families.cpp): the variants are switches read from
// the description and weights that a family has or lacks.
//
// prefill() is layer-major: for each block it acquires the block's weights
// once and sweeps every position of the chunk through it, then releases it.
// Position i of a chunk runs after positions 0..i-1 of the same block, so the
// keys and values it attends over are already in the cache: causality holds.
// Attention follows llama.cpp, whose arithmetic depends on how many queries a
// batch has (AttentionPath): a prefill of at least kTiledMinQueries tokens
// attends with its tiled path, whatever the chunks it is split into (so the
// memory budget changes nothing), a shorter one and each generated token one
// position at a time, which a one-token-at-a-time pass computes exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/activation_quant.h"
#include "kernels/rope.h"
#include "model/model_description.h"
#include "core/kv_cache.h"
#include "runtime/layer_loader.h"
#include "runtime/recurrent_state.h"
#include "core/thread_pool.h"

namespace sipllm {

class Transformer {
 public:
  // Reads the model's rope factors (a few floats) through the loader.
  Transformer(const ModelDescription& model, LayerLoader& loader, ThreadPool& pool, int prefill_chunk);

  // Positions a DeltaNet layer's prefill takes together (the chunked form
  // of the gated delta rule). A hybrid model's prefill chunk is a multiple
  // of it, so that the chunks fall at the same places whatever the budget.
  static constexpr int kDeltaNetChunk = 64;

  // Runs tokens[0..n) at positions start_pos.. through the model, writing
  // their keys and values into `cache` and folding them into `state`
  // (which must be at start_pos; a checkpoint it has pending is taken on the
  // way). Fills `logits` with the last position's logits, or with every
  // position's (row after row) when all_positions is set.
  void prefill(const int32_t* tokens, int n, int start_pos, KvCache& cache, RecurrentState& state,
               std::vector<float>& logits, bool all_positions);

  // A sequence of its own (its own KV cache and recurrent state, from
  // position 0) whose final hidden states are wanted.
  struct Sequence {
    const int32_t* tokens;
    int n;
    KvCache* cache;
    RecurrentState* state;
  };
  // The final norm's output (what the output head reads) for every position
  // of every sequence, row after row. The sequences run together, layer by
  // layer, as one batch while they fit in a prefill chunk; their caches must
  // be empty.
  void hidden_states(const std::vector<Sequence>& sequences, std::vector<float>& out);

  // The kernel warm-up's pass (KernelWarmUp): block `layer` with weights
  // `w` (synthetic ones) over n rows of `input` (dim floats each) at
  // positions start_pos.. of `cache` and `state`, on `pool`. What the
  // activations hold afterwards is of no use; the next pass overwrites it.
  // In an expert layer, every expert chosen is `expert` (synthetic too).
  void run_synthetic_block(int layer, const UnitWeights& w, const UnitWeights* expert, const float* input, int n,
                           int start_pos, KvCache& cache, RecurrentState& state, ThreadPool& pool);

  int prefill_chunk() const { return chunk_; }

  // The most working memory a forward pass takes beside the weights and the
  // KV cache: activations of a chunk of `prefill_chunk` positions, their
  // 8-bit forms, attention scores for `threads` threads over the context,
  // rope tables and one position's logits.
  static uint64_t working_bytes(const ModelDescription& model, int prefill_chunk, int threads);

  // Positions each layer's keys and values must be kept for: a sliding-window
  // layer needs its window plus what one prefill chunk writes before it
  // attends; 0: every position.
  std::vector<int> kv_capacity() const;
  // Positions each layer's queries see; 0: every position before them.
  std::vector<int> attention_windows() const;

 private:
  // Rows [first_row, first_row + n) of a batch: positions start_pos.. of
  // the sequence whose keys and values `cache` keeps, attended as llama.cpp
  // would a batch of `batch` queries (the whole prefill the chunk is part of).
  struct Segment {
    int first_row;
    int n;
    int start_pos;
    KvCache* cache;
    RecurrentState* state;
    int batch;
  };
  // Embeds the batch's tokens and runs every block over it.
  void forward_rows(const int32_t* tokens, const std::vector<Segment>& segments);
  // Sizes the activations for the segments' rows and fills their rope
  // tables; returns the number of rows.
  int size_rows(const std::vector<Segment>& segments);
  void run_block(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments);
  // Gemma 4: every layer's per-layer input of the n rows, from their
  // per-layer token embeddings (per_layer_in_) and x_, with block 0's
  // projection `w`.
  void per_layer_inputs(const UnitWeights& w, int n);
  // What mixes the positions of a block (its input normalized in xb_ and
  // quantized in activations_, its output left in proj_): attention, or
  // one of the recurrences of hybrid models.
  void attend(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments);
  void delta_net(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments);
  void short_conv(int layer, const UnitWeights& w, int n, const std::vector<Segment>& segments);
  // The dense feed-forward over xb_ (normalized, quantized in
  // activations_); output in proj_.
  void feed_forward(int layer, const UnitWeights& w, int n);
  // A mixture of experts in two steps: with the block's unit, each
  // position's choice of experts (and the shared expert's output); then,
  // the block's unit released, each chosen expert's unit (acquire(e) ...
  // release(e)) over the positions that chose it, their sum added to x_.
  void route(const UnitWeights& w, int n);
  void run_experts(int layer, int n, const std::vector<int>& experts,
                   const std::function<const UnitWeights&(int)>& acquire, const std::function<void(int)>& release);
  // The experts some position chose in route(), ascending.
  std::vector<int> chosen_experts() const;
  // Calls run(first_row, count, state) over each segment's rows; in two runs
  // where the segment passes its state's pending checkpoint, which takes
  // the layer's state between them.
  template <class Run>
  void run_recurrence(int layer, const std::vector<Segment>& segments, const Run& run);
  // Calls fn(i) for each position i < n of the chunk, spread over the pool
  // when the chunk is long enough to pay for it.
  template <class Fn>
  void for_each_position(int n, int width, const Fn& fn);
  // Final norm and output head for positions first..first+count of the
  // chunk, streaming the head's pieces in turn.
  void run_head(int first, int count, float* logits);

  const ModelDescription& model_;
  const ModelShape& shape_;
  LayerLoader& loader_;
  ThreadPool* pool_;  // the engine's; another during run_synthetic_block
  int chunk_;
  std::vector<float> rope_factors_;
  std::vector<RopeParams> rope_;  // one per rotary setup of the description

  // Activations for one chunk of positions, row-major [position][feature].
  std::vector<float> x_, xb_, q_, k_, v_, att_out_, proj_, gate_, up_;
  std::vector<float> q_gated_, attn_gate_;  // a gated attention's query with its gate, the gate
  // Gemma 4's per-layer inputs, [position][layer][n_embd_per_layer]; the
  // projection of the embedding into them; a layer's gate.
  std::vector<float> per_layer_in_, per_layer_proj_, per_layer_gate_;
  std::vector<float> ones_;  // a weight of ones: RMS-normalized values (Gemma 4)
  // The recurrent layers': the input projection (DeltaNet's q, k, v; LFM2's
  // B, C, x), the convolution's input and output, DeltaNet's output gate,
  // log-decay and strength per head, its output.
  std::vector<float> mix_in_, conv_in_, conv_out_, ssm_z_, ssm_g_, ssm_beta_, ssm_y_;
  // A mixture of experts: each position's probability per expert, its
  // choices and their weights (expert_used_count each, in the order
  // chosen), the rows one expert runs (gathered), that expert's output, and
  // each position's choices' outputs, [position][choice][feature].
  std::vector<float> expert_probs_, expert_weights_, expert_in_, expert_out_, choice_out_, shared_out_;
  std::vector<int> expert_choices_, expert_rows_;
  // Per rotary setup, per position: see rope_table().
  std::vector<std::vector<float>> rope_tables_;
  Activations activations_;    // the current matmul input, quantized once for all its users
  std::vector<float> scores_;  // [thread][context position]
  struct RowSlot {
    KvCache* cache;
    int pos;
  };
  std::vector<RowSlot> row_slots_;  // per row of the batch
};

}  // namespace sipllm

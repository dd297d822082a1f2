// What a llama-architecture GGUF file holds: hyper-parameters from metadata
// and, for each transformer block and the output head, which tensors make it
// up and where their bytes lie. Built once from the header and checked against
// itself, so later stages can trust every shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace sipllm {

struct LlamaConfig {
  int dim = 0;           // llama.embedding_length
  int n_layers = 0;      // llama.block_count
  int n_heads = 0;       // llama.attention.head_count
  int n_kv_heads = 0;    // llama.attention.head_count_kv (default n_heads)
  int head_dim = 0;      // dim / n_heads
  int hidden_dim = 0;    // llama.feed_forward_length
  int n_vocab = 0;       // rows of token_embd
  int context_length = 0;
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  int rope_dims = 0;     // llama.rope.dimension_count (default head_dim)

  int kv_dim() const { return n_kv_heads * head_dim; }
};

// A tensor, or a run of whole rows of one, that a unit reads.
struct TensorSlice {
  const GgufTensorInfo* tensor = nullptr;  // null: this unit lacks the tensor
  uint64_t first_row = 0;
  uint64_t rows = 0;

  uint64_t row_bytes() const { return tensor->bytes / tensor->rows(); }
  uint64_t offset() const { return tensor->offset + first_row * row_bytes(); }
  uint64_t bytes() const { return tensor == nullptr ? 0 : rows * row_bytes(); }
};

// One stream unit: a transformer block, or a piece of the output head. Its
// tensors are read from the file together.
struct UnitTensors {
  std::string name;                  // "block 3" or "output head 2/5"
  std::vector<TensorSlice> tensors;  // in the order the unit's weights list them
  uint64_t bytes = 0;                // sum of the slices' bytes
};

struct ModelLayout {
  LlamaConfig config;
  std::string architecture;
  std::string name;  // general.name, may be empty
  const GgufTensorInfo* token_embd = nullptr;
  // Units 0 .. n_layers-1 are the blocks; the rest are the output head, cut
  // into pieces of whole output rows no larger than a block, so the ring's
  // buffers never need more than a block (a vocabulary-heavy head can be many
  // blocks' worth). A block lists attn_norm, attn_q, attn_k, attn_v,
  // attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down; a head piece lists
  // output_norm (the first piece only) and its rows of output (which is
  // token_embd itself when the file ties them).
  std::vector<UnitTensors> units;
  bool tied_output = false;
  uint64_t head_rows_per_piece = 0;

  int first_head_unit() const { return config.n_layers; }
  int n_units() const { return static_cast<int>(units.size()); }
  bool is_head(int unit) const { return unit >= config.n_layers; }
  uint64_t weight_bytes() const;  // every unit plus an untied embedding table
};

// Throws Error: kUnsupported for another architecture, kFormat naming the key
// or tensor for missing keys, missing tensors and shapes that contradict the
// hyper-parameters.
ModelLayout describe_llama_model(const GgufFile& file);

}  // namespace sipllm

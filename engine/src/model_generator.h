// Writes llama-architecture GGUF files with random weights in a named shape:
// the fixtures of benchmarks (realistic shapes) and tests (tiny ones).
//
// The tokenizer is copied from a vocabulary GGUF (any model or vocab-only
// file); the vocabulary size follows it. The weights are seeded, so the same
// arguments write the same file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "tensor_type.h"

namespace sipllm {

struct ModelShape {
  std::string name;
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int hidden_dim = 0;
  int context_length = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = true;
};

// Known shapes: "tiny" (tests), "smollm-135m", "qwen2.5-0.5b", "llama-3.2-1b",
// "kquant-small" (every row a multiple of 256). Throws for an unknown name.
ModelShape named_model_shape(const std::string& name);
std::vector<std::string> model_shape_names();

struct GeneratorOptions {
  ModelShape shape;
  TensorType type = TensorType::kQ8_0;  // matrices; norms are always F32
  // Per-tensor types by name suffix ("ffn_down.weight" -> Q6_K), for mixes
  // such as Q4_K_M. Applied after `type`.
  std::vector<std::pair<std::string, TensorType>> overrides;
  uint64_t seed = 1;
  float weight_scale = 0.02f;  // uniform weights with this standard deviation
};

// Builds the GGUF in `writer`: metadata, the tokenizer copied from `vocab`,
// and tensors produced lazily when the writer writes. Matrices whose row
// length does not fit the type's block fall back to the type ggml's quantizer
// would use (or F32), as real files do.
void build_random_llama(const GgufFile& vocab, const GeneratorOptions& options, GgufWriter& writer);

}  // namespace sipllm

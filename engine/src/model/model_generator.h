// Writes GGUF files with random weights in a named shape of any supported
// family: the fixtures of benchmarks (realistic shapes) and tests (tiny ones).
// The tensors written are the family's own description (model/families.cpp),
// so a generated file has exactly what the loader expects of that family.
//
// The tokenizer is copied from a vocabulary GGUF (any model or vocab-only
// file); the vocabulary size follows it. The weights are seeded, so the same
// arguments write the same file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf_writer.h"
#include "model/tensor_type.h"

namespace sipllm {

struct ShapePreset {
  std::string name;
  std::string architecture = "llama";  // a supported family
  int dim = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // 0: dim / n_heads (written as attention.key_length otherwise)
  int hidden_dim = 0;
  int context_length = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = true;
  int sliding_window = 0;     // attention.sliding_window, for families that slide
  float llama3_rope_factor = 0;  // > 0: rope_freqs.weight as Llama 3.x converts it
  int rope_dims = 0;             // rotating elements of a head; 0: all of them
  // Hybrid families (0 or empty: the generator's defaults for the family,
  // from the attention shape). Qwen3.5: every full_attention_interval-th
  // layer attends, the others are DeltaNet layers with ssm_key_heads key
  // heads and ssm_value_heads value heads of ssm_head each. LFM2: the layers
  // in attention_layers attend, the others are short convolutions.
  int conv_kernel = 0;
  int full_attention_interval = 0;
  int ssm_key_heads = 0;
  int ssm_value_heads = 0;
  int ssm_head = 0;
  std::vector<int> attention_layers;
  // The model's own vocabulary size, when the vocabulary file has fewer
  // tokens: the rest are written as unused tokens, so that the embedding
  // table and the output head are as large as the real model's. 0: the
  // vocabulary file's.
  int vocab_size = 0;
  // Gemma 4: the sliding layers' head size (0: head_dim), the last layers
  // that attend with an earlier layer's K/V, whose feed-forward is twice as
  // wide where double_wide_shared_ffn, and the per-layer inputs' width (0:
  // dim / 8).
  int head_dim_swa = 0;
  int shared_kv_layers = 0;
  bool double_wide_shared_ffn = false;
  int n_embd_per_layer = 0;
  float final_softcap = 0;  // 0: the family's default
  // Mixture-of-experts families (0: the generator's defaults: 4 experts, 2
  // used, each as wide as hidden_dim, as is a shared expert where the family
  // has one); the first leading_dense_layers layers dense.
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_hidden_dim = 0;
  int leading_dense_layers = 0;
};

// Known shapes: "tiny" (tests), "tiny-k" (tests of K-quants: every row a
// multiple of 256, and an untied output head), "kquant-small" (every row a
// multiple of 256), and the published models' shapes "smollm-135m",
// "qwen2.5-0.5b" (qwen2, with Q/K/V biases), "qwen3-0.6b", "gemma3-1b",
// "llama-3.2-1b" (with rope_freqs), "llama-3.1-8b", "qwen3.5-0.8b",
// "qwen3.5-2b" (qwen35: DeltaNet with every fourth layer attending) and
// "lfm2.5-1.2b" (lfm2: short convolutions with six attention layers) and
// "gemma-4-e2b" (gemma4: per-layer embeddings, twenty layers sharing K/V),
// these four with their vocabularies' sizes (248,320, 65,536 and 262,144
// tokens), and the mixtures of experts "lfm2-8b-a1b" (lfm2moe) and
// "qwen3-30b-a3b" (qwen3moe).
// Throws for an unknown name.
ShapePreset shape_preset(const std::string& name);
std::vector<std::string> shape_preset_names();

// How the matrices get their types.
//   kPlain: every matrix `type` (as llama.cpp's quantize --pure), but for
//     rows that do not fit its block.
//   kDefault: the same, except the output head (or the token embeddings tied
//     to it), which llama.cpp's quantize makes Q6_K, or Q8_0 where its rows
//     are not a multiple of 256 (a Q8_0 model keeps Q8_0). This is what
//     `quantize model Q4_0` writes, so sizes match files from a model hub.
//   kQ4_K_M, kQ5_K_M: llama.cpp's mixes of those names (see
//     mixed_tensor_type); `type` is ignored.
enum class QuantMix { kPlain, kDefault, kQ4_K_M, kQ5_K_M };

struct GeneratorOptions {
  ShapePreset shape;
  TensorType type = TensorType::kQ8_0;  // matrices; norms are always F32
  QuantMix mix = QuantMix::kPlain;
  uint64_t seed = 1;
  float weight_scale = 0.02f;  // uniform weights with this standard deviation
  // Token embeddings' standard deviation, in units of weight_scale.
  float embedding_scale = 1;
  // Random weights make flat, aimless models: the top two of n_vocab random
  // logits differ by about a tenth of their spread, and greedy decoding
  // settles on one token within a few steps. Trained models carry the
  // current token through the residual stream and map it to likely
  // successors. successor_bias > 0 builds that in: a fixed random permutation
  // gives every token a successor, and the output head's row for a token
  // gets successor_bias times the (unit-scale) embedding direction of its
  // predecessor. With embedding_scale > 1 the current token stays visible
  // through the layers, so the model prefers the successor by a clear margin
  // while the layers still move the logits with the context. Needs an
  // untied output head (throws otherwise). 0: purely random.
  float successor_bias = 0;
};

// The type a matrix gets, as llama.cpp's quantizer picks it
// (llama_tensor_get_type in src/llama-quant.cpp) for llama-architecture
// models without an importance matrix:
// - Q4_K_M and Q5_K_M start from Q4_K and Q5_K;
// - the output head, and the token embeddings when they are tied to it, get
//   Q6_K, or Q8_0 when their rows are not a multiple of 256;
// - attn_v and ffn_down get Q6_K on the "more bits" layers: the first and
//   last eighth of the layers and every third layer in between
//   (layer < n/8 || layer >= 7n/8 || (layer - n/8) % 3 == 2);
// - then a type whose block does not divide the row length falls back:
//   Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, anything else (or a fallback
//   that does not fit either) -> F16.
// `layer` is -1 for tensors outside the blocks.
TensorType mixed_tensor_type(const GeneratorOptions& options, const std::string& name, int layer,
                             uint64_t row_length);

// general.file_type for the options: llama.cpp's `enum llama_ftype` (not a
// ggml type id). A plain Q4_K or Q5_K file says Q4_K_S / Q5_K_S, the mixes
// closest to uniform, as llama.cpp's quantize --pure would.
uint32_t llama_file_type(const GeneratorOptions& options);

// Builds the GGUF in `writer`: metadata, the tokenizer copied from `vocab`,
// and tensors produced lazily when the writer writes. The weights depend only
// on the shape, the seed and the tensor's name, never on its type, so files
// of one shape and seed in different types are one model at different
// precisions. Norm weights are near 1, biases small.
void build_random_model(const GgufFile& vocab, const GeneratorOptions& options, GgufWriter& writer);

}  // namespace sipllm

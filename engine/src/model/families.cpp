// The model families the engine runs, one description each. The semantics
// are llama.cpp's (its GGUF files are what users have): tensor names, which
// keys are read and their defaults, which layers slide or skip the rotary
// embedding. A new family is an entry here plus whatever math it genuinely
// adds to the forward pass (runtime/transformer.cpp).
#include <cmath>

#include "model/model_description.h"

namespace sipllm {
namespace {

TensorSpec vector(std::string name, Dim size, const float* UnitWeights::*slot) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.shape = {size};
  spec.vector = slot;
  return spec;
}

TensorSpec matrix(std::string name, Dim cols, Dim rows, WeightMatrix UnitWeights::*slot) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.shape = {cols, rows};
  spec.matrices = {{slot, rows}};
  return spec;
}

// One tensor whose rows feed several matrices, in order.
TensorSpec fused(std::string name, Dim cols, Dim rows, std::vector<TensorSpec::RowRange> parts) {
  TensorSpec spec;
  spec.name = std::move(name);
  spec.shape = {cols, rows};
  spec.matrices = std::move(parts);
  return spec;
}

using W = UnitWeights;

const TensorSpec kAttnNorm = vector("attn_norm.weight", Dim::kEmbd, &W::attn_norm);
const TensorSpec kAttnQ = matrix("attn_q.weight", Dim::kEmbd, Dim::kQ, &W::attn_q);
const TensorSpec kAttnK = matrix("attn_k.weight", Dim::kEmbd, Dim::kKv, &W::attn_k);
const TensorSpec kAttnV = matrix("attn_v.weight", Dim::kEmbd, Dim::kKv, &W::attn_v);
const TensorSpec kAttnQkv = fused("attn_qkv.weight", Dim::kEmbd, Dim::kQkv,
                                  {{&W::attn_q, Dim::kQ}, {&W::attn_k, Dim::kKv}, {&W::attn_v, Dim::kKv}});
const TensorSpec kAttnQBias = vector("attn_q.bias", Dim::kQ, &W::attn_q_bias);
const TensorSpec kAttnKBias = vector("attn_k.bias", Dim::kKv, &W::attn_k_bias);
const TensorSpec kAttnVBias = vector("attn_v.bias", Dim::kKv, &W::attn_v_bias);
const TensorSpec kAttnQNorm = vector("attn_q_norm.weight", Dim::kHeadDim, &W::attn_q_norm);
const TensorSpec kAttnKNorm = vector("attn_k_norm.weight", Dim::kHeadDim, &W::attn_k_norm);
const TensorSpec kAttnOutput = matrix("attn_output.weight", Dim::kQ, Dim::kEmbd, &W::attn_output);
const TensorSpec kPostAttentionNorm = vector("post_attention_norm.weight", Dim::kEmbd, &W::post_attention_norm);
const TensorSpec kFfnNorm = vector("ffn_norm.weight", Dim::kEmbd, &W::ffn_norm);
const TensorSpec kFfnGate = matrix("ffn_gate.weight", Dim::kEmbd, Dim::kFf, &W::ffn_gate);
const TensorSpec kFfnUp = matrix("ffn_up.weight", Dim::kEmbd, Dim::kFf, &W::ffn_up);
// Phi-3 keeps gate and up in one tensor, the gate's rows first.
const TensorSpec kFfnGateUp = fused("ffn_up.weight", Dim::kEmbd, Dim::kFf2,
                                    {{&W::ffn_gate, Dim::kFf}, {&W::ffn_up, Dim::kFf}});
const TensorSpec kFfnDown = matrix("ffn_down.weight", Dim::kFf, Dim::kEmbd, &W::ffn_down);
const TensorSpec kPostFfwNorm = vector("post_ffw_norm.weight", Dim::kEmbd, &W::post_ffw_norm);

// Gemma's query scale is 1/sqrt(head_dim), except for the 27B models
// (46 layers in Gemma 2, 62 in Gemma 3), which use 1/sqrt(dim / n_heads).
float gemma_attention_scale(const ModelShape& s) {
  const bool is_27b = s.n_layers == 46 || s.n_layers == 62;
  return 1.0f / std::sqrt(static_cast<float>(is_27b ? s.dim / s.n_heads : s.head_dim));
}

std::vector<Family> make_families() {
  return {
      {
          .architecture = "llama",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnOutput, kFfnNorm, kFfnGate, kFfnUp, kFfnDown},
          .rope_factors = RopeFactors::kFreqs,
      },
      {
          .architecture = "qwen2",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnQBias, kAttnKBias, kAttnVBias, kAttnOutput,
                    kFfnNorm, kFfnGate, kFfnUp, kFfnDown},
          .rope_style = RopeStyle::kNeox,
      },
      {
          .architecture = "qwen3",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnQNorm, kAttnKNorm, kAttnOutput, kFfnNorm,
                    kFfnGate, kFfnUp, kFfnDown},
          .rope_style = RopeStyle::kNeox,
      },
      {
          .architecture = "gemma2",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnOutput, kPostAttentionNorm, kFfnNorm, kFfnGate,
                    kFfnUp, kFfnDown, kPostFfwNorm},
          .rope_style = RopeStyle::kNeox,
          .feed_forward = FeedForward::kGeluTanh,
          .scale_embedding = true,
          .sliding_window_pattern = 2,
          .sliding_window_default = 4096,
          .attn_softcap_default = 50.0f,
          .final_softcap_default = 30.0f,
          .attention_scale = gemma_attention_scale,
      },
      {
          .architecture = "gemma3",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnQNorm, kAttnKNorm, kAttnOutput,
                    kPostAttentionNorm, kFfnNorm, kFfnGate, kFfnUp, kFfnDown, kPostFfwNorm},
          .rope_style = RopeStyle::kNeox,
          .feed_forward = FeedForward::kGeluTanh,
          .scale_embedding = true,
          .sliding_window_pattern = 6,
          .local_rope_base = 10000.0f,
          .attention_scale = gemma_attention_scale,
      },
      {
          .architecture = "phi3",
          .block = {kAttnNorm, kAttnQkv, kAttnOutput, kFfnNorm, kFfnGateUp, kFfnDown},
          .rope_style = RopeStyle::kNeox,
          .rope_factors = RopeFactors::kLongShort,
      },
      {
          .architecture = "smollm3",
          .block = {kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnOutput, kFfnNorm, kFfnGate, kFfnUp, kFfnDown},
          .no_rope_every = 4,
      },
  };
}

}  // namespace

const std::vector<Family>& supported_families() {
  static const std::vector<Family> families = make_families();
  return families;
}

const Family* find_family(std::string_view architecture) {
  for (const Family& f : supported_families()) {
    if (f.architecture == architecture) return &f;
  }
  return nullptr;
}

}  // namespace sipllm

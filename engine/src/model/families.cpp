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

// The same spec, held only by layers whose feed-forward is `ffn`.
TensorSpec ffn(TensorSpec::Ffn kind, TensorSpec spec) {
  spec.ffn = kind;
  return spec;
}
TensorSpec dense(TensorSpec spec) { return ffn(TensorSpec::Ffn::kDense, std::move(spec)); }
TensorSpec experts(TensorSpec spec) { return ffn(TensorSpec::Ffn::kExperts, std::move(spec)); }

// A 3-D tensor of one matrix per expert (experts along its last axis), read
// as the rows of all of them.
TensorSpec per_expert(std::string name, Dim cols, Dim rows, Dim all_rows, WeightMatrix UnitWeights::*slot) {
  TensorSpec spec = experts(matrix(std::move(name), cols, all_rows, slot));
  spec.shape = {cols, rows, Dim::kExperts};
  spec.per_expert = true;
  return spec;
}

// The same spec, held only by layers of `kind`.
TensorSpec in(LayerKind kind, TensorSpec spec) {
  spec.layers = TensorSpec::only(kind);
  return spec;
}

// A float array of more than one dimension (a convolution's taps).
TensorSpec floats(std::string name, std::vector<Dim> shape, const float* UnitWeights::*slot) {
  TensorSpec spec = vector(std::move(name), shape[0], slot);
  spec.shape = std::move(shape);
  return spec;
}

using W = UnitWeights;
constexpr LayerKind kAttention = LayerKind::kAttention;

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
const TensorSpec kFfnGate = dense(matrix("ffn_gate.weight", Dim::kEmbd, Dim::kFf, &W::ffn_gate));
const TensorSpec kFfnUp = dense(matrix("ffn_up.weight", Dim::kEmbd, Dim::kFf, &W::ffn_up));
// Phi-3 keeps gate and up in one tensor, the gate's rows first.
const TensorSpec kFfnGateUp = dense(fused("ffn_up.weight", Dim::kEmbd, Dim::kFf2,
                                          {{&W::ffn_gate, Dim::kFf}, {&W::ffn_up, Dim::kFf}}));
const TensorSpec kFfnDown = dense(matrix("ffn_down.weight", Dim::kFf, Dim::kEmbd, &W::ffn_down));

// A mixture of experts: the router, the experts' matrices; LFM2-MoE's bias
// of the choice; Qwen3.5-MoE's shared expert and its gate.
const std::vector<TensorSpec> kExperts = {
    experts(matrix("ffn_gate_inp.weight", Dim::kEmbd, Dim::kExperts, &W::ffn_gate_inp)),
    per_expert("ffn_gate_exps.weight", Dim::kEmbd, Dim::kExpertFf, Dim::kExpertsFf, &W::ffn_gate_exps),
    per_expert("ffn_up_exps.weight", Dim::kEmbd, Dim::kExpertFf, Dim::kExpertsFf, &W::ffn_up_exps),
    per_expert("ffn_down_exps.weight", Dim::kExpertFf, Dim::kEmbd, Dim::kExpertsEmbd, &W::ffn_down_exps),
};
const TensorSpec kExpertBias = experts(vector("exp_probs_b.bias", Dim::kExperts, &W::expert_bias));
const std::vector<TensorSpec> kSharedExpert = {
    experts(vector("ffn_gate_inp_shexp.weight", Dim::kEmbd, &W::shared_expert_gate)),
    experts(matrix("ffn_gate_shexp.weight", Dim::kEmbd, Dim::kSharedFf, &W::ffn_gate_shexp)),
    experts(matrix("ffn_up_shexp.weight", Dim::kEmbd, Dim::kSharedFf, &W::ffn_up_shexp)),
    experts(matrix("ffn_down_shexp.weight", Dim::kSharedFf, Dim::kEmbd, &W::ffn_down_shexp)),
};

// `specs` and then `more`.
std::vector<TensorSpec> with(std::vector<TensorSpec> specs, const std::vector<TensorSpec>& more) {
  specs.insert(specs.end(), more.begin(), more.end());
  return specs;
}
const TensorSpec kPostFfwNorm = vector("post_ffw_norm.weight", Dim::kEmbd, &W::post_ffw_norm);

// Qwen3.5's gated DeltaNet layers, and its attention layers' query with an
// output gate beside each head.
const std::vector<TensorSpec> kDeltaNet = {
    in(LayerKind::kDeltaNet, matrix("attn_qkv.weight", Dim::kEmbd, Dim::kSsmQkv, &W::ssm_qkv)),
    in(LayerKind::kDeltaNet, matrix("attn_gate.weight", Dim::kEmbd, Dim::kSsmInner, &W::ssm_gate)),
    in(LayerKind::kDeltaNet, floats("ssm_conv1d.weight", {Dim::kConvKernel, Dim::kSsmQkv}, &W::conv_weight)),
    in(LayerKind::kDeltaNet, vector("ssm_dt.bias", Dim::kSsmHeads, &W::ssm_dt_bias)),
    in(LayerKind::kDeltaNet, vector("ssm_a", Dim::kSsmHeads, &W::ssm_a)),
    in(LayerKind::kDeltaNet, matrix("ssm_beta.weight", Dim::kEmbd, Dim::kSsmHeads, &W::ssm_beta)),
    in(LayerKind::kDeltaNet, matrix("ssm_alpha.weight", Dim::kEmbd, Dim::kSsmHeads, &W::ssm_alpha)),
    in(LayerKind::kDeltaNet, vector("ssm_norm.weight", Dim::kSsmHeadV, &W::ssm_norm)),
    in(LayerKind::kDeltaNet, matrix("ssm_out.weight", Dim::kSsmInner, Dim::kEmbd, &W::ssm_out)),
};
const TensorSpec kAttnQGated = matrix("attn_q.weight", Dim::kEmbd, Dim::kQGated, &W::attn_q);

// LFM2's short-convolution layers.
const std::vector<TensorSpec> kShortConv = {
    in(LayerKind::kShortConv, floats("shortconv.conv.weight", {Dim::kConvKernel, Dim::kEmbd}, &W::conv_weight)),
    in(LayerKind::kShortConv, matrix("shortconv.in_proj.weight", Dim::kEmbd, Dim::kEmbd3, &W::conv_in)),
    in(LayerKind::kShortConv, matrix("shortconv.out_proj.weight", Dim::kEmbd, Dim::kEmbd, &W::conv_out)),
};

// Gemma 4: keys and values only in the layers that cache their own, V
// optional (llama.cpp takes K's projection for V without it), the per-layer
// input branch, the output scale; the projection of the embedding into
// per-layer inputs (model-level, in block 0's unit).
TensorSpec computes_kv(TensorSpec spec, bool required = true) {
  spec.kv_projection = true;
  spec.required = required;
  return spec;
}
TensorSpec per_layer_input(TensorSpec spec) {
  spec.per_layer_input = true;
  return spec;
}
const std::vector<TensorSpec> kGemma4Block = {
    kAttnNorm, kAttnQ, computes_kv(kAttnK), computes_kv(kAttnV, false), kAttnQNorm, computes_kv(kAttnKNorm),
    kAttnOutput, kPostAttentionNorm, kFfnNorm, kFfnGate, kFfnUp, kFfnDown, kPostFfwNorm,
    per_layer_input(matrix("inp_gate.weight", Dim::kEmbd, Dim::kEmbdPerLayer, &W::per_layer_gate)),
    per_layer_input(matrix("proj.weight", Dim::kEmbdPerLayer, Dim::kEmbd, &W::per_layer_proj)),
    per_layer_input(vector("post_norm.weight", Dim::kEmbd, &W::per_layer_post_norm)),
    [] {
      TensorSpec spec = vector("layer_output_scale.weight", Dim::kOne, &W::layer_output_scale);
      spec.required = false;
      return spec;
    }(),
};
const std::vector<TensorSpec> kGemma4FirstBlock = {
    per_layer_input(matrix("per_layer_model_proj.weight", Dim::kEmbd, Dim::kEmbdAllLayers, &W::per_layer_model_proj)),
    per_layer_input(vector("per_layer_proj_norm.weight", Dim::kEmbdPerLayer, &W::per_layer_proj_norm)),
};

// Specs for the attention layers only, then the ones every layer has, then
// the recurrent layers'.
std::vector<TensorSpec> hybrid_block(std::vector<TensorSpec> attention, std::vector<TensorSpec> every_layer,
                                     const std::vector<TensorSpec>& recurrent) {
  for (TensorSpec& spec : attention) spec = in(kAttention, std::move(spec));
  attention.insert(attention.end(), every_layer.begin(), every_layer.end());
  attention.insert(attention.end(), recurrent.begin(), recurrent.end());
  return attention;
}

// Qwen3.5's and LFM2's blocks (post_attention_norm is Qwen3.5's
// feed-forward norm), which their mixtures of experts extend.
const std::vector<TensorSpec> kQwen35Block =
    hybrid_block({kAttnQGated, kAttnK, kAttnV, kAttnQNorm, kAttnKNorm, kAttnOutput},
                 {kAttnNorm, vector("post_attention_norm.weight", Dim::kEmbd, &W::ffn_norm), kFfnGate, kFfnUp, kFfnDown},
                 kDeltaNet);
const std::vector<TensorSpec> kLfm2Block = hybrid_block({kAttnQ, kAttnK, kAttnV, kAttnQNorm, kAttnKNorm, kAttnOutput},
                                                        {kAttnNorm, kFfnNorm, kFfnGate, kFfnUp, kFfnDown}, kShortConv);

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
          // Gemma 4 E2B/E4B (dense): sliding layers by a flag each with heads
          // and rotary dims of their own, proportional RoPE (rope_freqs) on
          // the others, shared K/V in the last layers, per-layer inputs.
          .architecture = "gemma4",
          .block = kGemma4Block,
          .rope_style = RopeStyle::kNeox,
          .rope_factors = RopeFactors::kFreqsFullAttention,
          .feed_forward = FeedForward::kGeluTanh,
          .scale_embedding = true,
          .sliding_window_flags = true,
          .sliding_head_dims = true,
          .shared_kv = true,
          .value_norm = true,
          .first_block = kGemma4FirstBlock,
          .final_softcap_default = 30.0f,
          .attention_scale = [](const ModelShape&) { return 1.0f; },  // Q and K are RMS-normed instead
      },
      {
          .architecture = "phi3",
          .block = {kAttnNorm, kAttnQkv, kAttnOutput, kFfnNorm, kFfnGateUp, kFfnDown},
          .rope_style = RopeStyle::kNeox,
          .rope_factors = RopeFactors::kLongShort,
      },
      {
          .architecture = "qwen35",
          .block = kQwen35Block,
          .rope_style = RopeStyle::kNeox,
          .hybrid = HybridLayers::kFullAttentionInterval,
          .recurrent_kind = LayerKind::kDeltaNet,
          .attention_output_gate = true,
          .unused_tensors = {"mtp.", ".nextn."},
      },
      {
          .architecture = "lfm2",
          .block = kLfm2Block,
          .rope_style = RopeStyle::kNeox,
          .hybrid = HybridLayers::kZeroKvHeads,
          .recurrent_kind = LayerKind::kShortConv,
          .output_norm = "token_embd_norm.weight",
      },
      {
          .architecture = "qwen3moe",
          .block = with({kAttnNorm, kAttnQ, kAttnK, kAttnV, kAttnQNorm, kAttnKNorm, kAttnOutput, kFfnNorm}, kExperts),
          .rope_style = RopeStyle::kNeox,
          .expert_gating = ExpertGating::kSoftmax,
      },
      {
          .architecture = "qwen35moe",
          .block = with(with(kQwen35Block, kExperts), kSharedExpert),
          .rope_style = RopeStyle::kNeox,
          .hybrid = HybridLayers::kFullAttentionInterval,
          .recurrent_kind = LayerKind::kDeltaNet,
          .attention_output_gate = true,
          .unused_tensors = {"mtp.", ".nextn."},
          .expert_gating = ExpertGating::kSoftmax,
      },
      {
          .architecture = "lfm2moe",
          .block = with(with(kLfm2Block, kExperts), {kExpertBias}),
          .rope_style = RopeStyle::kNeox,
          .hybrid = HybridLayers::kZeroKvHeads,
          .recurrent_kind = LayerKind::kShortConv,
          .output_norm = "token_embd_norm.weight",
          .expert_gating = ExpertGating::kFromKey,
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

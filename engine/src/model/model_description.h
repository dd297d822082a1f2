// What a GGUF model is, read once from its header and checked against itself:
// its family (families.cpp holds one description per architecture: the
// block's tensors, the hyper-parameter switches, the variant math), its
// hyper-parameters, what varies from layer to layer (sliding window, rotary
// setup), and the stream units (each transformer block, then the output head
// in pieces) with the tensors each one reads. Later stages trust every shape.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/gguf.h"
#include "model/rope_style.h"
#include "model/unit_weights.h"

namespace sipllm {

// The gated feed-forward: down(act(gate(x)) * up(x)).
enum class FeedForward { kSwiGlu, kGeluTanh };

// What mixes positions in a layer: attention over the KV cache, or a
// recurrence whose state is a fixed size per sequence.
enum class LayerKind : uint8_t {
  kAttention,
  kDeltaNet,   // gated delta rule (Qwen3.5's linear attention)
  kShortConv,  // gated short causal convolution (LFM2)
};

// Which layers of a hybrid family are attention layers; the others are the
// family's `recurrent_kind`.
enum class HybridLayers {
  kNone,                   // every layer attends
  kFullAttentionInterval,  // layer il attends when (il + 1) % full_attention_interval == 0 (Qwen3.5)
  kZeroKvHeads,            // layer il attends when the head_count_kv array gives it heads (LFM2)
};

// A mixture-of-experts feed-forward: how the router's logits become each
// expert's probability (llama.cpp's expert gating function).
enum class ExpertGating {
  kNone,     // the family has no experts
  kSoftmax,  // softmax over the experts (Qwen3-MoE, Qwen3.5-MoE)
  kFromKey,  // {arch}.expert_gating_func: 1 softmax, 2 sigmoid (LFM2-MoE)
};

// Per-pair rotary frequency divisors a family may carry as tensors.
enum class RopeFactors {
  kNone,
  kFreqs,      // rope_freqs.weight (Llama 3)
  kLongShort,  // rope_factors_long / _short, chosen by the context length (Phi-3 LongRoPE)
  // rope_freqs.weight (required), applied by the layers that do not slide
  // only: Gemma 4's proportional RoPE on its full-attention layers.
  kFreqsFullAttention,
};

// The sizes a tensor's shape is written in. Head and feed-forward sizes are
// the layer's own (LayerShape) in a block's tensors, which differ from layer
// to layer in Gemma 4.
enum class Dim {
  kEmbd,     // embedding_length
  kHeadDim,  // attention.key_length (Gemma 4's sliding layers: attention.key_length_swa)
  kQ,        // head_count * head_dim
  kKv,       // head_count_kv * head_dim
  kQkv,      // kQ + 2 * kKv
  kFf,       // feed_forward_length (or its entry for the layer)
  kFf2,      // 2 * feed_forward_length (gate and up fused)
  kVocab,
  kQGated,   // 2 * kQ: each head's query, then its output gate (Qwen3.5)
  kConvKernel,  // ssm.conv_kernel or shortconv.l_cache
  kEmbd3,       // 3 * embedding_length (LFM2's B, C and x)
  kSsmQkv,      // DeltaNet's fused q, k, v: 2 * kSsmKeys + kSsmInner
  kSsmInner,    // ssm.inner_size: value heads * value head size
  kSsmHeads,    // ssm.time_step_rank: value heads
  kSsmHeadV,    // value head size
  kEmbdPerLayer,   // embedding_length_per_layer_input (Gemma 4's per-layer inputs)
  kEmbdAllLayers,  // kEmbdPerLayer * block_count: every layer's per-layer input
  kOne,            // a single value (Gemma 4's layer_output_scale)
  kExperts,        // expert_count
  kExpertFf,       // expert_feed_forward_length: one expert's width
  kExpertsFf,      // kExpertFf * kExperts: the rows of a 3-D gate or up tensor
  kExpertsEmbd,    // kEmbd * kExperts: the rows of a 3-D down tensor
  kSharedFf,       // expert_shared_feed_forward_length (Qwen3.5-MoE's shared expert)
};

// One tensor a unit may hold, and where it lands in UnitWeights: a float
// vector (norms, biases), or a matrix whose rows go in order to one or more
// members (a fused tensor fills several).
struct TensorSpec {
  struct RowRange {
    WeightMatrix UnitWeights::*matrix;
    Dim rows;
  };
  // Bits of the LayerKinds whose layers hold the tensor.
  static constexpr uint8_t kAllLayers = 0xff;
  static constexpr uint8_t only(LayerKind kind) { return static_cast<uint8_t>(1u << static_cast<unsigned>(kind)); }

  std::string name;         // after "blk.N." for block tensors
  std::vector<Dim> shape;   // GGUF order: the row length first
  bool required = true;
  uint8_t layers = kAllLayers;
  // Computes keys or values: held only by the layers that cache their own.
  // A layer that attends over an earlier layer's (LayerShape::kv_source,
  // Gemma 4's shared KV layers) may carry it, as llama.cpp allows; it is
  // accepted and never read.
  bool kv_projection = false;
  // Part of Gemma 4's per-layer inputs: required when the model has them
  // (embedding_length_per_layer_input > 0), refused when it has none.
  bool per_layer_input = false;
  // Which feed-forward holds it: a dense one, or a mixture of experts
  // (lfm2moe's first layers are dense, the others not).
  enum class Ffn : uint8_t { kAny, kDense, kExperts };
  Ffn ffn = Ffn::kAny;
  // A 3-D tensor of one matrix per expert, experts along its last axis: as
  // rows, expert e's matrix is the e-th run of rows / expert_count rows.
  bool per_expert = false;
  const float* UnitWeights::*vector = nullptr;
  std::vector<RowRange> matrices;

  bool is_vector() const { return vector != nullptr; }
};

struct ModelShape;
struct LayerShape;

// One model family: everything that tells it apart, in one place.
struct Family {
  std::string architecture;       // general.architecture
  std::vector<TensorSpec> block;  // a transformer block's tensors
  RopeStyle rope_style = RopeStyle::kNormal;  // which elements pair up (model/rope_style.h)
  RopeFactors rope_factors = RopeFactors::kNone;
  FeedForward feed_forward = FeedForward::kSwiGlu;
  bool scale_embedding = false;  // embeddings times sqrt(embedding_length) (Gemma)
  // Sliding-window attention on layers il with il % pattern < pattern - 1;
  // 0: none. The window is attention.sliding_window, or the default when the
  // file has none (0: the key is required).
  int sliding_window_pattern = 0;
  int sliding_window_default = 0;
  // Rope base of the sliding-window layers when the file has no
  // rope.freq_base_swa; 0: those layers use the global rotary setup (unless
  // sliding_head_dims, below).
  float local_rope_base = 0;
  // Which layers slide is a bool per layer, attention.sliding_window_pattern
  // (Gemma 4), instead of the period above.
  bool sliding_window_flags = false;
  // The sliding-window layers have heads of attention.key_length_swa,
  // rotate rope.dimension_count_swa of their elements with base
  // rope.freq_base_swa (the global base when absent, as llama.cpp)
  // (Gemma 4).
  bool sliding_head_dims = false;
  // The last attention.shared_kv_layers layers compute no keys and values:
  // each attends over those of the last earlier layer of its kind, by
  // llama.cpp's rule (Gemma 4; see describe_layers).
  bool shared_kv = false;
  // The values are RMS-normalized, without a weight (Gemma 4).
  bool value_norm = false;
  // Model-level tensors block 0's unit holds: read with it, applied at its
  // start (Gemma 4's projection of the embedding into per-layer inputs).
  std::vector<TensorSpec> first_block = {};
  // Soft-capping, cap * tanh(x / cap), of the attention scores and of the
  // final logits: the default when the file has no key; 0: the family has none.
  float attn_softcap_default = 0;
  float final_softcap_default = 0;
  // Layers il with (il + 1) % n == 0 use no rotary embedding (SmolLM3); 0: all do.
  int no_rope_every = 0;
  // The scale of query . key; nullptr: 1 / sqrt(head_dim).
  float (*attention_scale)(const ModelShape& shape) = nullptr;
  // Hybrid families: which layers attend, and what the others are.
  HybridLayers hybrid = HybridLayers::kNone;
  LayerKind recurrent_kind = LayerKind::kAttention;
  // attn_q gives each head's query followed by as many gate values; the
  // attention's output is multiplied by their sigmoid (Qwen3.5).
  bool attention_output_gate = false;
  // The final norm's tensor (LFM2 calls it token_embd_norm).
  std::string output_norm = "output_norm.weight";
  // Tensors llama.cpp loads but does not run for text generation (Qwen3.5's
  // next-token prediction block), by a part of their names: accepted in a
  // file and never read.
  std::vector<std::string> unused_tensors = {};
  // A mixture of experts in place of the dense feed-forward (from layer
  // leading_dense_block_count on, when the file has that key): each
  // position runs the expert_used_count experts its router rates highest,
  // weighted by their probabilities renormalised to sum 1 (llama.cpp always
  // renormalises for these families).
  ExpertGating expert_gating = ExpertGating::kNone;
};

// Limits of the recurrent layers: a DeltaNet head's size, a convolution's
// length.
constexpr int kMaxStateHead = 256;
constexpr int kMaxConvKernel = 16;
// Experts of a mixture (llama.cpp's LLAMA_MAX_EXPERTS).
constexpr int kMaxExperts = 512;

// Every family the engine runs, and one by name (nullptr when unknown).
const std::vector<Family>& supported_families();
const Family* find_family(std::string_view architecture);

struct ModelShape {
  int n_layers = 0;           // the blocks a token passes through
  int prediction_layers = 0;  // {arch}.nextn_predict_layers: blocks after them, never run
  int dim = 0;         // embedding_length
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;    // attention.key_length (default embedding_length / head_count)
  int hidden_dim = 0;  // feed_forward_length; with one per layer, the widest
  // Gemma 4's sliding layers: their heads (attention.key_length_swa) and
  // rotating elements (rope.dimension_count_swa); 0: as the others.
  int head_dim_swa = 0;
  int rope_dims_swa = 0;
  int shared_kv_layers = 0;  // attention.shared_kv_layers: the last layers reuse earlier K/V
  int n_embd_per_layer = 0;  // embedding_length_per_layer_input; 0: no per-layer inputs
  int n_vocab = 0;     // rows of token_embd
  int context_length = 0;          // the engine's, at most the trained one
  int trained_context_length = 0;  // {arch}.context_length
  float rms_eps = 0;
  int rope_dims = 0;               // elements of each head that rotate
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;    // 1 / rope.scaling.factor (linear scaling)
  float rope_attn_factor = 1.0f;   // multiplies cos and sin (Phi-3 LongRoPE)
  int rope_original_context = 0;   // rope.scaling.original_context_length
  float local_rope_freq_base = 0;  // sliding-window layers' base; 0: the global one
  int sliding_window = 0;          // positions a sliding-window layer sees; 0: none
  float attn_softcap = 0;          // 0: off
  float final_softcap = 0;         // 0: off
  float attention_scale = 0;
  // Recurrent layers: the convolution's length (DeltaNet's ssm.conv_kernel,
  // LFM2's shortconv.l_cache) and DeltaNet's heads: ssm.group_count key
  // heads of ssm.state_size, ssm.time_step_rank value heads sharing
  // ssm.inner_size.
  int conv_kernel = 0;
  int ssm_key_heads = 0;
  int ssm_head_k = 0;
  int ssm_value_heads = 0;
  int ssm_inner = 0;
  // {arch}.pooling_type, llama.cpp's llama_pooling_type: 0 none (or absent),
  // 1 mean, 2 CLS, 3 last, 4 rank.
  int pooling_type = 0;
  // A mixture of experts: expert_count experts of expert_feed_forward_length
  // each, expert_used_count per position, probabilities by softmax or
  // sigmoid; a shared expert of expert_shared_feed_forward_length (0: none);
  // the first leading_dense_block_count layers dense.
  int n_experts = 0;
  int n_experts_used = 0;
  int expert_hidden_dim = 0;
  int shared_expert_hidden_dim = 0;
  int leading_dense_layers = 0;
  bool sigmoid_gating = false;

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int max_head_dim() const { return std::max(head_dim, head_dim_swa); }
  int ssm_head_v() const { return ssm_value_heads == 0 ? 0 : ssm_inner / ssm_value_heads; }
  int ssm_qkv() const { return 2 * ssm_key_heads * ssm_head_k + ssm_inner; }
  // A size in the model's terms: head and feed-forward sizes are the global
  // ones (attention.key_length, the widest feed-forward).
  uint64_t size(Dim d) const;
  // A size in a block's tensors: its layer's own head and feed-forward sizes.
  uint64_t size(Dim d, const LayerShape& layer) const;
};

// A rotary setup some layers share; layers name theirs by index.
struct RotarySetup {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  int dims = 0;          // rotating elements of each head
  bool factors = false;  // whether ModelDescription::rope_factors divide its frequencies

  bool operator==(const RotarySetup&) const = default;
};

struct LayerShape {
  LayerKind kind = LayerKind::kAttention;
  bool sliding_window = false;  // sees only the last shape.sliding_window positions
  int rotary = 0;               // index into ModelDescription::rotary; -1: no rotary embedding
  int head_dim = 0;             // floats of each head (Gemma 4: attention.key_length_swa on sliding layers)
  int hidden_dim = 0;           // the feed-forward's width
  int kv_dim = 0;               // floats of a position's key (and value) in the cache; 0: none
  // The layer whose cached keys and values it attends over: itself, or an
  // earlier one (Gemma 4's shared KV layers, which cache none: kv_dim 0).
  int kv_source = 0;
  // Floats of a sequence's recurrent state: the convolution's last
  // conv_kernel - 1 inputs, and DeltaNet's state matrices; 0: none.
  int conv_state = 0;
  int matrix_state = 0;
  // Its feed-forward is a mixture of experts (hidden_dim is then an expert's width).
  bool experts = false;
};

// A tensor, or a run of whole rows of one, that a unit reads.
struct TensorSlice {
  const GgufTensorInfo* tensor = nullptr;  // null: this unit lacks the tensor
  const TensorSpec* spec = nullptr;        // what it is
  uint64_t first_row = 0;
  uint64_t rows = 0;

  uint64_t row_bytes() const { return tensor->bytes / tensor->rows(); }
  uint64_t offset() const { return tensor->offset + first_row * row_bytes(); }
  uint64_t bytes() const { return tensor == nullptr ? 0 : rows * row_bytes(); }
};

// One stream unit: a transformer block, or a piece of the output head. Its
// tensors are read from the file together.
struct UnitTensors {
  std::string name;  // "block 3" or "output head 2/5"
  std::vector<TensorSlice> tensors;
  uint64_t bytes = 0;  // sum of the slices' bytes
};

struct ModelDescription {
  const Family* family = nullptr;
  std::string architecture;
  std::string name;  // general.name, may be empty
  ModelShape shape;
  std::vector<LayerShape> layers;
  std::vector<RotarySetup> rotary;
  const GgufTensorInfo* token_embd = nullptr;
  // Gemma 4's per-layer token embeddings (n_embd_per_layer floats for each
  // layer, per token), or null: a table read by row, as token_embd, never
  // whole and never part of a unit.
  const GgufTensorInfo* per_layer_token_embd = nullptr;
  const GgufTensorInfo* rope_factors = nullptr;  // per-pair frequency divisors, or null
  // Units 0 .. n_layers-1 are the blocks (block 0 with the family's
  // first_block tensors); then the output head, cut
  // into pieces of whole output rows no larger than a block, so the ring's
  // buffers never need more than a block (a vocabulary-heavy head can be many
  // blocks' worth). A head piece lists output_norm (the first piece only) and
  // its rows of output (which is token_embd itself when the file ties them).
  // Last, a mixture of experts' experts, a unit each (its rows of the gate,
  // up and down tensors), layer by layer: a block holds its router, not its
  // experts, so that only the experts its positions choose are read.
  std::vector<UnitTensors> units;
  bool tied_output = false;
  uint64_t head_rows_per_piece = 0;
  int first_expert = 0;                  // the first expert unit (n_units() when none)
  std::vector<int> first_expert_of_layer;  // per layer; -1: a dense layer

  // Whether any layer keeps a recurrent state (which cannot be cut back to
  // an earlier position as the KV cache can).
  bool has_recurrent_state() const;
  std::vector<int> layer_kv_dims() const;

  int first_head_unit() const { return shape.n_layers; }
  int end_head_unit() const { return first_expert; }
  int n_units() const { return static_cast<int>(units.size()); }
  bool is_head(int unit) const { return unit >= shape.n_layers && unit < first_expert; }
  bool is_expert(int unit) const { return unit >= first_expert; }
  // Expert e of an expert layer's unit.
  int expert_unit(int layer, int e) const { return first_expert_of_layer[static_cast<size_t>(layer)] + e; }
  // Every unit plus the tables read by row (an untied token_embd,
  // per_layer_token_embd).
  uint64_t weight_bytes() const;
  // The widest layer's sizes: what buffers for every layer take.
  int max_q_dim() const { return shape.n_heads * shape.max_head_dim(); }
  int max_kv_dim() const { return shape.n_kv_heads * shape.max_head_dim(); }
  // Multiply-adds of one position through the blocks' matrices (ModelInfo::
  // multiply_adds_per_token).
  uint64_t block_multiply_adds() const;
  // The hyper-parameters by name ("n_layers", "sliding_window", ...), the
  // ones that apply to this model, for ModelInfo.
  std::vector<std::pair<std::string, double>> hyperparameters() const;
};

// context_length: the context the engine will run (0: the model's own); it
// caps the model's and picks Phi-3's long or short rope factors, as llama.cpp
// picks them by its context size.
//
// Throws Error: kUnsupported for an unknown architecture (naming the supported
// ones) or a feature the engine lacks, kFormat naming the key or tensor for
// missing keys, missing tensors, shapes that contradict the hyper-parameters
// and values out of range.
ModelDescription describe_model(const GgufFile& file, int context_length = 0);

}  // namespace sipllm

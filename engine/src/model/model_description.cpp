#include "model/model_description.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "sipllm/gguf_split.h"
#include "sipllm/error.h"

namespace sipllm {
namespace {

[[noreturn]] void format_error(const std::string& message) {
  throw Error(ErrorKind::kFormat, message);
}

[[noreturn]] void unsupported(const std::string& message) {
  throw Error(ErrorKind::kUnsupported, message);
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string number_text(double value) {
  std::string s = std::to_string(value);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// Reads the hyper-parameters under the file's own "{arch}." prefix.
class KeyReader {
 public:
  KeyReader(const GgufFile& file, const std::string& architecture)
      : file_(file), prefix_(architecture + ".") {}

  std::string key(const std::string& name) const { return prefix_ + name; }
  bool has(const std::string& name) const { return file_.find(key(name)) != nullptr; }

  // A count or size: a positive integer of sane magnitude.
  int size(const std::string& name) const { return checked_size(name, file_.require_uint(key(name))); }
  int size(const std::string& name, int fallback) const {
    return has(name) ? size(name) : fallback;
  }

  // A positive finite number.
  float positive(const std::string& name, double fallback) const {
    return has(name) ? positive(name) : static_cast<float>(fallback);
  }
  float positive(const std::string& name) const {
    const GgufValue* v = file_.find(key(name));
    double value = 0;
    if (v != nullptr && v->is_integer()) {
      value = static_cast<double>(v->integer);
    } else {
      value = file_.require_real(key(name));
    }
    if (!std::isfinite(value) || !(value > 0) || value > 3.4e38) {
      format_error("metadata key '" + key(name) + "' = " + number_text(value) +
                   " must be a positive finite number");
    }
    return static_cast<float>(value);
  }

  // One size per layer: an array of `n` entries, or one number for all (as
  // llama.cpp's get_key_or_arr reads feed_forward_length).
  std::vector<int> sizes(const std::string& name, int n) const {
    const GgufValue* v = file_.find(key(name));
    if (v == nullptr || v->type != GgufType::kArray) return std::vector<int>(static_cast<size_t>(n), size(name));
    const GgufValue& array = file_.require_array(key(name), GgufType::kUint32);
    check_length(name, array, n);
    std::vector<int> values;
    for (int64_t x : array.integers) values.push_back(checked_size(name, x < 0 ? 0 : static_cast<uint64_t>(x)));
    return values;
  }

  // One bool per layer: an array of `n` entries.
  std::vector<bool> flags(const std::string& name, int n) const {
    const GgufValue& array = file_.require_array(key(name), GgufType::kBool);
    check_length(name, array, n);
    std::vector<bool> values;
    for (int64_t x : array.integers) values.push_back(x != 0);
    return values;
  }

  // A window length: a positive integer, whether stored as one or as a float.
  int whole(const std::string& name) const {
    const float value = positive(name);
    if (value != std::floor(value) || value > static_cast<float>(1 << 30)) {
      format_error("metadata key '" + key(name) + "' = " + number_text(value) + " must be a whole number of positions");
    }
    return static_cast<int>(value);
  }

 private:
  void check_length(const std::string& name, const GgufValue& array, int n) const {
    if (array.array_size() != static_cast<uint64_t>(n)) {
      format_error(key(name) + " has " + std::to_string(array.array_size()) + " entries for " + std::to_string(n) +
                   " layers (" + key("block_count") + ")");
    }
  }

  int checked_size(const std::string& name, uint64_t value) const {
    if (value == 0 || value > (1u << 30)) {
      format_error("metadata key '" + key(name) + "' = " + std::to_string(value) + " is out of range");
    }
    return static_cast<int>(value);
  }

  const GgufFile& file_;
  std::string prefix_;
};

std::string supported_list() {
  std::string list;
  for (const Family& f : supported_families()) list += (list.empty() ? "" : ", ") + f.architecture;
  return list;
}

ModelShape read_shape(const GgufFile& file, const Family& family, int context_length) {
  const KeyReader keys(file, family.architecture);
  ModelShape s;
  s.dim = keys.size("embedding_length");
  s.n_layers = keys.size("block_count");
  // Every block has tensors of its own: a count beyond the file's tensors is
  // a damaged file, refused before anything is made per block.
  if (static_cast<uint64_t>(s.n_layers) > file.tensors().size()) {
    format_error(keys.key("block_count") + " " + std::to_string(s.n_layers) + " is more blocks than the file's " +
                 std::to_string(file.tensors().size()) + " tensors can hold");
  }
  // Blocks past the last one a token passes through: next-token prediction
  // layers (Qwen3.5's MTP, as llama.cpp's converter counts them in
  // block_count), loaded by llama.cpp for speculative decoding and never run
  // for text generation: their tensors are accepted and not read.
  const int blocks = s.n_layers;
  s.prediction_layers = keys.has("nextn_predict_layers") ? keys.size("nextn_predict_layers") : 0;
  if (s.prediction_layers >= blocks) {
    format_error(keys.key("nextn_predict_layers") + " " + std::to_string(s.prediction_layers) + " leaves none of the " +
                 std::to_string(blocks) + " blocks (" + keys.key("block_count") + ") to run");
  }
  s.n_layers = blocks - s.prediction_layers;
  // Mixture of experts: the widths of its experts, which layers have them.
  if (family.expert_gating != ExpertGating::kNone) {
    s.n_experts = keys.size("expert_count");
    s.n_experts_used = keys.size("expert_used_count");
    if (s.n_experts_used > s.n_experts || s.n_experts > kMaxExperts) {
      format_error(keys.key("expert_used_count") + " " + std::to_string(s.n_experts_used) + " and " +
                   keys.key("expert_count") + " " + std::to_string(s.n_experts) +
                   ": a position uses at most all the experts, of which there are at most " +
                   std::to_string(kMaxExperts));
    }
    s.expert_hidden_dim = keys.size("expert_feed_forward_length");
    if (std::any_of(family.block.begin(), family.block.end(),
                    [](const TensorSpec& spec) { return spec.shape.size() == 2 && spec.shape[1] == Dim::kSharedFf; })) {
      s.shared_expert_hidden_dim = keys.size("expert_shared_feed_forward_length");
    }
    s.leading_dense_layers = static_cast<int>(std::min<uint64_t>(file.get_uint(keys.key("leading_dense_block_count"), 0),
                                                                  uint64_t{1} << 30));
    if (s.leading_dense_layers > s.n_layers) {
      format_error(keys.key("leading_dense_block_count") + " " + std::to_string(s.leading_dense_layers) +
                   " is more than the " + std::to_string(s.n_layers) + " layers");
    }
    if (family.expert_gating == ExpertGating::kFromKey) {
      const uint64_t gating = file.require_uint(keys.key("expert_gating_func"));
      if (gating != 1 && gating != 2) {
        unsupported(keys.key("expert_gating_func") + " " + std::to_string(gating) +
                    " is not a gating function this engine runs (1 softmax, 2 sigmoid)");
      }
      s.sigmoid_gating = gating == 2;
    }
    // Each expert's rows of a matrix kept in tiles of four rows (WeightMatrix)
    // are whole tiles.
    if (s.expert_hidden_dim % WeightMatrix::kTileRows != 0 || s.dim % WeightMatrix::kTileRows != 0) {
      unsupported("experts of " + std::to_string(s.expert_hidden_dim) + " (" + keys.key("expert_feed_forward_length") +
                  ") by " + std::to_string(s.dim) + ": this engine runs multiples of " +
                  std::to_string(WeightMatrix::kTileRows));
    }
  } else if (file.get_uint(keys.key("expert_count"), 0) > 0) {
    unsupported("mixture-of-experts " + family.architecture + " models (" + keys.key("expert_count") +
                ") are not supported");
  }
  // The dense layers' width (none when every layer has experts, as in a
  // Qwen3.5-MoE file, which has no key for it).
  std::vector<int> hidden = s.n_experts > 0 && s.leading_dense_layers == 0 && !keys.has("feed_forward_length")
                                ? std::vector<int>(static_cast<size_t>(blocks), 0)
                                : keys.sizes("feed_forward_length", blocks);
  hidden.resize(static_cast<size_t>(s.n_layers));
  s.hidden_dim = std::max({*std::max_element(hidden.begin(), hidden.end()), s.expert_hidden_dim,
                           s.shared_expert_hidden_dim});
  s.n_heads = keys.size("attention.head_count");
  if (family.hybrid == HybridLayers::kZeroKvHeads) {
    // One count per layer, 0 for the recurrent ones; the attention layers
    // must agree.
    const GgufValue& counts = file.require_array(keys.key("attention.head_count_kv"), GgufType::kInt32);
    if (counts.array_size() != static_cast<uint64_t>(s.n_layers)) {
      format_error(keys.key("attention.head_count_kv") + " has " + std::to_string(counts.array_size()) +
                   " entries for " + std::to_string(s.n_layers) + " layers");
    }
    for (int64_t c : counts.integers) {
      if (c < 0 || c > (1 << 20) || (c > 0 && s.n_kv_heads > 0 && c != s.n_kv_heads)) {
        unsupported(keys.key("attention.head_count_kv") + " gives the attention layers different head counts");
      }
      if (c > 0) s.n_kv_heads = static_cast<int>(c);
    }
    if (s.n_kv_heads == 0) s.n_kv_heads = s.n_heads;  // no attention layer at all
  } else {
    s.n_kv_heads = keys.size("attention.head_count_kv", s.n_heads);
  }
  s.trained_context_length = keys.size("context_length");
  s.rms_eps = keys.positive("attention.layer_norm_rms_epsilon");
  if (s.n_heads % s.n_kv_heads != 0) {
    format_error(keys.key("attention.head_count") + " " + std::to_string(s.n_heads) + " is not a multiple of " +
                 keys.key("attention.head_count_kv") + " " + std::to_string(s.n_kv_heads));
  }
  if (!keys.has("attention.key_length") && s.dim % s.n_heads != 0) {
    format_error(keys.key("embedding_length") + " " + std::to_string(s.dim) + " is not divisible by " +
                 keys.key("attention.head_count") + " " + std::to_string(s.n_heads) +
                 " and the file gives no attention.key_length");
  }
  s.head_dim = keys.size("attention.key_length", s.dim / std::max(1, s.n_heads));
  if (keys.size("attention.value_length", s.head_dim) != s.head_dim) {
    unsupported(keys.key("attention.value_length") + " differs from attention.key_length");
  }
  if (family.sliding_head_dims) {
    s.head_dim_swa = keys.size("attention.key_length_swa");
    if (keys.size("attention.value_length_swa", s.head_dim_swa) != s.head_dim_swa) {
      unsupported(keys.key("attention.value_length_swa") + " differs from attention.key_length_swa");
    }
  }
  if (family.shared_kv) {
    s.shared_kv_layers = static_cast<int>(std::min<uint64_t>(file.get_uint(keys.key("attention.shared_kv_layers"), 0),
                                                             uint64_t{1} << 30));
    if (s.shared_kv_layers >= s.n_layers) {
      format_error("metadata key '" + keys.key("attention.shared_kv_layers") + "' = " +
                   std::to_string(s.shared_kv_layers) + " leaves none of the " + std::to_string(s.n_layers) +
                   " layers (" + keys.key("block_count") + ") computing keys and values of its own");
    }
  }
  const auto per_layer_input = [](const TensorSpec& spec) { return spec.per_layer_input; };
  if (std::any_of(family.block.begin(), family.block.end(), per_layer_input) ||
      std::any_of(family.first_block.begin(), family.first_block.end(), per_layer_input)) {
    // 0 or absent: a model without per-layer inputs.
    if (keys.has("embedding_length_per_layer_input") &&
        file.require_uint(keys.key("embedding_length_per_layer_input")) > 0) {
      s.n_embd_per_layer = keys.size("embedding_length_per_layer_input");
    }
  }
  // Recurrent layers.
  if (family.recurrent_kind == LayerKind::kDeltaNet) {
    s.conv_kernel = keys.size("ssm.conv_kernel");
    s.ssm_head_k = keys.size("ssm.state_size");
    s.ssm_key_heads = keys.size("ssm.group_count");
    s.ssm_value_heads = keys.size("ssm.time_step_rank");
    s.ssm_inner = keys.size("ssm.inner_size");
    if (s.ssm_inner % s.ssm_value_heads != 0 || s.ssm_value_heads % s.ssm_key_heads != 0) {
      format_error(keys.key("ssm.inner_size") + " " + std::to_string(s.ssm_inner) + " must split evenly into " +
                   keys.key("ssm.time_step_rank") + " " + std::to_string(s.ssm_value_heads) +
                   " value heads, a multiple of " + keys.key("ssm.group_count") + " " +
                   std::to_string(s.ssm_key_heads) + " key heads");
    }
    if (s.ssm_head_k > kMaxStateHead || s.ssm_head_v() > kMaxStateHead || s.ssm_head_k % 4 != 0 ||
        s.ssm_head_v() % 4 != 0) {
      unsupported("DeltaNet heads of " + std::to_string(s.ssm_head_k) + " keys (" + keys.key("ssm.state_size") +
                  ") and " + std::to_string(s.ssm_head_v()) + " values: this engine runs multiples of 4 up to " +
                  std::to_string(kMaxStateHead));
    }
  } else if (family.recurrent_kind == LayerKind::kShortConv) {
    s.conv_kernel = keys.size("shortconv.l_cache");
  }
  if (s.conv_kernel > kMaxConvKernel) {
    format_error("a convolution of " + std::to_string(s.conv_kernel) + " positions (" +
                 keys.key(family.recurrent_kind == LayerKind::kDeltaNet ? "ssm.conv_kernel" : "shortconv.l_cache") +
                 ") is more than the " + std::to_string(kMaxConvKernel) + " this engine supports");
  }

  // Rotary embedding.
  s.rope_dims = keys.size("rope.dimension_count", s.head_dim);
  if (s.rope_dims > s.head_dim || s.rope_dims % 2 != 0) {
    format_error(keys.key("rope.dimension_count") + " " + std::to_string(s.rope_dims) +
                 " must be even and at most the head size " + std::to_string(s.head_dim));
  }
  if (family.sliding_head_dims) {
    s.rope_dims_swa = keys.size("rope.dimension_count_swa", s.head_dim_swa);
    if (s.rope_dims_swa > s.head_dim_swa || s.rope_dims_swa % 2 != 0) {
      format_error(keys.key("rope.dimension_count_swa") + " " + std::to_string(s.rope_dims_swa) +
                   " must be even and at most the sliding layers' head size " + std::to_string(s.head_dim_swa));
    }
  }
  s.rope_freq_base = keys.positive("rope.freq_base", 10000.0);
  // As llama.cpp: a scaling factor without a type is linear; "none" turns it
  // off; LongRoPE's factors are tensors (RopeFactors::kLongShort).
  const std::string scaling = file.get_string(keys.key("rope.scaling.type"), "linear");
  float factor = 1.0f;
  if (keys.has("rope.scaling.factor")) {
    factor = keys.positive("rope.scaling.factor");
  } else if (keys.has("rope.scale_linear")) {
    factor = keys.positive("rope.scale_linear");
  }
  if (scaling == "linear") {
    s.rope_freq_scale = 1.0f / factor;
  } else if (scaling != "none" && scaling != "longrope") {
    unsupported(keys.key("rope.scaling.type") + " '" + scaling + "' is not supported (linear, none)");
  }
  s.rope_attn_factor = keys.positive("rope.scaling.attn_factor", 1.0);
  s.rope_original_context = keys.size("rope.scaling.original_context_length", s.trained_context_length);

  // Attention variants.
  if (family.sliding_window_pattern > 0 || family.sliding_window_flags) {
    // Required with a flag per layer (llama.cpp's Gemma 4 needs it).
    s.sliding_window = keys.has("attention.sliding_window") || family.sliding_window_flags
                           ? keys.whole("attention.sliding_window")
                           : family.sliding_window_default;
    if (family.local_rope_base > 0 || family.sliding_head_dims) {
      s.local_rope_freq_base =
          keys.positive("rope.freq_base_swa", family.local_rope_base > 0 ? family.local_rope_base : s.rope_freq_base);
    }
  }
  if (family.attn_softcap_default > 0) {
    s.attn_softcap = keys.positive("attn_logit_softcapping", family.attn_softcap_default);
  }
  if (family.final_softcap_default > 0) {
    s.final_softcap = keys.positive("final_logit_softcapping", family.final_softcap_default);
  }
  s.pooling_type = static_cast<int>(file.get_uint(keys.key("pooling_type"), 0));
  if (s.pooling_type > 4) {
    format_error("metadata key '" + keys.key("pooling_type") + "' = " + std::to_string(s.pooling_type) +
                 " is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
  }
  s.attention_scale = family.attention_scale != nullptr
                          ? family.attention_scale(s)
                          : 1.0f / std::sqrt(static_cast<float>(s.head_dim));

  if (context_length < 0) throw Error(ErrorKind::kInvalidArgument, "context_length must be >= 0");
  s.context_length = context_length > 0 ? std::min(context_length, s.trained_context_length)
                                        : s.trained_context_length;
  return s;
}

// Layer il's variant: what kind it is, whether it slides, its head and
// feed-forward sizes, which rotary setup it uses, what it keeps per sequence
// and whose keys and values it attends over.
void describe_layers(const GgufFile& file, const Family& family, ModelDescription& d) {
  const ModelShape& s = d.shape;
  const KeyReader keys(file, family.architecture);
  int full_attention_interval = 0;
  const GgufValue* kv_heads = nullptr;
  if (family.hybrid == HybridLayers::kFullAttentionInterval) {
    full_attention_interval = keys.size("full_attention_interval", 4);  // llama.cpp's default
  } else if (family.hybrid == HybridLayers::kZeroKvHeads) {
    kv_heads = &file.require_array(keys.key("attention.head_count_kv"), GgufType::kInt32);
  }
  const std::vector<int> hidden = keys.has("feed_forward_length") ? keys.sizes("feed_forward_length", s.n_layers)
                                                                  : std::vector<int>(static_cast<size_t>(s.n_layers), 0);
  std::vector<bool> slides;
  if (family.sliding_window_flags) slides = keys.flags("attention.sliding_window_pattern", s.n_layers);
  // The rope factors: on every layer, or (Gemma 4) on those that do not slide.
  const bool factors = d.rope_factors != nullptr;
  const RotarySetup global{s.rope_freq_base, s.rope_freq_scale, s.rope_dims, factors};
  const RotarySetup local{s.local_rope_freq_base, 1.0f, s.rope_dims_swa > 0 ? s.rope_dims_swa : s.rope_dims,
                          factors && family.rope_factors != RopeFactors::kFreqsFullAttention};
  // llama.cpp's rule for the last shared_kv_layers layers: a sliding one
  // attends over the keys and values of layer first_shared - 2, another over
  // those of layer first_shared - 1.
  const int first_shared = s.n_layers - s.shared_kv_layers;
  for (int il = 0; il < s.n_layers; ++il) {
    LayerShape layer;
    bool attends = true;
    if (full_attention_interval > 0) attends = (il + 1) % full_attention_interval == 0;
    if (kv_heads != nullptr) attends = kv_heads->integers[static_cast<size_t>(il)] > 0;
    layer.kind = attends ? LayerKind::kAttention : family.recurrent_kind;
    const int pattern = family.sliding_window_pattern;
    layer.sliding_window = attends && s.sliding_window > 0 &&
                           (family.sliding_window_flags ? slides[static_cast<size_t>(il)]
                                                        : pattern > 0 && il % pattern < pattern - 1);
    layer.head_dim = layer.sliding_window && s.head_dim_swa > 0 ? s.head_dim_swa : s.head_dim;
    layer.experts = s.n_experts > 0 && il >= s.leading_dense_layers;
    layer.hidden_dim = layer.experts ? s.expert_hidden_dim : hidden[static_cast<size_t>(il)];
    layer.kv_source = il;
    if (attends && il >= first_shared) {
      const int source = first_shared - (layer.sliding_window ? 2 : 1);
      const LayerShape* from = source >= 0 ? &d.layers[static_cast<size_t>(source)] : nullptr;
      if (from == nullptr || from->kind != LayerKind::kAttention || from->sliding_window != layer.sliding_window ||
          from->head_dim != layer.head_dim) {
        format_error("layer " + std::to_string(il) + " (" + (layer.sliding_window ? "sliding" : "full") +
                     " attention), one of the last " + std::to_string(s.shared_kv_layers) + " (" +
                     keys.key("attention.shared_kv_layers") + "), would attend over the keys and values of layer " +
                     std::to_string(source) + ", which " +
                     (from == nullptr ? std::string("does not exist")
                                      : "is not a " + std::string(layer.sliding_window ? "sliding" : "full") +
                                            " attention layer with heads of " + std::to_string(layer.head_dim)));
      }
      layer.kv_source = source;
    }
    switch (layer.kind) {
      case LayerKind::kAttention: layer.kv_dim = layer.kv_source == il ? s.n_kv_heads * layer.head_dim : 0; break;
      case LayerKind::kDeltaNet:
        layer.conv_state = (s.conv_kernel - 1) * s.ssm_qkv();
        layer.matrix_state = s.ssm_value_heads * s.ssm_head_k * s.ssm_head_v();
        break;
      case LayerKind::kShortConv: layer.conv_state = (s.conv_kernel - 1) * s.dim; break;
    }
    const bool rotates = attends && (family.no_rope_every == 0 || (il + 1) % family.no_rope_every != 0);
    if (!rotates) {
      layer.rotary = -1;
    } else {
      const RotarySetup setup = layer.sliding_window && s.local_rope_freq_base > 0 ? local : global;
      auto found = std::find(d.rotary.begin(), d.rotary.end(), setup);
      if (found == d.rotary.end()) found = d.rotary.insert(d.rotary.end(), setup);
      layer.rotary = static_cast<int>(found - d.rotary.begin());
    }
    d.layers.push_back(layer);
  }
}

const GgufTensorInfo* check_shape(const GgufTensorInfo* t, const std::vector<uint64_t>& expected) {
  // Trailing dimensions of 1 are insignificant.
  std::vector<uint64_t> dims = t->dims;
  while (dims.size() > expected.size() && dims.back() == 1) dims.pop_back();
  if (dims != expected) {
    format_error("tensor '" + t->name + "' has shape " + shape_text(t->dims) + ", expected " +
                 shape_text(expected) + " from the hyper-parameters");
  }
  return t;
}

// Vectors (norms, biases, rope factors) are applied as floats; the loader
// converts F16/BF16 ones, but block-quantized vectors are refused.
void require_float_vector(const GgufTensorInfo* t) {
  if (t->type != TensorType::kF32 && t->type != TensorType::kF16 && t->type != TensorType::kBF16) {
    unsupported("tensor '" + t->name + "' is a vector stored as " + tensor_type_name(t->type_id) +
                "; vectors must be F32, F16 or BF16");
  }
}

// The shared head specs: the final norm and the output matrix.
const TensorSpec& output_norm_spec() {
  static const TensorSpec spec{.name = "output_norm.weight", .shape = {Dim::kEmbd},
                               .vector = &UnitWeights::output_norm, .matrices = {}};
  return spec;
}
const TensorSpec& output_spec() {
  static const TensorSpec spec{.name = "output.weight", .shape = {Dim::kEmbd, Dim::kVocab},
                               .matrices = {{&UnitWeights::output, Dim::kVocab}}};
  return spec;
}

class TensorFinder {
 public:
  TensorFinder(const GgufFile& file, const ModelShape& shape) : file_(file), shape_(shape) {}

  // The tensor `name` with `spec`'s shape, in the sizes of `layer` for a
  // block's tensor; null when absent and optional.
  const GgufTensorInfo* find(const std::string& name, const TensorSpec& spec, const LayerShape* layer = nullptr) {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) {
      if (spec.required) format_error("missing tensor '" + name + "'");
      return nullptr;
    }
    std::vector<uint64_t> expected;
    for (Dim d : spec.shape) expected.push_back(layer != nullptr ? shape_.size(d, *layer) : shape_.size(d));
    check_shape(t, expected);
    if (spec.is_vector()) require_float_vector(t);
    used_.insert(name);
    return t;
  }

  const GgufTensorInfo* find_vector(const std::string& name, uint64_t length) {
    const GgufTensorInfo* t = file_.find_tensor(name);
    if (t == nullptr) return nullptr;
    check_shape(t, {length});
    require_float_vector(t);
    used_.insert(name);
    return t;
  }

  void mark_used(const std::string& name) { used_.insert(name); }

  // A tensor the family's graph does not use (a bias, an extra norm) would
  // change the output if ignored, so refuse rather than guess.
  void refuse_unused(const std::string& architecture) const {
    for (const GgufTensorInfo& t : file_.tensors()) {
      if (used_.count(t.name) == 0) {
        unsupported("tensor '" + t.name + "' is not part of the " + architecture +
                    " architecture as this engine runs it");
      }
    }
  }

 private:
  const GgufFile& file_;
  const ModelShape& shape_;
  std::set<std::string> used_;
};

}  // namespace

uint64_t ModelShape::size(Dim d, const LayerShape& layer) const {
  const auto q = static_cast<uint64_t>(n_heads) * static_cast<uint64_t>(layer.head_dim);
  const auto kv = static_cast<uint64_t>(n_kv_heads) * static_cast<uint64_t>(layer.head_dim);
  switch (d) {
    case Dim::kHeadDim: return static_cast<uint64_t>(layer.head_dim);
    case Dim::kQ: return q;
    case Dim::kKv: return kv;
    case Dim::kQkv: return q + 2 * kv;
    case Dim::kFf: return static_cast<uint64_t>(layer.hidden_dim);
    case Dim::kFf2: return 2 * static_cast<uint64_t>(layer.hidden_dim);
    case Dim::kQGated: return 2 * q;
    default: return size(d);
  }
}

uint64_t ModelShape::size(Dim d) const {
  switch (d) {
    case Dim::kEmbd: return static_cast<uint64_t>(dim);
    case Dim::kHeadDim: return static_cast<uint64_t>(head_dim);
    case Dim::kQ: return static_cast<uint64_t>(q_dim());
    case Dim::kKv: return static_cast<uint64_t>(kv_dim());
    case Dim::kQkv: return static_cast<uint64_t>(q_dim()) + 2 * static_cast<uint64_t>(kv_dim());
    case Dim::kFf: return static_cast<uint64_t>(hidden_dim);
    case Dim::kFf2: return 2 * static_cast<uint64_t>(hidden_dim);
    case Dim::kVocab: return static_cast<uint64_t>(n_vocab);
    case Dim::kQGated: return 2 * static_cast<uint64_t>(q_dim());
    case Dim::kConvKernel: return static_cast<uint64_t>(conv_kernel);
    case Dim::kEmbd3: return 3 * static_cast<uint64_t>(dim);
    case Dim::kSsmQkv: return static_cast<uint64_t>(ssm_qkv());
    case Dim::kSsmInner: return static_cast<uint64_t>(ssm_inner);
    case Dim::kSsmHeads: return static_cast<uint64_t>(ssm_value_heads);
    case Dim::kSsmHeadV: return static_cast<uint64_t>(ssm_head_v());
    case Dim::kEmbdPerLayer: return static_cast<uint64_t>(n_embd_per_layer);
    case Dim::kEmbdAllLayers: return static_cast<uint64_t>(n_embd_per_layer) * static_cast<uint64_t>(n_layers);
    case Dim::kOne: return 1;
    case Dim::kExperts: return static_cast<uint64_t>(n_experts);
    case Dim::kExpertFf: return static_cast<uint64_t>(expert_hidden_dim);
    case Dim::kExpertsFf: return static_cast<uint64_t>(expert_hidden_dim) * static_cast<uint64_t>(n_experts);
    case Dim::kExpertsEmbd: return static_cast<uint64_t>(dim) * static_cast<uint64_t>(n_experts);
    case Dim::kSharedFf: return static_cast<uint64_t>(shared_expert_hidden_dim);
  }
  return 0;
}

bool ModelDescription::has_recurrent_state() const {
  return std::any_of(layers.begin(), layers.end(), [](const LayerShape& l) { return l.kind != LayerKind::kAttention; });
}

std::vector<int> ModelDescription::layer_kv_dims() const {
  std::vector<int> dims;
  for (const LayerShape& l : layers) dims.push_back(l.kv_dim);
  return dims;
}

uint64_t ModelDescription::weight_bytes() const {
  uint64_t total = 0;
  for (const UnitTensors& unit : units) total += unit.bytes;
  if (!tied_output) total += token_embd->bytes;
  if (per_layer_token_embd != nullptr) total += per_layer_token_embd->bytes;
  return total;
}

uint64_t ModelDescription::block_multiply_adds() const {
  uint64_t total = 0;
  // A position runs the experts it chose: expert_used_count of each layer's.
  for (int unit = first_expert; unit < n_units(); ++unit) {
    for (const TensorSlice& slice : units[static_cast<size_t>(unit)].tensors) {
      total += slice.rows * slice.tensor->row_length() * static_cast<uint64_t>(shape.n_experts_used) /
               static_cast<uint64_t>(shape.n_experts);
    }
  }
  for (int unit = 0; unit < shape.n_layers; ++unit) {
    for (const TensorSlice& slice : units[static_cast<size_t>(unit)].tensors) {
      if (slice.tensor != nullptr && !slice.spec->is_vector()) total += slice.rows * slice.tensor->row_length();
    }
  }
  return total;
}

std::vector<std::pair<std::string, double>> ModelDescription::hyperparameters() const {
  const ModelShape& s = shape;
  std::vector<std::pair<std::string, double>> list = {
      {"n_layers", s.n_layers},
      {"dim", s.dim},
      {"hidden_dim", s.hidden_dim},
      {"n_heads", s.n_heads},
      {"n_kv_heads", s.n_kv_heads},
      {"head_dim", s.head_dim},
      {"n_vocab", s.n_vocab},
      {"context_length", s.context_length},
      {"trained_context_length", s.trained_context_length},
      {"rms_eps", s.rms_eps},
      {"rope_dims", s.rope_dims},
      {"rope_freq_base", s.rope_freq_base},
  };
  if (s.rope_freq_scale != 1.0f) list.emplace_back("rope_freq_scale", s.rope_freq_scale);
  if (s.rope_attn_factor != 1.0f) list.emplace_back("rope_attn_factor", s.rope_attn_factor);
  if (s.sliding_window > 0) list.emplace_back("sliding_window", s.sliding_window);
  if (s.local_rope_freq_base > 0) list.emplace_back("local_rope_freq_base", s.local_rope_freq_base);
  if (s.attn_softcap > 0) list.emplace_back("attn_softcap", s.attn_softcap);
  if (s.final_softcap > 0) list.emplace_back("final_softcap", s.final_softcap);
  if (s.pooling_type > 0) list.emplace_back("pooling_type", s.pooling_type);
  if (s.head_dim_swa > 0) list.emplace_back("head_dim_swa", s.head_dim_swa);
  if (s.rope_dims_swa > 0) list.emplace_back("rope_dims_swa", s.rope_dims_swa);
  if (s.shared_kv_layers > 0) list.emplace_back("shared_kv_layers", s.shared_kv_layers);
  if (s.n_embd_per_layer > 0) list.emplace_back("n_embd_per_layer", s.n_embd_per_layer);
  if (s.n_experts > 0) {
    list.emplace_back("n_experts", s.n_experts);
    list.emplace_back("n_experts_used", s.n_experts_used);
    list.emplace_back("expert_hidden_dim", s.expert_hidden_dim);
  }
  if (s.shared_expert_hidden_dim > 0) list.emplace_back("shared_expert_hidden_dim", s.shared_expert_hidden_dim);
  if (s.leading_dense_layers > 0) list.emplace_back("leading_dense_layers", s.leading_dense_layers);
  return list;
}

ModelDescription describe_model(const GgufFile& file, int context_length) {
  // One part of a split model lacks the other parts' tensors; read alone it
  // would fail on the first one missing, without saying why.
  if (const uint64_t parts = file.get_uint(kSplitCountKey, 0); parts > 1) {
    const int count = static_cast<int>(std::min<uint64_t>(parts, 99999));
    throw Error(ErrorKind::kInvalidArgument,
                "the file is part " + std::to_string(file.get_uint(kSplitNoKey, 0) + 1) + " of " +
                    std::to_string(parts) + " of a split model (gguf-split): open the model by its first "
                    "part, under the name gguf-split gave it (" + split_part_name("NAME", 0, count) +
                    "), which brings the others (open_split_model)");
  }
  ModelDescription d;
  d.architecture = file.require_string("general.architecture");
  d.family = find_family(d.architecture);
  if (d.family == nullptr) {
    unsupported("architecture '" + d.architecture + "' (general.architecture) is not supported; this engine runs " +
                supported_list());
  }
  const Family& family = *d.family;
  d.name = file.get_string("general.name", "");
  d.shape = read_shape(file, family, context_length);
  ModelShape& s = d.shape;

  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) format_error("missing tensor 'token_embd.weight'");
  if (embd->dims.size() < 2 || embd->dims[0] != static_cast<uint64_t>(s.dim)) {
    format_error("tensor 'token_embd.weight' has shape " + shape_text(embd->dims) + ", expected [" +
                 std::to_string(s.dim) + ", n_vocab]");
  }
  if (embd->dims[1] == 0 || embd->dims[1] > (1u << 30)) format_error("tensor 'token_embd.weight' has no usable rows");
  s.n_vocab = static_cast<int>(embd->dims[1]);
  d.token_embd = check_shape(embd, {s.size(Dim::kEmbd), s.size(Dim::kVocab)});
  TensorFinder tensors(file, s);
  tensors.mark_used("token_embd.weight");

  // Per-pair rotary frequency divisors, which the rope tables fold in.
  const uint64_t pairs = static_cast<uint64_t>(s.rope_dims / 2);
  if (family.rope_factors == RopeFactors::kFreqs) {
    d.rope_factors = tensors.find_vector("rope_freqs.weight", pairs);
  } else if (family.rope_factors == RopeFactors::kFreqsFullAttention) {
    // One factor per pair of a full-attention head, which llama.cpp requires.
    d.rope_factors = tensors.find_vector("rope_freqs.weight", static_cast<uint64_t>(s.head_dim / 2));
    if (d.rope_factors == nullptr) format_error("missing tensor 'rope_freqs.weight'");
  } else if (family.rope_factors == RopeFactors::kLongShort) {
    const GgufTensorInfo* long_factors = tensors.find_vector("rope_factors_long.weight", pairs);
    const GgufTensorInfo* short_factors = tensors.find_vector("rope_factors_short.weight", pairs);
    if ((long_factors == nullptr) != (short_factors == nullptr)) {
      format_error("a file with rope_factors_long.weight must have rope_factors_short.weight too, and "
                   "the other way round");
    }
    // As llama.cpp: the long factors once the context exceeds the trained
    // original context.
    d.rope_factors = s.context_length > s.rope_original_context ? long_factors : short_factors;
  }

  describe_layers(file, family, d);

  auto whole = [](const GgufTensorInfo* t, const TensorSpec* spec) {
    return TensorSlice{t, spec, 0, t == nullptr ? 0 : t->rows()};
  };
  // What the model has and a layer lacks (or carries unread) is refused
  // below if the file has it.
  const auto held = [&](const TensorSpec& spec) { return !spec.per_layer_input || s.n_embd_per_layer > 0; };
  uint64_t largest_block = 0;
  std::vector<std::vector<TensorSlice>> experts_of_layer(static_cast<size_t>(s.n_layers));
  for (int l = 0; l < s.n_layers; ++l) {
    UnitTensors unit;
    unit.name = "block " + std::to_string(l);
    const LayerShape& layer = d.layers[static_cast<size_t>(l)];
    const uint8_t kind = TensorSpec::only(layer.kind);
    const auto add = [&](const std::string& name, const TensorSpec& spec, const LayerShape* sizes) {
      const GgufTensorInfo* t = tensors.find(name, spec, sizes);
      if (t == nullptr) return;
      if (spec.per_expert) {  // its own units, below
        experts_of_layer[static_cast<size_t>(l)].push_back(whole(t, &spec));
        return;
      }
      unit.tensors.push_back(whole(t, &spec));
      unit.bytes += t->bytes;
    };
    const TensorSpec::Ffn ffn = layer.experts ? TensorSpec::Ffn::kExperts : TensorSpec::Ffn::kDense;
    for (const TensorSpec& spec : family.block) {
      if ((spec.layers & kind) == 0 || !held(spec) || (spec.ffn != TensorSpec::Ffn::kAny && spec.ffn != ffn)) continue;
      const std::string name = "blk." + std::to_string(l) + "." + spec.name;
      if (spec.kv_projection && layer.kv_source != l) {
        if (file.find_tensor(name) != nullptr) tensors.mark_used(name);  // carried, never read
        continue;
      }
      add(name, spec, &layer);
    }
    // Gemma 4's projection into per-layer inputs: block 0 reads it, as it
    // applies it to the embedding before its own layer.
    if (l == 0) {
      for (const TensorSpec& spec : family.first_block) {
        if (held(spec)) add(spec.name, spec, nullptr);
      }
    }
    largest_block = std::max(largest_block, unit.bytes);
    d.units.push_back(std::move(unit));
  }
  if (s.n_embd_per_layer > 0) {
    // Read by row, per token, as token_embd: n_embd_per_layer for each layer.
    const std::string name = "per_layer_token_embd.weight";
    const GgufTensorInfo* t = file.find_tensor(name);
    if (t == nullptr) format_error("missing tensor '" + name + "'");
    const uint64_t per_token = s.size(Dim::kEmbdAllLayers);
    if (t->dims.size() < 2 || t->dims[0] != per_token || t->dims[1] != static_cast<uint64_t>(s.n_vocab) ||
        t->rows() != static_cast<uint64_t>(s.n_vocab)) {
      format_error("tensor '" + name + "' has shape " + shape_text(t->dims) + ", expected " +
                   shape_text({per_token, static_cast<uint64_t>(s.n_vocab)}) + ": " +
                   std::to_string(s.n_embd_per_layer) + " (" + family.architecture +
                   ".embedding_length_per_layer_input) for each of the " + std::to_string(s.n_layers) +
                   " layers, per token of the vocabulary");
    }
    tensors.mark_used(name);
    d.per_layer_token_embd = t;
  }

  const GgufTensorInfo* output_norm = tensors.find(family.output_norm, output_norm_spec());
  TensorSpec optional_output = output_spec();
  optional_output.required = false;
  const GgufTensorInfo* output = tensors.find(output_spec().name, optional_output);
  d.tied_output = output == nullptr;
  if (d.tied_output) output = embd;
  const uint64_t row_bytes = output->bytes / output->rows();
  const auto vocab = static_cast<uint64_t>(s.n_vocab);
  d.head_rows_per_piece = std::min(vocab, std::max<uint64_t>(1, largest_block / row_bytes));
  const uint64_t pieces = (vocab + d.head_rows_per_piece - 1) / d.head_rows_per_piece;
  for (uint64_t k = 0; k < pieces; ++k) {
    UnitTensors piece;
    piece.name = pieces == 1 ? "output head" : "output head " + std::to_string(k + 1) + "/" + std::to_string(pieces);
    const uint64_t first = k * d.head_rows_per_piece;
    const uint64_t rows = std::min(d.head_rows_per_piece, vocab - first);
    if (k == 0) piece.tensors.push_back(whole(output_norm, &output_norm_spec()));
    piece.tensors.push_back(TensorSlice{output, &output_spec(), first, rows});
    for (const TensorSlice& t : piece.tensors) piece.bytes += t.bytes();
    d.units.push_back(std::move(piece));
  }
  // Each expert: its run of rows of each of its layer's expert tensors.
  d.first_expert = d.n_units();
  d.first_expert_of_layer.assign(static_cast<size_t>(s.n_layers), -1);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::vector<TensorSlice>& whole_tensors = experts_of_layer[static_cast<size_t>(l)];
    if (whole_tensors.empty()) continue;
    d.first_expert_of_layer[static_cast<size_t>(l)] = d.n_units();
    for (int e = 0; e < s.n_experts; ++e) {
      UnitTensors expert;
      expert.name = "block " + std::to_string(l) + " expert " + std::to_string(e);
      for (const TensorSlice& t : whole_tensors) {
        const uint64_t rows = t.rows / static_cast<uint64_t>(s.n_experts);
        expert.tensors.push_back(TensorSlice{t.tensor, t.spec, static_cast<uint64_t>(e) * rows, rows});
        expert.bytes += expert.tensors.back().bytes();
      }
      d.units.push_back(std::move(expert));
    }
  }
  for (const GgufTensorInfo& t : file.tensors()) {
    for (const std::string& part : family.unused_tensors) {
      if (t.name.find(part) != std::string::npos) tensors.mark_used(t.name);
    }
    for (int l = s.n_layers; l < s.n_layers + s.prediction_layers; ++l) {
      if (t.name.rfind("blk." + std::to_string(l) + ".", 0) == 0) tensors.mark_used(t.name);
    }
  }
  tensors.refuse_unused(d.architecture);
  return d;
}

}  // namespace sipllm

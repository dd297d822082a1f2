#include "model/model_generator.h"

#include "model/model_description.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include "sipllm/error.h"
#include "sipllm/random_model.h"

namespace sipllm {
namespace {

// splitmix64 stream: fast, seeded, the same on every platform.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float symmetric() { return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0); }
  // Jumps over `n` draws: the state only ever advances by a constant.
  void skip(uint64_t n) { state_ += n * 0x9e3779b97f4a7c15ull; }

 private:
  uint64_t state_;
};

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// llama.cpp's use_more_bits: the layers whose attn_v and ffn_down a K-quant
// mix keeps at higher precision.
bool uses_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool fits(TensorType type, uint64_t row_length) {
  return row_length % tensor_type_traits(type).block_elements == 0;
}

// llama.cpp's tensor_type_fallback: the type used when rows do not fit the
// wanted one's block.
TensorType fitting_type(TensorType wanted, uint64_t row_length) {
  if (fits(wanted, row_length)) return wanted;
  const TensorType fallback = tensor_type_traits(wanted).row_fallback;
  return fits(fallback, row_length) ? fallback : TensorType::kF16;
}

// Row `r` of the seeded uniform matrix with `cols` columns and standard
// deviation `std_dev`: rows can be made in any order.
void random_row(uint64_t seed, uint64_t r, float std_dev, std::vector<float>& row) {
  Random random(seed);
  random.skip(r * row.size());
  const float a = std_dev * std::sqrt(3.0f);  // uniform on [-a, a): std = a / sqrt(3)
  for (float& x : row) x = random.symmetric() * a;
}

// A seeded random permutation of 0..n-1 (Fisher-Yates).
std::vector<uint32_t> random_permutation(uint64_t seed, uint64_t n) {
  std::vector<uint32_t> p(n);
  for (uint64_t i = 0; i < n; ++i) p[i] = static_cast<uint32_t>(i);
  Random random(seed);
  for (uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[random.next() % i]);
  return p;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> shape_preset_names() {
  return {"tiny", "tiny-k", "kquant-small", "smollm-135m", "qwen2.5-0.5b", "qwen3-0.6b", "gemma3-1b",
          "llama-3.2-1b", "llama-3.1-8b", "qwen3.5-0.8b", "qwen3.5-2b", "lfm2.5-1.2b", "gemma-4-e2b",
          "lfm2-8b-a1b", "qwen3-30b-a3b"};
}

ShapePreset shape_preset(const std::string& name) {
  ShapePreset s;
  s.name = name;
  if (name == "tiny") {
    s.dim = 64, s.n_layers = 4, s.n_heads = 4, s.n_kv_heads = 2, s.hidden_dim = 160;
    s.context_length = 512;
  } else if (name == "tiny-k") {
    s.dim = 256, s.n_layers = 2, s.n_heads = 4, s.n_kv_heads = 2, s.hidden_dim = 512;
    s.context_length = 512;
    // Untied, unlike "tiny": the mixes treat a separate output head
    // differently, and it allows GeneratorOptions::successor_bias.
    s.tied_output = false;
  } else if (name == "kquant-small") {
    s.dim = 512, s.n_layers = 8, s.n_heads = 8, s.n_kv_heads = 4, s.hidden_dim = 1536;
  } else if (name == "smollm-135m") {
    s.dim = 576, s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3, s.hidden_dim = 1536;
  } else if (name == "qwen2.5-0.5b") {
    s.architecture = "qwen2";
    s.dim = 896, s.n_layers = 24, s.n_heads = 14, s.n_kv_heads = 2, s.hidden_dim = 4864;
    s.context_length = 32768, s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f;
  } else if (name == "qwen3-0.6b") {
    s.architecture = "qwen3";
    s.dim = 1024, s.n_layers = 28, s.n_heads = 16, s.n_kv_heads = 8, s.head_dim = 128, s.hidden_dim = 3072;
    s.context_length = 40960, s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f;
  } else if (name == "gemma3-1b") {
    s.architecture = "gemma3";
    s.dim = 1152, s.n_layers = 26, s.n_heads = 4, s.n_kv_heads = 1, s.head_dim = 256, s.hidden_dim = 6912;
    s.context_length = 32768, s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f, s.sliding_window = 512;
  } else if (name == "llama-3.2-1b") {
    s.dim = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.hidden_dim = 8192;
    s.context_length = 131072, s.rope_freq_base = 500000.0f, s.llama3_rope_factor = 32;
  } else if (name == "llama-3.1-8b") {
    s.dim = 4096, s.n_layers = 32, s.n_heads = 32, s.n_kv_heads = 8, s.hidden_dim = 14336;
    s.context_length = 131072, s.rope_freq_base = 500000.0f, s.llama3_rope_factor = 8, s.tied_output = false;
  } else if (name == "qwen3.5-0.8b" || name == "qwen3.5-2b") {
    // Qwen/Qwen3.5-0.8B's config.json (text_config): hidden 1024, 24 layers,
    // 8 heads of 256 and 2 KV heads, intermediate 3584, full attention every
    // 4th layer, linear attention 16 key and 16 value heads of 128, conv
    // kernel 4, partial rotary 0.25, rope theta 1e7, tied. Qwen3.5-2B: the
    // same with hidden 2048 and intermediate 6144.
    s.architecture = "qwen35";
    const bool small = name == "qwen3.5-0.8b";
    s.dim = small ? 1024 : 2048, s.n_layers = 24, s.n_heads = 8, s.n_kv_heads = 2, s.head_dim = 256;
    s.hidden_dim = small ? 3584 : 6144;
    s.context_length = 262144, s.rope_freq_base = 10000000.0f, s.rms_eps = 1e-6f, s.rope_dims = 64;
    s.conv_kernel = 4, s.full_attention_interval = 4, s.ssm_key_heads = 16, s.ssm_value_heads = 16, s.ssm_head = 128;
    s.vocab_size = 248320;
  } else if (name == "lfm2-8b-a1b") {
    // LiquidAI/LFM2-8B-A1B's config.json: hidden 2048, 24 layers, 32 heads of
    // 64 and 8 KV heads, attention on layers 2, 6, 10, 14, 18, 21, conv_L_cache
    // 3; the first 2 layers dense (intermediate 7168), the others 32 experts of
    // 1792, 4 per token, sigmoid scores with an expert bias; rope theta 1e6,
    // tied, 65,536 tokens.
    s.architecture = "lfm2moe";
    s.dim = 2048, s.n_layers = 24, s.n_heads = 32, s.n_kv_heads = 8, s.hidden_dim = 7168;
    s.context_length = 128000, s.rope_freq_base = 1000000.0f;
    s.conv_kernel = 3, s.attention_layers = {2, 6, 10, 14, 18, 21};
    s.n_experts = 32, s.n_experts_used = 4, s.expert_hidden_dim = 1792, s.leading_dense_layers = 2;
    s.vocab_size = 65536;
  } else if (name == "qwen3-30b-a3b") {
    // Qwen/Qwen3-30B-A3B's config.json: hidden 2048, 48 layers, 32 heads of
    // 128 and 4 KV heads, 128 experts of 768 on every layer, 8 per token,
    // rope theta 1e6, untied, 151,936 tokens.
    s.architecture = "qwen3moe";
    s.dim = 2048, s.n_layers = 48, s.n_heads = 32, s.n_kv_heads = 4, s.head_dim = 128, s.hidden_dim = 6144;
    s.context_length = 40960, s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f, s.tied_output = false;
    s.n_experts = 128, s.n_experts_used = 8, s.expert_hidden_dim = 768;
    s.vocab_size = 151936;
  } else if (name == "lfm2.5-1.2b") {
    // LiquidAI/LFM2-1.2B's config.json, whose architecture LFM2.5-1.2B
    // keeps: hidden 2048, 16 layers, 32 heads of 64 and 8 KV heads,
    // intermediate 8192 (block_ff_dim 12288 auto-adjusted), attention on
    // layers 2, 5, 8, 10, 12, 14, conv_L_cache 3, rope theta 1e6, tied.
    s.architecture = "lfm2";
    s.dim = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.hidden_dim = 8192;
    s.context_length = 128000, s.rope_freq_base = 1000000.0f;
    s.conv_kernel = 3, s.attention_layers = {2, 5, 8, 10, 12, 14};
    s.vocab_size = 65536;
  } else if (name == "gemma-4-e2b") {
    // google/gemma-4-E2B's config.json (text_config): hidden 1536, 35
    // layers, 8 heads and 1 KV head, heads of 256 on the sliding layers and
    // 512 on every fifth (full attention), window 512, intermediate 6144,
    // doubled on the 20 layers that share K/V, per-layer inputs of 256,
    // final soft-cap 30, rope theta 1e6 (1e4 sliding), tied.
    s.architecture = "gemma4";
    s.dim = 1536, s.n_layers = 35, s.n_heads = 8, s.n_kv_heads = 1, s.head_dim = 512, s.head_dim_swa = 256;
    s.hidden_dim = 6144, s.double_wide_shared_ffn = true, s.shared_kv_layers = 20, s.n_embd_per_layer = 256;
    s.context_length = 131072, s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f, s.sliding_window = 512;
    s.final_softcap = 30.0f, s.vocab_size = 262144;
  } else {
    std::string known;
    for (const std::string& n : shape_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::kInvalidArgument, "unknown model shape '" + name + "' (known: " + known + ")");
  }
  return s;
}

TensorType mixed_tensor_type(const GeneratorOptions& options, const std::string& name, int layer,
                             uint64_t row_length) {
  const bool is_output = name == "output.weight" || (options.shape.tied_output && name == "token_embd.weight");
  const bool block_quant = tensor_type_traits(options.type).block_elements > 1;
  if (options.mix == QuantMix::kPlain || (options.mix == QuantMix::kDefault && (!is_output || !block_quant))) {
    return fitting_type(options.type, row_length);
  }
  if (options.mix == QuantMix::kDefault) {
    if (options.type == TensorType::kQ8_0) return TensorType::kQ8_0;
    return row_length % kQK_K == 0 ? TensorType::kQ6_K : TensorType::kQ8_0;
  }
  const TensorType base = options.mix == QuantMix::kQ4_K_M ? TensorType::kQ4_K : TensorType::kQ5_K;
  TensorType type = base;
  if (is_output) {
    // Decided against the base type's block, before any fallback.
    type = fits(base, row_length) ? TensorType::kQ6_K : TensorType::kQ8_0;
  } else if ((ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight")) &&
             uses_more_bits(layer, options.shape.n_layers)) {
    type = TensorType::kQ6_K;
  }
  return fitting_type(type, row_length);
}

uint32_t llama_file_type(const GeneratorOptions& options) {
  if (options.mix == QuantMix::kQ4_K_M) return 15;
  if (options.mix == QuantMix::kQ5_K_M) return 17;
  const TensorTypeTraits& traits = tensor_type_traits(options.type);
  if (traits.llama_file_type != kNoFileType) return traits.llama_file_type;
  throw Error(ErrorKind::kInvalidArgument, std::string("no model file can be of type ") + traits.name);
}

namespace {

// Llama 3.x's rope_freqs.weight, as its converter computes it from the
// rope_scaling block (low_freq_factor 1, high_freq_factor 4, original
// context 8192).
std::vector<float> llama3_rope_factors(const ShapePreset& s) {
  const int head_dim = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  const double old_context = 8192, low_freq_factor = 1, high_freq_factor = 4;
  const double low_freq_wavelen = old_context / low_freq_factor;
  const double high_freq_wavelen = old_context / high_freq_factor;
  std::vector<float> factors;
  for (int i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(s.rope_freq_base), static_cast<double>(i) / head_dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(s.llama3_rope_factor);
    } else {
      const double smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / s.llama3_rope_factor + smooth)));
    }
  }
  return factors;
}

void add_floats(GgufWriter& writer, const std::string& name, std::vector<float> values,
                std::vector<uint64_t> dims = {}) {
  const auto n = static_cast<uint64_t>(values.size());
  if (dims.empty()) dims = {n};
  writer.add_tensor(name, dims, static_cast<uint32_t>(TensorType::kF32), n * 4,
                    [values = std::move(values)](std::vector<uint8_t>& out) {
                      out.resize(values.size() * 4);
                      std::memcpy(out.data(), values.data(), out.size());
                    });
}

}  // namespace

void build_random_model(const GgufFile& vocab, const GeneratorOptions& options, GgufWriter& writer) {
  const ShapePreset& s = options.shape;
  const Family* family = find_family(s.architecture);
  if (family == nullptr) {
    throw Error(ErrorKind::kInvalidArgument, "shape '" + s.name + "' names an unknown architecture '" +
                                                 s.architecture + "'");
  }
  if (options.successor_bias != 0 && s.tied_output) {
    throw Error(ErrorKind::kInvalidArgument, "successor_bias needs an untied output head; shape '" + s.name +
                                                 "' ties it to the token embeddings");
  }
  const auto* tokens = vocab.find_array("tokenizer.ggml.tokens", GgufType::kString);
  if (tokens == nullptr) {
    throw Error(ErrorKind::kFormat, "the vocabulary file has no tokenizer.ggml.tokens");
  }
  const auto file_vocab = static_cast<uint64_t>(tokens->strings.size());
  const uint64_t n_vocab = std::max<uint64_t>(file_vocab, static_cast<uint64_t>(std::max(0, s.vocab_size)));

  // The shape in the description's terms, so every tensor's size comes from
  // the same formulas the loader checks it against.
  ModelShape shape;
  shape.dim = s.dim;
  shape.n_layers = s.n_layers;
  shape.n_heads = s.n_heads;
  shape.n_kv_heads = s.n_kv_heads;
  shape.head_dim = s.head_dim > 0 ? s.head_dim : s.dim / s.n_heads;
  shape.hidden_dim = s.hidden_dim;
  shape.n_vocab = static_cast<int>(n_vocab);
  // Which layers attend, and the recurrent layers' sizes (defaults from the
  // attention shape where the preset gives none).
  std::vector<bool> attends(static_cast<size_t>(s.n_layers), true);
  if (family->hybrid == HybridLayers::kFullAttentionInterval) {
    const int interval = s.full_attention_interval > 0 ? s.full_attention_interval : 4;
    for (int l = 0; l < s.n_layers; ++l) attends[static_cast<size_t>(l)] = (l + 1) % interval == 0;
    shape.conv_kernel = s.conv_kernel > 0 ? s.conv_kernel : 4;
    shape.ssm_key_heads = s.ssm_key_heads > 0 ? s.ssm_key_heads : s.n_kv_heads;
    shape.ssm_value_heads = s.ssm_value_heads > 0 ? s.ssm_value_heads : s.n_heads;
    shape.ssm_head_k = s.ssm_head > 0 ? s.ssm_head : shape.head_dim;
    shape.ssm_inner = shape.ssm_value_heads * shape.ssm_head_k;
  } else if (family->hybrid == HybridLayers::kZeroKvHeads) {
    for (int l = 0; l < s.n_layers; ++l) {
      attends[static_cast<size_t>(l)] =
          s.attention_layers.empty()
              ? l % 3 == 2
              : std::find(s.attention_layers.begin(), s.attention_layers.end(), l) != s.attention_layers.end();
    }
    shape.conv_kernel = s.conv_kernel > 0 ? s.conv_kernel : 3;
  }
  // Gemma 4 (a sliding flag per layer): every fifth layer attends fully, as
  // in E2B; the sliding ones with heads of head_dim_swa; per-layer inputs;
  // the last shared_kv_layers attending with an earlier layer's K/V.
  std::vector<bool> slides(static_cast<size_t>(s.n_layers), false);
  std::vector<LayerShape> layer_shapes(static_cast<size_t>(s.n_layers));
  const int head_dim_swa = s.head_dim_swa > 0 ? s.head_dim_swa : shape.head_dim;
  const int first_shared = s.n_layers - s.shared_kv_layers;
  for (int l = 0; l < s.n_layers; ++l) {
    LayerShape& layer = layer_shapes[static_cast<size_t>(l)];
    layer.head_dim = shape.head_dim;
    layer.hidden_dim = shape.hidden_dim;
    if (family->sliding_window_flags) {
      slides[static_cast<size_t>(l)] = l % 5 != 4;
      if (slides[static_cast<size_t>(l)]) layer.head_dim = head_dim_swa;
      if (s.double_wide_shared_ffn && l >= first_shared) layer.hidden_dim = 2 * shape.hidden_dim;
    }
  }
  if (family->sliding_window_flags) shape.n_embd_per_layer = s.n_embd_per_layer > 0 ? s.n_embd_per_layer : std::max(4, s.dim / 8);
  // A mixture of experts from layer leading_dense_layers on.
  if (family->expert_gating != ExpertGating::kNone) {
    shape.n_experts = s.n_experts > 0 ? s.n_experts : 4;
    shape.n_experts_used = s.n_experts_used > 0 ? s.n_experts_used : 2;
    shape.expert_hidden_dim = s.expert_hidden_dim > 0 ? s.expert_hidden_dim : s.hidden_dim;
    const bool shared = std::any_of(family->block.begin(), family->block.end(), [](const TensorSpec& spec) {
      return spec.shape.size() == 2 && spec.shape[1] == Dim::kSharedFf;
    });
    shape.shared_expert_hidden_dim = shared ? shape.expert_hidden_dim : 0;
    shape.leading_dense_layers = s.leading_dense_layers;
    for (int l = s.leading_dense_layers; l < s.n_layers; ++l) {
      layer_shapes[static_cast<size_t>(l)].experts = true;
      layer_shapes[static_cast<size_t>(l)].hidden_dim = shape.expert_hidden_dim;
    }
  }

  const std::string a = s.architecture + ".";
  writer.set_string("general.architecture", s.architecture);
  writer.set_string("general.name", "random " + s.name);
  writer.set_uint32("general.file_type", llama_file_type(options));
  // ggml's quantization format version (GGML_QNT_VERSION), as llama.cpp writes it.
  writer.set_uint32("general.quantization_version", 2);
  writer.set_uint32(a + "context_length", static_cast<uint32_t>(s.context_length));
  writer.set_uint32(a + "embedding_length", static_cast<uint32_t>(s.dim));
  writer.set_uint32(a + "block_count", static_cast<uint32_t>(s.n_layers));
  if (s.double_wide_shared_ffn) {
    std::vector<int32_t> widths;
    for (const LayerShape& layer : layer_shapes) widths.push_back(layer.hidden_dim);
    writer.set_int32_array(a + "feed_forward_length", widths);
  } else {
    writer.set_uint32(a + "feed_forward_length", static_cast<uint32_t>(s.hidden_dim));
  }
  if (s.shared_kv_layers > 0) writer.set_uint32(a + "attention.shared_kv_layers", static_cast<uint32_t>(s.shared_kv_layers));
  if (shape.n_experts > 0) {
    writer.set_uint32(a + "expert_count", static_cast<uint32_t>(shape.n_experts));
    writer.set_uint32(a + "expert_used_count", static_cast<uint32_t>(shape.n_experts_used));
    writer.set_uint32(a + "expert_feed_forward_length", static_cast<uint32_t>(shape.expert_hidden_dim));
    if (shape.shared_expert_hidden_dim > 0) {
      writer.set_uint32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(shape.shared_expert_hidden_dim));
    }
    if (shape.leading_dense_layers > 0) {
      writer.set_uint32(a + "leading_dense_block_count", static_cast<uint32_t>(shape.leading_dense_layers));
    }
    if (family->expert_gating == ExpertGating::kFromKey) writer.set_uint32(a + "expert_gating_func", 2);  // sigmoid
  }
  if (s.final_softcap > 0) writer.set_float32(a + "final_logit_softcapping", s.final_softcap);
  writer.set_uint32(a + "attention.head_count", static_cast<uint32_t>(s.n_heads));
  if (family->hybrid == HybridLayers::kZeroKvHeads) {
    std::vector<int32_t> kv_heads;
    for (bool a_layer : attends) kv_heads.push_back(a_layer ? s.n_kv_heads : 0);
    writer.set_int32_array(a + "attention.head_count_kv", kv_heads);
    writer.set_uint32(a + "shortconv.l_cache", static_cast<uint32_t>(shape.conv_kernel));
  } else {
    writer.set_uint32(a + "attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  }
  if (family->hybrid == HybridLayers::kFullAttentionInterval) {
    writer.set_uint32(a + "full_attention_interval",
                      static_cast<uint32_t>(s.full_attention_interval > 0 ? s.full_attention_interval : 4));
    writer.set_uint32(a + "ssm.conv_kernel", static_cast<uint32_t>(shape.conv_kernel));
    writer.set_uint32(a + "ssm.state_size", static_cast<uint32_t>(shape.ssm_head_k));
    writer.set_uint32(a + "ssm.group_count", static_cast<uint32_t>(shape.ssm_key_heads));
    writer.set_uint32(a + "ssm.time_step_rank", static_cast<uint32_t>(shape.ssm_value_heads));
    writer.set_uint32(a + "ssm.inner_size", static_cast<uint32_t>(shape.ssm_inner));
    // Qwen3.5's multimodal rotary sections, which llama.cpp requires (for
    // text every section turns by the position: plain NEOX rotation):
    // [11, 11, 10, 0] of its 32 rotating pairs, scaled to this shape's.
    const int pairs = (s.rope_dims > 0 ? s.rope_dims : shape.head_dim) / 2;
    const int section = (pairs * 11 + 16) / 32;
    writer.set_int32_array(a + "rope.dimension_sections", {section, section, pairs - 2 * section, 0});
  }
  if (s.head_dim > 0) {
    writer.set_uint32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    writer.set_uint32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  writer.set_uint32(a + "rope.dimension_count", static_cast<uint32_t>(s.rope_dims > 0 ? s.rope_dims : shape.head_dim));
  writer.set_float32(a + "rope.freq_base", s.rope_freq_base);
  writer.set_float32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  if (s.sliding_window > 0) writer.set_uint32(a + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (family->sliding_window_flags) {
    GgufValue pattern;
    pattern.type = GgufType::kArray;
    pattern.element_type = GgufType::kBool;
    for (bool slide : slides) pattern.integers.push_back(slide ? 1 : 0);
    writer.set_value(a + "attention.sliding_window_pattern", pattern);
    writer.set_uint32(a + "attention.key_length_swa", static_cast<uint32_t>(head_dim_swa));
    writer.set_uint32(a + "attention.value_length_swa", static_cast<uint32_t>(head_dim_swa));
    writer.set_uint32(a + "rope.dimension_count_swa", static_cast<uint32_t>(head_dim_swa));
    writer.set_float32(a + "rope.freq_base_swa", 10000.0f);
    writer.set_uint32(a + "embedding_length_per_layer_input", static_cast<uint32_t>(shape.n_embd_per_layer));
  }
  writer.set_uint32(a + "vocab_size", static_cast<uint32_t>(n_vocab));
  for (const auto& [key, value] : vocab.metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) writer.set_value(key, value);
  }
  if (n_vocab > file_vocab) {
    // The vocabulary padded with unused tokens (never produced by the
    // tokenizer, and no merges make them) to the model's size.
    std::vector<std::string> names = tokens->strings;
    for (uint64_t i = file_vocab; i < n_vocab; ++i) names.push_back("<|sipllm_unused_" + std::to_string(i) + "|>");
    writer.set_string_array("tokenizer.ggml.tokens", names);
    if (const GgufValue* types = vocab.find_array("tokenizer.ggml.token_type", GgufType::kInt32)) {
      std::vector<int32_t> padded(types->integers.begin(), types->integers.end());
      padded.resize(n_vocab, 5);  // unused
      writer.set_int32_array("tokenizer.ggml.token_type", padded);
    }
    if (const GgufValue* scores = vocab.find_array("tokenizer.ggml.scores", GgufType::kFloat32)) {
      std::vector<float> padded(scores->reals.begin(), scores->reals.end());
      padded.resize(n_vocab, -1e9f);
      writer.set_float32_array("tokenizer.ggml.scores", padded);
    }
  }

  // Each matrix row is made on demand from `make_row(r, row)`, then encoded.
  using RowMaker = std::function<void(uint64_t r, std::vector<float>& row)>;
  // `experts` > 0: a 3-D tensor of that many matrices of rows / experts rows.
  auto add_matrix_rows = [&](const std::string& name, int layer, uint64_t cols, uint64_t rows, RowMaker make_row,
                             uint64_t experts = 0) {
    const TensorType type = mixed_tensor_type(options, name, layer, cols);
    const uint64_t bytes = tensor_bytes(tensor_type_traits(type), cols * rows);
    std::vector<uint64_t> dims = {cols, rows};
    if (experts > 0) dims = {cols, rows / experts, experts};
    writer.add_tensor(name, dims, static_cast<uint32_t>(type), bytes,
                      [=](std::vector<uint8_t>& out) {
                        out.resize(bytes);
                        std::vector<float> row(cols);
                        const uint64_t row_bytes = bytes / rows;
                        for (uint64_t r = 0; r < rows; ++r) {
                          make_row(r, row);
                          quantize_row(type, row.data(), out.data() + r * row_bytes, cols);
                        }
                      });
  };
  auto seed_of = [&](const std::string& name) { return options.seed ^ hash_name(name); };
  auto add_matrix = [&](const std::string& name, int layer, uint64_t cols, uint64_t rows, uint64_t experts = 0) {
    add_matrix_rows(
        name, layer, cols, rows,
        [seed = seed_of(name), std_dev = options.weight_scale](uint64_t r, std::vector<float>& row) {
          random_row(seed, r, std_dev, row);
        },
        experts);
  };
  // Norm weights near 1, biases small; a convolution's taps spread around 0,
  // DeltaNet's decay rates negative.
  auto add_vector = [&](const std::string& name, std::vector<uint64_t> dims) {
    Random random(seed_of(name));
    const bool bias = ends_with(name, ".bias");
    const bool taps = name.find("conv") != std::string::npos;
    const bool decay = ends_with(name, ".ssm_a");
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    std::vector<float> w(n);
    for (float& x : w) {
      const float r = random.symmetric();
      x = bias ? 0.1f * r : taps ? 0.3f * r : decay ? -std::exp(0.5f * r) : 1.0f + 0.1f * r;
    }
    add_floats(writer, name, std::move(w), std::move(dims));
  };

  const auto dim = static_cast<uint64_t>(s.dim);
  const float embedding_std = options.weight_scale * options.embedding_scale;
  add_matrix_rows("token_embd.weight", -1, dim, n_vocab,
                  [seed = seed_of("token_embd.weight"), embedding_std](uint64_t r, std::vector<float>& row) {
                    random_row(seed, r, embedding_std, row);
                  });
  if (s.llama3_rope_factor > 0) add_floats(writer, "rope_freqs.weight", llama3_rope_factors(s));
  if (family->rope_factors == RopeFactors::kFreqsFullAttention) {
    // Gemma 4's proportional RoPE: the first quarter of the pairs turn, the
    // others (factor 1e30) do not.
    std::vector<float> factors(static_cast<size_t>(shape.head_dim / 2), 1e30f);
    std::fill_n(factors.begin(), factors.size() / 4, 1.0f);
    add_floats(writer, "rope_freqs.weight", std::move(factors));
  }
  if (shape.n_embd_per_layer > 0) {
    add_matrix_rows("per_layer_token_embd.weight", -1, shape.size(Dim::kEmbdAllLayers), n_vocab,
                    [seed = seed_of("per_layer_token_embd.weight"), embedding_std](uint64_t r, std::vector<float>& row) {
                      random_row(seed, r, embedding_std, row);
                    });
  }
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerKind kind = attends[static_cast<size_t>(l)] ? LayerKind::kAttention : family->recurrent_kind;
    const auto add = [&](const std::string& name, const TensorSpec& spec, const LayerShape* layer) {
      if (spec.per_layer_input && shape.n_embd_per_layer == 0) return;
      const auto size = [&](Dim d) { return layer != nullptr ? shape.size(d, *layer) : shape.size(d); };
      if (spec.is_vector()) {
        std::vector<uint64_t> dims;
        for (Dim d : spec.shape) dims.push_back(size(d));
        add_vector(name, dims);
      } else if (spec.per_expert) {
        add_matrix(name, l, size(spec.shape[0]), size(spec.shape[1]) * size(spec.shape[2]), size(spec.shape[2]));
      } else {
        add_matrix(name, l, size(spec.shape[0]), size(spec.shape[1]));
      }
    };
    const bool experts = layer_shapes[static_cast<size_t>(l)].experts;
    for (const TensorSpec& spec : family->block) {
      if ((spec.layers & TensorSpec::only(kind)) == 0) continue;
      if (spec.ffn == (experts ? TensorSpec::Ffn::kDense : TensorSpec::Ffn::kExperts)) continue;
      if (spec.kv_projection && l >= first_shared) continue;  // attends with an earlier layer's K/V
      add("blk." + std::to_string(l) + "." + spec.name, spec, &layer_shapes[static_cast<size_t>(l)]);
    }
    if (l == 0) {
      for (const TensorSpec& spec : family->first_block) add(spec.name, spec, nullptr);
    }
  }
  add_vector(family->output_norm, {dim});
  if (s.tied_output) return;
  // Output row j: a random row, plus successor_bias times the embedding of
  // the token whose successor j is under a fixed random permutation.
  auto predecessor = std::make_shared<std::vector<uint32_t>>(
      options.successor_bias != 0 ? random_permutation(seed_of("successor"), n_vocab) : std::vector<uint32_t>{});
  add_matrix_rows("output.weight", -1, dim, n_vocab,
                  [predecessor, seed = seed_of("output.weight"), embedding_seed = seed_of("token_embd.weight"),
                   std_dev = options.weight_scale, embedding_std,
                   bias = options.successor_bias](uint64_t r, std::vector<float>& row) {
                    random_row(seed, r, std_dev, row);
                    if (bias == 0) return;
                    std::vector<float> embedding(row.size());
                    random_row(embedding_seed, (*predecessor)[r], embedding_std, embedding);
                    for (size_t i = 0; i < row.size(); ++i) row[i] += bias * (std_dev / embedding_std) * embedding[i];
                  });
}

}  // namespace sipllm

// ---- Public entry point (sipllm/random_model.h) --------------------------------

namespace sipllm {
namespace {

struct NamedType {
  const char* name;
  TensorType type;
  QuantMix mix;
};

// Every type a file may hold, by its name (plain floats as they are, block
// types with llama.cpp's default head), then llama.cpp's mixes.
const std::vector<NamedType>& named_types() {
  static const std::vector<NamedType> kTypes = [] {
    std::vector<NamedType> types;
    for (uint32_t id = 0; id < kTensorTypeIdLimit; ++id) {
      const TensorTypeTraits* t = tensor_type_traits(id);
      if (t != nullptr) types.push_back({t->name, t->type, t->block_elements == 1 ? QuantMix::kPlain : QuantMix::kDefault});
    }
    types.push_back({"Q4_K_M", TensorType::kQ4_K, QuantMix::kQ4_K_M});
    types.push_back({"Q5_K_M", TensorType::kQ5_K, QuantMix::kQ5_K_M});
    return types;
  }();
  return kTypes;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<std::string> random_model_shapes() { return shape_preset_names(); }

std::vector<std::string> random_model_types() {
  std::vector<std::string> names;
  for (const NamedType& t : named_types()) names.push_back(t.name);
  return names;
}

void write_random_model(const RandomModelSpec& spec, const std::string& out_path) {
  const NamedType* type = nullptr;
  for (const NamedType& t : named_types()) {
    if (upper(spec.type) == t.name) type = &t;
  }
  if (type == nullptr) {
    std::string known;
    for (const std::string& n : random_model_types()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::kInvalidArgument, "unknown tensor type '" + spec.type + "' (known: " + known + ")");
  }
  GeneratorOptions options;
  options.shape = shape_preset(spec.shape);
  options.type = type->type;
  options.mix = type->mix;
  options.seed = spec.seed;
  auto source = open_file_source(spec.vocab_path);
  const GgufFile vocab = GgufFile::parse(*source);
  GgufWriter writer;
  build_random_model(vocab, options, writer);
  writer.write_file(out_path);
}

}  // namespace sipllm

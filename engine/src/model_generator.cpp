#include "model_generator.h"

#include <cctype>
#include <cmath>
#include <cstring>
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

 private:
  uint64_t state_;
};

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The type a quantizer falls back to when rows do not fit the requested block.
TensorType fitting_type(TensorType wanted, uint64_t row_length) {
  const TensorTypeTraits& traits = tensor_type_traits(wanted);
  if (row_length % traits.block_elements == 0) return wanted;
  return TensorType::kF32;
}

}  // namespace

std::vector<std::string> model_shape_names() {
  return {"tiny", "smollm-135m", "qwen2.5-0.5b", "llama-3.2-1b", "kquant-small"};
}

ModelShape named_model_shape(const std::string& name) {
  ModelShape s;
  s.name = name;
  if (name == "tiny") {
    s.dim = 64, s.n_layers = 4, s.n_heads = 4, s.n_kv_heads = 2, s.hidden_dim = 160;
    s.context_length = 512;
  } else if (name == "smollm-135m") {
    s.dim = 576, s.n_layers = 30, s.n_heads = 9, s.n_kv_heads = 3, s.hidden_dim = 1536;
    s.rope_freq_base = 10000.0f;
  } else if (name == "qwen2.5-0.5b") {
    s.dim = 896, s.n_layers = 24, s.n_heads = 14, s.n_kv_heads = 2, s.hidden_dim = 4864;
    s.rope_freq_base = 1000000.0f, s.rms_eps = 1e-6f;
  } else if (name == "llama-3.2-1b") {
    s.dim = 2048, s.n_layers = 16, s.n_heads = 32, s.n_kv_heads = 8, s.hidden_dim = 8192;
    s.rope_freq_base = 500000.0f;
  } else if (name == "kquant-small") {
    s.dim = 512, s.n_layers = 8, s.n_heads = 8, s.n_kv_heads = 4, s.hidden_dim = 1536;
  } else {
    std::string known;
    for (const std::string& n : model_shape_names()) known += (known.empty() ? "" : ", ") + n;
    throw Error(ErrorKind::kInvalidArgument, "unknown model shape '" + name + "' (known: " + known + ")");
  }
  return s;
}

void build_random_llama(const GgufFile& vocab, const GeneratorOptions& options, GgufWriter& writer) {
  const ModelShape& s = options.shape;
  const auto* tokens = vocab.find_array("tokenizer.ggml.tokens", GgufType::kString);
  if (tokens == nullptr) {
    throw Error(ErrorKind::kFormat, "the vocabulary file has no tokenizer.ggml.tokens");
  }
  const auto n_vocab = static_cast<uint64_t>(tokens->strings.size());

  writer.set_string("general.architecture", "llama");
  writer.set_string("general.name", "random " + s.name);
  writer.set_uint32("general.file_type", static_cast<uint32_t>(options.type));
  writer.set_uint32("llama.context_length", static_cast<uint32_t>(s.context_length));
  writer.set_uint32("llama.embedding_length", static_cast<uint32_t>(s.dim));
  writer.set_uint32("llama.block_count", static_cast<uint32_t>(s.n_layers));
  writer.set_uint32("llama.feed_forward_length", static_cast<uint32_t>(s.hidden_dim));
  writer.set_uint32("llama.attention.head_count", static_cast<uint32_t>(s.n_heads));
  writer.set_uint32("llama.attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  writer.set_uint32("llama.rope.dimension_count", static_cast<uint32_t>(s.dim / s.n_heads));
  writer.set_float32("llama.rope.freq_base", s.rope_freq_base);
  writer.set_float32("llama.attention.layer_norm_rms_epsilon", s.rms_eps);
  writer.set_uint32("llama.vocab_size", static_cast<uint32_t>(n_vocab));
  for (const auto& [key, value] : vocab.metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) writer.set_value(key, value);
  }

  auto add_matrix = [&](const std::string& name, uint64_t cols, uint64_t rows) {
    TensorType type = options.type;
    for (const auto& [suffix, t] : options.overrides) {
      if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        type = t;
      }
    }
    type = fitting_type(type, cols);
    const TensorTypeTraits& traits = tensor_type_traits(type);
    const uint64_t bytes = tensor_bytes(traits, cols * rows);
    const uint64_t seed = options.seed ^ hash_name(name);
    const float scale = options.weight_scale * std::sqrt(3.0f);  // uniform: std = a / sqrt(3)
    writer.add_tensor(name, {cols, rows}, static_cast<uint32_t>(type), bytes,
                      [=](std::vector<uint8_t>& out) {
                        Random random(seed);
                        out.resize(bytes);
                        std::vector<float> row(cols);
                        const uint64_t row_bytes = bytes / rows;
                        for (uint64_t r = 0; r < rows; ++r) {
                          for (float& x : row) x = random.symmetric() * scale;
                          quantize_row(type, row.data(), out.data() + r * row_bytes, cols);
                        }
                      });
  };
  auto add_norm = [&](const std::string& name) {
    const auto n = static_cast<uint64_t>(s.dim);
    const uint64_t seed = options.seed ^ hash_name(name);
    writer.add_tensor(name, {n}, static_cast<uint32_t>(TensorType::kF32), n * 4,
                      [=](std::vector<uint8_t>& out) {
                        Random random(seed);
                        std::vector<float> w(n);
                        for (float& x : w) x = 1.0f + 0.1f * random.symmetric();
                        out.resize(n * 4);
                        std::memcpy(out.data(), w.data(), n * 4);
                      });
  };

  const auto dim = static_cast<uint64_t>(s.dim);
  const auto kv_dim = dim / static_cast<uint64_t>(s.n_heads) * static_cast<uint64_t>(s.n_kv_heads);
  const auto hidden = static_cast<uint64_t>(s.hidden_dim);
  add_matrix("token_embd.weight", dim, n_vocab);
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add_norm(p + "attn_norm.weight");
    add_matrix(p + "attn_q.weight", dim, dim);
    add_matrix(p + "attn_k.weight", dim, kv_dim);
    add_matrix(p + "attn_v.weight", dim, kv_dim);
    add_matrix(p + "attn_output.weight", dim, dim);
    add_norm(p + "ffn_norm.weight");
    add_matrix(p + "ffn_gate.weight", dim, hidden);
    add_matrix(p + "ffn_up.weight", dim, hidden);
    add_matrix(p + "ffn_down.weight", hidden, dim);
  }
  add_norm("output_norm.weight");
  if (!s.tied_output) add_matrix("output.weight", dim, n_vocab);
}

}  // namespace sipllm

// ---- Public entry point (sipllm/random_model.h) --------------------------------

namespace sipllm {
namespace {

struct NamedType {
  const char* name;
  TensorType type;
  std::vector<std::pair<std::string, TensorType>> overrides;
};

const std::vector<NamedType>& named_types() {
  static const std::vector<NamedType> kTypes = {
      {"F32", TensorType::kF32, {}},   {"F16", TensorType::kF16, {}},   {"BF16", TensorType::kBF16, {}},
      {"Q8_0", TensorType::kQ8_0, {}}, {"Q4_0", TensorType::kQ4_0, {}},
  };
  return kTypes;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<std::string> random_model_shapes() { return model_shape_names(); }

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
  options.shape = named_model_shape(spec.shape);
  options.type = type->type;
  options.overrides = type->overrides;
  options.seed = spec.seed;
  auto source = open_file_source(spec.vocab_path);
  const GgufFile vocab = GgufFile::parse(*source);
  GgufWriter writer;
  build_random_llama(vocab, options, writer);
  writer.write_file(out_path);
}

}  // namespace sipllm

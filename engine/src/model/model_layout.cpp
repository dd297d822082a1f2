#include "model/model_layout.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "sipllm/error.h"

namespace sipllm {
namespace {

[[noreturn]] void format_error(const std::string& message) {
  throw Error(ErrorKind::kFormat, message);
}

int positive_int(const std::string& key, uint64_t value) {
  if (value == 0 || value > (1u << 30)) {
    format_error("metadata key '" + key + "' = " + std::to_string(value) + " is out of range");
  }
  return static_cast<int>(value);
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

const GgufTensorInfo* require_tensor(const GgufFile& file, const std::string& name,
                                     std::vector<uint64_t> expected_dims) {
  const GgufTensorInfo* t = file.find_tensor(name);
  if (t == nullptr) format_error("missing tensor '" + name + "'");
  // Trailing dimensions of 1 are insignificant.
  std::vector<uint64_t> dims = t->dims;
  while (dims.size() > expected_dims.size() && dims.back() == 1) dims.pop_back();
  if (dims != expected_dims) {
    format_error("tensor '" + name + "' has shape " + shape_text(t->dims) + ", expected " +
                 shape_text(expected_dims) + " from the hyper-parameters");
  }
  return t;
}

// The norms are applied as float vectors; the loader converts them if stored
// otherwise, but they must be plain floats, not blocks.
void require_float_vector(const GgufTensorInfo* t) {
  if (t->type != TensorType::kF32 && t->type != TensorType::kF16 && t->type != TensorType::kBF16) {
    throw Error(ErrorKind::kUnsupported, "tensor '" + t->name + "' is a norm stored as " +
                                             tensor_type_name(t->type_id) +
                                             "; norms must be F32, F16 or BF16");
  }
}

}  // namespace

uint64_t ModelLayout::weight_bytes() const {
  uint64_t total = 0;
  for (const UnitTensors& unit : units) total += unit.bytes;
  if (!tied_output) total += token_embd->bytes;
  return total;
}

ModelLayout describe_llama_model(const GgufFile& file) {
  ModelLayout layout;
  layout.architecture = file.require_string("general.architecture");
  if (layout.architecture != "llama") {
    throw Error(ErrorKind::kUnsupported, "architecture '" + layout.architecture +
                                             "' (general.architecture) is not supported; "
                                             "this engine runs 'llama'");
  }
  layout.name = file.get_string("general.name", "");
  const std::string a = "llama.";
  LlamaConfig& c = layout.config;
  c.dim = positive_int(a + "embedding_length", file.require_uint(a + "embedding_length"));
  c.n_layers = positive_int(a + "block_count", file.require_uint(a + "block_count"));
  c.hidden_dim = positive_int(a + "feed_forward_length", file.require_uint(a + "feed_forward_length"));
  c.n_heads = positive_int(a + "attention.head_count", file.require_uint(a + "attention.head_count"));
  c.n_kv_heads = positive_int(a + "attention.head_count_kv",
                              file.get_uint(a + "attention.head_count_kv", static_cast<uint64_t>(c.n_heads)));
  c.context_length = positive_int(a + "context_length", file.require_uint(a + "context_length"));
  c.rms_eps = static_cast<float>(file.require_real(a + "attention.layer_norm_rms_epsilon"));
  c.rope_freq_base = static_cast<float>(file.get_real(a + "rope.freq_base", 10000.0));
  if (c.dim % c.n_heads != 0) {
    format_error("llama.embedding_length " + std::to_string(c.dim) +
                 " is not divisible by llama.attention.head_count " + std::to_string(c.n_heads));
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    format_error("llama.attention.head_count " + std::to_string(c.n_heads) +
                 " is not a multiple of llama.attention.head_count_kv " + std::to_string(c.n_kv_heads));
  }
  c.head_dim = c.dim / c.n_heads;
  if (file.get_uint(a + "attention.key_length", static_cast<uint64_t>(c.head_dim)) !=
          static_cast<uint64_t>(c.head_dim) ||
      file.get_uint(a + "attention.value_length", static_cast<uint64_t>(c.head_dim)) !=
          static_cast<uint64_t>(c.head_dim)) {
    throw Error(ErrorKind::kUnsupported,
                "llama.attention.key_length/value_length differ from embedding_length / head_count");
  }
  c.rope_dims = static_cast<int>(file.get_uint(a + "rope.dimension_count", static_cast<uint64_t>(c.head_dim)));
  if (c.rope_dims <= 0 || c.rope_dims > c.head_dim || c.rope_dims % 2 != 0) {
    format_error("llama.rope.dimension_count " + std::to_string(c.rope_dims) +
                 " must be even and at most the head size " + std::to_string(c.head_dim));
  }
  if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps)) {
    format_error("llama.attention.layer_norm_rms_epsilon must be a positive number");
  }
  if (!(c.rope_freq_base > 0) || !std::isfinite(c.rope_freq_base)) {
    format_error("llama.rope.freq_base must be a positive number");
  }
  if (const GgufValue* scaling = file.find(a + "rope.scaling.type")) {
    if (scaling->type == GgufType::kString && scaling->text != "none") {
      throw Error(ErrorKind::kUnsupported, "llama.rope.scaling.type '" + scaling->text + "' is not supported");
    }
  }
  if (file.get_uint(a + "expert_count", 0) > 0) {
    throw Error(ErrorKind::kUnsupported, "mixture-of-experts llama models (llama.expert_count) are not supported");
  }

  const auto dim = static_cast<uint64_t>(c.dim);
  const auto kv_dim = static_cast<uint64_t>(c.kv_dim());
  const auto hidden = static_cast<uint64_t>(c.hidden_dim);

  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd == nullptr) format_error("missing tensor 'token_embd.weight'");
  if (embd->dims.size() < 2 || embd->dims[0] != dim) {
    format_error("tensor 'token_embd.weight' has shape " + shape_text(embd->dims) +
                 ", expected [" + std::to_string(dim) + ", n_vocab]");
  }
  c.n_vocab = positive_int("token_embd.weight rows", embd->dims[1]);
  embd = require_tensor(file, "token_embd.weight", {dim, static_cast<uint64_t>(c.n_vocab)});
  layout.token_embd = embd;

  std::set<std::string> known = {"token_embd.weight", "output_norm.weight", "output.weight",
                                 "rope_freqs.weight"};
  auto whole = [](const GgufTensorInfo* t) { return TensorSlice{t, 0, t->rows()}; };
  uint64_t largest_block = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    UnitTensors unit;
    unit.name = "block " + std::to_string(l);
    const std::vector<const GgufTensorInfo*> tensors = {
        require_tensor(file, p + "attn_norm.weight", {dim}),
        require_tensor(file, p + "attn_q.weight", {dim, dim}),
        require_tensor(file, p + "attn_k.weight", {dim, kv_dim}),
        require_tensor(file, p + "attn_v.weight", {dim, kv_dim}),
        require_tensor(file, p + "attn_output.weight", {dim, dim}),
        require_tensor(file, p + "ffn_norm.weight", {dim}),
        require_tensor(file, p + "ffn_gate.weight", {dim, hidden}),
        require_tensor(file, p + "ffn_up.weight", {dim, hidden}),
        require_tensor(file, p + "ffn_down.weight", {hidden, dim}),
    };
    require_float_vector(tensors[0]);
    require_float_vector(tensors[5]);
    for (const GgufTensorInfo* t : tensors) {
      unit.tensors.push_back(whole(t));
      unit.bytes += t->bytes;
      known.insert(t->name);
    }
    largest_block = std::max(largest_block, unit.bytes);
    layout.units.push_back(std::move(unit));
  }

  const GgufTensorInfo* output_norm = require_tensor(file, "output_norm.weight", {dim});
  require_float_vector(output_norm);
  const GgufTensorInfo* output = file.find_tensor("output.weight");
  layout.tied_output = output == nullptr;
  output = layout.tied_output
               ? embd
               : require_tensor(file, "output.weight", {dim, static_cast<uint64_t>(c.n_vocab)});
  const uint64_t row_bytes = output->bytes / output->rows();
  const auto vocab = static_cast<uint64_t>(c.n_vocab);
  layout.head_rows_per_piece = std::min(vocab, std::max<uint64_t>(1, largest_block / row_bytes));
  const uint64_t pieces = (vocab + layout.head_rows_per_piece - 1) / layout.head_rows_per_piece;
  for (uint64_t k = 0; k < pieces; ++k) {
    UnitTensors piece;
    piece.name = pieces == 1 ? "output head"
                             : "output head " + std::to_string(k + 1) + "/" + std::to_string(pieces);
    const uint64_t first = k * layout.head_rows_per_piece;
    const uint64_t rows = std::min(layout.head_rows_per_piece, vocab - first);
    piece.tensors = {k == 0 ? whole(output_norm) : TensorSlice{}, TensorSlice{output, first, rows}};
    for (const TensorSlice& t : piece.tensors) piece.bytes += t.bytes();
    layout.units.push_back(std::move(piece));
  }

  // A tensor the llama graph does not use (a bias, per-layer rope factors)
  // would change the output if ignored, so refuse rather than guess.
  for (const GgufTensorInfo& t : file.tensors()) {
    if (known.count(t.name) == 0) {
      throw Error(ErrorKind::kUnsupported, "tensor '" + t.name + "' is not part of the llama architecture this engine runs");
    }
  }
  if (file.find_tensor("rope_freqs.weight") != nullptr) {
    throw Error(ErrorKind::kUnsupported, "tensor 'rope_freqs.weight' (rope frequency factors) is not supported");
  }
  return layout;
}

}  // namespace sipllm

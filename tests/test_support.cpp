#include "test_support.h"

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "model/gguf.h"

namespace sipllm::test {

std::string model_path(const std::string& relative) {
  return std::string(SIPLLM_MODELS_DIR) + "/" + relative;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

GgmlOracle read_ggml_oracle(const std::string& type_name) {
  const std::string path = std::string(SIPLLM_FIXTURES_DIR) + "/quant/" + type_name + ".ggmlq";
  const std::string file = read_file(path);
  GgmlOracle o;
  constexpr size_t kHeader = 20;
  if (file.size() < kHeader || file.compare(0, 4, "GGQO") != 0) throw std::runtime_error(path + " is not an oracle file");
  std::memcpy(&o.type_id, file.data() + 4, 4);
  std::memcpy(&o.rows, file.data() + 8, 4);
  std::memcpy(&o.cols, file.data() + 12, 4);
  std::memcpy(&o.row_bytes, file.data() + 16, 4);
  const size_t n_bytes = static_cast<size_t>(o.rows) * o.row_bytes, n_floats = static_cast<size_t>(o.rows) * o.cols;
  if (file.size() != kHeader + n_bytes + 8 * n_floats) throw std::runtime_error(path + " has the wrong size");
  o.bytes.assign(file.begin() + kHeader, file.begin() + static_cast<std::ptrdiff_t>(kHeader + n_bytes));
  o.floats.resize(n_floats);
  std::memcpy(o.floats.data(), file.data() + kHeader + n_bytes, 4 * n_floats);
  o.inputs.resize(n_floats);
  std::memcpy(o.inputs.data(), file.data() + kHeader + n_bytes + 4 * n_floats, 4 * n_floats);
  return o;
}

namespace {

GgufWriter random_writer(const ShapePreset& shape, TensorType type, uint64_t seed) {
  auto vocab_source = open_file_source(model_path("stories260K.gguf"));
  const GgufFile vocab = GgufFile::parse(*vocab_source);
  GeneratorOptions options;
  options.shape = shape;
  options.type = type;
  options.seed = seed;
  GgufWriter writer;
  build_random_model(vocab, options, writer);
  return writer;
}

}  // namespace

GgufWriter random_llama_writer(const std::string& shape, TensorType type, uint64_t seed) {
  return random_writer(shape_preset(shape), type, seed);
}

GgufWriter random_family_writer(const std::string& family, TensorType type, uint64_t seed) {
  ShapePreset shape = shape_preset("tiny");
  shape.architecture = family;
  shape.name = "tiny " + family;
  shape.sliding_window = 4;
  return random_writer(shape, type, seed);
}

std::vector<uint8_t> random_llama_bytes(const std::string& shape, TensorType type, uint64_t seed) {
  return random_llama_writer(shape, type, seed).to_bytes();
}

GenerateOptions greedy(int max_tokens) {
  GenerateOptions options;
  options.max_tokens = max_tokens;
  options.sampling.temperature = 0;
  return options;
}

std::string generate_text(Engine& engine, const std::vector<int32_t>& prompt,
                          const GenerateOptions& options, GenerationStats* stats) {
  std::string text;
  GenerationStats s = engine.generate_tokens(prompt, options, [&](const TokenEvent& e) {
    text += e.text;
    return true;
  });
  if (stats != nullptr) *stats = s;
  return text;
}

std::string generate_text(Engine& engine, const std::string& prompt, const GenerateOptions& options,
                          GenerationStats* stats) {
  return generate_text(engine, engine.tokenize(prompt, options.add_special, options.parse_special),
                       options, stats);
}

}  // namespace sipllm::test

// Any bytes as a GGUF file: the reader, then the tokenizer and the model
// description built from what it read, then, when the file describes a model,
// an Engine on it evaluating two tokens, so that the loader and the forward
// pass see hostile shapes too. Every failure must be an sipllm::Error; what
// the reader and the description accept must keep their promises (tensors
// inside the file, units made of them).
//
// The context is 8 positions and the file is at most what the fuzzer gives
// (scripts/fuzz.sh: 64 KiB), so the weights, and with them a forward pass,
// stay small: an iteration takes milliseconds.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "model/gguf.h"
#include "model/model_description.h"
#include "sipllm/engine.h"
#include "text/tokenizer.h"

using namespace sipllm;

namespace {

void check_file(const GgufFile& file, uint64_t size) {
  SIPLLM_FUZZ_CHECK(file.file_size() == size, "GgufFile::file_size differs from the source's");
  for (const GgufTensorInfo& t : file.tensors()) {
    SIPLLM_FUZZ_CHECK(t.offset >= file.data_offset() && t.offset <= size && t.bytes <= size - t.offset,
                      "tensor '" + t.name + "' accepted outside the file");
    SIPLLM_FUZZ_CHECK(!t.dims.empty() && t.dims.size() <= 4, "tensor '" + t.name + "' accepted with bad rank");
    SIPLLM_FUZZ_CHECK(file.find_tensor(t.name) == &t, "tensor '" + t.name + "' not found by its name");
  }
}

// The tokenizer a model's metadata builds, on a short text with special
// tokens and invalid UTF-8 in it.
void exercise_tokenizer(const GgufFile& file) {
  std::unique_ptr<Tokenizer> tokenizer;
  if (!fuzz::accepts([&] { tokenizer = Tokenizer::from_gguf(file); })) return;
  const int32_t n = tokenizer->n_vocab();
  SIPLLM_FUZZ_CHECK(n > 0, "a tokenizer with no tokens");
  const std::string text = "Hello <s> world</s> <|im_end|>\xff\xe2\x96 \xe2\x96\x81 x";
  for (int mode = 0; mode < 4; ++mode) {
    const std::vector<int32_t> ids = tokenizer->encode(text, (mode & 1) != 0, (mode & 2) != 0);
    for (int32_t id : ids) SIPLLM_FUZZ_CHECK(id >= 0 && id < n, "encode gave the id " + std::to_string(id));
    tokenizer->decode(ids);
  }
  std::vector<int32_t> first;
  for (int32_t id = 0; id < n && id < 32; ++id) first.push_back(id);
  TextDecoder decoder(*tokenizer);
  for (int32_t id : first) decoder.push(id);
  decoder.flush();
  tokenizer->decode(first);
}

void check_description(const ModelDescription& d, const GgufFile& file) {
  SIPLLM_FUZZ_CHECK(d.layers.size() == static_cast<size_t>(d.shape.n_layers) && d.n_units() > d.shape.n_layers,
                    "a description without a layer shape per block or without an output head");
  for (const UnitTensors& unit : d.units) {
    uint64_t bytes = 0;
    for (const TensorSlice& slice : unit.tensors) {
      if (slice.tensor == nullptr) continue;
      SIPLLM_FUZZ_CHECK(slice.first_row + slice.rows <= slice.tensor->rows(),
                        unit.name + ": rows past the end of '" + slice.tensor->name + "'");
      SIPLLM_FUZZ_CHECK(slice.offset() + slice.bytes() <= file.file_size(),
                        unit.name + ": a slice outside the file");
      bytes += slice.bytes();
    }
    SIPLLM_FUZZ_CHECK(bytes == unit.bytes, unit.name + ": bytes differ from its slices'");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  auto source = make_memory_source(bytes, "fuzz.gguf");
  std::optional<GgufFile> file;
  if (!fuzz::accepts([&] { file.emplace(GgufFile::parse(*source)); })) return 0;
  check_file(*file, size);
  exercise_tokenizer(*file);

  constexpr int kContext = 8;
  std::optional<ModelDescription> description;
  if (!fuzz::accepts([&] { description.emplace(describe_model(*file, kContext)); })) return 0;
  check_description(*description, *file);

  // The loader's three ways of running, chosen by the size so that an input
  // always runs the same way: synchronous, a ring with every unit resident,
  // a ring streaming every unit through one buffer.
  EngineOptions options;
  options.threads = 1;
  options.context_length = kContext;
  switch (size % 3) {
    case 0:
      options.loader.mode = LoaderMode::kSync;
      break;
    case 1:
      options.loader.mode = LoaderMode::kRing;
      break;
    default:
      options.loader.mode = LoaderMode::kRing;
      options.loader.memory_budget = 0;
      options.loader.n_buffers = 1;
      break;
  }
  fuzz::accepts([&] {
    std::unique_ptr<Engine> engine = Engine::open(make_memory_source(bytes, "fuzz.gguf"), options);
    const int n_vocab = engine->info().n_vocab();
    const std::vector<float> logits = engine->evaluate({0, n_vocab - 1});
    SIPLLM_FUZZ_CHECK(logits.size() == static_cast<size_t>(n_vocab), "evaluate gave a row of the wrong size");
  });
  return 0;
}

// Shared helpers for the test suite: where the fixture models are, and small
// generated models built in memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/gguf_writer.h"
#include "model/model_generator.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"

namespace sipllm::test {

// Path of a fixture model (the folder the build gathers them in, see
// tests/CMakeLists.txt: stories260K.gguf, llama.cpp-vocab/..., ...).
std::string model_path(const std::string& relative);

// Reads a whole file into a string (throws on failure).
std::string read_file(const std::string& path);

// llama.cpp's quantization of a few rows of floats to one tensor type and its
// dequantization of them (tests/fixtures/quant/<TYPE>.ggmlq, see
// make_ggml_oracle.py there).
struct GgmlOracle {
  uint32_t type_id = 0, rows = 0, cols = 0, row_bytes = 0;
  std::vector<uint8_t> bytes;  // rows x row_bytes
  std::vector<float> floats;   // rows x cols: llama.cpp's dequantization of bytes
  std::vector<float> inputs;   // rows x cols: what llama.cpp quantized to bytes
};
GgmlOracle read_ggml_oracle(const std::string& type_name);

// A random-weight llama in `shape` with the stories260K vocabulary.
GgufWriter random_llama_writer(const std::string& shape = "tiny",
                               TensorType type = TensorType::kF32, uint64_t seed = 7);
std::vector<uint8_t> random_llama_bytes(const std::string& shape = "tiny",
                                        TensorType type = TensorType::kF32, uint64_t seed = 7);

// A random-weight model of `family` in the tiny shape (sliding window 4 for
// the families that slide), with the stories260K vocabulary.
GgufWriter random_family_writer(const std::string& family, TensorType type = TensorType::kF32,
                                uint64_t seed = 7);

// Greedy sampling options.
GenerateOptions greedy(int max_tokens);

// Runs generation and returns the concatenated text.
std::string generate_text(Engine& engine, const std::string& prompt, const GenerateOptions& options,
                          GenerationStats* stats = nullptr);
std::string generate_text(Engine& engine, const std::vector<int32_t>& prompt,
                          const GenerateOptions& options, GenerationStats* stats = nullptr);

// Runs `fn` and returns the Error it throws (failing the test when it does not).
template <typename Fn>
Error expect_error(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a sipllm::Error";
  return Error(ErrorKind::kInvalidArgument, "");
}

}  // namespace sipllm::test

// Writes llama GGUF files with random weights in realistic shapes, for
// benchmarks and tests. The tokenizer is copied from a vocabulary GGUF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sipllm {

struct RandomModelSpec {
  std::string shape = "tiny";  // see random_model_shapes()
  // F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K (every
  // matrix of that type, as llama.cpp's quantize --pure; rows that do not fit
  // the block fall back as llama.cpp's do), or the mixes Q4_K_M and Q5_K_M
  // with llama.cpp's per-tensor rules. Norms are F32.
  std::string type = "Q8_0";
  std::string vocab_path;      // any GGUF with tokenizer.ggml.* metadata
  uint64_t seed = 1;
};

std::vector<std::string> random_model_shapes();
std::vector<std::string> random_model_types();

// Throws sipllm::Error naming the unknown shape or type, or the unreadable file.
void write_random_model(const RandomModelSpec& spec, const std::string& out_path);

}  // namespace sipllm

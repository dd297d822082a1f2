// Writes llama GGUF files with random weights in realistic shapes, for
// benchmarks and tests. The tokenizer is copied from a vocabulary GGUF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sipllm {

struct RandomModelSpec {
  std::string shape = "tiny";  // see random_model_shapes()
  std::string type = "Q8_0";   // F32, F16, BF16, Q8_0, Q4_0
  std::string vocab_path;      // any GGUF with tokenizer.ggml.* metadata
  uint64_t seed = 1;
};

std::vector<std::string> random_model_shapes();
std::vector<std::string> random_model_types();

// Throws sipllm::Error naming the unknown shape or type, or the unreadable file.
void write_random_model(const RandomModelSpec& spec, const std::string& out_path);

}  // namespace sipllm

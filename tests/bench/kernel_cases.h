// The kernel benchmark cases, shared by the native Google Benchmark binary
// and the plain WebAssembly benchmark, so both report the same work: matrix
// products of the SmolLM-135M and Qwen2.5-0.5B shapes per weight type, for
// one position (decode) and a prefill chunk, plus the per-token vector work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "core/kv_cache.h"
#include "model/tensor_type.h"

namespace sipllm {

class ThreadPool;

namespace bench {

struct MatmulCase {
  std::string shape;  // "smollm ffn_up 1536x576"
  TensorType type;
  int rows, cols, positions;
  std::string name() const;
};

// Every matrix-product case, for the weight types that have a kernel.
std::vector<MatmulCase> matmul_cases();

// Random weights and activations for a case, and one run of it.
class MatmulFixture {
 public:
  explicit MatmulFixture(const MatmulCase& c);
  void run(ThreadPool& pool);
  // Outputs of the last run that differ from the kernel's scalar reference
  // (which the integer kernels equal bit for bit, and float kernels within
  // rounding): the benchmark checks the build it measures, WebAssembly with
  // relaxed SIMD included, which no test suite runs.
  int mismatches() const;
  double weight_bytes() const { return static_cast<double>(bytes_.size()); }
  double flops() const;  // 2 per multiply-add

 private:
  MatmulCase case_;
  std::vector<uint8_t> bytes_;
  std::vector<float> x_, y_;
  WeightMatrix w_;
};

// The per-position vector work of a forward pass (norm, rope, SwiGLU,
// softmax, attention, activation quantization), named with its size.
struct VectorCase {
  std::string name;
  double flops_per_run;       // nominal, for a GFLOP/s figure
  double bytes_per_run = 0;   // read from memory, for a GB/s figure
};
std::vector<VectorCase> vector_cases();

class VectorFixture {
 public:
  explicit VectorFixture(const VectorCase& c);
  void run(ThreadPool& pool);

 private:
  VectorCase case_;
  std::vector<float> a_, b_, c_, scratch_, queries_, outputs_;
  std::vector<uint64_t> big_;
  QuantizedActivations quantized_;
  std::unique_ptr<KvCache> cache_;
};

}  // namespace bench
}  // namespace sipllm

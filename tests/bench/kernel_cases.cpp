#include "kernel_cases.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/activation_quant.h"
#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/rope.h"
#include "kernels/simd.h"
#include "core/thread_pool.h"

namespace sipllm::bench {
namespace {

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Shape {
  const char* name;
  int rows, cols;
};

}  // namespace

std::string MatmulCase::name() const {
  return tensor_type_name(static_cast<uint32_t>(type)) + " " + shape + " x" + std::to_string(positions);
}

std::vector<MatmulCase> matmul_cases() {
  const Shape shapes[] = {{"smollm ffn_up", 1536, 576},
                          {"smollm ffn_down", 576, 1536},
                          {"qwen ffn_down", 896, 4864}};
  const TensorType types[] = {TensorType::kQ8_0,         TensorType::kQ4_0,        TensorType::kQ4_1,
                              TensorType::kQ5_0,         TensorType::kQ5_1,        TensorType::kQ5_0Unpacked,
                              TensorType::kQ5_1Unpacked, TensorType::kQ4_K,        TensorType::kQ5_K,
                              TensorType::kQ6_K,         TensorType::kF16,         TensorType::kF32};
  // Far larger than the caches (75-140 MB quantized), as a whole model is
  // when decoding: this one measures the bandwidth from memory.
  const Shape dram{"dram-sized", 65536, 2048};
  std::vector<MatmulCase> cases;
  for (TensorType type : types) {
    if (find_matmul_kernel(type) == nullptr) continue;
    const uint32_t block = tensor_type_traits(type).block_elements;
    for (const Shape& s : shapes) {
      if (s.cols % static_cast<int>(block) != 0) continue;
      for (int positions : {1, 64}) {
        cases.push_back({std::string(s.name) + " " + std::to_string(s.rows) + "x" + std::to_string(s.cols), type,
                         s.rows, s.cols, positions});
      }
    }
    if (block > 1) {
      cases.push_back({std::string(dram.name) + " " + std::to_string(dram.rows) + "x" + std::to_string(dram.cols), type,
                       dram.rows, dram.cols, 1});
    }
  }
  return cases;
}

MatmulFixture::MatmulFixture(const MatmulCase& c) : case_(c) {
  const TensorTypeTraits& traits = tensor_type_traits(c.type);
  const size_t row_bytes = tensor_bytes(traits, static_cast<uint64_t>(c.cols));
  bytes_.resize(row_bytes * static_cast<size_t>(c.rows));
  // At most 2048 distinct rows (quantizing is slow); larger matrices repeat
  // them, still in memory of their own.
  const int distinct = c.rows < 2048 ? c.rows : 2048;
  const std::vector<float> w = random_floats(static_cast<size_t>(distinct) * c.cols, 0.05f, 1);
  for (int r = 0; r < distinct; ++r) {
    quantize_row(c.type, w.data() + static_cast<size_t>(r) * c.cols, bytes_.data() + static_cast<size_t>(r) * row_bytes,
                 static_cast<size_t>(c.cols));
  }
  for (int r = distinct; r < c.rows; ++r) {
    std::copy_n(bytes_.data() + static_cast<size_t>(r % distinct) * row_bytes, row_bytes,
                bytes_.data() + static_cast<size_t>(r) * row_bytes);
  }
  x_ = random_floats(static_cast<size_t>(c.positions) * c.cols, 1.0f, 2);
  y_.resize(static_cast<size_t>(c.positions) * c.rows);
  w_.type = c.type;
  w_.rows = c.rows;
  w_.cols = c.cols;
  w_.data = bytes_.data();
  w_.row_bytes = row_bytes;
  w_ = tile_rows(w_, bytes_.data());  // as the engine holds a model's
}

void MatmulFixture::run(ThreadPool& pool) {
  // Quantizing the activations is part of every product's cost.
  matmul(w_, x_.data(), case_.positions, y_.data(), pool);
}

int MatmulFixture::mismatches() const {
  const MatmulKernel& kernel = *find_matmul_kernel(case_.type);
  Activations activations;
  activations.reset(x_.data(), case_.positions, case_.cols);
  ThreadPool one(1);
  ActivationView view{.n_positions = case_.positions, .cols = case_.cols, .f32 = x_.data()};
  if (kernel.activations != ActivationFormat::kF32) view.q = &activations.quantized(kernel.activations, one);
  // The reference of the rows of the first tiles is enough to catch a wrong
  // kernel, and quick next to the runs measured.
  const int rows = std::min(case_.rows, 64);
  std::vector<float> expected(static_cast<size_t>(case_.positions) * static_cast<size_t>(case_.rows));
  kernel.reference(w_, 0, rows, view, expected.data(), static_cast<size_t>(case_.rows));
  const bool exact = kernel.activations != ActivationFormat::kF32;
  int wrong = 0;
  for (int p = 0; p < case_.positions; ++p) {
    for (int r = 0; r < rows; ++r) {
      const size_t i = static_cast<size_t>(p) * static_cast<size_t>(case_.rows) + static_cast<size_t>(r);
      const float tolerance = exact ? 0.0f : 1e-4f * (1.0f + std::fabs(expected[i]));
      if (!(std::fabs(y_[i] - expected[i]) <= tolerance)) ++wrong;
    }
  }
  return wrong;
}

double MatmulFixture::flops() const {
  return 2.0 * case_.rows * static_cast<double>(case_.cols) * case_.positions;
}

constexpr uint64_t kPeakRounds = 1 << 12;

std::vector<VectorCase> vector_cases() {
  return {{"rmsnorm 576", 3 * 576},
          {"rope 9x64", 6 * 576},
          {"swiglu 1536", 6 * 1536},
          {"softmax 1024", 4 * 1024},
          {"quantize q8_0 4864", 3 * 4864},
          {"quantize q8_k 4864", 3 * 4864},
          {"attention 9x64 over 256", 4.0 * 9 * 64 * 256},
          // A 128-token prompt's attention in one layer (positions 0-127,
          // each over the keys up to its own): SmolLM-135M's heads (3 KV
          // heads) and Qwen2.5-0.5B's (2 KV heads).
          {"attention prefill 9x64 128", 4.0 * 9 * 64 * (128 * 129 / 2)},
          {"attention prefill 14x64 128", 4.0 * 14 * 64 * (128 * 129 / 2)},
          // The same through llama.cpp's tiled path (floats throughout),
          // which prompts of 64 tokens or more take.
          {"attention prefill tiled 9x64 128", 4.0 * 9 * 64 * (128 * 129 / 2)},
          {"attention prefill tiled 14x64 128", 4.0 * 14 * 64 * (128 * 129 / 2)},
          // The ceiling of decoding, which reads every weight once per token:
          // a plain sum over a buffer far larger than the caches.
          {"read probe 256 MB", 0, 256.0 * (1 << 20)},
          // The ceiling of the matrix products: their 8-bit dot product
          // instruction alone (a run of it counts its multiply-adds).
          {"dot product peak", 2.0 * static_cast<double>(simd::dot_peak_rounds(kPeakRounds, 1))}};
}

VectorFixture::VectorFixture(const VectorCase& c) : case_(c) {
  a_ = random_floats(1 << 14, 1.0f, 3);  // also serves as a rope table
  b_ = random_floats(1 << 14, 1.0f, 4);
  c_.resize(1 << 14);
  if (c.bytes_per_run > 0) big_.assign(static_cast<size_t>(c.bytes_per_run) / sizeof(uint64_t), 1);
  if (c.name.rfind("attention", 0) == 0) {
    cache_ = std::make_unique<KvCache>(1, 3 * 64, 256);
    cache_->reserve(256);
    const std::vector<float> kv = random_floats(2 * 256 * 3 * 64, 1.0f, 5);
    for (int t = 0; t < 256; ++t) {
      store_kv(*cache_, 0, t, &kv[static_cast<size_t>(t) * 192], &kv[static_cast<size_t>(256 + t) * 192]);
    }
    queries_ = random_floats(128 * 14 * 64, 1.0f, 6);  // rows of 128 positions, for the prefill cases
    outputs_.resize(queries_.size());
  }
}

void VectorFixture::run(ThreadPool& pool) {
  const std::string& n = case_.name;
  if (!big_.empty()) {
    // The pool's threads each read a part, in 1 MB pieces.
    constexpr size_t kPiece = (size_t{1} << 20) / sizeof(uint64_t);
    std::vector<uint64_t> sums(static_cast<size_t>(pool.size()), 0);
    pool.parallel_for(big_.size() / kPiece, 1, [&](size_t begin, size_t end, int thread) {
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (size_t i = begin * kPiece; i < end * kPiece; i += 4) {
        a += big_[i];
        b += big_[i + 1];
        c += big_[i + 2];
        d += big_[i + 3];
      }
      sums[static_cast<size_t>(thread)] += a + b + c + d;
    });
    for (uint64_t sum : sums) c_[0] += static_cast<float>(sum);  // the reads must happen
  } else if (n == "dot product peak") {
    c_[0] += static_cast<float>(simd::dot_peak_rounds(kPeakRounds, 1));
  } else if (n == "rmsnorm 576") {
    rmsnorm(c_.data(), a_.data(), b_.data(), 576, 1e-5f);
  } else if (n == "rope 9x64") {
    RopeParams rope;
    rope.dims = 64;
    rope_rotate(a_.data(), 9, 64, rope, b_.data());
  } else if (n == "swiglu 1536") {
    std::copy_n(a_.data(), 1536, c_.data());
    swiglu(c_.data(), b_.data(), 1536);
  } else if (n == "softmax 1024") {
    std::copy_n(a_.data(), 1024, c_.data());
    softmax(c_.data(), 1024);
  } else if (n == "quantize q8_0 4864" || n == "quantize q8_k 4864") {
    quantize_activations(a_.data(), 1, 4864,
                         n == "quantize q8_0 4864" ? ActivationFormat::kQ8_0 : ActivationFormat::kQ8_K, &quantized_);
  } else {
    const bool qwen = n.find("14x64") != std::string::npos;
    const bool tiled = n.find("tiled") != std::string::npos;
    const AttentionShape shape{
        .n_heads = qwen ? 14 : 9, .n_kv_heads = qwen ? 2 : 3, .head_dim = 64, .scale = 0.125f};
    if (n == "attention 9x64 over 256") {
      attention(a_.data(), 1, 255, *cache_, 0, shape, c_.data(), pool, scratch_);
    } else {
      attention(queries_.data(), 128, 0, *cache_, 0, shape, outputs_.data(), pool, scratch_,
                tiled ? AttentionPath::kTiled : AttentionPath::kOneChunk);
    }
  }
}

}  // namespace sipllm::bench

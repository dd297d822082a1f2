#include "kernels/matmul.h"

#include <algorithm>
#include <string>

#include "kernels/quant_dot.h"
#include "sipllm/error.h"
#include "runtime/thread_pool.h"

namespace sipllm {
namespace {

// Multiply-adds per chunk of rows handed to a thread: enough that claiming a
// chunk costs little next to computing it, few enough that threads share a
// decode-sized matrix evenly. A product smaller than one chunk runs on the
// calling thread alone (tiny models never wake the pool).
constexpr size_t kChunkMacs = 1 << 16;

}  // namespace

const MatmulKernel* find_matmul_kernel(TensorType type) {
  switch (type) {
    case TensorType::kF32: return &kMatmulF32;
    case TensorType::kF16: return &kMatmulF16;
    case TensorType::kBF16: return &kMatmulBF16;
    case TensorType::kQ4_0: return &kMatmulQ4_0;
    case TensorType::kQ4_1: return &kMatmulQ4_1;
    case TensorType::kQ5_0: return &kMatmulQ5_0;
    case TensorType::kQ5_1: return &kMatmulQ5_1;
    case TensorType::kQ8_0: return &kMatmulQ8_0;
    case TensorType::kQ4_K: return &kMatmulQ4_K;
    case TensorType::kQ5_K: return &kMatmulQ5_K;
    case TensorType::kQ6_K: return &kMatmulQ6_K;
    default: return nullptr;
  }
}

void matmul(const WeightMatrix& w, Activations& x, float* y, ThreadPool& pool, int y_stride) {
  const MatmulKernel* kernel = find_matmul_kernel(w.type);
  if (kernel == nullptr) {
    throw Error(ErrorKind::kUnsupported, "no matrix product kernel for tensor type " +
                                             tensor_type_name(static_cast<uint32_t>(w.type)));
  }
  if (x.cols() != w.cols) {
    throw Error(ErrorKind::kInvalidArgument, "matrix product of rows of " + std::to_string(w.cols) +
                                                 " with activations of " + std::to_string(x.cols()));
  }
  ActivationView view;
  view.n_positions = x.n_positions();
  view.cols = x.cols();
  view.f32 = x.f32();
  if (kernel->activations != ActivationFormat::kF32) view.q = &x.quantized(kernel->activations, pool);

  const size_t stride = static_cast<size_t>(y_stride > 0 ? y_stride : w.rows);
  const size_t macs_per_row = static_cast<size_t>(w.cols) * static_cast<size_t>(view.n_positions);
  const size_t rows_per_chunk = std::max<size_t>(1, kChunkMacs / std::max<size_t>(1, macs_per_row));
  const size_t grain = (rows_per_chunk + 3) / 4 * 4;  // whole tiles of four rows
  pool.parallel_for(static_cast<size_t>(w.rows), grain, [&](size_t begin, size_t end, int) {
    kernel->rows(w, static_cast<int>(begin), static_cast<int>(end), view, y, stride);
  });
}

void matmul(const WeightMatrix& w, const float* x, int n_positions, float* y, ThreadPool& pool,
            int y_stride) {
  Activations activations;
  activations.reset(x, n_positions, w.cols);
  matmul(w, activations, y, pool, y_stride);
}

void dequantize_matrix_row(const WeightMatrix& w, int row, float* out) {
  dequantize_row(w.type, w.data + static_cast<size_t>(row) * w.row_bytes, out, static_cast<size_t>(w.cols));
}

}  // namespace sipllm

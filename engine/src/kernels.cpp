#include "kernels.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "half.h"
#include "thread_pool.h"

namespace sipllm {
namespace {

// Dot product in four interleaved float sums, so the order is fixed and
// independent of anything but n.
float dot_f32(const float* a, const float* b, int n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}

}  // namespace

void dequantize_matrix_row(const WeightMatrix& w, int row, float* out) {
  dequantize_row(w.type, w.data + static_cast<size_t>(row) * w.row_bytes, out,
                 static_cast<size_t>(w.cols));
}

void matmul(const WeightMatrix& w, const float* x, int n_positions, float* y, ThreadPool& pool,
            int y_stride) {
  const size_t stride = static_cast<size_t>(y_stride > 0 ? y_stride : w.rows);
  const size_t grain = 16;
  pool.parallel_for(static_cast<size_t>(w.rows), grain, [&](size_t begin, size_t end, int) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (size_t r = begin; r < end; ++r) {
      const float* wr;
      if (w.type == TensorType::kF32) {
        wr = reinterpret_cast<const float*>(w.data + r * w.row_bytes);
      } else {
        dequantize_matrix_row(w, static_cast<int>(r), row.data());
        wr = row.data();
      }
      for (int p = 0; p < n_positions; ++p) {
        y[static_cast<size_t>(p) * stride + r] =
            dot_f32(wr, x + static_cast<size_t>(p) * w.cols, w.cols);
      }
    }
  });
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
  float ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* vec, int n_heads, int head_dim, int rope_dims, int pos, float freq_base) {
  for (int i = 0; i < rope_dims / 2; ++i) {
    const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / rope_dims);
    const double angle = pos * freq;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    for (int h = 0; h < n_heads; ++h) {
      float* v = vec + static_cast<size_t>(h) * head_dim + 2 * i;
      const float v0 = v[0];
      const float v1 = v[1];
      v[0] = v0 * c - v1 * s;
      v[1] = v0 * s + v1 * c;
    }
  }
}

void softmax(float* x, int n) {
  float max = x[0];
  for (int i = 1; i < n; ++i) max = x[i] > max ? x[i] : max;
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(float* gate, const float* up, int n) {
  for (int i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace sipllm

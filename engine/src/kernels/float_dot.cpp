// F32, F16 and BF16 weights times f32 activations.
//
// For row r and position p: four lane sums over the first cols & ~3
// elements (lane l takes elements l, l + 4, ...; each step a multiply then an
// add), combined as (l0 + l2) + (l1 + l3), then the remaining elements added
// one by one. Four rows share a tile, two positions share each converted
// weight vector. The references sum plainly in double: agreement is within
// float rounding of the lane order.
#include <cstring>

#include "model/half.h"
#include "kernels/quant_dot.h"
#include "kernels/row_tiles.h"
#include "kernels/simd.h"

namespace sipllm {
namespace {

struct F32Format {
  static constexpr size_t kBytes = 4;
  static v128_t load4(const uint8_t* row, int k) { return simd::load(row + 4 * static_cast<size_t>(k)); }
  static float at(const uint8_t* row, int k) {
    float v;
    std::memcpy(&v, row + 4 * static_cast<size_t>(k), 4);
    return v;
  }
};

struct F16Format {
  static constexpr size_t kBytes = 2;
  static v128_t load4(const uint8_t* row, int k) {
    return simd::load_fp16x4(row + 2 * static_cast<size_t>(k));
  }
  static float at(const uint8_t* row, int k) { return fp16_to_float(simd::load_u16(row + 2 * static_cast<size_t>(k))); }
};

struct BF16Format {
  static constexpr size_t kBytes = 2;
  static v128_t load4(const uint8_t* row, int k) {
    return wasm_i32x4_shl(wasm_u32x4_extend_low_u16x8(wasm_v128_load64_zero(row + 2 * static_cast<size_t>(k))), 16);
  }
  static float at(const uint8_t* row, int k) { return bf16_to_float(simd::load_u16(row + 2 * static_cast<size_t>(k))); }
};

template <class F, int kPositions>
void dot_rows4(const RowTile& tile, int cols, const float* x, int p0, v128_t* out) {
  const uint8_t* const* row = tile.row;
  constexpr int kColsPerLine = static_cast<int>(64 / F::kBytes);
  const int cols4 = cols & ~3;
  v128_t acc[kPositions][4];
  for (int j = 0; j < kPositions; ++j) {
    for (int i = 0; i < 4; ++i) acc[j][i] = wasm_f32x4_splat(0.0f);
  }
  for (int k = 0; k < cols4; k += 4) {
    if (kPositions == 1 && k % kColsPerLine == 0) {
      for (int i = 0; i < 4; ++i) tile.prefetch_ahead(row[i] + F::kBytes * static_cast<size_t>(k), 64);
    }
    v128_t w[4];
    for (int i = 0; i < 4; ++i) w[i] = F::load4(row[i], k);
    for (int j = 0; j < kPositions; ++j) {
      const v128_t xv = simd::load(x + static_cast<size_t>(p0 + j) * static_cast<size_t>(cols) + k);
      for (int i = 0; i < 4; ++i) acc[j][i] = wasm_f32x4_add(acc[j][i], wasm_f32x4_mul(w[i], xv));
    }
  }
  for (int j = 0; j < kPositions; ++j) {
    out[j] = simd::transpose_sum_f32(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    if (cols4 == cols) continue;
    alignas(16) float lanes[4];
    wasm_v128_store(lanes, out[j]);
    const float* xp = x + static_cast<size_t>(p0 + j) * static_cast<size_t>(cols);
    for (int k = cols4; k < cols; ++k) {
      for (int i = 0; i < 4; ++i) lanes[i] = lanes[i] + F::at(row[i], k) * xp[k];
    }
    out[j] = wasm_v128_load(lanes);
  }
}

template <class F>
void rows_simd(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x, float* y,
               size_t y_stride) {
  for_each_row_tile<2>(
      w, row_begin, row_end, x.n_positions, y, y_stride,
      [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4<F, 2>(tile, w.cols, x.f32, p, acc); },
      [&](const RowTile& tile, int p, v128_t* acc) { dot_rows4<F, 1>(tile, w.cols, x.f32, p, acc); });
}

template <class F>
void rows_reference(const WeightMatrix& w, int row_begin, int row_end, const ActivationView& x,
                    float* y, size_t y_stride) {
  for (int r = row_begin; r < row_end; ++r) {
    const uint8_t* row = w.data + static_cast<size_t>(r) * w.row_bytes;
    for (int p = 0; p < x.n_positions; ++p) {
      const float* xp = x.f32 + static_cast<size_t>(p) * static_cast<size_t>(w.cols);
      double sum = 0;
      for (int k = 0; k < w.cols; ++k) sum += static_cast<double>(F::at(row, k)) * xp[k];
      y[static_cast<size_t>(p) * y_stride + static_cast<size_t>(r)] = static_cast<float>(sum);
    }
  }
}

}  // namespace

const MatmulKernel kMatmulF32{ActivationFormat::kF32, rows_simd<F32Format>, rows_reference<F32Format>};
const MatmulKernel kMatmulF16{ActivationFormat::kF32, rows_simd<F16Format>, rows_reference<F16Format>};
const MatmulKernel kMatmulBF16{ActivationFormat::kF32, rows_simd<BF16Format>, rows_reference<BF16Format>};

}  // namespace sipllm

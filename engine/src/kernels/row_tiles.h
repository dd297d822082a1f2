// The loop every matrix-product kernel shares: rows in groups of four
// (one per SIMD lane, the last group padded by repeating its last row, whose
// extra lanes are never stored) and positions in tiles, so that each weight
// block, once loaded, serves several positions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"
#include "kernels/simd.h"

namespace sipllm {

// dot_tile(row, p, acc) fills acc[0..kTile) with four rows' dot products for
// positions p..p+kTile; dot_one(row, p, acc) does the same for position p
// alone (the positions left over after the whole tiles).
template <int kTile, class DotTile, class DotOne>
void for_each_row_tile(const WeightMatrix& w, int row_begin, int row_end, int n_positions, float* y,
                       size_t y_stride, DotTile dot_tile, DotOne dot_one) {
  const uint8_t* matrix_end = w.data + static_cast<size_t>(w.rows) * w.row_bytes;
  simd::prefetch_run_start(w.data + static_cast<size_t>(row_begin) * w.row_bytes, w.row_bytes, matrix_end);
  for (int r = row_begin; r < row_end; r += 4) {
    const int valid = row_end - r < 4 ? row_end - r : 4;
    const uint8_t* row[4];
    for (int i = 0; i < 4; ++i) row[i] = w.data + static_cast<size_t>(r + (i < valid ? i : valid - 1)) * w.row_bytes;
    simd::prefetch_rows(row[0], w.row_bytes, matrix_end);
    int p = 0;
    for (; p + kTile <= n_positions; p += kTile) {
      v128_t acc[kTile];
      dot_tile(row, p, acc);
      for (int j = 0; j < kTile; ++j) simd::store_lanes(acc[j], y + static_cast<size_t>(p + j) * y_stride + r, valid);
    }
    for (; p < n_positions; ++p) {
      v128_t acc[1];
      dot_one(row, p, acc);
      simd::store_lanes(acc[0], y + static_cast<size_t>(p) * y_stride + r, valid);
    }
  }
}

}  // namespace sipllm

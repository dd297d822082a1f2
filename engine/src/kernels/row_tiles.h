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

// Four rows of a matrix, and the rows simd::prefetch_rows_ahead() further on
// to prefetch while they are read. A matrix-vector product (one position)
// reads each row once, so it prefetches as it goes: its kernel calls
// prefetch_ahead() for each block of a row it reads, and the prefetches spread
// over the computation. (Issued in a burst per tile, they queued on the core's few
// outstanding-miss slots and stalled the kernel: native one-thread decode ran
// at 55-75 % of the speed it has this way.) Several positions reuse the rows
// from cache: there the burst costs little, and the tile's kernel, called
// once per group of positions, does not prefetch. Nor does a kernel whose
// prefetch has to wait (simd::kPrefetchNeverWaits): WebAssembly's.
struct RowTile {
  const uint8_t* row[4];
  const uint8_t* ahead[4];  // nullptr: nothing to prefetch (past the matrix, or prefetched already)

  // Prefetches bytes [offset, offset + length) of the row ahead of row i
  // (length at most a few cache lines: one block).
  void prefetch_ahead(int i, size_t offset, size_t length) const {
    if constexpr (!simd::kPrefetchNeverWaits) return;  // the tile prefetched in a burst
    if (ahead[i] == nullptr) return;
    for (size_t at = 0; at < length; at += 64) simd::prefetch(ahead[i] + offset + at);
  }
};

// dot_tile(tile, p, acc) fills acc[0..kTile) with four rows' dot products for
// positions p..p+kTile; dot_one(tile, p, acc) does the same for position p
// alone (the positions left over after the whole tiles), and prefetches.
template <int kTile, class DotTile, class DotOne>
void for_each_row_tile(const WeightMatrix& w, int row_begin, int row_end, int n_positions, float* y,
                       size_t y_stride, DotTile dot_tile, DotOne dot_one) {
  const size_t matrix_bytes = static_cast<size_t>(w.rows) * w.row_bytes;
  const uint8_t* matrix_end = w.data + matrix_bytes;
  const size_t ahead_bytes = simd::prefetch_rows_ahead(w.row_bytes) * w.row_bytes;
  simd::prefetch_run_start(w.data + static_cast<size_t>(row_begin) * w.row_bytes, w.row_bytes, matrix_end);
  for (int r = row_begin; r < row_end; r += 4) {
    const int valid = row_end - r < 4 ? row_end - r : 4;
    RowTile tile;
    for (int i = 0; i < 4; ++i) {
      tile.row[i] = w.data + static_cast<size_t>(r + (i < valid ? i : valid - 1)) * w.row_bytes;
      tile.ahead[i] = nullptr;
      if (ahead_bytes + static_cast<size_t>(r + i + 1) * w.row_bytes <= matrix_bytes) {
        tile.ahead[i] = w.data + ahead_bytes + static_cast<size_t>(r + i) * w.row_bytes;
      }
    }
    int p = 0;
    if (n_positions >= kTile || !simd::kPrefetchNeverWaits) {
      for (const uint8_t* ahead : tile.ahead) {
        if (ahead != nullptr) simd::prefetch_range(ahead, ahead + w.row_bytes);
      }
      for (const uint8_t*& ahead : tile.ahead) ahead = nullptr;
    }
    for (; p + kTile <= n_positions; p += kTile) {
      v128_t acc[kTile];
      dot_tile(tile, p, acc);
      for (int j = 0; j < kTile; ++j) simd::store_lanes(acc[j], y + static_cast<size_t>(p + j) * y_stride + r, valid);
    }
    for (; p < n_positions; ++p) {
      v128_t acc[1];
      dot_one(tile, p, acc);
      simd::store_lanes(acc[0], y + static_cast<size_t>(p) * y_stride + r, valid);
      for (const uint8_t*& ahead : tile.ahead) ahead = nullptr;
    }
  }
}

}  // namespace sipllm

// The loop every matrix-product kernel shares: rows in groups of four
// (one per SIMD lane, the last group padded by repeating its last row, whose
// extra lanes are never stored) and positions in tiles, so that each weight
// block, once loaded, serves several positions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/matmul.h"
#include "kernels/simd.h"
#include "sipllm/error.h"

namespace sipllm {

// Four rows of a matrix, and the bytes simd::prefetch_rows_ahead() rows
// further on to prefetch while they are read. Rows [r, r + 4) take the same
// bytes in either layout (WeightMatrix), so "the byte this far ahead of the
// one read" is right in both. A matrix-vector product (one position) reads
// each row once, so it prefetches as it goes: its kernel calls
// prefetch_ahead() for each block it reads, and the prefetches spread over
// the computation. (Issued in a burst per tile, they queued on the core's few
// outstanding-miss slots and stalled the kernel: native one-thread decode ran
// at 55-75 % of the speed it has this way.) Several positions reuse the rows
// from cache: there the burst costs little, and the tile's kernel, called
// once per group of positions, does not prefetch. Nor does a kernel whose
// prefetch has to wait (simd::kPrefetchNeverWaits): WebAssembly's, which
// prefetches a row-major matrix in a burst per tile, and a tiled one not at
// all: a tiled matrix is read as one ascending stream, which the hardware
// prefetchers follow. (In Chromium a one-thread matrix-vector product from
// memory ran 1.4-1.8x faster tiled without prefetches than row-major with them.)
struct RowTile {
  const uint8_t* row[4];  // each row's first block
  size_t block_stride;    // bytes from a block of a row to its next (WeightMatrix::block_stride)
  size_t ahead_bytes;     // how far ahead to prefetch; 0: nothing to prefetch (or done already)
  const uint8_t* end;     // the end of the matrix: nothing at or past it is prefetched
  // A whole tile whose groups of blocks interleave the rows' values (see
  // tile_rows()): row[0] is where the groups start, block_stride their size.
  bool values_interleaved = false;

  // Prefetches `length` bytes (a block) ahead_bytes past p, which the
  // kernel is reading.
  void prefetch_ahead(const uint8_t* p, size_t length) const {
    if constexpr (!simd::kPrefetchNeverWaits) return;  // the tile prefetched in a burst, or not at all
    if (ahead_bytes == 0 || p + ahead_bytes + length > end) return;
    for (size_t at = 0; at < length; at += 64) simd::prefetch(p + ahead_bytes + at);
  }
};

// Kernels take the rows of a tiled matrix from the start of a tile: from
// inside one, they would misread its rows.
inline void check_tile_start(const WeightMatrix& w, int row_begin) {
  if (w.tiled() && row_begin % WeightMatrix::kTileRows != 0) {
    throw Error(ErrorKind::kInvalidArgument, "rows of a tiled matrix from row " + std::to_string(row_begin) +
                                                 ", not the start of a tile");
  }
}

// dot_tile(tile, p, acc) fills acc[0..kTile) with four rows' dot products for
// positions p..p+kTile (acc[j]'s lane i: row i, position p + j); dot_one(tile,
// p, acc) does the same for position p alone (the positions left over after
// the whole tiles), and prefetches. With dot_wide, positions go in tiles of
// kWideTile (a multiple of kTile) first, then of kTile, then one by one.
template <int kWideTile, int kTile, class DotWide, class DotTile, class DotOne>
void for_each_row_tile(const WeightMatrix& w, int row_begin, int row_end, int n_positions, float* y,
                       size_t y_stride, DotWide dot_wide, DotTile dot_tile, DotOne dot_one) {
  static_assert(WeightMatrix::kTileRows == 4, "a tile of the layout is a tile of the kernels");
  static_assert(kWideTile % kTile == 0, "wide tiles are whole tiles");
  check_tile_start(w, row_begin);
  const bool prefetch = simd::kPrefetchNeverWaits || !w.tiled();
  const bool interleaved = w.tiled() && interleaved_values_from(w.type) != 0;
  const uint8_t* matrix_end = w.data + static_cast<size_t>(w.rows) * w.row_bytes;
  const size_t ahead_bytes = simd::prefetch_rows_ahead(w.row_bytes) * w.row_bytes;
  if (prefetch) simd::prefetch_run_start(w.data + static_cast<size_t>(row_begin) * w.row_bytes, w.row_bytes, matrix_end);
  for (int r = row_begin; r < row_end; r += 4) {
    const int valid = row_end - r < 4 ? row_end - r : 4;
    RowTile tile;
    tile.block_stride = w.block_stride(r);
    for (int i = 0; i < 4; ++i) tile.row[i] = w.row_start(r + (i < valid ? i : valid - 1));
    tile.ahead_bytes = prefetch ? ahead_bytes : 0;
    tile.end = matrix_end;
    tile.values_interleaved = interleaved && r + WeightMatrix::kTileRows <= w.rows;
    if (prefetch && (n_positions >= kTile || !simd::kPrefetchNeverWaits)) {
      const uint8_t* ahead = w.data + static_cast<size_t>(r) * w.row_bytes + ahead_bytes;
      const uint8_t* ahead_end = ahead + static_cast<size_t>(valid) * w.row_bytes;
      if (ahead < matrix_end) simd::prefetch_range(ahead, ahead_end < matrix_end ? ahead_end : matrix_end);
      tile.ahead_bytes = 0;
    }
    int p = 0;
    const auto tiles_of = [&](auto size, auto& dot) {
      constexpr int kSize = decltype(size)::value;
      for (; p + kSize <= n_positions; p += kSize) {
        v128_t acc[kSize];
        dot(tile, p, acc);
        for (int j = 0; j < kSize; ++j) simd::store_lanes(acc[j], y + static_cast<size_t>(p + j) * y_stride + r, valid);
        tile.ahead_bytes = 0;
      }
    };
    if constexpr (kWideTile != kTile) tiles_of(std::integral_constant<int, kWideTile>{}, dot_wide);
    tiles_of(std::integral_constant<int, kTile>{}, dot_tile);
    tiles_of(std::integral_constant<int, 1>{}, dot_one);
  }
}

template <int kTile, class DotTile, class DotOne>
void for_each_row_tile(const WeightMatrix& w, int row_begin, int row_end, int n_positions, float* y,
                       size_t y_stride, DotTile dot_tile, DotOne dot_one) {
  for_each_row_tile<kTile, kTile>(w, row_begin, row_end, n_positions, y, y_stride, dot_tile, dot_tile, dot_one);
}

}  // namespace sipllm

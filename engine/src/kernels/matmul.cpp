#include "kernels/matmul.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quant_dot.h"
#include "kernels/simd.h"
#include "sipllm/error.h"
#include "core/thread_pool.h"

namespace sipllm {
namespace {

// Multiply-adds per chunk of rows handed to a thread: enough that claiming a
// chunk costs little next to computing it, few enough that threads share a
// decode-sized matrix evenly. A product smaller than one chunk runs on the
// calling thread alone (tiny models never wake the pool).
constexpr size_t kChunkMacs = 1 << 16;

}  // namespace

std::string matmul_kernel_form() {
#if defined(__wasm_relaxed_simd__)
  return simd::exact_byte_dot() ? "WebAssembly relaxed SIMD, exact 8-bit dot product"
                                : "WebAssembly relaxed SIMD, 8-bit dot products added as int16 pairs";
#elif defined(__EMSCRIPTEN__)
  return "WebAssembly SIMD128, 16-bit dot products";
#else
  if constexpr (simd::kWideGroups) return "AVX-512 VNNI: 512-bit tiles for 32-element blocks, 128-bit VNNI for the rest";
  if constexpr (simd::kVnni) return "128-bit VNNI 8-bit dot products";
  if constexpr (simd::kByteDot) return "128-bit SSSE3, 8-bit products added as int16 pairs";
  return "128-bit SIMD (SIMDe), 16-bit dot products";
#endif
}

double measure_dot_peak(ThreadPool& pool, double seconds) {
  using Clock = std::chrono::steady_clock;
  // Eight chunks per thread, claimed as threads come: one that joins late
  // takes fewer, rather than the loop waiting for its share.
  const size_t chunks = 8 * static_cast<size_t>(pool.size());
  const auto rate = [&](uint64_t rounds) {
    std::vector<uint64_t> done(chunks, 0);
    const auto start = Clock::now();
    pool.parallel_for(chunks, 1, [&](size_t begin, size_t end, int) {
      for (size_t chunk = begin; chunk < end; ++chunk) {
        done[chunk] = simd::dot_peak_rounds(rounds, static_cast<int>(chunk) + 1);
      }
    });
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    uint64_t total = 0;
    for (uint64_t d : done) total += d;
    return std::pair{static_cast<double>(total) / s, s};
  };
  uint64_t rounds = 1024;
  while (rate(rounds).second < seconds / 4 && rounds < (uint64_t{1} << 40)) rounds *= 2;
  double best = 0;
  for (int run = 0; run < 3; ++run) best = std::max(best, rate(rounds).first);
  return best;
}

namespace {

// The kernel table, parallel to the type table (model/tensor_type.cpp).
struct KernelRow {
  TensorType type;
  const MatmulKernel* kernel;
};
using T = TensorType;
constexpr KernelRow kKernels[] = {
    {T::kF32, &kMatmulF32},          {T::kF16, &kMatmulF16},          {T::kBF16, &kMatmulBF16},
    {T::kQ4_0, &kMatmulQ4_0},        {T::kQ4_1, &kMatmulQ4_1},        {T::kQ5_0, &kMatmulQ5_0},
    {T::kQ5_1, &kMatmulQ5_1},        {T::kQ8_0, &kMatmulQ8_0},        {T::kQ2_K, &kMatmulQ2_K},
    {T::kQ3_K, &kMatmulQ3_K},        {T::kQ4_K, &kMatmulQ4_K},        {T::kQ5_K, &kMatmulQ5_K},
    {T::kQ6_K, &kMatmulQ6_K},        {T::kIQ4_NL, &kMatmulIQ4_NL},    {T::kIQ4_XS, &kMatmulIQ4_XS},
    {T::kMXFP4, &kMatmulMXFP4},      {T::kQ5_0Unpacked, &kMatmulQ5_0Unpacked},
    {T::kQ5_1Unpacked, &kMatmulQ5_1Unpacked},
};

struct KernelIndex {
  const MatmulKernel* by_id[kTensorTypeIdLimit] = {};
  constexpr KernelIndex() {
    for (const KernelRow& row : kKernels) by_id[static_cast<uint32_t>(row.type)] = row.kernel;
  }
};
constexpr KernelIndex kKernelIndex;

}  // namespace

const MatmulKernel* find_matmul_kernel(TensorType type) {
  const auto id = static_cast<uint32_t>(type);
  return id < kTensorTypeIdLimit ? kKernelIndex.by_id[id] : nullptr;
}

namespace {

// The kernel for w, checked against the activations it is given.
const MatmulKernel& checked_kernel(const WeightMatrix& w, const Activations& x) {
  const MatmulKernel* kernel = find_matmul_kernel(w.type);
  if (kernel == nullptr) {
    throw Error(ErrorKind::kUnsupported, "no matrix product kernel for tensor type " +
                                             tensor_type_name(static_cast<uint32_t>(w.type)));
  }
  if (x.cols() != w.cols) {
    throw Error(ErrorKind::kInvalidArgument, "matrix product of rows of " + std::to_string(w.cols) +
                                                 " with activations of " + std::to_string(x.cols()));
  }
  return *kernel;
}

ActivationView view_for(const MatmulKernel& kernel, Activations& x, ThreadPool& pool) {
  ActivationView view;
  view.n_positions = x.n_positions();
  view.cols = x.cols();
  view.f32 = x.f32();
  if (kernel.activations != ActivationFormat::kF32) view.q = &x.quantized(kernel.activations, pool);
  return view;
}

// Chunks of a product per thread, at most: enough to even out a thread
// slowed by something else on its core, few enough that each chunk is a
// long ascending read. (Without a prefetch instruction, as in WebAssembly,
// the hardware prefetchers start over at every chunk: two threads decoding
// from memory moved 15-35 % more bytes per second in chunks this size than
// in chunks of kChunkMacs.)
constexpr size_t kChunksPerThread = 4;

// Rows per chunk handed to a thread: whole tiles of four rows.
size_t chunk_rows(const WeightMatrix& w, int n_positions, int threads) {
  const size_t macs_per_row = static_cast<size_t>(w.cols) * static_cast<size_t>(n_positions);
  const size_t by_work = std::max<size_t>(1, kChunkMacs / std::max<size_t>(1, macs_per_row));
  const size_t by_count = static_cast<size_t>(w.rows) / (kChunksPerThread * static_cast<size_t>(threads));
  return (std::max(by_work, by_count) + 3) / 4 * 4;
}

}  // namespace

void matmul(const WeightMatrix& w, Activations& x, float* y, ThreadPool& pool, int y_stride) {
  const MatmulKernel& kernel = checked_kernel(w, x);
  const ActivationView view = view_for(kernel, x, pool);
  const size_t stride = static_cast<size_t>(y_stride > 0 ? y_stride : w.rows);
  const size_t grain = chunk_rows(w, view.n_positions, pool.size());
  pool.parallel_for(static_cast<size_t>(w.rows), grain, [&](size_t begin, size_t end, int) {
    kernel.rows(w, static_cast<int>(begin), static_cast<int>(end), view, y, stride);
  });
}

void matmul_each(std::initializer_list<MatmulProduct> products, Activations& x, ThreadPool& pool) {
  struct Part {
    const MatmulKernel* kernel;
    ActivationView view;
    const WeightMatrix* w;
    float* y;
    size_t first_chunk, grain;
  };
  constexpr size_t kMaxProducts = 4;
  if (products.size() > kMaxProducts) throw Error(ErrorKind::kInvalidArgument, "more than 4 products in one loop");
  Part parts[kMaxProducts];
  size_t n_parts = 0, chunks = 0;
  for (const MatmulProduct& p : products) {
    Part& part = parts[n_parts++];
    part.kernel = &checked_kernel(*p.w, x);
    part.view = view_for(*part.kernel, x, pool);
    part.w = p.w;
    part.y = p.y;
    part.first_chunk = chunks;
    part.grain = chunk_rows(*p.w, x.n_positions(), pool.size());
    chunks += (static_cast<size_t>(p.w->rows) + part.grain - 1) / part.grain;
  }
  pool.parallel_for(chunks, 1, [&](size_t begin, size_t end, int) {
    for (size_t chunk = begin; chunk < end; ++chunk) {
      size_t i = n_parts - 1;
      while (parts[i].first_chunk > chunk) --i;
      const Part& part = parts[i];
      const size_t row = (chunk - part.first_chunk) * part.grain;
      const size_t row_end = std::min(row + part.grain, static_cast<size_t>(part.w->rows));
      part.kernel->rows(*part.w, static_cast<int>(row), static_cast<int>(row_end), part.view, part.y,
                        static_cast<size_t>(part.w->rows));
    }
  });
}

void matmul(const WeightMatrix& w, const float* x, int n_positions, float* y, ThreadPool& pool,
            int y_stride) {
  Activations activations;
  activations.reset(x, n_positions, w.cols);
  matmul(w, activations, y, pool, y_stride);
}

void dequantize_matrix_row(const WeightMatrix& w, int row, float* out) {
  if (!w.tiled()) {
    dequantize_row(w.type, w.row_start(row), out, static_cast<size_t>(w.cols));
    return;
  }
  const TensorTypeTraits& traits = tensor_type_traits(w.type);
  std::vector<uint8_t> scratch(traits.block_bytes);
  for (int b = 0; b * static_cast<int>(traits.block_elements) < w.cols; ++b) {
    dequantize_row(w.type, matrix_block(w, row, b, scratch.data()),
                   out + static_cast<size_t>(b) * traits.block_elements, traits.block_elements);
  }
}

namespace {

// One tile's rows, row-major in `rows`, to the tiled layout at `tile`.
// kBlockBytes is a constant where it can be, so that each block's copy is a
// few moves rather than a call.
template <size_t kBlockBytes>
void interleave_blocks(const uint8_t* rows, int n_rows, size_t n_blocks, size_t row_bytes, size_t block_bytes,
                       uint8_t* tile) {
  const size_t bytes = kBlockBytes != 0 ? kBlockBytes : block_bytes;
  for (size_t b = 0; b < n_blocks; ++b) {
    for (int i = 0; i < n_rows; ++i, tile += bytes) {
      std::memcpy(tile, rows + static_cast<size_t>(i) * row_bytes + b * bytes, bytes);
    }
  }
}

// A whole tile's rows, row-major in `rows`, to the tiled layout at `tile`
// with their values interleaved (tile_rows()): row i's bytes [at, at + 2) of
// its scale (and minimum) lie at 4 * at + 2 * i in each group of blocks, its
// bytes [at, at + 4) of values at 4 * at + 4 * i. Each 16 bytes of values of
// the four rows are a 4 x 4 transpose of 32-bit lanes. (The loader tiles a
// streamed unit on every pass: a copy 4 bytes at a time made decode with no
// budget about twice as slow.)
template <size_t kValuesFrom>
void interleave_tile(const uint8_t* rows, size_t n_blocks, size_t row_bytes, size_t block_bytes, uint8_t* tile) {
  const uint8_t* row[4] = {rows, rows + row_bytes, rows + 2 * row_bytes, rows + 3 * row_bytes};
  for (size_t b = 0; b < n_blocks; ++b, tile += WeightMatrix::kTileRows * block_bytes) {
    for (size_t at = 0; at < kValuesFrom; at += 2) {
      for (size_t i = 0; i < 4; ++i) std::memcpy(tile + 4 * at + 2 * i, row[i] + at, 2);
    }
    for (size_t at = kValuesFrom; at < block_bytes; at += 16) {
      const v128_t r0 = simd::load(row[0] + at), r1 = simd::load(row[1] + at);
      const v128_t r2 = simd::load(row[2] + at), r3 = simd::load(row[3] + at);
      const v128_t low01 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5), low23 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5);
      const v128_t high01 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7), high23 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
      uint8_t* out = tile + 4 * at;
      simd::store(out, wasm_i32x4_shuffle(low01, low23, 0, 1, 4, 5));
      simd::store(out + 16, wasm_i32x4_shuffle(low01, low23, 2, 3, 6, 7));
      simd::store(out + 32, wasm_i32x4_shuffle(high01, high23, 0, 1, 4, 5));
      simd::store(out + 48, wasm_i32x4_shuffle(high01, high23, 2, 3, 6, 7));
    }
    for (const uint8_t*& r : row) r += block_bytes;
  }
}

void interleave_tile(const uint8_t* rows, size_t n_blocks, size_t row_bytes, size_t block_bytes, size_t values_from,
                     uint8_t* tile) {
  if ((block_bytes - values_from) % 16 == 0) {
    if (values_from == 2) return interleave_tile<2>(rows, n_blocks, row_bytes, block_bytes, tile);
    if (values_from == 4) return interleave_tile<4>(rows, n_blocks, row_bytes, block_bytes, tile);
  }
  throw Error(ErrorKind::kUnsupported, "tiles interleaving " + std::to_string(block_bytes - values_from) +
                                           " bytes of values after " + std::to_string(values_from) +
                                           " of scales: only 16 or 32 after 2 or 4");
}

}  // namespace

size_t interleaved_values_from(TensorType type) {
  const MatmulKernel* kernel = find_matmul_kernel(type);
  return kernel != nullptr ? kernel->interleaved_values_from : 0;
}

const uint8_t* matrix_block(const WeightMatrix& w, int row, int block, uint8_t* scratch) {
  const uint8_t* in_place = w.row_start(row) + static_cast<size_t>(block) * w.block_stride(row);
  const size_t values_from = w.tiled() ? interleaved_values_from(w.type) : 0;
  const int tile_row = row % WeightMatrix::kTileRows;
  if (values_from == 0 || row - tile_row + WeightMatrix::kTileRows > w.rows) return in_place;
  // Back out of the group, as interleave_tile() put it there.
  const size_t block_bytes = w.tile_block_bytes;
  const auto i = static_cast<size_t>(tile_row);
  const uint8_t* group = in_place - i * block_bytes;
  for (size_t at = 0; at < values_from; at += 2) std::memcpy(scratch + at, group + 4 * at + 2 * i, 2);
  for (size_t at = values_from; at < block_bytes; at += 4) std::memcpy(scratch + at, group + 4 * at + 4 * i, 4);
  return scratch;
}

WeightMatrix tile_rows(const WeightMatrix& w, uint8_t* bytes) {
  const TensorTypeTraits& traits = tensor_type_traits(w.type);
  if (w.tiled() || traits.block_elements == 1 || find_matmul_kernel(w.type) == nullptr) return w;
  const size_t n_blocks = static_cast<size_t>(w.cols) / traits.block_elements;
  const size_t values_from = interleaved_values_from(w.type);
  std::vector<uint8_t> rows(static_cast<size_t>(WeightMatrix::kTileRows) * w.row_bytes);
  for (int r = 0; r < w.rows; r += WeightMatrix::kTileRows) {
    const int n = std::min(WeightMatrix::kTileRows, w.rows - r);
    uint8_t* tile = bytes + static_cast<size_t>(r) * w.row_bytes;
    std::memcpy(rows.data(), tile, static_cast<size_t>(n) * w.row_bytes);
    if (values_from != 0 && n == WeightMatrix::kTileRows) {
      interleave_tile(rows.data(), n_blocks, w.row_bytes, traits.block_bytes, values_from, tile);
      continue;
    }
    switch (traits.block_bytes) {
      case sizeof(BlockQ4_0):
        interleave_blocks<sizeof(BlockQ4_0)>(rows.data(), n, n_blocks, w.row_bytes, 0, tile);
        break;
      case sizeof(BlockQ5_0):
        interleave_blocks<sizeof(BlockQ5_0)>(rows.data(), n, n_blocks, w.row_bytes, 0, tile);
        break;
      case sizeof(BlockQ8_0):
        interleave_blocks<sizeof(BlockQ8_0)>(rows.data(), n, n_blocks, w.row_bytes, 0, tile);
        break;
      case sizeof(BlockQ5_1Unpacked):
        interleave_blocks<sizeof(BlockQ5_1Unpacked)>(rows.data(), n, n_blocks, w.row_bytes, 0, tile);
        break;
      default: interleave_blocks<0>(rows.data(), n, n_blocks, w.row_bytes, traits.block_bytes, tile);
    }
  }
  WeightMatrix tiled = w;
  tiled.data = bytes;
  tiled.tile_block_bytes = traits.block_bytes;
  return tiled;
}

}  // namespace sipllm

// Matrix products of a weight matrix, in its file type, with a batch of
// positions: y[p][r] = dot(W[r], x[p]).
//
// Every output element is computed with a fixed order of operations that
// depends only on the shapes: not on the thread count, not on how many
// positions are processed together, not on which rows share a tile. That is
// what makes layer-major prefill bit-identical to one token at a time, and 1
// thread identical to N.
//
// Quantized weights are multiplied by activations quantized to 8 bits (see
// activation_quant.h) with integer dot products; float weights by float
// activations. Rows go four at a time (one per lane of the accumulators) and
// positions a few at a time, so each unpacked weight block serves several
// positions; threads split the rows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/activation_quant.h"
#include "model/tensor_type.h"
#include "model/unit_weights.h"

namespace sipllm {

class ThreadPool;

// What a kernel reads of the activations: the floats, and for integer kernels
// their quantized form.
struct ActivationView {
  int n_positions = 0;
  int cols = 0;
  const float* f32 = nullptr;               // [position][cols]
  const QuantizedActivations* q = nullptr;  // in the kernel's format
};

// Writes y[p * y_stride + r] for rows [row_begin, row_end) and every position.
// In a tiled matrix row_begin is a multiple of WeightMatrix::kTileRows.
using MatmulRowsFn = void (*)(const WeightMatrix& w, int row_begin, int row_end,
                              const ActivationView& x, float* y, size_t y_stride);

struct MatmulKernel {
  ActivationFormat activations;
  MatmulRowsFn rows;       // SIMD
  MatmulRowsFn reference;  // plain scalar, the definition the SIMD path is tested against
  // Where a tiled matrix of this type interleaves its rows' values: the
  // bytes of a block before its values (its scale, and its minimum if any);
  // 0 where tiles keep their blocks whole. See tile_rows().
  size_t interleaved_values_from = 0;
};

// The instructions the matrix products take on this CPU, in words
// ("WebAssembly relaxed SIMD, exact 8-bit dot product", "128-bit VNNI 8-bit
// dot products", ...): what GenerationStats::kernels reports. A relaxed SIMD build finds out at
// run time which dot product the engine gives it (simd::exact_byte_dot()).
std::string matmul_kernel_form();

// 8-bit multiply-adds per second the pool's threads reach together with that
// instruction alone (simd::dot_peak_rounds): sipllm::dot_product_peak. Best of
// three runs, each about a quarter of `seconds`.
double measure_dot_peak(ThreadPool& pool, double seconds);

// The kernel for a weight type; nullptr when there is none.
const MatmulKernel* find_matmul_kernel(TensorType type);

// y[p * y_stride + r] = dot(W[r], x[p]) for every row and position. y_stride
// defaults to w.rows. Throws Error(kUnsupported) naming the type when no
// kernel handles it.
void matmul(const WeightMatrix& w, Activations& x, float* y, ThreadPool& pool, int y_stride = 0);

// One product of several with the same input.
struct MatmulProduct {
  const WeightMatrix* w;
  float* y;  // [position][w->rows]
};
// The products of several matrices with the same activations (Q, K and V;
// gate and up) in one parallel loop: threads go from one matrix's rows to
// the next without waiting for each other in between. Each product's result
// is the one matmul() gives.
void matmul_each(std::initializer_list<MatmulProduct> products, Activations& x, ThreadPool& pool);
void matmul(const WeightMatrix& w, const float* x, int n_positions, float* y, ThreadPool& pool,
            int y_stride = 0);

// Copies row `row` of `w` out as floats, in any layout.
void dequantize_matrix_row(const WeightMatrix& w, int row, float* out);

// Rearranges a row-major quantized matrix into tiles of four rows (see
// WeightMatrix), in place: `bytes` is w.data, writable. Returns the matrix as
// it then lies. Float matrices, whose kernels read elements, not blocks, stay
// row-major. Rows [row_begin, row_end) handed to a kernel start at a multiple
// of four in a tiled matrix, as matmul() splits them.
//
// Where the type's kernel says so (MatmulKernel::interleaved_values_from),
// each group of four blocks (block b of each row) of a whole tile is
// rearranged further: the four rows' fp16 scales in row order (then their
// minimums, for types with one), then their values 4 bytes at a time: the
// first 4 bytes of each row in row order, the next 4 of each, and so on. A
// kernel then converts four rows' scales with one load, a 16-byte vector
// holds 4 bytes of each row, one row per 32-bit lane, and the kernel's dot
// products come out one row per lane, with no shuffling to put them there.
// The last tile, of fewer than four rows, keeps its blocks whole. (Values
// take a multiple of 16 bytes in each type that interleaves them.)
WeightMatrix tile_rows(const WeightMatrix& w, uint8_t* bytes);

// MatmulKernel::interleaved_values_from of the type's kernel (0 without one).
size_t interleaved_values_from(TensorType type);

// Block `block` of row `row`, as the file lays it out: in place, or copied
// to `scratch` (a block's bytes) from a tile that interleaves its rows.
const uint8_t* matrix_block(const WeightMatrix& w, int row, int block, uint8_t* scratch);

// unpack_5bit_blocks (tensor_type.h, the reference) with the kernels' SIMD
// unpacking: the same bytes, in place under the same condition. What the
// loader runs on every unit it unpacks.
void unpack_5bit_blocks_simd(TensorType type, const uint8_t* src, uint8_t* dst, size_t n_blocks);

}  // namespace sipllm

// The input rows of a matrix product, quantized to 8 bits for integer dot
// products with quantized weights, as ggml does: blocks of 32 (Q8_0) for the
// 32-element weight formats, blocks of 256 (Q8_K) for the K-quants.
//
// The scale is a float, holding the value ggml's layouts store (Q8_0 rounds
// it to a half float, after the values were rounded with the exact one, so
// the products equal ggml's); the values, in [-127, 127], are kept widened to
// int16 (a dot product then needs no unpacking of the side that is reused
// for every weight row) and as int8 (for 8-bit dot products), and every run
// of 32 values carries its integer sum (what weight formats with a minimum,
// or an offset, need).
//
// Each position is quantized on its own, by a function of its values alone:
// the same row quantizes the same way whatever else is in the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sipllm {

class ThreadPool;

enum class ActivationFormat {
  kF32,   // plain floats
  kQ8_0,  // per 32 values: q = round_even(x * 127 / max|x|), d = max|x| / 127 as fp16
  kQ8_K,  // per 256 values: the same q, d = 1 / (127 / max|x|)
};

// Elements per scale of a quantized format.
int activation_block(ActivationFormat format);

struct QuantizedActivations {
  ActivationFormat format = ActivationFormat::kQ8_0;
  int cols = 0;
  int n_positions = 0;
  int block = 32;  // activation_block(format)

  std::vector<int16_t> q;     // [position][cols]
  std::vector<int8_t> q8;     // the same values as int8, for kernels with 8-bit dot products
  std::vector<float> d;       // [position][cols / block]
  std::vector<int32_t> sums;  // [position][cols / 32]: sum of each run of 32 q
  std::vector<int32_t> sums16;  // [position][cols / 16]: the same per run of 16
  // Where keeps_quads(format): positions in quads, the last n_positions % 4
  // left out. Per quad and block of 32: the four positions' values (128
  // bytes, as quad_offset() places them); their scales; their sums.
  std::vector<int8_t> q8_quads;     // [position / 4][cols / 32][128]
  std::vector<float> d_quads;       // [position / 4][cols / 32][4]
  std::vector<int32_t> sums_quads;  // [position / 4][cols / 32][4]

  const int16_t* q_row(int p) const { return q.data() + static_cast<size_t>(p) * cols; }
  const int8_t* q8_row(int p) const { return q8.data() + static_cast<size_t>(p) * cols; }
  const float* d_row(int p) const { return d.data() + static_cast<size_t>(p) * static_cast<size_t>(cols / block); }
  const int32_t* sums_row(int p) const { return sums.data() + static_cast<size_t>(p) * (cols / 32); }
  const int32_t* sums16_row(int p) const { return sums16.data() + static_cast<size_t>(p) * (cols / 16); }
  // Whether positions p..p+3 (p a multiple of 4) lie in quads too.
  bool in_quads(int p) const { return static_cast<size_t>(p / 4 + 1) * (cols / 32) * 4 <= d_quads.size(); }
  const int8_t* q8_quad(int p) const { return q8_quads.data() + static_cast<size_t>(p / 4) * (cols / 32) * 128; }
  const float* d_quad(int p) const { return d_quads.data() + static_cast<size_t>(p / 4) * (cols / 32) * 4; }
  const int32_t* sums_quad(int p) const { return sums_quads.data() + static_cast<size_t>(p / 4) * (cols / 32) * 4; }
  // Where value v (0..31) of a block of position p + j lies in the quad's
  // 128 bytes of that block. 128-bit tiles take a group of four values of all
  // four positions at once (one 16-byte load, lane j: position j), so the
  // groups come one after another: 16 * (v / 4) + 4 * j + v % 4. Natively,
  // 512-bit tiles take each position's 16 values of a half together (an
  // in-lane shuffle gives each 128-bit quarter its position's values):
  // 64 * (v / 16) + 16 * j + v % 16 (simd::kWideGroups).
  static size_t quad_offset(int j, int v);
  // The three at once, for a kernel's tile of positions p..p+3.
  struct Quad {
    const int8_t* q8;
    const float* d;
    const int32_t* sums;
  };
  Quad quad(int p) const { return {q8_quad(p), d_quad(p), sums_quad(p)}; }
};

// Whether QuantizedActivations holds this format's positions in quads too:
// Q8_0, where kernels take four positions at once from them (512-bit tiles,
// and 128-bit ones with an exact 8-bit dot product: simd::exact_byte_dot()).
// In every build, used or not: working memory, and so what a memory budget
// leaves the weights, is then the same whichever kernels run (a budget
// worked out under Node's plain SIMD128 build holds in Chromium's relaxed one).
bool keeps_quads(ActivationFormat format);

// Quantizes n_positions rows of `cols` floats (a multiple of the format's
// block). Spreads positions across `pool` when there are many.
void quantize_activations(const float* x, int n_positions, int cols, ActivationFormat format,
                          QuantizedActivations* out, ThreadPool* pool = nullptr);

// The bytes quantize_activations() keeps per position of `cols` values.
uint64_t quantized_bytes_per_position(ActivationFormat format, int cols);

// One row, SIMD, and its scalar reference (equal bit for bit: tested).
void quantize_activation_row(const float* x, int cols, ActivationFormat format, int16_t* q,
                             float* d, int32_t* sums);
void quantize_activation_row_reference(const float* x, int cols, ActivationFormat format,
                                       int16_t* q, float* d, int32_t* sums);

// The input of a matrix product in each form a kernel asks for, each made at
// most once: Q, K and V (or gate and up) share one quantization.
class Activations {
 public:
  void reset(const float* x, int n_positions, int cols);

  const float* f32() const { return x_; }
  int n_positions() const { return n_positions_; }
  int cols() const { return cols_; }
  // The quantized form, made on first use.
  const QuantizedActivations& quantized(ActivationFormat format, ThreadPool& pool);

 private:
  const float* x_ = nullptr;
  int n_positions_ = 0;
  int cols_ = 0;
  QuantizedActivations q8_0_, q8_k_;
  bool have_q8_0_ = false, have_q8_k_ = false;
};

}  // namespace sipllm

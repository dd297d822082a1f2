#include "kernels/activation_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/simd.h"
#include "model/half.h"
#include "core/thread_pool.h"

namespace sipllm {
namespace {

// Rows of at least this many elements in total are quantized in parallel.
constexpr size_t kParallelElements = 1 << 15;

// The scale a block keeps, as ggml computes it: values are rounded with
// 127 / max; block_q8_0 stores max / 127 as a half float, block_q8_K stores
// the reciprocal of the rounding factor as a float.
float block_scale(ActivationFormat format, float max, float inverse) {
  if (format == ActivationFormat::kQ8_0) return fp16_to_float(float_to_fp16(max / 127.0f));
  return inverse != 0.0f ? 1.0f / inverse : 0.0f;
}

// The rounding factor 127 / max, or 0 for a block that rounds to nothing:
// all zeros, or values so small (max below 127 / FLT_MAX, about 4e-37) that
// the factor overflows. ggml goes on with an infinite factor there, which
// turns values into infinities and their integer conversion into undefined
// behaviour; but either scale the block keeps is then 0 (max / 127 is far
// below the smallest half float, 1 / infinity is 0), so the block adds
// nothing to a product whatever its values, and values of 0 give the same.
float rounding_factor(float max) {
  const float inverse = max != 0.0f ? 127.0f / max : 0.0f;
  return std::isinf(inverse) ? 0.0f : inverse;
}

// Each lane rounded to the nearest integer (ties to even, as nearbyint),
// for |v| < 2^22 (v is at most 127 in magnitude here): adding 1.5 * 2^23
// leaves the integer in the sum's low bits, and taking the sum's bits from
// the constant's gives it. Two instructions where V8 takes eight for
// nearest and trunc_sat; a NaN lane gives 0, as trunc_sat's does.
v128_t round_to_i32(v128_t v) {
  const v128_t shifter = wasm_f32x4_splat(0x1.8p23f);
  return wasm_v128_and(wasm_i32x4_sub(wasm_f32x4_add(v, shifter), shifter), wasm_f32x4_eq(v, v));
}

}  // namespace

bool keeps_quads(ActivationFormat format) { return format == ActivationFormat::kQ8_0; }

size_t QuantizedActivations::quad_offset(int j, int v) {
  const auto position = static_cast<size_t>(j), value = static_cast<size_t>(v);
  if constexpr (simd::kWideGroups) return 64 * (value / 16) + 16 * position + value % 16;
  return 16 * (value / 4) + 4 * position + value % 4;
}

int activation_block(ActivationFormat format) {
  switch (format) {
    case ActivationFormat::kQ8_0: return 32;
    case ActivationFormat::kQ8_K: return 256;
    case ActivationFormat::kF32: return 1;
  }
  return 1;
}

void quantize_activation_row(const float* x, int cols, ActivationFormat format, int16_t* q,
                             float* d, int32_t* sums) {
  const int block = activation_block(format);
  const int n_blocks = cols / block;
  const simd::HalfRounding to_half;
  // Four blocks at a time: their largest magnitudes first, so that Q8_0's
  // scales (max / 127 rounded to a half float) are rounded together; one by
  // one, in WebAssembly, each took two scalar conversions with branches.
  for (int first = 0; first < n_blocks; first += 4) {
    const int group = std::min(4, n_blocks - first);
    alignas(16) float max[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int g = 0; g < group; ++g) {
      const float* xb = x + static_cast<size_t>(first + g) * block;
      v128_t amax = wasm_f32x4_splat(0.0f);
      // pmax leaves a NaN out (amax < NaN is false), so amax holds none,
      // and its lanes' maximum needs no NaN handling either.
      for (int i = 0; i < block; i += 4) amax = wasm_f32x4_pmax(amax, wasm_f32x4_abs(simd::load(xb + i)));
      amax = wasm_f32x4_pmax(amax, wasm_i32x4_shuffle(amax, amax, 2, 3, 0, 1));
      amax = wasm_f32x4_pmax(amax, wasm_i32x4_shuffle(amax, amax, 1, 0, 3, 2));
      max[g] = wasm_f32x4_extract_lane(amax, 0);
    }
    alignas(16) float half_scale[4];
    if (format == ActivationFormat::kQ8_0) {
      simd::store(half_scale, to_half(wasm_f32x4_div(simd::load(max), wasm_f32x4_splat(127.0f))));
    }
    for (int g = 0; g < group; ++g) {
      const int b = first + g;
      const float* xb = x + static_cast<size_t>(b) * block;
      const float inverse_scale = rounding_factor(max[g]);
      d[b] = format == ActivationFormat::kQ8_0 ? half_scale[g] : block_scale(format, max[g], inverse_scale);
      const v128_t inverse = wasm_f32x4_splat(inverse_scale);
      int16_t* qb = q + static_cast<size_t>(b) * block;
      for (int run = 0; run < block; run += 32) {
        v128_t run_sum = wasm_i32x4_splat(0);
        for (int i = run; i < run + 32; i += 8) {
          const v128_t lo = round_to_i32(wasm_f32x4_mul(simd::load(xb + i), inverse));
          const v128_t hi = round_to_i32(wasm_f32x4_mul(simd::load(xb + i + 4), inverse));
          run_sum = wasm_i32x4_add(run_sum, wasm_i32x4_add(lo, hi));
          simd::store(qb + i, wasm_i16x8_narrow_i32x4(lo, hi));
        }
        sums[(b * block + run) / 32] = simd::sum_i32(run_sum);
      }
    }
  }
}

void quantize_activation_row_reference(const float* x, int cols, ActivationFormat format,
                                       int16_t* q, float* d, int32_t* sums) {
  const int block = activation_block(format);
  for (int b = 0; b < cols / block; ++b) {
    const float* xb = x + static_cast<size_t>(b) * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) {
      const float a = std::fabs(xb[i]);
      amax = amax < a ? a : amax;
    }
    const float inverse = rounding_factor(amax);
    d[b] = block_scale(format, amax, inverse);
    for (int i = 0; i < block; ++i) {
      q[b * block + i] = static_cast<int16_t>(std::nearbyint(xb[i] * inverse));
    }
  }
  for (int r = 0; r < cols / 32; ++r) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += q[r * 32 + i];
    sums[r] = s;
  }
}

void quantize_activations(const float* x, int n_positions, int cols, ActivationFormat format,
                          QuantizedActivations* out, ThreadPool* pool) {
  const int block = activation_block(format);
  out->format = format;
  out->block = block;
  out->cols = cols;
  out->n_positions = n_positions;
  const auto n = static_cast<size_t>(n_positions);
  out->q.resize(n * static_cast<size_t>(cols));
  out->q8.resize(n * static_cast<size_t>(cols));
  out->sums16.resize(n * static_cast<size_t>(cols / 16));
  out->d.resize(n * static_cast<size_t>(cols / block));
  out->sums.resize(n * static_cast<size_t>(cols / 32));
  // Whole quads of positions, for kernels that take four at once.
  const size_t quads = keeps_quads(format) ? n / 4 : 0;
  const auto blocks = static_cast<size_t>(cols / 32);
  out->q8_quads.resize(quads * blocks * 128);
  out->d_quads.resize(quads * blocks * 4);
  out->sums_quads.resize(quads * blocks * 4);
  auto rows = [&](size_t begin, size_t end, int) {
    for (size_t p = begin; p < end; ++p) {
      quantize_activation_row(x + p * static_cast<size_t>(cols), cols, format,
                              out->q.data() + p * static_cast<size_t>(cols),
                              out->d.data() + p * static_cast<size_t>(cols / block),
                              out->sums.data() + p * static_cast<size_t>(cols / 32));
      const int16_t* q = out->q.data() + p * static_cast<size_t>(cols);
      int8_t* q8 = out->q8.data() + p * static_cast<size_t>(cols);
      int32_t* sums16 = out->sums16.data() + p * static_cast<size_t>(cols / 16);
      for (int i = 0; i < cols; i += 16) {  // cols is a multiple of 32
        const v128_t lo = simd::load(q + i), hi = simd::load(q + i + 8);
        simd::store(q8 + i, wasm_i8x16_narrow_i16x8(lo, hi));
        sums16[i / 16] = simd::sum_i32(wasm_i32x4_dot_i16x8(wasm_i16x8_add(lo, hi), wasm_i16x8_splat(1)));
      }
      if (p >= 4 * quads) continue;
      const size_t slot = p % 4;
      for (size_t b = 0; b < blocks; ++b) {
        const size_t quad_block = p / 4 * blocks + b;
        int8_t* quad = out->q8_quads.data() + quad_block * 128;
        for (int v = 0; v < 32; v += 4) {  // runs of four values lie together in either layout
          std::memcpy(quad + QuantizedActivations::quad_offset(static_cast<int>(slot), v), q8 + 32 * b + v, 4);
        }
        out->d_quads[quad_block * 4 + slot] = out->d[p * blocks + b];
        out->sums_quads[quad_block * 4 + slot] = out->sums[p * blocks + b];
      }
    }
  };
  if (pool != nullptr && n * static_cast<size_t>(cols) >= kParallelElements) {
    // Whole quads per chunk: a quad's four positions write into the same
    // cache lines (q8_quads interleaves them), which two threads would pass
    // back and forth.
    pool->parallel_for(n, 4, rows);
  } else {
    rows(0, n, 0);
  }
}

uint64_t quantized_bytes_per_position(ActivationFormat format, int cols) {
  const auto n = static_cast<uint64_t>(cols);
  // int16 and int8 values; a scale per block; a sum per 32 and per 16.
  uint64_t bytes = 3 * n + 4 * (n / static_cast<uint64_t>(activation_block(format))) + 4 * (n / 32) + 4 * (n / 16);
  // Q8_0's values, scales and sums again, in quads.
  if (keeps_quads(format)) bytes += n + 8 * (n / 32);
  return bytes;
}

void Activations::reset(const float* x, int n_positions, int cols) {
  x_ = x;
  n_positions_ = n_positions;
  cols_ = cols;
  have_q8_0_ = have_q8_k_ = false;
}

const QuantizedActivations& Activations::quantized(ActivationFormat format, ThreadPool& pool) {
  const bool k = format == ActivationFormat::kQ8_K;
  QuantizedActivations& out = k ? q8_k_ : q8_0_;
  bool& have = k ? have_q8_k_ : have_q8_0_;
  if (!have) {
    quantize_activations(x_, n_positions_, cols_, format, &out, &pool);
    have = true;
  }
  return out;
}

}  // namespace sipllm

// The matrix-product kernels, one per weight type (see matmul.h for what
// they compute and promise).
//
//   float_dot.cpp    F32, F16, BF16 weights with f32 activations
//   quant_dot_32.cpp Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q5_0, Q5_1 unpacked)
//                    with Q8_0 activations
//   quant_dot_k.cpp  Q4_K, Q5_K, Q6_K with Q8_K activations
//   quant_dot_unpacked.cpp  Q2_K, Q3_K, IQ4_XS with Q8_K activations and
//                    IQ4_NL, MXFP4 with Q8_0 ones, from blocks unpacked to
//                    8-bit values
//
// Integer kernels are exact up to one float multiply-add per block, and
// their references perform those same float operations in the same order,
// so SIMD and reference agree bit for bit. Float kernels accumulate in four
// lanes; their references sum plainly and agree within rounding.
#pragma once

#include "kernels/matmul.h"

namespace sipllm {

extern const MatmulKernel kMatmulF32;
extern const MatmulKernel kMatmulF16;
extern const MatmulKernel kMatmulBF16;

extern const MatmulKernel kMatmulQ4_0;
extern const MatmulKernel kMatmulQ4_1;
extern const MatmulKernel kMatmulQ5_0;
extern const MatmulKernel kMatmulQ5_1;
extern const MatmulKernel kMatmulQ8_0;
extern const MatmulKernel kMatmulQ5_0Unpacked;
extern const MatmulKernel kMatmulQ5_1Unpacked;

extern const MatmulKernel kMatmulQ4_K;
extern const MatmulKernel kMatmulQ5_K;
extern const MatmulKernel kMatmulQ6_K;

extern const MatmulKernel kMatmulQ2_K;
extern const MatmulKernel kMatmulQ3_K;
extern const MatmulKernel kMatmulIQ4_XS;
extern const MatmulKernel kMatmulIQ4_NL;
extern const MatmulKernel kMatmulMXFP4;

}  // namespace sipllm

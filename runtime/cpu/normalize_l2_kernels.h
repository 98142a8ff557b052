// Per-ISA row loops of the CPU backend's normalize_l2 (normalize_l2.cpp picks
// one at run time).
#pragma once

#include <cstdint>

#include "runtime/backend.h"

namespace flick::cpu::l2norm {

// Whether this CPU runs the avx512:: loop (AVX-512 F/BW/DQ/VL and BF16).
bool has_avx512_kernels();

// normalize_l2 over n contiguous rows of c channels on the calling thread:
// y = [silu](x / max(|x|, 1e-12) * scale * gamma), F32 or BF16 (x and y).
// The AVX-512 loop keeps |x| in fp32 FMA lanes and computes exp and the SiLU
// quotient with its own polynomial and refined reciprocal; the portable one
// runs the CPU backend's fp32 kernels (|x| in double lanes): the two agree
// to within a bf16 ulp (tests/ops/test_stepwise.cpp).
namespace avx512 {
void normalize_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c, const float* gamma,
                    float scale, NormRounding rounding, bool silu);
}  // namespace avx512
namespace portable {
void normalize_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c, const float* gamma,
                    float scale, NormRounding rounding, bool silu);
}  // namespace portable

}  // namespace flick::cpu::l2norm

// The fused two-layer MLP of cpu::mlp_relu for few inputs and outputs
// (runtime/cpu/mlp_avx512.cpp): y = l2(relu(l1(x))) with the hidden values
// kept in registers.
#pragma once

#include <cstdint>

#include "runtime/ref/matmul_common.h"

namespace flick::cpu {

inline constexpr int64_t kThinMlpMaxK = 4;   // inputs
inline constexpr int64_t kThinMlpMaxN = 16;  // outputs

struct ThinMlp {
  int64_t k = 0, h = 0, n = 0;  // inputs, hidden, outputs
  int n_pad = 0;                // n rounded up to 1, 2, 4, 8 or 16
  const float* w1 = nullptr;    // [h, k] (bf16 values for a BF16 layer)
  const float* b1 = nullptr;    // [h] or null
  const float* w2t = nullptr;   // [h, kThinMlpMaxN]: l2's weights transposed, zero past n
  const float* b2 = nullptr;    // [n] or null
  bool round_x = false;         // x to bf16 before the first layer (a BF16 l1)
  bool round_h = false;         // the hidden values to bf16 (a BF16 hidden or l2)
};

// Rows [r0, r1) of y [M, n] from x [M, k] (F32 or BF16 rows, unit column
// stride). The sums are the flick F32 GEMM's, in its order: the first layer
// k = 0 .. k - 1 then the bias, the second j = 0 .. h - 1 then the bias.
// AVX-512 F.
void thin_mlp_rows_avx512(const ThinMlp& m, const ref::RowsView& x, const ref::RowsView& y,
                          int64_t r0, int64_t r1);

}  // namespace flick::cpu

// Fused elementwise chains of the bf16 DiT (wan_dit.cpp) that round like the
// reference's separate bf16 tensor ops, in one pass over memory instead of
// one per op: the modulation y * (1 + scale) + shift and the gated residual
// x + y * gate, each a product rounded to bf16 and then a sum rounded to
// bf16 (the backend's mul then add, bit for bit).
#pragma once

#include <cstdint>

#include "runtime/tensor.h"

namespace flick::wan {

// out = bf16(bf16(p * q) + r) over [F, T, D] BF16 views whose last dim is
// contiguous; q and r may repeat along T ([F, 1, D], any frame stride). out
// may alias p or r.
void bf16_mul_add(const Tensor& p, const Tensor& q, const Tensor& r, Tensor& out);

// One row of n elements: the best kernel for this CPU, and the portable and
// AVX-512 ones (bit-identical).
void bf16_mul_add_row(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                      int64_t n);
void bf16_mul_add_row_scalar(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                             int64_t n);
void bf16_mul_add_row_avx512(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                             int64_t n);

}  // namespace flick::wan

// Dynamic per-row int8 quantization of activations (the rule of
// ref::quantize_row_int8, bit-exact), used by Backend::quantize_rows_int8 and
// by INT8 linear layers before their GEMM.
#pragma once

#include <cstdint>

#include "runtime/ref/matmul_common.h"

namespace flick::cpu {

// x: F32 or BF16 rows. Writes q row i at q + i * ldq and scales[i]. offset 0
// stores int8; offset 128 stores the same values + 128 as uint8 (the u8
// operand of u8 x s8 VNNI GEMMs). Multi-threaded over rows.
void quantize_rows(const ref::RowsView& x, void* q, int64_t ldq, float* scales, int offset);

// The kernels compute x * (1 / scale) and divide only lanes whose product
// lies within kNearTie of a rounding tie (k + 0.5). Both the product and the
// quotient are within 2 ulp of the true x / scale, and |x / scale| <= 127,
// so they differ by < 127 * 2^-22 = 3e-5 < kNearTie: outside that window
// they round to the same integer. Bit-exact with quantize_row_int8, at the
// cost of a multiply instead of a divide for all but ~0.05 % of elements.
inline constexpr float kNearTie = 0x1p-12f;  // 2.4e-4

// One row, best kernel for this CPU. Returns the scale.
float quantize_row(const void* x, DType dtype, int64_t n, uint8_t* q, int offset);

// The kernels (quantize_avx512.cpp; AVX2 in quantize.cpp).
float quantize_row_f32_avx512(const float* x, int64_t n, uint8_t* q, int offset);
float quantize_row_bf16_avx512(const uint16_t* x, int64_t n, uint8_t* q, int offset);
float quantize_row_f32_avx2(const float* x, int64_t n, uint8_t* q, int offset);
float quantize_row_bf16_avx2(const uint16_t* x, int64_t n, uint8_t* q, int offset);

}  // namespace flick::cpu

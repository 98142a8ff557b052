// Row kernels of the CPU backend's stepwise ops (runtime/cpu/stepwise.cpp):
// portable ones, and AVX-512 ones (stepwise_avx512.cpp) bit-identical to them
// (the same fp32 / f64 operations in the same order, no FMA: both files build
// with -ffp-contract=off). The AVX-512 ones need AVX-512 F/BW/VL/DQ
// (has_stepwise_avx512()).
#pragma once

#include <cstdint>

namespace flick::cpu::stepwise {

bool has_stepwise_avx512();

// rope_3d: `rows` rows (heads) of `pairs` interleaved bf16 pairs sharing one
// f64 cos/sin row; out may alias x.
void rotate_pairs_bf16_scalar(const uint16_t* x, const double* cos, const double* sin, int pairs,
                              int64_t rows, uint16_t* out);
void rotate_pairs_bf16_avx512(const uint16_t* x, const double* cos, const double* sin, int pairs,
                              int64_t rows, uint16_t* out);

// mul_add_stepwise on one bf16 row: out = bf16(a + bf16(b * c)); out may
// alias a or b.
void mul_add_row_bf16_scalar(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out,
                             int64_t n);
void mul_add_row_bf16_avx512(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out,
                             int64_t n);

// rms_norm_stepwise in bf16: one row, and 16 consecutive rows (dim even);
// out may alias x.
void rms_norm_row_bf16_scalar(const uint16_t* x, int64_t dim, uint16_t* out, float eps);
void rms_norm_rows16_bf16_avx512(const uint16_t* x, int64_t dim, uint16_t* out, float eps);

}  // namespace flick::cpu::stepwise

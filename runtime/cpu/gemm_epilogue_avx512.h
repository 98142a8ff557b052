// The linear GEMMs' epilogue on up to 16 columns of one output row, shared
// by the AMX kernels (gemm_amx.cpp) and the AVX-512 VNNI ones
// (gemm_vnni_avx512.cpp) so both round as runtime/ref does: x * col_scale[n],
// * row_scale[m], + bias[n], the activation, stored as F32 or BF16 (round to
// nearest even), each step rounded once in fp32, in this order.
//
// Everything here lands in flick::cpu::avx512's anonymous namespace,
// together with the elementwise ops' activations (eltwise_kernels.inc: same
// code, same ulps): every includer gets its own copy compiled with its own
// flags (see runtime/cpu/attention_kernels.h for why no inline function of a
// header may be shared across files of different ISAs). Include it at file
// scope, from AVX-512 files only.
#pragma once

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx512.h"
#include "runtime/cpu/gemm.h"

namespace flick::cpu::avx512 {
namespace {

#define FLICK_ISA_NAME "avx512-gemm-epilogue"
#include "runtime/cpu/eltwise_kernels.inc"
#undef FLICK_ISA_NAME

template <Activation A, bool kBf16Out>
inline Vf activate(Vf x) {
  if constexpr (A == Activation::RoundGeluTanh && kBf16Out)
    return gelu_tanh(bf16_bits_to_f32(f32_to_bf16_bits(x)));
  if constexpr (A == Activation::RoundGeluTanh) return gelu_tanh(x);
  if constexpr (A == Activation::GeluErf) return gelu_erf(x);
  if constexpr (A == Activation::GeluTanh) return gelu_tanh(x);
  if constexpr (A == Activation::Silu) return silu(x);
  if constexpr (A == Activation::Relu) return max(x, splat(0.f));
  if constexpr (A == Activation::Sigmoid) return sigmoid(x);
  return x;
}

// Columns [col, col + 16) of row `row` (lanes past `mask` are not stored):
// x holds the accumulators as fp32, rs the row's scale (row_scale[row] or 1).
template <Activation A, bool kBf16Out>
inline void epilogue_16(Vf x, const AmxEpilogue& e, Vf rs, int64_t row, int64_t col,
                        __mmask16 mask) {
  if (e.col_scale != nullptr) x = x * Vf{_mm512_maskz_loadu_ps(mask, e.col_scale + col)};
  if (e.row_scale != nullptr) x = x * rs;
  if (e.bias != nullptr) x = x + Vf{_mm512_maskz_loadu_ps(mask, e.bias + col)};
  x = activate<A, kBf16Out>(x);
  void* out = e.y.row(row);
  if constexpr (kBf16Out) {
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(out) + col, mask, f32_to_bf16_bits(x));
  } else {
    _mm512_mask_storeu_ps(static_cast<float*>(out) + col, mask, x.v);
  }
}

}  // namespace
}  // namespace flick::cpu::avx512

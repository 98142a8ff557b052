// Helpers shared by the flash-attention kernels built with AVX-512 flags
// (attention_avx512.cpp: BF16/fp32; attention_int8_avx512.cpp: INT8 Q.K^T):
// integer tile arithmetic, element access of an Operand, the exp2 polynomials
// of the online softmax and lane reductions. Include only from translation
// units built with AVX-512 (+BF16) flags.
//
// Everything is in an anonymous namespace: each including file gets its own
// copy, as attention_kernels.h asks of shared helpers (no inline function
// whose AVX-512 body the linker could pick for code that runs on AVX2-only
// hosts).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "runtime/cpu/attention_kernels.h"

namespace flick::cpu::avx512_attention {
namespace {

using attention_detail::Operand;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// ---- element access (local copies; see the header comment) ----

inline float bf16_bits_to_f32(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element idx of an F32, BF16 or F16 buffer as fp32 (exact).
inline float load_f32(DType t, const void* data, int64_t idx) {
  switch (t) {
    case DType::BF16: return bf16_bits_to_f32(static_cast<const uint16_t*>(data)[idx]);
    case DType::F16: return _cvtsh_ss(static_cast<const uint16_t*>(data)[idx]);
    default: return static_cast<const float*>(data)[idx];
  }
}

// Address of element (b, l, h, 0) of a 4-d F32 / BF16 / F16 operand.
inline const char* element(const Operand& t, int64_t b, int64_t l, int64_t h) {
  return static_cast<const char*>(t.data) +
         (b * t.stride[0] + l * t.stride[1] + h * t.stride[2]) * (t.dtype == DType::F32 ? 4 : 2);
}

// ---- the online softmax's exponentials ----

// 2^x for x <= 0 (x = -inf allowed): Cephes exp2f's degree-6 polynomial on
// [-0.5, 0.5] (about 2 ulp), scaled by 2^round(x). kFinite: the caller
// knows x is finite, so the clamp is left out; the result is the same (below
// -200 both round to 0).
template <bool kFinite = false>
inline __m512 exp2_neg(__m512 x) {
  if (!kFinite) x = _mm512_max_ps(x, _mm512_set1_ps(-200.f));  // 2^-200 scales to 0; no inf - inf
  const __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(1.535336188319500e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.339887440266574e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.618437357674640e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550332471162809e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402264791363012e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931472028550421e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// P's 2^x for x <= 0 when P is rounded to bf16 next: a degree-4 minimax
// polynomial of f = x - floor(x) in [0, 1) (vreduceps; relative error 2.7e-6,
// far below bf16's 2^-9 step; the AMX kernel's exp2_poly), scaled by
// 2^floor(x) (vscalefps floors its exponent itself). Two FMAs fewer than
// exp2_neg per score vector. kFinite as there.
template <bool kFinite = false>
inline __m512 exp2_neg_bf16(__m512 x) {
  if (!kFinite) x = _mm512_max_ps(x, _mm512_set1_ps(-200.f));
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(1.3534167781472206e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.201146379113197e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.414427548646927e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930038332939148e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000026226043701f));
  return _mm512_scalef_ps(p, x);
}

// The factor 2^(old_max - shift) that rescales a row's O and sum when its
// running max moves from old_max to shift (0 while the max is -inf). A
// finite max that did not move (most blocks after the first few) gives 2^0,
// which exp2_neg returns as exactly 1, so the polynomial is skipped there
// with the same bits.
inline __m512 rescale_alpha(float old_max, __m512 new_max, __m512 shift) {
  if (_mm512_cvtss_f32(new_max) == old_max && old_max != -__builtin_inff())
    return _mm512_set1_ps(1.f);
  return exp2_neg(_mm512_sub_ps(_mm512_set1_ps(old_max), shift));
}

// ---- lanes ----

// Mask of the first n of 16 lanes (n clamped to [0, 16]).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Max / sum of the 16 lanes, broadcast to all lanes.
inline __m512 broadcast_max(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // swap 256-bit halves
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // swap 128-bit quarters
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));
}
inline __m512 broadcast_sum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  return _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
}

}  // namespace
}  // namespace flick::cpu::avx512_attention

// The float-vector vocabulary of runtime/cpu/eltwise_kernels.inc for
// AVX-512 (16 lanes). Include only from files named *_avx512.cpp, inside
// namespace flick::cpu::avx512 (ISA-specific names keep the AVX-512 code out
// of the AVX2 build's symbols). eltwise_simd_avx2.h is the same API, 8 lanes.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace flick::cpu::avx512 {

inline constexpr int kLanes = 16;

struct Vf {
  __m512 v;
};
struct Mask {
  __mmask16 m;
};

inline Vf splat(float a) { return {_mm512_set1_ps(a)}; }
inline Vf load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline __mmask16 tail_mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
// The first n (< kLanes) elements; the other lanes are zero.
inline Vf load_n(const float* p, int n) { return {_mm512_maskz_loadu_ps(tail_mask(n), p)}; }
inline void store(float* p, Vf a) { _mm512_storeu_ps(p, a.v); }
inline void store_n(float* p, Vf a, int n) { _mm512_mask_storeu_ps(p, tail_mask(n), a.v); }

inline Vf operator+(Vf a, Vf b) { return {_mm512_add_ps(a.v, b.v)}; }
inline Vf operator-(Vf a, Vf b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline Vf operator*(Vf a, Vf b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline Vf operator/(Vf a, Vf b) { return {_mm512_div_ps(a.v, b.v)}; }
inline Vf fmadd(Vf a, Vf b, Vf c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a*b + c
inline Vf fmsub(Vf a, Vf b, Vf c) { return {_mm512_fmsub_ps(a.v, b.v, c.v)}; }    // a*b - c
inline Vf fnmadd(Vf a, Vf b, Vf c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a*b
// x86 max/min return the second operand when either is NaN.
inline Vf max(Vf a, Vf b) { return {_mm512_max_ps(a.v, b.v)}; }
inline Vf min(Vf a, Vf b) { return {_mm512_min_ps(a.v, b.v)}; }
inline Vf abs(Vf a) { return {_mm512_abs_ps(a.v)}; }
inline Vf round_even(Vf a) {
  return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}

inline Mask operator<(Vf a, Vf b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask operator>(Vf a, Vf b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask is_nan(Vf a) { return {_mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q)}; }
inline Mask operator|(Mask a, Mask b) { return {static_cast<__mmask16>(a.m | b.m)}; }
inline Mask operator&(Mask a, Mask b) { return {static_cast<__mmask16>(a.m & b.m)}; }
inline bool any(Mask a) { return a.m != 0; }
inline Vf select(Mask m, Vf a, Vf b) { return {_mm512_mask_blend_ps(m.m, b.v, a.v)}; }  // m ? a : b
// Lanes [0, n) from a, the rest from b.
inline Vf blend_first(int n, Vf a, Vf b) { return {_mm512_mask_blend_ps(tail_mask(n), b.v, a.v)}; }

// p * 2^n for integral n in [-151, 130], rounded once (denormals included).
inline Vf ldexp(Vf p, Vf n) { return {_mm512_scalef_ps(p.v, n.v)}; }

// s * 2^-64 rounded once to nearest even, for finite s, with no instruction
// reading or producing a denormal: results under 2^-126 (|s| < 2^-62) are
// assembled from their integer significand (round(|s| * 2^85) is the bit
// pattern of |s| * 2^-64 there), larger ones are an exact multiply.
inline Vf descale64(Vf s) {
  const __m512 a = _mm512_abs_ps(s.v);
  const __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-62f), _CMP_LT_OQ);
  const __m512i m = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(0x1p85f)));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(s.v), _mm512_set1_epi32(INT32_MIN));
  const __m512 small = _mm512_castsi512_ps(_mm512_or_si512(m, sign));
  const __m512 large =
      _mm512_mul_ps(_mm512_mask_blend_ps(tiny, s.v, _mm512_set1_ps(1.f)), _mm512_set1_ps(0x1p-64f));
  return {_mm512_mask_blend_ps(tiny, large, small)};
}

inline float reduce_add(Vf a) { return _mm512_reduce_add_ps(a.v); }

// kLanes doubles, for sums accumulated in double.
struct Vd {
  __m512d lo, hi;
};
inline Vd zero_d() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
inline Vd add_wide(Vd a, Vf v) {
  const __m256 h = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v.v), 1));
  return {_mm512_add_pd(a.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v.v))),
          _mm512_add_pd(a.hi, _mm512_cvtps_pd(h))};
}
inline double reduce_add(Vd a) { return _mm512_reduce_add_pd(_mm512_add_pd(a.lo, a.hi)); }
inline Vd load_d(const double* p) { return {_mm512_loadu_pd(p), _mm512_loadu_pd(p + 8)}; }
inline void store(double* p, Vd a) {
  _mm512_storeu_pd(p, a.lo);
  _mm512_storeu_pd(p + 8, a.hi);
}
inline float reduce_max(Vf a) { return _mm512_reduce_max_ps(a.v); }
inline float reduce_min(Vf a) { return _mm512_reduce_min_ps(a.v); }

// (a0, a1, a2, a3, ...) -> (a1, a0, a3, a2, ...)
inline Vf swap_pairs(Vf a) { return {_mm512_permute_ps(a.v, 0xB1)}; }
// kLanes / 2 floats p[0..] -> (p0, p0, p1, p1, ...)
inline Vf load_dup_pairs(const float* p) {
  const __m512 h = _mm512_castps256_ps512(_mm256_loadu_ps(p));
  const __m512i idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return {_mm512_permutexvar_ps(idx, h)};
}
inline Vf load_dup_pairs_n(const float* p, int pairs) {
  const __m512 h = _mm512_maskz_loadu_ps(tail_mask(pairs), p);
  const __m512i idx = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  return {_mm512_permutexvar_ps(idx, h)};
}
// Negates the even lanes.
inline Vf negate_even(Vf a) {
  const __m512i sign = _mm512_set_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0,
                                        INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN);
  return {_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a.v), sign))};
}

// ---- BF16 / F16 storage, converted exactly as c10 converts ----
inline Vf bf16_bits_to_f32(__m256i h) {
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
inline Vf load_bf16(const uint16_t* p) {
  return bf16_bits_to_f32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline Vf load_bf16_n(const uint16_t* p, int n) {
  return bf16_bits_to_f32(_mm256_maskz_loadu_epi16(tail_mask(n), p));
}
// Round to nearest even on the bit pattern; NaN -> 0x7FC0 (c10::BFloat16).
// (vcvtneps2bf16 would flush denormals, which c10 keeps.)
inline __m256i f32_to_bf16_bits(Vf a) {
  const __m512i u = _mm512_castps_si512(a.v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
  const __m512i q = _mm512_mask_blend_epi32(is_nan(a).m, r, _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(q);
}
inline void store_bf16(uint16_t* p, Vf a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), f32_to_bf16_bits(a));
}
inline void store_bf16_n(uint16_t* p, Vf a, int n) {
  _mm256_mask_storeu_epi16(p, tail_mask(n), f32_to_bf16_bits(a));
}
inline Vf load_f16(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
inline Vf load_f16_n(const uint16_t* p, int n) {
  return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(tail_mask(n), p))};
}
inline void store_f16(uint16_t* p, Vf a) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store_f16_n(uint16_t* p, Vf a, int n) {
  _mm256_mask_storeu_epi16(p, tail_mask(n),
                           _mm512_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

}  // namespace flick::cpu::avx512

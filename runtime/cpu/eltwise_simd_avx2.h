// The float-vector vocabulary of runtime/cpu/eltwise_kernels.inc for AVX2 +
// FMA + F16C (8 lanes); the same API as eltwise_simd_avx512.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace flick::cpu::avx2 {

inline constexpr int kLanes = 8;

struct Vf {
  __m256 v;
};
struct Mask {
  __m256 m;
};

inline __m256i tail_mask(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline Vf splat(float a) { return {_mm256_set1_ps(a)}; }
inline Vf load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline Vf load_n(const float* p, int n) { return {_mm256_maskload_ps(p, tail_mask(n))}; }
inline void store(float* p, Vf a) { _mm256_storeu_ps(p, a.v); }
inline void store_n(float* p, Vf a, int n) { _mm256_maskstore_ps(p, tail_mask(n), a.v); }

inline Vf operator+(Vf a, Vf b) { return {_mm256_add_ps(a.v, b.v)}; }
inline Vf operator-(Vf a, Vf b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline Vf operator*(Vf a, Vf b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline Vf operator/(Vf a, Vf b) { return {_mm256_div_ps(a.v, b.v)}; }
inline Vf fmadd(Vf a, Vf b, Vf c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline Vf fmsub(Vf a, Vf b, Vf c) { return {_mm256_fmsub_ps(a.v, b.v, c.v)}; }
inline Vf fnmadd(Vf a, Vf b, Vf c) { return {_mm256_fnmadd_ps(a.v, b.v, c.v)}; }
inline Vf max(Vf a, Vf b) { return {_mm256_max_ps(a.v, b.v)}; }
inline Vf min(Vf a, Vf b) { return {_mm256_min_ps(a.v, b.v)}; }
inline Vf abs(Vf a) { return {_mm256_andnot_ps(_mm256_set1_ps(-0.f), a.v)}; }
inline Vf round_even(Vf a) {
  return {_mm256_round_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)};
}

inline Mask operator<(Vf a, Vf b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask operator>(Vf a, Vf b) { return {_mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ)}; }
inline Mask is_nan(Vf a) { return {_mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q)}; }
inline Mask operator|(Mask a, Mask b) { return {_mm256_or_ps(a.m, b.m)}; }
inline Mask operator&(Mask a, Mask b) { return {_mm256_and_ps(a.m, b.m)}; }
inline bool any(Mask a) { return _mm256_movemask_ps(a.m) != 0; }
inline Vf select(Mask m, Vf a, Vf b) { return {_mm256_blendv_ps(b.v, a.v, m.m)}; }
inline Vf blend_first(int n, Vf a, Vf b) {
  return {_mm256_blendv_ps(b.v, a.v, _mm256_castsi256_ps(tail_mask(n)))};
}

// p * 2^n for integral n in [-151, 130], rounded once: two exact power-of-two
// factors, each inside the normal exponent range.
inline Vf ldexp(Vf p, Vf n) {
  const __m256i ni = _mm256_cvtps_epi32(n.v);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return {_mm256_mul_ps(_mm256_mul_ps(p.v, s1), s2)};
}

// s * 2^-64 rounded once to nearest even, for finite s, with no instruction
// reading or producing a denormal: results under 2^-126 (|s| < 2^-62) are
// assembled from their integer significand (round(|s| * 2^85) is the bit
// pattern of |s| * 2^-64 there), larger ones are an exact multiply.
inline Vf descale64(Vf s) {
  const __m256 sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 a = _mm256_andnot_ps(sign_mask, s.v);
  const __m256 tiny = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-62f), _CMP_LT_OQ);
  const __m256i m = _mm256_cvtps_epi32(_mm256_mul_ps(a, _mm256_set1_ps(0x1p85f)));
  const __m256 small = _mm256_or_ps(_mm256_castsi256_ps(m), _mm256_and_ps(s.v, sign_mask));
  const __m256 large =
      _mm256_mul_ps(_mm256_blendv_ps(s.v, _mm256_set1_ps(1.f), tiny), _mm256_set1_ps(0x1p-64f));
  return {_mm256_blendv_ps(large, small, tiny)};
}

inline float reduce_add(Vf a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
struct Vd {
  __m256d lo, hi;
};
inline Vd zero_d() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
inline Vd add_wide(Vd a, Vf v) {
  return {_mm256_add_pd(a.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v.v))),
          _mm256_add_pd(a.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v.v, 1)))};
}
inline double reduce_add(Vd a) {
  const __m256d s = _mm256_add_pd(a.lo, a.hi);
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}
inline Vd load_d(const double* p) { return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
inline void store(double* p, Vd a) {
  _mm256_storeu_pd(p, a.lo);
  _mm256_storeu_pd(p + 4, a.hi);
}
inline float reduce_max(Vf a) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float reduce_min(Vf a) {
  __m128 s = _mm_min_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_min_ps(s, _mm_movehl_ps(s, s));
  s = _mm_min_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline Vf swap_pairs(Vf a) { return {_mm256_permute_ps(a.v, 0xB1)}; }
inline Vf load_dup_pairs(const float* p) {
  const __m256 h = _mm256_castps128_ps256(_mm_loadu_ps(p));
  return {_mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))};
}
inline Vf load_dup_pairs_n(const float* p, int pairs) {
  const __m256 h = _mm256_maskload_ps(p, tail_mask(pairs));
  return {_mm256_permutevar8x32_ps(h, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3))};
}
inline Vf negate_even(Vf a) {
  return {_mm256_xor_ps(a.v, _mm256_setr_ps(-0.f, 0.f, -0.f, 0.f, -0.f, 0.f, -0.f, 0.f))};
}

// ---- BF16 / F16 storage ----
inline Vf load_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(w, 16))};
}
inline Vf load_bf16_n(const uint16_t* p, int n) {
  uint16_t buf[kLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load_bf16(buf);
}
inline __m128i f32_to_bf16_bits(Vf a) {
  const __m256i u = _mm256_castps_si256(a.v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
  r = _mm256_castps_si256(_mm256_blendv_ps(
      _mm256_castsi256_ps(r), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC0)), is_nan(a).m));
  // Values are < 2^16: the unsigned-saturating pack is exact.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}
inline void store_bf16(uint16_t* p, Vf a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), f32_to_bf16_bits(a));
}
inline void store_bf16_n(uint16_t* p, Vf a, int n) {
  uint16_t buf[kLanes];
  _mm_storeu_si128(reinterpret_cast<__m128i*>(buf), f32_to_bf16_bits(a));
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(uint16_t));
}
inline Vf load_f16(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
inline Vf load_f16_n(const uint16_t* p, int n) {
  uint16_t buf[kLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return load_f16(buf);
}
inline void store_f16(uint16_t* p, Vf a) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
inline void store_f16_n(uint16_t* p, Vf a, int n) {
  uint16_t buf[kLanes];
  store_f16(buf, a);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(uint16_t));
}

}  // namespace flick::cpu::avx2

// AVX-512 row quantizer, bit-exact with the scalar rule rint(x / scale) (see
// quantize.h for why multiplying by the reciprocal and dividing only near
// ties is). _mm512_cvtps_epi32 rounds half to even (MXCSR default).
// GCC 12's AVX-512 headers trip -Wuninitialized on their own
// _mm512_undefined_* temporaries (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/quantize.h"

namespace flick::cpu {
namespace {

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

struct LoadF32 {
  const float* x;
  __m512 operator()(int64_t i, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, x + i); }
};

struct LoadBF16 {
  const uint16_t* x;
  __m512 operator()(int64_t i, __mmask16 m) const {
    const __m256i h = _mm256_maskz_loadu_epi16(m, x + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

template <typename Load>
float quantize_row(Load load, int64_t n, uint8_t* q, int offset) {
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16)
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(load(i, tail_mask(n - i))));
  const float scale = _mm512_reduce_max_ps(vmax) / 127.f;
  if (scale == 0.f) {
    std::memset(q, offset, static_cast<size_t>(n));
    return 1.f;
  }
  const __m512 vs = _mm512_set1_ps(scale), inv = _mm512_set1_ps(1.f / scale);
  const __m512 half = _mm512_set1_ps(0.5f), near = _mm512_set1_ps(kNearTie);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i off = _mm512_set1_epi32(offset);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = load(i, m);
    __m512 r = _mm512_mul_ps(x, inv);
    // |frac(r) - 0.5| < kNearTie: the product may round differently from
    // the quotient; divide those lanes (rare: ~1 lane in 2000).
    const __m512 frac = _mm512_sub_ps(r, _mm512_roundscale_ps(r, _MM_FROUND_TO_NEG_INF));
    const __mmask16 tie =
        _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(frac, half)), near, _CMP_LT_OQ);
    if (tie) r = _mm512_mask_div_ps(r, tie, x, vs);
    __m512i v = _mm512_cvtps_epi32(r);
    v = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(v, lo), hi), off);
    _mm_mask_storeu_epi8(q + i, m, _mm512_cvtepi32_epi8(v));
  }
  return scale;
}

}  // namespace

float quantize_row_f32_avx512(const float* x, int64_t n, uint8_t* q, int offset) {
  return quantize_row(LoadF32{x}, n, q, offset);
}

float quantize_row_bf16_avx512(const uint16_t* x, int64_t n, uint8_t* q, int offset) {
  return quantize_row(LoadBF16{x}, n, q, offset);
}

}  // namespace flick::cpu

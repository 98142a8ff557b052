// AVX-512 row quantizer, bit-exact with the scalar rule rint(x / scale) (see
// quantize.h for why multiplying by the reciprocal and dividing only near
// ties is). The per-element cost is what an INT8 linear layer pays before its
// GEMM (with AMX, ~1/3 of the GEMM time at the DiT shapes), so:
//  - BF16 rows find max |x| on the raw bits (and 0x7FFF, unsigned max over
//    32 lanes), which orders magnitudes exactly as the float values do;
//  - the quantized value is the rounded product itself (|x / scale| <= 127
//    by construction, so no clamp) narrowed with signed / unsigned
//    saturation, which is exact in range.
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
  float amax(int64_t n) const {
    __m512 vmax = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
      vmax = _mm512_max_ps(vmax, _mm512_abs_ps((*this)(i, tail_mask(n - i))));
    return _mm512_reduce_max_ps(vmax);
  }
};

struct LoadBF16 {
  const uint16_t* x;
  __m512 operator()(int64_t i, __mmask16 m) const {
    const __m256i h = _mm256_maskz_loadu_epi16(m, x + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // max |x| on the bit patterns: without the sign bit, larger magnitudes
  // are larger unsigned integers (NaN, which the quantization rule does not
  // define, compares largest).
  float amax(int64_t n) const {
    const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
    __m512i vmax = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
      vmax = _mm512_max_epu16(vmax, _mm512_and_si512(_mm512_loadu_si512(x + i), magnitude));
    if (i < n) {
      const __mmask32 m = static_cast<__mmask32>((1ull << (n - i)) - 1ull);
      vmax =
          _mm512_max_epu16(vmax, _mm512_and_si512(_mm512_maskz_loadu_epi16(m, x + i), magnitude));
    }
    const __m256i half =
        _mm256_max_epu16(_mm512_castsi512_si256(vmax), _mm512_extracti64x4_epi64(vmax, 1));
    const uint32_t bits = _mm512_reduce_max_epu32(_mm512_cvtepu16_epi32(half)) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
};

template <typename Load>
float quantize_row(Load load, int64_t n, uint8_t* q, int offset) {
  const float scale = load.amax(n) / 127.f;
  if (scale == 0.f) {
    std::memset(q, offset, static_cast<size_t>(n));
    return 1.f;
  }
  const __m512 vs = _mm512_set1_ps(scale), inv = _mm512_set1_ps(1.f / scale);
  const __m512 sign = _mm512_set1_ps(-0.f), near = _mm512_set1_ps(0.5f - kNearTie);
  const __m512i off = _mm512_set1_epi32(offset);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 x = load(i, m);
    __m512 r = _mm512_mul_ps(x, inv);
    __m512 ri = _mm512_roundscale_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // |r - rint(r)| > 0.5 - kNearTie: r lies within kNearTie of a tie, where
    // the product may round differently from the quotient; divide those
    // lanes (rare: ~1 lane in 2000).
    const __mmask16 tie =
        _mm512_cmp_ps_mask(_mm512_andnot_ps(sign, _mm512_sub_ps(r, ri)), near, _CMP_GT_OQ);
    if (tie) {
      r = _mm512_mask_div_ps(r, tie, x, vs);
      ri = _mm512_roundscale_ps(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    const __m512i v = _mm512_cvtps_epi32(ri);  // in [-127, 127]
    if (offset == 0) {
      _mm_mask_storeu_epi8(q + i, m, _mm512_cvtsepi32_epi8(v));
    } else {
      _mm_mask_storeu_epi8(q + i, m, _mm512_cvtusepi32_epi8(_mm512_add_epi32(v, off)));
    }
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

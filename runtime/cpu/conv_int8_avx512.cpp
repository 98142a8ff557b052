// AVX-512 activation kernels of the INT8 convolution (see conv_int8.h):
// q = clamp(rint(x * inv_scale) + zero_point, lo, hi) with the round-half-even
// conversion (MXCSR default), bit-exact with ref::conv_int8_q.
// GCC 12's AVX-512 headers trip -Wuninitialized on their own
// _mm512_undefined_* temporaries (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <limits>

#include "runtime/cpu/conv_int8.h"

namespace flick::cpu {
namespace {

inline __mmask16 tail_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}

inline __m512 load16(const void* x, DType dtype, int64_t i, __mmask16 m) {
  if (dtype == DType::F32) return _mm512_maskz_loadu_ps(m, static_cast<const float*>(x) + i);
  const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(x) + i);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

}  // namespace

void minmax_avx512(const void* x, DType dtype, int64_t n, float* min, float* max) {
  __m512 lo = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 hi = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = load16(x, dtype, i, 0xFFFF);
    lo = _mm512_min_ps(lo, v);
    hi = _mm512_max_ps(hi, v);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = load16(x, dtype, i, m);
    lo = _mm512_mask_min_ps(lo, m, lo, v);
    hi = _mm512_mask_max_ps(hi, m, hi, v);
  }
  *min = _mm512_reduce_min_ps(lo);
  *max = _mm512_reduce_max_ps(hi);
}

float absmax_avx512(const void* x, DType dtype, int64_t n) {
  if (dtype == DType::F32) {
    __m512 m = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16)
      m = _mm512_max_ps(m, _mm512_abs_ps(load16(x, dtype, i, tail_mask(n - i))));
    return _mm512_reduce_max_ps(m);
  }
  // BF16: max of the raw bits without the sign, 32 lanes an instruction;
  // for non-negative floats the integer order of the bits is the value order.
  const auto* p = static_cast<const uint16_t*>(x);
  const __m512i mag = _mm512_set1_epi16(0x7FFF);
  __m512i m = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_loadu_si512(p + i), mag));
  if (i < n) {
    const __mmask32 t = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    m = _mm512_max_epu16(m, _mm512_and_si512(_mm512_maskz_loadu_epi16(t, p + i), mag));
  }
  alignas(64) uint16_t lanes[32];
  _mm512_store_si512(lanes, m);
  uint16_t best = 0;
  for (uint16_t v : lanes) best = v > best ? v : best;
  return bf16_to_f32(best);
}

void quantize_int8_avx512(const void* x, DType dtype, int64_t n, const ref::ConvInt8Quant& p,
                          uint8_t* q) {
  const __m512 inv = _mm512_set1_ps(p.inv_scale);
  const __m512i zp = _mm512_set1_epi32(p.zero_point);
  const __m512i lo = _mm512_set1_epi32(p.lo), hi = _mm512_set1_epi32(p.hi);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(load16(x, dtype, i, m), inv));
    v = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(v, zp), lo), hi);
    _mm512_mask_cvtepi32_storeu_epi8(q + i, m, v);
  }
}

}  // namespace flick::cpu

// AVX-512 kernel of Rope3d::apply_bf16: eight complex pairs per step in f64
// lanes. Bit-identical to rotate_pairs_bf16_scalar: the same f64 products and
// sums (no FMA: flick_wan builds with -ffp-contract=off), the same rounding
// to fp32 (vcvtpd2ps, round to nearest even) and then to bf16.
#include <immintrin.h>

// GCC 12 reports the intrinsics' own placeholder operands
// (_mm512_undefined_*) as maybe-uninitialized once they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

// Only ISA-namespaced headers here: an inline function of a shared header
// compiled with AVX-512 flags could be the copy the linker keeps for all.
#include "runtime/cpu/eltwise_simd_avx512.h"

namespace flick::wan {

// Declared in rope3d.h.
void rotate_pairs_bf16_scalar(const uint16_t* x, const double* cos, const double* sin, int pairs,
                              int64_t rows, uint16_t* out);
void rotate_pairs_bf16_avx512(const uint16_t* x, const double* cos, const double* sin, int pairs,
                              int64_t rows, uint16_t* out);

void rotate_pairs_bf16_avx512(const uint16_t* x, const double* c, const double* s, int pairs,
                              int64_t rows, uint16_t* out) {
  using cpu::avx512::Vf;
  // Lanes 0-7 <- the even (real) inputs, 8-15 <- the odd (imaginary) ones.
  const __m512i split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
  // The inverse: re0 im0 re1 im1 ... from re0..re7 | im0..im7.
  const __m512i interleave = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
  const int vec_pairs = pairs / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * 2 * pairs;
    uint16_t* yr = out + r * 2 * pairs;
    for (int p = 0; p < vec_pairs; p += 8) {
      const __m512 v = _mm512_permutexvar_ps(split, cpu::avx512::load_bf16(xr + 2 * p).v);
      const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      const __m512d b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
      const __m512d cv = _mm512_loadu_pd(c + p), sv = _mm512_loadu_pd(s + p);
      const __m512d re = _mm512_sub_pd(_mm512_mul_pd(a, cv), _mm512_mul_pd(b, sv));
      const __m512d im = _mm512_add_pd(_mm512_mul_pd(b, cv), _mm512_mul_pd(a, sv));
      const __m512 both =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(re)), _mm512_cvtpd_ps(im), 1);
      cpu::avx512::store_bf16(yr + 2 * p, Vf{_mm512_permutexvar_ps(interleave, both)});
    }
    if (vec_pairs < pairs)
      rotate_pairs_bf16_scalar(xr + 2 * vec_pairs, c + vec_pairs, s + vec_pairs, pairs - vec_pairs,
                               1, yr + 2 * vec_pairs);
  }
}

}  // namespace flick::wan

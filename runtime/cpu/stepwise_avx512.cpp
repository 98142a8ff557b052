// AVX-512 row kernels of the stepwise ops (stepwise_kernels.h), each
// bit-identical to its scalar kernel in stepwise.cpp: the same products and
// sums in the same order (no FMA: this file builds with -ffp-contract=off),
// the same round-to-nearest-even conversions.
#include <immintrin.h>

// GCC 12 reports the intrinsics' own placeholder operands
// (_mm512_undefined_*) as (maybe-)uninitialized once they are inlined
// (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

// Only ISA-namespaced headers here: an inline function of a shared header
// compiled with AVX-512 flags could be the copy the linker keeps for all.
#include "runtime/cpu/eltwise_simd_avx512.h"
#include "runtime/cpu/stepwise_kernels.h"

namespace flick::cpu::stepwise {

// Eight complex pairs per step in f64 lanes: the scalar kernel's f64 products
// and sums, the same rounding to fp32 (vcvtpd2ps, round to nearest even) and
// then to bf16.
void rotate_pairs_bf16_avx512(const uint16_t* x, const double* c, const double* s, int pairs,
                              int64_t rows, uint16_t* out) {
  using avx512::Vf;
  // Lanes 0-7 <- the even (real) inputs, 8-15 <- the odd (imaginary) ones.
  const __m512i split = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
  // The inverse: re0 im0 re1 im1 ... from re0..re7 | im0..im7.
  const __m512i interleave = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
  const int vec_pairs = pairs / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* xr = x + r * 2 * pairs;
    uint16_t* yr = out + r * 2 * pairs;
    for (int p = 0; p < vec_pairs; p += 8) {
      const __m512 v = _mm512_permutexvar_ps(split, avx512::load_bf16(xr + 2 * p).v);
      const __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
      const __m512d b = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
      const __m512d cv = _mm512_loadu_pd(c + p), sv = _mm512_loadu_pd(s + p);
      const __m512d re = _mm512_sub_pd(_mm512_mul_pd(a, cv), _mm512_mul_pd(b, sv));
      const __m512d im = _mm512_add_pd(_mm512_mul_pd(b, cv), _mm512_mul_pd(a, sv));
      const __m512 both =
          _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(re)), _mm512_cvtpd_ps(im), 1);
      avx512::store_bf16(yr + 2 * p, Vf{_mm512_permutexvar_ps(interleave, both)});
    }
    if (vec_pairs < pairs)
      rotate_pairs_bf16_scalar(xr + 2 * vec_pairs, c + vec_pairs, s + vec_pairs, pairs - vec_pairs,
                               1, yr + 2 * vec_pairs);
  }
}

// 16 lanes: the same fp32 product and sum and the same round-to-nearest-even
// bf16 conversions as the scalar kernel.
void mul_add_row_bf16_avx512(const uint16_t* a, const uint16_t* b, const uint16_t* c, uint16_t* out,
                             int64_t n) {
  namespace v = avx512;
  auto step = [](v::Vf a, v::Vf b, v::Vf c) {
    const v::Vf t = v::bf16_bits_to_f32(v::f32_to_bf16_bits(b * c));
    return a + t;
  };
  int64_t i = 0;
  for (; i + v::kLanes <= n; i += v::kLanes)
    v::store_bf16(out + i, step(v::load_bf16(a + i), v::load_bf16(b + i), v::load_bf16(c + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    v::store_bf16_n(
        out + i, step(v::load_bf16_n(a + i, m), v::load_bf16_n(b + i, m), v::load_bf16_n(c + i, m)),
        m);
  }
}

// 16 rows at a time, one row per lane, so that each lane adds its row's
// rounded squares in the scalar kernel's order (element 0 first) and every
// step rounds as the scalar kernel does (the sum of a row is a chain of
// dependent adds, which one row at a time would wait on).
void rms_norm_rows16_bf16_avx512(const uint16_t* x, int64_t dim, uint16_t* out, float eps) {
  namespace v = avx512;
  auto round_bf16 = [](v::Vf a) { return v::bf16_bits_to_f32(v::f32_to_bf16_bits(a)); };
  // Lane l reads the 32-bit word at element l * dim + d: elements d, d + 1
  // of row l (dim is even, so the pair never crosses a row).
  const __m512i lane_start =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(dim)));
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  v::Vf sum = v::splat(0.f);
  for (int64_t d = 0; d < dim; d += 2) {
    const __m512i idx = _mm512_add_epi32(lane_start, _mm512_set1_epi32(static_cast<int>(d)));
    const __m512i pair = _mm512_i32gather_epi32(idx, x, 2);
    const v::Vf a{_mm512_castsi512_ps(_mm512_slli_epi32(pair, 16))};
    const v::Vf b{_mm512_castsi512_ps(_mm512_and_si512(pair, hi_mask))};
    sum = sum + round_bf16(a * a);
    sum = sum + round_bf16(b * b);
  }
  const v::Vf mean = round_bf16(sum / v::splat(static_cast<float>(dim)));
  const v::Vf root = round_bf16(v::Vf{_mm512_sqrt_ps(round_bf16(mean + v::splat(eps)).v)});
  alignas(64) float inv[16];
  _mm512_store_ps(inv, round_bf16(v::splat(1.f) / root).v);
  for (int r = 0; r < 16; ++r) {
    const v::Vf s = v::splat(inv[r]);
    const uint16_t* xr = x + r * dim;
    uint16_t* yr = out + r * dim;
    int64_t d = 0;
    for (; d + v::kLanes <= dim; d += v::kLanes) v::store_bf16(yr + d, v::load_bf16(xr + d) * s);
    if (d < dim) {
      const int n = static_cast<int>(dim - d);
      v::store_bf16_n(yr + d, v::load_bf16_n(xr + d, n) * s, n);
    }
  }
}

}  // namespace flick::cpu::stepwise

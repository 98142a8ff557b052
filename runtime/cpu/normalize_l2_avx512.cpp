// AVX-512 row loop of the CPU backend's normalize_l2 (+ SiLU): one row of C
// channels at a time, |x| in the first pass, normalise, SiLU and store in the
// second (the row is in L1 by then), no intermediate buffer.
// GCC 12 reports the deliberately undefined pass-through operands of its own
// AVX-512 intrinsics as uninitialized once inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "runtime/cpu/normalize_l2_kernels.h"

namespace flick::cpu::l2norm::avx512 {
namespace {

inline __mmask16 mask_n(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
}

template <bool kBf16>
inline __m512 load(const void* p, int64_t i, __mmask16 m) {
  if constexpr (kBf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
  }
}

// Round to the nearest bf16 (ties to even) and keep it as fp32.
inline __m512 round_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// vcvtneps2bf16 rounds to nearest even like c10 (it flushes denormal inputs
// to zero, which normalised activations never are).
template <bool kBf16>
inline void store(void* p, int64_t i, __m512 v, __mmask16 m) {
  if constexpr (kBf16) {
    _mm256_mask_storeu_epi16(static_cast<uint16_t*>(p) + i, m, (__m256i)_mm512_cvtneps_pbh(v));
  } else {
    _mm512_mask_storeu_ps(static_cast<float*>(p) + i, m, v);
  }
}

// exp(x) for x in [-88, 88]: x = n ln2 + r, |r| <= ln2 / 2, Cephes' degree-5
// polynomial for e^r (about 1 ulp), times 2^n.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-88.f)), _mm512_set1_ps(88.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);
}

// a / b from y ~ 1 / b (Markstein): q = a y, then q + (a - b q) y with the
// residual exact under FMA. With y within half an ulp of 1 / b the result is
// the correctly rounded quotient, what vdivps gives at a fraction of its
// cost (the divider is this kernel's bottleneck otherwise).
inline __m512 div_refined(__m512 a, __m512 b, __m512 y) {
  const __m512 q = _mm512_mul_ps(a, y);
  return _mm512_fmadd_ps(_mm512_fnmadd_ps(b, q, a), y, q);
}

// silu(v) = v / (1 + e^-v). kRefined: the quotient refined as above (to
// within rounding of PyTorch's division); else the product with a
// reciprocal estimate refined by one Newton step (within ~1 ulp).
template <bool kRefined>
inline __m512 silu(__m512 v) {
  const __m512 d =
      _mm512_add_ps(_mm512_set1_ps(1.f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v)));
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(1.f)), r);
  if constexpr (kRefined) return div_refined(v, d, r);
  return _mm512_mul_ps(v, r);
}

template <bool kBf16, bool kPerOp, bool kSilu>
void rows(const void* x, void* y, int64_t rows, int64_t c, const float* gamma, float scale) {
  const __m512 vscale = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * c;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= c; j += 32) {
      const __m512 a = load<kBf16>(x, base + j, 0xFFFF), b = load<kBf16>(x, base + j + 16, 0xFFFF);
      acc0 = _mm512_fmadd_ps(a, a, acc0);
      acc1 = _mm512_fmadd_ps(b, b, acc1);
    }
    for (; j < c; j += 16) {
      const __m512 a = load<kBf16>(x, base + j, mask_n(c - j));
      acc0 = _mm512_fmadd_ps(a, a, acc0);
    }
    float norm = std::sqrt(_mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)));
    if constexpr (kPerOp && kBf16) norm = _mm512_cvtss_f32(round_bf16(_mm512_set1_ps(norm)));
    norm = std::max(norm, 1e-12f);
    const __m512 vn = _mm512_set1_ps(norm), vs = _mm512_set1_ps(scale / norm);
    const __m512 vinv = _mm512_set1_ps(1.f / norm);  // correctly rounded: exact quotients below
    for (j = 0; j < c; j += 16) {
      const __mmask16 m = mask_n(c - j);
      const __m512 v = load<kBf16>(x, base + j, m);
      const __m512 g = _mm512_maskz_loadu_ps(m, gamma + j);
      __m512 q;
      if constexpr (kPerOp) {
        // x / |x|, * sqrt(C), * gamma, each rounded to the activation dtype.
        q = div_refined(v, vn, vinv);
        if constexpr (kBf16) q = round_bf16(q);
        q = _mm512_mul_ps(q, vscale);
        if constexpr (kBf16) q = round_bf16(q);
        q = _mm512_mul_ps(q, g);
        if constexpr (kBf16) q = round_bf16(q);
      } else {
        q = _mm512_mul_ps(_mm512_mul_ps(v, vs), g);
      }
      if constexpr (kSilu) q = silu<kPerOp>(q);
      store<kBf16>(y, base + j, q, m);
    }
  }
}

}  // namespace

void normalize_rows(const void* x, void* y, bool bf16, int64_t n, int64_t c, const float* gamma,
                    float scale, NormRounding rounding, bool silu) {
  const bool per_op = rounding == NormRounding::PerOp;
#define FLICK_VAE_NORM(B, P, S) \
  if (bf16 == B && per_op == P && silu == S) return rows<B, P, S>(x, y, n, c, gamma, scale);
  FLICK_VAE_NORM(true, true, true)
  FLICK_VAE_NORM(true, true, false)
  FLICK_VAE_NORM(true, false, true)
  FLICK_VAE_NORM(true, false, false)
  FLICK_VAE_NORM(false, true, true)
  FLICK_VAE_NORM(false, true, false)
  FLICK_VAE_NORM(false, false, true)
  FLICK_VAE_NORM(false, false, false)
#undef FLICK_VAE_NORM
}

}  // namespace flick::cpu::l2norm::avx512

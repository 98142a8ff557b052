#include "runtime/cpu/quantize.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cpu/ops.h"
#include "runtime/threads.h"

namespace flick::cpu {
namespace {

// AVX2 fallback: same arithmetic as the AVX-512 kernel, 8 lanes; the tail
// divides like the scalar rule.
template <typename Load8, typename Load1>
float quantize_row_avx2(Load8 load8, Load1 load1, int64_t n, uint8_t* q, int offset) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 vmax = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, load8(i)));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.f;
  for (float v : lanes) amax = std::max(amax, v);
  for (; i < n; ++i) amax = std::max(amax, std::fabs(load1(i)));
  const float scale = amax / 127.f;
  if (scale == 0.f) {
    std::memset(q, offset, static_cast<size_t>(n));
    return 1.f;
  }
  const __m256 vs = _mm256_set1_ps(scale), inv = _mm256_set1_ps(1.f / scale);
  const __m256 half = _mm256_set1_ps(0.5f), near = _mm256_set1_ps(kNearTie);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m256i off = _mm256_set1_epi32(offset);
  alignas(32) int32_t out[8];
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 x = load8(i);
    __m256 r = _mm256_mul_ps(x, inv);
    const __m256 frac = _mm256_sub_ps(r, _mm256_floor_ps(r));
    const __m256 tie =
        _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(frac, half)), near, _CMP_LT_OQ);
    if (_mm256_movemask_ps(tie)) r = _mm256_blendv_ps(r, _mm256_div_ps(x, vs), tie);
    __m256i v = _mm256_cvtps_epi32(r);
    v = _mm256_add_epi32(_mm256_min_epi32(_mm256_max_epi32(v, lo), hi), off);
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), v);
    for (int j = 0; j < 8; ++j) q[i + j] = static_cast<uint8_t>(out[j]);
  }
  for (; i < n; ++i) {
    const float r = std::clamp(std::nearbyint(load1(i) / scale), -127.f, 127.f);
    q[i] = static_cast<uint8_t>(static_cast<int>(r) + offset);
  }
  return scale;
}

bool has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl");
  return yes;
}

}  // namespace

float quantize_row_f32_avx2(const float* x, int64_t n, uint8_t* q, int offset) {
  return quantize_row_avx2([x](int64_t i) { return _mm256_loadu_ps(x + i); },
                           [x](int64_t i) { return x[i]; }, n, q, offset);
}

float quantize_row_bf16_avx2(const uint16_t* x, int64_t n, uint8_t* q, int offset) {
  return quantize_row_avx2(
      [x](int64_t i) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
      },
      [x](int64_t i) { return bf16_to_f32(x[i]); }, n, q, offset);
}

float quantize_row(const void* x, DType dtype, int64_t n, uint8_t* q, int offset) {
  FLICK_CHECK(dtype == DType::F32 || dtype == DType::BF16,
              "quantize: x must be F32 or BF16, got " + std::string(dtype_name(dtype)));
  if (dtype == DType::F32) {
    const auto* p = static_cast<const float*>(x);
    return has_avx512() ? quantize_row_f32_avx512(p, n, q, offset)
                        : quantize_row_f32_avx2(p, n, q, offset);
  }
  const auto* p = static_cast<const uint16_t*>(x);
  return has_avx512() ? quantize_row_bf16_avx512(p, n, q, offset)
                      : quantize_row_bf16_avx2(p, n, q, offset);
}

void quantize_rows(const ref::RowsView& x, void* q, int64_t ldq, float* scales, int offset) {
  auto* qb = static_cast<uint8_t*>(q);
  // Rows of a few KB each: split across threads only when there are enough.
  parallel_for(
      x.rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t m = begin; m < end; ++m)
          scales[m] = quantize_row(x.row(m), x.dtype, x.cols, qb + m * ldq, offset);
      },
      std::max<int64_t>(1, 16384 / std::max<int64_t>(1, x.cols)));
}

void quantize_rows_int8(const Tensor& x, Tensor& q, Tensor& scale) {
  const ref::RowsView xr = ref::as_rows(x);
  const ref::RowsView qr = ref::as_rows(q);
  FLICK_CHECK(q.dtype == DType::I8 && qr.rows == xr.rows && qr.cols == xr.cols,
              "quantize_rows_int8: q must be I8 of x's shape, got x " + x.str() + ", q " + q.str());
  FLICK_CHECK(scale.dtype == DType::F32 && scale.ndim() == 1 && scale.dim(0) == xr.rows &&
                  (scale.stride(0) == 1 || xr.rows <= 1),
              "quantize_rows_int8: scale must be contiguous F32 [M], got " + scale.str());
  quantize_rows(xr, qr.data, qr.ld, scale.ptr<float>(), 0);
}

}  // namespace flick::cpu

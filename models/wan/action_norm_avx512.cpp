// AVX-512 kernel of action_rms_norm_bf16 (action_rope.h): 16 rows at a time,
// one row per lane, so that each lane adds its row's rounded squares in the
// scalar kernel's order (element 0 first) and every step rounds as the
// scalar kernel does: the results are the same bit for bit.
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

namespace flick::wan {

// Declared in action_rope.h.
void action_rms_norm_rows16_avx512(const uint16_t* x, int64_t dim, uint16_t* out, float eps);

void action_rms_norm_rows16_avx512(const uint16_t* x, int64_t dim, uint16_t* out, float eps) {
  namespace v = cpu::avx512;
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

}  // namespace flick::wan

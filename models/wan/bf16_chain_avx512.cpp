// AVX-512 kernel of bf16_chain.h: 16 lanes, the same fp32 product and sum
// and the same round-to-nearest-even bf16 conversions as the scalar kernel.
#include <immintrin.h>

// GCC 12 reports the intrinsics' own placeholder operands
// (_mm512_undefined_*) as maybe-uninitialized once they are inlined.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstdint>

// Only ISA-namespaced headers here: an inline function of a shared header
// compiled with AVX-512 flags could be the copy the linker keeps for all.
#include "runtime/cpu/eltwise_simd_avx512.h"

namespace flick::wan {

// Declared in bf16_chain.h.
void bf16_mul_add_row_avx512(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                             int64_t n);

void bf16_mul_add_row_avx512(const uint16_t* p, const uint16_t* q, const uint16_t* r, uint16_t* out,
                             int64_t n) {
  namespace v = cpu::avx512;
  auto step = [](v::Vf a, v::Vf b, v::Vf c) {
    const v::Vf t = v::bf16_bits_to_f32(v::f32_to_bf16_bits(a * b));
    return t + c;
  };
  int64_t i = 0;
  for (; i + v::kLanes <= n; i += v::kLanes)
    v::store_bf16(out + i, step(v::load_bf16(p + i), v::load_bf16(q + i), v::load_bf16(r + i)));
  if (i < n) {
    const int m = static_cast<int>(n - i);
    v::store_bf16_n(
        out + i, step(v::load_bf16_n(p + i, m), v::load_bf16_n(q + i, m), v::load_bf16_n(r + i, m)),
        m);
  }
}

}  // namespace flick::wan

// Peak loops: 16 independent accumulators per thread, enough to cover the
// FMA / VNNI / BF16-dot latency (4-6 cycles) at 2 instructions per cycle, and
// no loads inside the loop. The AMX loops keep four C tiles busy from two A
// and two B tiles (the 2x2 blocking real kernels use).
// GCC 12's AVX-512 headers trip -Wuninitialized on their own
// _mm512_undefined_* temporaries (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

#include "bench/peak.h"
#include "runtime/cpu/amx_tiles.h"

namespace flick::bench {
namespace {

constexpr int kChains = 16;

// The accumulators must reach memory, or the loop would be dead code.
template <typename V>
void sink(const V (&acc)[kChains]) {
  alignas(64) static thread_local V out[kChains];
  for (int i = 0; i < kChains; ++i) out[i] = acc[i];
  asm volatile("" : : "r"(out) : "memory");
}

// One loop trip: `op` on 16 accumulators in registers, written in assembly
// so the compiler can neither drop nor reshuffle the chains (with the
// intrinsics GCC 12 adds a register copy per vpdpbusd). Two statements of
// eight: an asm takes at most 30 operands.
#define FLICK_PEAK_OP8(op, c0, c1, c2, c3, c4, c5, c6, c7, a, b)                                \
  asm volatile(op " %8, %9, %0\n\t" op " %8, %9, %1\n\t" op " %8, %9, %2\n\t" op                \
                  " %8, %9, %3\n\t" op " %8, %9, %4\n\t" op " %8, %9, %5\n\t" op                \
                  " %8, %9, %6\n\t" op " %8, %9, %7"                                            \
               : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5), "+v"(c6), "+v"(c7) \
               : "v"(a), "v"(b))

#define FLICK_PEAK_LOOP(op, V, acc, a, b, iters)                                                   \
  do {                                                                                             \
    V c0 = acc[0], c1 = acc[1], c2 = acc[2], c3 = acc[3], c4 = acc[4], c5 = acc[5], c6 = acc[6],   \
      c7 = acc[7], c8 = acc[8], c9 = acc[9], c10 = acc[10], c11 = acc[11], c12 = acc[12],          \
      c13 = acc[13], c14 = acc[14], c15 = acc[15];                                                 \
    for (int64_t it = 0; it < (iters); ++it) {                                                     \
      FLICK_PEAK_OP8(op, c0, c1, c2, c3, c4, c5, c6, c7, a, b);                                    \
      FLICK_PEAK_OP8(op, c8, c9, c10, c11, c12, c13, c14, c15, a, b);                              \
    }                                                                                              \
    const V out[kChains] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15}; \
    for (int i = 0; i < kChains; ++i) acc[i] = out[i];                                             \
  } while (0)

}  // namespace

double peak_fma_f32_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.001f * i);
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.0001f);
  FLICK_PEAK_LOOP("vfmadd231ps", __m512, acc, a, b, iters);
  sink(acc);
  return double(iters) * kChains * 16 * 2;
}

double peak_dpbf16_avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_setzero_ps();
  const __m512i a = _mm512_set1_epi16(0x3C00), b = a;  // bf16 0.0078
  FLICK_PEAK_LOOP("vdpbf16ps", __m512, acc, a, b, iters);
  sink(acc);
  return double(iters) * kChains * 32 * 2;  // 16 lanes x 2 bf16 pairs
}

double peak_dpbusd_avx512(int64_t iters) {
  __m512i acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_setzero_si512();
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  FLICK_PEAK_LOOP("vpdpbusd", __m512i, acc, a, b, iters);
  sink(acc);
  return double(iters) * kChains * 64 * 2;  // 16 lanes x 4 u8*s8 products
}

namespace {

// Tiles 0-3 are C (16 rows x 64 bytes of fp32 / s32), 4-5 A, 6-7 B.
__attribute__((target("amx-tile"))) void load_tiles(const void* data) {
  cpu::amx::configure_full_tiles();
  _tile_zero(0);  // tile numbers are immediates
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, data, 64);
  _tile_loadd(5, data, 64);
  _tile_loadd(6, data, 64);
  _tile_loadd(7, data, 64);
}

__attribute__((target("amx-tile"))) void release_tiles(void* out) {
  _tile_stored(0, out, 64);
  asm volatile("" : : "r"(out) : "memory");
  _tile_release();
}

}  // namespace

__attribute__((target("amx-tile,amx-bf16"))) double peak_amx_bf16(int64_t iters) {
  alignas(64) static thread_local uint16_t data[16 * 32];
  for (auto& v : data) v = 0x3C00;
  alignas(64) static thread_local float out[16 * 16];
  load_tiles(data);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  release_tiles(out);
  return double(iters) * 4 * 16 * 16 * 32 * 2;  // C 16x16 += A 16x32 . B 32x16
}

__attribute__((target("amx-tile,amx-int8"))) double peak_amx_int8(int64_t iters) {
  alignas(64) static thread_local int8_t data[16 * 64];
  for (auto& v : data) v = 1;
  alignas(64) static thread_local int32_t out[16 * 16];
  load_tiles(data);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  release_tiles(out);
  return double(iters) * 4 * 16 * 16 * 64 * 2;  // C 16x16 += A 16x64 . B 64x16
}

}  // namespace flick::bench

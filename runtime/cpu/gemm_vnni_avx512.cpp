// The GEMMs of runtime/cpu/gemm.h for CPUs with AVX-512 and no AMX (AMD Zen
// 4 / 5; Intel Ice Lake / Cascade Lake for INT8): one kernel over the AMX
// kernels' packed weights, whose 64-byte tile rows are exactly the operand
// of either product instruction:
//  - S8: vpdpbusd (AVX-512 VNNI), 16 columns x 4 consecutive k of one K quad;
//  - BF16 (and FP8, widened to bf16): vdpbf16ps (AVX-512 BF16), 16 columns
//    x one bf16 pair of k, fp32 sums;
//  - F32: vfmadd231ps (AVX-512 F), 16 columns x one k, fp32 sums. oneDNN
//    2.7's f32 matmul (brgemm) reached 61-71 % of the FMA peak at SAM3's
//    shapes on an Emerald Rapids, MKL (PyTorch's) 83-92 %.
//
// vpdpbusd multiplies u8 by s8, so INT8 activations go in as u8 = q + 128
// (the quantizer's offset) and each column's dot product is taken back by
// 128 * sum_k w[n, k] (`comp`, exact integers): the s32 sums equal the s8 x s8
// sums of the AMX kernel and runtime/ref, and the shared epilogue
// (gemm_epilogue_avx512.h) makes the outputs bit-identical to both.
//
// Register tile: 6 rows x 64 columns (24 accumulators, 4 weight vectors, one
// broadcast A quad / pair): 10 loads per 24 products; 32 or 16 columns at
// the end of N. A K that ends inside a step runs only the operand units it
// fills (F32 K = 2: 2 products a row, not the 16 of a padded step). Cache
// blocking (the loop order is at run()): K in blocks of up to 32 steps (2048
// k of S8, 1024 of BF16); a block of rows whose A panel (~384 KB) stays in
// L2 passes over the thread's column groups, each group's weights for the K
// block (<= 128 KB) stay in L2 over the block's 6-row tiles, and a tile's 6
// A rows sit in L1. Measured on a Zen 4 (bench/RESULTS.md, sessions 13 and 14): S8 87-92 %
// of the vpdpbusd peak at the DiT's shapes in a prototype of the loop, 3-16 %
// faster than oneDNN 2.6's brgemm as a whole linear; BF16 82-92 % of the
// vdpbf16ps peak, 2-13 % faster than oneDNN's (both of which re-block plain
// weights inside every call).
//
// GCC 12's AVX-512 headers trip -Wuninitialized on their own
// _mm512_undefined_* temporaries (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx512.h"
#include "runtime/cpu/gemm_epilogue_avx512.h"
#include "runtime/cpu/gemm_vnni.h"

namespace flick::cpu::vnni {
namespace {

namespace v = flick::cpu::avx512;

constexpr int kMr = 6;  // rows of the register tile

// std::min is an inline template of a shared header: an out-of-line copy
// compiled here, with the AVX-512 flags, could be the one the linker keeps
// for every file (see runtime/cpu/attention_kernels.h).
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

constexpr int64_t kTileBytes = 1024;  // 16 K quads x 16 columns
constexpr int64_t kStepBytes = 2048;  // one K step (64 k) of a 32-column block

// acc += u8 quads of a . s8 quads of b. Inline asm rather than
// _mm512_dpbusd_epi32: with the intrinsic GCC 12 copies the accumulators
// around every product and spills the tile (see attention_int8_avx512.cpp).
inline void dpbusd(__m512i& acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}

// The kernels' one product: s32 acc += u8 quads . s8 quads (S8), or fp32 acc
// (the same register, as bits) += bf16 pairs . bf16 pairs (BF16, vdpbf16ps,
// inline for the same reason), or += f32 . f32 (F32, one fused multiply-add:
// a broadcast k of the row times 16 columns' weights).
template <AmxType T>
inline void dot(__m512i& acc, __m512i a, __m512i b) {
  if constexpr (T == AmxType::S8) {
    dpbusd(acc, a, b);
  } else if constexpr (T == AmxType::BF16) {
    asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  } else {
    asm("vfmadd231ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  }
}

// c[R][16 * C] (+)= a[R rows] . (b0 | b1) over `steps` K steps: from zero,
// or from c's partial sums (`accumulate`). C = 4: two 32-column blocks (b0,
// b1); C = 2: one (b0); C = 1: its first 16 columns (N <= 16: the DETR
// decoder's boxRPB MLP, 256 -> 8). A step is 64 bytes of each operand row
// (64 k of S8, 32 of BF16, 16 of F32), lda in bytes; c holds s32 (S8) or
// fp32 sums. The last step runs only its first `last_quads` operand units
// (quads / pairs / floats): the rest is K padding, zero on both sides, which
// for K = 2 (boxRPB's first layer) was 7 or 15 products in 8 or 16.
template <AmxType T, int R, int C>
void tile(const char* a, int64_t lda, const char* b0, const char* b1, int64_t steps, int last_quads,
          int32_t* c, int64_t ldc, bool accumulate) {
  __m512i acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j)
      acc[r][j] = accumulate ? _mm512_load_si512(c + r * ldc + 16 * j) : _mm512_setzero_si512();
  // Operand unit q of step s: C weight vectors times each row's broadcast unit.
  auto unit = [&](int64_t s, int q) __attribute__((always_inline)) {
    const char* p0 = b0 + s * kStepBytes + q * 64;
    const char* p1 = b1 + s * kStepBytes + q * 64;
    __m512i bv[C];
    bv[0] = _mm512_load_si512(p0);
    if constexpr (C >= 2) bv[1] = _mm512_load_si512(p0 + kTileBytes);
    if constexpr (C == 4) {
      bv[2] = _mm512_load_si512(p1);
      bv[3] = _mm512_load_si512(p1 + kTileBytes);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * lda + s * 64 + 4 * q, 4);
      const __m512i av = _mm512_set1_epi32(quad);
#pragma GCC unroll 4
      for (int j = 0; j < C; ++j) dot<T>(acc[r][j], av, bv[j]);
    }
  };
  const int64_t full = last_quads == 16 ? steps : steps - 1;
  for (int64_t s = 0; s < full; ++s) {
#pragma GCC unroll 16
    for (int q = 0; q < 16; ++q) unit(s, q);
  }
  for (int q = 0; full < steps && q < last_quads; ++q) unit(full, q);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < C; ++j) _mm512_store_si512(c + r * ldc + 16 * j, acc[r][j]);
}

template <AmxType T, int C>
void tile_rows(int rows, const char* a, int64_t lda, const char* b0, const char* b1, int64_t steps,
               int last_quads, int32_t* c, int64_t ldc, bool accumulate) {
  static_assert(kMr == 6, "the dispatch below covers 1 to 6 rows");
  switch (rows) {
    case 1: return tile<T, 1, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
    case 2: return tile<T, 2, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
    case 3: return tile<T, 3, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
    case 4: return tile<T, 4, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
    case 5: return tile<T, 5, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
    default: return tile<T, 6, C>(a, lda, b0, b1, steps, last_quads, c, ldc, accumulate);
  }
}

// Loop order: row block, K block, column group, 6-row tile. When K is split,
// the sums (s32 or fp32) of the block's rows x the thread's columns wait in w.partial
// between K blocks; else a tile's sums go through an L1 buffer. After the
// last K block each tile goes through the epilogue.
template <AmxType T, Activation A, bool kBf16Out>
void run(const WorkerArgs& w) {
  const AmxWeights& wt = *w.w;
  const AmxEpilogue& e = *w.epilogue;
  const int64_t steps = wt.k_pad / amx_k_step(T), blocks = wt.n_pad / 32;
  const auto* b = static_cast<const char*>(wt.data);
  const bool split_k = w.steps_per_block < steps;
  const int64_t ldc = split_k ? (w.g1 - w.g0) * 64 : 64;
  // Operand units (quads, pairs, floats) of the last step that K fills.
  const int64_t per_unit = 4 / amx_elem_bytes(T);
  const int tail_quads = static_cast<int>((wt.k + per_unit - 1) / per_unit - (steps - 1) * 16);
  alignas(64) int32_t tile_sums[kMr * 64];
  for (int64_t m0 = w.m0; m0 < w.m1; m0 += w.rows_per_block) {
    const int64_t m1 = min64(w.m1, m0 + w.rows_per_block);
    for (int64_t k0 = 0; k0 < steps; k0 += w.steps_per_block) {
      const int64_t ks = min64(w.steps_per_block, steps - k0);
      const bool last = k0 + ks == steps;
      const int quads = last ? tail_quads : 16;
      for (int64_t g = w.g0; g < w.g1; ++g) {
        const int64_t nb = 2 * g;
        const bool pair = nb + 1 < blocks;
        const char* b0 = b + (nb * steps + k0) * kStepBytes;
        const char* b1 = pair ? b0 + steps * kStepBytes : b0;
        const int64_t col0 = nb * 32;
        const int64_t cols = min64(pair ? 64 : 32, wt.n - col0);
        for (int64_t m = m0; m < m1; m += kMr) {
          const int rows = static_cast<int>(min64(kMr, m1 - m));
          const char* a = w.a + m * w.lda + k0 * 64;
          int32_t* c = split_k ? w.partial + (m - m0) * ldc + (g - w.g0) * 64 : tile_sums;
          if (pair)
            tile_rows<T, 4>(rows, a, w.lda, b0, b1, ks, quads, c, ldc, k0 > 0);
          else if (cols > 16)
            tile_rows<T, 2>(rows, a, w.lda, b0, b1, ks, quads, c, ldc, k0 > 0);
          else
            tile_rows<T, 1>(rows, a, w.lda, b0, b1, ks, quads, c, ldc, k0 > 0);
          if (!last) continue;
          for (int r = 0; r < rows; ++r) {
            const int64_t row = m + r;
            const v::Vf rs = v::splat(e.row_scale != nullptr ? e.row_scale[row] : 1.f);
            for (int64_t j = 0; 16 * j < cols; ++j) {
              const int64_t col = col0 + 16 * j;
              const __m512i sum = _mm512_load_si512(c + r * ldc + 16 * j);
              __m512 x;
              if constexpr (T == AmxType::S8) {
                x = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, _mm512_loadu_si512(w.comp + col)));
              } else {
                x = _mm512_castsi512_ps(sum);
              }
              v::epilogue_16<A, kBf16Out>(v::Vf{x}, e, rs, row, col,
                                          v::tail_mask(static_cast<int>(min64(16, cols - 16 * j))));
            }
          }
        }
      }
    }
  }
}

template <Activation A>
void run_act(const WorkerArgs& w) {
  const bool bf16_out = w.epilogue->y.dtype == DType::BF16;
  if (w.w->type == AmxType::S8) {
    bf16_out ? run<AmxType::S8, A, true>(w) : run<AmxType::S8, A, false>(w);
  } else if (w.w->type == AmxType::F32) {
    bf16_out ? run<AmxType::F32, A, true>(w) : run<AmxType::F32, A, false>(w);
  } else {
    bf16_out ? run<AmxType::BF16, A, true>(w) : run<AmxType::BF16, A, false>(w);
  }
}

}  // namespace

void gemm_worker(const WorkerArgs& w) {
  switch (w.epilogue->act) {
    case Activation::None: return run_act<Activation::None>(w);
    case Activation::GeluErf: return run_act<Activation::GeluErf>(w);
    case Activation::GeluTanh: return run_act<Activation::GeluTanh>(w);
    case Activation::Silu: return run_act<Activation::Silu>(w);
    case Activation::RoundGeluTanh: return run_act<Activation::RoundGeluTanh>(w);
    case Activation::Relu: return run_act<Activation::Relu>(w);
    case Activation::Sigmoid: return run_act<Activation::Sigmoid>(w);
  }
}

void compensation(const AmxWeights& w, int32_t* comp) {
  // Tile row q of a step holds quad q of 16 columns; summing its bytes in
  // 4-byte lanes (vpdpbusd of all-ones u8) gives each column's partial sum.
  const int64_t steps = w.k_pad / 64, blocks = w.n_pad / 32;
  const auto* b = static_cast<const char*>(w.data);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t nb = 0; nb < blocks; ++nb)
    for (int h = 0; h < 2; ++h) {
      __m512i sum = _mm512_setzero_si512();
      for (int64_t s = 0; s < steps; ++s)
        for (int q = 0; q < 16; ++q)
          dpbusd(sum, ones,
                 _mm512_load_si512(b + (nb * steps + s) * kStepBytes + h * kTileBytes + q * 64));
      _mm512_storeu_si512(comp + nb * 32 + h * 16,
                          _mm512_mullo_epi32(sum, _mm512_set1_epi32(kVnniOffset)));
    }
}

}  // namespace flick::cpu::vnni

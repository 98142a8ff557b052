// AMX tile kernels of runtime/cpu/gemm.h (compiled with the AMX and AVX-512
// flags; called only when amx_available()).
//
// Register blocking: 2x2 tiles, C = 32 x 32 fp32/s32 in tmm0-3, A rows
// 0-15 / 16-31 in tmm4 / tmm5, B columns 0-15 / 16-31 in tmm6 / tmm7: four
// TDPs per four tile loads, the most reuse eight tiles allow.
//
// Cache blocking (measured on Sapphire Rapids, bench/RESULTS.md): a 2x2 step
// keeps the tile unit busy only when at most half its operands come from L2
// and none from L3. So one A sub-panel (32 rows x kc steps, 16 KB) stays in
// L1 and is reused over a chunk of `chunk` 32-column blocks, whose B panel
// (kb steps x chunk * 32 columns, <= 1 MB) stays in L2 over all row blocks.
// C round-trips through a per-thread fp32 buffer between K chunks.
//
// Epilogue: the finished 32 x 32 block of one visit is converted (scales,
// bias, activation, bf16 rounding) a few rows per K step during the next
// visit's tile instructions, so the vector units work while the tile unit
// does; only the last block of a thread is converted on its own.
// GCC 12's AVX-512 headers trip -Wuninitialized on their own
// _mm512_undefined_* temporaries (GCC PR105593, fixed in 13).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "runtime/cpu/gemm_amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx512.h"

namespace flick::cpu::avx512 {
namespace {
// The activation functions of the elementwise ops (same code, same ulps).
#define FLICK_ISA_NAME "avx512-amx-epilogue"
#include "runtime/cpu/eltwise_kernels.inc"
#undef FLICK_ISA_NAME
}  // namespace
}  // namespace flick::cpu::avx512

namespace flick::cpu::amx {
namespace {

namespace v = flick::cpu::avx512;

// Tile configuration, palette 1: all eight tiles 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void configure_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kAmxRowBytes;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

constexpr int64_t kTileBytes = 1024;
constexpr int64_t kStepBytes = 2 * kTileBytes;  // two A (or B) tiles per K step
constexpr int kBlock = 32;                      // rows and columns of a C block
constexpr int64_t kBlockBytes = kBlock * kBlock * 4;
constexpr int64_t kCStride = kBlock * 4;  // bytes between C rows in the buffer

template <Activation A>
inline v::Vf activate(v::Vf x) {
  if constexpr (A == Activation::GeluErf) return v::gelu_erf(x);
  if constexpr (A == Activation::GeluTanh) return v::gelu_tanh(x);
  if constexpr (A == Activation::Silu) return v::silu(x);
  return x;
}

// One finished C block waiting for its epilogue, converted row by row.
struct Pending {
  const void* c = nullptr;  // 32 x 32 accumulators, row stride kCStride
  int64_t m0 = 0, n0 = 0;
  int next = kBlock;  // first row not yet converted; kBlock = nothing pending
};

// The epilogue of one GEMM call, specialised on accumulator type, activation
// and output dtype.
template <AmxType T, Activation A, bool kBf16Out>
struct Epilogue {
  const AmxEpilogue& e;
  int64_t m, n;  // logical sizes

  // Rows [p.next, p.next + count) of p's block.
  inline void rows(Pending& p, int count) const {
    const int end = std::min(kBlock, p.next + count);
    const int64_t cols = std::min<int64_t>(kBlock, n - p.n0);
    const int valid = static_cast<int>(std::min<int64_t>(end, m - p.m0));
    for (int r = p.next; r < valid; ++r) {
      const int64_t row = p.m0 + r;
      const char* src = static_cast<const char*>(p.c) + r * kCStride;
      const v::Vf rs = v::splat(e.row_scale != nullptr ? e.row_scale[row] : 1.f);
      for (int h = 0; h < 2; ++h) {
        const int64_t c0 = h * 16;
        if (c0 >= cols) break;
        const int lanes = static_cast<int>(std::min<int64_t>(16, cols - c0));
        const __mmask16 mask = v::tail_mask(lanes);
        v::Vf x;
        if constexpr (T == AmxType::S8) {
          x.v = _mm512_cvtepi32_ps(_mm512_loadu_si512(src + c0 * 4));
        } else {
          x.v = _mm512_loadu_ps(reinterpret_cast<const float*>(src) + c0);
        }
        const int64_t col = p.n0 + c0;
        if (e.col_scale != nullptr) x = x * v::Vf{_mm512_maskz_loadu_ps(mask, e.col_scale + col)};
        if (e.row_scale != nullptr) x = x * rs;
        if (e.bias != nullptr) x = x + v::Vf{_mm512_maskz_loadu_ps(mask, e.bias + col)};
        x = activate<A>(x);
        void* out = e.y.row(row);
        if constexpr (kBf16Out) {
          _mm256_mask_storeu_epi16(static_cast<uint16_t*>(out) + col, mask, v::f32_to_bf16_bits(x));
        } else {
          _mm512_mask_storeu_ps(static_cast<float*>(out) + col, mask, x.v);
        }
      }
    }
    p.next = end;
  }
  inline void finish(Pending& p) const {
    if (p.next < kBlock) rows(p, kBlock);
  }
};

template <AmxType T>
inline void dot_2x2() {
  if constexpr (T == AmxType::BF16) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  } else {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
}

// C (32 x 32 at c) += A sub-panel . B sub-panel over `steps` K steps;
// C starts from zero when `zero`, else from c. The pending block is
// converted a few rows per step meanwhile, and finished before the store.
template <AmxType T, class Ep>
inline void visit(const char* a, const char* b, int64_t steps, char* c, bool zero, Pending& pending,
                  const Ep& ep) {
  if (zero) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  } else {
    _tile_loadd(0, c, kCStride);
    _tile_loadd(1, c + 64, kCStride);
    _tile_loadd(2, c + 16 * kCStride, kCStride);
    _tile_loadd(3, c + 16 * kCStride + 64, kCStride);
  }
  const int per_step = static_cast<int>((kBlock + steps - 1) / steps);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a, kAmxRowBytes);
    _tile_loadd(6, b, kAmxRowBytes);
    _tile_loadd(5, a + kTileBytes, kAmxRowBytes);
    _tile_loadd(7, b + kTileBytes, kAmxRowBytes);
    dot_2x2<T>();
    a += kStepBytes;
    b += kStepBytes;
    if (pending.next < kBlock) ep.rows(pending, per_step);
  }
  ep.finish(pending);
  _tile_stored(0, c, kCStride);
  _tile_stored(1, c + 64, kCStride);
  _tile_stored(2, c + 16 * kCStride, kCStride);
  _tile_stored(3, c + 16 * kCStride + 64, kCStride);
}

template <AmxType T, class Ep>
void run_worker(const WorkerArgs& w, const Ep& ep) {
  configure_tiles();
  const AmxBlocking& bk = w.blocking;
  const int64_t steps = w.k_steps;
  const auto* a_base = static_cast<const char*>(w.a);
  const auto* b_base = static_cast<const char*>(w.b);
  auto* c_base = static_cast<char*>(w.c_scratch);
  const bool k_blocked = bk.kb_steps < steps;
  Pending pending;
  for (int64_t nc = w.nb0; nc < w.nb1; nc += bk.chunk_blocks) {
    const int64_t nce = std::min(w.nb1, nc + bk.chunk_blocks);
    for (int64_t kb = 0; kb < steps; kb += bk.kb_steps) {
      const int64_t kbe = std::min(steps, kb + bk.kb_steps);
      for (int64_t mb = w.mb0; mb < w.mb1; ++mb) {
        const char* a_block = a_base + mb * steps * kStepBytes;
        // C of (mb, nb): one buffer per row block when K is split into
        // blocks (partial sums live across the other row blocks), else one
        // per column block of the chunk.
        char* c_row = c_base + (k_blocked ? (mb - w.mb0) * bk.chunk_blocks * kBlockBytes : 0);
        for (int64_t k0 = kb; k0 < kbe; k0 += bk.kc_steps) {
          const int64_t k1 = std::min(kbe, k0 + bk.kc_steps);
          const bool last = k1 == steps;
          for (int64_t nb = nc; nb < nce; ++nb) {
            char* c = c_row + (nb - nc) * kBlockBytes;
            visit<T>(a_block + k0 * kStepBytes, b_base + (nb * steps + k0) * kStepBytes, k1 - k0, c,
                     k0 == 0, pending, ep);
            if (last) pending = Pending{c, mb * kBlock, nb * kBlock, 0};
          }
        }
      }
    }
  }
  ep.finish(pending);
  _tile_release();
}

template <AmxType T, Activation A>
void run_act(const WorkerArgs& w) {
  const bool bf16_out = w.epilogue->y.dtype == DType::BF16;
  if (bf16_out) {
    run_worker<T>(w, Epilogue<T, A, true>{*w.epilogue, w.m, w.n});
  } else {
    run_worker<T>(w, Epilogue<T, A, false>{*w.epilogue, w.m, w.n});
  }
}

template <AmxType T>
void run_type(const WorkerArgs& w) {
  switch (w.epilogue->act) {
    case Activation::None: return run_act<T, Activation::None>(w);
    case Activation::GeluErf: return run_act<T, Activation::GeluErf>(w);
    case Activation::GeluTanh: return run_act<T, Activation::GeluTanh>(w);
    case Activation::Silu: return run_act<T, Activation::Silu>(w);
  }
}

}  // namespace

void gemm_worker(const WorkerArgs& w) {
  if (w.type == AmxType::BF16) {
    run_type<AmxType::BF16>(w);
  } else {
    run_type<AmxType::S8>(w);
  }
}

}  // namespace flick::cpu::amx

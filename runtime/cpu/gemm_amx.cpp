// AMX tile kernels of runtime/cpu/gemm.h (compiled with the AMX and AVX-512
// flags; called only when amx_available()).
//
// Register blocking: 2x2 tiles, C = 32 x 32 fp32/s32 in tmm0-3, A rows
// 0-15 / 16-31 in tmm4 / tmm5, B columns 0-15 / 16-31 in tmm6 / tmm7: four
// TDPs per four tile loads, the most reuse eight tiles allow.
//
// Cache blocking, from measurements on Sapphire Rapids (one core; the tile
// unit's 2x2 peak needs 4 KB of operands per 16-cycle TDP group): with both
// operands streaming from L2 a step takes ~1.3x its compute time, from L3
// ~3-6x; with one operand in L1 and the other from L2 it runs at the L1
// rate. Storing C and reloading it to split K costs ~170 cycles per visit,
// more than keeping the A panel in L1 saves, so C stays in tiles over a
// whole K block:
//  - a "visit" computes one 32 x 32 C block over a K block (all of K up to
//    64 steps = 2048 bf16 / 4096 int8; longer K is split into equal blocks
//    whose partial sums wait in a per-thread buffer);
//  - the B panel of a chunk of 8 column blocks x one K block (<= 1 MB)
//    stays in L2 while every row block of the thread passes over it;
//  - successive visits of a row block walk K in alternating directions and
//    load B with the non-temporal hint, so each visit starts on the A steps
//    its predecessor left in L1;
//  - the next row block's A panel is prefetched into L2 meanwhile.
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

#include "runtime/cpu/amx_tiles.h"
#include "runtime/cpu/eltwise_kernels.h"
#include "runtime/cpu/eltwise_simd_avx512.h"
#include "runtime/cpu/gemm_epilogue_avx512.h"

namespace flick::cpu::amx {
namespace {

namespace v = flick::cpu::avx512;

constexpr int64_t kTileBytes = 1024;
constexpr int64_t kStepBytes = 2 * kTileBytes;  // two A (or B) tiles per K step
constexpr int kBlock = 32;                      // rows and columns of a C block
constexpr int64_t kBlockBytes = kBlock * kBlock * 4;
constexpr int64_t kCStride = kBlock * 4;  // bytes between C rows in the buffer

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
        v::epilogue_16<A, kBf16Out>(x, e, rs, row, p.n0 + c0, mask);
      }
    }
    p.next = end;
  }
  inline void finish(Pending& p) const {
    if (p.next < kBlock) rows(p, kBlock);
  }
};

// Software prefetch into L2 of what the next row block reads (its A panel,
// and its C partial sums when K is split), spread evenly over the current
// row block's K steps: without it the hardware streamer, which restarts at
// every 4 KB page, leaves the first visit of each row block waiting on L3
// (measured 2-4x slower than the others).
struct Prefetch {
  const char* p[2] = {nullptr, nullptr};
  const char* end[2] = {nullptr, nullptr};
  int per_step = 0;
  inline void step() {
    for (int i = 0; i < per_step; ++i) {
      const int r = p[0] < end[0] ? 0 : 1;
      if (p[r] >= end[r]) return;
      _mm_prefetch(p[r], _MM_HINT_T2);
      p[r] += 64;
    }
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

// C (32 x 32 at c) += A panel . B panel over `steps` K steps from a / b,
// walking K forward or backward (`backward`: a and b point at the last
// step). C starts from zero when `zero`, else from c. The pending block is
// converted a few rows per step meanwhile and finished before the store.
template <AmxType T, class Ep>
inline void visit(const char* a, const char* b, int64_t steps, bool backward, char* c, bool zero,
                  Pending& pending, Prefetch& pf, const Ep& ep) {
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
  const int64_t stride = backward ? -kStepBytes : kStepBytes;
  const int per_step = static_cast<int>((kBlock + steps - 1) / steps);
  for (int64_t s = 0; s < steps; ++s) {
    // B streams from L2 with the non-temporal hint, so it does not evict
    // the A steps the next visit (walking K the other way) starts on.
    _tile_loadd(4, a, kAmxRowBytes);
    _tile_stream_loadd(6, b, kAmxRowBytes);
    _tile_loadd(5, a + kTileBytes, kAmxRowBytes);
    _tile_stream_loadd(7, b + kTileBytes, kAmxRowBytes);
    dot_2x2<T>();
    a += stride;
    b += stride;
    if (pending.next < kBlock) ep.rows(pending, per_step);
    pf.step();
  }
  ep.finish(pending);
  _tile_stored(0, c, kCStride);
  _tile_stored(1, c + 64, kCStride);
  _tile_stored(2, c + 16 * kCStride, kCStride);
  _tile_stored(3, c + 16 * kCStride + 64, kCStride);
}

// Loop order: column chunk, K block, row block, column block. The B panel
// of a (chunk, K block) stays in L2 over all row blocks; a row block's A
// panel (32 rows x K block) comes from L2, prefetched during the previous
// row block. Successive visits of a row block walk K in alternating
// directions, so each starts on the A steps its predecessor left in L1.
template <AmxType T, class Ep>
void run_worker(const WorkerArgs& w, const Ep& ep) {
  configure_full_tiles();
  const AmxBlocking& bk = w.blocking;
  const int64_t steps = w.k_steps;
  const auto* a_base = static_cast<const char*>(w.a);
  const auto* b_base = static_cast<const char*>(w.b);
  auto* c_base = static_cast<char*>(w.c_scratch);
  const bool k_blocked = bk.kb_steps < steps;
  // C of (mb, nb): one buffer per column block of the chunk, and per row
  // block as well when K is split (the partial sums wait there while the
  // other row blocks run).
  auto c_of = [&](int64_t mb, int64_t j) {
    return c_base + ((k_blocked ? (mb - w.mb0) * bk.chunk_blocks : 0) + j) * kBlockBytes;
  };
  Pending pending;
  for (int64_t nc = w.nb0; nc < w.nb1; nc += bk.chunk_blocks) {
    const int64_t nce = std::min(w.nb1, nc + bk.chunk_blocks);
    for (int64_t kb = 0; kb < steps; kb += bk.kb_steps) {
      const int64_t kbe = std::min(steps, kb + bk.kb_steps), ksteps = kbe - kb;
      const bool last = kbe == steps;
      for (int64_t mb = w.mb0; mb < w.mb1; ++mb) {
        const char* a_panel = a_base + (mb * steps + kb) * kStepBytes;
        Prefetch pf;
        if (mb + 1 < w.mb1) {
          pf.p[0] = a_panel + steps * kStepBytes;
          pf.end[0] = pf.p[0] + ksteps * kStepBytes;
          if (kb > 0) {
            pf.p[1] = c_of(mb + 1, 0);
            pf.end[1] = pf.p[1] + (nce - nc) * kBlockBytes;
          }
          const int64_t lines = (pf.end[0] - pf.p[0] + (pf.end[1] - pf.p[1])) / 64;
          const int64_t visit_steps = ksteps * (nce - nc);
          pf.per_step = static_cast<int>((lines + visit_steps - 1) / visit_steps);
        }
        for (int64_t nb = nc; nb < nce; ++nb) {
          const bool backward = (nb - nc) % 2 == 1;
          const int64_t first = backward ? ksteps - 1 : 0;
          char* c = c_of(mb, nb - nc);
          visit<T>(a_panel + first * kStepBytes, b_base + (nb * steps + kb + first) * kStepBytes,
                   ksteps, backward, c, kb == 0, pending, pf, ep);
          if (last) pending = Pending{c, mb * kBlock, nb * kBlock, 0};
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
    case Activation::RoundGeluTanh: return run_act<T, Activation::RoundGeluTanh>(w);
    case Activation::Relu: return run_act<T, Activation::Relu>(w);
    case Activation::Sigmoid: return run_act<T, Activation::Sigmoid>(w);
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

// Pieces of the flash-attention kernels on the AMX tile unit, for
// translation units built with AMX flags (*_amx.cpp) only: the queue that
// interleaves tile products with the AVX-512 softmax, and vector helpers.
// Written for attention_int8_amx.cpp after attention_amx.cpp, whose own
// copies are the same code (tdpbf16ps only).
//
// Everything is in an anonymous namespace: each including file gets its own
// copy, as attention_kernels.h asks of shared helpers (no inline function
// whose AVX-512 / AMX body the linker could pick for other code).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace flick::cpu::amx {
namespace {

// ---- tiles ----

// All eight tiles 16 x 64 bytes (configure_full_tiles): C tiles 0-3, A tiles
// 4-5, B tiles 6-7. A 2 x 2 block of C tiles accumulated over `steps`
// k-steps:
//   C[2a + b] (+)= A[a] . B[b]   (a: A tile, b: B tile)
// with A[a] at a[a] + s * a_step and B[b] at b[b] + s * b_step on step s
// (byte strides; every tile is 1 KB contiguous, rows 64 bytes apart). A half
// chunk (a[1] == nullptr) has C[0] and C[1] only. load_c: accumulate onto C in
// memory; otherwise start from zero. int8: tdpbssd (s8 x s8 -> s32), else
// tdpbf16ps (bf16 x bf16 -> fp32).
struct Chunk {
  void* c[4];
  const char* a[2];
  const char* b[2];
  int64_t a_step, b_step;
  int64_t steps;
  bool load_c;
  bool int8 = false;
};

// The tile work of one pipeline iteration (at most kMaxChunks chunks),
// executed half a k-step at a time so that the softmax can be interleaved
// between the pieces.
template <int kMaxChunks>
class TileQueue {
 public:
  void clear() { n_ = cur_ = step_ = half_ = total_ = 0; }
  void push(const Chunk& c) {
    chunks_[n_++] = c;
    total_ += c.a[1] ? 2 * c.steps : c.steps;
  }
  void pace(int64_t ticks) {
    ticks_ = ticks;
    credit_ = 0;
  }
  void tick() {
    credit_ += total_;
    while (credit_ >= ticks_) {
      credit_ -= ticks_;
      half_step();
    }
  }
  void finish() {
    while (cur_ < n_) half_step();
  }

 private:
  void half_step() {
    const Chunk& k = chunks_[cur_];
    const bool full = k.a[1] != nullptr;
    const bool last = step_ + 1 == k.steps;
    if (half_ == 0) {
      if (step_ == 0) {
        if (k.load_c) {
          _tile_loadd(0, k.c[0], 64);
          _tile_loadd(1, k.c[1], 64);
          if (full) {
            _tile_loadd(2, k.c[2], 64);
            _tile_loadd(3, k.c[3], 64);
          }
        } else {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
        }
      }
      _tile_loadd(4, k.a[0] + step_ * k.a_step, 64);
      _tile_loadd(6, k.b[0] + step_ * k.b_step, 64);
      _tile_loadd(7, k.b[1] + step_ * k.b_step, 64);
      if (k.int8) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
      } else {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
      }
      if (last) {
        _tile_stored(0, k.c[0], 64);
        _tile_stored(1, k.c[1], 64);
      }
      if (full) {
        half_ = 1;
        return;
      }
    } else {
      _tile_loadd(5, k.a[1] + step_ * k.a_step, 64);
      if (k.int8) {
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
      } else {
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      if (last) {
        _tile_stored(2, k.c[2], 64);
        _tile_stored(3, k.c[3], 64);
      }
      half_ = 0;
    }
    if (!last) {
      ++step_;
      return;
    }
    step_ = 0;
    ++cur_;
  }

  Chunk chunks_[kMaxChunks];
  int n_ = 0, cur_ = 0;
  int64_t step_ = 0, total_ = 0, ticks_ = 1, credit_ = 0;
  int half_ = 0;
};

// ---- vector helpers ----

// Transposes a 16 x 16 matrix of 32-bit elements held as 16 row vectors.
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// 2^x for finite x: a degree-4 minimax polynomial of the fraction
// f = x - floor(x) in [0, 1) (vreduceps; relative error 2.7e-6), scaled by
// 2^floor(x) (vscalefps floors its exponent operand itself).
inline __m512 exp2_poly(__m512 x) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_set1_ps(1.3534167781472206e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.201146379113197e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.414427548646927e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.930038332939148e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000026226043701f));
  return _mm512_scalef_ps(p, x);
}

inline __mmask32 first_words(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : n <= 0 ? __mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

}  // namespace
}  // namespace flick::cpu::amx
